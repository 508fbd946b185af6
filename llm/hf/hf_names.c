// hf_names.c: which Hugging Face tensor is which piece of our layout.
//
// GPT-2 (GPT2LMHeadModel, names under "transformer."): wte, wpe, h.N.ln_1,
// attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, ln_f. Its linear
// weights are Conv1D, stored (in, out): the transpose of our (out, in). The
// LM head is wte (lm_head.weight, when present, is the same tensor).
// Llama (LlamaForCausalLM, names under "model."): embed_tokens,
// layers.N.input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj, norm, and lm_head
// unless tied. q, k and v are row blocks of our fused qkv ((NH + 2 NKV) heads
// of HS rows: the query heads, then the key heads, then the value heads);
// gate and up are row blocks of our fused fcw (gate first). Our RoPE pairs
// element i with i + HS/2 (kernels/cpu/rope.c), as Hugging Face's
// rotate_half does, so q and k rows are copied as they are, unpermuted.
// Token embeddings and the LM head hold the real vocabulary's V rows; our
// padding rows V..Vp are not in the files.
#include <stdio.h>
#include <string.h>

#include "llm/hf/hf.h"

typedef struct {
    HfTensor* t;
    int n, cap;
} List;

static void add(List* l, const char* name, ParamKind kind, int layer, int row0, int rows, int cols, int transpose) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = (HfTensor*)xrealloc(l->t, (size_t)l->cap * sizeof(HfTensor));
    }
    HfTensor* t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    t->row0 = row0;
    t->rows = rows;
    t->cols = cols;
    t->transpose = transpose;
    t->is_vector = rows == 1 && !transpose;
}

static void gpt2_map(const GPTConfig* c, List* l) {
    int C = c->channels;
    char n[96];
    add(l, "transformer.wte.weight", P_WTE, -1, 0, c->vocab_size, C, 0);
    add(l, "transformer.wpe.weight", P_WPE, -1, 0, c->max_seq_len, C, 0);
    for (int i = 0; i < c->num_layers; i++) {
#define H(suffix, kind, rows, cols, tr) \
    snprintf(n, sizeof n, "transformer.h.%d.%s", i, suffix); \
    add(l, n, kind, i, 0, rows, cols, tr)
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
    add(l, "transformer.ln_f.weight", P_LNFW, -1, 0, 1, C, 0);
    add(l, "transformer.ln_f.bias", P_LNFB, -1, 0, 1, C, 0);
}

static void llama_map(const GPTConfig* c, List* l) {
    int C = c->channels, HS = gpt_head_size(c), NH = c->num_heads, NKV = c->num_kv_heads, Hm = c->mlp_hidden;
    char n[96];
    add(l, "model.embed_tokens.weight", P_WTE, -1, 0, c->vocab_size, C, 0);
    for (int i = 0; i < c->num_layers; i++) {
#define H(suffix, kind, row0, rows, cols) \
    snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix); \
    add(l, n, kind, i, row0, rows, cols, 0)
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
    add(l, "model.norm.weight", P_LNFW, -1, 0, 1, C, 0);
    if (!c->tie_embeddings) add(l, "lm_head.weight", P_LMHEAD, -1, 0, c->vocab_size, C, 0);
}

HfTensor* hf_tensor_map(const GPTConfig* c, int* n) {
    List l = {0};
    if (c->arch == ARCH_GPT2) gpt2_map(c, &l);
    else llama_map(c, &l);
    *n = l.n;
    return l.t;
}

static int ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int hf_tensor_ignorable(const GPTConfig* c, const char* name) {
    if (c->arch == ARCH_GPT2)  // the causal-mask buffers of older checkpoints; the tied head
        return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || !strcmp(name, "lm_head.weight");
    return ends_with(name, ".rotary_emb.inv_freq") || (c->tie_embeddings && !strcmp(name, "lm_head.weight"));
}
