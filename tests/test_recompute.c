// test_recompute.c: activation recompute (llm/recompute.h) on the CPU backend.
//
// Every policy must give the same gradients, losses and weights as keeping
// everything, bit for bit, for GPT-2 and for Llama (the *_llama cases); the arena must shrink by exactly what the
// accounting says; and the ops properties recompute relies on (ops.h) must
// hold bit for bit.
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "llm/arch/arch.h"
#include "llm/model/model.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

// Odd sizes: a padded vocabulary, 3 heads of 16, T not a power of two.
#define B 3
#define T 13
static const GPTConfig BASE = {.max_seq_len = 16, .vocab_size = 101, .num_layers = 4, .num_heads = 3, .channels = 48};

// Llama: 6 heads of 8 sharing 2 kv heads, an MLP of 72, an untied head.
static const GPTConfig LLAMA = {.max_seq_len = 16, .vocab_size = 101, .num_layers = 4, .num_heads = 6, .channels = 48,
                                .arch = ARCH_LLAMA, .num_kv_heads = 2, .mlp_hidden = 72, .rope_theta = 10000.0f};

static Backend* be;
static int llama;  // the cases below run on LLAMA instead of BASE

static GPTConfig config(void) {
    GPTConfig c = llama ? LLAMA : BASE;
    gpt_config_finish(&c);
    return c;
}

// Random weights where every parameter matters (non-trivial layernorms).
static void init_model(GPT* m, const RecomputePolicy* p) {
    GPTConfig c = config();
    gpt_create_recompute(m, &c, be, B, T, 1, 0, 0, p);
    gpt_init_random(m, 42);
    float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
    gpt_get_params_f32(m, flat);
    uint64_t key = rng_key(7, 1, 2);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        if (t->rows != 1) continue;
        for (size_t j = 0; j < t->count; j++) flat[t->offset + j] += 0.1f * rng_normal(key, t->offset + j);
    }
    gpt_set_params_f32(m, flat);
    free(flat);
}

static void tokens(int32_t* x, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)(rng_uniform(rng_key(seed, 3, 4), (uint64_t)i) * 101) % 101;
}

// The policies every test compares against none.
typedef struct { RecomputeMode mode; int full; const char* name; } Case;
static const Case CASES[] = {
    {RECOMPUTE_NONE, 0, "none"},
    {RECOMPUTE_SELECTIVE, 0, "selective"},
    {RECOMPUTE_FULL, 0, "full"},
    {RECOMPUTE_NONE, 1, "none+1 full"},
    {RECOMPUTE_NONE, 3, "none+3 full"},
    {RECOMPUTE_SELECTIVE, 2, "selective+2 full"},
};
#define NUM_CASES ((int)(sizeof CASES / sizeof CASES[0]))

// Gradients (and the loss) after two accumulated micro-batches, the second
// one smaller than the arena (B-1 rows), after an unrelated forward without
// backward (as validation does between steps).
static float* gradients(const Case* cs, float* loss_out) {
    GPTConfig c = config();
    RecomputePolicy p = recompute_policy(cs->mode, cs->full, c.num_layers);
    GPT m;
    init_model(&m, &p);
    int32_t in[B * T], tg[B * T];
    tokens(in, B * T, 1);
    tokens(tg, B * T, 2);
    be->to_device(be, m.inputs, tg, sizeof tg);
    gpt_forward(&m, m.inputs, NULL, B, T, 0.0f);  // leaves stale activations behind
    gpt_zero_grads(&m);
    be->to_device(be, m.inputs, in, sizeof in);
    be->to_device(be, m.targets, tg, sizeof tg);
    gpt_forward(&m, m.inputs, m.targets, B, T, 0.01f);
    gpt_accumulate_loss(&m, B, T, 0);
    gpt_backward(&m, m.inputs, B, T);
    tokens(in, B * T, 5);
    be->to_device(be, m.inputs, in, sizeof in);
    gpt_forward(&m, m.inputs, m.targets, B - 1, T, 0.01f);
    gpt_accumulate_loss(&m, B - 1, T, 1);
    gpt_backward(&m, m.inputs, B - 1, T);
    float* g = (float*)xmalloc(m.layout.total * sizeof(float));
    be->to_host(be, g, m.grads, m.layout.total * sizeof(float));
    be->to_host(be, loss_out, m.scalars, sizeof(float));
    gpt_free(&m);
    return g;
}

