// test_fp8.c: FP8 training on the CPU backend (kernels/cpu/fp8.c, llm/fp8/fp8.c).
//
//   - the cast: every code is fp8_quantize_value's, plain and transposed, and
//     the current scale is 448/amax (57344/amax) with its inverse;
//   - the emulated FP8 GEMMs, all three kinds and both operand layouts,
//     against a float64 product of the same FP8 values (exact inputs: only
//     the FP32 accumulation order may differ);
//   - the amax of every producer (layernorm, GELU, AdamW) is the max |x| of
//     what it wrote, NaN included;
//   - delayed scaling against hand-computed scales through a spike, a zero
//     tensor, a NaN amax, the margin and the history window;
//   - --fp8-skip's syntax;
//   - every recompute policy gives the same gradients and weights in FP8 (both
//     recipes, with some GEMMs skipped);
//   - a delayed-scaling run stopped, its FP8 state saved and restored into a
//     fresh model, continues bit for bit;
//   - the planner bills exactly what an FP8 run allocates (peak bytes);
//   - the checkpoint manifest's "fp8" object round-trips every float exactly
//     (non-finite amaxes included) and refuses a short history;
//   - --precision auto's rule at its threshold and for the presets.
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cpu/cpu.h"
#include "llm/arch/arch.h"
#include "llm/checkpoint/ckpt_manifest.h"
#include "llm/fp8/fp8.h"
#include "llm/plan/planner.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

static Backend* be;

// An FP8 state sized for model m but not attached to it: the scaling
// state's own mechanics, with no passes through the model.
static void fp8_state_for(Fp8State* s, const GPT* m, const Fp8Options* o) {
    Fp8Shapes shapes;
    gpt_fp8_shapes(&m->config, &shapes);
    fp8_create(s, m->be, &shapes, m->B, m->T, m->zero_stage, o);
}

static float* buffer(size_t n) { return (float*)be->alloc(be, (n ? n : 1) * sizeof(float), "test"); }

static float* normal(size_t n, uint64_t seed, float scale) {
    float* x = buffer(n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(rng_key(seed, 1, 2), i);
    return x;
}

static uint32_t max_abs_bits(const float* x, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) m = fp8_abs_bits(x[i]) > m ? fp8_abs_bits(x[i]) : m;
    return m;
}

// ---------------------------------------------------------------------------
// ops

static void cast_codes_and_scales(void) {
    const int rows = 37, cols = 70;
    size_t n = (size_t)rows * cols;
    float* x = normal(n, 3, 2.0f);
    x[5] = 1e6f;      // saturates with any sensible scale
    x[6] = -3e-9f;    // underflows to -0
    for (int f = 0; f < 2; f++) {
        DType fmt = f ? DTYPE_FP8_E4M3 : DTYPE_FP8_E5M2;
        float amax = 0.0f, scale = -1.0f, scale_inv = -1.0f;
        be->amax(be, &amax, x, n);
        CHECK(amax == 1e6f, "amax %g", amax);
        uint8_t* q = (uint8_t*)be->alloc(be, n, "q");
        uint8_t* qt = (uint8_t*)be->alloc(be, n, "qt");
        memset(q, 0xAB, n);
        memset(qt, 0xAB, n);
        be->fp8_quantize(be, q, qt, fmt, x, rows, cols, &amax, &scale, &scale_inv);
        float want = fp8_max_value(f) / 1e6f;
        CHECK(scale == want && scale_inv == 1.0f / want, "%s current scale %g (want %g), inverse %g", dtype_name(fmt),
              scale, want, scale_inv);
        int bad = 0;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                uint8_t w = fp8_quantize_value(x[(size_t)r * cols + c], scale, f);
                bad += q[(size_t)r * cols + c] != w || qt[(size_t)c * rows + r] != w;
            }
        CHECK(bad == 0, "%s: %d codes differ from fp8_quantize_value", dtype_name(fmt), bad);
        CHECK(q[5] == fp8_encode(fp8_max_value(f), f, 1) && q[6] == 0x80, "saturation and -0");
        // A given (delayed) scale is used as is and left alone.
        float s2 = 0.5f, inv2 = 7.0f;
        be->fp8_quantize(be, q, NULL, fmt, x, rows, cols, NULL, &s2, &inv2);
        CHECK(s2 == 0.5f && inv2 == 7.0f && q[5] == fp8_encode(fp8_max_value(f), f, 1) &&
                  q[0] == fp8_quantize_value(x[0], 0.5f, f),
              "%s: delayed-scale cast", dtype_name(fmt));
        be->free(be, q);
        be->free(be, qt);
    }
    be->free(be, x);
}

// A random FP8 matrix (rows, cols): codes, and the values they decode to,
// plain and transposed.
typedef struct {
    uint8_t *q, *qt;
    double* v;  // (rows, cols), decoded
} Codes;

static Codes random_codes(int rows, int cols, int e4m3, uint64_t seed) {
    Codes c;
    size_t n = (size_t)rows * cols;
    c.q = (uint8_t*)be->alloc(be, n, "codes");
    c.qt = (uint8_t*)be->alloc(be, n, "codes t");
    c.v = (double*)xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        uint8_t code = (uint8_t)rng_below(rng_key(seed, 7, 7), i, 256);
        if (!isfinite(fp8_decode(code, e4m3))) code &= 0x80 | 0x30;  // a finite code instead of NaN / inf
        c.q[i] = code;
        c.v[i] = fp8_decode(code, e4m3);
    }
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++) c.qt[(size_t)k * rows + r] = c.q[(size_t)r * cols + k];
    return c;
}

static void free_codes(Codes* c) {
    be->free(be, c->q);
    be->free(be, c->qt);
    free(c->v);
}

// |got - want| against the accumulation-order bound: 2 K eps_32 sum |terms|.
static int within(double got, double want, double abs_terms, int K) {
    return fabs(got - want) <= 2.0 * K * 0x1p-24 * abs_terms + 1e-30;
}

