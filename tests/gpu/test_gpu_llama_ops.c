// test_gpu_llama_ops.c: the Llama block's ops of kernels/ops.h on the CUDA
// backend against the CPU reference backend, in FP32 (relative error around
// 1e-5) and BF16 (around 1e-2, the CPU run on the same BF16-rounded inputs):
// grouped-query attention (several query heads per kv head, heads not a
// power of two, T not a tile multiple, tensor-core and CUDA-core head
// sizes), RMSNorm forward (alone, fused with the residual add, in place) and
// backward, RoPE forward and backward, SwiGLU forward and backward, their
// amaxes, and the embedding without position embeddings. Overwritten outputs are poisoned with NaN first; accumulated ones
// are pre-filled with random values. TEST_SMALL=1 (and the CPU execution
// harness) keeps the shapes small.
#include "tests/gpu/gpu_test.h"

static int small;

#define RUN_DT(fn) RUN_SUFFIXED(fn, gpu_dtype_suffix())

// The largest |x| of a device buffer as stored.
static float device_amax(const void* d, size_t n) {
    float* x = gpu_read(d, n);
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    free(x);
    return m;
}

// ---- grouped-query attention ----------------------------------------------------------------------------------

static void gqa_case(int B, int T, int NH, int NKV, int HS) {
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    float *qkv = host_normal(nqkv, 1.0f), *dout = host_normal(nout, 1.0f);
    float *r_qkv = ref_from(qkv, nqkv), *r_out = ref_nan(nout), *r_lse = ref_nan(nlse);
    ref->attention_forward(ref, r_out, r_lse, r_qkv, B, T, NH, NKV, HS);
    void *g_qkv = gpu_from(qkv, nqkv), *g_out = gpu_nan(nout);
    float* g_lse = gpu_nan_f32(nlse);
    gpu->attention_forward(gpu, g_out, g_lse, g_qkv, B, T, NH, NKV, HS);
    char what[96];
    snprintf(what, sizeof what, "gqa out B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    EXPECT_DEVICE_CLOSE(g_out, r_out, nout, tolerance(1), what);
    float* lse = gpu_read_f32(g_lse, nlse);
    EXPECT_CLOSE(lse, r_lse, nlse, tolerance(0.5), "gqa lse");
    free(lse);

    float *r_dout = ref_from(dout, nout), *r_dqkv = ref_nan(nqkv);
    ref->attention_backward(ref, r_dqkv, r_dout, r_qkv, r_out, r_lse, B, T, NH, NKV, HS);
    void *g_dout = gpu_from(dout, nout), *g_dqkv = gpu_nan(nqkv);
    gpu->attention_backward(gpu, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, NH, NKV, HS);
    snprintf(what, sizeof what, "gqa dqkv B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    EXPECT_DEVICE_CLOSE(g_dqkv, r_dqkv, nqkv, tolerance(2), what);
    float* first = gpu_read(g_dqkv, nqkv);
    gpu->attention_backward(gpu, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, NH, NKV, HS);
    float* second = gpu_read(g_dqkv, nqkv);
    CHECK(same_bits(first, second, nqkv * sizeof(float)), "gqa backward is not deterministic");
    free(first);
    free(second);
    GPU_FREE(g_qkv, g_out, g_lse, g_dout, g_dqkv);
    REF_FREE(r_qkv, r_out, r_lse, r_dout, r_dqkv);
    free(qkv);
    free(dout);
}

static void test_gqa_attention(void) {
    gqa_case(1, 37, 6, 2, 16);   // the parity test's heads; CUDA-core kernels
    gqa_case(2, 19, 9, 3, 32);   // tensor cores in BF16; T below one tile
    gqa_case(1, 100, 4, 1, 64);  // one kv head for all; two tiles, the second partial
    gqa_case(1, 70, 2, 2, 128);  // NKV = NH through the same entry point
    gqa_case(1, 41, 5, 5, 20);
    if (!small) {
        gqa_case(2, 1000, 32, 8, 64);
        gqa_case(1, 2048, 24, 8, 128);
    }
}

// ---- rmsnorm ----------------------------------------------------------------------------------------------------

#define EPS 1e-5f

static void rmsnorm_case(int N, int C) {
    size_t n = (size_t)N * C;
    float *a = host_normal(n, 2.0f), *b = host_normal(n, 1.0f), *w = host_normal(C, 1.0f);
    float *r_a = ref_from(a, n), *r_w = ref_from(w, C), *r_out = ref_nan(n), *r_rstd = ref_nan(N);
    ref->rmsnorm_forward(ref, r_out, r_rstd, r_a, r_w, N, C, EPS, NULL);
    void *g_a = gpu_from(a, n), *g_b = gpu_from(b, n), *g_w = gpu_from(w, C), *g_out = gpu_nan(n);
    float* g_rstd = gpu_nan_f32(N);
    float* g_amax = gpu_from_f32(&(float){0.0f}, 1);
    gpu->rmsnorm_forward(gpu, g_out, g_rstd, g_a, g_w, N, C, EPS, g_amax);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm out N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_out, r_out, n, tolerance(1), what);
    float* rs = gpu_read_f32(g_rstd, N);
    EXPECT_CLOSE(rs, r_rstd, N, 1e-5, "rmsnorm rstd");
    free(rs);
    float amax;
    gpu->to_host(gpu, &amax, g_amax, sizeof amax);
    CHECK(amax == device_amax(g_out, n), "rmsnorm amax %g is not max |out| %g", amax, device_amax(g_out, n));

    // Fused with the residual add, residual a separate buffer and then over a:
    // the reference normalises the residual as the GPU stores it.
    float *r_b = ref_from(b, n), *r_res = ref_nan(n);
    ref->residual_rmsnorm_forward(ref, r_res, r_out, r_rstd, r_a, r_b, r_w, N, C, EPS, NULL);
    float* stored = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) stored[i] = as_stored(r_res[i]);
    float *r_in2 = ref_from(stored, n), *r_out2 = ref_nan(n);
    ref->rmsnorm_forward(ref, r_out2, r_rstd, r_in2, r_w, N, C, EPS, NULL);
    void* g_res = gpu_nan(n);
    for (int alias = 0; alias < 2; alias++) {
        void* res = alias ? g_a : g_res;
        gpu->residual_rmsnorm_forward(gpu, res, g_out, g_rstd, g_a, g_b, g_w, N, C, EPS, NULL);
        snprintf(what, sizeof what, "residual N=%d C=%d%s", N, C, alias ? " (aliases a)" : "");
        EXPECT_DEVICE_CLOSE(res, r_res, n, tolerance(0.5), what);
        snprintf(what, sizeof what, "residual+rmsnorm out N=%d C=%d", N, C);
        EXPECT_DEVICE_CLOSE(g_out, r_out2, n, tolerance(1), what);
    }
    free(stored);
    GPU_FREE(g_a, g_b, g_w, g_out, g_rstd, g_amax, g_res);
    REF_FREE(r_a, r_w, r_out, r_rstd, r_b, r_res, r_in2, r_out2);
    free(a);
    free(b);
    free(w);
}

