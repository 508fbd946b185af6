// gpt2.c: GPT-2 (Radford et al. 2019), as a block definition for the model
// core (llm/model/block.h). One layer, with x the residual stream (B, T, C),
// NH heads of HS = C / NH channels:
//
//   h1   = layernorm(x) * ln1w + ln1b                (ln1; mean, rstd kept)
//   qkv  = h1 @ qkvw^T + qkvb                        (B, T, 3, NH, HS)
//   y    = softmax(q k^T / sqrt(HS), causal) v       (atty; its log-sum-exp kept)
//   x2   = x + y @ attprojw^T + attprojb             (residual2)
//   h2   = layernorm(x2) * ln2w + ln2b               (ln2)
//   u    = h2 @ fcw^T + fcb                          (B, T, 4C)  (fch)
//   s    = gelu(u)                                   (tanh approximation) (fch_gelu)
//   out  = x2 + s @ fcprojw^T + fcprojb              the next layer's x
//
// The input is the token embedding plus a learned position embedding; the
// output is layernorm(x_L) @ wte^T: the head is tied to the token embedding.
// Selective recompute drops ln1, ln2 and the GELU output (cheap to redo) and
// keeps the rest.
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/model/block.h"

// ---------------------------------------------------------------------------
// tensors and shapes

static const ParamKind EMBED[] = {P_WTE, P_WPE};
static const ParamKind LAYER[] = {P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
                                  P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB};
static const ParamKind FINAL[] = {P_LNFW, P_LNFB};

static KindList unit_kinds(const GPTConfig* c, UnitRole role) {
    return role == UNIT_EMBED ? KIND_LIST(EMBED) : role == UNIT_LAYER ? KIND_LIST(LAYER) : KIND_LIST(FINAL);
}

static void param_shape(const GPTConfig* c, ParamKind k, int* rows, int* cols) {
    int C = c->channels;
    switch (k) {
    case P_WTE: *rows = c->padded_vocab_size; *cols = C; return;  // (Vp, C)
    case P_WPE: *rows = c->max_seq_len; *cols = C; return;        // (max_seq_len, C)
    case P_QKVW: *rows = 3 * C; *cols = C; return;                // (3C, C)
    case P_QKVB: *rows = 1; *cols = 3 * C; return;                // (3C)
    case P_ATTPROJW: *rows = C; *cols = C; return;                // (C, C)
    case P_FCW: *rows = 4 * C; *cols = C; return;                 // (4C, C)
    case P_FCB: *rows = 1; *cols = 4 * C; return;                 // (4C)
    case P_FCPROJW: *rows = C; *cols = 4 * C; return;             // (C, 4C)
    default: *rows = 1; *cols = C; return;  // layernorm weights and biases, C-sized biases
    }
}

static size_t act_width(const GPTConfig* c, ActKind k) {
    size_t C = (size_t)c->channels;
    switch (k) {
    case A_LN1_MEAN: case A_LN1_RSTD: case A_LN2_MEAN: case A_LN2_RSTD: case A_LNF_MEAN: case A_LNF_RSTD: return 1;
    case A_QKV: return 3 * C;
    case A_ATT_LSE: return (size_t)c->num_heads;
    case A_FCH: case A_FCH_GELU: return 4 * C;
    case A_SCRATCH_BT4C: return 4 * C;  // d(fch) and d(fch_gelu), later dqkv (3C)
    default: return C;                  // ln1, atty, ln2
    }
}

// GPT-2 fixes what the other architectures choose.
static void finish_config(GPTConfig* c) {
    c->num_kv_heads = c->num_heads;
    c->mlp_hidden = 4 * c->channels;
    c->tie_embeddings = 1;
}

// ---------------------------------------------------------------------------
// forward

static void embed_forward(const Pass* p, void* embed, const int32_t* inputs) {
    block_encoder_forward(p, inputs, gpt_tensor_in_unit(p->m, embed, P_WTE, -1),
                          gpt_tensor_in_unit(p->m, embed, P_WPE, -1));
}

static void norm_forward(const Pass* p, const NormIO* n, const void* inp) {
    p->be->layernorm_forward(p->be, n->out, n->mean, n->rstd, inp, n->weight, n->bias, p->N, p->c->channels, n->amax);
}

