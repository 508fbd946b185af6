// test_gpu_ops.c: every op of kernels/ops.h on the CUDA backend against the
// CPU reference backend, in FP32 (relative error <= 1e-5) and BF16 (<= 1e-2,
// against the CPU run on the same BF16-rounded inputs), at several shapes
// including sizes that are not multiples of any tile or vector width.
// Outputs that are overwritten are poisoned with NaN first; outputs that
// accumulate are pre-filled with random values. Also: bit-exact conversions,
// FP32 AdamW with the CPU's bits, BF16 stochastic rounding with the expected
// bits and independent of how the range is split, deterministic backward
// passes, attention memory linear in T (T = 32768), byte accounting.
//
// TEST_SMALL=1 (the CPU execution harness, tests/cuda_sim/) keeps every shape
// small; without it the shapes go up to GPT-2 sizes and T = 4096 (32768 for
// the memory check). Each case prints its measured errors as "#" lines.
#include "kernels/cuda_seam.h"
#include "tests/gpu/gpu_test.h"

static int small;

// Every case runs in FP32 and in BF16: the dtype ends the case's name.
#define RUN_DT(fn) RUN_SUFFIXED(fn, gpu_dtype_suffix())

// ---- conversions ------------------------------------------------------------------------------------

static void test_convert(void) {
    size_t n = small ? 1003 : 1000003;
    float* x = (float*)xmalloc(n * sizeof(float));
    uint64_t key = rng_key(7, 7, 7);
    for (size_t i = 0; i < n; i++) x[i] = 3.0f * rng_normal(key, i);
    // Exact ties (round to even both ways), the largest finite values, zeros, tiny values.
    float special[] = {1.00390625f, 1.01171875f, -1.00390625f, 3.3895313892515355e38f, 0.0f, -0.0f, 1e-40f, 65504.5f};
    memcpy(x, special, sizeof special);
    float* dx = gpu_from_f32(x, n);
    uint16_t* db = (uint16_t*)gpu->alloc(gpu, n * 2, "bf16");
    gpu->convert(gpu, db, DTYPE_BF16, dx, DTYPE_F32, n);
    uint16_t* got = (uint16_t*)xmalloc(n * 2);
    gpu->to_host(gpu, got, db, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != f32_to_bf16(x[i]);
    CHECK(bad == 0, "%zu of %zu FP32 -> BF16 conversions differ from round-to-nearest-even", bad, n);
    // Back to FP32: exact.
    float* back = gpu_nan_f32(n);
    gpu->convert(gpu, back, DTYPE_F32, db, DTYPE_BF16, n);
    float* hb = gpu_read_f32(back, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += !same_bits(&hb[i], &(float){bf16_to_f32(got[i])}, 4);
    CHECK(bad == 0, "%zu BF16 -> FP32 conversions are not exact", bad);
    gpu->free(gpu, dx);
    gpu->free(gpu, db);
    gpu->free(gpu, back);
    free(x);
    free(got);
    free(hb);
}

// ---- encoder ----------------------------------------------------------------------------------------

static void encoder_case(int B, int T, int C, int V) {
    size_t N = (size_t)B * T;
    float* wte = host_normal((size_t)V * C, 1.0f);
    float* wpe = host_normal((size_t)T * C, 1.0f);
    int32_t* tok = host_tokens(N, V);
    float* r_out = ref_nan(N * C);
    float *r_wte = ref_from(wte, (size_t)V * C), *r_wpe = ref_from(wpe, (size_t)T * C);
    ref->encoder_forward(ref, r_out, tok, r_wte, r_wpe, B, T, C);
    void *g_wte = gpu_from(wte, (size_t)V * C), *g_wpe = gpu_from(wpe, (size_t)T * C), *g_out = gpu_nan(N * C);
    int32_t* g_tok = gpu_tokens(tok, N);
    gpu->encoder_forward(gpu, g_out, g_tok, g_wte, g_wpe, B, T, C);
    char what[96];
    snprintf(what, sizeof what, "encoder out B=%d T=%d C=%d", B, T, C);
    EXPECT_DEVICE_CLOSE(g_out, r_out, N * C, gdt() == DTYPE_F32 ? 0.0 : tolerance(1), what);
    ref->free(ref, r_out);
    ref->free(ref, r_wte);
    ref->free(ref, r_wpe);
    gpu->free(gpu, g_wte);
    gpu->free(gpu, g_wpe);
    gpu->free(gpu, g_out);
    gpu->free(gpu, g_tok);
    free(wte);
    free(wpe);
    free(tok);
}

static void test_encoder_forward(void) {
    encoder_case(2, 33, 40, 50);
    encoder_case(3, 17, 37, 11);  // C not a multiple of the vector width
    if (!small) encoder_case(8, 1024, 768, 50257);
}

// V small makes long runs of equal tokens; N > 2048 takes the sort's global passes.
static void encoder_backward_case(int B, int T, int C, int V) {
    size_t N = (size_t)B * T;
    float* dwte = host_normal((size_t)V * C, 1.0f);
    float* dwpe = host_normal((size_t)T * C, 1.0f);
    float* dout = host_normal(N * C, 1.0f);
    int32_t* tok = host_tokens(N, V);
    float *r_dwte = ref_from(dwte, (size_t)V * C), *r_dwpe = ref_from(dwpe, (size_t)T * C), *r_dout = ref_from(dout, N * C);
    ref->encoder_backward(ref, r_dwte, r_dwpe, r_dout, tok, B, T, C);
    void *g_dwte = gpu_from(dwte, (size_t)V * C), *g_dwpe = gpu_from(dwpe, (size_t)T * C), *g_dout = gpu_from(dout, N * C);
    int32_t* g_tok = gpu_tokens(tok, N);
    gpu->encoder_backward(gpu, g_dwte, g_dwpe, g_dout, g_tok, B, T, C);
    char what[96];
    snprintf(what, sizeof what, "encoder dwte B=%d T=%d C=%d V=%d", B, T, C, V);
    // FP32: the same additions in the same order as the CPU.
    double tol = gdt() == DTYPE_F32 ? 0.0 : tolerance(1);
    EXPECT_DEVICE_CLOSE(g_dwte, r_dwte, (size_t)V * C, tol, what);
    snprintf(what, sizeof what, "encoder dwpe B=%d T=%d C=%d", B, T, C);
    EXPECT_DEVICE_CLOSE(g_dwpe, r_dwpe, (size_t)T * C, tol, what);

    // Deterministic: the same call from the same start gives the same bits.
    float* first = gpu_read(g_dwte, (size_t)V * C);
    void* again = gpu_from(dwte, (size_t)V * C);
    gpu->encoder_backward(gpu, again, g_dwpe, g_dout, g_tok, B, T, C);
    float* second = gpu_read(again, (size_t)V * C);
    CHECK(same_bits(first, second, (size_t)V * C * sizeof(float)), "encoder backward is not deterministic");
    free(first);
    free(second);
    gpu->free(gpu, again);
    ref->free(ref, r_dwte);
    ref->free(ref, r_dwpe);
    ref->free(ref, r_dout);
    gpu->free(gpu, g_dwte);
    gpu->free(gpu, g_dwpe);
    gpu->free(gpu, g_dout);
    gpu->free(gpu, g_tok);
    free(dwte);
    free(dwpe);
    free(dout);
    free(tok);
}

static void test_encoder_backward(void) {
    encoder_backward_case(2, 33, 40, 5);
    encoder_backward_case(3, 19, 37, 300);
    encoder_backward_case(4, 1100, 16, 7);  // 4400 positions: the sort's global merge passes
    if (!small) encoder_backward_case(8, 1024, 768, 50257);
}

// ---- layernorm --------------------------------------------------------------------------------------------

static void layernorm_case(int N, int C) {
    size_t n = (size_t)N * C;
    float* inp = host_normal(n, 2.0f);
    for (size_t i = 0; i < n; i++) inp[i] = as_stored(inp[i] + 0.5f);  // a non-zero mean
    float* w = host_normal(C, 1.0f);
    float* b = host_normal(C, 1.0f);
    float *r_out = ref_nan(n), *r_mean = ref_nan(N), *r_rstd = ref_nan(N);
    float *r_inp = ref_from(inp, n), *r_w = ref_from(w, C), *r_b = ref_from(b, C);
    ref->layernorm_forward(ref, r_out, r_mean, r_rstd, r_inp, r_w, r_b, N, C, NULL);
    void *g_out = gpu_nan(n), *g_inp = gpu_from(inp, n), *g_w = gpu_from(w, C), *g_b = gpu_from(b, C);
    float *g_mean = gpu_nan_f32(N), *g_rstd = gpu_nan_f32(N);
    gpu->layernorm_forward(gpu, g_out, g_mean, g_rstd, g_inp, g_w, g_b, N, C, NULL);
    char what[96];
    snprintf(what, sizeof what, "layernorm out N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_out, r_out, n, tolerance(1), what);
    float* m = gpu_read_f32(g_mean, N);
    float* rs = gpu_read_f32(g_rstd, N);
    EXPECT_CLOSE(m, r_mean, N, 1e-5, "layernorm mean");
    EXPECT_CLOSE(rs, r_rstd, N, 1e-5, "layernorm rstd");
    free(m);
    free(rs);
    ref->free(ref, r_out);
    ref->free(ref, r_mean);
    ref->free(ref, r_rstd);
    ref->free(ref, r_inp);
    ref->free(ref, r_w);
    ref->free(ref, r_b);
    gpu->free(gpu, g_out);
    gpu->free(gpu, g_inp);
    gpu->free(gpu, g_w);
    gpu->free(gpu, g_b);
    gpu->free(gpu, g_mean);
    gpu->free(gpu, g_rstd);
    free(inp);
    free(w);
    free(b);
}

static void test_layernorm_forward(void) {
    layernorm_case(37, 40);
    layernorm_case(20, 37);
    if (!small) {
        layernorm_case(4096, 768);
        layernorm_case(1000, 2048);
    }
}

// residual = a + b; out = layernorm(residual); with residual a separate buffer or aliasing a.
static void residual_case(int N, int C, int alias) {
    size_t n = (size_t)N * C;
    float *a = host_normal(n, 1.0f), *b = host_normal(n, 1.0f), *w = host_normal(C, 1.0f), *bias = host_normal(C, 1.0f);
    float *r_a = ref_from(a, n), *r_b = ref_from(b, n), *r_w = ref_from(w, C), *r_bias = ref_from(bias, C);
    float *r_res = ref_nan(n), *r_out = ref_nan(n), *r_mean = ref_nan(N), *r_rstd = ref_nan(N);
    ref->residual_layernorm_forward(ref, r_res, r_out, r_mean, r_rstd, r_a, r_b, r_w, r_bias, N, C, NULL);
    // The reference normalises the FP32 sum; the GPU normalises the stored (rounded) residual.
    float* res_stored = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) res_stored[i] = as_stored(r_res[i]);
    float *r2_out = ref_nan(n), *r2_in = ref_from(res_stored, n);
    ref->layernorm_forward(ref, r2_out, r_mean, r_rstd, r2_in, r_w, r_bias, N, C, NULL);

    void *g_a = gpu_from(a, n), *g_b = gpu_from(b, n), *g_w = gpu_from(w, C), *g_bias = gpu_from(bias, C);
    void* g_res = alias ? g_a : gpu_nan(n);
    void* g_out = gpu_nan(n);
    float *g_mean = gpu_nan_f32(N), *g_rstd = gpu_nan_f32(N);
    gpu->residual_layernorm_forward(gpu, g_res, g_out, g_mean, g_rstd, g_a, g_b, g_w, g_bias, N, C, NULL);
    char what[96];
    snprintf(what, sizeof what, "residual N=%d C=%d%s", N, C, alias ? " (aliases a)" : "");
    EXPECT_DEVICE_CLOSE(g_res, r_res, n, tolerance(0.5), what);
    snprintf(what, sizeof what, "residual+layernorm out N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_out, r2_out, n, tolerance(1), what);
    float* m = gpu_read_f32(g_mean, N);
    EXPECT_CLOSE(m, r_mean, N, 1e-5, "residual+layernorm mean");
    free(m);
    free(res_stored);
    ref->free(ref, r_a);
    ref->free(ref, r_b);
    ref->free(ref, r_w);
    ref->free(ref, r_bias);
    ref->free(ref, r_res);
    ref->free(ref, r_out);
    ref->free(ref, r_mean);
    ref->free(ref, r_rstd);
    ref->free(ref, r2_out);
    ref->free(ref, r2_in);
    gpu->free(gpu, g_a);
    gpu->free(gpu, g_b);
    gpu->free(gpu, g_w);
    gpu->free(gpu, g_bias);
    if (!alias) gpu->free(gpu, g_res);
    gpu->free(gpu, g_out);
    gpu->free(gpu, g_mean);
    gpu->free(gpu, g_rstd);
    free(a);
    free(b);
    free(w);
    free(bias);
}

static void test_residual_layernorm(void) {
    residual_case(37, 40, 0);
    residual_case(21, 37, 1);
    if (!small) residual_case(4096, 768, 1);
}

static void layernorm_backward_case(int N, int C) {
    size_t n = (size_t)N * C;
    float *inp = host_normal(n, 1.5f), *w = host_normal(C, 1.0f), *dout = host_normal(n, 1.0f);
    float *dinp = host_normal(n, 1.0f), *dw = host_normal(C, 1.0f), *db = host_normal(C, 1.0f);
    float *r_inp = ref_from(inp, n), *r_w = ref_from(w, C), *r_dout = ref_from(dout, n);
    float *r_dinp = ref_from(dinp, n), *r_dw = ref_from(dw, C), *r_db = ref_from(db, C);
    float *r_out = ref_nan(n), *r_mean = ref_nan(N), *r_rstd = ref_nan(N), *r_bias = ref_from(w, C);
    ref->layernorm_forward(ref, r_out, r_mean, r_rstd, r_inp, r_w, r_bias, N, C, NULL);
    ref->layernorm_backward(ref, r_dinp, r_dw, r_db, r_dout, r_inp, r_w, r_mean, r_rstd, N, C, NULL);
    void *g_inp = gpu_from(inp, n), *g_w = gpu_from(w, C), *g_dout = gpu_from(dout, n);
    void *g_dinp = gpu_from(dinp, n), *g_dw = gpu_from(dw, C), *g_db = gpu_from(db, C);
    float *g_mean = gpu_from_f32(r_mean, N), *g_rstd = gpu_from_f32(r_rstd, N);
    gpu->layernorm_backward(gpu, g_dinp, g_dw, g_db, g_dout, g_inp, g_w, g_mean, g_rstd, N, C, NULL);
    char what[96];
    snprintf(what, sizeof what, "layernorm dinp (+=) N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_dinp, r_dinp, n, tolerance(1), what);
    snprintf(what, sizeof what, "layernorm dw (+=) N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_dw, r_dw, C, tolerance(1), what);
    snprintf(what, sizeof what, "layernorm db (+=) N=%d C=%d", N, C);
    EXPECT_DEVICE_CLOSE(g_db, r_db, C, tolerance(1), what);

    // Deterministic: a second run from the same start gives the same bits.
    float* first = gpu_read(g_dw, C);
    void *d2 = gpu_from(dinp, n), *w2 = gpu_from(dw, C), *b2 = gpu_from(db, C);
    gpu->layernorm_backward(gpu, d2, w2, b2, g_dout, g_inp, g_w, g_mean, g_rstd, N, C, NULL);
    float* second = gpu_read(w2, C);
    CHECK(same_bits(first, second, C * sizeof(float)), "layernorm backward is not deterministic");
    free(first);
    free(second);
    gpu->free(gpu, d2);
    gpu->free(gpu, w2);
    gpu->free(gpu, b2);

    void* bufs[] = {g_inp, g_w, g_dout, g_dinp, g_dw, g_db, g_mean, g_rstd};
    for (int i = 0; i < 8; i++) gpu->free(gpu, bufs[i]);
    REF_FREE(r_inp, r_w, r_dout, r_dinp, r_dw, r_db, r_out, r_mean, r_rstd, r_bias);
    free(inp);
    free(w);
    free(dout);
    free(dinp);
    free(dw);
    free(db);
}

static void test_layernorm_backward(void) {
    layernorm_backward_case(37, 40);
    layernorm_backward_case(130, 37);  // three blocks of rows, the last one partial
    if (!small) layernorm_backward_case(8192, 768);
}

// ---- matmul ----------------------------------------------------------------------------------------------------

// The epilogue counts of kind k (cuda_seam.h) since `before`: fused and fallback GEMMs.
static void epilogue_delta(const CudaEpilogueCounts* before, int k, long* fused, long* fallback) {
    CudaEpilogueCounts now;
    cuda_epilogue_counts(gpu, &now);
    *fused = now.fused[k] - before->fused[k];
    *fallback = now.fallback[k] - before->fallback[k];
}

// Under the harness, whose cuBLASLt takes every epilogue cuBLASLt documents,
// a fusable shape (aux leading dimension a multiple of 8, aligned buffers)
// must have taken the epilogue, and any other the fallback; on a GPU the
// heuristic decides, and the case says which ran.
static void expect_epilogue(const CudaEpilogueCounts* before, int k, int fusable, const char* what) {
    long fused, fallback;
    epilogue_delta(before, k, &fused, &fallback);
    printf("#   %-44s %s: %ld fused, %ld fallback\n", what, dtype_name(gdt()), fused, fallback);
#ifdef CUDA_SIM
    CHECK(fused + fallback == 1 && fused == fusable, "%s: %ld fused and %ld fallback GEMMs, expected %s", what, fused,
          fallback, fusable ? "the epilogue" : "the fallback");
#else
    CHECK(fused + fallback == 1, "%s: %ld fused and %ld fallback GEMMs, expected one", what, fused, fallback);
    (void)fusable;
#endif
}

static void matmul_case(int N, int C, int OC, int with_bias, int with_gelu) {
    float *inp = host_normal((size_t)N * C, 1.0f), *wt = host_normal((size_t)OC * C, 0.5f), *bias = host_normal(OC, 1.0f);
    float *r_inp = ref_from(inp, (size_t)N * C), *r_w = ref_from(wt, (size_t)OC * C), *r_b = ref_from(bias, OC);
    float *r_out = ref_nan((size_t)N * OC), *r_pre = with_gelu ? ref_nan((size_t)N * OC) : NULL;
    ref->matmul_forward(ref, r_out, r_pre, r_inp, r_w, with_bias ? r_b : NULL, N, C, OC);
    void *g_inp = gpu_from(inp, (size_t)N * C), *g_w = gpu_from(wt, (size_t)OC * C), *g_b = gpu_from(bias, OC);
    void *g_out = gpu_nan((size_t)N * OC), *g_pre = with_gelu ? gpu_nan((size_t)N * OC) : NULL;
    CudaEpilogueCounts before;
    cuda_epilogue_counts(gpu, &before);
    gpu->matmul_forward(gpu, g_out, g_pre, g_inp, g_w, with_bias ? g_b : NULL, N, C, OC);
    char what[96];
    snprintf(what, sizeof what, "matmul out N=%d C=%d OC=%d%s%s", N, C, OC, with_bias ? " +bias" : "",
             with_gelu ? " +gelu" : "");
    EXPECT_DEVICE_CLOSE(g_out, r_out, (size_t)N * OC, tolerance(1), what);
    if (with_gelu) {
        EXPECT_DEVICE_CLOSE(g_pre, r_pre, (size_t)N * OC, tolerance(1), "matmul pre_gelu");
        expect_epilogue(&before, 0, OC % 8 == 0, "matmul GELU_AUX epilogue");
        // The same inputs give the same bits (recompute of a kept layer re-runs this).
        float* first = gpu_read(g_out, (size_t)N * OC);
        gpu->matmul_forward(gpu, g_out, g_pre, g_inp, g_w, with_bias ? g_b : NULL, N, C, OC);
        float* again = gpu_read(g_out, (size_t)N * OC);
        CHECK(same_bits(first, again, (size_t)N * OC * sizeof(float)), "matmul +gelu: two calls differ");
        free(first);
        free(again);
    }
    ref->free(ref, r_inp);
    ref->free(ref, r_w);
    ref->free(ref, r_b);
    ref->free(ref, r_out);
    if (r_pre) ref->free(ref, r_pre);
    gpu->free(gpu, g_inp);
    gpu->free(gpu, g_w);
    gpu->free(gpu, g_b);
    gpu->free(gpu, g_out);
    if (g_pre) gpu->free(gpu, g_pre);
    free(inp);
    free(wt);
    free(bias);
}

static void test_matmul_forward(void) {
    matmul_case(37, 24, 40, 1, 0);
    matmul_case(37, 24, 40, 0, 0);
    matmul_case(33, 64, 96, 1, 1);
    matmul_case(16, 32, 64, 0, 1);
    if (gdt() == DTYPE_F32) matmul_case(19, 13, 7, 1, 1);  // odd everything (BF16 GEMMs want 16-byte rows)
    if (!small) {
        matmul_case(4096, 768, 2304, 1, 0);
        matmul_case(4096, 768, 3072, 1, 1);
        matmul_case(2048, 768, 50304, 0, 0);
    }
}

static void matmul_backward_case(int N, int C, int OC) {
    float *inp = host_normal((size_t)N * C, 1.0f), *wt = host_normal((size_t)OC * C, 0.5f);
    float *dout = host_normal((size_t)N * OC, 1.0f), *dw = host_normal((size_t)OC * C, 1.0f), *db = host_normal(OC, 1.0f);
    float *r_inp = ref_from(inp, (size_t)N * C), *r_w = ref_from(wt, (size_t)OC * C), *r_dout = ref_from(dout, (size_t)N * OC);
    float *r_dinp = ref_nan((size_t)N * C), *r_dw = ref_from(dw, (size_t)OC * C), *r_db = ref_from(db, OC);
    ref->matmul_backward(ref, r_dinp, r_dw, r_db, r_dout, r_inp, r_w, N, C, OC);
    void *g_inp = gpu_from(inp, (size_t)N * C), *g_w = gpu_from(wt, (size_t)OC * C), *g_dout = gpu_from(dout, (size_t)N * OC);
    void *g_dinp = gpu_nan((size_t)N * C), *g_dw = gpu_from(dw, (size_t)OC * C), *g_db = gpu_from(db, OC);
    CudaEpilogueCounts counts;
    cuda_epilogue_counts(gpu, &counts);
    gpu->matmul_backward(gpu, g_dinp, g_dw, g_db, g_dout, g_inp, g_w, N, C, OC);
    expect_epilogue(&counts, 2, 1, "matmul dweight GEMM's BGRADB epilogue");
    char what[96];
    snprintf(what, sizeof what, "matmul dinp N=%d C=%d OC=%d", N, C, OC);
    EXPECT_DEVICE_CLOSE(g_dinp, r_dinp, (size_t)N * C, tolerance(1), what);
    snprintf(what, sizeof what, "matmul dweight (+=) N=%d C=%d OC=%d", N, C, OC);
    EXPECT_DEVICE_CLOSE(g_dw, r_dw, (size_t)OC * C, tolerance(1), what);
    snprintf(what, sizeof what, "matmul dbias (+=) N=%d OC=%d", N, OC);
    EXPECT_DEVICE_CLOSE(g_db, r_db, OC, tolerance(1), what);
    // Only dweight: the other outputs stay untouched.
    float* before = gpu_read(g_db, OC);
    gpu->matmul_backward(gpu, NULL, g_dw, NULL, g_dout, g_inp, g_w, N, C, OC);
    float* after = gpu_read(g_db, OC);
    CHECK(same_bits(before, after, OC * sizeof(float)), "matmul backward wrote dbias it was not given");
    free(before);
    free(after);
    void* bufs[] = {g_inp, g_w, g_dout, g_dinp, g_dw, g_db};
    for (int i = 0; i < 6; i++) gpu->free(gpu, bufs[i]);
    REF_FREE(r_inp, r_w, r_dout, r_dinp, r_dw, r_db);
    free(inp);
    free(wt);
    free(dout);
    free(dw);
    free(db);
}

static void test_matmul_backward(void) {
    matmul_backward_case(37, 24, 40);
    matmul_backward_case(300, 32, 96);  // three row chunks of the bias reduction
    if (gdt() == DTYPE_F32) matmul_backward_case(19, 13, 7);
    if (!small) {
        matmul_backward_case(4096, 768, 3072);
        matmul_backward_case(4096, 3072, 768);
    }
}

// The GELU-gradient GEMM: the reference is the CPU's three ops (GEMM, GELU
// backward, bias gradient), which ops.h defines it by.
static void matmul_dgelu_case(int N, int C, int OC, int with_bias) {
    float *pre = host_normal((size_t)N * C, 2.0f), *wt = host_normal((size_t)OC * C, 0.5f);
    float *dout = host_normal((size_t)N * OC, 1.0f), *db = host_normal(C, 1.0f);
    float *r_pre = ref_from(pre, (size_t)N * C), *r_w = ref_from(wt, (size_t)OC * C), *r_dout = ref_from(dout, (size_t)N * OC);
    float *r_dinp = ref_nan((size_t)N * C), *r_db = ref_from(db, C);
    ref->matmul_backward(ref, r_dinp, NULL, NULL, r_dout, NULL, r_w, N, C, OC);
    ref->gelu_backward(ref, r_dinp, r_pre, r_dinp, (size_t)N * C, NULL);
    if (with_bias) ref->matmul_backward(ref, NULL, NULL, r_db, r_dinp, NULL, NULL, N, OC, C);
    void *g_pre = gpu_from(pre, (size_t)N * C), *g_w = gpu_from(wt, (size_t)OC * C), *g_dout = gpu_from(dout, (size_t)N * OC);
    void *g_dinp = gpu_nan((size_t)N * C), *g_db = gpu_from(db, C);
    float zero = 0.0f, *g_amax = gpu_from_f32(&zero, 1);
    CudaEpilogueCounts before;
    cuda_epilogue_counts(gpu, &before);
    gpu->matmul_backward_dgelu(gpu, g_dinp, with_bias ? g_db : NULL, g_dout, g_pre, g_w, N, C, OC, g_amax);
    char what[96];
    snprintf(what, sizeof what, "matmul dgelu N=%d C=%d OC=%d%s", N, C, OC, with_bias ? " +bgrad" : "");
    expect_epilogue(&before, 1, C % 8 == 0, what);
    EXPECT_DEVICE_CLOSE(g_dinp, r_dinp, (size_t)N * C, tolerance(1), what);
    // dbias accumulates onto random values; without a bias it stays untouched.
    snprintf(what, sizeof what, "matmul dgelu dbias (+=) N=%d C=%d", N, C);
    if (with_bias) EXPECT_DEVICE_CLOSE(g_db, r_db, C, tolerance(2), what);
    else EXPECT_DEVICE_CLOSE(g_db, db, C, 0.0, "matmul dgelu left dbias alone");
    // amax of dinp as stored, against the largest |dinp| read back.
    float* got = gpu_read(g_dinp, (size_t)N * C);
    float* amax = gpu_read_f32(g_amax, 1);
    float top = 0.0f;
    for (size_t i = 0; i < (size_t)N * C; i++) top = fmaxf(top, fabsf(got[i]));
    CHECK(amax[0] == top, "matmul dgelu amax %g, the largest |dinp| is %g", amax[0], top);
    // The same inputs give the same bits.
    gpu->matmul_backward_dgelu(gpu, g_dinp, NULL, g_dout, g_pre, g_w, N, C, OC, NULL);
    float* again = gpu_read(g_dinp, (size_t)N * C);
    CHECK(same_bits(got, again, (size_t)N * C * sizeof(float)), "matmul dgelu: two calls differ");
    free(got);
    free(again);
    free(amax);
    void* bufs[] = {g_pre, g_w, g_dout, g_dinp, g_db, g_amax};
    for (int i = 0; i < 6; i++) gpu->free(gpu, bufs[i]);
    REF_FREE(r_pre, r_w, r_dout, r_dinp, r_db);
    free(pre);
    free(wt);
    free(dout);
    free(db);
}

static void test_matmul_backward_dgelu(void) {
    matmul_dgelu_case(37, 96, 24, 1);
    matmul_dgelu_case(300, 64, 40, 1);  // several row chunks of the fallback's bias reduction
    matmul_dgelu_case(33, 64, 32, 0);
    if (gdt() == DTYPE_F32) matmul_dgelu_case(19, 13, 7, 1);  // aux leading dimension 13: the fallback
    if (!small) matmul_dgelu_case(4096, 3072, 768, 1);
}

// ---- gelu ----------------------------------------------------------------------------------------------------------

static void test_gelu(void) {
    size_t n = small ? 1001 : 4000037;
    float *x = host_normal(n, 3.0f), *g = host_normal(n, 1.0f);
    x[0] = -30.0f;  // far tails: exp overflow must not give NaN
    x[1] = 30.0f;
    float *r_x = ref_from(x, n), *r_g = ref_from(g, n), *r_out = ref_nan(n), *r_din = ref_nan(n);
    ref->gelu_forward(ref, r_out, r_x, n, NULL);
    ref->gelu_backward(ref, r_din, r_x, r_g, n, NULL);
    void *g_x = gpu_from(x, n), *g_g = gpu_from(g, n), *g_out = gpu_nan(n), *g_din = gpu_nan(n);
    gpu->gelu_forward(gpu, g_out, g_x, n, NULL);
    gpu->gelu_backward(gpu, g_din, g_x, g_g, n, NULL);
    EXPECT_DEVICE_CLOSE(g_out, r_out, n, tolerance(1), "gelu forward");
    EXPECT_DEVICE_CLOSE(g_din, r_din, n, tolerance(1), "gelu backward");
    gpu->gelu_backward(gpu, g_g, g_x, g_g, n, NULL);  // in place: dinp aliases dout
    EXPECT_DEVICE_CLOSE(g_g, r_din, n, tolerance(1), "gelu backward in place");
    // Unaligned start: the scalar path.
    size_t es = gsize();
    gpu->gelu_forward(gpu, (char*)g_out + es, (char*)g_x + es, n - 1, NULL);
    EXPECT_DEVICE_CLOSE(g_out, r_out, n, tolerance(1), "gelu forward, unaligned");
    void* bufs[] = {g_x, g_g, g_out, g_din};
    for (int i = 0; i < 4; i++) gpu->free(gpu, bufs[i]);
    REF_FREE(r_x, r_g, r_out, r_din);
    free(x);
    free(g);
}

// ---- attention -------------------------------------------------------------------------------------------------------

static void attention_case(int B, int T, int NH, int HS) {
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = host_normal(nqkv, 1.0f), *dout = host_normal(nout, 1.0f);
    float *r_qkv = ref_from(qkv, nqkv), *r_out = ref_nan(nout), *r_lse = ref_nan(nlse);
    ref->attention_forward(ref, r_out, r_lse, r_qkv, B, T, NH, NH, HS);
    void *g_qkv = gpu_from(qkv, nqkv), *g_out = gpu_nan(nout);
    float* g_lse = gpu_nan_f32(nlse);
    gpu->attention_forward(gpu, g_out, g_lse, g_qkv, B, T, NH, NH, HS);
    char what[96];
    snprintf(what, sizeof what, "attention out B=%d T=%d NH=%d HS=%d", B, T, NH, HS);
    EXPECT_DEVICE_CLOSE(g_out, r_out, nout, tolerance(1), what);
    float* lse = gpu_read_f32(g_lse, nlse);
    EXPECT_CLOSE(lse, r_lse, nlse, tolerance(0.5), "attention lse");
    free(lse);

    // Backward from the GPU's own forward (out, lse), against the CPU's from its own.
    float* out_g = gpu_read(g_out, nout);
    float *r_dout = ref_from(dout, nout), *r_dqkv = ref_nan(nqkv);
    ref->attention_backward(ref, r_dqkv, r_dout, r_qkv, r_out, r_lse, B, T, NH, NH, HS);
    void *g_dout = gpu_from(dout, nout), *g_dqkv = gpu_nan(nqkv);
    gpu->attention_backward(gpu, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, NH, NH, HS);
    snprintf(what, sizeof what, "attention dqkv B=%d T=%d NH=%d HS=%d", B, T, NH, HS);
    EXPECT_DEVICE_CLOSE(g_dqkv, r_dqkv, nqkv, tolerance(2), what);
    // Deterministic.
    float* first = gpu_read(g_dqkv, nqkv);
    gpu->attention_backward(gpu, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, NH, NH, HS);
    float* second = gpu_read(g_dqkv, nqkv);
    CHECK(same_bits(first, second, nqkv * sizeof(float)), "attention backward is not deterministic");
    free(first);
    free(second);
    free(out_g);
    gpu->free(gpu, g_qkv);
    gpu->free(gpu, g_out);
    gpu->free(gpu, g_lse);
    gpu->free(gpu, g_dout);
    gpu->free(gpu, g_dqkv);
    ref->free(ref, r_qkv);
    ref->free(ref, r_out);
    ref->free(ref, r_lse);
    ref->free(ref, r_dout);
    ref->free(ref, r_dqkv);
    free(qkv);
    free(dout);
}

static void test_attention(void) {
    attention_case(1, 1, 1, 32);    // a single token
    attention_case(2, 17, 2, 32);   // T below one tile
    attention_case(1, 64, 1, 64);   // exactly one tile
    attention_case(1, 100, 2, 64);  // two tiles, the second partial
    attention_case(1, 70, 1, 128);
    attention_case(1, 37, 3, 16);   // a head size without tensor-core kernels
    attention_case(1, 200, 1, 64);  // four tiles: several key blocks per query block and back
    if (!small) {
        attention_case(4, 257, 12, 64);
        attention_case(2, 1024, 4, 64);
        attention_case(1, 2048, 2, 32);
        attention_case(1, 4096, 2, 128);
        attention_case(1, 1000, 2, 96);
    }
}

// Peak memory of forward + backward at long T stays linear in T: nothing
// beyond the inputs, outputs and O(B*NH*T) scratch.
static void test_attention_memory(void) {
    int B = 1, NH = 2, HS = 64, C = NH * HS;
    int T = small ? 2048 : 32768;
    Backend* saved = gpu;
    gpu = cuda_backend_create(saved->dtype);  // fresh counters
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float* qkv = host_normal(nqkv, 1.0f);
    void *g_qkv = gpu_from(qkv, nqkv), *g_out = gpu_nan(nout), *g_dqkv = gpu_nan(nqkv), *g_dout = gpu_from(qkv, nout);
    float* g_lse = gpu_nan_f32(nlse);
    size_t base = gpu->allocated_bytes(gpu);
    gpu->attention_forward(gpu, g_out, g_lse, g_qkv, B, T, NH, NH, HS);
    gpu->attention_backward(gpu, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, NH, NH, HS);
    gpu->synchronize(gpu);
    size_t extra = gpu->peak_allocated_bytes(gpu) - base;
    size_t linear = (size_t)64 * B * NH * T + ((size_t)4 << 20);
    printf("#   attention T=%d: %zu bytes beyond inputs and outputs (linear bound %zu, a T x T matrix is %zu)\n", T,
           extra, linear, (size_t)T * T * gsize());
    CHECK(extra <= linear, "attention at T=%d took %zu extra bytes, more than the linear bound %zu", T, extra, linear);
    float* out = gpu_read(g_out, nout);
    float* d = gpu_read(g_dqkv, nqkv);
    CHECK(rel_error(out, out, nout) == 0 && rel_error(d, d, nqkv) == 0, "attention at T=%d gave non-finite values", T);
    free(out);
    free(d);
    free(qkv);
    gpu->destroy(gpu);
    gpu = saved;
}

// ---- classifier ------------------------------------------------------------------------------------------------------

static void cross_entropy_case(int N, int V, int Vp, float dloss) {
    size_t n = (size_t)N * Vp;
    float* logits = host_normal(n, 3.0f);
    int32_t* tgt = host_tokens(N, V);
    // Pads (context parallelism's, target -1): no loss, a zero gradient row.
    if (N > 3) tgt[1] = tgt[N - 1] = -1;
    float *r_logits = ref_from(logits, n), *r_loss = ref_nan(N);
    ref->cross_entropy(ref, r_loss, r_logits, tgt, N, V, Vp, dloss);
    if (N > 3) CHECK(r_loss[1] == 0.0f && r_loss[N - 1] == 0.0f, "the CPU's loss of a pad is not 0");
    void* g_logits = gpu_from(logits, n);
    float* g_loss = gpu_nan_f32(N);
    int32_t* g_tgt = gpu_tokens(tgt, N);
    gpu->cross_entropy(gpu, g_loss, g_logits, g_tgt, N, V, Vp, dloss);
    char what[96];
    snprintf(what, sizeof what, "cross-entropy losses N=%d V=%d Vp=%d", N, V, Vp);
    float* loss = gpu_read_f32(g_loss, N);
    EXPECT_CLOSE(loss, r_loss, N, 1e-5, what);
    free(loss);
    if (dloss != 0.0f) {
        snprintf(what, sizeof what, "cross-entropy dlogits (in place) N=%d V=%d", N, V);
        EXPECT_DEVICE_CLOSE(g_logits, r_logits, n, tolerance(1), what);
    } else {
        float* same = gpu_read(g_logits, n);
        CHECK(same_bits(same, logits, n * sizeof(float)), "cross-entropy with dloss 0 changed the logits");
        free(same);
    }
    gpu->free(gpu, g_logits);
    gpu->free(gpu, g_loss);
    gpu->free(gpu, g_tgt);
    ref->free(ref, r_logits);
    ref->free(ref, r_loss);
    free(logits);
    free(tgt);
}

static void test_cross_entropy(void) {
    cross_entropy_case(37, 1000, 1024, 1.0f / 37);
    cross_entropy_case(5, 203, 203, 0.5f);   // V = Vp, odd: the scalar path
    cross_entropy_case(9, 500, 512, 0.0f);   // loss only
    if (!small) cross_entropy_case(2048, 50257, 50304, 1.0f / 2048);
}

// ---- reductions --------------------------------------------------------------------------------------------------------

static void test_sums(void) {
    size_t sizes[] = {1, 1000, 100003, 10000019};
    int count = small ? 3 : 4;
    for (int k = 0; k < count; k++) {
        size_t n = sizes[k];
        float* x = host_normal(n, 1.0f);
        float* r_x = ref_from(x, n);
        float* r_out = ref_from((float[]){0.25f, 0.25f}, 2);
        ref->sum(ref, &r_out[0], r_x, n, 1);
        ref->sum_squares(ref, &r_out[1], r_x, n, 0);
        float* gx32 = gpu_from_f32(x, n);
        void* gx = gpu_from(x, n);
        float* g_out = gpu_from_f32((float[]){0.25f, NAN}, 2);
        gpu->sum(gpu, &g_out[0], gx32, n, 1);
        gpu->sum_squares(gpu, &g_out[1], gx, n, 0);
        float got[2];
        gpu->to_host(gpu, got, g_out, sizeof got);
        char what[64];
        snprintf(what, sizeof what, "sum (+=) n=%zu", n);
        CHECK_CLOSE(got[0], r_out[0], 1e-6 * sqrt((double)n), 1e-6, what);
        snprintf(what, sizeof what, "sum of squares n=%zu", n);
        CHECK_CLOSE(got[1], r_out[1], 0, 1e-6, what);
        if (n > 1) {  // from the second element: not 16-byte aligned, the scalar path
            ref->sum_squares(ref, &r_out[1], r_x + 1, n - 1, 0);
            gpu->sum_squares(gpu, &g_out[1], (char*)gx + gsize(), n - 1, 0);
            gpu->to_host(gpu, got, g_out, sizeof got);
            CHECK_CLOSE(got[1], r_out[1], 0, 1e-6, "sum of squares, unaligned");
        }
        gpu->free(gpu, gx32);
        gpu->free(gpu, gx);
        gpu->free(gpu, g_out);
        ref->free(ref, r_x);
        ref->free(ref, r_out);
        free(x);
    }
}

// ---- AdamW ------------------------------------------------------------------------------------------------------------------

static AdamWParams adam_params(void) {
    AdamWParams p;
    p.lr = 1e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.grad_scale = 0.7f;
    p.step = 3;
    p.seed = 0x5eed;
    p.index_base = 1000;
    p.amax = NULL;
    p.moment_dtype = DTYPE_F32;
    return p;
}

static void test_adamw(void) {
    size_t n = small ? 10007 : 3000017;
    float *w = host_normal(n, 1.0f), *g = host_normal(n, 1.0f), *m = host_normal(n, 0.1f), *v = host_normal(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    // FP32 master weights are not rounded (host_normal rounds in BF16 mode).
    uint64_t key = rng_key(99, 1, 1);
    for (size_t i = 0; i < n; i++) w[i] = rng_normal(key, i);
    AdamWParams p = adam_params();
    float *r_w = ref_from(w, n), *r_m = ref_from(m, n), *r_v = ref_from(v, n), *r_g = ref_from(g, n);
    ref->adamw(ref, r_w, NULL, r_g, r_m, r_v, n, &p);
    float *g_m = gpu_from_f32(m, n), *g_v = gpu_from_f32(v, n);
    void* g_g = gpu_from(g, n);
    if (gdt() == DTYPE_F32) {
        float* g_w = gpu_from_f32(w, n);
        gpu->adamw(gpu, g_w, NULL, g_g, g_m, g_v, n, &p);
        float *hw = gpu_read_f32(g_w, n), *hm = gpu_read_f32(g_m, n), *hv = gpu_read_f32(g_v, n);
        CHECK(same_bits(hw, r_w, n * 4), "FP32 AdamW parameters differ from the CPU's bits (rel err %.3g)",
              rel_error(hw, r_w, n));
        CHECK(same_bits(hm, r_m, n * 4) && same_bits(hv, r_v, n * 4), "FP32 AdamW moments differ from the CPU's bits");
        // With a separate FP32 master copy the parameters receive the master's values.
        float *g_w2 = gpu_nan_f32(n), *g_master = gpu_from_f32(w, n), *g_m2 = gpu_from_f32(m, n), *g_v2 = gpu_from_f32(v, n);
        gpu->adamw(gpu, g_w2, g_master, g_g, g_m2, g_v2, n, &p);
        float *hw2 = gpu_read_f32(g_w2, n), *hmaster = gpu_read_f32(g_master, n);
        CHECK(same_bits(hw2, r_w, n * 4) && same_bits(hmaster, r_w, n * 4),
              "FP32 AdamW with a master copy differs from the CPU's bits");
        free(hw2);
        free(hmaster);
        gpu->free(gpu, g_w2);
        gpu->free(gpu, g_master);
        gpu->free(gpu, g_m2);
        gpu->free(gpu, g_v2);
        free(hw);
        free(hm);
        free(hv);
        gpu->free(gpu, g_w);
    } else {
        float* g_master = gpu_from_f32(w, n);
        void* g_p = gpu_nan(n);
        gpu->adamw(gpu, g_p, g_master, g_g, g_m, g_v, n, &p);
        float* hmaster = gpu_read_f32(g_master, n);
        CHECK(same_bits(hmaster, r_w, n * 4), "BF16 AdamW master weights differ from the CPU's FP32 bits");
        // Parameters: stochastic rounding of the master with 16 bits of rng_u64(seed, index_base + i).
        uint16_t* hp = (uint16_t*)xmalloc(n * 2);
        gpu->to_host(gpu, hp, g_p, n * 2);
        size_t bad = 0, up = 0, inexact = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &hmaster[i], 4);
            uint32_t r = (uint32_t)(rng_u64(p.seed, p.index_base + i) >> 48);
            uint16_t want = (uint16_t)(((u + r) & 0xffff0000u) >> 16);
            bad += hp[i] != want;
            inexact += (u & 0xffffu) != 0;
            up += hp[i] != (uint16_t)(u >> 16);
        }
        CHECK(bad == 0, "%zu of %zu stochastically rounded parameters have unexpected bits", bad, n);
        // Rounding up happens about as often as the mean distance to the lower neighbour (1/2).
        double frac = inexact ? (double)up / inexact : 0.5;
        printf("#   stochastic rounding: %.4f of inexact values rounded up (expect ~0.5)\n", frac);
        CHECK(frac > 0.45 && frac < 0.55, "stochastic rounding rounded up %.3f of values", frac);
        // The same update split in two calls gives the same bits.
        float *m2 = gpu_from_f32(m, n), *v2 = gpu_from_f32(v, n), *master2 = gpu_from_f32(w, n);
        void* p2 = gpu_nan(n);
        size_t k = n / 3;
        AdamWParams q = p;
        gpu->adamw(gpu, p2, master2, g_g, m2, v2, k, &q);
        q.index_base = p.index_base + k;
        gpu->adamw(gpu, (char*)p2 + k * 2, master2 + k, (char*)g_g + k * 2, m2 + k, v2 + k, n - k, &q);
        uint16_t* hp2 = (uint16_t*)xmalloc(n * 2);
        gpu->to_host(gpu, hp2, p2, n * 2);
        CHECK(same_bits(hp, hp2, n * 2), "stochastic rounding depends on how the range was split");
        free(hp);
        free(hp2);
        free(hmaster);
        gpu->free(gpu, m2);
        gpu->free(gpu, v2);
        gpu->free(gpu, master2);
        gpu->free(gpu, p2);
        gpu->free(gpu, g_master);
        gpu->free(gpu, g_p);
    }
    gpu->free(gpu, g_m);
    gpu->free(gpu, g_v);
    gpu->free(gpu, g_g);
    ref->free(ref, r_w);
    ref->free(ref, r_m);
    ref->free(ref, r_v);
    ref->free(ref, r_g);
    free(w);
    free(g);
    free(m);
    free(v);
}

// ---- memory accounting ----------------------------------------------------------------------------------------------------

static void test_memory_accounting(void) {
    size_t before = gpu->allocated_bytes(gpu);
    void* a = gpu->alloc(gpu, 12345, "a");
    void* b = gpu->alloc(gpu, 1 << 20, "b");
    CHECK(gpu->allocated_bytes(gpu) == before + 12345 + (1 << 20), "allocated bytes do not add up");
    CHECK(gpu->peak_allocated_bytes(gpu) >= before + 12345 + (1 << 20), "peak is below the current allocation");
    gpu->free(gpu, a);
    CHECK(gpu->allocated_bytes(gpu) == before + (1 << 20), "free did not subtract the size");
    gpu->free(gpu, b);
    CHECK(gpu->allocated_bytes(gpu) == before, "allocated bytes did not return to the start");
    CHECK(gpu->native_stream(gpu) != NULL, "the CUDA backend has no stream");
}

static void cases(void) {
    if (gdt() == DTYPE_F32) RUN_DT(test_convert);
    RUN_DT(test_memory_accounting);
    RUN_DT(test_encoder_forward);
    RUN_DT(test_encoder_backward);
    RUN_DT(test_layernorm_forward);
    RUN_DT(test_residual_layernorm);
    RUN_DT(test_layernorm_backward);
    RUN_DT(test_matmul_forward);
    RUN_DT(test_matmul_backward);
    RUN_DT(test_matmul_backward_dgelu);
    RUN_DT(test_gelu);
    RUN_DT(test_attention);
    RUN_DT(test_attention_memory);
    RUN_DT(test_cross_entropy);
    RUN_DT(test_sums);
    RUN_DT(test_adamw);
}

int main(void) {
    small = test_small();
    return gpu_test_each_dtype(cases);
}