static void fp8_gemms_against_float64(void) {
    const int N = 48, C = 80, OC = 64;
    Codes x = random_codes(N, C, 1, 1), w = random_codes(OC, C, 1, 2), dy = random_codes(N, OC, 0, 3);
    float* sv = buffer(3);
    sv[0] = 0x1p-3f;  // scale_inv of x, w, dy: powers of two, so the products are exact
    sv[1] = 0x1p-7f;
    sv[2] = 0x1p-12f;
    float* bias = normal(OC, 4, 1.0f);
    for (int layout = 0; layout < 2; layout++) {  // 0: plain operands, 1: transposed copies
        Fp8Tensor X = {layout ? NULL : x.q, layout ? x.qt : NULL, DTYPE_FP8_E4M3, &sv[0]};
        Fp8Tensor W = {layout ? NULL : w.q, layout ? w.qt : NULL, DTYPE_FP8_E4M3, &sv[1]};
        Fp8Tensor DY = {layout ? NULL : dy.q, layout ? dy.qt : NULL, DTYPE_FP8_E5M2, &sv[2]};
        float* out = normal((size_t)N * OC, 9, 1.0f);
        float* dinp = normal((size_t)N * C, 9, 1.0f);
        float* dweight = normal((size_t)OC * C, 10, 1.0f);
        float* dw0 = (float*)xmalloc((size_t)OC * C * sizeof(float));
        memcpy(dw0, dweight, (size_t)OC * C * sizeof(float));
        be->fp8_matmul_forward(be, out, &X, &W, bias, N, C, OC);
        be->fp8_matmul_backward(be, dinp, dweight, &DY, &X, &W, N, C, OC);
        int bad = 0;
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) {
                double s = 0, a = 0;
                for (int k = 0; k < C; k++) {
                    double t = x.v[(size_t)i * C + k] * w.v[(size_t)o * C + k];
                    s += t;
                    a += fabs(t);
                }
                double sc = (double)sv[0] * sv[1];
                bad += !within(out[(size_t)i * OC + o], s * sc + bias[o], a * sc + fabs(bias[o]), C);
            }
        CHECK(bad == 0, "layout %d: %d forward outputs off the float64 product", layout, bad);
        bad = 0;
        for (int i = 0; i < N; i++)
            for (int k = 0; k < C; k++) {
                double s = 0, a = 0;
                for (int o = 0; o < OC; o++) {
                    double t = dy.v[(size_t)i * OC + o] * w.v[(size_t)o * C + k];
                    s += t;
                    a += fabs(t);
                }
                double sc = (double)sv[2] * sv[1];
                bad += !within(dinp[(size_t)i * C + k], s * sc, a * sc, OC);
            }
        CHECK(bad == 0, "layout %d: %d input gradients off the float64 product", layout, bad);
        bad = 0;
        for (int o = 0; o < OC; o++)
            for (int k = 0; k < C; k++) {
                double s = 0, a = 0;
                for (int i = 0; i < N; i++) {
                    double t = dy.v[(size_t)i * OC + o] * x.v[(size_t)i * C + k];
                    s += t;
                    a += fabs(t);
                }
                double sc = (double)sv[2] * sv[0];
                double prior = dw0[(size_t)o * C + k];
                bad += !within(dweight[(size_t)o * C + k], prior + s * sc, a * sc + fabs(prior), N);
            }
        CHECK(bad == 0, "layout %d: %d weight gradients (accumulated) off the float64 product", layout, bad);
        be->free(be, out);
        be->free(be, dinp);
        be->free(be, dweight);
        free(dw0);
    }
    be->free(be, sv);
    be->free(be, bias);
    free_codes(&x);
    free_codes(&w);
    free_codes(&dy);
}

// Every producer's amax is the max |x| of what it wrote; a larger value
// already there stays; a NaN makes it NaN.
static void producers_write_their_amax(void) {
    const int N = 19, C = 48;
    size_t n = (size_t)N * C;
    float *x = normal(n, 1, 1.5f), *y = normal(n, 2, 1.0f), *w = normal(C, 3, 1.0f), *b = normal(C, 4, 0.5f);
    float *out = buffer(n), *res = buffer(n), *mean = buffer(N), *rstd = buffer(N), *dw = buffer(C), *db = buffer(C);
    float amax = 0;
    be->layernorm_forward(be, out, mean, rstd, x, w, b, N, C, &amax);
    CHECK(fp8_abs_bits(amax) == max_abs_bits(out, n) && amax > 0, "layernorm_forward amax %g", amax);
    amax = 0;
    be->residual_layernorm_forward(be, res, out, mean, rstd, x, y, w, b, N, C, &amax);
    CHECK(fp8_abs_bits(amax) == max_abs_bits(out, n), "residual_layernorm_forward amax %g", amax);
    float* dinp = normal(n, 5, 1.0f);
    amax = 0;
    be->layernorm_backward(be, dinp, dw, db, y, res, w, mean, rstd, N, C, &amax);
    CHECK(fp8_abs_bits(amax) == max_abs_bits(dinp, n), "layernorm_backward amax (of dinp after +=) %g", amax);
    amax = 0;
    be->gelu_forward(be, out, x, n, &amax);
    CHECK(fp8_abs_bits(amax) == max_abs_bits(out, n), "gelu_forward amax %g", amax);
    amax = 0;
    be->gelu_backward(be, out, x, y, n, &amax);
    CHECK(fp8_abs_bits(amax) == max_abs_bits(out, n), "gelu_backward amax %g", amax);
    float big = 1e9f;
    be->gelu_forward(be, out, x, n, &big);
    CHECK(big == 1e9f, "a larger amax already there stays");
    float *p = normal(n, 6, 1.0f), *g = normal(n, 7, 1.0f), *m1 = buffer(n), *v1 = buffer(n);
    memset(m1, 0, n * 4);
    memset(v1, 0, n * 4);
    AdamWParams hp = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1, .step = 1, .amax = &amax};
    amax = 0;
    be->adamw(be, p, NULL, g, m1, v1, n, &hp);
    CHECK(fp8_abs_bits(amax) == max_abs_bits(p, n), "adamw amax (of the new parameters) %g", amax);
    x[7] = NAN;
    amax = 0;
    be->gelu_forward(be, out, x, n, &amax);
    CHECK(isnan(amax), "a NaN output makes the amax NaN (%g)", amax);
    amax = 0;
    be->amax(be, &amax, x, n);
    CHECK(isnan(amax), "amax op: NaN");
    float* all[] = {x, y, w, b, out, res, mean, rstd, dw, db, dinp, p, g, m1, v1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
}

