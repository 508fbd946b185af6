// test_gpu_fp8.c: FP8 on the CUDA backend against the CPU backend's exact
// emulation (kernels/cpu/fp8.c):
//   - amax of an activation buffer: the same float on both;
//   - casts to E4M3 and E5M2 (current scaling from the amax, and a given
//     delayed scale), plain and transposed copies: the same codes, bit for
//     bit, and the same scale and scale_inv;
//   - the delayed-scale update: the same scales, bit for bit;
//   - the three FP8 GEMMs of a linear layer (forward E4M3 x E4M3 with bias,
//     dinp E5M2 x E4M3, dweight E4M3 x E5M2 accumulated onto a non-zero
//     gradient) on the same codes and scales: within BF16 output rounding
//     (1e-2 of the largest value; the forward uses fast accumulation). On
//     Hopper-class GPUs the backward reads the transposed copies (TN);
//     under the CPU execution harness the same test also runs as a
//     Blackwell (CUDA_SIM_CC=100: NN and NT layouts);
//   - a short FP8 training run on the GPU (BF16 storage, delayed scaling)
//     follows the CPU FP8 run (FP32 storage) on the same batches: every
//     step's loss within 0.05, and the loss falls.
// The GPU backend computes in BF16, as FP8 training does.
#include "llm/arch/arch.h"
#include "llm/fp8/fp8.h"
#include "kernels/fp8_format.h"
#include "llm/model/model.h"
#include "llm/trainer.h"
#include "tests/gpu/gpu_test.h"

static int small;
static const char* cc_label = "";  // "_sm100" for the harness's Blackwell pass

#define RUN_CC(fn) RUN_SUFFIXED(fn, cc_label)

// Host codes of x (rows, cols) cast by the CPU backend: q, qt, scale, scale_inv.
typedef struct {
    uint8_t *q, *qt;
    float scale, scale_inv;
    DType fmt;
    int rows, cols;
} HostFp8;

static HostFp8 ref_cast(const float* x, int rows, int cols, DType fmt) {
    HostFp8 h = {.fmt = fmt, .rows = rows, .cols = cols};
    size_t n = (size_t)rows * cols;
    float* rx = ref_from(x, n);
    float* amax = ref_from((float[]){0.0f}, 1);
    float* sc = ref_nan(2);
    h.q = (uint8_t*)xmalloc(n);
    h.qt = (uint8_t*)xmalloc(n);
    ref->amax(ref, amax, rx, n);
    ref->fp8_quantize(ref, h.q, h.qt, fmt, rx, rows, cols, amax, &sc[0], &sc[1]);
    h.scale = sc[0];
    h.scale_inv = sc[1];
    ref->free(ref, rx);
    ref->free(ref, amax);
    ref->free(ref, sc);
    return h;
}

// The same codes and scale_inv on the GPU, as an Fp8Tensor (buffers returned for freeing).
static Fp8Tensor gpu_fp8(const HostFp8* h, void** bufs) {
    size_t n = (size_t)h->rows * h->cols;
    bufs[0] = gpu->alloc(gpu, n, "test fp8");
    bufs[1] = gpu->alloc(gpu, n, "test fp8 transposed");
    bufs[2] = gpu_from_f32(&h->scale_inv, 1);
    gpu->to_device(gpu, bufs[0], h->q, n);
    gpu->to_device(gpu, bufs[1], h->qt, n);
    Fp8Tensor t = {bufs[0], gpu->fp8_support == FP8_TN_ONLY ? bufs[1] : NULL, h->fmt, (const float*)bufs[2]};
    return t;
}

static Fp8Tensor ref_fp8(const HostFp8* h, float** scale_inv) {
    *scale_inv = ref_from(&h->scale_inv, 1);
    Fp8Tensor t = {h->q, NULL, h->fmt, *scale_inv};
    return t;
}

static void free_gpu_fp8(void** bufs) {
    for (int i = 0; i < 3; i++) gpu->free(gpu, bufs[i]);
}

