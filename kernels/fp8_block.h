// fp8_block.h: the block-scaled formats of the recipes blockwise and mxfp8
// (llm/fp8/README.md): which blocks share a scale, how a block's scale comes
// from its amax, and the E8M0 scale format. One definition for the CPU
// backend's emulation (kernels/cpu/fp8_block.c), future GPU kernels and the
// tests (tests/test_fp8_block.py checks it against ml_dtypes).
//
// A block-scaled GEMM operand is an (M, K) matrix, K the GEMM's inner
// dimension, cut into blocks of br x bc elements (bc along K); every block
// has one scale, and each element is stored as E4M3(x * multiplier), the
// multiplier derived from the block's scale. Edge blocks of a matrix whose
// sides are not multiples of the block hold fewer elements.
//
//   recipe     operand          block     scale (what the GEMM multiplies by)
//   blockwise  activations, dY  1 x 128   FP32: amax / 448 as 1 / (448 / amax)   cuBLASLt VEC128_32F
//              weights          128x128   FP32, the same rule                    cuBLASLt BLK128x128_32F
//   mxfp8      everything       1 x 32    E8M0: 2^e, amax / 448 rounded UP       cuBLASLt VEC32_UE8M0
//
// The block amax ignores NaN (fmaxf, as TransformerEngine's kernels take it);
// a NaN element encodes as E4M3 NaN, an infinite one saturates to +-448.
#pragma once

#include "kernels/fp8_format.h"

typedef enum {
    FP8_BLOCK_FP32 = 0,  // E4M3 elements, an FP32 dequantisation multiplier per block (DeepSeek-V3)
    FP8_BLOCK_E8M0 = 1,  // E4M3 elements, a power of two per block, stored as E8M0 (OCP MX)
} Fp8BlockScale;

// The block format of one GEMM operand.
typedef struct {
    Fp8BlockScale scale;
    int br, bc;  // block rows, block columns (bc along the GEMM's inner dimension K)
} Fp8BlockFormat;

// Bytes of one stored scale.
static inline FP8_HD int fp8_block_scale_bytes(Fp8BlockScale s) { return s == FP8_BLOCK_FP32 ? 4 : 1; }

// The amax of a block: NaN ignored (fmaxf keeps the number), so a block with
// a NaN is scaled by its other elements.
static inline FP8_HD float fp8_block_amax_fold(float acc, float x) {
    float a = fabsf(x);
    return a > acc ? a : acc;  // false for NaN: acc kept
}

// ---- E8M0 (OCP MX scale; CUDA's __nv_fp8_e8m0, ml_dtypes' float8_e8m0fnu) -------------------------------
// 8 exponent bits, no sign, no mantissa: code c is 2^(c - 127) for c in 0..254, 0xFF is NaN.

static inline FP8_HD float fp8_e8m0_decode(uint8_t c) {
    if (c == 0xFF) return fp8_bits_f32(0x7FC00000u);
    if (c == 0) return fp8_bits_f32(0x00400000u);  // 2^-127, a float subnormal
    return fp8_bits_f32((uint32_t)c << 23);
}

// 1 / decode(c), exactly (2^(127 - c)): what the elements are multiplied by before rounding.
static inline FP8_HD float fp8_e8m0_inverse(uint8_t c) {
    if (c == 0xFF) return fp8_bits_f32(0x7FC00000u);
    if (c == 254) return fp8_bits_f32(0x00400000u);  // 2^-127
    return fp8_bits_f32((uint32_t)(254 - c) << 23);
}

// MXFP8's block scale from the block amax, as NVIDIA's recipe (arXiv
// 2506.08027, TransformerEngine's quantize_mxfp8) computes it: v = amax *
// (1/448) in FP32, rounded UP to a power of two (cvt.rp.satfinite.ue8m0),
// so that amax * multiplier never exceeds 448 and nothing saturates. The OCP
// spec's floor(log2 amax) - 8 rounds down instead, and clips the top of the
// block. Saturating: v above 2^127 (an infinite amax too) gives 2^127 (0xFE);
// v at or below 2^-127, zero included, gives 2^-127 (0x00); NaN gives 0xFF.
static inline FP8_HD uint8_t fp8_e8m0_from_amax(float amax) {
    float v = amax * (1.0f / FP8_E4M3_MAX);
    uint32_t u = fp8_f32_bits(v) & 0x7FFFFFFFu;
    if (u > 0x7F800000u) return 0xFF;
    if (u > 0x7F000000u) return 0xFE;     // above 2^127
    if (u <= 0x00400000u) return 0x00;    // at or below 2^-127
    if (u < 0x00800000u) return 0x01;     // a float subnormal above 2^-127 rounds up to 2^-126
    uint32_t e = u >> 23, mant = u & 0x7FFFFFu;
    return (uint8_t)(mant ? e + 1 : e);
}

// ---- one block -------------------------------------------------------------------------------------------
// The multiplier a block's elements are scaled by before the E4M3 cast, and
// the scale stored for the GEMM (FP32 bits, or the E8M0 code in the low
// byte), from the block amax.
static inline FP8_HD float fp8_block_scale_from_amax(Fp8BlockScale mode, float amax, uint32_t* stored) {
    if (mode == FP8_BLOCK_E8M0) {
        uint8_t c = fp8_e8m0_from_amax(amax);
        *stored = c;
        return fp8_e8m0_inverse(c);
    }
    // DeepSeek-V3's FP32 scales: the per-tensor current-scaling rule on one
    // block (448 / amax; an all-zero block gets 1), dequantised by 1 / that.
    float s = fp8_scale_from_amax(amax, FP8_E4M3_MAX);
    *stored = fp8_f32_bits(1.0f / s);
    return s;
}

// The dequantisation multiplier of a stored scale.
static inline FP8_HD float fp8_block_scale_value(Fp8BlockScale mode, uint32_t stored) {
    return mode == FP8_BLOCK_E8M0 ? fp8_e8m0_decode((uint8_t)stored) : fp8_bits_f32(stored);
}

// ---- on the GPU (kernels/cuda/fp8_block.cu, matmul.cu) ------------------------------------------------
// Bytes of an (M, K) operand's scales in the layout cuBLASLt reads for its
// format (the layouts and their sources: kernels/cuda/fp8_block.cu): 1x32
// E8M0 (VEC32_UE8M0) in tiles of 128 rows x 4 block columns, both padded;
// 1x128 FP32 (VEC128_32F) block columns of roundup(M, 4) floats; 128x128
// FP32 (BLK128x128_32F) block rows of roundup(block columns, 4) floats.
static inline FP8_HD size_t fp8_block_gpu_scale_bytes(int M, int K, Fp8BlockFormat f) {
    size_t kb = ((size_t)K + f.bc - 1) / f.bc, kb4 = (kb + 3) / 4 * 4;
    if (f.scale == FP8_BLOCK_E8M0) return ((size_t)M + 127) / 128 * 128 * kb4;
    if (f.br == 1) return kb * (((size_t)M + 3) / 4 * 4) * 4;
    return ((size_t)M + f.br - 1) / f.br * kb4 * 4;
}

// The CUDA block GEMM's buffer for one operand: its codes and its scales, each 256-byte aligned.
static inline FP8_HD size_t fp8_block_gpu_operand_bytes(int M, int K, Fp8BlockFormat f) {
    return ((size_t)M * K + 255) / 256 * 256 + (fp8_block_gpu_scale_bytes(M, K, f) + 255) / 256 * 256;
}