// ---------------------------------------------------------------------------
// scaling state

static GPTConfig tiny_config(int L) {
    GPTConfig c = {.max_seq_len = 32, .vocab_size = 101, .num_layers = L, .num_heads = 2, .channels = 32};
    gpt_config_finish(&c);
    return c;
}

// Delayed scaling, hand-computed. History 3, margin 0; the qkv input of layer
// 0 sees amaxes 2, 8 (a spike), 1, 1, 1, NaN, 1; the fc input of layer 1 is
// all zeros; the attproj gradient (E5M2) sees 4, 0.5, ...
static void delayed_scaling_hand_computed(void) {
    GPTConfig c = tiny_config(2);
    GPT m;
    gpt_create(&m, &c, be, 2, 16, 1, 0, 0);
    Fp8State s;
    Fp8Options o = {.recipe = FP8_DELAYED, .history = 3, .margin = 0, .skip = NULL};
    fp8_state_for(&s, &m, &o);
    float qkv_in[] = {2, 8, 1, 1, 1, NAN, 1};
    float want_qkv[] = {224, 56, 56, 56, 448, 448, 448};  // 448 / max of the last 3 (NaN recorded as 0)
    float grad[] = {4, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    float want_grad[] = {14336, 14336, 14336, 114688, 114688, 114688, 114688};  // 57344 / window
    for (int step = 0; step < 7; step++) {
        fp8_begin_step(&s, step);
        for (int pass = 0; pass < 2; pass++) {  // two micro-batches: the step's amax is the larger
            fp8_begin_forward(&s);
            *fp8_amax_slot(&s, 0, FP8_QKV, FP8_INPUT) = pass ? qkv_in[step] : qkv_in[step] / 2;
            fp8_end_forward(&s);
            fp8_begin_backward(&s);
            *fp8_amax_slot(&s, 1, FP8_ATTPROJ, FP8_GRAD) = pass ? grad[step] / 4 : grad[step];
            fp8_end_backward(&s);
        }
        fp8_before_update(&s);  // weights' amaxes stay 0 here: no AdamW
        fp8_end_step(&s, NULL);
        int t_in = (0 * s.L + 0) * FP8_NUM_GEMMS + FP8_QKV;
        int t_zero = (0 * s.L + 1) * FP8_NUM_GEMMS + FP8_FC;
        int t_grad = (2 * s.L + 1) * FP8_NUM_GEMMS + FP8_ATTPROJ;
        CHECK(s.scale[t_in] == want_qkv[step] && s.scale_inv[t_in] == 1.0f / want_qkv[step],
              "step %d: qkv input scale %g, want %g", step, s.scale[t_in], want_qkv[step]);
        CHECK(s.scale[t_zero] == 1.0f, "step %d: an all-zero tensor keeps its scale (%g)", step, s.scale[t_zero]);
        CHECK(s.scale[t_grad] == want_grad[step], "step %d: gradient scale %g, want %g", step, s.scale[t_grad],
              want_grad[step]);
    }
    CHECK(s.steps_recorded == 7 && s.pos == 7 % 3, "history position %d after 7 steps", s.pos);
    fp8_free(&s);
    // A margin of 2 leaves 4x headroom.
    o.margin = 2;
    fp8_state_for(&s, &m, &o);
    fp8_begin_step(&s, 0);
    fp8_begin_forward(&s);
    *fp8_amax_slot(&s, 0, FP8_QKV, FP8_INPUT) = 2.0f;
    fp8_end_forward(&s);
    fp8_before_update(&s);
    fp8_end_step(&s, NULL);
    CHECK(s.scale[FP8_QKV] == 56.0f, "margin 2: scale %g, want 448/4/2 = 56", s.scale[FP8_QKV]);
    fp8_free(&s);
    gpt_free(&m);
}

// The op itself: non-finite entries of the step's row become 0; the window
// is the column max.
static void delayed_update_op(void) {
    float scale[3] = {3, 3, 3}, inv[3] = {5, 5, 5};
    float hist[2][3] = {{1, 0, 2}, {NAN, 0, INFINITY}};
    be->fp8_update_scales(be, scale, inv, &hist[0][0], 2, 3, 1, 3, DTYPE_FP8_E4M3, 0);
    CHECK(hist[1][0] == 0 && hist[1][2] == 0, "non-finite amaxes recorded as 0");
    CHECK(scale[0] == 448 && inv[0] == 1.0f / 448, "window 1: %g", scale[0]);
    CHECK(scale[1] == 3 && inv[1] == 5, "window 0: scale kept");
    CHECK(scale[2] == 224, "window 2 (the inf ignored): %g", scale[2]);
}

static void skip_syntax(void) {
    uint8_t* s = fp8_parse_skip("first,last", 4);
    CHECK(s[0] == 15 && s[1] == 0 && s[2] == 0 && s[3] == 15, "first,last: %d %d %d %d", s[0], s[1], s[2], s[3]);
    free(s);
    s = fp8_parse_skip("fcproj,attproj@1-2,qkv@3", 4);
    CHECK(s[0] == 8 && s[1] == 10 && s[2] == 10 && s[3] == 9, "mixed: %d %d %d %d", s[0], s[1], s[2], s[3]);
    free(s);
    s = fp8_parse_skip("0-1,fc@last", 3);
    CHECK(s[0] == 15 && s[1] == 15 && s[2] == 4, "ranges: %d %d %d", s[0], s[1], s[2]);
    free(s);
    s = fp8_parse_skip("", 3);
    CHECK(s[0] == 0 && s[1] == 0 && s[2] == 0, "empty");
    free(s);
}

// The state save/restore round trip, and a mismatch refused (in a child).
static void state_save_restore(void) {
    GPTConfig c = tiny_config(2);
    GPT m;
    gpt_create(&m, &c, be, 2, 16, 1, 0, 0);
    Fp8State s, t;
    Fp8Options o = {.recipe = FP8_DELAYED, .history = 4, .margin = 1, .skip = NULL};
    fp8_state_for(&s, &m, &o);
    for (int step = 0; step < 5; step++) {
        fp8_begin_step(&s, step);
        for (int i = 0; i < s.n; i++) s.history[(size_t)s.pos * s.n + i] = 0.25f * (float)(1 + (i * 7 + step * 3) % 11);
        fp8_before_update(&s);
        fp8_end_step(&s, NULL);
    }
    Fp8Snapshot snap;
    char why[256] = "";
    fp8_snapshot_take(&s, &snap);
    fp8_free(&s);
    fp8_state_for(&t, &m, &o);
    CHECK(fp8_snapshot_restore(&t, &snap, why, sizeof why), "restore refused: %s", why);
    fp8_state_for(&s, &m, &o);  // a second run of the same 5 steps, for comparison
    for (int step = 0; step < 5; step++) {
        fp8_begin_step(&s, step);
        for (int i = 0; i < s.n; i++) s.history[(size_t)s.pos * s.n + i] = 0.25f * (float)(1 + (i * 7 + step * 3) % 11);
        fp8_before_update(&s);
        fp8_end_step(&s, NULL);
    }
    CHECK(t.pos == s.pos && t.steps_recorded == s.steps_recorded, "position %d/%d", t.pos, s.pos);
    CHECK(!memcmp(t.scale, s.scale, 2 * (size_t)s.n * 4) && !memcmp(t.history, s.history, 4 * (size_t)s.n * 4),
          "scales and histories restored");
    fp8_free(&s);
    // Another history length, recipe or margin: refused, the state untouched.
    Fp8Options others[3] = {o, o, o};
    others[0].history = 8;
    others[1].recipe = FP8_CURRENT;
    others[2].margin = 0;
    const char* want[3] = {"amax history has 4 steps", "--fp8-recipe delayed", "--fp8-margin 1"};
    for (int k = 0; k < 3; k++) {
        Fp8State u;
        fp8_state_for(&u, &m, &others[k]);
        int pos = u.pos;
        why[0] = 0;
        CHECK(!fp8_snapshot_restore(&u, &snap, why, sizeof why) && strstr(why, want[k]) && u.pos == pos,
              "mismatch %d: restored, or the reason '%s' lacks '%s'", k, why, want[k]);
        fp8_free(&u);
    }
    fp8_snapshot_free(&snap);
    fp8_free(&t);
    gpt_free(&m);
}

// ---------------------------------------------------------------------------
// the model in FP8

#define B 2
#define T 16

static void tokens(int32_t* x, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)rng_below(rng_key(seed, 3, 4), (uint64_t)i, 101);
}

