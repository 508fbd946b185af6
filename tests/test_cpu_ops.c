// test_cpu_ops.c: every op of kernels/ops.h on the CPU backend, forward and
// backward, against float64 references written here as plain loops; each
// backward reference is itself checked against central finite differences of
// L = sum(out * random weights) through the float64 forward. Also: outputs
// that are overwritten are poisoned with NaN first, accumulating outputs are
// pre-filled to prove they accumulate, results are bitwise identical across
// repeated calls and thread counts, attention (multi-head and grouped-query)
// stays O(T) in memory at T = 4096, AdamW follows PyTorch's formula, and the
// allocator accounts bytes. The Llama ops (RMSNorm, RoPE and its table with
// Llama 3.1's scaling, SwiGLU) are checked the same way.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

void openblas_set_num_threads(int num_threads);

static Backend* be;
static int default_threads;
static uint64_t rng_stream;

// ---- helpers ------------------------------------------------------------------------------

static float* falloc(size_t n) { return (float*)be->alloc(be, n * sizeof(float), "test buffer"); }
static void bfree(void* p) { be->free(be, p); }

static void fill_normal(float* x, size_t n, float scale) {
    uint64_t key = rng_key(20240601, ++rng_stream, 0);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(key, i);
}

static void fill_nan(float* x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static void fill_tokens(int32_t* t, size_t n, int V) {
    uint64_t key = rng_key(20240601, ++rng_stream, 1);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)rng_below(key, i, (uint64_t)V);
}

static float* falloc_normal(size_t n, float scale) {
    float* x = falloc(n);
    fill_normal(x, n, scale);
    return x;
}

static float* fclone(const float* x, size_t n) {
    float* y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double* dalloc(size_t n) { return (double*)xcalloc(n ? n : 1, sizeof(double)); }

static double* to_double(const float* x, size_t n) {
    double* d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static double maxabs(const double* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

// OpenBLAS's count is changed too, to check that matmul still runs its tiles
// single-threaded (and so bit-identically) when someone else has raised it.
static void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

// got (FP32) against want (float64): |got - want| <= atol * (1 + max|want|) +
// rtol * |want| everywhere, so the absolute part scales with the data.
static void expect_close(const float* got, const double* want, size_t n, double atol, double rtol,
                         const char* what) {
    double tol0 = atol * (1.0 + maxabs(want, n));
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!(isfinite(g) && fabs(g - w) <= tol0 + rtol * fabs(w))) {
            CHECK(0, "%s[%zu]: got %.9g want %.9g (n=%zu)", what, i, g, w, n);
            return;
        }
    }
}

static void expect_same_bits(const void* a, const void* b, size_t bytes, const char* what) {
    CHECK(memcmp(a, b, bytes) == 0, "%s: results differ bitwise", what);
}

// Central differences of loss(ctx) with respect to x[i] (x is one of the
// float64 inputs loss reads), compared with the analytic gradient grad[i] at
// up to max_checks indices (all of them when n is small).
typedef double (*LossFn)(void* ctx);
static void check_fd(LossFn loss, void* ctx, double* x, size_t n, const double* grad,
                     size_t max_checks, const char* what) {
    uint64_t key = rng_key(99, n, max_checks);
    size_t checks = n < max_checks ? n : max_checks;
    double gmax = maxabs(grad, n);
    for (size_t k = 0; k < checks; k++) {
        size_t i = n <= max_checks ? k : (size_t)rng_below(key, k, n);
        double x0 = x[i], h = 1e-5 * fmax(1.0, fabs(x0));
        double xp = x0 + h, xm = x0 - h;
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (xp - xm);
        if (!(fabs(fd - grad[i]) <= 1e-6 * (1.0 + gmax) + 1e-5 * fabs(fd))) {
            CHECK(0, "%s: finite difference at %zu is %.9g, analytic gradient %.9g", what, i, fd,
                  grad[i]);
            return;
        }
    }
}

static double weighted_sum(const double* out, const double* w, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += out[i] * w[i];
    return s;
}

// Runs `run` (which resets its own inputs and accumulators, then calls the op)
// on 1 thread, then twice each on 2 and 3 threads, and requires the outputs to
// match the 1-thread result bit for bit.
typedef struct {
    void* p;
    size_t bytes;
} Output;
static void expect_thread_invariant(void (*run)(void* ctx), void* ctx, const Output* outs,
                                    int nouts, const char* what) {
    void* first[8];
    set_threads(1);
    run(ctx);
    for (int k = 0; k < nouts; k++) {
        first[k] = xmalloc(outs[k].bytes);
        memcpy(first[k], outs[k].p, outs[k].bytes);
    }
    int counts[] = {2, 2, 3, 3};
    for (int c = 0; c < 4; c++) {
        set_threads(counts[c]);
        run(ctx);
        for (int k = 0; k < nouts; k++) {
            CHECK(memcmp(first[k], outs[k].p, outs[k].bytes) == 0,
                  "%s: output %d differs between 1 and %d threads", what, k, counts[c]);
        }
    }
    for (int k = 0; k < nouts; k++) free(first[k]);
    set_threads(default_threads);
}

// Runs fn(arg) in a child process and expects it to die through fatal():
// exit status 1 and `needle` in its stderr.
static void expect_fatal(void (*fn)(void*), void* arg, const char* needle, const char* what) {
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);  // fn returned: no fatal error
    }
    close(fds[1]);
    char buf[1024] = {0};
    size_t len = 0;
    ssize_t got;
    while (len < sizeof buf - 1 && (got = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) {
        len += (size_t)got;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: expected exit status 1", what);
    CHECK(strstr(buf, "train_gpt: error: ") != NULL && strstr(buf, needle) != NULL,
          "%s: stderr '%s' lacks '%s'", what, buf, needle);
}

// ---- dtype, allocator, fatal paths -------------------------------------------------------------

static void test_dtype(void) {
    CHECK(dtype_size(DTYPE_F32) == 4 && dtype_size(DTYPE_BF16) == 2, "f32/bf16 sizes");
    CHECK(dtype_size(DTYPE_FP8_E4M3) == 1 && dtype_size(DTYPE_FP8_E5M2) == 1, "fp8 sizes");
    CHECK(dtype_size(DTYPE_I32) == 4, "i32 size");
    CHECK(strcmp(dtype_name(DTYPE_F32), "fp32") == 0, "f32 name");
    CHECK(strcmp(dtype_name(DTYPE_BF16), "bf16") == 0, "bf16 name");
    CHECK(strcmp(dtype_name(DTYPE_FP8_E4M3), "fp8_e4m3") == 0, "e4m3 name");
    CHECK(strcmp(dtype_name(DTYPE_FP8_E5M2), "fp8_e5m2") == 0, "e5m2 name");
    CHECK(strcmp(dtype_name(DTYPE_I32), "int32") == 0, "i32 name");
}

static void test_allocator_accounting(void) {
    Backend* b = cpu_backend_create(DTYPE_F32, 0);
    CHECK(strcmp(b->name, "cpu") == 0 && b->dtype == DTYPE_F32, "name/dtype");
    CHECK(b->allocated_bytes(b) == 0 && b->peak_allocated_bytes(b) == 0, "starts at zero");
    char* p1 = (char*)b->alloc(b, 1000, "p1");
    char* p2 = (char*)b->alloc(b, 3, "p2");
    CHECK(((uintptr_t)p1 % 64) == 0 && ((uintptr_t)p2 % 64) == 0, "64-byte alignment");
    CHECK(b->allocated_bytes(b) == 1003, "allocated after two allocs: %zu", b->allocated_bytes(b));
    CHECK(b->peak_allocated_bytes(b) == 1003, "peak after two allocs");
    memset(p1, 0xAB, 1000);  // the whole requested range is usable
    b->free(b, p1);
    CHECK(b->allocated_bytes(b) == 3, "allocated after free: %zu", b->allocated_bytes(b));
    CHECK(b->peak_allocated_bytes(b) == 1003, "peak holds after free");
    char* p3 = (char*)b->alloc(b, 500, "p3");
    CHECK(b->allocated_bytes(b) == 503 && b->peak_allocated_bytes(b) == 1003, "peak unchanged");
    char* p4 = (char*)b->alloc(b, 2000, "p4");
    CHECK(b->peak_allocated_bytes(b) == 2503, "peak grows: %zu", b->peak_allocated_bytes(b));
    char* p0 = (char*)b->alloc(b, 0, "empty");
    CHECK(p0 != NULL && b->allocated_bytes(b) == 2503, "zero-byte alloc");
    b->free(b, p0);
    b->free(b, NULL);

    // The memory ops move bytes exactly.
    char host[500];
    for (int i = 0; i < 500; i++) host[i] = (char)(i * 7);
    b->to_device(b, p3, host, 500);
    b->copy(b, p4, p3, 500);
    b->zero(b, p4 + 100, 50);
    char back[500];
    b->to_host(b, back, p4, 500);
    b->synchronize(b);
    int ok = 1;
    for (int i = 0; i < 500; i++) ok &= back[i] == (i >= 100 && i < 150 ? 0 : (char)(i * 7));
    CHECK(ok, "to_device/copy/zero/to_host round trip");

    b->free(b, p2);
    b->free(b, p3);
    b->free(b, p4);
    CHECK(b->allocated_bytes(b) == 0, "all freed: %zu", b->allocated_bytes(b));
    CHECK(b->peak_allocated_bytes(b) == 2503, "peak survives");
    b->destroy(b);
}

static void create_bf16_backend(void* arg) { cpu_backend_create(DTYPE_BF16, 0); }
static void alloc_too_much(void* arg) { be->alloc(be, SIZE_MAX / 2 + 1, "giant tensor"); }
static void alloc_impossible(void* arg) { be->alloc(be, (size_t)1 << 62, "huge activations"); }
static void convert_to_fp8(void* arg) {
    float x[4] = {1, 2, 3, 4};
    uint8_t y[4];
    be->convert(be, y, DTYPE_FP8_E4M3, x, DTYPE_F32, 4);
}
static void free_foreign(void* arg) {
    static char buf[256] __attribute__((aligned(64)));
    be->free(be, buf + 128);
}
static void bad_target(void* arg) {
    float* logits = falloc(8);
    fill_normal(logits, 8, 1.0f);
    float loss[2];
    int32_t targets[2] = {1, 4};  // V = 4
    be->cross_entropy(be, loss, logits, targets, 2, 4, 4, 1.0f);
}
static void bad_heads(void* arg) {
    float* qkv = falloc(3 * 10);
    float out[10], lse[3];
    fill_normal(qkv, 30, 1.0f);
    be->attention_forward(be, out, lse, qkv, 1, 1, 3, 2, 3);
}
static void adamw_step0(void* arg) {
    float p[1] = {1}, g[1] = {1}, m[1] = {0}, v[1] = {0};
    AdamWParams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1,
                      .step = 0};
    be->adamw(be, p, NULL, g, m, v, 1, &hp);
}