// From ln1 up to the GELU: everything the layer's backward reads.
static void block_forward(const Pass* p, const LayerTensors* w, const LayerActs* a) {
    Backend* be = p->be;
    int C = p->c->channels, l = a->layer;
    // attention: residual2 = input + attproj(attention(qkv(ln1)))
    linear_forward(p, l, LINEAR_QKV, a->qkv, NULL, NULL, a->ln1, w->qkvw, w->qkvb, C, 3 * C);
    block_attention_forward(p, a);
    linear_measure_input(p, l, LINEAR_ATTPROJ, a->atty, (size_t)p->N * C);  // the attention measures nothing
    linear_forward(p, l, LINEAR_ATTPROJ, p->proj, NULL, NULL, a->atty, w->attprojw, w->attprojb, C, C);
    be->residual_layernorm_forward(be, a->residual2, a->ln2, a->ln2_mean, a->ln2_rstd, a->input, p->proj, w->ln2w,
                                   w->ln2b, p->N, C, linear_input_amax(p, l, LINEAR_FC));
    // MLP, first half: fch = fc(ln2), fch_gelu = gelu(fch). A layer that
    // keeps fch_gelu (or re-runs this whole function to get it back) may
    // take the GELU from the GEMM's epilogue; one that recomputes it from fch
    // in backward runs the GELU kernel here too, so both are the same bits.
    float* gelu_amax = linear_input_amax(p, l, LINEAR_FCPROJ);
    if (block_recompute(p, a, A_FCH_GELU)) {
        linear_forward(p, l, LINEAR_FC, a->fch, NULL, NULL, a->ln2, w->fcw, w->fcb, C, 4 * C);
        be->gelu_forward(be, a->fch_gelu, a->fch, (size_t)p->N * 4 * C, gelu_amax);
    } else {
        linear_forward(p, l, LINEAR_FC, a->fch_gelu, a->fch, gelu_amax, a->ln2, w->fcw, w->fcb, C, 4 * C);
    }
}

// output = residual2 + fcproj(fch_gelu), fused with the next norm.
static void block_output(const Pass* p, const LayerTensors* w, const LayerActs* a, const NormIO* next) {
    int C = p->c->channels;
    linear_forward(p, a->layer, LINEAR_FCPROJ, p->proj, NULL, NULL, a->fch_gelu, w->fcprojw, w->fcprojb, 4 * C, C);
    p->be->residual_layernorm_forward(p->be, a->output, next->out, next->mean, next->rstd, a->residual2, p->proj,
                                      next->weight, next->bias, p->N, C, next->amax);
}

static void* head_weight(const GPT* m, void* embed, void* final) { return gpt_tensor_in_unit(m, embed, P_WTE, -1); }

// ---------------------------------------------------------------------------
// backward

static void norm_backward(const Pass* p, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const NormIO* n, float* dinp_amax) {
    p->be->layernorm_backward(p->be, dinp, dweight, dbias, dout, inp, n->weight, n->mean, n->rstd, p->N,
                              p->c->channels, dinp_amax);
}

// p->dres: the gradient of the layer's output in (and, by the identity
// path, of residual2), of its input out. dbtc and dwide are scratch; under
// recompute ln1, ln2 and fch_gelu live there too (block_recompute).
static void block_backward(const Pass* p, const LayerTensors* w, const LayerTensors* g, const LayerActs* a) {
    Backend* be = p->be;
    int C = p->c->channels, l = a->layer, N = p->N;
    size_t NC = (size_t)N * C;
    void *dres = p->dres, *dbtc = p->dbtc, *dwide = p->dwide;  // dwide: d(fch_gelu), d(fch), then dqkv
    NormIO ln1 = {a->ln1, a->ln1_mean, a->ln1_rstd, w->ln1w, w->ln1b, linear_input_amax(p, l, LINEAR_QKV)};
    NormIO ln2 = {a->ln2, a->ln2_mean, a->ln2_rstd, w->ln2w, w->ln2b, linear_input_amax(p, l, LINEAR_FC)};

    // MLP
    if (block_recompute(p, a, A_FCH_GELU))
        be->gelu_forward(be, a->fch_gelu, a->fch, 4 * NC, linear_input_amax(p, l, LINEAR_FCPROJ));
    // dwide = d(fch), and fc's bias gradient with it (the GEMM's epilogue where the backend can)
    linear_backward_gelu(p, l, LINEAR_FCPROJ, dwide, g->fcprojw, g->fcprojb, dres, a->fch_gelu, w->fcprojw, a->fch,
                         g->fcb, linear_grad_amax(p, l, LINEAR_FC), 4 * C, C);
    if (block_recompute(p, a, A_LN2)) norm_forward(p, &ln2, a->residual2);
    linear_backward(p, l, LINEAR_FC, dbtc, g->fcw, NULL, dwide, a->ln2, w->fcw, C, 4 * C);
    norm_backward(p, dres, g->ln2w, g->ln2b, dbtc, a->residual2, &ln2, linear_grad_amax(p, l, LINEAR_ATTPROJ));

    // attention; dres becomes the gradient of the layer's input
    linear_backward(p, l, LINEAR_ATTPROJ, dbtc, g->attprojw, g->attprojb, dres, a->atty, w->attprojw, C, C);
    block_attention_backward(p, dwide, dbtc, a);
    linear_measure_grad(p, l, LINEAR_QKV, dwide, 3 * NC);  // the attention measures nothing
    if (block_recompute(p, a, A_LN1)) norm_forward(p, &ln1, a->input);
    linear_backward(p, l, LINEAR_QKV, dbtc, g->qkvw, g->qkvb, dwide, a->ln1, w->qkvw, C, 3 * C);
    // the layer's input is the previous layer's down projection's output
    norm_backward(p, dres, g->ln1w, g->ln1b, dbtc, a->input, &ln1, linear_grad_amax(p, l - 1, LINEAR_FCPROJ));
}

