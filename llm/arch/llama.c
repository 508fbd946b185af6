// llama.c: Llama 3 (Grattafiori et al. 2024), as a block definition for the
// model core (llm/model/block.h). One layer, with x the residual stream
// (B, T, C), NH query heads and NKV key/value heads of HS = C / NH channels,
// H the MLP width:
//
//   h1   = rmsnorm(x) * ln1w                     (ln1; rstd kept)
//   qkv  = h1 @ qkvw^T                           (B, T, NH + 2*NKV, HS)
//   q, k = rope(q), rope(k)                      in place, theta^(-2i/HS)
//   y    = attention(q, k, v)                    grouped-query: NH / NKV queries per kv head
//   x2   = x + y @ attprojw^T                    (residual2)
//   h2   = rmsnorm(x2) * ln2w                    (ln2)
//   gu   = h2 @ fcw^T                            (B, T, 2H): gate | up (fch)
//   s    = silu(gate) * up                       (B, T, H)  (fch_gelu)
//   out  = x2 + s @ fcprojw^T                    the next layer's x
//
// then logits = rmsnorm(x_L) * lnfw @ head^T, head = lm_head (or wte when
// tied). No biases, no position embeddings (RoPE encodes positions).
//
// Recompute `selective` keeps what costs a GEMM or the attention (qkv after
// RoPE, the attention output and lse, residual2, the gate/up output, the
// RMSNorm statistics) and recomputes the two RMSNorm outputs and the SwiGLU
// output in backward.
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/model/block.h"

#define LLAMA_NORM_EPS 1e-5f

// The RMSNorm epsilon: the config's (a Hugging Face rms_norm_eps), else Llama 3's 1e-5.
static inline float norm_eps(const GPTConfig* c) { return c->norm_eps > 0 ? c->norm_eps : LLAMA_NORM_EPS; }

// ---------------------------------------------------------------------------
// tensors and shapes

static const ParamKind EMBED[] = {P_WTE};
static const ParamKind LAYER[] = {P_LN1W, P_QKVW, P_ATTPROJW, P_LN2W, P_FCW, P_FCPROJW};
static const ParamKind FINAL_TIED[] = {P_LNFW};
static const ParamKind FINAL_UNTIED[] = {P_LNFW, P_LMHEAD};

static KindList unit_kinds(const GPTConfig* c, UnitRole role) {
    if (role == UNIT_EMBED) return KIND_LIST(EMBED);
    if (role == UNIT_LAYER) return KIND_LIST(LAYER);
    return c->tie_embeddings ? KIND_LIST(FINAL_TIED) : KIND_LIST(FINAL_UNTIED);
}

static void param_shape(const GPTConfig* c, ParamKind k, int* rows, int* cols) {
    int C = c->channels, H = c->mlp_hidden;
    switch (k) {
    case P_WTE: case P_LMHEAD: *rows = c->padded_vocab_size; *cols = C; return;   // (Vp, C)
    case P_QKVW: *rows = gpt_qkv_width(c); *cols = C; return;                      // ((NH + 2 NKV) HS, C)
    case P_ATTPROJW: *rows = C; *cols = c->num_heads * gpt_head_size(c); return;  // (C, NH HS)
    case P_FCW: *rows = 2 * H; *cols = C; return;                                  // (2H, C): gate, up
    case P_FCPROJW: *rows = C; *cols = H; return;                                  // (C, H)
    default: *rows = 1; *cols = C; return;                                         // the RMSNorm weights
    }
}

static size_t act_width(const GPTConfig* c, ActKind k) {
    size_t C = (size_t)c->channels, H = (size_t)c->mlp_hidden, qkv = (size_t)gpt_qkv_width(c);
    switch (k) {
    case A_LN1_MEAN: case A_LN2_MEAN: case A_LNF_MEAN: return 0;  // RMSNorm keeps no mean
    case A_LN1_RSTD: case A_LN2_RSTD: case A_LNF_RSTD: return 1;
    case A_QKV: return qkv;
    case A_ATT_LSE: return (size_t)c->num_heads;
    case A_FCH: return 2 * H;
    case A_FCH_GELU: return H;
    // Backward: d(s) (H) then d(gate|up) (2H) side by side; later dqkv.
    case A_SCRATCH_BT4C: return 3 * H > qkv ? 3 * H : qkv;
    default: return C;  // ln1, atty, ln2
    }
}

