// llama.c: the Llama 3 block on top of kernels/ops.h, beside GPT-2's in
// llm/gpt.c; both share the flat parameter and activation layouts, the ZeRO
// hooks, recompute and the trainer. One layer, with x the residual stream
// (B, T, C), HS = C / NH, H the MLP width:
//
//   h1   = rmsnorm(x) * ln1w                     (ln1, rstd kept)
//   qkv  = h1 @ qkvw^T                           (B, T, NH + 2*NKV, HS)
//   q, k = rope(q), rope(k)                      in place, theta^(-2i/HS)
//   y    = attention(q, k, v)                    grouped-query: NH / NKV queries per kv head
//   x2   = x + y @ attprojw^T                    (residual2)
//   h2   = rmsnorm(x2) * ln2w                    (ln2)
//   gu   = h2 @ fcw^T                            (B, T, 2H): gate | up (fch)
//   s    = silu(gate) * up                       (B, T, H)  (fch_gelu)
//   out  = x2 + s @ fcprojw^T
//
// then logits = rmsnorm(x_L) * lnfw @ head^T, head = lm_head (or wte when
// tied). No biases, no position embeddings (RoPE encodes positions).
//
// Tensor kinds (llm/gpt.h) and their Hugging Face names: wte =
// embed_tokens, ln1w = input_layernorm, qkvw = q_proj, k_proj, v_proj stacked,
// attprojw = o_proj, ln2w = post_attention_layernorm, fcw = gate_proj, up_proj
// stacked, fcprojw = down_proj, lnfw = norm, lm_head = lm_head.
//
// Recompute `selective` keeps what costs a GEMM or the attention (qkv after
// RoPE, the attention output and lse, residual2, the gate/up output, the
// RMSNorm statistics) and recomputes the two RMSNorm outputs and the SwiGLU
// output in backward; `full` re-runs the layer from its input.
#include <stdlib.h>

#include "llm/gpt_internal.h"

#define LLAMA_NORM_EPS 1e-5f

// The RMSNorm epsilon: the config's (a Hugging Face rms_norm_eps), else Llama 3's 1e-5.
static inline float norm_eps(const GPT* m) { return m->config.norm_eps > 0 ? m->config.norm_eps : LLAMA_NORM_EPS; }

static const ParamKind LLAMA_EMBED[] = {P_WTE};
static const ParamKind LLAMA_LAYER[] = {P_LN1W, P_QKVW, P_ATTPROJW, P_LN2W, P_FCW, P_FCPROJW};
static const ParamKind LLAMA_FINAL_TIED[] = {P_LNFW};
static const ParamKind LLAMA_FINAL_UNTIED[] = {P_LNFW, P_LMHEAD};

KindList llama_unit_kinds(const GPTConfig* c, int which) {
    if (which == 0) return (KindList){LLAMA_EMBED, 1};
    if (which == 1) return (KindList){LLAMA_LAYER, (int)(sizeof LLAMA_LAYER / sizeof LLAMA_LAYER[0])};
    return c->tie_embeddings ? (KindList){LLAMA_FINAL_TIED, 1} : (KindList){LLAMA_FINAL_UNTIED, 2};
}

void llama_param_shape(const GPTConfig* c, ParamKind k, int* rows, int* cols) {
    int C = c->channels, H = c->mlp_hidden;
    switch (k) {
    case P_WTE: case P_LMHEAD: *rows = c->padded_vocab_size; *cols = C; return;
    case P_QKVW: *rows = gpt_qkv_width(c); *cols = C; return;
    case P_ATTPROJW: *rows = C; *cols = c->num_heads * gpt_head_size(c); return;
    case P_FCW: *rows = 2 * H; *cols = C; return;
    case P_FCPROJW: *rows = C; *cols = H; return;
    default: *rows = 1; *cols = C; return;  // the RMSNorm weights
    }
}

size_t llama_act_width(const GPTConfig* c, ActKind k) {
    size_t H = (size_t)c->mlp_hidden, qkv = (size_t)gpt_qkv_width(c);
    switch (k) {
    case A_LN1_MEAN: case A_LN2_MEAN: case A_LNF_MEAN: return 0;  // RMSNorm keeps no mean
    case A_QKV: return qkv;
    case A_FCH: return 2 * H;
    case A_FCH_GELU: return H;
    // Backward: d(s) (H) then d(gate|up) (2H) side by side; later dqkv.
    case A_SCRATCH_BT4C: return 3 * H > qkv ? 3 * H : qkv;
    default: return (size_t)-1;
    }
}