static void embed_backward(const Pass* p, void* dembed, const int32_t* inputs) {
    block_encoder_backward(p, inputs, gpt_tensor_in_unit(p->m, dembed, P_WTE, -1),
                           gpt_tensor_in_unit(p->m, dembed, P_WPE, -1));
}

// ---------------------------------------------------------------------------
// names

// GPT2LMHeadModel, names under "transformer.": its linear weights are Conv1D,
// stored (in, out), the transpose of our (out, in). The LM head is wte
// (lm_head.weight, when present, is the same tensor).
static void hf_tensors(const GPTConfig* c, HfNameSink add, void* ctx) {
    int C = c->channels;
    char n[96];
    add(ctx, "transformer.wte.weight", P_WTE, -1, 0, c->vocab_size, C, 0);
    add(ctx, "transformer.wpe.weight", P_WPE, -1, 0, c->max_seq_len, C, 0);
    for (int i = 0; i < c->num_layers; i++) {
#define H(suffix, kind, rows, cols, tr) \
    snprintf(n, sizeof n, "transformer.h.%d.%s", i, suffix); \
    add(ctx, n, kind, i, 0, rows, cols, tr)
        H("ln_1.weight", P_LN1W, 1, C, 0);
        H("ln_1.bias", P_LN1B, 1, C, 0);
        H("attn.c_attn.weight", P_QKVW, 3 * C, C, 1);
        H("attn.c_attn.bias", P_QKVB, 1, 3 * C, 0);
        H("attn.c_proj.weight", P_ATTPROJW, C, C, 1);
        H("attn.c_proj.bias", P_ATTPROJB, 1, C, 0);
        H("ln_2.weight", P_LN2W, 1, C, 0);
        H("ln_2.bias", P_LN2B, 1, C, 0);
        H("mlp.c_fc.weight", P_FCW, 4 * C, C, 1);
        H("mlp.c_fc.bias", P_FCB, 1, 4 * C, 0);
        H("mlp.c_proj.weight", P_FCPROJW, C, 4 * C, 1);
        H("mlp.c_proj.bias", P_FCPROJB, 1, C, 0);
#undef H
    }
    add(ctx, "transformer.ln_f.weight", P_LNFW, -1, 0, 1, C, 0);
    add(ctx, "transformer.ln_f.bias", P_LNFB, -1, 0, 1, C, 0);
}

static int ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

// The causal-mask buffers of older checkpoints; the tied head.
static int hf_ignorable(const GPTConfig* c, const char* name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || !strcmp(name, "lm_head.weight");
}

// ---------------------------------------------------------------------------
// presets

// The four GPT-2 sizes, all with heads of 64 channels and 1024 positions;
// then larger GPT-3-style shapes for planning and training at scale (Brown
// et al. 2020, Table 2.1, with widths rounded to multiples of 128 and heads
// of 128 channels: 1.31B, 6.66B, 12.9B, 29.9B and 64.8B parameters with
// GPT-2's vocabulary and 4K positions), whose positions follow --seq-len.
static const ModelPreset PRESETS[] = {
    {"gpt2-124M", 12, 768, 12, 0, 0, 1, 1024},
    {"gpt2-350M", 24, 1024, 16, 0, 0, 1, 1024},
    {"gpt2-774M", 36, 1280, 20, 0, 0, 1, 1024},
    {"gpt2-1558M", 48, 1600, 25, 0, 0, 1, 1024},
    {"gpt-1B", 24, 2048, 16, 0, 0, 1, 0},
    {"gpt-7B", 32, 4096, 32, 0, 0, 1, 0},
    {"gpt-13B", 40, 5120, 40, 0, 0, 1, 0},
    {"gpt-30B", 48, 7168, 56, 0, 0, 1, 0},
    {"gpt-64B", 80, 8192, 64, 0, 0, 1, 0},
};

const BlockDef GPT2_BLOCK = {
    .name = "gpt2",
    .finish_config = finish_config,
    .unit_kinds = unit_kinds,
    .param_shape = param_shape,
    .act_width = act_width,
    .state_bytes = NULL,
    .create_state = NULL,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .norm_forward = norm_forward,
    .norm_backward = norm_backward,
    .block_forward = block_forward,
    .block_output = block_output,
    .block_backward = block_backward,
    .head_weight = head_weight,
    .hf_tensors = hf_tensors,
    .hf_ignorable = hf_ignorable,
    .presets = PRESETS,
    .num_presets = (int)(sizeof PRESETS / sizeof PRESETS[0]),
    .preset_vocab = 50257,
    .preset_vocab_name = "GPT-2's",
};
