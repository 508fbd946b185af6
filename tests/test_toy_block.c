// test_toy_block.c: the model core's interface is enough for an architecture
// it has never seen. A toy block lives only in this file: GPT-2 with RMSNorm
// in place of LayerNorm (no norm biases, no means kept). It is registered
// at run time (arch_register) and trained through the core's own files,
// unchanged: its layouts, the loops over layers, recompute, the linear
// layer, the loss, AdamW and the planner.
//
// What must hold: the gradients the core computes through the toy's block
// agree with central finite differences of its loss; every recompute policy
// gives the same bits; a few AdamW steps fit a fixed batch; the planner's
// bill for the toy is the backend's peak allocation to the byte.
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "llm/arch/arch.h"
#include "llm/model/block.h"
#include "llm/plan/planner.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

// ---------------------------------------------------------------------------
// the toy block: x -> rmsnorm -> attention -> + x -> rmsnorm -> GELU MLP -> +

#define TOY_EPS 1e-5f

static const ParamKind TOY_EMBED[] = {P_WTE, P_WPE};
static const ParamKind TOY_LAYER[] = {P_LN1W, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
                                      P_LN2W, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB};
static const ParamKind TOY_FINAL[] = {P_LNFW};

static KindList toy_unit_kinds(const GPTConfig* c, UnitRole role) {
    return role == UNIT_EMBED ? KIND_LIST(TOY_EMBED) : role == UNIT_LAYER ? KIND_LIST(TOY_LAYER) : KIND_LIST(TOY_FINAL);
}

static void toy_param_shape(const GPTConfig* c, ParamKind k, int* rows, int* cols) {
    int C = c->channels;
    *rows = 1;
    *cols = C;  // norm weights, C-sized biases
    if (k == P_WTE) *rows = c->padded_vocab_size;
    if (k == P_WPE) *rows = c->max_seq_len;
    if (k == P_QKVW || k == P_FCW) *rows = (k == P_QKVW ? 3 : 4) * C;
    if (k == P_QKVB || k == P_FCB) *cols = (k == P_QKVB ? 3 : 4) * C;
    if (k == P_ATTPROJW) *rows = C;
    if (k == P_FCPROJW) *rows = C, *cols = 4 * C;
}

static size_t toy_act_width(const GPTConfig* c, ActKind k) {
    size_t C = (size_t)c->channels;
    switch (k) {
    case A_LN1_MEAN: case A_LN2_MEAN: case A_LNF_MEAN: return 0;
    case A_LN1_RSTD: case A_LN2_RSTD: case A_LNF_RSTD: return 1;
    case A_QKV: return 3 * C;
    case A_ATT_LSE: return (size_t)c->num_heads;
    case A_FCH: case A_FCH_GELU: case A_SCRATCH_BT4C: return 4 * C;
    default: return C;
    }
}

static void toy_finish(GPTConfig* c) {
    c->num_kv_heads = c->num_heads;
    c->mlp_hidden = 4 * c->channels;
    c->tie_embeddings = 1;
}

static void toy_embed_forward(const Pass* p, void* embed, const int32_t* inputs) {
    p->be->encoder_forward(p->be, gpt_act(p->m, A_ENCODED), inputs, gpt_tensor_in_unit(p->m, embed, P_WTE, -1),
                           gpt_tensor_in_unit(p->m, embed, P_WPE, -1), p->B, p->T, p->c->channels);
}

static void toy_norm_forward(const Pass* p, const NormIO* n, const void* inp) {
    p->be->rmsnorm_forward(p->be, n->out, n->rstd, inp, n->weight, p->N, p->c->channels, TOY_EPS, n->amax);
}

static void toy_norm_backward(const Pass* p, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                              const NormIO* n, float* dinp_amax) {
    p->be->rmsnorm_backward(p->be, dinp, dweight, dout, inp, n->weight, n->rstd, p->N, p->c->channels, dinp_amax);
}