void llama_create(GPT* m) {
    const GPTConfig* c = &m->config;
    int HS = gpt_head_size(c);
    size_t n = (size_t)m->T * HS;
    float* host = (float*)xmalloc(n * sizeof(float));
    rope_table(host, m->T, HS, c->rope_theta, c->rope_scaling.factor > 0 ? &c->rope_scaling : NULL);
    m->rope_freqs = (float*)m->be->alloc(m->be, n * sizeof(float), "RoPE table");
    m->be->to_device(m->be, m->rope_freqs, host, n * sizeof(float));
    free(host);
}

// The LM head: lm_head in the final unit, or wte when tied.
static void* head_weight(const GPT* m, void* embed_unit, void* final_unit) {
    if (m->config.tie_embeddings) return gpt_tensor_in_unit(m, embed_unit, P_WTE, -1);
    return gpt_tensor_in_unit(m, final_unit, P_LMHEAD, -1);
}

// ---------------------------------------------------------------------------
// forward

// Layer l from its normalised input a->ln1 up to the SwiGLU output:
// everything the layer's backward reads. The forward pass and full recompute
// both run it.
static void layer_forward_to_swiglu(GPT* m, int l, const LayerTensors* w, const LayerActs* a, int B, int T) {
    Backend* be = m->be;
    const GPTConfig* c = &m->config;
    int C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, HS = gpt_head_size(c), H = c->mlp_hidden;
    int N = B * T;
    void* proj = gpt_act(m, A_PROJ_OUT);
    // attention block: residual2 = input + o_proj(attention(rope(qkv(ln1))))
    gpt_linear_forward(m, l, FP8_QKV, a->qkv, NULL, NULL, a->ln1, w->qkvw, NULL, N, C, gpt_qkv_width(c));
    be->rope_forward(be, a->qkv, m->rope_freqs, B, T, NH, NKV, HS);
    be->attention_forward(be, a->atty, a->lse, a->qkv, B, T, NH, NKV, HS);
    float* atty_amax = gpt_amax_slot(m, l, FP8_ATTPROJ, FP8_INPUT);
    if (atty_amax) be->amax(be, atty_amax, a->atty, (size_t)N * NH * HS);  // attention measures nothing
    gpt_linear_forward(m, l, FP8_ATTPROJ, proj, NULL, NULL, a->atty, w->attprojw, NULL, N, NH * HS, C);
    be->residual_rmsnorm_forward(be, a->residual2, a->ln2, a->ln2_rstd, a->input, proj, w->ln2w, N, C, norm_eps(m),
                                 gpt_amax_slot(m, l, FP8_FC, FP8_INPUT));
    // MLP, first half: gate|up = fc(ln2), s = silu(gate) * up
    gpt_linear_forward(m, l, FP8_FC, a->fch, NULL, NULL, a->ln2, w->fcw, NULL, N, C, 2 * H);
    be->swiglu_forward(be, a->fch_gelu, a->fch, N, H, gpt_amax_slot(m, l, FP8_FCPROJ, FP8_INPUT));
}

