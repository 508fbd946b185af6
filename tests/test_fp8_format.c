// test_fp8_format.c: the FP8 formats and scale rules of kernels/fp8_format.h,
// BF16 rounding (kernels/bf16.h): golden vectors, every code, the rounding
// rules, and CUDA's own host conversion (cuda_fp8.h) on a large sample of
// inputs concentrated where rounding and saturation decide.
//
// `test_fp8_format --exhaustive` compares all 2^32 float inputs in the four
// modes against CUDA instead (about 3 minutes on 2 cores; not in make test).
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/fp8_format.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

#ifdef HAVE_CUDA_FP8_H
#include <cuda_fp8.h>
#endif

static float bits(uint32_t u) { return fp8_bits_f32(u); }

// The value of code c from its fields, in double (an independent decoder).
static double field_value(uint8_t c, int e4m3) {
    int mb = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    int sign = c >> 7, e = (c >> mb) & (e4m3 ? 15 : 31), m = c & ((1 << mb) - 1);
    double v = e == 0 ? ldexp((double)m, 1 - bias - mb) : ldexp(1.0 + (double)m / (1 << mb), e - bias);
    return sign ? -v : v;
}

static int is_nan_code(uint8_t c, int e4m3) {
    return e4m3 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C;
}

static void every_code_decodes_and_reencodes(void) {
    for (int f = 0; f < 2; f++) {
        int e4m3 = f == 0;
        int finite = 0;
        for (int c = 0; c < 256; c++) {
            float v = fp8_decode((uint8_t)c, e4m3);
            if (is_nan_code((uint8_t)c, e4m3)) {
                CHECK(isnan(v), "%s code 0x%02x decodes to %g, not NaN", e4m3 ? "E4M3" : "E5M2", c, v);
                CHECK(fp8_encode(v, e4m3, 1) == 0x7F, "NaN re-encodes to 0x%02x", fp8_encode(v, e4m3, 1));
                continue;
            }
            if (!e4m3 && (c & 0x7F) == 0x7C) {
                CHECK(isinf(v) && (v < 0) == (c >> 7), "E5M2 code 0x%02x is %g, not an infinity", c, v);
                CHECK(fp8_encode(v, 0, 0) == c, "E5M2 infinity 0x%02x re-encodes (no saturation) to 0x%02x", c,
                      fp8_encode(v, 0, 0));
                CHECK(fp8_encode(v, 0, 1) == ((c & 0x80) | 0x7B), "E5M2 infinity saturates to 0x%02x",
                      fp8_encode(v, 0, 1));
                continue;
            }
            finite++;
            double want = field_value((uint8_t)c, e4m3);
            CHECK((double)v == want && !!signbit(v) == (c >> 7 != 0), "%s code 0x%02x decodes to %.9g, want %.9g",
                  e4m3 ? "E4M3" : "E5M2", c, v, want);
            CHECK(fp8_encode(v, e4m3, 1) == c && fp8_encode(v, e4m3, 0) == c, "%s code 0x%02x re-encodes to 0x%02x",
                  e4m3 ? "E4M3" : "E5M2", c, fp8_encode(v, e4m3, 1));
#ifdef HAVE_CUDA_FP8_H
            __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, e4m3 ? __NV_E4M3 : __NV_E5M2);
            // half -> double by its fields, to compare with CUDA's decoder.
            int he = (h.x >> 10) & 31, hm = h.x & 1023;
            double hv = he == 0 ? ldexp(hm, -24) : ldexp(1.0 + hm / 1024.0, he - 15);
            if (h.x >> 15) hv = -hv;
            CHECK(hv == want, "%s code 0x%02x: CUDA decodes %.9g, we %.9g", e4m3 ? "E4M3" : "E5M2", c, hv, want);
#endif
        }
        CHECK(finite == (e4m3 ? 254 : 248), "%d finite codes", finite);
    }
    CHECK(fp8_decode(0x7E, 1) == 448.0f && fp8_decode(0x7B, 0) == 57344.0f, "largest values");
    CHECK(fp8_decode(0x08, 1) == 0x1p-6f && fp8_decode(0x01, 1) == 0x1p-9f, "E4M3 smallest normal, subnormal");
    CHECK(fp8_decode(0x04, 0) == 0x1p-14f && fp8_decode(0x01, 0) == 0x1p-16f, "E5M2 smallest normal, subnormal");
}

