// test_adamw_bf16.c: AdamW with BF16 moments (--adam-dtype bf16) on the CPU
// backend, the reference the CUDA kernel is compared with in the emulator.
// - Each step against a float64 evaluation of the same formula from the same
//   stored state, rounding the new moments with the same random bits
//   (rng_u64(seed, index) bits 0-15 for m, 16-31 for v): every stored moment
//   is the reference's choice except where the float64 value sits within
//   FP32 rounding of a decision boundary (counted, and required to be rare).
// - The rounding is unbiased: one value stored over many elements averages
//   to it (where round-to-nearest is off by many standard errors), and v with
//   beta2 = 0.999 follows its float64 recurrence over many steps, where
//   round-to-nearest stalls.
// - The bits depend on (seed, element index) only: a range split differently
//   into calls, or updated through adamw_tensors, stores the same bits;
//   another seed rounds some elements differently.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/ops.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

static Backend* be;

#define N 5003  // odd, more than two of the CPU's 2048-element blocks

static AdamWParams hyper(int step, uint64_t seed, uint64_t index_base) {
    AdamWParams p;
    memset(&p, 0, sizeof p);
    p.lr = 3e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.grad_scale = 0.8f;
    p.step = step;
    p.seed = seed;
    p.index_base = index_base;
    p.moment_dtype = DTYPE_BF16;
    return p;
}

// Lower BF16 neighbour (toward zero) of x and the distance to it in units of
// the BF16 spacing there, from x's double value (x finite, not a BF16 value's
// exact FP32 twin beyond double's reach).
static double bf16_floor_frac(double x, double* lo) {
    float xf = (float)x;  // within FP32 rounding of x; its top half names the BF16 interval
    uint32_t u;
    memcpy(&u, &xf, 4);
    u &= 0xffff0000u;
    float l;
    memcpy(&l, &u, 4);
    uint32_t u2 = u + 0x10000u;
    float h;
    memcpy(&h, &u2, 4);
    *lo = l;
    return (x - (double)l) / ((double)h - (double)l);
}

// The reference's stochastic rounding of x (double) with 16 random bits r:
// up when r >= 65536 * (1 - frac). *ambiguous: x is within err (the FP32
// computation's error bound) of that boundary or of the interval's ends,
// where FP32 arithmetic may legitimately decide the other way.
static float ref_round(double x, uint32_t r, double err, int* ambiguous) {
    double lo;
    double frac = bf16_floor_frac(x, &lo);
    double spacing = (x - lo) / frac;
    if (!(spacing > 0)) spacing = fabs(x) * 0x1p-8;  // frac 0: x is a BF16 value
    double margin = err / spacing * 65536.0 + 0.5;  // in units of r
    double t = frac * 65536.0 + (double)r - 65536.0;   // >= 0: round up
    *ambiguous = fabs(t) < margin || frac * 65536.0 < margin || (1.0 - frac) * 65536.0 < margin;
    uint32_t lu;
    float lf = (float)lo;
    memcpy(&lu, &lf, 4);
    if (t >= 0) lu += 0x10000u;
    float out;
    memcpy(&out, &lu, 4);
    return out;
}

static uint16_t* bf16_array(const float* x, size_t n) {
    uint16_t* h = (uint16_t*)xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(x[i]);
    return h;
}