static void finish_config(GPTConfig* c) {
    if (c->num_kv_heads <= 0 || c->num_heads % c->num_kv_heads != 0)
        fatal("model: heads (%d) must be a multiple of the key/value heads (%d)", c->num_heads, c->num_kv_heads);
    if (c->mlp_hidden <= 0) fatal("model: the MLP width must be positive (got %d)", c->mlp_hidden);
    if (gpt_head_size(c) % 2 != 0)
        fatal("model: RoPE needs an even head size (channels %d / heads %d = %d)", c->channels, c->num_heads,
              gpt_head_size(c));
    if (!(c->rope_theta > 1.0f)) fatal("model: the RoPE theta must be greater than 1 (got %g)", c->rope_theta);
}

// The RoPE table (T, HS/2, 2): cos and sin of every position and pair.
static size_t state_bytes(const GPTConfig* c, int T) { return (size_t)T * gpt_head_size(c) * sizeof(float); }

static void create_state(GPT* m) {
    const GPTConfig* c = &m->config;
    int HS = gpt_head_size(c);
    size_t n = (size_t)gpt_positions(m) * HS;
    float* host = (float*)xmalloc(n * sizeof(float));
    rope_table(host, gpt_positions(m), HS, c->rope_theta, c->rope_scaling.factor > 0 ? &c->rope_scaling : NULL);
    m->rope_freqs = (float*)m->be->alloc(m->be, n * sizeof(float), "RoPE table");
    m->be->to_device(m->be, m->rope_freqs, host, n * sizeof(float));
    free(host);
}

// ---------------------------------------------------------------------------
// forward

static void embed_forward(const Pass* p, void* embed, const int32_t* inputs) {
    block_encoder_forward(p, inputs, gpt_tensor_in_unit(p->m, embed, P_WTE, -1), NULL);
}

static void norm_forward(const Pass* p, const NormIO* n, const void* inp) {
    p->be->rmsnorm_forward(p->be, n->out, n->rstd, inp, n->weight, p->N, p->c->channels, norm_eps(p->c), n->amax);
}

// From ln1 up to the SwiGLU output: everything the layer's backward reads.
static void block_forward(const Pass* p, const LayerTensors* w, const LayerActs* a) {
    Backend* be = p->be;
    const GPTConfig* c = p->c;
    int C = c->channels, NH = c->num_heads, HS = gpt_head_size(c), H = c->mlp_hidden;
    int l = a->layer;
    // attention: residual2 = input + o_proj(attention(rope(qkv(ln1))))
    linear_forward(p, l, LINEAR_QKV, a->qkv, NULL, NULL, a->ln1, w->qkvw, NULL, C, gpt_qkv_width(c));
    block_rope(p, a->qkv, 0);
    block_attention_forward(p, a);
    linear_measure_input(p, l, LINEAR_ATTPROJ, a->atty, (size_t)p->N * NH * HS);  // attention measures nothing
    linear_forward(p, l, LINEAR_ATTPROJ, p->proj, NULL, NULL, a->atty, w->attprojw, NULL, NH * HS, C);
    be->residual_rmsnorm_forward(be, a->residual2, a->ln2, a->ln2_rstd, a->input, p->proj, w->ln2w, p->N, C,
                                 norm_eps(c), linear_input_amax(p, l, LINEAR_FC));
    // MLP, first half: gate|up = fc(ln2), s = silu(gate) * up
    linear_forward(p, l, LINEAR_FC, a->fch, NULL, NULL, a->ln2, w->fcw, NULL, C, 2 * H);
    be->swiglu_forward(be, a->fch_gelu, a->fch, p->N, H, linear_input_amax(p, l, LINEAR_FCPROJ));
}