static void grads_bitwise_equal_across_policies(void) {
    float loss0;
    float* g0 = gradients(&CASES[0], &loss0);
    size_t n;
    {
        GPTConfig c = config();
        ParamLayout pl;
        param_layout_build(&pl, &c, 1);
        n = pl.total;
        param_layout_free(&pl);
    }
    double norm = 0;
    for (size_t i = 0; i < n; i++) norm += (double)g0[i] * g0[i];
    CHECK(norm > 0 && isfinite(norm), "reference gradient norm %g", norm);
    for (int k = 1; k < NUM_CASES; k++) {
        float loss;
        float* g = gradients(&CASES[k], &loss);
        size_t first = n;
        for (size_t i = 0; i < n && first == n; i++)
            if (memcmp(&g[i], &g0[i], sizeof(float)) != 0) first = i;
        CHECK(first == n, "%s: gradient %zu differs: %.9g vs %.9g", CASES[k].name, first, first < n ? g[first] : 0.0,
              first < n ? g0[first] : 0.0);
        CHECK(memcmp(&loss, &loss0, sizeof loss) == 0, "%s: loss %.9g vs %.9g", CASES[k].name, loss, loss0);
        free(g);
    }
    free(g0);
}

// Four AdamW steps on the same two micro-batches: losses and weights bit for bit.
static void train(const Case* cs, float losses[4], float** weights, size_t* n) {
    GPTConfig c = config();
    RecomputePolicy p = recompute_policy(cs->mode, cs->full, c.num_layers);
    GPT m;
    init_model(&m, &p);
    int32_t in[B * T], tg[B * T];
    for (int step = 0; step < 4; step++) {
        gpt_zero_grads(&m);
        for (int a = 0; a < 2; a++) {
            tokens(in, B * T, 100 + a);
            tokens(tg, B * T, 200 + a);
            be->to_device(be, m.inputs, in, sizeof in);
            be->to_device(be, m.targets, tg, sizeof tg);
            gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (2 * B * T));
            gpt_accumulate_loss(&m, B, T, a > 0);
            gpt_backward(&m, m.inputs, B, T);
        }
        gpt_grad_norm_squared(&m, 0, m.layout.total);
        float s[2];
        be->to_host(be, s, m.scalars, sizeof s);
        losses[step] = s[0];
        gpt_update(&m, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f / (1.0f + sqrtf(s[1])), 99);
    }
    *n = m.layout.total;
    *weights = (float*)xmalloc(*n * sizeof(float));
    gpt_get_params_f32(&m, *weights);
    gpt_free(&m);
}

static void training_bitwise_equal_across_policies(void) {
    float l0[4], l[4];
    float *w0, *w;
    size_t n0, n;
    train(&CASES[0], l0, &w0, &n0);
    CHECK(l0[3] < l0[0], "the reference run did not learn: %g -> %g", l0[0], l0[3]);
    for (int k = 1; k < NUM_CASES; k++) {
        train(&CASES[k], l, &w, &n);
        CHECK(memcmp(l, l0, sizeof l) == 0, "%s: losses differ (%.9g %.9g %.9g %.9g)", CASES[k].name, l[0], l[1], l[2],
              l[3]);
        CHECK(n == n0 && memcmp(w, w0, n * sizeof(float)) == 0, "%s: weights differ after 4 steps", CASES[k].name);
        free(w);
    }
    free(w0);
}

static float* random_buffer(size_t n, uint64_t seed, float scale) {
    float* x = (float*)be->alloc(be, n * sizeof(float), "test");
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(rng_key(seed, 5, 6), i);
    return x;
}

