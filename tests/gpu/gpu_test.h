// gpu_test.h: helpers the GPU test programs share: the backend under test
// (CUDA, in FP32 or BF16) beside the CPU reference backend, random host data
// (rounded to BF16 when the GPU computes in BF16, so that both backends see
// the same inputs), uploads and downloads in either dtype, NaN poisoning,
// the error measure every comparison uses, and a model's training step and
// loss-curve comparison for the training tests.
//
// The programs are plain C on top of kernels/ops.h, so the same sources run
// on a GPU (linked with the nvcc-built backend) and on the CPU execution
// harness (tests/cuda_sim/, linked with the backend built by g++ -DCUDA_SIM).
// Small shapes for the harness: always when built with -DCUDA_SIM (the
// harness's Makefile rules do), or with TEST_SMALL=1 in the environment.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/bf16.h"
#include "llm/util/rng.h"
#include "llm/trainer.h"
#include "tests/testlib.h"

Backend* cuda_backend_create(DType dtype);

static Backend* ref;  // the CPU backend (FP32)
static Backend* gpu;  // the backend under test
static uint64_t test_stream;

static inline int test_small(void) {
#ifdef CUDA_SIM
    return 1;  // built for the CPU execution harness
#endif
    const char* s = getenv("TEST_SMALL");
    return s && s[0] && strcmp(s, "0") != 0;
}

static inline DType gdt(void) { return gpu->dtype; }
static inline size_t gsize(void) { return dtype_size(gpu->dtype); }

// A value as the GPU stores it (rounded to BF16 in BF16 mode).
static inline float as_stored(float x) { return gdt() == DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(x)) : x; }

// Host buffer of n normal values times scale, rounded as the GPU stores them.
static inline float* host_normal(size_t n, float scale) {
    float* x = (float*)xmalloc((n ? n : 1) * sizeof(float));
    uint64_t key = rng_key(20240711, ++test_stream, 0);
    for (size_t i = 0; i < n; i++) x[i] = as_stored(scale * rng_normal(key, i));
    return x;
}

static inline int32_t* host_tokens(size_t n, int V) {
    int32_t* t = (int32_t*)xmalloc((n ? n : 1) * sizeof(int32_t));
    uint64_t key = rng_key(20240711, ++test_stream, 1);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)rng_below(key, i, (uint64_t)V);
    return t;
}

// Device buffer of the GPU's dtype holding x.
static inline void* gpu_from(const float* x, size_t n) {
    void* d = gpu->alloc(gpu, n * gsize(), "test buffer");
    if (gdt() == DTYPE_F32) {
        gpu->to_device(gpu, d, x, n * sizeof(float));
    } else {
        uint16_t* h = (uint16_t*)xmalloc((n ? n : 1) * 2);
        for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(x[i]);
        gpu->to_device(gpu, d, h, n * 2);
        free(h);
    }
    return d;
}

// FP32 device buffer (whatever the GPU's dtype).
static inline float* gpu_from_f32(const float* x, size_t n) {
    float* d = (float*)gpu->alloc(gpu, n * sizeof(float), "test buffer");
    gpu->to_device(gpu, d, x, n * sizeof(float));
    return d;
}

static inline int32_t* gpu_tokens(const int32_t* t, size_t n) {
    int32_t* d = (int32_t*)gpu->alloc(gpu, n * sizeof(int32_t), "test tokens");
    gpu->to_device(gpu, d, t, n * sizeof(int32_t));
    return d;
}

// Device buffer of n NaNs in the GPU's dtype (outputs that must be overwritten).
static inline void* gpu_nan(size_t n) {
    float* x = (float*)xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    void* d = gpu_from(x, n);
    free(x);
    return d;
}

static inline float* gpu_nan_f32(size_t n) {
    float* x = (float*)xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    float* d = gpu_from_f32(x, n);
    free(x);
    return d;
}

// Host FP32 copy of a device buffer of the GPU's dtype (caller frees).
static inline float* gpu_read(const void* d, size_t n) {
    float* x = (float*)xmalloc((n ? n : 1) * sizeof(float));
    if (gdt() == DTYPE_F32) {
        gpu->to_host(gpu, x, d, n * sizeof(float));
    } else {
        uint16_t* h = (uint16_t*)xmalloc((n ? n : 1) * 2);
        gpu->to_host(gpu, h, d, n * 2);
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(h[i]);
        free(h);
    }
    return x;
}

static inline float* gpu_read_f32(const float* d, size_t n) {
    float* x = (float*)xmalloc((n ? n : 1) * sizeof(float));
    gpu->to_host(gpu, x, d, n * sizeof(float));
    return x;
}

// The CPU backend's memory is host memory: these are plain copies.
static inline float* ref_from(const float* x, size_t n) {
    float* d = (float*)ref->alloc(ref, (n ? n : 1) * sizeof(float), "reference buffer");
    memcpy(d, x, n * sizeof(float));
    return d;
}

static inline float* ref_nan(size_t n) {
    float* d = (float*)ref->alloc(ref, (n ? n : 1) * sizeof(float), "reference buffer");
    for (size_t i = 0; i < n; i++) d[i] = NAN;
    return d;
}

// Error of got against want relative to the largest |want|: max_i |got_i -
// want_i| / max_i |want_i|; infinite if any got is not finite.
static inline double rel_error(const float* got, const float* want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num = fmax(num, fabs((double)got[i] - (double)want[i]));
        den = fmax(den, fabs((double)want[i]));
    }
    return den > 0 ? num / den : num;
}