static void toy_block_forward(const Pass* p, const LayerTensors* w, const LayerActs* a) {
    int C = p->c->channels, NH = p->c->num_heads, l = a->layer;
    linear_forward(p, l, LINEAR_QKV, a->qkv, NULL, NULL, a->ln1, w->qkvw, w->qkvb, C, 3 * C);
    p->be->attention_forward(p->be, a->atty, a->lse, a->qkv, p->B, p->T, NH, NH, C / NH);
    linear_measure_input(p, l, LINEAR_ATTPROJ, a->atty, (size_t)p->N * C);
    linear_forward(p, l, LINEAR_ATTPROJ, p->proj, NULL, NULL, a->atty, w->attprojw, w->attprojb, C, C);
    p->be->residual_rmsnorm_forward(p->be, a->residual2, a->ln2, a->ln2_rstd, a->input, p->proj, w->ln2w, p->N, C,
                                    TOY_EPS, linear_input_amax(p, l, LINEAR_FC));
    linear_forward(p, l, LINEAR_FC, a->fch_gelu, a->fch, linear_input_amax(p, l, LINEAR_FCPROJ), a->ln2, w->fcw,
                   w->fcb, C, 4 * C);
}

static void toy_block_output(const Pass* p, const LayerTensors* w, const LayerActs* a, const NormIO* next) {
    int C = p->c->channels;
    linear_forward(p, a->layer, LINEAR_FCPROJ, p->proj, NULL, NULL, a->fch_gelu, w->fcprojw, w->fcprojb, 4 * C, C);
    p->be->residual_rmsnorm_forward(p->be, a->output, next->out, next->rstd, a->residual2, p->proj, next->weight,
                                    p->N, C, TOY_EPS, next->amax);
}

static void toy_block_backward(const Pass* p, const LayerTensors* w, const LayerTensors* g, const LayerActs* a) {
    Backend* be = p->be;
    int C = p->c->channels, NH = p->c->num_heads, l = a->layer;
    size_t NC = (size_t)p->N * C;
    NormIO ln1 = {a->ln1, NULL, a->ln1_rstd, w->ln1w, NULL, linear_input_amax(p, l, LINEAR_QKV)};
    NormIO ln2 = {a->ln2, NULL, a->ln2_rstd, w->ln2w, NULL, linear_input_amax(p, l, LINEAR_FC)};
    if (block_recompute(p, a, A_FCH_GELU))
        be->gelu_forward(be, a->fch_gelu, a->fch, 4 * NC, linear_input_amax(p, l, LINEAR_FCPROJ));
    linear_backward(p, l, LINEAR_FCPROJ, p->dwide, g->fcprojw, g->fcprojb, p->dres, a->fch_gelu, w->fcprojw, 4 * C, C);
    be->gelu_backward(be, p->dwide, a->fch, p->dwide, 4 * NC, linear_grad_amax(p, l, LINEAR_FC));
    if (block_recompute(p, a, A_LN2)) toy_norm_forward(p, &ln2, a->residual2);
    linear_backward(p, l, LINEAR_FC, p->dbtc, g->fcw, g->fcb, p->dwide, a->ln2, w->fcw, C, 4 * C);
    toy_norm_backward(p, p->dres, g->ln2w, NULL, p->dbtc, a->residual2, &ln2, linear_grad_amax(p, l, LINEAR_ATTPROJ));
    linear_backward(p, l, LINEAR_ATTPROJ, p->dbtc, g->attprojw, g->attprojb, p->dres, a->atty, w->attprojw, C, C);
    be->attention_backward(be, p->dwide, p->dbtc, a->qkv, a->atty, a->lse, p->B, p->T, NH, NH, C / NH);
    linear_measure_grad(p, l, LINEAR_QKV, p->dwide, 3 * NC);
    if (block_recompute(p, a, A_LN1)) toy_norm_forward(p, &ln1, a->input);
    linear_backward(p, l, LINEAR_QKV, p->dbtc, g->qkvw, g->qkvb, p->dwide, a->ln1, w->qkvw, C, 3 * C);
    toy_norm_backward(p, p->dres, g->ln1w, NULL, p->dbtc, a->input, &ln1, linear_grad_amax(p, l - 1, LINEAR_FCPROJ));
}

static void toy_embed_backward(const Pass* p, void* dembed, const int32_t* inputs) {
    p->be->encoder_backward(p->be, gpt_tensor_in_unit(p->m, dembed, P_WTE, -1),
                            gpt_tensor_in_unit(p->m, dembed, P_WPE, -1), p->dres, inputs, p->B, p->T, p->c->channels);
}

static void* toy_head_weight(const GPT* m, void* embed, void* final) { return gpt_tensor_in_unit(m, embed, P_WTE, -1); }