static void test_fatal_errors(void) {
    expect_fatal(create_bf16_backend, NULL, "fp32", "bf16 backend");
    expect_fatal(alloc_too_much, NULL, "giant tensor", "alloc over SIZE_MAX/2");
#ifndef __SANITIZE_ADDRESS__  // AddressSanitizer aborts on such requests itself
    expect_fatal(alloc_impossible, NULL, "4611686018427387904 bytes for huge activations",
                 "alloc 2^62 bytes");
#endif
    expect_fatal(convert_to_fp8, NULL, "fp32 to fp8_e4m3", "unsupported conversion");
    expect_fatal(free_foreign, NULL, "not a live allocation", "free of a foreign pointer");
    expect_fatal(bad_target, NULL, "target 4 of row 1", "target out of range");
    expect_fatal(bad_heads, NULL, "NH=3 query heads are not a multiple of NKV=2", "NH not divisible by NKV");
    expect_fatal(adamw_step0, NULL, "step must be >= 1", "adamw step 0");
}

// ---- convert ------------------------------------------------------------------------------------

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_convert(void) {
    // Each input with the bf16 bits round-to-nearest-even must give.
    struct {
        uint32_t in;
        uint16_t want;
    } cases[] = {
        {0x3F800000u, 0x3F80},  // 1.0 exact
        {0x3F808000u, 0x3F80},  // tie, even below: stays
        {0x3F818000u, 0x3F82},  // tie, odd below: rounds up to even
        {0x3F808001u, 0x3F81},  // just above the tie: up
        {0x3F807FFFu, 0x3F80},  // just below the tie: down
        {0xBF818000u, 0xBF82},  // negative tie rounds away to even magnitude
        {0x7F7FFFFFu, 0x7F80},  // FLT_MAX rounds to +inf
        {0x7F800000u, 0x7F80},  // +inf
        {0xFF800000u, 0xFF80},  // -inf
        {0x00000001u, 0x0000},  // smallest denormal rounds to +0
        {0x80000000u, 0x8000},  // -0
        {0x3F7FFFFFu, 0x3F80},  // just below 1 rounds up with a carry into the exponent
        {0x7F800001u, 0x7FC0},  // a NaN whose payload is all in the low bits stays NaN
        {0xFFFFFFFFu, 0xFFFF},  // negative NaN
    };
    int nc = (int)(sizeof cases / sizeof cases[0]);
    float* src = falloc(nc + 1);
    uint16_t* dst = (uint16_t*)be->alloc(be, (nc + 1) * 2, "bf16");
    for (int i = 0; i < nc; i++) src[i] = bits_to_float(cases[i].in);
    src[nc] = NAN;
    be->convert(be, dst, DTYPE_BF16, src, DTYPE_F32, nc + 1);
    for (int i = 0; i < nc; i++) {
        CHECK(dst[i] == cases[i].want, "f32 0x%08x -> bf16 0x%04x, want 0x%04x", cases[i].in,
              dst[i], cases[i].want);
    }
    CHECK((dst[nc] & 0x7F80) == 0x7F80 && (dst[nc] & 0x007F) != 0, "NaN stays NaN: 0x%04x",
          dst[nc]);

    // Large arrays (the parallel path): bf16 -> f32 is exact, and f32 -> bf16
    // picks the nearer neighbour.
    size_t n = 100003;
    float* x = falloc_normal(n, 3.0f);
    uint16_t* h = (uint16_t*)be->alloc(be, n * 2, "bf16");
    float* back = falloc(n);
    fill_nan(back, n);
    be->convert(be, h, DTYPE_BF16, x, DTYPE_F32, n);
    be->convert(be, back, DTYPE_F32, h, DTYPE_BF16, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        float lo = bits_to_float(u & 0xFFFF0000u);
        float hi = bits_to_float((u & 0xFFFF0000u) + 0x10000u);
        float want = fabsf(x[i] - lo) < fabsf(hi - x[i]) ? lo : hi;
        if (fabsf(x[i] - lo) == fabsf(hi - x[i])) want = ((u >> 16) & 1) ? hi : lo;
        uint32_t bw;
        memcpy(&bw, &back[i], 4);
        if (back[i] != want || (bw & 0xFFFFu) != 0) {
            CHECK(0, "round trip of %.9g gave %.9g, want %.9g", x[i], back[i], want);
            break;
        }
    }
    // f32 -> f32 and bf16 -> bf16 are copies.
    float* y = falloc(n);
    fill_nan(y, n);
    be->convert(be, y, DTYPE_F32, x, DTYPE_F32, n);
    expect_same_bits(y, x, n * 4, "f32 -> f32 copy");
    uint16_t* h2 = (uint16_t*)be->alloc(be, n * 2, "bf16");
    be->convert(be, h2, DTYPE_BF16, h, DTYPE_BF16, n);
    expect_same_bits(h2, h, n * 2, "bf16 -> bf16 copy");
    bfree(src);
    bfree(dst);
    bfree(x);
    bfree(h);
    bfree(back);
    bfree(y);
    bfree(h2);
}

// ---- encoder ------------------------------------------------------------------------------------

static void encoder_ref(double* out, const int32_t* tok, const double* wte, const double* wpe,
                        int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t r = (size_t)b * T + t;
                out[r * C + c] = wte[(size_t)tok[r] * C + c] + wpe[(size_t)t * C + c];
            }
}

// Gradient of sum(out * dout) (accumulated into dwte, dwpe).
static void encoder_backward_ref(double* dwte, double* dwpe, const double* dout,
                                 const int32_t* tok, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t r = (size_t)b * T + t;
                dwte[(size_t)tok[r] * C + c] += dout[r * C + c];
                dwpe[(size_t)t * C + c] += dout[r * C + c];
            }
}

typedef struct {
    int B, T, C, V;
    const int32_t* tok;
    double *wte, *wpe, *w, *out;
} EncoderLoss;
static double encoder_loss(void* p) {
    EncoderLoss* e = (EncoderLoss*)p;
    encoder_ref(e->out, e->tok, e->wte, e->wpe, e->B, e->T, e->C);
    return weighted_sum(e->out, e->w, (size_t)e->B * e->T * e->C);
}

typedef struct {
    int B, T, C, V;
    float *out, *dwte, *dwpe, *dwte0, *dwpe0;
    const float *wte, *wpe, *dout;
    const int32_t* tok;
} EncoderRun;
static void encoder_run(void* p) {
    EncoderRun* r = (EncoderRun*)p;
    size_t NC = (size_t)r->B * r->T * r->C;
    fill_nan(r->out, NC);
    be->encoder_forward(be, r->out, r->tok, r->wte, r->wpe, r->B, r->T, r->C);
    memcpy(r->dwte, r->dwte0, (size_t)r->V * r->C * 4);
    memcpy(r->dwpe, r->dwpe0, (size_t)r->T * r->C * 4);
    be->encoder_backward(be, r->dwte, r->dwpe, r->dout, r->tok, r->B, r->T, r->C);
}

static void test_encoder(void) {
    int shapes[][4] = {{1, 1, 1, 1}, {2, 5, 7, 3}, {3, 33, 24, 11}, {2, 17, 65, 50}, {4, 64, 129, 40}};
    for (int s = 0; s < 5; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
        size_t NC = (size_t)B * T * C, VC = (size_t)V * C, TC = (size_t)T * C;
        int32_t* tok = (int32_t*)be->alloc(be, (size_t)B * T * 4, "tokens");
        fill_tokens(tok, (size_t)B * T, V);  // few ids: most repeat, testing the accumulation
        float* wte = falloc_normal(VC, 1.0f);
        float* wpe = falloc_normal(TC, 1.0f);
        float* dout = falloc_normal(NC, 1.0f);
        float* dwte0 = falloc_normal(VC, 1.0f);
        float* dwpe0 = falloc_normal(TC, 1.0f);
        EncoderRun run = {B, T, C, V, falloc(NC), falloc(VC), falloc(TC), dwte0, dwpe0,
                          wte, wpe, dout, tok};
        encoder_run(&run);

        EncoderLoss L = {B, T, C, V, tok, to_double(wte, VC), to_double(wpe, TC),
                         to_double(dout, NC), dalloc(NC)};
        double* out_ref = dalloc(NC);
        encoder_ref(out_ref, tok, L.wte, L.wpe, B, T, C);
        expect_close(run.out, out_ref, NC, 1e-6, 1e-6, "encoder out");
        double* gte = dalloc(VC);
        double* gpe = dalloc(TC);
        encoder_backward_ref(gte, gpe, L.w, tok, B, T, C);
        check_fd(encoder_loss, &L, L.wte, VC, gte, 40, "encoder dwte (reference)");
        check_fd(encoder_loss, &L, L.wpe, TC, gpe, 40, "encoder dwpe (reference)");
        for (size_t i = 0; i < VC; i++) gte[i] += dwte0[i];
        for (size_t i = 0; i < TC; i++) gpe[i] += dwpe0[i];
        expect_close(run.dwte, gte, VC, 1e-6, 1e-5, "encoder dwte (+=)");
        expect_close(run.dwpe, gpe, TC, 1e-6, 1e-5, "encoder dwpe (+=)");

        Output outs[] = {{run.out, NC * 4}, {run.dwte, VC * 4}, {run.dwpe, TC * 4}};
        expect_thread_invariant(encoder_run, &run, outs, 3, "encoder");

        free(L.wte), free(L.wpe), free(L.w), free(L.out), free(out_ref), free(gte), free(gpe);
        bfree(tok), bfree(wte), bfree(wpe), bfree(dout), bfree(dwte0), bfree(dwpe0);
        bfree(run.out), bfree(run.dwte), bfree(run.dwpe);
    }
}

// Without position embeddings (Llama): out is the token's row; dwte gets
// every token's gradient rows; nothing is read or written for wpe.
static void test_encoder_no_positions(void) {
    int B = 3, T = 7, C = 37, V = 11;
    size_t N = (size_t)B * T;
    float *wte = falloc_normal((size_t)V * C, 1.0f), *out = falloc(N * C), *dout = falloc_normal(N * C, 1.0f);
    float* dwte = falloc_normal((size_t)V * C, 1.0f);
    double* want = to_double(dwte, (size_t)V * C);
    int32_t* tok = (int32_t*)xmalloc(N * sizeof(int32_t));
    fill_tokens(tok, N, V);
    fill_nan(out, N * C);
    be->encoder_forward(be, out, tok, wte, NULL, B, T, C);
    int same = 1;
    for (size_t r = 0; r < N; r++) same &= memcmp(out + r * C, wte + (size_t)tok[r] * C, (size_t)C * 4) == 0;
    CHECK(same, "encoder without positions: out is not the token rows");
    be->encoder_backward(be, dwte, NULL, dout, tok, B, T, C);
    for (size_t r = 0; r < N; r++)
        for (int c = 0; c < C; c++) want[(size_t)tok[r] * C + c] += dout[r * C + c];
    expect_close(dwte, want, (size_t)V * C, 1e-6, 1e-5, "encoder dwte without positions");
    free(want), free(tok);
    bfree(wte), bfree(out), bfree(dout), bfree(dwte);
}

// ---- layernorm ----------------------------------------------------------------------------------