// The project notes' golden vectors (checked there against CUDA's host path).
static void golden_vectors(void) {
    struct { float x; int e4m3, sat; uint8_t want; } g[] = {
        {1.0625f, 1, 1, 0x38}, {1.1875f, 1, 1, 0x3A}, {248.0f, 1, 1, 0x78}, {240.0f, 1, 1, 0x77},
        {464.0f, 1, 1, 0x7E}, {464.001f, 1, 0, 0x7F}, {464.001f, 1, 1, 0x7E}, {480.0f, 1, 0, 0x7F},
        {480.0f, 1, 1, 0x7E}, {0x1p-10f, 1, 1, 0x00}, {0x1p-9f, 1, 1, 0x01}, {480.0f, 0, 1, 0x60},
        {61439.0f, 0, 1, 0x7B}, {61440.0f, 0, 0, 0x7C}, {61440.0f, 0, 1, 0x7B}, {0x1p-17f, 0, 1, 0x00},
        {0.75f * 0x1p-16f, 0, 1, 0x01}, {-0.0f, 1, 1, 0x80}, {-0.0f, 0, 1, 0x80},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        uint8_t got = fp8_encode(g[i].x, g[i].e4m3, g[i].sat);
        CHECK(got == g[i].want, "%s %s(%.9g) = 0x%02x, want 0x%02x", g[i].e4m3 ? "E4M3" : "E5M2",
              g[i].sat ? "satfinite" : "nosat", g[i].x, got, g[i].want);
    }
}

// Every midpoint between neighbouring finite values rounds to the even code;
// one float ulp either side rounds to the nearer neighbour.
static void midpoints_round_to_even(void) {
    for (int f = 0; f < 2; f++) {
        int e4m3 = f == 0;
        uint8_t top = e4m3 ? 0x7E : 0x7B;
        for (uint8_t c = 0; c < top; c++) {
            float lo = fp8_decode(c, e4m3), hi = fp8_decode((uint8_t)(c + 1), e4m3);
            float mid = (float)(((double)lo + hi) / 2);  // exact in float
            uint8_t even = (c & 1) ? (uint8_t)(c + 1) : c;
            CHECK(fp8_encode(mid, e4m3, 1) == even, "%s midpoint %.9g of 0x%02x/0x%02x -> 0x%02x",
                  e4m3 ? "E4M3" : "E5M2", mid, c, c + 1, fp8_encode(mid, e4m3, 1));
            CHECK(fp8_encode(nextafterf(mid, 0), e4m3, 1) == c && fp8_encode(nextafterf(mid, INFINITY), e4m3, 1) == c + 1,
                  "%s just around midpoint %.9g", e4m3 ? "E4M3" : "E5M2", mid);
            CHECK(fp8_encode(-mid, e4m3, 1) == (0x80 | even), "%s negative midpoint", e4m3 ? "E4M3" : "E5M2");
        }
    }
}

static void saturation_nan_and_zero(void) {
    float big[] = {449.0f, 463.9f, 464.0f, 1e6f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        CHECK(fp8_encode(big[i], 1, 1) == 0x7E && fp8_encode(-big[i], 1, 1) == 0xFE, "E4M3 saturates %g", big[i]);
        CHECK(fp8_encode(big[i] * 200, 0, 1) == 0x7B && fp8_encode(-big[i] * 200, 0, 1) == 0xFB, "E5M2 saturates %g",
              big[i] * 200);
    }
    CHECK(fp8_encode(INFINITY, 1, 0) == 0x7F && fp8_encode(-INFINITY, 1, 0) == 0xFF, "E4M3 nosat inf -> NaN");
    CHECK(fp8_encode(INFINITY, 0, 0) == 0x7C && fp8_encode(-INFINITY, 0, 0) == 0xFC, "E5M2 nosat inf -> inf");
    CHECK(fp8_encode(1e5f, 0, 0) == 0x7C, "E5M2 nosat overflow -> inf");
    uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
        for (int f = 0; f < 2; f++)
            for (int sat = 0; sat < 2; sat++)
                CHECK(fp8_encode(bits(nans[i]), f, sat) == 0x7F, "NaN 0x%08x -> 0x%02x", nans[i],
                      fp8_encode(bits(nans[i]), f, sat));
    // Float subnormals and values up to half the smallest FP8 subnormal become
    // zero with their sign.
    float tiny[] = {bits(1), bits(0x007FFFFFu), 0x1p-100f, 0x1p-10f};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
        CHECK(fp8_encode(tiny[i], 1, 1) == 0x00 && fp8_encode(-tiny[i], 1, 1) == 0x80, "E4M3 %g -> zero", tiny[i]);
        CHECK(fp8_encode(tiny[i] / 128, 0, 1) == 0x00 && fp8_encode(-tiny[i] / 128, 0, 1) == 0x80, "E5M2 %g -> zero",
              tiny[i] / 128);
    }
    CHECK(fp8_encode(nextafterf(0x1p-10f, 1), 1, 1) == 0x01, "just above half the smallest subnormal");
    CHECK(fp8_encode(3 * 0x1p-10f, 1, 1) == 0x02, "1.5 subnormal steps round to even (2)");
    CHECK(fp8_encode(nextafterf(0x1p-6f, 0), 1, 1) == 0x08, "just below the smallest normal rounds up into it");
}