static void test_casts_bitwise(void) {
    int rows = small ? 48 : 1024, cols = small ? 80 : 768;
    size_t n = (size_t)rows * cols;
    float* x = host_normal(n, 3.0f);
    x[5] = as_stored(-417.0f);  // a large value sets the amax
    DType fmts[2] = {DTYPE_FP8_E4M3, DTYPE_FP8_E5M2};
    for (int f = 0; f < 2; f++) {
        for (int delayed = 0; delayed < 2; delayed++) {
            HostFp8 want;
            float* rx = ref_from(x, n);
            float* ramax = ref_from((float[]){0.0f}, 1);
            float rsc[2] = {delayed ? 0.37f : NAN, delayed ? 1.0f / 0.37f : NAN};
            float* rs = ref_from(rsc, 2);
            want.q = (uint8_t*)xmalloc(n);
            want.qt = (uint8_t*)xmalloc(n);
            ref->amax(ref, ramax, rx, n);
            ref->fp8_quantize(ref, want.q, want.qt, fmts[f], rx, rows, cols, delayed ? NULL : ramax, &rs[0], &rs[1]);

            void* gx = gpu_from(x, n);
            float* gamax = gpu_from_f32((float[]){0.0f}, 1);
            float* gs = gpu_from_f32(rsc, 2);
            uint8_t* gq = (uint8_t*)gpu->alloc(gpu, n, "q");
            uint8_t* gqt = (uint8_t*)gpu->alloc(gpu, n, "qt");
            uint8_t* junk = (uint8_t*)xmalloc(n);
            memset(junk, 0xAB, n);  // poison: every code must be written
            gpu->to_device(gpu, gq, junk, n);
            gpu->to_device(gpu, gqt, junk, n);
            free(junk);
            gpu->amax(gpu, gamax, gx, n);
            gpu->fp8_quantize(gpu, gq, gqt, fmts[f], gx, rows, cols, delayed ? NULL : gamax, &gs[0], &gs[1]);
            float amax_g, s_g[2];
            gpu->to_host(gpu, &amax_g, gamax, 4);
            gpu->to_host(gpu, s_g, gs, 8);
            uint8_t* q = (uint8_t*)xmalloc(n);
            uint8_t* qt = (uint8_t*)xmalloc(n);
            gpu->to_host(gpu, q, gq, n);
            gpu->to_host(gpu, qt, gqt, n);
            const char* what = f ? "E5M2" : "E4M3";
            CHECK(amax_g == ramax[0] && amax_g == fabsf(x[5]), "amax %.9g on the GPU, %.9g on the CPU", amax_g, ramax[0]);
            CHECK(same_bits(s_g, rs, 8), "%s %s scale %.9g / %.9g, CPU %.9g / %.9g", what,
                  delayed ? "delayed" : "current", s_g[0], s_g[1], rs[0], rs[1]);
            CHECK(same_bits(q, want.q, n) && same_bits(qt, want.qt, n), "%s %s codes differ from the CPU's", what,
                  delayed ? "delayed" : "current");
            free(q);
            free(qt);
            free(want.q);
            free(want.qt);
            gpu->free(gpu, gx);
            gpu->free(gpu, gamax);
            gpu->free(gpu, gs);
            gpu->free(gpu, gq);
            gpu->free(gpu, gqt);
            ref->free(ref, rx);
            ref->free(ref, ramax);
            ref->free(ref, rs);
        }
    }
    free(x);
}

static void test_delayed_update_bitwise(void) {
    int len = 5, n = 7;
    size_t ld = 8;  // a wider row than n: only n columns belong to these tensors
    float hist[5 * 8];
    for (int i = 0; i < len * (int)ld; i++) hist[i] = 0.01f * (float)((i * 37) % 101);
    hist[2 * ld + 1] = 3000.0f;  // a spike in the window
    hist[1 * ld + 3] = INFINITY;  // the current row's non-finite amax becomes 0
    for (int r = 0; r < len; r++) hist[r * ld + 6] = 0.0f;  // an all-zero column keeps its scale
    float sc[16];
    for (int i = 0; i < 8; i++) sc[i] = 2.0f + (float)i, sc[8 + i] = 1.0f / sc[i];
    DType fmts[2] = {DTYPE_FP8_E4M3, DTYPE_FP8_E5M2};
    for (int f = 0; f < 2; f++) {
        float* rh = ref_from(hist, sizeof hist / 4);
        float* rs = ref_from(sc, 16);
        float* gh = gpu_from_f32(hist, sizeof hist / 4);
        float* gs = gpu_from_f32(sc, 16);
        ref->fp8_update_scales(ref, rs, rs + 8, rh, len, ld, 1, (size_t)n, fmts[f], 1);
        gpu->fp8_update_scales(gpu, gs, gs + 8, gh, len, ld, 1, (size_t)n, fmts[f], 1);
        float got[16], goth[5 * 8];
        gpu->to_host(gpu, got, gs, sizeof got);
        gpu->to_host(gpu, goth, gh, sizeof goth);
        CHECK(same_bits(got, rs, sizeof got) && same_bits(goth, rh, sizeof goth), "%s delayed scales differ",
              dtype_name(fmts[f]));
        CHECK(rs[6] == sc[6], "an all-zero history changed the scale (%g)", rs[6]);
        CHECK(rs[1] == fp8_max_value(fmts[f] == DTYPE_FP8_E4M3) / 2.0f / 3000.0f, "the spike's scale %.9g", rs[1]);
        ref->free(ref, rh);
        ref->free(ref, rs);
        gpu->free(gpu, gh);
        gpu->free(gpu, gs);
    }
}