// output = residual2 + down(s), fused with the next RMSNorm.
static void block_output(const Pass* p, const LayerTensors* w, const LayerActs* a, const NormIO* next) {
    int C = p->c->channels, H = p->c->mlp_hidden;
    linear_forward(p, a->layer, LINEAR_FCPROJ, p->proj, NULL, NULL, a->fch_gelu, w->fcprojw, NULL, H, C);
    p->be->residual_rmsnorm_forward(p->be, a->output, next->out, next->rstd, a->residual2, p->proj, next->weight,
                                    p->N, C, norm_eps(p->c), next->amax);
}

// The LM head: lm_head in the final unit, or wte when tied.
static void* head_weight(const GPT* m, void* embed, void* final) {
    if (m->config.tie_embeddings) return gpt_tensor_in_unit(m, embed, P_WTE, -1);
    return gpt_tensor_in_unit(m, final, P_LMHEAD, -1);
}

// ---------------------------------------------------------------------------
// backward

static void norm_backward(const Pass* p, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const NormIO* n, float* dinp_amax) {
    p->be->rmsnorm_backward(p->be, dinp, dweight, dout, inp, n->weight, n->rstd, p->N, p->c->channels, dinp_amax);
}

// p->dres: the gradient of the layer's output in (and of residual2), of its
// input out. The wide scratch holds d(s) (B, T, H) beside d(gate|up)
// (B, T, 2H), later dqkv; under recompute s lives where d(s) goes, and
// ln1 and ln2 in dbtc (block_recompute).
static void block_backward(const Pass* p, const LayerTensors* w, const LayerTensors* g, const LayerActs* a) {
    Backend* be = p->be;
    const GPTConfig* c = p->c;
    int C = c->channels, NH = c->num_heads, HS = gpt_head_size(c), H = c->mlp_hidden;
    int QKV = gpt_qkv_width(c), l = a->layer, N = p->N;
    size_t es = dtype_size(p->m->dtype);
    void *dres = p->dres, *dbtc = p->dbtc;
    void* ds = p->dwide;                          // (B, T, H) d(s)
    void* dgu = (char*)ds + (size_t)N * H * es;   // (B, T, 2H) d(gate|up)
    void* dqkv = ds;                              // (B, T, QKV) once the MLP is done
    NormIO ln1 = {a->ln1, NULL, a->ln1_rstd, w->ln1w, NULL, linear_input_amax(p, l, LINEAR_QKV)};
    NormIO ln2 = {a->ln2, NULL, a->ln2_rstd, w->ln2w, NULL, linear_input_amax(p, l, LINEAR_FC)};

    // MLP
    if (block_recompute(p, a, A_FCH_GELU))
        be->swiglu_forward(be, a->fch_gelu, a->fch, N, H, linear_input_amax(p, l, LINEAR_FCPROJ));
    linear_backward(p, l, LINEAR_FCPROJ, ds, g->fcprojw, NULL, dres, a->fch_gelu, w->fcprojw, H, C);
    be->swiglu_backward(be, dgu, a->fch, ds, N, H, linear_grad_amax(p, l, LINEAR_FC));
    if (block_recompute(p, a, A_LN2)) norm_forward(p, &ln2, a->residual2);
    linear_backward(p, l, LINEAR_FC, dbtc, g->fcw, NULL, dgu, a->ln2, w->fcw, C, 2 * H);
    norm_backward(p, dres, g->ln2w, NULL, dbtc, a->residual2, &ln2, linear_grad_amax(p, l, LINEAR_ATTPROJ));

    // attention; dres becomes the gradient of the layer's input
    linear_backward(p, l, LINEAR_ATTPROJ, dbtc, g->attprojw, NULL, dres, a->atty, w->attprojw, NH * HS, C);
    block_attention_backward(p, dqkv, dbtc, a);
    block_rope(p, dqkv, 1);
    linear_measure_grad(p, l, LINEAR_QKV, dqkv, (size_t)N * QKV);  // attention and RoPE measure nothing
    if (block_recompute(p, a, A_LN1)) norm_forward(p, &ln1, a->input);
    linear_backward(p, l, LINEAR_QKV, dbtc, g->qkvw, NULL, dqkv, a->ln1, w->qkvw, C, QKV);
    // the layer's input is the previous layer's down projection's output
    norm_backward(p, dres, g->ln1w, NULL, dbtc, a->input, &ln1, linear_grad_amax(p, l - 1, LINEAR_FCPROJ));
}