void llama_forward(GPT* m, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
    const GPTConfig* c = &m->config;
    Backend* be = m->be;
    int C = c->channels, L = c->num_layers, V = c->vocab_size, Vp = c->padded_vocab_size, H = c->mlp_hidden;
    int N = B * T;
    void* embed = gpt_unit_params(m, gpt_embed_unit(), 0);
    void* proj = gpt_act(m, A_PROJ_OUT);
    fp8_begin_forward(m->fp8);

    be->encoder_forward(be, gpt_act(m, A_ENCODED), inputs, gpt_tensor_in_unit(m, embed, P_WTE, -1), NULL, B, T, C);
    LayerTensors w = gpt_layer_tensors(m, gpt_unit_params(m, gpt_layer_unit(0), 0), 0);
    LayerActs a = gpt_layer_acts(m, 0, (size_t)N);
    be->rmsnorm_forward(be, a.ln1, a.ln1_rstd, a.input, w.ln1w, N, C, norm_eps(m),
                        gpt_amax_slot(m, 0, FP8_QKV, FP8_INPUT));
    void* fin = NULL;
    for (int l = 0; l < L; l++) {
        layer_forward_to_swiglu(m, l, &w, &a, B, T);
        gpt_linear_forward(m, l, FP8_FCPROJ, proj, NULL, NULL, a.fch_gelu, w.fcprojw, NULL, N, H, C);
        // output = residual2 + down(s), fused with the next layer's (or the final) RMSNorm
        LayerTensors wn = w;
        LayerActs an = a;
        void *next_out, *next_w;
        float* next_rstd;
        if (l + 1 < L) {
            wn = gpt_layer_tensors(m, gpt_unit_params(m, gpt_layer_unit(l + 1), 0), l + 1);
            an = gpt_layer_acts(m, l + 1, (size_t)N);
            next_out = an.ln1;
            next_rstd = an.ln1_rstd;
            next_w = wn.ln1w;
        } else {
            fin = gpt_unit_params(m, gpt_final_unit(m), 0);
            next_out = gpt_act(m, A_LNF);
            next_rstd = (float*)gpt_act(m, A_LNF_RSTD);
            next_w = gpt_tensor_in_unit(m, fin, P_LNFW, -1);
        }
        be->residual_rmsnorm_forward(be, a.output, next_out, next_rstd, a.residual2, proj, next_w, N, C,
                                     norm_eps(m), gpt_amax_slot(m, l + 1, FP8_QKV, FP8_INPUT));
        gpt_unit_release(m, gpt_layer_unit(l), 0);
        w = wn;
        a = an;
    }
    be->matmul_forward(be, gpt_act(m, A_LOGITS), NULL, gpt_act(m, A_LNF), head_weight(m, embed, fin), NULL, N, C, Vp);
    gpt_unit_release(m, gpt_final_unit(m), 0);
    gpt_unit_release(m, gpt_embed_unit(), 0);
    fp8_end_forward(m->fp8);
    if (targets) be->cross_entropy(be, (float*)gpt_act(m, A_LOSSES), gpt_act(m, A_LOGITS), targets, N, V, Vp, dloss);
}

// ---------------------------------------------------------------------------
// backward