#ifdef HAVE_CUDA_FP8_H
// Inputs where the answer is decided: every float within a few ulps of every
// FP8 value and midpoint, the overflow thresholds, random magnitudes in and
// around the range, random bit patterns. Returns mismatches.
static long compare_with_cuda(uint32_t u, long* count) {
    float x = bits(u);
    long bad = 0;
    for (int f = 0; f < 2; f++)
        for (int sat = 0; sat < 2; sat++) {
            uint8_t want = __nv_cvt_float_to_fp8(x, sat ? __NV_SATFINITE : __NV_NOSAT, f ? __NV_E4M3 : __NV_E5M2);
            if (fp8_encode(x, f, sat) != want) bad++;
        }
    (*count)++;
    return bad;
}

static void matches_cuda_host_conversion(void) {
    long bad = 0, count = 0;
    uint32_t first_bad = 0;
    for (int f = 0; f < 2; f++) {
        int e4m3 = f == 0;
        for (int c = 0; c < 128; c++) {
            float v = fp8_decode((uint8_t)c, e4m3), w = fp8_decode((uint8_t)(c + 1), e4m3);
            if (!isfinite(v)) continue;
            float pts[2] = {v, isfinite(w) ? (float)(((double)v + w) / 2) : v * 1.0625f};
            for (int p = 0; p < 2; p++)
                for (int d = -8; d <= 8; d++) {
                    uint32_t u = fp8_f32_bits(pts[p]) + (uint32_t)d;
                    for (int s = 0; s < 2; s++) {
                        long b = compare_with_cuda(u | (s ? 0x80000000u : 0), &count);
                        if (b && !bad) first_bad = u;
                        bad += b;
                    }
                }
        }
    }
    uint64_t key = rng_key(8, 8, 8);
    for (uint64_t i = 0; i < (1u << 22); i++) {
        uint64_t r = rng_u64(key, i);
        uint32_t u = (uint32_t)r;
        if (i & 1) {  // a magnitude between 2^-20 and 2^18, either sign
            int e = (int)((r >> 32) % 39) - 20;
            u = (u & 0x807FFFFFu) | ((uint32_t)(e + 127) << 23);
        }
        long b = compare_with_cuda(u, &count);
        if (b && !bad) first_bad = u;
        bad += b;
    }
    printf("# compared %ld inputs x 4 modes with __nv_cvt_float_to_fp8: %ld mismatches\n", count, bad);
    CHECK(bad == 0, "%ld mismatches with CUDA's conversion, first at input 0x%08x", bad, first_bad);
    CHECK(count > 4000000, "only %ld inputs compared", count);
}

static int exhaustive(void) {
    long bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (int64_t hi = 0; hi < 65536; hi++) {
        long count = 0;
        for (uint32_t lo = 0; lo < 65536; lo++) bad += compare_with_cuda(((uint32_t)hi << 16) | lo, &count);
    }
    printf("exhaustive: 2^32 inputs x 4 modes, %ld mismatches with __nv_cvt_float_to_fp8\n", bad);
    return bad != 0;
}
#endif

// BF16 round to nearest even (kernels/bf16.h), the project notes' vectors.
static void bf16_round_to_nearest_even(void) {
    CHECK(f32_to_bf16(bits(0x3F808000u)) == 0x3F80, "tie stays even");
    CHECK(f32_to_bf16(bits(0x3F818000u)) == 0x3F82, "tie rounds up to even");
    CHECK(f32_to_bf16(bits(0x3F808001u)) == 0x3F81, "above the tie rounds up");
    CHECK(f32_to_bf16(bits(0x3F807FFFu)) == 0x3F80, "below the tie rounds down");
    CHECK(f32_to_bf16(3.4e38f) == 0x7F80, "overflows to infinity");
    CHECK(f32_to_bf16(-INFINITY) == 0xFF80, "-inf");
    uint16_t n = f32_to_bf16(bits(0x7F800001u));
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F), "NaN stays NaN (0x%04x)", n);
}