// The ops.h properties recompute relies on, at several shapes.
static void ops_bitwise_properties(void) {
    const int shapes[][3] = {{7, 48, 192}, {64, 768, 3072}, {33, 100, 37}};  // N, C, OC
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float* a = random_buffer((size_t)N * C, 1, 1.0f);
        float* b = random_buffer((size_t)N * C, 2, 3.0f);
        float* w = random_buffer(C, 3, 1.0f);
        float* bias = random_buffer(C, 4, 1.0f);
        float* res = random_buffer((size_t)N * C, 9, 0.0f);
        float* out1 = random_buffer((size_t)N * C, 9, 0.0f);
        float* out2 = random_buffer((size_t)N * C, 9, 0.0f);
        float *m1 = random_buffer(N, 9, 0), *r1 = random_buffer(N, 9, 0), *m2 = random_buffer(N, 9, 0),
              *r2 = random_buffer(N, 9, 0);
        be->residual_layernorm_forward(be, res, out1, m1, r1, a, b, w, bias, N, C, NULL);
        be->layernorm_forward(be, out2, m2, r2, res, w, bias, N, C, NULL);
        CHECK(!memcmp(out1, out2, (size_t)N * C * 4) && !memcmp(m1, m2, N * 4) && !memcmp(r1, r2, N * 4),
              "N=%d C=%d: residual_layernorm_forward differs from layernorm_forward of its residual", N, C);

        float* wt = random_buffer((size_t)OC * C, 5, 0.05f);
        float* ob = random_buffer(OC, 6, 1.0f);
        float* pre = random_buffer((size_t)N * OC, 9, 0.0f);
        float* act1 = random_buffer((size_t)N * OC, 9, 0.0f);
        float* act2 = random_buffer((size_t)N * OC, 9, 0.0f);
        be->matmul_forward(be, act1, pre, a, wt, ob, N, C, OC);
        be->gelu_forward(be, act2, pre, (size_t)N * OC, NULL);
        CHECK(!memcmp(act1, act2, (size_t)N * OC * 4), "N=%d C=%d OC=%d: fused GELU differs from gelu_forward", N, C, OC);

        float* dout = random_buffer((size_t)N * OC, 7, 1.0f);
        float *dinp1 = random_buffer((size_t)N * C, 9, 0), *dinp2 = random_buffer((size_t)N * C, 9, 0);
        float *dw1 = random_buffer((size_t)OC * C, 8, 1.0f), *dw2 = random_buffer((size_t)OC * C, 8, 1.0f);
        float *db1 = random_buffer(OC, 10, 1.0f), *db2 = random_buffer(OC, 10, 1.0f);
        be->matmul_backward(be, dinp1, dw1, db1, dout, a, wt, N, C, OC);
        be->matmul_backward(be, NULL, dw2, db2, dout, a, wt, N, C, OC);
        be->matmul_backward(be, dinp2, NULL, NULL, dout, NULL, wt, N, C, OC);
        CHECK(!memcmp(dinp1, dinp2, (size_t)N * C * 4) && !memcmp(dw1, dw2, (size_t)OC * C * 4) &&
                  !memcmp(db1, db2, (size_t)OC * 4),
              "N=%d C=%d OC=%d: split matmul_backward differs from one call", N, C, OC);
        float* all[] = {a, b, w, bias, res, out1, out2, m1, r1, m2, r2, wt, ob, pre, act1, act2, dout, dinp1, dinp2, dw1,
                        dw2, db1, db2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be, all[i]);
    }
}