static void layernorm_ref(double* out, double* mean, double* rstd, const double* x,
                          const double* w, const double* b, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double* r = x + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += r[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (r[c] - m) * rs * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = rs;
    }
}

// Gradients of sum(out * dout), accumulated, by the chain rule written out.
static void layernorm_backward_ref(double* dx, double* dw, double* db, const double* dout,
                                   const double* x, const double* w, int N, int C) {
    double* xhat = dalloc(C);
    for (int i = 0; i < N; i++) {
        const double* r = x + (size_t)i * C;
        const double* g = dout + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += r[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        double a = 0, bsum = 0;
        for (int c = 0; c < C; c++) {
            xhat[c] = (r[c] - m) * rs;
            a += g[c] * w[c];
            bsum += g[c] * w[c] * xhat[c];
        }
        for (int c = 0; c < C; c++) {
            dx[(size_t)i * C + c] += rs * (g[c] * w[c] - a / C - xhat[c] * bsum / C);
            dw[c] += g[c] * xhat[c];
            db[c] += g[c];
        }
    }
    free(xhat);
}

typedef struct {
    int N, C;
    double *x, *w, *b, *dout, *out;
} LayernormLoss;
static double layernorm_loss(void* p) {
    LayernormLoss* l = (LayernormLoss*)p;
    layernorm_ref(l->out, NULL, NULL, l->x, l->w, l->b, l->N, l->C);
    return weighted_sum(l->out, l->dout, (size_t)l->N * l->C);
}

static const int ln_shapes[][2] = {{1, 1}, {3, 7}, {5, 24}, {33, 65}, {200, 257}};

typedef struct {
    int N, C;
    const float *x, *w, *b, *a2, *dout, *dx0, *dw0, *db0, *mean_in, *rstd_in;
    float *out, *mean, *rstd, *res, *dx, *dw, *db;
} LayernormRun;
static void layernorm_forward_run(void* p) {
    LayernormRun* r = (LayernormRun*)p;
    size_t NC = (size_t)r->N * r->C;
    fill_nan(r->out, NC), fill_nan(r->mean, r->N), fill_nan(r->rstd, r->N);
    be->layernorm_forward(be, r->out, r->mean, r->rstd, r->x, r->w, r->b, r->N, r->C, NULL);
}
static void residual_layernorm_run(void* p) {
    LayernormRun* r = (LayernormRun*)p;
    size_t NC = (size_t)r->N * r->C;
    fill_nan(r->out, NC), fill_nan(r->mean, r->N), fill_nan(r->rstd, r->N), fill_nan(r->res, NC);
    be->residual_layernorm_forward(be, r->res, r->out, r->mean, r->rstd, r->x, r->a2, r->w, r->b,
                                   r->N, r->C, NULL);
}
static void layernorm_backward_run(void* p) {
    LayernormRun* r = (LayernormRun*)p;
    memcpy(r->dx, r->dx0, (size_t)r->N * r->C * 4);
    memcpy(r->dw, r->dw0, (size_t)r->C * 4);
    memcpy(r->db, r->db0, (size_t)r->C * 4);
    be->layernorm_backward(be, r->dx, r->dw, r->db, r->dout, r->x, r->w, r->mean_in, r->rstd_in,
                           r->N, r->C, NULL);
}

static void test_layernorm_forward(void) {
    for (int s = 0; s < 5; s++) {
        int N = ln_shapes[s][0], C = ln_shapes[s][1];
        size_t NC = (size_t)N * C;
        float* x = falloc_normal(NC, 2.0f);
        for (size_t i = 0; i < NC; i++) x[i] += 3.0f;  // an offset, as real activations have
        float* w = falloc_normal(C, 1.0f);
        float* b = falloc_normal(C, 1.0f);
        LayernormRun r = {N, C, x, w, b, .out = falloc(NC), .mean = falloc(N), .rstd = falloc(N)};
        layernorm_forward_run(&r);
        double *xd = to_double(x, NC), *wd = to_double(w, C), *bd = to_double(b, C);
        double *out = dalloc(NC), *mean = dalloc(N), *rstd = dalloc(N);
        layernorm_ref(out, mean, rstd, xd, wd, bd, N, C);
        expect_close(r.out, out, NC, 1e-5, 1e-4, "layernorm out");
        expect_close(r.mean, mean, N, 1e-6, 1e-5, "layernorm mean");
        expect_close(r.rstd, rstd, N, 1e-6, 1e-4, "layernorm rstd");
        Output outs[] = {{r.out, NC * 4}, {r.mean, N * 4}, {r.rstd, N * 4}};
        expect_thread_invariant(layernorm_forward_run, &r, outs, 3, "layernorm forward");
        free(xd), free(wd), free(bd), free(out), free(mean), free(rstd);
        bfree(x), bfree(w), bfree(b), bfree(r.out), bfree(r.mean), bfree(r.rstd);
    }
}

static void test_residual_layernorm_forward(void) {
    for (int s = 0; s < 5; s++) {
        int N = ln_shapes[s][0], C = ln_shapes[s][1];
        size_t NC = (size_t)N * C;
        float* a = falloc_normal(NC, 1.0f);
        float* a2 = falloc_normal(NC, 1.0f);
        float* w = falloc_normal(C, 1.0f);
        float* b = falloc_normal(C, 1.0f);
        LayernormRun r = {N,  C,  a,  w, b, a2, .out = falloc(NC), .mean = falloc(N),
                          .rstd = falloc(N), .res = falloc(NC)};
        residual_layernorm_run(&r);
        double* sum = dalloc(NC);
        for (size_t i = 0; i < NC; i++) sum[i] = (double)a[i] + (double)a2[i];
        double *wd = to_double(w, C), *bd = to_double(b, C);
        double *out = dalloc(NC), *mean = dalloc(N), *rstd = dalloc(N);
        layernorm_ref(out, mean, rstd, sum, wd, bd, N, C);
        expect_close(r.res, sum, NC, 0, 1e-7, "residual");
        expect_close(r.out, out, NC, 1e-5, 1e-4, "residual layernorm out");
        expect_close(r.mean, mean, N, 1e-6, 1e-5, "residual layernorm mean");
        expect_close(r.rstd, rstd, N, 1e-6, 1e-4, "residual layernorm rstd");
        Output outs[] = {{r.res, NC * 4}, {r.out, NC * 4}, {r.mean, N * 4}, {r.rstd, N * 4}};
        expect_thread_invariant(residual_layernorm_run, &r, outs, 4, "residual layernorm");

        // In place: residual written over a gives the same bits.
        float* res_copy = fclone(r.res, NC);
        float* out_copy = fclone(r.out, NC);
        float* inplace = fclone(a, NC);
        be->residual_layernorm_forward(be, inplace, r.out, r.mean, r.rstd, inplace, a2, w, b, N, C, NULL);
        expect_same_bits(inplace, res_copy, NC * 4, "residual in place over a");
        expect_same_bits(r.out, out_copy, NC * 4, "out with residual in place");

        free(sum), free(wd), free(bd), free(out), free(mean), free(rstd);
        bfree(a), bfree(a2), bfree(w), bfree(b), bfree(r.out), bfree(r.mean), bfree(r.rstd);
        bfree(r.res), bfree(res_copy), bfree(out_copy), bfree(inplace);
    }
}

static void test_layernorm_backward(void) {
    for (int s = 0; s < 5; s++) {
        int N = ln_shapes[s][0], C = ln_shapes[s][1];
        size_t NC = (size_t)N * C;
        float* x = falloc_normal(NC, 1.5f);
        float* w = falloc_normal(C, 1.0f);
        float* b = falloc_normal(C, 1.0f);
        float* dout = falloc_normal(NC, 1.0f);
        float* out = falloc(NC);
        float* mean = falloc(N);
        float* rstd = falloc(N);
        be->layernorm_forward(be, out, mean, rstd, x, w, b, N, C, NULL);
        LayernormRun r = {N, C, x, w, b, NULL, dout, falloc_normal(NC, 1.0f),
                          falloc_normal(C, 1.0f), falloc_normal(C, 1.0f), mean, rstd,
                          .dx = falloc(NC), .dw = falloc(C), .db = falloc(C)};
        layernorm_backward_run(&r);

        LayernormLoss L = {N, C, to_double(x, NC), to_double(w, C), to_double(b, C),
                           to_double(dout, NC), dalloc(NC)};
        double *dx = dalloc(NC), *dw = dalloc(C), *db = dalloc(C);
        layernorm_backward_ref(dx, dw, db, L.dout, L.x, L.w, N, C);
        check_fd(layernorm_loss, &L, L.x, NC, dx, 40, "layernorm dinp (reference)");
        check_fd(layernorm_loss, &L, L.w, C, dw, 40, "layernorm dw (reference)");
        check_fd(layernorm_loss, &L, L.b, C, db, 40, "layernorm db (reference)");
        for (size_t i = 0; i < NC; i++) dx[i] += r.dx0[i];
        for (int c = 0; c < C; c++) dw[c] += r.dw0[c], db[c] += r.db0[c];
        expect_close(r.dx, dx, NC, 1e-5, 1e-4, "layernorm dinp (+=)");
        expect_close(r.dw, dw, C, 1e-5, 1e-4, "layernorm dw (+=)");
        expect_close(r.db, db, C, 1e-5, 1e-4, "layernorm db (+=)");
        Output outs[] = {{r.dx, NC * 4}, {r.dw, C * 4}, {r.db, C * 4}};
        expect_thread_invariant(layernorm_backward_run, &r, outs, 3, "layernorm backward");

        free(L.x), free(L.w), free(L.b), free(L.dout), free(L.out), free(dx), free(dw), free(db);
        bfree(x), bfree(w), bfree(b), bfree(dout), bfree(out), bfree(mean), bfree(rstd);
        bfree((void*)r.dx0), bfree((void*)r.dw0), bfree((void*)r.db0);
        bfree(r.dx), bfree(r.dw), bfree(r.db);
    }
}

// ---- gelu ---------------------------------------------------------------------------------------

static double gelu_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}

static double gelu_grad_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    double t = tanh(u);
    double du = sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

typedef struct {
    size_t n;
    double *x, *w;
} GeluLoss;
static double gelu_loss(void* p) {
    GeluLoss* g = (GeluLoss*)p;
    double s = 0;
    for (size_t i = 0; i < g->n; i++) s += gelu_ref(g->x[i]) * g->w[i];
    return s;
}

typedef struct {
    size_t n;
    const float *x, *dout;
    float *out, *dx;
} GeluRun;
static void gelu_run(void* p) {
    GeluRun* r = (GeluRun*)p;
    fill_nan(r->out, r->n);
    fill_nan(r->dx, r->n);
    be->gelu_forward(be, r->out, r->x, r->n, NULL);
    be->gelu_backward(be, r->dx, r->x, r->dout, r->n, NULL);
}

