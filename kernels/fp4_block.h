// fp4_block.h: the NVFP4 format of the recipe nvfp4 (llm/fp8/README.md):
// E2M1 elements, one E4M3 scale per block of 16 elements along the GEMM's
// inner dimension K, one FP32 scale per tensor; the recipe's 16-point random
// Hadamard transform and the random bits of its stochastic rounding. One
// definition for the CPU backend's emulation (kernels/cpu/fp4_block.c), a
// future GPU kernel and the tests (tests/test_fp4_block.py checks it against
// ml_dtypes' float4_e2m1fn and float8_e4m3fn casts).
//
// Sources: NVIDIA, "Pretraining Large Language Models with NVFP4" (arXiv
// 2509.25149), and TransformerEngine's NVFP4BlockScaling recipe and its
// quantisation kernels (cast/nvfp4/core_nvfp4.cuh), which this follows:
//   tensor   S_enc = 448 * 6 / amax(tensor)      (1 when the amax is 0 or Inf;
//            FLT_MAX when the quotient overflows), S_dec = 1 / S_enc
//   block    s = e4m3_satfinite(min(amax(block) / 6 * S_enc, FLT_MAX))
//   element  q = e2m1(x * min(S_enc / s, FLT_MAX))    (satfinite: +-6 at most)
//   decode   x ~ e2m1(q) * e4m3(s) * S_dec
// So a block's largest element lands near 6 and the tensor scale keeps the
// block scales inside E4M3's range (up to 448). Amaxes ignore NaN (fmaxf).
// E2M1 has no NaN: a NaN element's code is zero (ml_dtypes casts NaN to a
// zero too, of the opposite sign), and its block's scale is E4M3 NaN (0x7F),
// so the block decodes to NaN and the GEMM's output shows it, as an E4M3 NaN
// code would (our choice, so that the guard still sees a NaN).
//
//   operand                  block   rounding                       cuBLASLt (compute capability 10.x)
//   activations X            1 x 16  nearest even                   VEC16_UE4M3, TN only
//   weights W                16x16   nearest even (one quantisation serves W and W^T)
//   output gradients dY      1 x 16  stochastic
//   weight-gradient GEMM     both operands (dY^T, X^T) Hadamard-transformed along the tokens first
#pragma once

#include "kernels/fp8_format.h"

#define NVFP4_E2M1_MAX 6.0f
#define NVFP4_BLOCK 16

// The format of one NVFP4 GEMM operand op(x) (M, K).
typedef struct {
    int br, bc;          // block rows x columns: 1 x 16 (activations, gradients) or 16 x 16 (weights)
    int hadamard;        // the 16-point random Hadamard transform along K first (weight-gradient GEMM)
    int stochastic;      // stochastic rounding with nvfp4_random_bits(rng_key, element index), else nearest even
    uint64_t rng_key;    // nvfp4_rng_key(...): which random bits this quantisation draws
} Nvfp4Format;

// ---- E2M1: sign, 2 exponent bits, 1 mantissa bit ---------------------------------------------------------
// Codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.

static inline FP8_HD float nvfp4_e2m1_decode(uint8_t c) {
    // The magnitudes of codes 0..7 in halves: 0 1 2 3 4 6 8 12.
    const uint32_t m = c & 7u;
    const float r = (float)(m < 5 ? m : 2 * m - 4 + (m == 7 ? 2 : 0)) * 0.5f;
    return (c & 8u) ? -r : r;
}

// The code of a magnitude a >= 0 (not NaN) rounded to nearest, ties to the
// even code (the one whose mantissa bit is 0), saturating at 6.
static inline FP8_HD uint8_t nvfp4_e2m1_rne_mag(float a) {
    if (a <= 0.25f) return 0;
    if (a < 0.75f) return 1;
    if (a <= 1.25f) return 2;
    if (a < 1.75f) return 3;
    if (a <= 2.5f) return 4;
    if (a < 3.5f) return 5;
    if (a <= 5.0f) return 6;
    return 7;
}

// Stochastic rounding of a magnitude a >= 0 (not NaN) with 32 random bits:
// between the grid points lo <= a < hi it rounds up when u < (a - lo) / (hi
// - lo), u = the top 24 bits x 2^-24. The difference and the quotient are
// exact (the spacing is a power of two), so P(up) is the fraction itself to
// 2^-24 and the rounding is unbiased. Above 6 it saturates.
static inline FP8_HD uint8_t nvfp4_e2m1_sr_mag(float a, uint32_t bits) {
    if (a >= NVFP4_E2M1_MAX) return 7;
    // The grid point at or below a, its code and the spacing above it.
    uint8_t c;
    float lo, step;
    if (a < 2.0f) {
        c = (uint8_t)(a * 2.0f);  // 0 .. 3: steps of 0.5
        lo = (float)c * 0.5f;
        step = 0.5f;
    } else if (a < 4.0f) {
        c = a < 3.0f ? 4 : 5;
        lo = a < 3.0f ? 2.0f : 3.0f;
        step = 1.0f;
    } else {
        c = 6;
        lo = 4.0f;
        step = 2.0f;
    }
    float frac = (a - lo) / step;
    float u = (float)(bits >> 8) * (1.0f / 16777216.0f);
    return (uint8_t)(u < frac ? c + 1 : c);
}

