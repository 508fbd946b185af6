// fp8_format.h: the two FP8 formats (OCP E4M3 and E5M2, as CUDA's
// __nv_fp8_e4m3 / __nv_fp8_e5m2), their conversions, and the per-tensor
// scale rules of FP8 training. One definition for every place that needs
// them: the CPU backend's emulation, the CUDA kernels (host and device), the
// scaling state (llm/fp8/fp8.c) and the tests.
//
//              E4M3 (finite + NaN)      E5M2 (IEEE-like)
//   layout     sign.4 exp.3 mantissa    sign.5 exp.2 mantissa
//   bias       7                        15
//   max        448   (0x7E)             57344 (0x7B)
//   min normal 2^-6  (0x08)             2^-14 (0x04)
//   min sub    2^-9  (0x01)             2^-16 (0x01)
//   inf        none                     0x7C / 0xFC
//   NaN        0x7F / 0xFF              0x7D..0x7F / 0xFD..0xFF
//
// float -> FP8 is what CUDA's __nv_cvt_float_to_fp8 does (and the device's
// cvt.rn.satfinite): round to nearest, ties to even, on the format's grid
// (subnormals share the smallest exponent's step); a NaN becomes 0x7F
// whatever its sign; values beyond the largest finite one (E4M3: above 464,
// the midpoint to the next would-be value 480; E5M2: from 61440, whose tie
// rounds to even, i.e. up) saturate to +-max, infinities included, or with
// saturation off become NaN (E4M3) / inf (E5M2). -0 stays -0.
// tests/test_fp8_format.c checks this against the CUDA headers.
#pragma once

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

// Callable from host code and from CUDA kernels (nvcc); in the CPU execution
// harness (CUDA_SIM) kernels are host code already.
#if defined(__CUDACC__)
#define FP8_HD __host__ __device__
#else
#define FP8_HD
#endif

#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f

// The parameters of one format. is_e4m3 selects E4M3, else E5M2.
typedef struct {
    int mbits;          // mantissa bits
    int bias;           // exponent bias
    int emin;           // exponent of the smallest normal
    uint32_t max_code;  // largest finite magnitude's code
} Fp8Spec;

static inline FP8_HD Fp8Spec fp8_spec(int is_e4m3) {
    Fp8Spec s;
    s.mbits = is_e4m3 ? 3 : 2;
    s.bias = is_e4m3 ? 7 : 15;
    s.emin = 1 - s.bias;
    s.max_code = is_e4m3 ? 0x7Eu : 0x7Bu;
    return s;
}

static inline FP8_HD float fp8_max_value(int is_e4m3) { return is_e4m3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }

static inline FP8_HD uint32_t fp8_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline FP8_HD float fp8_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// float -> FP8 code (see the top of the file). `saturate` 1 is __NV_SATFINITE.
static inline FP8_HD uint8_t fp8_encode(float x, int is_e4m3, int saturate) {
    Fp8Spec s = fp8_spec(is_e4m3);
    uint32_t u = fp8_f32_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7F;  // NaN
    uint32_t overflow = saturate ? (sign | s.max_code) : (sign | (is_e4m3 ? 0x7Fu : 0x7Cu));
    int e = (int)(a >> 23) - 127;  // float subnormals: -127, far below FP8's range
    uint32_t code;
    if (e < s.emin) {
        // Below FP8's normal range: the value in units of the smallest
        // subnormal step, 2^(emin - mbits), rounded to nearest even. A carry
        // into 2^mbits lands exactly on the smallest normal's code.
        int shift = 23 - s.mbits + (s.emin - e);
        if (shift > 25) shift = 25;  // < half the smallest subnormal: rounds to 0
        uint32_t m = (a & 0x7FFFFFu) | (e > -127 ? 0x800000u : 0u);
        code = (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
    } else {
        // Round the float's mantissa to mbits (ties to even); a carry moves
        // into the exponent, as it must.
        if (e > s.bias + 1) return (uint8_t)overflow;  // far above the range (and inf)
        int shift = 23 - s.mbits;
        uint32_t r = a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u);
        int er = (int)(r >> 23) - 127;
        code = ((uint32_t)(er + s.bias) << s.mbits) | ((r >> shift) & ((1u << s.mbits) - 1u));
    }
    if (code > s.max_code) return (uint8_t)overflow;
    return (uint8_t)(sign | code);
}

// FP8 code -> float (exact).
static inline FP8_HD float fp8_decode(uint8_t c, int is_e4m3) {
    Fp8Spec s = fp8_spec(is_e4m3);
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    uint32_t mag = c & 0x7Fu;
    uint32_t exp_field = mag >> s.mbits, mant = mag & ((1u << s.mbits) - 1u);
    if (is_e4m3 ? mag == 0x7Fu : exp_field == 31u) {
        if (!is_e4m3 && mant == 0) return fp8_bits_f32(sign | 0x7F800000u);  // E5M2 inf
        return fp8_bits_f32(sign | 0x7FC00000u);                               // NaN
    }
    float v;
    if (exp_field == 0) {
        v = (float)mant * fp8_bits_f32((uint32_t)(127 + s.emin - s.mbits) << 23);  // mant * 2^(emin - mbits)
    } else {
        v = fp8_bits_f32(((uint32_t)((int)exp_field - s.bias + 127) << 23) | (mant << (23 - s.mbits)));
    }
    return fp8_bits_f32(fp8_f32_bits(v) | sign);
}

// The quantised value as the GEMM sees it: the code of x * scale, the product
// rounded to FP32 first (no fused multiply), as the device computes it.
static inline FP8_HD uint8_t fp8_quantize_value(float x, float scale, int is_e4m3) {
    return fp8_encode(x * scale, is_e4m3, 1);
}

// ---- scales ---------------------------------------------------------------------------------------------
// A tensor is quantised as q = fp8(x * scale) and dequantised as q * scale_inv,
// scale_inv = 1 / scale (what cuBLASLt's A/B scale pointers take).

// Current scaling (TransformerEngine's Float8CurrentScaling, without epsilon):
// scale = max_value / amax with IEEE division; an amax that is 0, infinite or
// NaN gives 1 (nothing to scale, or nothing sensible); a scale that overflows
// (amax below max_value / FLT_MAX) becomes FLT_MAX.
static inline FP8_HD float fp8_scale_from_amax(float amax, float max_value) {
    if (!(amax > 0.0f) || amax > FLT_MAX) return 1.0f;
    float s = max_value / amax;
    return s > FLT_MAX ? FLT_MAX : s;
}

// Delayed scaling, one tensor after an applied optimizer step: the window is
// the max of the last `len` step amaxes (TransformerEngine's "max" algorithm;
// a non-finite amax has been recorded as 0, "no information"); with a window
// > 0, scale = max_value * 2^-margin / window (FLT_MAX if that overflows),
// otherwise the scale is kept. Returns whether it changed *scale.
static inline FP8_HD int fp8_delayed_scale(float window, float max_value, int margin, float* scale) {
    if (!(window > 0.0f) || window > FLT_MAX) return 0;
    float s = ldexpf(max_value, -margin) / window;
    *scale = s > FLT_MAX ? FLT_MAX : s;
    return 1;
}

// |x| for an amax, as bits that order like the magnitudes (a NaN orders above
// every number, so a max over these bits keeps it): what the kernels' integer
// atomic max compares.
static inline FP8_HD uint32_t fp8_abs_bits(float x) { return fp8_f32_bits(x) & 0x7FFFFFFFu; }