static void test_gelu(void) {
    size_t sizes[] = {1, 7, 65, 100003};
    for (int s = 0; s < 4; s++) {
        size_t n = sizes[s];
        float* x = falloc_normal(n, 3.0f);
        // The tails: very negative inputs (where 1 + tanh cancels), large
        // positive ones, and zero.
        const float special[] = {-30.0f, -12.0f, -5.5f, 0.0f, 7.0f, 40.0f};
        for (size_t i = 0; i < n && i < 6 && n > 6; i++) x[i] = special[i];
        float* dout = falloc_normal(n, 1.0f);
        GeluRun r = {n, x, dout, falloc(n), falloc(n)};
        gelu_run(&r);
        double* out = dalloc(n);
        double* dx = dalloc(n);
        GeluLoss L = {n, to_double(x, n), to_double(dout, n)};
        double* grad = dalloc(n);
        for (size_t i = 0; i < n; i++) {
            out[i] = gelu_ref(x[i]);
            grad[i] = gelu_grad_ref(x[i]) * dout[i];
            dx[i] = grad[i];
        }
        check_fd(gelu_loss, &L, L.x, n, grad, 40, "gelu grad (reference)");
        expect_close(r.out, out, n, 1e-6, 1e-5, "gelu out");
        expect_close(r.dx, dx, n, 1e-6, 1e-5, "gelu dinp");
        Output outs[] = {{r.out, n * 4}, {r.dx, n * 4}};
        expect_thread_invariant(gelu_run, &r, outs, 2, "gelu");

        // In place: dinp == dout.
        float* inplace = fclone(dout, n);
        be->gelu_backward(be, inplace, x, inplace, n, NULL);
        expect_same_bits(inplace, r.dx, n * 4, "gelu backward in place");
        free(out), free(dx), free(grad), free(L.x), free(L.w);
        bfree(x), bfree(dout), bfree(r.out), bfree(r.dx), bfree(inplace);
    }
}

// ---- matmul -------------------------------------------------------------------------------------

static void matmul_ref(double* out, const double* x, const double* w, const double* bias, int N,
                       int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += x[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = s;
        }
}

// dx overwritten; dw, db accumulated.
static void matmul_backward_ref(double* dx, double* dw, double* db, const double* dout,
                                const double* x, const double* w, int N, int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += dout[(size_t)i * OC + o] * w[(size_t)o * C + c];
            dx[(size_t)i * C + c] = s;
        }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o] * x[(size_t)i * C + c];
            dw[(size_t)o * C + c] += s;
        }
        double s = 0;
        for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o];
        db[o] += s;
    }
}

typedef struct {
    int N, C, OC;
    double *x, *w, *b, *dout, *out;
} MatmulLoss;
static double matmul_loss(void* p) {
    MatmulLoss* m = (MatmulLoss*)p;
    matmul_ref(m->out, m->x, m->w, m->b, m->N, m->C, m->OC);
    return weighted_sum(m->out, m->dout, (size_t)m->N * m->OC);
}

// The last shape spans several 128 x 128 GEMM tiles in every product and is
// big enough to run them on several threads.
static const int mm_shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {33, 24, 65}, {64, 65, 17}, {200, 150, 300}};

typedef struct {
    int N, C, OC;
    const float *x, *w, *b, *dout, *dw0, *db0;
    float *out, *pre, *dx, *dw, *db;
} MatmulRun;
static void matmul_run(void* p) {
    MatmulRun* r = (MatmulRun*)p;
    size_t NO = (size_t)r->N * r->OC;
    fill_nan(r->out, NO);
    fill_nan(r->pre, NO);
    be->matmul_forward(be, r->out, r->pre, r->x, r->w, r->b, r->N, r->C, r->OC);
    fill_nan(r->dx, (size_t)r->N * r->C);
    memcpy(r->dw, r->dw0, (size_t)r->OC * r->C * 4);
    memcpy(r->db, r->db0, (size_t)r->OC * 4);
    be->matmul_backward(be, r->dx, r->dw, r->db, r->dout, r->x, r->w, r->N, r->C, r->OC);
}

static void test_matmul_forward(void) {
    for (int s = 0; s < 5; s++) {
        int N = mm_shapes[s][0], C = mm_shapes[s][1], OC = mm_shapes[s][2];
        size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
        float* x = falloc_normal(NC, 1.0f);
        float* w = falloc_normal(OCC, 0.5f);
        float* b = falloc_normal(OC, 1.0f);
        double *xd = to_double(x, NC), *wd = to_double(w, OCC), *bd = to_double(b, OC);
        double* want = dalloc(NO);
        float* out = falloc(NO);
        float* pre = falloc(NO);

        // Without bias, with bias, and with bias + GELU.
        fill_nan(out, NO);
        be->matmul_forward(be, out, NULL, x, w, NULL, N, C, OC);
        matmul_ref(want, xd, wd, NULL, N, C, OC);
        expect_close(out, want, NO, 1e-5, 1e-4, "matmul out (no bias)");
        fill_nan(out, NO);
        be->matmul_forward(be, out, NULL, x, w, b, N, C, OC);
        matmul_ref(want, xd, wd, bd, N, C, OC);
        expect_close(out, want, NO, 1e-5, 1e-4, "matmul out (bias)");
        fill_nan(out, NO);
        fill_nan(pre, NO);
        be->matmul_forward(be, out, pre, x, w, b, N, C, OC);
        expect_close(pre, want, NO, 1e-5, 1e-4, "matmul pre_gelu");
        double* act = dalloc(NO);
        for (size_t i = 0; i < NO; i++) act[i] = gelu_ref(want[i]);
        expect_close(out, act, NO, 1e-5, 1e-4, "matmul gelu(out)");
        // In FP32 the CPU's fused GELU is exactly the gelu op applied to
        // pre_gelu (ops.h allows a GPU epilogue to differ).
        float* g = falloc(NO);
        be->gelu_forward(be, g, pre, NO, NULL);
        expect_same_bits(g, out, NO * 4, "fused gelu == gelu_forward(pre_gelu)");

        free(xd), free(wd), free(bd), free(want), free(act);
        bfree(x), bfree(w), bfree(b), bfree(out), bfree(pre), bfree(g);
    }
}

static void test_matmul_backward(void) {
    for (int s = 0; s < 5; s++) {
        int N = mm_shapes[s][0], C = mm_shapes[s][1], OC = mm_shapes[s][2];
        size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
        MatmulRun r = {N, C, OC, falloc_normal(NC, 1.0f), falloc_normal(OCC, 0.5f),
                       falloc_normal(OC, 1.0f), falloc_normal(NO, 1.0f), falloc_normal(OCC, 1.0f),
                       falloc_normal(OC, 1.0f), falloc(NO), falloc(NO), falloc(NC), falloc(OCC),
                       falloc(OC)};
        matmul_run(&r);
        MatmulLoss L = {N, C, OC, to_double(r.x, NC), to_double(r.w, OCC), to_double(r.b, OC),
                        to_double(r.dout, NO), dalloc(NO)};
        double *dx = dalloc(NC), *dw = dalloc(OCC), *db = dalloc(OC);
        matmul_backward_ref(dx, dw, db, L.dout, L.x, L.w, N, C, OC);
        size_t fd = s < 4 ? 30 : 8;
        check_fd(matmul_loss, &L, L.x, NC, dx, fd, "matmul dinp (reference)");
        check_fd(matmul_loss, &L, L.w, OCC, dw, fd, "matmul dweight (reference)");
        check_fd(matmul_loss, &L, L.b, OC, db, fd, "matmul dbias (reference)");
        expect_close(r.dx, dx, NC, 1e-5, 1e-4, "matmul dinp (=)");
        double* dw_acc = dalloc(OCC);
        double* db_acc = dalloc(OC);
        for (size_t i = 0; i < OCC; i++) dw_acc[i] = dw[i] + r.dw0[i];
        for (int o = 0; o < OC; o++) db_acc[o] = db[o] + r.db0[o];
        expect_close(r.dw, dw_acc, OCC, 1e-5, 1e-4, "matmul dweight (+=)");
        expect_close(r.db, db_acc, OC, 1e-5, 1e-4, "matmul dbias (+=)");

        // dinp = NULL and dbias = NULL are skipped; dweight still accumulates.
        float* dw2 = fclone(r.dw0, OCC);
        be->matmul_backward(be, NULL, dw2, NULL, r.dout, r.x, r.w, N, C, OC);
        expect_close(dw2, dw_acc, OCC, 1e-5, 1e-4, "matmul dweight with NULL dinp/dbias");

        Output outs[] = {{r.out, NO * 4}, {r.pre, NO * 4}, {r.dx, NC * 4}, {r.dw, OCC * 4},
                         {r.db, OC * 4}};
        expect_thread_invariant(matmul_run, &r, outs, 5, "matmul");

        free(L.x), free(L.w), free(L.b), free(L.dout), free(L.out);
        free(dx), free(dw), free(db), free(dw_acc), free(db_acc);
        bfree((void*)r.x), bfree((void*)r.w), bfree((void*)r.b), bfree((void*)r.dout);
        bfree((void*)r.dw0), bfree((void*)r.db0), bfree(r.out), bfree(r.pre), bfree(r.dx);
        bfree(r.dw), bfree(r.db), bfree(dw2);
    }
}

// matmul_backward_dgelu: dinp = (dout @ W) * gelu'(pre), dbias += its
// column sums, against float64, with the amax of dinp; dbias may be NULL.
static void test_matmul_backward_dgelu(void) {
    for (int s = 1; s < 5; s++) {
        int N = mm_shapes[s][0], C = mm_shapes[s][1], OC = mm_shapes[s][2];
        size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
        float *pre = falloc_normal(NC, 2.0f), *w = falloc_normal(OCC, 0.5f), *dout = falloc_normal(NO, 1.0f);
        float *db0 = falloc_normal(C, 1.0f), *db = fclone(db0, C), *dx = falloc(NC);
        double *dxd = dalloc(NC), *dwd = dalloc(OCC), *dbd = dalloc(OC), *dod = to_double(dout, NO), *wd = to_double(w, OCC);
        double* zero_x = dalloc(NC);
        matmul_backward_ref(dxd, dwd, dbd, dod, zero_x, wd, N, C, OC);
        double* want_db = dalloc(C);
        for (int c = 0; c < C; c++) want_db[c] = db0[c];
        double top = 0.0;
        for (size_t i = 0; i < NC; i++) {
            dxd[i] *= gelu_grad_ref(pre[i]);
            want_db[i % C] += dxd[i];
            top = fmax(top, fabs(dxd[i]));
        }
        fill_nan(dx, NC);
        float amax = 0.0f;
        be->matmul_backward_dgelu(be, dx, db, dout, pre, w, N, C, OC, &amax);
        expect_close(dx, dxd, NC, 1e-5, 1e-4, "matmul dgelu dinp");
        expect_close(db, want_db, C, 1e-5, 1e-4, "matmul dgelu dbias (+=)");
        expect_close(&amax, &top, 1, 1e-5, 1e-4, "matmul dgelu amax");
        fill_nan(dx, NC);
        be->matmul_backward_dgelu(be, dx, NULL, dout, pre, w, N, C, OC, NULL);
        expect_close(dx, dxd, NC, 1e-5, 1e-4, "matmul dgelu dinp without dbias");
        free(dxd), free(dwd), free(dbd), free(dod), free(wd), free(zero_x), free(want_db);
        bfree(pre), bfree(w), bfree(dout), bfree(db0), bfree(db), bfree(dx);
    }
}