typedef struct {
    RecomputeMode mode;
    int full;
    const char* name;
} Policy;
static const Policy POLICIES[] = {
    {RECOMPUTE_NONE, 0, "none"},          {RECOMPUTE_SELECTIVE, 0, "selective"}, {RECOMPUTE_FULL, 0, "full"},
    {RECOMPUTE_NONE, 2, "none + 2 full"}, {RECOMPUTE_SELECTIVE, 1, "selective + 1 full"},
};

// Four steps of two micro-batches; losses, gradients of the last step, and weights.
typedef struct {
    float loss[8];
    float *grads, *weights;
    size_t n;
} Run;

static void train_fp8(Run* r, const Policy* p, const Fp8Options* o, int steps, GPT* keep, Fp8State* keep_fp8,
                      int first_step) {
    GPTConfig c = tiny_config(3);
    RecomputePolicy rp = recompute_policy(p->mode, p->full, c.num_layers);
    GPT m0;
    Fp8State s0;
    GPT* m = keep ? keep : &m0;
    Fp8State* s = keep_fp8 ? keep_fp8 : &s0;
    if (!keep || first_step == 0) {
        gpt_create_recompute(m, &c, be, B, T, 1, 0, 0, &rp);
        gpt_enable_fp8(m, s, o);
        gpt_init_random(m, 42);
    }
    int32_t in[B * T], tg[B * T];
    for (int step = first_step; step < first_step + steps; step++) {
        fp8_begin_step(s, step);
        gpt_zero_grads(m);
        for (int a = 0; a < 2; a++) {
            tokens(in, B * T, 100 + a);  // the same two micro-batches every step: learnable
            tokens(tg, B * T, 200 + a);
            be->to_device(be, m->inputs, in, sizeof in);
            be->to_device(be, m->targets, tg, sizeof tg);
            gpt_forward(m, m->inputs, NULL, B, T, 0.0f);  // like validation in between: must change nothing
            gpt_forward(m, m->inputs, m->targets, B, T, 1.0f / (2 * B * T));
            gpt_accumulate_loss(m, B, T, a > 0);
            gpt_backward(m, m->inputs, B, T);
        }
        gpt_grad_norm_squared(m, 0, m->layout.total);
        float sc[2];
        be->to_host(be, sc, m->scalars, sizeof sc);
        r->loss[step - first_step] = sc[0];
        if (step == first_step + steps - 1) {
            r->n = m->layout.total;
            r->grads = (float*)xmalloc(r->n * sizeof(float));
            memcpy(r->grads, m->grads, r->n * sizeof(float));
        }
        gpt_update(m, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f / (1.0f + sqrtf(sc[1])), 99 + (uint64_t)step);
        fp8_end_step(s, NULL);
    }
    r->weights = (float*)xmalloc(m->layout.total * sizeof(float));
    gpt_get_params_f32(m, r->weights);
    if (!keep) {
        gpt_disable_fp8(m);
        gpt_free(m);
    }
}