static void embed_backward(const Pass* p, void* dembed, const int32_t* inputs) {
    block_encoder_backward(p, inputs, gpt_tensor_in_unit(p->m, dembed, P_WTE, -1), NULL);
}

// ---------------------------------------------------------------------------
// names

// LlamaForCausalLM, names under "model.": q, k and v are row blocks of our
// fused qkv ((NH + 2 NKV) heads of HS rows: the query heads, then the key
// heads, then the value heads); gate and up are row blocks of our fused fcw
// (gate first). Our RoPE pairs element i with i + HS/2 (kernels/cpu/rope.c),
// as Hugging Face's rotate_half does, so q and k rows are copied as they
// are, unpermuted.
static void hf_tensors(const GPTConfig* c, HfNameSink add, void* ctx) {
    int C = c->channels, HS = gpt_head_size(c), NH = c->num_heads, NKV = c->num_kv_heads, Hm = c->mlp_hidden;
    char n[96];
    add(ctx, "model.embed_tokens.weight", P_WTE, -1, 0, c->vocab_size, C, 0);
    for (int i = 0; i < c->num_layers; i++) {
#define H(suffix, kind, row0, rows, cols) \
    snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix); \
    add(ctx, n, kind, i, row0, rows, cols, 0)
        H("input_layernorm.weight", P_LN1W, 0, 1, C);
        H("self_attn.q_proj.weight", P_QKVW, 0, NH * HS, C);
        H("self_attn.k_proj.weight", P_QKVW, NH * HS, NKV * HS, C);
        H("self_attn.v_proj.weight", P_QKVW, (NH + NKV) * HS, NKV * HS, C);
        H("self_attn.o_proj.weight", P_ATTPROJW, 0, C, NH * HS);
        H("post_attention_layernorm.weight", P_LN2W, 0, 1, C);
        H("mlp.gate_proj.weight", P_FCW, 0, Hm, C);
        H("mlp.up_proj.weight", P_FCW, Hm, Hm, C);
        H("mlp.down_proj.weight", P_FCPROJW, 0, C, Hm);
#undef H
    }
    add(ctx, "model.norm.weight", P_LNFW, -1, 0, 1, C, 0);
    if (!c->tie_embeddings) add(ctx, "lm_head.weight", P_LMHEAD, -1, 0, c->vocab_size, C, 0);
}

static int hf_ignorable(const GPTConfig* c, const char* name) {
    size_t a = strlen(name), b = strlen(".rotary_emb.inv_freq");
    return (a >= b && !strcmp(name + a - b, ".rotary_emb.inv_freq")) ||
           (c->tie_embeddings && !strcmp(name, "lm_head.weight"));
}

// ---------------------------------------------------------------------------
// presets

// Meta's model cards (Llama 3.2 1B and 3B, Llama 3.1 8B and 70B): layers,
// channels, heads, kv heads, MLP width, tied embeddings.
static const ModelPreset PRESETS[] = {
    {"llama3-1B", 16, 2048, 32, 8, 8192, 1, 0},
    {"llama3-3B", 28, 3072, 24, 8, 8192, 1, 0},
    {"llama3-8B", 32, 4096, 32, 8, 14336, 0, 0},
    {"llama3-70B", 80, 8192, 64, 8, 28672, 0, 0},
};

const BlockDef LLAMA_BLOCK = {
    .name = "llama",
    .finish_config = finish_config,
    .unit_kinds = unit_kinds,
    .param_shape = param_shape,
    .act_width = act_width,
    .state_bytes = state_bytes,
    .create_state = create_state,
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
    .preset_vocab = 128256,  // Llama 3's tokenizer
    .preset_vocab_name = "Llama 3's",
};