// ---- attention ----------------------------------------------------------------------------------

// Grouped-query shape: NH query heads, NKV kv heads, head size HS; qkv rows
// are (NH + 2*NKV) * HS floats, out rows NH * HS.
typedef struct {
    int B, T, NH, NKV, HS;
} AttShape;
static size_t att_row(const AttShape* a) { return (size_t)(a->NH + 2 * a->NKV) * a->HS; }
static size_t att_qkv_count(const AttShape* a) { return (size_t)a->B * a->T * att_row(a); }
static size_t att_out_count(const AttShape* a) { return (size_t)a->B * a->T * a->NH * a->HS; }
// Query head h, key and value of the kv head that h reads, at token t of batch row b.
static size_t att_q(const AttShape* a, int b, int t, int h) {
    return ((size_t)b * a->T + t) * att_row(a) + (size_t)h * a->HS;
}
static size_t att_k(const AttShape* a, int b, int t, int h) {
    return ((size_t)b * a->T + t) * att_row(a) + (size_t)(a->NH + h / (a->NH / a->NKV)) * a->HS;
}
static size_t att_v(const AttShape* a, int b, int t, int h) { return att_k(a, b, t, h) + (size_t)a->NKV * a->HS; }
static size_t att_o(const AttShape* a, int b, int t, int h) {
    return ((size_t)b * a->T + t) * a->NH * a->HS + (size_t)h * a->HS;
}

// out (B,T,NH,HS) and lse (B,NH,T) in float64, one query row at a time.
static void attention_ref(double* out, double* lse, const double* qkv, const AttShape* a) {
    int T = a->T, HS = a->HS;
    double scale = 1.0 / sqrt((double)HS);
    double* s = dalloc(T);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = qkv + att_q(a, b, t, h);
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double* k = qkv + att_k(a, b, j, h);
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    s[j] = d * scale;
                    mx = fmax(mx, s[j]);
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                double l = mx + log(sum);
                if (lse) lse[((size_t)b * a->NH + h) * T + t] = l;
                double* o = out + att_o(a, b, t, h);
                for (int e = 0; e < HS; e++) o[e] = 0;
                for (int j = 0; j <= t; j++) {
                    const double* v = qkv + att_v(a, b, j, h);
                    double p = exp(s[j] - l);
                    for (int e = 0; e < HS; e++) o[e] += p * v[e];
                }
            }
    free(s);
}

// dqkv (overwritten) from dout, through the full T x T probability matrix of
// each head and the textbook softmax backward dS = P * (dP - rowsum(P * dP)).
static void attention_backward_ref(double* dqkv, const double* dout, const double* qkv, const AttShape* a) {
    int T = a->T, HS = a->HS;
    double scale = 1.0 / sqrt((double)HS);
    size_t TT = (size_t)T * T;
    double *P = dalloc(TT), *dP = dalloc(TT);
    memset(dqkv, 0, att_qkv_count(a) * sizeof(double));
#define Q(t) (qkv + att_q(a, b, (t), h))
#define K(t) (qkv + att_k(a, b, (t), h))
#define V(t) (qkv + att_v(a, b, (t), h))
#define DO(t) (dout + att_o(a, b, (t), h))
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++) {
            memset(P, 0, TT * sizeof(double));
            memset(dP, 0, TT * sizeof(double));
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += Q(t)[e] * K(j)[e];
                    P[(size_t)t * T + j] = d * scale;
                    mx = fmax(mx, d * scale);
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += (P[(size_t)t * T + j] = exp(P[(size_t)t * T + j] - mx));
                for (int j = 0; j <= t; j++) P[(size_t)t * T + j] /= sum;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += DO(t)[e] * V(j)[e];
                    dP[(size_t)t * T + j] = d;
                }
            }
            for (int t = 0; t < T; t++) {
                double rowdot = 0;
                for (int j = 0; j <= t; j++) rowdot += P[(size_t)t * T + j] * dP[(size_t)t * T + j];
                for (int j = 0; j <= t; j++) {
                    double p = P[(size_t)t * T + j];
                    double ds = p * (dP[(size_t)t * T + j] - rowdot) * scale;
                    double* dq = dqkv + att_q(a, b, t, h);
                    double* dk = dqkv + att_k(a, b, j, h);
                    double* dv = dqkv + att_v(a, b, j, h);
                    for (int e = 0; e < HS; e++) {
                        dq[e] += ds * K(j)[e];
                        dk[e] += ds * Q(t)[e];
                        dv[e] += p * DO(t)[e];
                    }
                }
            }
        }
#undef Q
#undef K
#undef V
#undef DO
    free(P);
    free(dP);
}

typedef struct {
    AttShape s;
    double *qkv, *dout, *out;
} AttentionLoss;
static double attention_loss(void* p) {
    AttentionLoss* a = (AttentionLoss*)p;
    attention_ref(a->out, NULL, a->qkv, &a->s);
    return weighted_sum(a->out, a->dout, att_out_count(&a->s));
}

typedef struct {
    AttShape s;
    const float *qkv, *dout;
    float *out, *lse, *dqkv;
} AttentionRun;
static void attention_run(void* p) {
    AttentionRun* r = (AttentionRun*)p;
    const AttShape* s = &r->s;
    fill_nan(r->out, att_out_count(s));
    fill_nan(r->lse, (size_t)s->B * s->NH * s->T);
    fill_nan(r->dqkv, att_qkv_count(s));
    be->attention_forward(be, r->out, r->lse, r->qkv, s->B, s->T, s->NH, s->NKV, s->HS);
    be->attention_backward(be, r->dqkv, r->dout, r->qkv, r->out, r->lse, s->B, s->T, s->NH, s->NKV, s->HS);
}

// Checks one shape against the float64 references; fd_checks = 0 skips the
// finite differences (the big shapes).
static void check_gqa_shape(int B, int T, int NH, int NKV, int HS, size_t fd_checks, int threads) {
    AttShape s = {B, T, NH, NKV, HS};
    size_t NQ = att_qkv_count(&s), NO = att_out_count(&s), BNT = (size_t)B * NH * T;
    AttentionRun r = {s, falloc_normal(NQ, 1.0f), falloc_normal(NO, 1.0f), falloc(NO), falloc(BNT), falloc(NQ)};
    attention_run(&r);
    AttentionLoss L = {s, to_double(r.qkv, NQ), to_double(r.dout, NO), dalloc(NO)};
    double *out = dalloc(NO), *lse = dalloc(BNT), *dqkv = dalloc(NQ);
    attention_ref(out, lse, L.qkv, &s);
    attention_backward_ref(dqkv, L.dout, L.qkv, &s);
    char what[128];
    snprintf(what, sizeof what, "attention B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    if (fd_checks) check_fd(attention_loss, &L, L.qkv, NQ, dqkv, fd_checks, what);
    expect_close(r.out, out, NO, 1e-5, 1e-4, "attention out");
    expect_close(r.lse, lse, BNT, 1e-6, 1e-5, "attention lse");
    expect_close(r.dqkv, dqkv, NQ, 1e-5, 1e-4, "attention dqkv");
    if (threads) {
        Output outs[] = {{r.out, NO * 4}, {r.lse, BNT * 4}, {r.dqkv, NQ * 4}};
        expect_thread_invariant(attention_run, &r, outs, 3, what);
    }
    free(L.qkv), free(L.dout), free(L.out), free(out), free(lse), free(dqkv);
    bfree((void*)r.qkv), bfree((void*)r.dout), bfree(r.out), bfree(r.lse), bfree(r.dqkv);
}
// Multi-head attention (GPT-2): NKV = NH, C = NH * HS.
static void check_attention_shape(int B, int T, int C, int NH, size_t fd_checks, int threads) {
    check_gqa_shape(B, T, NH, NH, C / NH, fd_checks, threads);
}

static void test_attention(void) {
    check_attention_shape(1, 1, 4, 1, 12, 0);
    check_attention_shape(2, 5, 6, 3, 60, 0);
    check_attention_shape(1, 6, 8, 2, 60, 0);   // T % 4 == 2
    check_attention_shape(2, 7, 9, 3, 60, 0);   // T % 4 == 3, HS = 3
    check_attention_shape(1, 33, 24, 3, 60, 0);
    check_attention_shape(2, 17, 65, 5, 60, 0);  // HS = 13
    check_attention_shape(2, 150, 48, 3, 20, 1);  // two query blocks; runs on several threads
}

// Grouped-query attention: several query heads per kv head (their dk and dv
// sum over the group), heads not a power of two, T not a multiple of 4.
static void test_attention_gqa(void) {
    check_gqa_shape(1, 5, 2, 1, 4, 60, 0);
    check_gqa_shape(2, 37, 6, 2, 16, 80, 0);  // the parity test's shape: 6 heads, 2 kv heads
    check_gqa_shape(2, 19, 9, 3, 6, 60, 0);
    check_gqa_shape(1, 23, 5, 1, 7, 60, 0);   // one kv head for all (multi-query)
    check_gqa_shape(2, 150, 12, 4, 8, 20, 1);  // two query blocks; several threads
}

static void test_attention_long_context_reference(void) {
    check_attention_shape(1, 300, 32, 2, 10, 0);
    check_attention_shape(2, 257, 12, 1, 0, 1);
}

// T = 4096: scratch stays O(T) (per thread the implementation holds a few
// HS x T panels and rows of T scores, never T x T; its scratch goes through
// be->alloc, so the peak shows it), outputs match the float64 reference on
// sampled rows, and it is quick.
static void test_attention_long_sequence(void) {
    int B = 1, T = 4096, NH = 2, HS = 16, C = NH * HS;
    size_t NC = (size_t)B * T * C, BNT = (size_t)B * NH * T;
    float* qkv = falloc_normal(3 * NC, 1.0f);
    float* dout = falloc_normal(NC, 1.0f);
    float* out = falloc(NC);
    float* lse = falloc(BNT);
    float* dqkv = falloc(3 * NC);
    fill_nan(out, NC), fill_nan(lse, BNT), fill_nan(dqkv, 3 * NC);
    // The peak only ever grows; measure from a fresh backend so it is the op's.
    Backend* fresh = cpu_backend_create(DTYPE_F32, 0);
    double t0 = now_seconds();
    fresh->attention_forward(fresh, out, lse, qkv, B, T, NH, NH, HS);
    double t1 = now_seconds();
    fresh->attention_backward(fresh, dqkv, dout, qkv, out, lse, B, T, NH, NH, HS);
    double t2 = now_seconds();
    size_t peak = fresh->peak_allocated_bytes(fresh);
    // The design's bound: per thread 4 HS x T panels and 12 rows of T.
    size_t bound = (size_t)omp_get_max_threads() * (4 * HS + 12) * (T + 128) * sizeof(float);
    CHECK(peak > 0 && peak <= bound, "attention scratch peak %zu bytes, O(T) bound %zu", peak,
          bound);
    CHECK(peak < (size_t)T * T * sizeof(float) / 8, "attention scratch %zu is not << T x T", peak);
    CHECK(fresh->allocated_bytes(fresh) == 0, "attention scratch freed");
    fresh->destroy(fresh);
    printf("# attention B=%d T=%d NH=%d HS=%d: forward %.1f ms, backward %.1f ms, scratch %zu bytes"
           " (a T x T matrix would be %zu)\n",
           B, T, NH, HS, 1e3 * (t1 - t0), 1e3 * (t2 - t1), peak, (size_t)T * T * sizeof(float));
    CHECK(t2 - t0 < 20.0, "attention at T=4096 took %.1f s", t2 - t0);

    // Sampled rows against float64, including the last query (all 4096 keys).
    double* qd = to_double(qkv, 3 * NC);
    int rows[] = {0, 1, 777, 2048, 4095};
    double scale = 1.0 / sqrt((double)HS);
    double* s = dalloc(T);
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < 5; k++) {
            int t = rows[k];
            double mx = -INFINITY;
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int e = 0; e < HS; e++) d += qd[t * 3 * C + h * HS + e] * qd[j * 3 * C + C + h * HS + e];
                s[j] = d * scale;
                mx = fmax(mx, s[j]);
            }
            double sum = 0;
            for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
            double l = mx + log(sum);
            CHECK_CLOSE(lse[h * T + t], l, 1e-5, 1e-5, "lse at T=4096");
            for (int e = 0; e < HS; e++) {
                double o = 0;
                for (int j = 0; j <= t; j++) o += exp(s[j] - l) * qd[j * 3 * C + 2 * C + h * HS + e];
                CHECK_CLOSE(out[t * C + h * HS + e], o, 1e-5, 1e-4, "out at T=4096");
            }
        }
    int finite = 1;
    for (size_t i = 0; i < 3 * NC; i++) finite &= isfinite(dqkv[i]);
    CHECK(finite, "dqkv finite at T=4096");
    free(qd), free(s);
    bfree(qkv), bfree(dout), bfree(out), bfree(lse), bfree(dqkv);
}