static void free_run(Run* r) {
    free(r->grads);
    free(r->weights);
}

static void recompute_bitwise_in_fp8(void) {
    uint8_t skip[3] = {0, 1 << FP8_FC, 0};  // layer 1's fc in FP32, the rest FP8
    Fp8Options opts[] = {{FP8_CURRENT, 1, 0, NULL}, {FP8_DELAYED, 2, 0, skip}, {FP8_BLOCKWISE, 1, 0, NULL},
                         {FP8_MXFP8, 1, 0, skip}, {FP8_NVFP4, 1, 0, skip}};
    for (int k = 0; k < 5; k++) {
        Run r0;
        train_fp8(&r0, &POLICIES[0], &opts[k], 4, NULL, NULL, 0);
        CHECK(r0.loss[3] < r0.loss[0], "%s: did not learn (%g -> %g)", fp8_recipe_name(opts[k].recipe), r0.loss[0],
              r0.loss[3]);
        for (size_t p = 1; p < sizeof POLICIES / sizeof POLICIES[0]; p++) {
            Run r;
            train_fp8(&r, &POLICIES[p], &opts[k], 4, NULL, NULL, 0);
            CHECK(!memcmp(r.loss, r0.loss, 4 * sizeof(float)), "%s, %s: losses differ (%.9g vs %.9g)",
                  fp8_recipe_name(opts[k].recipe), POLICIES[p].name, r.loss[3], r0.loss[3]);
            CHECK(!memcmp(r.grads, r0.grads, r.n * 4) && !memcmp(r.weights, r0.weights, r.n * 4),
                  "%s, %s: gradients or weights differ", fp8_recipe_name(opts[k].recipe), POLICIES[p].name);
            free_run(&r);
        }
        free_run(&r0);
    }
}

// FP8 differs from FP32 (it quantises), but only by FP8's precision: every recipe.
static void fp8_changes_results_boundedly(void) {
    Fp8Options all_skipped_opts = {FP8_CURRENT, 1, 0, NULL};
    uint8_t all[3] = {15, 15, 15};
    all_skipped_opts.skip = all;
    Run off, off1;
    train_fp8(&off, &POLICIES[0], &all_skipped_opts, 4, NULL, NULL, 0);
    train_fp8(&off1, &POLICIES[0], &all_skipped_opts, 1, NULL, NULL, 0);
    Fp8Recipe recipes[] = {FP8_CURRENT, FP8_BLOCKWISE, FP8_MXFP8, FP8_NVFP4};
    for (int k = 0; k < 4; k++) {
        Fp8Options on = {recipes[k], 1, 0, NULL};
        Run fp8, fp8_1;
        train_fp8(&fp8, &POLICIES[0], &on, 4, NULL, NULL, 0);
        const char* name = fp8_recipe_name(recipes[k]);
        // The first step's gradients (the same weights): FP8's relative error, a few percent.
        train_fp8(&fp8_1, &POLICIES[0], &on, 1, NULL, NULL, 0);
        double d2 = 0, g2 = 0;
        for (size_t i = 0; i < off1.n; i++) {
            double d = (double)fp8_1.grads[i] - off1.grads[i];
            d2 += d * d;
            g2 += (double)off1.grads[i] * off1.grads[i];
        }
        printf("# %-9s first-step gradients: relative L2 error %.4f against FP32\n", name, sqrt(d2 / g2));
        // NVFP4 keeps 1 significant bit: a quarter of an element at worst, ~0.1 on average.
        double allowed = recipes[k] == FP8_NVFP4 ? 0.3 : 0.1;
        CHECK(sqrt(d2 / g2) < allowed, "%s: gradients %.3f (relative L2) from FP32's", name, sqrt(d2 / g2));
        free_run(&fp8_1);
        CHECK(memcmp(off.loss, fp8.loss, 4 * sizeof(float)) != 0, "%s: FP8 GEMMs changed nothing", name);
        for (int i = 0; i < 4; i++)
            CHECK(fabsf(off.loss[i] - fp8.loss[i]) < (recipes[k] == FP8_NVFP4 ? 0.05f : 0.02f) * off.loss[i],
                  "%s, step %d: %g vs %g", name, i, off.loss[i],
                  fp8.loss[i]);
        free_run(&fp8);
    }
    free_run(&off);
    free_run(&off1);
}