// x -> E2M1 code: nearest even or stochastic; Inf saturates to +-6; NaN gives
// 0 (the block's scale carries the NaN, see the top).
static inline FP8_HD uint8_t nvfp4_e2m1_encode(float x, int stochastic, uint32_t bits) {
    uint32_t u = fp8_f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 28) & 8u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0;
    float a = fp8_bits_f32(u & 0x7FFFFFFFu);
    return (uint8_t)(sign | (stochastic ? nvfp4_e2m1_sr_mag(a, bits) : nvfp4_e2m1_rne_mag(a)));
}

// ---- scales --------------------------------------------------------------------------------------------

// S_enc of a tensor from its amax (NaN ignored, so the amax is a number or Inf).
static inline FP8_HD float nvfp4_tensor_encode_scale(float amax) {
    float s = (FP8_E4M3_MAX * NVFP4_E2M1_MAX) / amax;
    s = s < FLT_MAX ? s : FLT_MAX;
    if (amax == 0.0f || s == 0.0f) return 1.0f;  // nothing to scale, or an infinite amax
    return s;
}

// The E4M3 code of a block's scale from the block amax and the tensor's S_enc.
static inline FP8_HD uint8_t nvfp4_block_scale(float block_amax, float s_enc) {
    float v = block_amax / NVFP4_E2M1_MAX * s_enc;
    v = v < FLT_MAX ? v : FLT_MAX;
    return fp8_encode(v, 1, 1);
}

// What a block's elements are multiplied by before the E2M1 cast.
static inline FP8_HD float nvfp4_element_multiplier(uint8_t scale_code, float s_enc) {
    float m = s_enc / fp8_decode(scale_code, 1);  // a zero scale gives Inf: FLT_MAX
    return m < FLT_MAX ? m : FLT_MAX;
}

// An element's value: e2m1 x e4m3 (exact in FP32) times the tensor's S_dec.
static inline FP8_HD float nvfp4_decode(uint8_t code, uint8_t scale_code, float s_dec) {
    return nvfp4_e2m1_decode(code) * fp8_decode(scale_code, 1) * s_dec;
}

// ---- random bits: a pure function of (seed, step, tensor, element index) -------------------------------

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective mix of 64 bits.
static inline FP8_HD uint64_t nvfp4_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The key of one quantisation: the run's seed, the training step, the
// backward pass within the step (micro-batches), and the tensor (layer,
// GEMM, and which copy: 0 row-wise, 1 column-wise).
static inline FP8_HD uint64_t nvfp4_rng_key(uint64_t seed, uint64_t step, uint64_t pass, uint64_t tensor) {
    return nvfp4_mix64(nvfp4_mix64(nvfp4_mix64(nvfp4_mix64(seed) ^ step) ^ pass) ^ tensor);
}

// The 32 random bits of element idx (i * K + k of op(x) (M, K)) under a key.
static inline FP8_HD uint32_t nvfp4_random_bits(uint64_t key, uint64_t idx) {
    return (uint32_t)(nvfp4_mix64(key ^ idx) >> 32);
}

// ---- the random Hadamard transform -----------------------------------------------------------------------
// y (16) = x (16) D H / 4: D the diagonal of a fixed random sign vector, H
// the 16x16 Sylvester Hadamard matrix (H[j][k] = (-1)^popcount(j & k)),
// H H^T = 16 I; so the transform is orthogonal and (A D H/4)(B D H/4)^T =
// A B^T: applied to both operands of a GEMM along K it cancels in the
// product, up to rounding, while spreading each block's outliers over its 16
// elements. The signs are fixed (the paper's recipe uses one random sign
// vector for the whole run): bit k of nvfp4_mix64(NVFP4_RHT_SEED).
#define NVFP4_RHT_SEED 0x4E564650345248ull  // "NVFP4RH"

// Entry (k, j) of D H / 4: +-0.25.
static inline FP8_HD float nvfp4_rht_entry(int k, int j) {
    uint32_t signs = (uint32_t)nvfp4_mix64(NVFP4_RHT_SEED);
    unsigned p = (unsigned)(k & j);  // 4 bits: their parity is (-1)^popcount
    p ^= p >> 2;
    p ^= p >> 1;
    int neg = (int)((p & 1u) ^ ((signs >> k) & 1u));
    return neg ? -0.25f : 0.25f;
}

// 16 elements in place: y[j] = sum_k x[k] entry(k, j), summed in k order in FP32.
static inline FP8_HD void nvfp4_rht16(float* x) {
    float y[NVFP4_BLOCK];
    for (int j = 0; j < NVFP4_BLOCK; j++) {
        float acc = 0.0f;
        for (int k = 0; k < NVFP4_BLOCK; k++) acc += x[k] * nvfp4_rht_entry(k, j);
        y[j] = acc;
    }
    for (int j = 0; j < NVFP4_BLOCK; j++) x[j] = y[j];
}
