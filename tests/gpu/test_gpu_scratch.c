// test_gpu_scratch.c: the CUDA backend's op scratch is sized at start-up.
// After reserve_scratch at a model's shapes, every op that takes scratch runs
// at those shapes without the backend allocating another byte (an allocation
// inside a training step would be a cudaMalloc/cudaFree that stalls the
// stream). Fails when an op's scratch is missing from the reservation.
#include <stdio.h>

#include "tests/gpu/gpu_test.h"

#define RUN_DT(fn) RUN_SUFFIXED(fn, gdt() == DTYPE_F32 ? "_fp32" : "_bf16")

static void scratch_case(int B, int T, int C, int NH, int V) {
    int N = B * T, H = 4 * C;
    Backend* saved = gpu;
    gpu = cuda_backend_create(saved->dtype);  // fresh: no scratch yet
    CHECK(gpu->reserve_scratch != NULL, "the CUDA backend has no reserve_scratch");
    float *x = host_normal((size_t)N * H, 1.0f), *w = host_normal((size_t)H * C, 0.1f);
    int32_t* tok = host_tokens((size_t)N, V);
    void *d_qkv = gpu_from(x, (size_t)N * 3 * C), *d_out = gpu_nan((size_t)N * C), *d_dqkv = gpu_nan((size_t)N * 3 * C);
    void *d_dout = gpu_from(x, (size_t)N * C), *d_h = gpu_from(x, (size_t)N * H), *d_w = gpu_from(w, (size_t)H * C);
    void *d_dw = gpu_from(w, (size_t)H * C), *d_db = gpu_from(w, (size_t)H), *d_din = gpu_nan((size_t)N * C);
    void *d_wte = gpu_from(w, (size_t)V * C), *d_wpe = gpu_from(w, (size_t)T * C), *d_lnw = gpu_from(w, (size_t)C);
    float *d_lse = gpu_nan_f32((size_t)B * NH * T), *d_mean = gpu_from_f32(x, (size_t)N), *d_rstd = gpu_from_f32(x, (size_t)N);
    float* d_sum = gpu_nan_f32(1);
    int32_t* d_tok = gpu_tokens(tok, (size_t)N);
    gpu->attention_forward(gpu, d_out, d_lse, d_qkv, B, T, NH, NH, C / NH);
    gpu->synchronize(gpu);

    gpu->reserve_scratch(gpu, B, T, C, H, NH, NH);
    size_t before = gpu->allocated_bytes(gpu);
    gpu->attention_backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, NH, C / NH);
    gpu->encoder_backward(gpu, d_wte, d_wpe, d_dout, d_tok, B, T, C);
    gpu->layernorm_backward(gpu, d_din, d_lnw, d_lnw, d_dout, d_dout, d_lnw, d_mean, d_rstd, N, C, NULL);
    gpu->rmsnorm_backward(gpu, d_din, d_lnw, d_dout, d_dout, d_lnw, d_rstd, N, C, NULL);
    gpu->matmul_backward(gpu, d_din, d_dw, d_db, d_h, d_dout, d_w, N, C, H);  // dbias over (N, 4C)
    gpu->sum_squares(gpu, d_sum, d_h, (size_t)N * H, 0);
    gpu->synchronize(gpu);
    size_t after = gpu->allocated_bytes(gpu);
    CHECK(after == before, "B=%d T=%d C=%d NH=%d: the ops allocated %zd bytes after reserve_scratch", B, T, C, NH,
          (ptrdiff_t)(after - before));
    free(x);
    free(w);
    free(tok);
    gpu->destroy(gpu);
    gpu = saved;
}

static void test_scratch_reserved(void) {
    scratch_case(2, 33, 96, 3, 50);
    scratch_case(4, 256, 96, 1, 300);  // layernorm's and dbias's partials (12 KiB) exceed the rest
}

int main(void) {
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[] = {DTYPE_F32, DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        gpu = cuda_backend_create(dts[i]);
        RUN_DT(test_scratch_reserved);
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