// --fp8-recipe auto by device, and the recipes a GPU cannot run refused in a
// line that names the GPU and the recipe.
static void recipe_choice_by_device(void) {
    char why[300];
    // gpu, compute capability, name, block-scaled FP8 GEMMs, NVFP4 GEMMs
    Fp8Device cpu = {0, 0, 0, "cpu", 1, 1}, h200 = {1, 9, 0, "NVIDIA H200", 0, 0},
              b200 = {1, 10, 0, "NVIDIA B200", 1, 0}, b200_old = {1, 10, 0, "NVIDIA B200", 0, 0},
              h200_block = {1, 9, 0, "NVIDIA H200", 1, 0}, l40 = {1, 8, 9, "NVIDIA L40S", 1, 0};
    CHECK(fp8_resolve_recipe(FP8_RECIPE_AUTO, &cpu, why, sizeof why) == FP8_CURRENT, "cpu: %s", why);
    CHECK(fp8_resolve_recipe(FP8_RECIPE_AUTO, &h200, why, sizeof why) == FP8_CURRENT && strstr(why, "H200"), "H200: %s", why);
    CHECK(fp8_resolve_recipe(FP8_RECIPE_AUTO, &b200, why, sizeof why) == FP8_MXFP8 && strstr(why, "10.0"), "B200: %s", why);
    CHECK(fp8_resolve_recipe(FP8_RECIPE_AUTO, &b200_old, why, sizeof why) == FP8_CURRENT &&
              strstr(why, "no block-scaled GEMMs"),
          "B200 without block GEMMs: %s", why);
    CHECK(fp8_resolve_recipe(FP8_DELAYED, &b200, why, sizeof why) == FP8_DELAYED, "a named recipe stays");
    for (int r = FP8_CURRENT; r < FP8_RECIPE_AUTO; r++)
        CHECK(fp8_recipe_runs((Fp8Recipe)r, &cpu, why, sizeof why), "the CPU runs %s", fp8_recipe_name((Fp8Recipe)r));
    CHECK(fp8_recipe_runs(FP8_BLOCKWISE, &h200_block, why, sizeof why), "blockwise on 9.0: %s", why);
    CHECK(fp8_recipe_runs(FP8_MXFP8, &b200, why, sizeof why), "mxfp8 on 10.0: %s", why);
    Fp8Device b200_fp4 = b200;
    b200_fp4.nvfp4_gemms = 1;
    CHECK(fp8_recipe_runs(FP8_NVFP4, &b200_fp4, why, sizeof why), "nvfp4 on 10.0 with NVFP4 GEMMs: %s", why);
    CHECK(fp8_resolve_recipe(FP8_RECIPE_AUTO, &b200_fp4, why, sizeof why) == FP8_MXFP8, "auto stays mxfp8 on 10.0");
    struct { Fp8Recipe r; const Fp8Device* d; const char* want; } no[] = {
        {FP8_MXFP8, &h200_block, "--fp8-recipe mxfp8: this GPU (NVIDIA H200, compute capability 9.0) cannot run it"},
        {FP8_BLOCKWISE, &b200, "--fp8-recipe blockwise: this GPU (NVIDIA B200, compute capability 10.0) cannot run it"},
        {FP8_BLOCKWISE, &l40, "--fp8-recipe blockwise: this GPU (NVIDIA L40S, compute capability 8.9) cannot run it"},
        {FP8_BLOCKWISE, &h200, "--fp8-recipe blockwise: this GPU (NVIDIA H200, compute capability 9.0) could run it, "
                               "but this build's CUDA backend has no block-scaled GEMMs"},
        {FP8_NVFP4, &h200_block, "--fp8-recipe nvfp4: this GPU (NVIDIA H200, compute capability 9.0) cannot run it: "
                                 "NVFP4's FP4 tensor cores (cuBLASLt VEC16_UE4M3, TN only) need compute capability 10.x"},
        {FP8_NVFP4, &l40, "--fp8-recipe nvfp4: this GPU (NVIDIA L40S, compute capability 8.9) cannot run it"},
        {FP8_NVFP4, &b200, "--fp8-recipe nvfp4: this GPU (NVIDIA B200, compute capability 10.0) could run it, but this "
                           "build's CUDA backend has no NVFP4 GEMMs"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        why[0] = 0;
        CHECK(!fp8_recipe_runs(no[i].r, no[i].d, why, sizeof why) && strstr(why, no[i].want) && !strchr(why, '\n'),
              "%s on %s: '%s'", fp8_recipe_name(no[i].r), no[i].d->name, why);
    }
}

// nvfp4's rule: the last 15% of the layers (to the nearest layer) in the
// model's dtype, ORed into --fp8-skip; no other recipe keeps any.
static void nvfp4_keeps_last_layers(void) {
    int Ls[] = {1, 2, 3, 4, 7, 12, 32, 62, 80}, want[] = {0, 0, 0, 1, 1, 2, 5, 9, 12};
    for (int i = 0; i < 9; i++) {
        uint8_t skip[80] = {0};
        skip[0] = 1 << FP8_QKV;
        int n = fp8_recipe_skip(FP8_NVFP4, skip, Ls[i]);
        int ok = n == want[i] && skip[0] == (Ls[i] - n <= 0 ? 15 : 1 << FP8_QKV);
        for (int l = 1; l < Ls[i]; l++) ok &= skip[l] == (l >= Ls[i] - n ? 15 : 0);
        CHECK(ok, "%d layers: %d kept (want %d), or the mask is wrong", Ls[i], n, want[i]);
        CHECK(fp8_recipe_skip(FP8_MXFP8, skip, Ls[i]) == 0 && fp8_recipe_skip(FP8_CURRENT, NULL, Ls[i]) == 0,
              "other recipes keep no layer");
    }
    // In the state: layer 6 of 7 runs no FP8 GEMM, the others do.
    GPTConfig c = {.max_seq_len = 16, .vocab_size = 64, .num_layers = 7, .num_heads = 2, .channels = 32};
    gpt_config_finish(&c);
    RecomputePolicy rp = recompute_policy(RECOMPUTE_NONE, 0, c.num_layers);
    GPT m;
    Fp8State s;
    Fp8Options o = {FP8_NVFP4, 1, 0, NULL};
    gpt_create_recompute(&m, &c, be, 2, 16, 1, 0, 0, &rp);
    gpt_enable_fp8(&m, &s, &o);
    int on = 0;
    for (int l = 0; l < 7; l++)
        for (int g = 0; g < FP8_NUM_GEMMS; g++) on += fp8_gemm_on(&s, l, (Fp8Gemm)g, 32) << l;
    CHECK(on == 4 * (1 + 2 + 4 + 8 + 16 + 32), "GEMMs on per layer: mask sum %d", on);
    gpt_disable_fp8(&m);
    gpt_free(&m);
}

// Delayed scaling, stopped after 3 steps (history 2: it has wrapped) and
// resumed into a fresh model from the saved parameters, AdamW state and FP8
// state: the next 3 steps are the same bits as a run that never stopped.
static void resume_bit_for_bit(void) {
    Fp8Options o = {FP8_DELAYED, 2, 1, NULL};
    Run straight, first, second;
    GPT m;
    Fp8State s;
    train_fp8(&straight, &POLICIES[0], &o, 6, &m, &s, 0);
    gpt_disable_fp8(&m);
    gpt_free(&m);
    train_fp8(&first, &POLICIES[0], &o, 3, &m, &s, 0);
    // The checkpoint: parameters, AdamW moments and step, the FP8 state.
    size_t n = m.layout.total;
    float* adam_m = (float*)xmalloc(n * 4);
    float* adam_v = (float*)xmalloc(n * 4);
    memcpy(adam_m, m.adam_m, n * 4);
    memcpy(adam_v, m.adam_v, n * 4);
    int adam_step = m.adam_step;
    Fp8Snapshot state;
    fp8_snapshot_take(&s, &state);
    gpt_disable_fp8(&m);
    gpt_free(&m);
    // A new process, as it were.
    GPTConfig c = tiny_config(3);
    RecomputePolicy rp = recompute_policy(RECOMPUTE_NONE, 0, c.num_layers);
    gpt_create_recompute(&m, &c, be, B, T, 1, 0, 0, &rp);
    gpt_enable_fp8(&m, &s, &o);
    gpt_set_params_f32(&m, first.weights);
    memcpy(m.adam_m, adam_m, n * 4);
    memcpy(m.adam_v, adam_v, n * 4);
    m.adam_step = adam_step;
    char why[256] = "";
    CHECK(fp8_snapshot_restore(&s, &state, why, sizeof why), "restore refused: %s", why);
    train_fp8(&second, &POLICIES[0], &o, 3, &m, &s, 3);
    CHECK(!memcmp(second.loss, straight.loss + 3, 3 * sizeof(float)), "resumed losses %.9g %.9g %.9g vs %.9g %.9g %.9g",
          second.loss[0], second.loss[1], second.loss[2], straight.loss[3], straight.loss[4], straight.loss[5]);
    CHECK(!memcmp(second.weights, straight.weights, n * 4), "weights after the resumed steps differ");
    gpt_disable_fp8(&m);
    gpt_free(&m);
    free(adam_m);
    free(adam_v);
    fp8_snapshot_free(&state);
    free_run(&straight);
    free_run(&first);
    free_run(&second);
}

// On the CPU the planned bytes are the peak allocated bytes, FP8 included:
// the FP8 state (weights, scaling, cast buffers) and the emulated GEMMs'
// scratch, for both recipes, recompute policies, ZeRO-3's two weight slots
// and skipped GEMMs.
static void planned_equals_allocated(void) {
    uint8_t skip_big[4] = {12, 12, 12, 12};  // fc and fcproj skipped everywhere: smaller GEMM scratch
    struct {
        int L, C, Bm, Tm, zero, history;
        RecomputeMode mode;
        const uint8_t* skip;
        const char* what;
        Fp8Recipe block;  // a block-scaled recipe, or 0: per tensor (history decides)
    } cases[] = {
        {2, 64, 4, 32, 0, 0, RECOMPUTE_NONE, NULL, "current, none", 0},
        {2, 64, 4, 32, 0, 16, RECOMPUTE_SELECTIVE, NULL, "delayed 16, selective", 0},
        {3, 48, 2, 48, 0, 4, RECOMPUTE_FULL, NULL, "delayed 4, full", 0},
        {4, 32, 2, 64, 1, 0, RECOMPUTE_NONE, skip_big, "current, fc and fcproj skipped", 0},
        {2, 64, 4, 32, 0, 0, RECOMPUTE_SELECTIVE, NULL, "blockwise, selective", FP8_BLOCKWISE},
        {3, 48, 2, 48, 1, 0, RECOMPUTE_FULL, skip_big, "mxfp8, ZeRO-1, full, skipped", FP8_MXFP8},
        {7, 32, 2, 32, 0, 0, RECOMPUTE_SELECTIVE, NULL, "nvfp4 (last layer kept), selective", FP8_NVFP4},
        {3, 48, 2, 48, 1, 0, RECOMPUTE_FULL, skip_big, "nvfp4, ZeRO-1, full, skipped", FP8_NVFP4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Backend* b = cpu_backend_create(DTYPE_F32, 0);
        GPTConfig c = {.max_seq_len = cases[i].Tm, .vocab_size = 150, .num_layers = cases[i].L, .num_heads = 2,
                       .channels = cases[i].C};
        gpt_config_finish(&c);
        RecomputePolicy p = recompute_policy(cases[i].mode, 0, c.num_layers);
        GPT m;
        gpt_create_recompute(&m, &c, b, cases[i].Bm, cases[i].Tm, 1, 0, cases[i].zero, &p);
        Fp8State s;
        Fp8Options o = {cases[i].block ? cases[i].block : cases[i].history ? FP8_DELAYED : FP8_CURRENT,
                        cases[i].history ? cases[i].history : 1, 0, cases[i].skip};
        gpt_enable_fp8(&m, &s, &o);
        gpt_init_random(&m, 3);
        int n = cases[i].Bm * cases[i].Tm;
        int32_t* tok = (int32_t*)xmalloc((size_t)n * sizeof(int32_t));
        for (int k = 0; k < n; k++) tok[k] = (int32_t)rng_below(11, (uint64_t)k, 150);
        b->to_device(b, m.inputs, tok, (size_t)n * 4);
        b->to_device(b, m.targets, tok, (size_t)n * 4);
        free(tok);
        fp8_begin_step(&s, 0);
        gpt_zero_grads(&m);
        gpt_forward(&m, m.inputs, m.targets, cases[i].Bm, cases[i].Tm, 1.0f / n);
        gpt_backward(&m, m.inputs, cases[i].Bm, cases[i].Tm);
        gpt_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 5);
        fp8_end_step(&s, NULL);
        gpt_forward(&m, m.inputs, NULL, 1, 7, 0.0f);  // sampling: a short pass falls back to FP32 GEMMs
        size_t peak = b->peak_allocated_bytes(b), planned = plan_bill_of_model(&m).allocated;
        printf("# %-32s planned %9zu bytes, peak allocated %9zu\n", cases[i].what, planned, peak);
        CHECK(peak == planned, "%s: peak allocated %zu, planned %zu", cases[i].what, peak, planned);
        gpt_disable_fp8(&m);
        gpt_free(&m);
        b->destroy(b);
    }
}

// The manifest's "fp8" object: written and parsed back, every float exact
// (the extremes and the non-finite amaxes a history may hold included), and
// restored into a fresh state; a history of the wrong length is refused.
static void manifest_fp8_round_trip(void) {
    GPTConfig c = tiny_config(2);
    GPT m;
    gpt_create(&m, &c, be, 2, 16, 1, 0, 0);
    Fp8State s, t;
    Fp8Options o = {.recipe = FP8_DELAYED, .history = 3, .margin = 2, .skip = NULL};
    fp8_state_for(&s, &m, &o);
    size_t hn = (size_t)3 * s.n;
    for (size_t i = 0; i < hn; i++) s.history[i] = (float)rng_normal(5, i) * 100.0f;
    float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, 3.4028235e38f, 0.1f};
    for (int i = 0; i < 8; i++) s.history[7 * i] = special[i];
    for (int i = 0; i < s.n; i++) s.scale[i] = 1.0f / (float)(i + 3), s.scale_inv[i] = (float)(i + 3);
    s.pos = 2;
    s.steps_recorded = 17;
    Manifest a, b;
    manifest_describe(&a, &m);
    CkptFileEntry e[2];
    memset(e, 0, sizeof e);
    ckpt_shard_name(e[0].name, sizeof e[0].name, 0, 1);
    e[0].bytes = manifest_shard_bytes(&a);
    snprintf(e[1].name, sizeof e[1].name, "%s", CKPT_WEIGHTS_NAME);
    e[1].shard = -1;
    e[1].bytes = 1;
    manifest_add_file(&a, &e[0]);
    manifest_add_file(&a, &e[1]);
    manifest_set_fp8(&a, &s);
    char* json = manifest_to_json(&a);
    char why[512] = "";
    int ok = manifest_parse(json, strlen(json), &b, why, sizeof why);
    CHECK(ok && b.fp8_present, "the manifest did not parse back with its fp8 object: %s", why);
    if (ok) {
        fp8_state_for(&t, &m, &o);
        CHECK(manifest_restore_fp8(&b, &t, why, sizeof why), "restore refused: %s", why);
        int same = t.pos == 2 && t.steps_recorded == 17 && !memcmp(t.scale, s.scale, 2 * (size_t)s.n * 4);
        for (size_t i = 0; i < hn; i++)
            same &= isnan(s.history[i]) ? isnan(t.history[i]) : !memcmp(&s.history[i], &t.history[i], 4);
        CHECK(same, "the restored scales, histories or position differ");
        fp8_free(&t);
        manifest_free(&b);
    }
    // A history one value short.
    char* cut = strstr(json, "\"amax_history\": [");
    char* comma = cut ? strchr(cut, ',') : NULL;
    if (comma) {
        char* end = strchr(comma + 1, ',');
        memmove(comma, end, strlen(end) + 1);
        // Sealed again, so that the fp8 check (not the seal) is what refuses it.
        char* sealed = manifest_seal(json, manifest_seal_offset(json, strlen(json)));
        CHECK(!manifest_parse(sealed, strlen(sealed), &b, why, sizeof why) && strstr(why, "amax_history"),
              "a short history was not refused: '%s'", why);
        free(sealed);
    }
    CHECK(comma != NULL, "no amax_history in the manifest");
    free(json);
    manifest_free(&a);
    fp8_free(&s);
    gpt_free(&m);
}

