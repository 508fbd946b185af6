// test_gpu_grid.c: ops whose work is larger than one grid (grid_for caps a
// grid at 262,140 blocks, kernels/cuda/cuda_backend.cuh) give the same bits
// as the same op run over two halves that each fit in one grid.
//
// The attention backward's D kernel (one warp per (b, t, h) row) once had no
// grid-stride loop: rows beyond 262,140 * 8 = 2,097,120 kept whatever the
// scratch held and dQ/dK/dV came out silently wrong. On a GPU the attention
// case runs above that many rows (B=2048, T=64, NH=17: 2,228,224 rows). The
// CPU harness cannot run that size, so there CUDA_SIM_MAX_GRID lowers the cap
// to three quarters of what the full call needs, which the halves stay under,
// and the memory-bound grid-stride ops are checked the same way.
#include <stdio.h>

#include "tests/gpu/gpu_test.h"

#define RUN_DT(fn) RUN_SUFFIXED(fn, gdt() == DTYPE_F32 ? "_fp32" : "_bf16")

// Lowers grid_for's cap (harness only) to 3/4 of the blocks of a launch of
// `items` items at 256 threads, `per_thread` each.
static void lower_cap(size_t items, int per_thread) {
#ifdef CUDA_SIM
    char v[32];
    snprintf(v, sizeof v, "%zu", items / 256 / per_thread * 3 / 4);
    setenv("CUDA_SIM_MAX_GRID", v, 1);
#else
    (void)items;
    (void)per_thread;
#endif
}

static void restore_cap(void) {
#ifdef CUDA_SIM
    unsetenv("CUDA_SIM_MAX_GRID");
#endif
}

static size_t bytes_of(size_t n) { return n * gsize(); }
static void* offset(void* p, size_t elems) { return (char*)p + bytes_of(elems); }
static float* offset_f32(float* p, size_t elems) { return p + elems; }

// Full-batch attention backward against the two half batches, bit for bit.
static void test_attention_backward_rows(void) {
    int B, T, NH, HS = 32;
    if (test_small()) B = 4, T = 16, NH = 2;  // 128 rows: a cap of 12 blocks covers 96
    else B = 2048, T = 64, NH = 17;           // 2,228,224 rows, over the real cap's 2,097,120
    int C = NH * HS, Bh = B / 2;
    size_t rows = (size_t)B * T * NH;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    printf("#   attention backward over %zu rows (B=%d T=%d NH=%d HS=%d)\n", rows, B, T, NH, HS);
    float *qkv = host_normal(nqkv, 1.0f), *dout = host_normal(nout, 1.0f);
    // A fresh backend: its op scratch is new memory, so D rows the kernel
    // skipped hold the allocator's contents (NaN under the harness).
    Backend* saved = gpu;
    gpu = cuda_backend_create(saved->dtype);
    void *g_qkv = gpu_from(qkv, nqkv), *g_dout = gpu_from(dout, nout), *g_out = gpu_nan(nout);
    float* g_lse = gpu_nan_f32(nlse);
    gpu->attention_forward(gpu, g_out, g_lse, g_qkv, B, T, NH, NH, C / NH);

    lower_cap(rows * 32, 1);  // the D kernel: one warp (32 threads) per row
    void* g_full = gpu_nan(nqkv);
    gpu->attention_backward(gpu, g_full, g_dout, g_qkv, g_out, g_lse, B, T, NH, NH, C / NH);
    void* g_split = gpu_nan(nqkv);
    for (int half = 0; half < 2; half++) {
        size_t b0 = (size_t)half * Bh;
        gpu->attention_backward(gpu, offset(g_split, b0 * T * 3 * C), offset(g_dout, b0 * T * C),
                                offset(g_qkv, b0 * T * 3 * C), offset(g_out, b0 * T * C),
                                offset_f32(g_lse, b0 * NH * T), Bh, T, NH, NH, HS);
    }
    restore_cap();
    float *full = gpu_read(g_full, nqkv), *split = gpu_read(g_split, nqkv);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < nqkv; i++) {
        if (memcmp(&full[i], &split[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    }
    CHECK(rel_error(split, split, nqkv) == 0, "attention dqkv of the half batches is not finite");
    CHECK(bad == 0, "attention backward over %zu rows differs from two half calls in %zu of %zu values "
          "(first at %zu: %g vs %g): rows beyond one grid were not computed", rows, bad, nqkv, first,
          (double)full[first], (double)split[first]);
    free(full);
    free(split);
    free(qkv);
    free(dout);
    gpu->destroy(gpu);
    gpu = saved;
}

// A memory-bound op over n elements against the same op over two halves (the
// split on a 64-element boundary keeps both halves on the vectorized path).
static void test_elementwise_rounds(void) {
    if (!test_small()) return;  // on a GPU this needs over 10^9 elements: harness only
    size_t n = 40000, h = n / 2 / 64 * 64;
    float *x = host_normal(n, 2.0f), *g = host_normal(n, 1.0f);
    void *d_x = gpu_from(x, n), *d_g = gpu_from(g, n);
    void *full = gpu_nan(n), *split = gpu_nan(n);
    lower_cap(n, 8);  // below the blocks of the widest (8 per thread) launch, so every path loops
    gpu->gelu_forward(gpu, full, d_x, n, NULL);
    gpu->gelu_forward(gpu, split, d_x, h, NULL);
    gpu->gelu_forward(gpu, offset(split, h), offset(d_x, h), n - h, NULL);
    float *a = gpu_read(full, n), *b = gpu_read(split, n);
    CHECK(rel_error(b, b, n) == 0 && same_bits(a, b, n * sizeof(float)), "gelu forward over more than one grid differs");
    free(a);
    free(b);
    gpu->gelu_backward(gpu, full, d_x, d_g, n, NULL);
    gpu->gelu_backward(gpu, split, d_x, d_g, h, NULL);
    gpu->gelu_backward(gpu, offset(split, h), offset(d_x, h), offset(d_g, h), n - h, NULL);
    a = gpu_read(full, n);
    b = gpu_read(split, n);
    CHECK(rel_error(b, b, n) == 0 && same_bits(a, b, n * sizeof(float)), "gelu backward over more than one grid differs");
    free(a);
    free(b);
    // amax reads every element: a value planted in the last element must be found.
    x[n - 1] = 1000.0f;
    gpu->free(gpu, d_x);
    d_x = gpu_from(x, n);
    float zero = 0.0f, got = 0.0f;
    float* d_amax = gpu_from_f32(&zero, 1);
    gpu->amax(gpu, d_amax, d_x, n);
    gpu->to_host(gpu, &got, d_amax, sizeof got);
    CHECK(got == 1000.0f, "amax over more than one grid gave %g, not the last element's 1000", (double)got);
    restore_cap();
    void* bufs[] = {d_x, d_g, full, split, d_amax};
    for (int i = 0; i < 5; i++) gpu->free(gpu, bufs[i]);
    free(x);
    free(g);
}

int main(void) {
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[] = {DTYPE_F32, DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        gpu = cuda_backend_create(dts[i]);
        RUN_DT(test_attention_backward_rows);
        RUN_DT(test_elementwise_rounds);
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