static void toy_hf_tensors(const GPTConfig* c, HfNameSink add, void* ctx) {}
static int toy_hf_ignorable(const GPTConfig* c, const char* name) { return 0; }

static const BlockDef TOY_BLOCK = {
    .name = "toy-rms-gpt2",
    .finish_config = toy_finish,
    .unit_kinds = toy_unit_kinds,
    .param_shape = toy_param_shape,
    .act_width = toy_act_width,
    .embed_forward = toy_embed_forward,
    .embed_backward = toy_embed_backward,
    .norm_forward = toy_norm_forward,
    .norm_backward = toy_norm_backward,
    .block_forward = toy_block_forward,
    .block_output = toy_block_output,
    .block_backward = toy_block_backward,
    .head_weight = toy_head_weight,
    .hf_tensors = toy_hf_tensors,
    .hf_ignorable = toy_hf_ignorable,
};

// ---------------------------------------------------------------------------
// the tests

#define B 2
#define T 11
#define V 67
#define WEIGHT_GAIN 10.0f  // weights of std 0.2: pre-activations of order 1
static Backend* be;
static Arch toy;

static GPTConfig toy_config(void) {
    GPTConfig c = {.max_seq_len = 16, .vocab_size = V, .num_layers = 3, .num_heads = 2, .channels = 32, .arch = toy};
    gpt_config_finish(&c);
    return c;
}

static void batch(int32_t* in, int32_t* tg) {
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)rng_below(rng_key(5, 1, 1), (uint64_t)i, V);
        tg[i] = (int32_t)rng_below(rng_key(5, 2, 2), (uint64_t)i, V);
    }
}

// A toy model with random weights everywhere (norm weights and biases too),
// large enough that every nonlinearity is far from linear, the batch loaded.
static void toy_model(GPT* m, const RecomputePolicy* p) {
    GPTConfig c = toy_config();
    gpt_create_recompute(m, &c, be, B, T, 1, 0, 0, p);
    gpt_init_random(m, 17);
    float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
    gpt_get_params_f32(m, flat);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        for (size_t j = 0; j < t->count; j++)
            flat[t->offset + j] = t->rows == 1 ? flat[t->offset + j] + 0.5f * rng_normal(rng_key(9, 9, 9), t->offset + j)
                                               : WEIGHT_GAIN * flat[t->offset + j];
    }
    gpt_set_params_f32(m, flat);
    free(flat);
    int32_t in[B * T], tg[B * T];
    batch(in, tg);
    be->to_device(be, m->inputs, in, sizeof in);
    be->to_device(be, m->targets, tg, sizeof tg);
}

// The mean loss of the loaded batch (and, with grads, its gradients in m->grads).
static double mean_loss(GPT* m, int grads) {
    float dloss = 1.0f / (B * T);
    if (grads) gpt_zero_grads(m);
    gpt_forward(m, m->inputs, m->targets, B, T, grads ? dloss : 0.0f);
    gpt_accumulate_loss(m, B, T, 0);
    if (grads) gpt_backward(m, m->inputs, B, T);
    float sum;
    be->to_host(be, &sum, m->scalars, sizeof sum);
    return (double)sum / (B * T);
}