void llama_backward(GPT* m, const int32_t* inputs, int B, int T) {
    const GPTConfig* c = &m->config;
    Backend* be = m->be;
    int C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, HS = gpt_head_size(c), H = c->mlp_hidden;
    int L = c->num_layers, Vp = c->padded_vocab_size, QKV = gpt_qkv_width(c);
    int N = B * T;
    size_t es = dtype_size(m->dtype);
    void* dres = gpt_act(m, A_DRESIDUAL);      // gradient of the residual stream (B, T, C)
    void* dbtc = gpt_act(m, A_SCRATCH_BTC);    // (B, T, C) scratch
    void* ds = gpt_act(m, A_SCRATCH_BT4C);     // (B, T, H): d(s); also s when recomputed
    void* dgu = (char*)ds + (size_t)N * H * es;  // (B, T, 2H): d(gate|up), beside d(s)
    void* dqkv = ds;                           // (B, T, QKV) once the MLP is done
    int fu = gpt_final_unit(m);
    void* embed = gpt_unit_params(m, gpt_embed_unit(), 1);
    void* dembed = gpt_unit_grads(m, gpt_embed_unit());
    void* fin = gpt_unit_params(m, fu, 1);
    void* dfin = gpt_unit_grads(m, fu);
    fp8_begin_backward(m->fp8);

    // The logits buffer already holds dlogits (cross_entropy with dloss != 0).
    be->matmul_backward(be, dbtc, head_weight(m, dembed, dfin), NULL, gpt_act(m, A_LOGITS), gpt_act(m, A_LNF),
                        head_weight(m, embed, fin), N, C, Vp);
    be->zero(be, dres, (size_t)N * C * es);
    be->rmsnorm_backward(be, dres, gpt_tensor_in_unit(m, dfin, P_LNFW, -1), dbtc,
                         gpt_layer_acts(m, L - 1, (size_t)N).output, gpt_tensor_in_unit(m, fin, P_LNFW, -1),
                         (float*)gpt_act(m, A_LNF_RSTD), N, C, gpt_amax_slot(m, L - 1, FP8_FCPROJ, FP8_GRAD));
    gpt_unit_backward_done(m, fu);
    gpt_unit_release(m, fu, 1);

    for (int l = L - 1; l >= 0; l--) {
        int u = gpt_layer_unit(l);
        LayerTensors w = gpt_layer_tensors(m, gpt_unit_params(m, u, 1), l);
        LayerTensors g = gpt_layer_tensors(m, gpt_unit_grads(m, u), l);
        LayerActs a = gpt_layer_acts(m, l, (size_t)N);
        RecomputeMode mode = recompute_layer_mode(&m->acts.recompute, l);
        if (mode == RECOMPUTE_FULL) {
            be->rmsnorm_forward(be, a.ln1, a.ln1_rstd, a.input, w.ln1w, N, C, norm_eps(m),
                                gpt_amax_slot(m, l, FP8_QKV, FP8_INPUT));
            layer_forward_to_swiglu(m, l, &w, &a, B, T);
        }
        // MLP; dres is the gradient of the layer's output and of residual2.
        if (mode == RECOMPUTE_NONE) {
            gpt_linear_backward(m, l, FP8_FCPROJ, ds, g.fcprojw, NULL, dres, a.fch_gelu, w.fcprojw, N, H, C);
        } else {
            // s lives in the scratch ds (a full layer's forward put it there)
            if (mode == RECOMPUTE_SELECTIVE)
                be->swiglu_forward(be, ds, a.fch, N, H, gpt_amax_slot(m, l, FP8_FCPROJ, FP8_INPUT));
            gpt_linear_backward_over_input(m, l, FP8_FCPROJ, ds, g.fcprojw, NULL, dres, w.fcprojw, N, H, C);
        }
        be->swiglu_backward(be, dgu, a.fch, ds, N, H, gpt_amax_slot(m, l, FP8_FC, FP8_GRAD));
        if (mode == RECOMPUTE_NONE) {
            gpt_linear_backward(m, l, FP8_FC, dbtc, g.fcw, NULL, dgu, a.ln2, w.fcw, N, C, 2 * H);
        } else {
            if (mode == RECOMPUTE_SELECTIVE)
                be->rmsnorm_forward(be, dbtc, a.ln2_rstd, a.residual2, w.ln2w, N, C, norm_eps(m),
                                    gpt_amax_slot(m, l, FP8_FC, FP8_INPUT));
            gpt_linear_backward_over_input(m, l, FP8_FC, dbtc, g.fcw, NULL, dgu, w.fcw, N, C, 2 * H);
        }
        be->rmsnorm_backward(be, dres, g.ln2w, dbtc, a.residual2, w.ln2w, a.ln2_rstd, N, C,
                             gpt_amax_slot(m, l, FP8_ATTPROJ, FP8_GRAD));
        // attention; dres becomes the gradient of this layer's input.
        gpt_linear_backward(m, l, FP8_ATTPROJ, dbtc, g.attprojw, NULL, dres, a.atty, w.attprojw, N, NH * HS, C);
        be->attention_backward(be, dqkv, dbtc, a.qkv, a.atty, a.lse, B, T, NH, NKV, HS);
        be->rope_backward(be, dqkv, m->rope_freqs, B, T, NH, NKV, HS);
        float* dqkv_amax = gpt_amax_slot(m, l, FP8_QKV, FP8_GRAD);
        if (dqkv_amax) be->amax(be, dqkv_amax, dqkv, (size_t)N * QKV);  // attention and RoPE measure nothing
        if (mode == RECOMPUTE_NONE) {
            gpt_linear_backward(m, l, FP8_QKV, dbtc, g.qkvw, NULL, dqkv, a.ln1, w.qkvw, N, C, QKV);
        } else {
            // ln1 shares dbtc with ln2, so full layers recompute it again too.
            be->rmsnorm_forward(be, dbtc, a.ln1_rstd, a.input, w.ln1w, N, C, norm_eps(m),
                                gpt_amax_slot(m, l, FP8_QKV, FP8_INPUT));
            gpt_linear_backward_over_input(m, l, FP8_QKV, dbtc, g.qkvw, NULL, dqkv, w.qkvw, N, C, QKV);
        }
        be->rmsnorm_backward(be, dres, g.ln1w, dbtc, a.input, w.ln1w, a.ln1_rstd, N, C,
                             gpt_amax_slot(m, l - 1, FP8_FCPROJ, FP8_GRAD));
        gpt_unit_backward_done(m, u);
        gpt_unit_release(m, u, 1);
    }
    fp8_end_backward(m->fp8);
    be->encoder_backward(be, gpt_tensor_in_unit(m, dembed, P_WTE, -1), NULL, dres, inputs, B, T, C);
    gpt_unit_backward_done(m, gpt_embed_unit());
    gpt_unit_release(m, gpt_embed_unit(), 1);
}