// ---- rmsnorm ------------------------------------------------------------------------------------

#define RMS_EPS 1e-5f

static void rmsnorm_ref(double* out, double* rstd, const double* x, const double* w, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double* r = x + (size_t)i * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += r[c] * r[c];
        double rs = 1.0 / sqrt(ss / C + (double)RMS_EPS);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = r[c] * rs * w[c];
        if (rstd) rstd[i] = rs;
    }
}

// Gradients of sum(out * dout), accumulated: d rstd / dx_c = -rstd^3 x_c / C.
static void rmsnorm_backward_ref(double* dx, double* dw, const double* dout, const double* x, const double* w,
                                 int N, int C) {
    for (int i = 0; i < N; i++) {
        const double* r = x + (size_t)i * C;
        const double* g = dout + (size_t)i * C;
        double ss = 0, gxw = 0;
        for (int c = 0; c < C; c++) ss += r[c] * r[c];
        double rs = 1.0 / sqrt(ss / C + (double)RMS_EPS);
        for (int c = 0; c < C; c++) gxw += g[c] * w[c] * r[c];
        for (int c = 0; c < C; c++) {
            dx[(size_t)i * C + c] += rs * g[c] * w[c] - rs * rs * rs * r[c] * gxw / C;
            dw[c] += g[c] * r[c] * rs;
        }
    }
}

typedef struct {
    int N, C;
    double *x, *w, *dout, *out;
} RmsnormLoss;
static double rmsnorm_loss(void* p) {
    RmsnormLoss* l = (RmsnormLoss*)p;
    rmsnorm_ref(l->out, NULL, l->x, l->w, l->N, l->C);
    return weighted_sum(l->out, l->dout, (size_t)l->N * l->C);
}

typedef struct {
    int N, C;
    const float *x, *w, *a2, *dout, *dx0, *dw0, *rstd_in;
    float *out, *rstd, *res, *dx, *dw;
} RmsnormRun;
static void rmsnorm_forward_run(void* p) {
    RmsnormRun* r = (RmsnormRun*)p;
    fill_nan(r->out, (size_t)r->N * r->C), fill_nan(r->rstd, r->N);
    be->rmsnorm_forward(be, r->out, r->rstd, r->x, r->w, r->N, r->C, RMS_EPS, NULL);
}
static void residual_rmsnorm_run(void* p) {
    RmsnormRun* r = (RmsnormRun*)p;
    size_t NC = (size_t)r->N * r->C;
    fill_nan(r->out, NC), fill_nan(r->rstd, r->N), fill_nan(r->res, NC);
    be->residual_rmsnorm_forward(be, r->res, r->out, r->rstd, r->x, r->a2, r->w, r->N, r->C, RMS_EPS, NULL);
}
static void rmsnorm_backward_run(void* p) {
    RmsnormRun* r = (RmsnormRun*)p;
    memcpy(r->dx, r->dx0, (size_t)r->N * r->C * 4);
    memcpy(r->dw, r->dw0, (size_t)r->C * 4);
    be->rmsnorm_backward(be, r->dx, r->dw, r->dout, r->x, r->w, r->rstd_in, r->N, r->C, NULL);
}

static void test_rmsnorm_forward(void) {
    for (int s = 0; s < 5; s++) {
        int N = ln_shapes[s][0], C = ln_shapes[s][1];
        size_t NC = (size_t)N * C;
        float* x = falloc_normal(NC, 2.0f);
        for (size_t i = 0; i < NC; i++) x[i] += 1.0f;
        float* w = falloc_normal(C, 1.0f);
        RmsnormRun r = {N, C, x, w, .out = falloc(NC), .rstd = falloc(N)};
        rmsnorm_forward_run(&r);
        double *xd = to_double(x, NC), *wd = to_double(w, C), *out = dalloc(NC), *rstd = dalloc(N);
        rmsnorm_ref(out, rstd, xd, wd, N, C);
        expect_close(r.out, out, NC, 1e-5, 1e-4, "rmsnorm out");
        expect_close(r.rstd, rstd, N, 1e-6, 1e-4, "rmsnorm rstd");
        Output outs[] = {{r.out, NC * 4}, {r.rstd, N * 4}};
        expect_thread_invariant(rmsnorm_forward_run, &r, outs, 2, "rmsnorm forward");

        // The fused residual add: the same bits as the add followed by rmsnorm_forward,
        // also with the residual written over a.
        float* a2 = falloc_normal(NC, 1.0f);
        RmsnormRun f = {N, C, x, w, a2, .out = falloc(NC), .rstd = falloc(N), .res = falloc(NC)};
        residual_rmsnorm_run(&f);
        float* sum = falloc(NC);
        for (size_t i = 0; i < NC; i++) sum[i] = x[i] + a2[i];
        RmsnormRun g = {N, C, sum, w, .out = falloc(NC), .rstd = falloc(N)};
        rmsnorm_forward_run(&g);
        expect_same_bits(f.res, sum, NC * 4, "residual rmsnorm: residual");
        expect_same_bits(f.out, g.out, NC * 4, "residual rmsnorm: out");
        expect_same_bits(f.rstd, g.rstd, N * 4, "residual rmsnorm: rstd");
        Output fouts[] = {{f.res, NC * 4}, {f.out, NC * 4}, {f.rstd, N * 4}};
        expect_thread_invariant(residual_rmsnorm_run, &f, fouts, 3, "residual rmsnorm");
        float* inplace = fclone(x, NC);
        be->residual_rmsnorm_forward(be, inplace, f.out, f.rstd, inplace, a2, w, N, C, RMS_EPS, NULL);
        expect_same_bits(inplace, sum, NC * 4, "residual rmsnorm in place over a");
        expect_same_bits(f.out, g.out, NC * 4, "residual rmsnorm out, in place");

        free(xd), free(wd), free(out), free(rstd);
        bfree(x), bfree(w), bfree(r.out), bfree(r.rstd), bfree(a2), bfree(f.out), bfree(f.rstd), bfree(f.res);
        bfree(sum), bfree(g.out), bfree(g.rstd), bfree(inplace);
    }
}

static void test_rmsnorm_backward(void) {
    for (int s = 0; s < 5; s++) {
        int N = ln_shapes[s][0], C = ln_shapes[s][1];
        size_t NC = (size_t)N * C;
        float* x = falloc_normal(NC, 1.5f);
        float* w = falloc_normal(C, 1.0f);
        float* dout = falloc_normal(NC, 1.0f);
        float* out = falloc(NC);
        float* rstd = falloc(N);
        be->rmsnorm_forward(be, out, rstd, x, w, N, C, RMS_EPS, NULL);
        RmsnormRun r = {N, C, x, w, NULL, dout, falloc_normal(NC, 1.0f), falloc_normal(C, 1.0f), rstd,
                        .dx = falloc(NC), .dw = falloc(C)};
        rmsnorm_backward_run(&r);
        RmsnormLoss L = {N, C, to_double(x, NC), to_double(w, C), to_double(dout, NC), dalloc(NC)};
        double *dx = dalloc(NC), *dw = dalloc(C);
        rmsnorm_backward_ref(dx, dw, L.dout, L.x, L.w, N, C);
        check_fd(rmsnorm_loss, &L, L.x, NC, dx, 40, "rmsnorm dinp (reference)");
        check_fd(rmsnorm_loss, &L, L.w, C, dw, 40, "rmsnorm dw (reference)");
        for (size_t i = 0; i < NC; i++) dx[i] += r.dx0[i];
        for (int c = 0; c < C; c++) dw[c] += r.dw0[c];
        expect_close(r.dx, dx, NC, 1e-5, 1e-4, "rmsnorm dinp (+=)");
        expect_close(r.dw, dw, C, 1e-5, 1e-4, "rmsnorm dw (+=)");
        Output outs[] = {{r.dx, NC * 4}, {r.dw, C * 4}};
        expect_thread_invariant(rmsnorm_backward_run, &r, outs, 2, "rmsnorm backward");
        // The amax is that of dinp after the accumulation.
        float amax = 0.0f;
        memcpy(r.dx, r.dx0, NC * 4);
        be->rmsnorm_backward(be, r.dx, r.dw, dout, x, w, rstd, N, C, &amax);
        float want = 0.0f;
        for (size_t i = 0; i < NC; i++) want = fmaxf(want, fabsf(r.dx[i]));
        CHECK(amax == want, "rmsnorm backward amax %g, max |dinp| %g", amax, want);
        free(L.x), free(L.w), free(L.dout), free(L.out), free(dx), free(dw);
        bfree(x), bfree(w), bfree(dout), bfree(out), bfree(rstd), bfree((void*)r.dx0), bfree((void*)r.dw0);
        bfree(r.dx), bfree(r.dw);
    }
}

// ---- rope ---------------------------------------------------------------------------------------

// Llama 3.1's scaled frequency of pair i, written from the published formula.
static double rope_freq_ref(int i, int HS, double theta, const RopeScaling* sc) {
    double f = 1.0 / pow(theta, (2.0 * i) / HS);
    if (!sc) return f;
    double wavelen = 2 * M_PI / f, lo = sc->original_max_pos / sc->low_freq_factor,
           hi = sc->original_max_pos / sc->high_freq_factor;
    if (wavelen < hi) return f;
    if (wavelen > lo) return f / sc->factor;
    double smooth = (sc->original_max_pos / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1 - smooth) * f / sc->factor + smooth * f;
}