// For every tensor of the toy, its element with the largest gradient: the
// core's gradient against (L(w + h) - L(w - h)) / 2h.
static void toy_gradients_match_finite_differences(void) {
    GPT m;
    toy_model(&m, NULL);
    mean_loss(&m, 1);
    size_t n = m.layout.total;
    float* grads = (float*)xmalloc(n * sizeof(float));
    float* w = (float*)xmalloc(n * sizeof(float));
    be->to_host(be, grads, m.grads, n * sizeof(float));
    gpt_get_params_f32(&m, w);
    int checked = 0;
    double worst = 0;
    for (int i = 0; i < m.layout.num_tensors; i++) {
        const ParamTensor* t = &m.layout.tensors[i];
        // Its largest gradient, and three elements drawn at random.
        size_t picks[4] = {t->offset, 0, 0, 0};
        for (size_t j = t->offset; j < t->offset + t->count; j++)
            picks[0] = fabsf(grads[j]) > fabsf(grads[picks[0]]) ? j : picks[0];
        for (int r = 1; r < 4; r++) picks[r] = t->offset + rng_below(rng_key(3, (uint64_t)i, (uint64_t)r), 0, t->count);
        for (int r = 0; r < 4; r++) {
            size_t e = picks[r];
            const float h = 1e-2f;
            float w0 = w[e];
            w[e] = w0 + h;
            gpt_set_params_f32(&m, w);
            double up = mean_loss(&m, 0);
            w[e] = w0 - h;
            gpt_set_params_f32(&m, w);
            double down = mean_loss(&m, 0);
            w[e] = w0;
            double fd = (up - down) / (2.0 * h);
            char what[96];
            snprintf(what, sizeof what, "d loss / d %s[%zu] of layer %d", param_kind_name(t->kind), e - t->offset,
                     t->layer);
            CHECK_CLOSE(grads[e], fd, 2e-4, 2e-2, what);
            double err = fabs(grads[e] - fd) / (2e-4 + 2e-2 * fabs(fd));  // 1: at the tolerance
            worst = err > worst ? err : worst;
            checked++;
        }
    }
    gpt_set_params_f32(&m, w);
    printf("# %d gradients against finite differences: the worst used %.0f%% of the tolerance\n", checked, 100 * worst);
    CHECK(checked == 4 * (2 + 10 * 3 + 1), "%d gradients checked", checked);
    free(grads);
    free(w);
    gpt_free(&m);
}

// Gradients after one backward under a recompute policy.
static float* toy_gradients(RecomputeMode mode, int full, double* loss) {
    RecomputePolicy p = recompute_policy(mode, full, 3);
    GPT m;
    toy_model(&m, &p);
    *loss = mean_loss(&m, 1);
    float* g = (float*)xmalloc(m.grads_size * sizeof(float));
    be->to_host(be, g, m.grads, m.grads_size * sizeof(float));
    gpt_free(&m);
    return g;
}

static void toy_recompute_is_bit_identical(void) {
    double loss0, loss;
    float* want = toy_gradients(RECOMPUTE_NONE, 0, &loss0);
    GPTConfig c = toy_config();
    ParamLayout pl;
    param_layout_build(&pl, &c, 1);
    struct { RecomputeMode mode; int full; const char* name; } cases[] = {
        {RECOMPUTE_SELECTIVE, 0, "selective"}, {RECOMPUTE_FULL, 0, "full"}, {RECOMPUTE_NONE, 2, "none + 2 full"}};
    for (int i = 0; i < 3; i++) {
        float* got = toy_gradients(cases[i].mode, cases[i].full, &loss);
        CHECK(loss == loss0 && !memcmp(got, want, pl.total * sizeof(float)), "%s: the loss or gradients differ",
              cases[i].name);
        free(got);
    }
    param_layout_free(&pl);
    free(want);
}

// 40 AdamW steps on one batch: the loss falls from about ln(V) to a fraction of it.
static void toy_trains(void) {
    GPT m;
    toy_model(&m, NULL);
    double first = mean_loss(&m, 1), last = first;
    for (int step = 0; step < 40; step++) {
        gpt_update(&m, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, (uint64_t)step);
        last = mean_loss(&m, 1);
    }
    CHECK(first > 3.5 && last < 0.5 * first, "loss %.4f -> %.4f", first, last);
    gpt_free(&m);
}

// The planner knows nothing of the toy but what the core tells it.
static void toy_planner_bills_its_arena(void) {
    Backend* b = cpu_backend_create(DTYPE_F32, 0);
    Backend* saved = be;
    be = b;
    RecomputePolicy p = recompute_policy(RECOMPUTE_SELECTIVE, 1, 3);
    GPT m;
    toy_model(&m, &p);
    mean_loss(&m, 1);
    gpt_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
    size_t peak = b->peak_allocated_bytes(b), planned = plan_bill_of_model(&m).allocated;
    CHECK(peak == planned, "peak allocated %zu, planned %zu", peak, planned);
    gpt_free(&m);
    be = saved;
    b->destroy(b);
}

int main(void) {
    be = cpu_backend_create(DTYPE_F32, 0);
    toy = arch_register(&TOY_BLOCK);
    RUN(toy_gradients_match_finite_differences);
    RUN(toy_recompute_is_bit_identical);
    RUN(toy_trains);
    RUN(toy_planner_bills_its_arena);
    be->destroy(be);
    return testlib_failures > 255 ? 255 : testlib_failures;
}