// Three steps from random state; each step compared with float64 from the state it started from.
static void test_step_matches_float64(void) {
    uint64_t key = rng_key(28, 1, 0);
    float* w = (float*)xmalloc(N * sizeof(float));
    float* g = (float*)xmalloc(N * sizeof(float));
    float* mf = (float*)xmalloc(N * sizeof(float));
    float* vf = (float*)xmalloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) {
        w[i] = 0.5f * rng_normal(key, 4 * i);
        mf[i] = 0.01f * rng_normal(key, 4 * i + 1);
        float s = 0.01f * rng_normal(key, 4 * i + 2);
        vf[i] = s * s;
    }
    uint16_t* m = bf16_array(mf, N);
    uint16_t* v = bf16_array(vf, N);
    const uint64_t seed = 0xC0FFEEull, base = 777;
    long ambiguous = 0, wrong_m = 0, wrong_v = 0, bad_w = 0, rounded_up = 0;
    double worst_w = 0;
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < N; i++) g[i] = 0.02f * rng_normal(key, 4 * i + 3 + 1000003 * (uint64_t)step);
        uint16_t* m0 = (uint16_t*)xmalloc(N * 2);
        uint16_t* v0 = (uint16_t*)xmalloc(N * 2);
        float* w0 = (float*)xmalloc(N * sizeof(float));
        memcpy(m0, m, N * 2);
        memcpy(v0, v, N * 2);
        memcpy(w0, w, N * sizeof(float));
        AdamWParams p = hyper(step, seed + (uint64_t)step, base);
        be->adamw(be, w, NULL, g, m, v, N, &p);
        double b1 = p.beta1, b2 = p.beta2, lr = p.lr;
        double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
        for (size_t i = 0; i < N; i++) {
            double gi = (double)g[i] * (double)p.grad_scale;
            double mi = bf16_to_f32(m0[i]) + (1.0 - b1) * (gi - bf16_to_f32(m0[i]));
            double vi = b2 * bf16_to_f32(v0[i]) + (1.0 - b2) * gi * gi;
            double wi = w0[i] * (1.0 - lr * p.weight_decay) - (lr / bc1) * mi / (sqrt(vi) / sqrt(bc2) + p.eps);
            uint64_t r = rng_u64(p.seed, base + i);
            int am, av;
            // FP32 error bounds: a few units of the last place of the terms' magnitudes.
            double err_m = 4 * 0x1p-24 * (fabs(gi) + fabs(bf16_to_f32(m0[i])) + fabs(mi));
            double err_v = 4 * 0x1p-24 * vi;
            float want_m = ref_round(mi, (uint32_t)r & 0xffffu, err_m, &am);
            float want_v = ref_round(vi, (uint32_t)(r >> 16) & 0xffffu, err_v, &av);
            ambiguous += am + av;
            if (!am) wrong_m += bf16_to_f32(m[i]) != want_m;
            if (!av) wrong_v += bf16_to_f32(v[i]) != want_v;
            rounded_up += fabsf(bf16_to_f32(m[i])) > fabs(mi);
            // The weight uses the FP32 moments before they are rounded: FP32 rounding of the formula.
            double err = fabs(w[i] - wi), tol = 2e-7 * fabs(wi) + 1e-5 * lr;
            worst_w = err > worst_w ? err : worst_w;
            bad_w += !(err <= tol);
        }
        free(m0);
        free(v0);
        free(w0);
    }
    CHECK(wrong_m == 0 && wrong_v == 0, "%ld m and %ld v roundings differ from the float64 reference's", wrong_m, wrong_v);
    CHECK(ambiguous < 3 * N / 100, "%ld of %d roundings too close to call", ambiguous, 6 * N);
    CHECK(bad_w == 0, "%ld weights off the float64 reference (worst %.3g)", bad_w, worst_w);
    // Not vacuous: stochastic rounding went both ways.
    CHECK(rounded_up > N / 4 && rounded_up < 3 * N * 3 / 4, "m rounded away from zero %ld of %d times", rounded_up, 3 * N);
    free(w);
    free(g);
    free(mf);
    free(vf);
    free(m);
    free(v);
}

// One FP32 value stored in many elements averages to itself.
static void test_rounding_unbiased(void) {
    const size_t n = 200000;
    float* w = (float*)xcalloc(n, sizeof(float));
    float* g = (float*)xmalloc(n * sizeof(float));
    uint16_t* m = (uint16_t*)xcalloc(n, 2);
    uint16_t* v = (uint16_t*)xcalloc(n, 2);
    for (size_t i = 0; i < n; i++) g[i] = 1.3f;
    AdamWParams p = hyper(1, 99, 0);
    p.grad_scale = 1.0f;
    p.beta1 = 0.9f;
    be->adamw(be, w, NULL, g, m, v, n, &p);
    // Every element computed the same FP32 m = (1 - b1) * g.
    float want = fmaf((float)(1.0 - (double)p.beta1), 1.3f, 0.0f);  // m = fma(1-b1, g - 0, 0)
    double lo;
    double frac = bf16_floor_frac(want, &lo);
    double ulp = (want - lo) / frac;
    double mean = 0;
    for (size_t i = 0; i < n; i++) mean += bf16_to_f32(m[i]);
    mean /= (double)n;
    double sigma = ulp * sqrt(frac * (1.0 - frac) / (double)n);
    double rne_err = fabs((double)bf16_to_f32(f32_to_bf16(want)) - want);
    CHECK(fabs(mean - want) < 5 * sigma, "mean of the stored m %.9g, the value %.9g (sigma %.3g)", mean, want, sigma);
    CHECK(rne_err > 50 * sigma, "the test has no teeth: round-to-nearest is off by only %.3g (sigma %.3g)", rne_err, sigma);
    free(w);
    free(g);
    free(m);
    free(v);
}

// v = 0.999 v + 0.001 g^2 over many steps: its increments are far below half
// a BF16 spacing, so round-to-nearest stalls; stochastic rounding tracks the
// float64 recurrence on average.
static void test_small_increments_accumulate(void) {
    const size_t n = 4096;
    const int steps = 300;
    float* w = (float*)xcalloc(n, sizeof(float));
    float* g = (float*)xmalloc(n * sizeof(float));
    uint16_t* m = (uint16_t*)xcalloc(n, 2);
    uint16_t* v = (uint16_t*)xcalloc(n, 2);
    for (size_t i = 0; i < n; i++) {
        g[i] = 1.0f;
        v[i] = f32_to_bf16(0.5f);
    }
    double v64 = 0.5;
    float v_rne = 0.5f;
    for (int s = 1; s <= steps; s++) {
        AdamWParams p = hyper(s, rng_key(5, 6, (uint64_t)s), 0);
        p.beta2 = 0.999f;
        p.grad_scale = 1.0f;
        p.weight_decay = 0;
        be->adamw(be, w, NULL, g, m, v, n, &p);
        v64 = (double)p.beta2 * v64 + (1.0 - (double)p.beta2);
        v_rne = bf16_to_f32(f32_to_bf16(v_rne * p.beta2 + (float)(1.0 - (double)p.beta2)));
    }
    double mean = 0;
    for (size_t i = 0; i < n; i++) mean += bf16_to_f32(v[i]);
    mean /= (double)n;
    // Each step adds independent rounding noise of at most one spacing (2^-9 near 0.6) per element.
    double tol = 5.0 * 0x1p-9 * sqrt((double)steps / (double)n) + 1e-4;
    CHECK(fabs(mean - v64) < tol, "mean v %.6f after %d steps, float64 %.6f (tolerance %.2g)", mean, steps, v64, tol);
    CHECK(fabs(v_rne - v64) > 10 * tol, "no teeth: round-to-nearest reaches %.6f (float64 %.6f)", v_rne, v64);
    free(w);
    free(g);
    free(m);
    free(v);
}