// x (B,T,NH+2*NKV,HS): q and k heads rotated (float64); v heads copied.
static void rope_ref(double* y, const double* x, int B, int T, int NH, int NKV, int HS, double theta,
                     const RopeScaling* sc, double sign) {
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    int half = HS / 2;
    memcpy(y, x, (size_t)B * T * row * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++) {
                const double* xi = x + ((size_t)b * T + t) * row + (size_t)h * HS;
                double* yi = y + ((size_t)b * T + t) * row + (size_t)h * HS;
                for (int i = 0; i < half; i++) {
                    double a = t * rope_freq_ref(i, HS, theta, sc), c = cos(a), s = sign * sin(a);
                    yi[i] = xi[i] * c - xi[i + half] * s;
                    yi[i + half] = xi[i] * s + xi[i + half] * c;
                }
            }
}

typedef struct {
    int B, T, NH, NKV, HS;
    double theta;
    double *x, *dout, *out;
} RopeLoss;
static double rope_loss(void* p) {
    RopeLoss* l = (RopeLoss*)p;
    rope_ref(l->out, l->x, l->B, l->T, l->NH, l->NKV, l->HS, l->theta, NULL, 1.0);
    return weighted_sum(l->out, l->dout, (size_t)l->B * l->T * (l->NH + 2 * l->NKV) * l->HS);
}

static void check_rope(int B, int T, int NH, int NKV, int HS, double theta, const RopeScaling* sc) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float* freqs = (float*)xmalloc((size_t)T * HS * sizeof(float));
    rope_table(freqs, T, HS, theta, sc);
    // The table against the formula, in float64.
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HS / 2; i++) {
            double a = t * rope_freq_ref(i, HS, theta, sc);
            CHECK_CLOSE(freqs[((size_t)t * HS / 2 + i) * 2], cos(a), 1e-7, 0, "rope table cos");
            CHECK_CLOSE(freqs[((size_t)t * HS / 2 + i) * 2 + 1], sin(a), 1e-7, 0, "rope table sin");
        }
    float* x = falloc_normal(n, 1.0f);
    float* y = fclone(x, n);
    be->rope_forward(be, y, freqs, B, T, NH, NKV, HS);
    double *xd = to_double(x, n), *want = dalloc(n);
    rope_ref(want, xd, B, T, NH, NKV, HS, theta, sc, 1.0);
    char what[128];
    snprintf(what, sizeof what, "rope forward B=%d T=%d NH=%d NKV=%d HS=%d%s", B, T, NH, NKV, HS,
             sc ? " (scaled)" : "");
    expect_close(y, want, n, 1e-6, 1e-5, what);
    // Value heads untouched, bit for bit.
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    int vsame = 1;
    for (size_t r = 0; r < (size_t)B * T; r++)
        vsame &= memcmp(y + r * row + (size_t)(NH + NKV) * HS, x + r * row + (size_t)(NH + NKV) * HS,
                        (size_t)NKV * HS * 4) == 0;
    CHECK(vsame, "%s: value heads changed", what);
    // Backward is the transpose: for the gradient of sum(out * dout) it rotates
    // dout back; checked against float64 and, without scaling, finite differences.
    float* d = falloc_normal(n, 1.0f);
    float* dx = fclone(d, n);
    be->rope_backward(be, dx, freqs, B, T, NH, NKV, HS);
    double *dd = to_double(d, n), *dwant = dalloc(n);
    rope_ref(dwant, dd, B, T, NH, NKV, HS, theta, sc, -1.0);
    expect_close(dx, dwant, n, 1e-6, 1e-5, "rope backward");
    if (!sc) {
        RopeLoss L = {B, T, NH, NKV, HS, theta, xd, dd, dalloc(n)};
        check_fd(rope_loss, &L, L.x, n, dwant, 60, "rope backward (finite differences)");
        free(L.out);
    }
    // Forward then backward is the identity to rounding.
    be->rope_backward(be, y, freqs, B, T, NH, NKV, HS);
    expect_close(y, xd, n, 1e-6, 1e-5, "rope backward(forward(x)) = x");
    free(freqs), free(xd), free(want), free(dd), free(dwant);
    bfree(x), bfree(y), bfree(d), bfree(dx);
}

static void bad_rope_head(void* arg) {
    float f[8];
    rope_table(f, 1, 7, 10000.0, NULL);
}

static void test_rope(void) {
    check_rope(1, 1, 1, 1, 2, 10000.0, NULL);
    check_rope(2, 37, 6, 2, 16, 500000.0, NULL);
    check_rope(1, 19, 9, 3, 6, 10000.0, NULL);
    // Llama 3.1's scaling at a head size whose wavelengths span all three bands
    // (original_max_pos small so that they do at T = 33).
    RopeScaling sc = {8.0f, 1.0f, 4.0f, 64};
    check_rope(2, 33, 4, 2, 32, 500000.0, &sc);
    expect_fatal(bad_rope_head, NULL, "head size 7 is not even", "rope odd head size");
}

// ---- swiglu -------------------------------------------------------------------------------------

static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

static void swiglu_ref(double* out, const double* inp, int N, int H) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < H; i++)
            out[(size_t)n * H + i] = silu_ref(inp[(size_t)n * 2 * H + i]) * inp[(size_t)n * 2 * H + H + i];
}

static void swiglu_backward_ref(double* dinp, const double* inp, const double* dout, int N, int H) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < H; i++) {
            double g = inp[(size_t)n * 2 * H + i], u = inp[(size_t)n * 2 * H + H + i], d = dout[(size_t)n * H + i];
            double s = 1.0 / (1.0 + exp(-g));
            dinp[(size_t)n * 2 * H + i] = d * u * (s + g * s * (1 - s));
            dinp[(size_t)n * 2 * H + H + i] = d * g * s;
        }
}

typedef struct {
    int N, H;
    double *inp, *dout, *out;
} SwigluLoss;
static double swiglu_loss(void* p) {
    SwigluLoss* l = (SwigluLoss*)p;
    swiglu_ref(l->out, l->inp, l->N, l->H);
    return weighted_sum(l->out, l->dout, (size_t)l->N * l->H);
}

typedef struct {
    int N, H;
    const float *inp, *dout;
    float *out, *dinp;
} SwigluRun;
static void swiglu_run(void* p) {
    SwigluRun* r = (SwigluRun*)p;
    fill_nan(r->out, (size_t)r->N * r->H), fill_nan(r->dinp, (size_t)r->N * 2 * r->H);
    be->swiglu_forward(be, r->out, r->inp, r->N, r->H, NULL);
    be->swiglu_backward(be, r->dinp, r->inp, r->dout, r->N, r->H, NULL);
}

static void test_swiglu(void) {
    static const int shapes[][2] = {{1, 1}, {3, 7}, {37, 65}, {300, 1000}};
    for (int k = 0; k < 4; k++) {
        int N = shapes[k][0], H = shapes[k][1];
        size_t NH = (size_t)N * H;
        float* inp = falloc_normal(2 * NH, 3.0f);
        inp[0] = -120.0f;  // far into the tails: exp overflows in a naive sigmoid
        if (NH > 1) inp[1] = 95.0f;
        SwigluRun r = {N, H, inp, falloc_normal(NH, 1.0f), falloc(NH), falloc(2 * NH)};
        swiglu_run(&r);
        SwigluLoss L = {N, H, to_double(inp, 2 * NH), to_double(r.dout, NH), dalloc(NH)};
        double *out = dalloc(NH), *dinp = dalloc(2 * NH);
        swiglu_ref(out, L.inp, N, H);
        swiglu_backward_ref(dinp, L.inp, L.dout, N, H);
        check_fd(swiglu_loss, &L, L.inp, 2 * NH, dinp, 60, "swiglu dinp (reference)");
        expect_close(r.out, out, NH, 1e-6, 1e-5, "swiglu out");
        expect_close(r.dinp, dinp, 2 * NH, 1e-6, 1e-5, "swiglu dinp");
        Output outs[] = {{r.out, NH * 4}, {r.dinp, 2 * NH * 4}};
        expect_thread_invariant(swiglu_run, &r, outs, 2, "swiglu");
        float amax = 0.0f, want = 0.0f;
        be->swiglu_forward(be, r.out, inp, N, H, &amax);
        for (size_t i = 0; i < NH; i++) want = fmaxf(want, fabsf(r.out[i]));
        CHECK(amax == want, "swiglu amax %g, max |out| %g", amax, want);
        free(L.inp), free(L.dout), free(L.out), free(out), free(dinp);
        bfree(inp), bfree((void*)r.dout), bfree(r.out), bfree(r.dinp);
    }
}

// ---- cross-entropy ------------------------------------------------------------------------------

static void cross_entropy_ref(double* losses, double* dlogits, const double* logits,
                              const int32_t* targets, int N, int V, int Vp, double dloss) {
    for (int i = 0; i < N; i++) {
        const double* x = logits + (size_t)i * Vp;
        double mx = -INFINITY;
        for (int c = 0; c < V; c++) mx = fmax(mx, x[c]);
        double sum = 0;
        for (int c = 0; c < V; c++) sum += exp(x[c] - mx);
        double lse = mx + log(sum);
        losses[i] = lse - x[targets[i]];
        if (dlogits) {
            for (int c = 0; c < Vp; c++) {
                double p = c < V ? exp(x[c] - lse) : 0.0;
                dlogits[(size_t)i * Vp + c] = c < V ? dloss * (p - (c == targets[i])) : 0.0;
            }
        }
    }
}

typedef struct {
    int N, V, Vp;
    double dloss;
    const int32_t* targets;
    double *logits, *losses;
} CrossEntropyLoss;
static double cross_entropy_loss(void* p) {
    CrossEntropyLoss* c = (CrossEntropyLoss*)p;
    cross_entropy_ref(c->losses, NULL, c->logits, c->targets, c->N, c->V, c->Vp, 0);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return c->dloss * s;
}

typedef struct {
    int N, V, Vp;
    float dloss;
    const float* logits0;
    const int32_t* targets;
    float *logits, *losses;
} CrossEntropyRun;
static void cross_entropy_run(void* p) {
    CrossEntropyRun* r = (CrossEntropyRun*)p;
    memcpy(r->logits, r->logits0, (size_t)r->N * r->Vp * 4);
    fill_nan(r->losses, r->N);
    be->cross_entropy(be, r->losses, r->logits, r->targets, r->N, r->V, r->Vp, r->dloss);
}