static void gemm_case(int N, int C, int OC) {
    float* x = host_normal((size_t)N * C, 1.0f);
    float* w = host_normal((size_t)OC * C, 0.05f);
    float* dy = host_normal((size_t)N * OC, 1e-3f);
    float* bias = host_normal((size_t)OC, 0.1f);
    float* dw0 = host_normal((size_t)OC * C, 0.01f);
    HostFp8 hx = ref_cast(x, N, C, DTYPE_FP8_E4M3), hw = ref_cast(w, OC, C, DTYPE_FP8_E4M3),
            hdy = ref_cast(dy, N, OC, DTYPE_FP8_E5M2);
    float *sx, *sw, *sdy;
    Fp8Tensor rx = ref_fp8(&hx, &sx), rw = ref_fp8(&hw, &sw), rdy = ref_fp8(&hdy, &sdy);
    void *bx[3], *bw[3], *bdy[3];
    Fp8Tensor gx = gpu_fp8(&hx, bx), gw = gpu_fp8(&hw, bw), gdy = gpu_fp8(&hdy, bdy);

    // Forward.
    float* rout = ref_nan((size_t)N * OC);
    float* rbias = ref_from(bias, OC);
    ref->fp8_matmul_forward(ref, rout, &rx, &rw, rbias, N, C, OC);
    void* gout = gpu_nan((size_t)N * OC);
    void* gbias = gpu_from(bias, OC);
    gpu->fp8_matmul_forward(gpu, gout, &gx, &gw, gbias, N, C, OC);
    char what[96];
    snprintf(what, sizeof what, "fp8 forward %dx%d->%d %s", N, C, OC, gpu->fp8_support == FP8_TN_ONLY ? "TN" : "any");
    EXPECT_DEVICE_CLOSE(gout, rout, (size_t)N * OC, 1e-2, what);

    // Backward: dinp, and dweight accumulated onto dw0.
    float* rdinp = ref_nan((size_t)N * C);
    float* rdw = ref_from(dw0, (size_t)OC * C);
    ref->fp8_matmul_backward(ref, rdinp, rdw, &rdy, &rx, &rw, N, C, OC);
    void* gdinp = gpu_nan((size_t)N * C);
    void* gdw = gpu_from(dw0, (size_t)OC * C);
    gpu->fp8_matmul_backward(gpu, gdinp, gdw, &gdy, &gx, &gw, N, C, OC);
    snprintf(what, sizeof what, "fp8 dinp %dx%d->%d", N, C, OC);
    EXPECT_DEVICE_CLOSE(gdinp, rdinp, (size_t)N * C, 1e-2, what);
    snprintf(what, sizeof what, "fp8 dweight (accumulated) %dx%d->%d", N, C, OC);
    EXPECT_DEVICE_CLOSE(gdw, rdw, (size_t)OC * C, 1e-2, what);

    free_gpu_fp8(bx);
    free_gpu_fp8(bw);
    free_gpu_fp8(bdy);
    ref->free(ref, sx);
    ref->free(ref, sw);
    ref->free(ref, sdy);
    ref->free(ref, rout);
    ref->free(ref, rbias);
    ref->free(ref, rdinp);
    ref->free(ref, rdw);
    gpu->free(gpu, gout);
    gpu->free(gpu, gbias);
    gpu->free(gpu, gdinp);
    gpu->free(gpu, gdw);
    HostFp8* hs[3] = {&hx, &hw, &hdy};
    for (int i = 0; i < 3; i++) free(hs[i]->q), free(hs[i]->qt);
    free(x);
    free(w);
    free(dy);
    free(bias);
    free(dw0);
}