static void test_rmsnorm_forward(void) {
    rmsnorm_case(37, 40);
    rmsnorm_case(20, 37);  // C not a multiple of the vector width
    if (!small) rmsnorm_case(4096, 2048);
}

static void rmsnorm_backward_case(int N, int C) {
    size_t n = (size_t)N * C;
    float *inp = host_normal(n, 1.5f), *w = host_normal(C, 1.0f), *dout = host_normal(n, 1.0f);
    float *dinp = host_normal(n, 1.0f), *dw = host_normal(C, 1.0f);
    float *r_inp = ref_from(inp, n), *r_w = ref_from(w, C), *r_dout = ref_from(dout, n);
    float *r_dinp = ref_from(dinp, n), *r_dw = ref_from(dw, C), *r_out = ref_nan(n), *r_rstd = ref_nan(N);
    ref->rmsnorm_forward(ref, r_out, r_rstd, r_inp, r_w, N, C, EPS, NULL);
    ref->rmsnorm_backward(ref, r_dinp, r_dw, r_dout, r_inp, r_w, r_rstd, N, C, NULL);
    void *g_inp = gpu_from(inp, n), *g_w = gpu_from(w, C), *g_dout = gpu_from(dout, n);
    void *g_dinp = gpu_from(dinp, n), *g_dw = gpu_from(dw, C);
    float* g_rstd = gpu_from_f32(r_rstd, N);
    float* g_amax = gpu_from_f32(&(float){0.0f}, 1);
    gpu->rmsnorm_backward(gpu, g_dinp, g_dw, g_dout, g_inp, g_w, g_rstd, N, C, g_amax);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm dinp (+=) N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_dinp, r_dinp, n, tolerance(1), what);
    snprintf(what, sizeof what, "rmsnorm dw (+=) N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_dw, r_dw, C, tolerance(2), what);
    float amax;
    gpu->to_host(gpu, &amax, g_amax, sizeof amax);
    CHECK(amax == device_amax(g_dinp, n), "rmsnorm backward amax %g is not max |dinp|", amax);
    // Deterministic: the same call from the same start gives the same bits.
    float* first = gpu_read(g_dw, C);
    void* again = gpu_from(dw, C);
    void* dinp2 = gpu_from(dinp, n);
    gpu->rmsnorm_backward(gpu, dinp2, again, g_dout, g_inp, g_w, g_rstd, N, C, NULL);
    float* second = gpu_read(again, C);
    CHECK(same_bits(first, second, (size_t)C * sizeof(float)), "rmsnorm backward is not deterministic");
    free(first);
    free(second);
    GPU_FREE(g_inp, g_w, g_dout, g_dinp, g_dw, g_rstd, g_amax, again, dinp2);
    REF_FREE(r_inp, r_w, r_dout, r_dinp, r_dw, r_out, r_rstd);
    free(inp);
    free(w);
    free(dout);
    free(dinp);
    free(dw);
}