static void check_cross_entropy_shape(int N, int V, int Vp, float spread, size_t fd_checks,
                                      int threads) {
    size_t NV = (size_t)N * Vp;
    float* logits0 = falloc_normal(NV, spread);
    for (int i = 0; i < N; i++)
        for (int c = V; c < Vp; c++) logits0[(size_t)i * Vp + c] = NAN;  // padding is never read
    int32_t* targets = (int32_t*)be->alloc(be, N * 4, "targets");
    fill_tokens(targets, N, V);
    CrossEntropyRun r = {N, V, Vp, 0.37f, logits0, targets, falloc(NV), falloc(N)};
    cross_entropy_run(&r);

    double* ld = to_double(logits0, NV);
    double *losses = dalloc(N), *dlogits = dalloc(NV);
    cross_entropy_ref(losses, dlogits, ld, targets, N, V, Vp, r.dloss);
    expect_close(r.losses, losses, N, 1e-6, 1e-6, "cross-entropy losses");
    expect_close(r.logits, dlogits, NV, 1e-8, 1e-5, "cross-entropy dlogits");
    if (fd_checks) {
        CrossEntropyLoss L = {N, V, Vp, r.dloss, targets, ld, dalloc(N)};
        // Finite differences only over real columns (the padding is NaN).
        double* grad_real = dalloc((size_t)N * V);
        for (int i = 0; i < N; i++)
            for (int c = 0; c < V; c++) grad_real[(size_t)i * V + c] = dlogits[(size_t)i * Vp + c];
        uint64_t key = rng_key(5, N, V);
        size_t checks = fd_checks;
        for (size_t k = 0; k < checks; k++) {
            size_t idx = (size_t)rng_below(key, k, (uint64_t)N * V);
            size_t i = idx / V, c = idx % V;
            double* x = &ld[i * Vp + c];
            double x0 = *x, h = 1e-5 * fmax(1.0, fabs(x0));
            *x = x0 + h;
            double lp = cross_entropy_loss(&L);
            *x = x0 - h;
            double lm = cross_entropy_loss(&L);
            *x = x0;
            double fd = (lp - lm) / (2 * h);
            CHECK_CLOSE(grad_real[idx], fd, 1e-7, 1e-5, "cross-entropy dlogits (reference) by FD");
        }
        free(L.losses), free(grad_real);
    }
    if (threads) {
        Output outs[] = {{r.logits, NV * 4}, {r.losses, N * 4}};
        expect_thread_invariant(cross_entropy_run, &r, outs, 2, "cross-entropy");
    }
    // dloss = 0: losses only, the logits are left untouched.
    memcpy(r.logits, logits0, NV * 4);
    fill_nan(r.losses, N);
    be->cross_entropy(be, r.losses, r.logits, targets, N, V, Vp, 0.0f);
    expect_same_bits(r.logits, logits0, NV * 4, "cross-entropy with dloss 0 keeps the logits");
    expect_close(r.losses, losses, N, 1e-6, 1e-6, "cross-entropy losses (dloss 0)");
    free(ld), free(losses), free(dlogits);
    bfree(logits0), bfree(targets), bfree(r.logits), bfree(r.losses);
}

static void test_cross_entropy(void) {
    check_cross_entropy_shape(1, 1, 1, 1.0f, 1, 0);  // one class: loss 0, gradient 0
    check_cross_entropy_shape(3, 7, 8, 1.0f, 21, 0);
    check_cross_entropy_shape(5, 50, 64, 2.0f, 40, 0);
    check_cross_entropy_shape(4, 65, 65, 30.0f, 40, 0);  // peaked softmax: needs the max shift
    check_cross_entropy_shape(8, 5000, 5056, 3.0f, 20, 1);
    check_cross_entropy_shape(2, 50257, 50304, 2.0f, 10, 0);  // GPT-2's vocabulary
}

// ---- sum / sum_squares --------------------------------------------------------------------------

typedef struct {
    size_t n;
    int squares;
    const float* x;
    float* out;
} SumRun;
static void sum_run(void* p) {
    SumRun* r = (SumRun*)p;
    *r->out = NAN;
    if (r->squares) be->sum_squares(be, r->out, r->x, r->n, 0);
    else be->sum(be, r->out, r->x, r->n, 0);
}

static void test_sums(void) {
    size_t sizes[] = {0, 1, 17, 32768, 32769, 1000003};
    for (int s = 0; s < 6; s++) {
        size_t n = sizes[s];
        float* x = falloc_normal(n ? n : 1, 1.0f);
        for (size_t i = 0; i < n; i++) x[i] += 0.25f;  // a mean, so the sum is not ~0
        double sum = 0, sq = 0, abs_sum = 0;
        for (size_t i = 0; i < n; i++) {
            sum += x[i];
            sq += (double)x[i] * x[i];
            abs_sum += fabs(x[i]);
        }
        float* out = falloc(1);
        for (int squares = 0; squares < 2; squares++) {
            double want = squares ? sq : sum;
            double scale = squares ? sq : abs_sum;
            SumRun r = {n, squares, x, out};
            sum_run(&r);
            CHECK_CLOSE(*out, want, 1e-6 * scale + 1e-30, 1e-6, squares ? "sum_squares" : "sum");
            // accumulate: += onto what is there.
            *out = 1.5f;
            if (squares) be->sum_squares(be, out, x, n, 1);
            else be->sum(be, out, x, n, 1);
            CHECK_CLOSE(*out, 1.5 + want, 1e-6 * scale + 1e-6, 1e-6,
                        squares ? "sum_squares (+=)" : "sum (+=)");
            Output outs[] = {{out, 4}};
            expect_thread_invariant(sum_run, &r, outs, 1, squares ? "sum_squares" : "sum");
        }
        bfree(x), bfree(out);
    }
}

// ---- adamw --------------------------------------------------------------------------------------

// PyTorch's AdamW in float64, from the float hyperparameters.
static void adamw_ref(double* p, double* m, double* v, const float* grad, size_t n,
                      const AdamWParams* hp) {
    double lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
    double bc1 = 1.0 - pow(b1, hp->step), bc2 = 1.0 - pow(b2, hp->step);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * hp->grad_scale;
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        double denom = sqrt(v[i]) / sqrt(bc2) + eps;
        p[i] -= (lr / bc1) * m[i] / denom;
    }
}

static void check_adamw(size_t n, float weight_decay, float grad_scale, int use_master) {
    float* p = falloc_normal(n, 1.0f);
    float* master = use_master ? fclone(p, n) : NULL;
    if (use_master) fill_nan(p, n);  // params are written from master
    float* m = falloc(n);
    float* v = falloc(n);
    memset(m, 0, n * 4);
    memset(v, 0, n * 4);
    float* g = falloc(n);
    double* pd = to_double(use_master ? master : p, n);
    double *md = dalloc(n), *vd = dalloc(n);
    AdamWParams hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                      .weight_decay = weight_decay, .grad_scale = grad_scale, .seed = 1};
    for (int step = 1; step <= 6; step++) {
        fill_normal(g, n, step == 3 ? 1e-3f : 1.0f);  // one step of tiny gradients
        hp.step = step;
        be->adamw(be, p, master, g, m, v, n, &hp);
        adamw_ref(pd, md, vd, g, n, &hp);
    }
    char what[96];
    snprintf(what, sizeof what, "adamw n=%zu wd=%g scale=%g master=%d params", n, weight_decay,
             grad_scale, use_master);
    expect_close(p, pd, n, 1e-6, 1e-5, what);
    if (use_master) expect_same_bits(p, master, n * 4, "adamw params == master");
    expect_close(m, md, n, 1e-6, 1e-5, "adamw m");
    expect_close(v, vd, n, 1e-6, 1e-5, "adamw v");
    free(pd), free(md), free(vd);
    bfree(p), bfree(master), bfree(m), bfree(v), bfree(g);
}

typedef struct {
    size_t n;
    const float *p0, *g;
    float *p, *m, *v;
} AdamWRun;
static void adamw_run(void* ctx) {
    AdamWRun* r = (AdamWRun*)ctx;
    memcpy(r->p, r->p0, r->n * 4);
    memset(r->m, 0, r->n * 4);
    memset(r->v, 0, r->n * 4);
    AdamWParams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                      .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 1};
    for (int s = 1; s <= 2; s++) {
        hp.step = s;
        be->adamw(be, r->p, NULL, r->g, r->m, r->v, r->n, &hp);
    }
}

static void test_adamw(void) {
    check_adamw(1, 0.0f, 1.0f, 0);
    check_adamw(1003, 0.0f, 1.0f, 0);
    check_adamw(1003, 0.1f, 1.0f, 0);
    check_adamw(1003, 0.1f, 0.37f, 0);
    check_adamw(100003, 0.1f, 0.37f, 0);
    check_adamw(1003, 0.1f, 0.37f, 1);

    // Decay is decoupled: with zero gradients only p * (1 - lr*wd) remains
    // (m = v = 0, so the Adam step is 0 / eps = 0).
    size_t n = 17;
    float* p = falloc_normal(n, 1.0f);
    float* p0 = fclone(p, n);
    float* z = falloc(n);
    float* m = falloc(n);
    float* v = falloc(n);
    memset(z, 0, n * 4), memset(m, 0, n * 4), memset(v, 0, n * 4);
    AdamWParams hp = {.lr = 0.5f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                      .weight_decay = 0.2f, .grad_scale = 1.0f, .step = 1};
    be->adamw(be, p, NULL, z, m, v, n, &hp);
    for (size_t i = 0; i < n; i++) CHECK_CLOSE(p[i], p0[i] * 0.9, 0, 1e-7, "decoupled decay");

    AdamWRun r = {100003, falloc_normal(100003, 1.0f), falloc_normal(100003, 1.0f),
                  falloc(100003), falloc(100003), falloc(100003)};
    Output outs[] = {{r.p, r.n * 4}, {r.m, r.n * 4}, {r.v, r.n * 4}};
    expect_thread_invariant(adamw_run, &r, outs, 3, "adamw");
    bfree(p), bfree(p0), bfree(z), bfree(m), bfree(v);
    bfree((void*)r.p0), bfree((void*)r.g), bfree(r.p), bfree(r.m), bfree(r.v);
}

int main(void) {
    default_threads = omp_get_max_threads();
    be = cpu_backend_create(DTYPE_F32, 0);
    double t0 = now_seconds();
    RUN(test_dtype);
    RUN(test_allocator_accounting);
    RUN(test_fatal_errors);
    RUN(test_convert);
    RUN(test_encoder);
    RUN(test_encoder_no_positions);
    RUN(test_layernorm_forward);
    RUN(test_residual_layernorm_forward);
    RUN(test_layernorm_backward);
    RUN(test_gelu);
    RUN(test_matmul_forward);
    RUN(test_matmul_backward);
    RUN(test_matmul_backward_dgelu);
    RUN(test_attention);
    RUN(test_attention_gqa);
    RUN(test_attention_long_context_reference);
    RUN(test_attention_long_sequence);
    RUN(test_rmsnorm_forward);
    RUN(test_rmsnorm_backward);
    RUN(test_rope);
    RUN(test_swiglu);
    RUN(test_cross_entropy);
    RUN(test_sums);
    RUN(test_adamw);
    printf("# test_cpu_ops: %d cases, %d failed, %.1f s, %d threads\n", testlib_cases,
           testlib_failures, now_seconds() - t0, default_threads);
    size_t left = be->allocated_bytes(be);
    if (left) printf("FAIL test_cpu_ops_leaks: %zu bytes still allocated\n", left);
    be->destroy(be);
    return TESTS_DONE() + (left != 0);
}