// The tolerance of the dtype under test: 1e-5 in FP32, 1e-2 in BF16, times `factor`.
static inline double tolerance(double factor) { return (gdt() == DTYPE_F32 ? 1e-5 : 1e-2) * factor; }

// Checks got against want and prints the measured error as a comment line.
#define EXPECT_CLOSE(got, want, n, tol, what)                                                              \
    do {                                                                                                    \
        double e_ = rel_error((got), (want), (n));                                                          \
        printf("#   %-44s %s rel err %.2e (tol %.0e)\n", (what), dtype_name(gdt()), e_, (double)(tol));      \
        CHECK(e_ <= (tol), "%s: relative error %.3g exceeds %.3g", (what), e_, (double)(tol));             \
    } while (0)

// Checks a device buffer of the GPU's dtype against a host reference and frees the host copy.
#define EXPECT_DEVICE_CLOSE(dev, want, n, tol, what)                                                       \
    do {                                                                                                    \
        float* got_ = gpu_read((dev), (n));                                                                 \
        EXPECT_CLOSE(got_, (want), (n), (tol), (what));                                                     \
        free(got_);                                                                                         \
    } while (0)

// Batches with structure to learn: each sequence follows t' = (5 t + 3) mod V
// with a random restart every ~8 tokens, so the loss can fall well below log V.
static inline void structured_batch(uint64_t seed, int32_t* in, int32_t* tgt, int B, int T, int V, uint64_t step) {
    uint64_t key = rng_key(seed, step, 0);
    for (int b = 0; b < B; b++) {
        int32_t t = (int32_t)rng_below(key, (uint64_t)b * 1000003, (uint64_t)V);
        for (int i = 0; i <= T; i++) {
            uint64_t k = (uint64_t)b * (T + 1) + i;
            int32_t next = rng_below(key, 2 * k + 1, 8) == 0 ? (int32_t)rng_below(key, 2 * k, (uint64_t)V)
                                                             : (int32_t)((5 * t + 3) % V);
            if (i < T) in[b * T + i] = t;
            if (i > 0) tgt[b * T + i - 1] = t;
            t = next;
        }
    }
}

// One optimizer step of m on (in, tgt) at learning rate lr, gradients clipped
// at norm 1.0; returns the mean loss.
static inline double gpu_train_step(GPT* m, const int32_t* in, const int32_t* tgt, int B, int T, int step, float lr) {
    Backend* be = m->be;
    size_t bytes = (size_t)B * T * sizeof(int32_t);
    be->to_device(be, m->inputs, in, bytes);
    be->to_device(be, m->targets, tgt, bytes);
    gpt_zero_grads(m);
    gpt_forward(m, m->inputs, m->targets, B, T, 1.0f / (float)(B * T));
    gpt_accumulate_loss(m, B, T, 0);
    gpt_backward(m, m->inputs, B, T);
    gpt_grad_norm_squared(m, 0, m->layout.total);
    float s[2];
    be->to_host(be, s, m->scalars, sizeof s);
    double clip = grad_clip_scale(sqrt((double)s[1]), 1.0);
    gpt_update(m, lr, 0.9f, 0.95f, 1e-8f, 0.1f, (float)clip, rng_key(11, 0xADA3, (uint64_t)step));
    return (double)s[0] / ((double)B * T);
}

// The largest |got[s] - want[s]| over n steps of two loss curves (a NaN
// counts as largest), and its step in *at.
static inline double largest_gap(const double* got, const double* want, int n, int* at) {
    double worst = 0.0;
    *at = 0;
    for (int s = 0; s < n; s++) {
        double d = fabs(got[s] - want[s]);
        if (d > worst || !(d == d)) {
            worst = d;
            *at = s;
        }
    }
    return worst;
}

static inline int same_bits(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// ---- the op tests' frame (test_gpu_ops.c, test_gpu_llama_ops.c) ----

// Every op case runs in FP32 and in BF16: the dtype ends the case's name.
static inline const char* gpu_dtype_suffix(void) { return gdt() == DTYPE_F32 ? "_fp32" : "_bf16"; }

// Frees a case's buffers: GPU_FREE(g_a, g_b, ...) on the backend under test, REF_FREE(r_a, ...) on the reference.
static inline void gpu_free_all(void* const* bufs, size_t n) {
    for (size_t i = 0; i < n; i++) gpu->free(gpu, bufs[i]);
}
static inline void ref_free_all(void* const* bufs, size_t n) {
    for (size_t i = 0; i < n; i++) ref->free(ref, bufs[i]);
}
#define GPU_FREE(...) gpu_free_all((void* const[]){__VA_ARGS__}, sizeof((void* const[]){__VA_ARGS__}) / sizeof(void*))
#define REF_FREE(...) ref_free_all((void* const[]){__VA_ARGS__}, sizeof((void* const[]){__VA_ARGS__}) / sizeof(void*))

// main() of an op test: the CPU reference backend (FP32) beside the CUDA
// backend in FP32 and then in BF16, `cases` run once with each; the exit status.
static inline int gpu_test_each_dtype(void (*cases)(void)) {
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dtypes[] = {DTYPE_F32, DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        gpu = cuda_backend_create(dtypes[i]);
        cases();
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