static void test_gemms_match_emulation(void) {
    if (small) {
        gemm_case(64, 64, 192);
        gemm_case(32, 128, 48);
    } else {
        gemm_case(1024, 768, 2304);
        gemm_case(1024, 3072, 768);
        gemm_case(4096, 2048, 2048);
    }
}

// ---- training ------------------------------------------------------------------------

static GPTConfig fp8_config(int T) {
    GPTConfig c;
    memset(&c, 0, sizeof c);  // GPT-2 (arch 0), the Llama fields unset
    c.max_seq_len = T;
    c.vocab_size = small ? 256 : 1024;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = small ? 64 : 256;
    gpt_config_finish(&c);
    return c;
}

static double* fp8_curve(Backend* be, int steps, int B, int T) {
    GPTConfig c = fp8_config(T);
    GPT m;
    Fp8State s;
    Fp8Options o = {.recipe = FP8_DELAYED, .history = 4, .margin = 0, .skip = NULL};
    gpt_create(&m, &c, be, B, T, 1, 0, 0);
    gpt_enable_fp8(&m, &s, &o);
    gpt_init_random(&m, 5);
    int32_t* in = (int32_t*)xmalloc((size_t)B * T * 4);
    int32_t* tgt = (int32_t*)xmalloc((size_t)B * T * 4);
    double* losses = (double*)xmalloc(steps * sizeof(double));
    for (int step = 0; step < steps; step++) {
        structured_batch(777, in, tgt, B, T, c.vocab_size, (uint64_t)step);
        fp8_begin_step(&s, step);
        losses[step] = gpu_train_step(&m, in, tgt, B, T, step, 3e-3f);
        fp8_end_step(&s, NULL);
    }
    free(in);
    free(tgt);
    gpt_free(&m);  // and its FP8 state
    return losses;
}

static void test_fp8_training_follows_cpu(void) {
    int steps = small ? 12 : 60, B = small ? 2 : 8, T = small ? 32 : 64;
    double* cpu = fp8_curve(ref, steps, B, T);
    double* g8 = fp8_curve(gpu, steps, B, T);
    int at;
    double worst = largest_gap(g8, cpu, steps, &at);
    printf("#   %d steps: loss cpu fp8 %.4f -> %.4f, gpu fp8 %.4f -> %.4f, largest gap %.4f at step %d\n", steps,
           cpu[0], cpu[steps - 1], g8[0], g8[steps - 1], worst, at);
    CHECK(worst <= 0.05, "GPU FP8 loss departs from the CPU FP8 loss by %.4f at step %d", worst, at);
    CHECK(g8[steps - 1] < g8[0] - (small ? 0.2 : 1.0), "GPU FP8 training did not learn (%.4f -> %.4f)", g8[0],
          g8[steps - 1]);
    free(cpu);
    free(g8);
}

static void run_all(const char* label) {
    gpu = cuda_backend_create(DTYPE_BF16);
    if (gpu->fp8_support == FP8_NONE) {
        printf("# %s: this GPU has no FP8 tensor cores: FP8 tests skipped\n", label);
        gpu->destroy(gpu);
        return;
    }
    printf("# %s: FP8 layouts %s\n", label, gpu->fp8_support == FP8_TN_ONLY ? "TN only" : "any");
    RUN_CC(test_casts_bitwise);
    RUN_CC(test_delayed_update_bitwise);
    RUN_CC(test_gemms_match_emulation);
    RUN_CC(test_fp8_training_follows_cpu);
    gpu->destroy(gpu);
}

int main(void) {
    small = test_small();
    ref = cpu_backend_create(DTYPE_F32, 0);
    run_all("this GPU");
#ifdef CUDA_SIM
    // The harness as a Blackwell: FP8 GEMMs on the plain layouts.
    setenv("CUDA_SIM_CC", "100", 1);
    cc_label = "_sm100";
    run_all("simulated sm_100");
#endif
    ref->destroy(ref);
    return TESTS_DONE();
}