// --precision auto's rule (precision_for_model, also --plan's and --auto's):
// BF16 under PLAN_FP8_FROM_PARAMS, FP8 from there on GPUs with FP8, FP32 on
// the CPU; the presets on either side of it.
static void precision_auto_rule(void) {
    CHECK(precision_for_model(6.49e9, 1, 1) == PREC_BF16, "6.49B on an FP8 GPU must be bf16");
    CHECK(precision_for_model(6.5e9, 1, 1) == PREC_FP8, "6.5B on an FP8 GPU must be fp8");
    CHECK(precision_for_model(70e9, 1, 0) == PREC_BF16, "70B on a GPU without FP8 must be bf16");
    CHECK(precision_for_model(70e9, 0, 0) == PREC_FP32, "the CPU computes in fp32");
    PlanDevice h200, a100;
    CHECK(plan_device_gpu(&h200, "h200") && plan_device_gpu(&a100, "a100"), "h200 and a100 are known GPUs");
    struct { int L, C, NH; Precision h200, a100; } cases[] = {
        {24, 2048, 16, PREC_BF16, PREC_BF16},  // gpt-1B
        {32, 4096, 32, PREC_FP8, PREC_BF16},   // gpt-7B (6.7B)
        {40, 5120, 40, PREC_FP8, PREC_BF16},   // gpt-13B
    };
    for (int i = 0; i < 3; i++) {
        GPTConfig c = {.max_seq_len = 2048, .vocab_size = 50257, .num_layers = cases[i].L,
                       .num_heads = cases[i].NH, .channels = cases[i].C};
        gpt_config_finish(&c);
        Precision ph = plan_default_precision(&c, &h200), pa = plan_default_precision(&c, &a100);
        CHECK(ph == cases[i].h200 && pa == cases[i].a100, "%.2fB parameters: h200 %s, a100 %s",
              gpt_num_params(&c) / 1e9, precision_name(ph), precision_name(pa));
    }
}

int main(void) {
    be = cpu_backend_create(DTYPE_F32, 0);
    RUN(cast_codes_and_scales);
    RUN(fp8_gemms_against_float64);
    RUN(producers_write_their_amax);
    RUN(delayed_update_op);
    RUN(delayed_scaling_hand_computed);
    RUN(skip_syntax);
    RUN(state_save_restore);
    RUN(recompute_bitwise_in_fp8);
    RUN(fp8_changes_results_boundedly);
    RUN(recipe_choice_by_device);
    RUN(nvfp4_keeps_last_layers);
    RUN(resume_bit_for_bit);
    RUN(planned_equals_allocated);
    RUN(manifest_fp8_round_trip);
    RUN(precision_auto_rule);
    be->destroy(be);
    return TESTS_DONE();
}