// The same elements through one call, two calls split elsewhere, and
// adamw_tensors: the same bits; another seed: some roundings differ.
static void test_bits_depend_on_index_only(void) {
    uint64_t key = rng_key(28, 2, 0);
    float *w[4], *g = (float*)xmalloc(N * sizeof(float));
    uint16_t *m[4], *v[4];
    for (int k = 0; k < 4; k++) {
        w[k] = (float*)xmalloc(N * sizeof(float));
        m[k] = (uint16_t*)xmalloc(N * 2);
        v[k] = (uint16_t*)xmalloc(N * 2);
    }
    for (size_t i = 0; i < N; i++) {
        w[0][i] = rng_normal(key, 3 * i);
        g[i] = 0.1f * rng_normal(key, 3 * i + 1);
        m[0][i] = f32_to_bf16(0.01f * rng_normal(key, 3 * i + 2));
        v[0][i] = f32_to_bf16(1e-4f);
    }
    for (int k = 1; k < 4; k++) {
        memcpy(w[k], w[0], N * sizeof(float));
        memcpy(m[k], m[0], N * 2);
        memcpy(v[k], v[0], N * 2);
    }
    const uint64_t base = 4242, split = 1234;
    AdamWParams p = hyper(2, 31337, base);
    be->adamw(be, w[0], NULL, g, m[0], v[0], N, &p);
    AdamWParams q = hyper(2, 31337, base);
    be->adamw(be, w[1], NULL, g, m[1], v[1], split, &q);
    q.index_base = base + split;
    be->adamw(be, w[1] + split, NULL, g + split, m[1] + split, v[1] + split, N - split, &q);
    AdamWTensor t[2];
    memset(t, 0, sizeof t);
    t[0].count = 3001;
    t[0].index_base = base;
    t[0].weight_decay = p.weight_decay;
    t[1].param = t[1].grad = t[1].state = 3001;
    t[1].count = N - 3001;
    t[1].index_base = base + 3001;
    t[1].weight_decay = p.weight_decay;
    be->adamw_tensors(be, w[2], NULL, g, m[2], v[2], t, 2, &p);
    AdamWParams other = hyper(2, 31338, base);
    be->adamw(be, w[3], NULL, g, m[3], v[3], N, &other);
    for (int k = 1; k < 3; k++) {
        CHECK(!memcmp(m[k], m[0], N * 2) && !memcmp(v[k], v[0], N * 2), "split %d: moments differ", k);
        CHECK(!memcmp(w[k], w[0], N * sizeof(float)), "split %d: weights differ", k);
    }
    int differ = 0;
    for (size_t i = 0; i < N; i++) differ += m[3][i] != m[0][i];
    CHECK(differ > N / 10, "another seed changed only %d of %d roundings", differ, N);
    CHECK(!memcmp(w[3], w[0], N * sizeof(float)), "the seed changed the weights (they use the unrounded moments)");
    for (int k = 0; k < 4; k++) {
        free(w[k]);
        free(m[k]);
        free(v[k]);
    }
    free(g);
}

// With moment_dtype F32 (the zero default) the update is the FP32 one: m and v are not rounded to BF16.
static void test_fp32_moments_unchanged(void) {
    float w = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    AdamWParams p = hyper(1, 1, 0);
    p.moment_dtype = DTYPE_F32;
    be->adamw(be, &w, NULL, &g, &m, &v, 1, &p);
    float gs = g * p.grad_scale;
    CHECK(m == fmaf((float)(1.0 - (double)p.beta1), gs, 0.0f), "fp32 m %.9g", m);
    CHECK(v == ((float)(1.0 - (double)p.beta2) * gs) * gs, "fp32 v %.9g", v);
}

int main(void) {
    be = cpu_backend_create(DTYPE_F32, 0);
    RUN(test_step_matches_float64);
    RUN(test_rounding_unbiased);
    RUN(test_small_increments_accumulate);
    RUN(test_bits_depend_on_index_only);
    RUN(test_fp32_moments_unchanged);
    be->destroy(be);
    return TESTS_DONE();
}