// Stochastic rounding: always a neighbour, deterministic in its random bits,
// unbiased over many draws.
static void bf16_stochastic_rounding_is_unbiased(void) {
    float xs[] = {1.0f + 0x1p-9f, 1.0f + 3 * 0x1p-10f, -3.14159f, 1e-3f, 0.0f, 12345.678f};
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        float x = xs[k];
        uint32_t u = fp8_f32_bits(x) & 0xFFFF0000u;
        float lo = bits(u), hi = bits(u + 0x10000u);  // the neighbours (truncation and one ulp away from zero)
        const int draws = 200000;
        uint64_t key = rng_key(99, k, 0);
        double sum = 0;
        int bad = 0;
        for (int i = 0; i < draws; i++) {
            float r = bf16_to_f32(f32_to_bf16_stochastic(x, (uint32_t)rng_u64(key, (uint64_t)i)));
            if (r != lo && r != hi) bad++;
            sum += r;
        }
        CHECK(bad == 0, "%g rounded to something other than %g or %g", x, lo, hi);
        double p = (x - lo) / (double)(hi - lo), mean = sum / draws;
        double sigma = fabs((double)hi - lo) * sqrt(p * (1 - p) / draws);
        CHECK(fabs(mean - x) <= 4 * sigma + 1e-12 * fabs(x), "%g: mean of %d draws %.9g (sigma %.3g)", x, draws, mean,
              sigma);
        CHECK(f32_to_bf16_stochastic(x, 1234) == f32_to_bf16_stochastic(x, 1234), "deterministic");
    }
    CHECK(f32_to_bf16_stochastic(1.0f, 0xFFFF) == 0x3F80, "an exact BF16 value never moves");
    CHECK(f32_to_bf16_stochastic(INFINITY, 0xFFFF) == 0x7F80, "inf stays inf");
}

// TransformerEngine's scale rules (current: compute_scale_from_amax; delayed:
// the window max with the previous scale kept), against hand-computed values.
static void scale_rules(void) {
    CHECK(fp8_scale_from_amax(2.0f, FP8_E4M3_MAX) == 224.0f, "448 / 2");
    CHECK(fp8_scale_from_amax(3.0f, FP8_E4M3_MAX) == 448.0f / 3.0f, "IEEE division");
    CHECK(fp8_scale_from_amax(0.0f, FP8_E4M3_MAX) == 1.0f, "zero amax -> 1");
    CHECK(fp8_scale_from_amax(INFINITY, FP8_E5M2_MAX) == 1.0f, "inf amax -> 1");
    CHECK(fp8_scale_from_amax(NAN, FP8_E5M2_MAX) == 1.0f, "NaN amax -> 1");
    CHECK(fp8_scale_from_amax(1e-38f, FP8_E5M2_MAX) == FLT_MAX, "a tiny amax gives FLT_MAX, not inf");
    float s = 5.0f;
    CHECK(fp8_delayed_scale(2.0f, FP8_E4M3_MAX, 0, &s) && s == 224.0f, "delayed, margin 0");
    CHECK(fp8_delayed_scale(2.0f, FP8_E4M3_MAX, 2, &s) && s == 56.0f, "delayed, margin 2: 448/4/2");
    s = 5.0f;
    CHECK(!fp8_delayed_scale(0.0f, FP8_E4M3_MAX, 0, &s) && s == 5.0f, "zero window keeps the scale");
    CHECK(!fp8_delayed_scale(INFINITY, FP8_E4M3_MAX, 0, &s) && s == 5.0f, "inf window keeps the scale");
    CHECK(!fp8_delayed_scale(NAN, FP8_E4M3_MAX, 0, &s) && s == 5.0f, "NaN window keeps the scale");
    CHECK(fp8_delayed_scale(1e-38f, FP8_E5M2_MAX, 0, &s) && s == FLT_MAX, "tiny window: FLT_MAX");
    // Quantisation multiplies in FP32 first: 0.1 * 3 is 0.3 in float, then rounded.
    CHECK(fp8_quantize_value(0.1f, 3.0f, 1) == fp8_encode(0.1f * 3.0f, 1, 1), "x * scale in FP32, then encoded");
    CHECK(fp8_quantize_value(1000.0f, 1.0f, 1) == 0x7E && fp8_quantize_value(-1e9f, 1.0f, 0) == 0xFB,
          "quantisation saturates");
    CHECK(fp8_abs_bits(-2.0f) > fp8_abs_bits(1.5f) && fp8_abs_bits(NAN) > fp8_abs_bits(INFINITY),
          "magnitude bits order like magnitudes, NaN above all");
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--exhaustive")) {
#ifdef HAVE_CUDA_FP8_H
        return exhaustive();
#else
        printf("--exhaustive needs cuda_fp8.h (build with the CUDA toolkit present)\n");
        return 1;
#endif
    }
    RUN(every_code_decodes_and_reencodes);
    RUN(golden_vectors);
    RUN(midpoints_round_to_even);
    RUN(saturation_nan_and_zero);
#ifdef HAVE_CUDA_FP8_H
    RUN(matches_cuda_host_conversion);
#else
    printf("# cuda_fp8.h not found: the comparison with CUDA's conversion is not built\n");
#endif
    RUN(bf16_round_to_nearest_even);
    RUN(bf16_stochastic_rounding_is_unbiased);
    RUN(scale_rules);
    return TESTS_DONE();
}