// Per layer and token in 16-bit (h = C): none keeps 16 h-wide tensors (32*h
// bytes) plus 4 bytes for each of NH + 4 FP32 statistics; selective drops
// ln1, ln2 and the GELU output (20*h); full keeps only the output (2*h) and
// shares one working set of a selective layer minus its output (18*h + stats).
static void arena_matches_accounting(void) {
    GPTConfig c = {.max_seq_len = 512, .vocab_size = 1000, .num_layers = 6, .num_heads = 4, .channels = 128};
    gpt_config_finish(&c);
    int b = 2, s = 128;  // b*s = 256 tokens: every buffer is a multiple of the 256-byte alignment
    size_t sbh = (size_t)s * b * c.channels, stats = 4 * (size_t)(c.num_heads + 4) * s * b;
    ActLayout none, sel, full, mix, sel_mix;
    RecomputePolicy p_sel = recompute_policy(RECOMPUTE_SELECTIVE, 0, c.num_layers);
    RecomputePolicy p_full = recompute_policy(RECOMPUTE_FULL, 0, c.num_layers);
    RecomputePolicy p_mix = recompute_policy(RECOMPUTE_NONE, 2, c.num_layers);
    RecomputePolicy p_sel_mix = recompute_policy(RECOMPUTE_SELECTIVE, 5, c.num_layers);
    act_layout_build(&none, &c, b, s, DTYPE_BF16, NULL);
    act_layout_build(&sel, &c, b, s, DTYPE_BF16, &p_sel);
    act_layout_build(&full, &c, b, s, DTYPE_BF16, &p_full);
    act_layout_build(&mix, &c, b, s, DTYPE_BF16, &p_mix);
    act_layout_build(&sel_mix, &c, b, s, DTYPE_BF16, &p_sel_mix);
    // The part that does not depend on the layers: everything but per-layer kinds.
    size_t global = 0, per_layer_none = 0;
    for (int k = 0; k < NUM_ACT_KINDS; k++) {
        if (act_kind_is_per_layer((ActKind)k)) per_layer_none += act_kind_bytes(&none, (ActKind)k);
        else global += act_kind_bytes(&none, (ActKind)k);
    }
    size_t L = (size_t)c.num_layers;
    CHECK(per_layer_none == L * (32 * sbh + stats), "none: %zu bytes per layer, want 32*sbh + stats = %zu",
          per_layer_none / L, 32 * sbh + stats);
    CHECK(sel.bytes == global + L * (20 * sbh + stats), "selective: arena %zu, want %zu", sel.bytes,
          global + L * (20 * sbh + stats));
    size_t working = 18 * sbh + stats;
    CHECK(full.bytes == global + L * 2 * sbh + working, "full: arena %zu, want %zu", full.bytes,
          global + L * 2 * sbh + working);
    CHECK(mix.bytes == global + 2 * 2 * sbh + (L - 2) * (32 * sbh + stats) + working, "none + 2 full: arena %zu",
          mix.bytes);
    CHECK(sel_mix.bytes == global + 5 * 2 * sbh + (L - 5) * (20 * sbh + stats) + working,
          "selective + 5 full: arena %zu", sel_mix.bytes);
    // The global part: encoded, lnf (+2 stats), logits, losses, and the
    // scratch: dresidual, btc, bt4c, proj_out (7 h-wide): 9 h-wide tensors.
    size_t logits = (size_t)s * b * c.padded_vocab_size * 2;
    CHECK(global == 18 * sbh + logits + 3 * 4 * (size_t)s * b, "global part %zu", global);
}

// Allocated bytes of a model are what the layouts say: state by
// gpt_state_bytes, the arena by act_layout_build.
static void allocation_matches_layouts(void) {
    GPTConfig c = config();
    for (int k = 0; k < NUM_CASES; k++) {
        RecomputePolicy p = recompute_policy(CASES[k].mode, CASES[k].full, c.num_layers);
        size_t before = be->allocated_bytes(be);
        GPT m;
        gpt_create_recompute(&m, &c, be, B, T, 1, 0, 0, &p);
        size_t got = be->allocated_bytes(be) - before;
        StateBytes sb = gpt_state_bytes(&c, DTYPE_F32, 1, 0);
        ActLayout al;
        act_layout_build(&al, &c, B, T, DTYPE_F32, &p);
        size_t rope = llama ? (size_t)T * (c.channels / c.num_heads) * sizeof(float) : 0;  // the RoPE table
        size_t want = sb.params + sb.grads + sb.master + sb.adam + al.bytes + 2 * (size_t)B * T * 4 + 16 + rope;
        CHECK(got == want, "%s: allocated %zu, layouts say %zu", CASES[k].name, got, want);
        CHECK(m.acts.bytes == al.bytes, "%s: arena %zu vs %zu", CASES[k].name, m.acts.bytes, al.bytes);
        gpt_free(&m);
    }
}

int main(void) {
    be = cpu_backend_create(DTYPE_F32, 0);
    RUN(ops_bitwise_properties);
    RUN(grads_bitwise_equal_across_policies);
    RUN(training_bitwise_equal_across_policies);
    RUN(arena_matches_accounting);
    RUN(allocation_matches_layouts);
    llama = 1;
    RUN_SUFFIXED(grads_bitwise_equal_across_policies, "_llama");
    RUN_SUFFIXED(training_bitwise_equal_across_policies, "_llama");
    RUN_SUFFIXED(allocation_matches_layouts, "_llama");
    be->destroy(be);
    return TESTS_DONE();
}