static void test_rmsnorm_backward(void) {
    rmsnorm_backward_case(37, 40);
    rmsnorm_backward_case(130, 37);  // three row blocks, the last partial
    if (!small) rmsnorm_backward_case(4096, 2048);
}

// ---- rope -----------------------------------------------------------------------------------------------------------

static void rope_case(int B, int T, int NH, int NKV, int HS, const RopeScaling* sc) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS, nf = (size_t)T * HS;
    float* freqs = (float*)xmalloc(nf * sizeof(float));
    rope_table(freqs, T, HS, 500000.0, sc);
    float* g_freqs = gpu_from_f32(freqs, nf);
    float* x = host_normal(n, 1.0f);
    float* r_x = ref_from(x, n);
    void* g_x = gpu_from(x, n);
    ref->rope_forward(ref, r_x, freqs, B, T, NH, NKV, HS);
    gpu->rope_forward(gpu, g_x, g_freqs, B, T, NH, NKV, HS);
    char what[96];
    snprintf(what, sizeof what, "rope forward B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    // FP32: the same fmaf expressions as the CPU, so the same bits.
    EXPECT_DEVICE_CLOSE(g_x, r_x, n, gdt() == DTYPE_F32 ? 0.0 : tolerance(0.5), what);
    ref->rope_backward(ref, r_x, freqs, B, T, NH, NKV, HS);
    gpu->rope_backward(gpu, g_x, g_freqs, B, T, NH, NKV, HS);
    snprintf(what, sizeof what, "rope backward B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    EXPECT_DEVICE_CLOSE(g_x, r_x, n, gdt() == DTYPE_F32 ? 0.0 : tolerance(1), what);
    gpu->free(gpu, g_freqs);
    gpu->free(gpu, g_x);
    ref->free(ref, r_x);
    free(freqs);
    free(x);
}

static void test_rope(void) {
    rope_case(2, 37, 6, 2, 16, NULL);
    rope_case(1, 19, 9, 3, 6, NULL);
    RopeScaling sc = {8.0f, 1.0f, 4.0f, 64};
    rope_case(2, 33, 4, 2, 32, &sc);
    if (!small) rope_case(2, 4096, 32, 8, 128, NULL);
}

// ---- swiglu ---------------------------------------------------------------------------------------------------------

static void swiglu_case(int N, int H) {
    size_t n = (size_t)N * H;
    float *inp = host_normal(2 * n, 3.0f), *dout = host_normal(n, 1.0f);
    inp[0] = -120.0f;  // far tails: exp must not overflow into NaN
    inp[1] = 95.0f;
    float *r_inp = ref_from(inp, 2 * n), *r_dout = ref_from(dout, n), *r_out = ref_nan(n), *r_dinp = ref_nan(2 * n);
    ref->swiglu_forward(ref, r_out, r_inp, N, H, NULL);
    ref->swiglu_backward(ref, r_dinp, r_inp, r_dout, N, H, NULL);
    void *g_inp = gpu_from(inp, 2 * n), *g_dout = gpu_from(dout, n), *g_out = gpu_nan(n), *g_dinp = gpu_nan(2 * n);
    float* g_amax = gpu_from_f32((float[]){0.0f, 0.0f}, 2);
    gpu->swiglu_forward(gpu, g_out, g_inp, N, H, g_amax);
    gpu->swiglu_backward(gpu, g_dinp, g_inp, g_dout, N, H, g_amax + 1);
    char what[96];
    snprintf(what, sizeof what, "swiglu forward N=%d H=%d", N, H);
    EXPECT_DEVICE_CLOSE(g_out, r_out, n, tolerance(1), what);
    snprintf(what, sizeof what, "swiglu backward N=%d H=%d", N, H);
    EXPECT_DEVICE_CLOSE(g_dinp, r_dinp, 2 * n, tolerance(1), what);
    float amax[2];
    gpu->to_host(gpu, amax, g_amax, sizeof amax);
    CHECK(amax[0] == device_amax(g_out, n), "swiglu forward amax %g is not max |out|", amax[0]);
    CHECK(amax[1] == device_amax(g_dinp, 2 * n), "swiglu backward amax %g is not max |dinp|", amax[1]);
    GPU_FREE(g_inp, g_dout, g_out, g_dinp, g_amax);
    REF_FREE(r_inp, r_dout, r_out, r_dinp);
    free(inp);
    free(dout);
}

static void test_swiglu(void) {
    swiglu_case(37, 65);
    swiglu_case(3, 1000);
    if (!small) swiglu_case(4096, 14336);
}

// ---- embeddings without positions ------------------------------------------------------------------------------

static void test_encoder_no_positions(void) {
    int B = 3, T = 33, C = 40, V = 7;
    size_t N = (size_t)B * T;
    float *wte = host_normal((size_t)V * C, 1.0f), *dout = host_normal(N * C, 1.0f), *dwte = host_normal((size_t)V * C, 1.0f);
    int32_t* tok = host_tokens(N, V);
    float *r_wte = ref_from(wte, (size_t)V * C), *r_out = ref_nan(N * C), *r_dout = ref_from(dout, N * C);
    float* r_dwte = ref_from(dwte, (size_t)V * C);
    ref->encoder_forward(ref, r_out, tok, r_wte, NULL, B, T, C);
    ref->encoder_backward(ref, r_dwte, NULL, r_dout, tok, B, T, C);
    void *g_wte = gpu_from(wte, (size_t)V * C), *g_out = gpu_nan(N * C), *g_dout = gpu_from(dout, N * C);
    void* g_dwte = gpu_from(dwte, (size_t)V * C);
    int32_t* g_tok = gpu_tokens(tok, N);
    gpu->encoder_forward(gpu, g_out, g_tok, g_wte, NULL, B, T, C);
    gpu->encoder_backward(gpu, g_dwte, NULL, g_dout, g_tok, B, T, C);
    EXPECT_DEVICE_CLOSE(g_out, r_out, N * C, 0.0, "encoder out without positions");
    EXPECT_DEVICE_CLOSE(g_dwte, r_dwte, (size_t)V * C, gdt() == DTYPE_F32 ? 0.0 : tolerance(1),
                        "encoder dwte without positions");
    GPU_FREE(g_wte, g_out, g_dout, g_dwte, g_tok);
    REF_FREE(r_wte, r_out, r_dout, r_dwte);
    free(wte);
    free(dout);
    free(dwte);
    free(tok);
}

static void cases(void) {
    RUN_DT(test_encoder_no_positions);
    RUN_DT(test_gqa_attention);
    RUN_DT(test_rmsnorm_forward);
    RUN_DT(test_rmsnorm_backward);
    RUN_DT(test_rope);
    RUN_DT(test_swiglu);
}

int main(void) {
    small = test_small();
    return gpu_test_each_dtype(cases);
}
