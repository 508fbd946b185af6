// act_layout.c: the activation arena of one micro-batch: which activations
// each layer keeps under the recompute policy (llm/recompute.h), where each
// lives, and which ones a layer's backward must recompute.
#include <string.h>

#include "llm/model/internal.h"

static const char* ACT_NAMES[NUM_ACT_KINDS] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "att_lse", "residual2",
    "ln2", "ln2_mean", "ln2_rstd", "fch", "fch_gelu", "residual3", "lnf", "lnf_mean",
    "lnf_rstd", "logits", "losses", "dresidual", "scratch_btc", "scratch_bt4c", "proj_out"};

const char* act_kind_name(ActKind k) { return ACT_NAMES[k]; }

// Which layers keep a per-layer activation for their backward (recompute.h).
typedef enum {
    KEEP_GLOBAL,       // not per layer: one (B, T, ...) buffer
    KEEP_ALWAYS,       // every layer: its output, the next layer's input
    KEEP_UNLESS_FULL,  // costs a GEMM or the attention to recompute (or is tiny)
    KEEP_IF_NONE,      // cheap to recompute: the norm and MLP activation outputs
} KeepRule;

static KeepRule act_keep(ActKind k) {
    switch (k) {
    case A_RESIDUAL3: return KEEP_ALWAYS;
    case A_LN1_MEAN: case A_LN1_RSTD: case A_QKV: case A_ATTY: case A_ATT_LSE: case A_RESIDUAL2:
    case A_LN2_MEAN: case A_LN2_RSTD: case A_FCH: return KEEP_UNLESS_FULL;
    case A_LN1: case A_LN2: case A_FCH_GELU: return KEEP_IF_NONE;
    default: return KEEP_GLOBAL;
    }
}

int act_kind_is_per_layer(ActKind k) { return act_keep(k) != KEEP_GLOBAL; }

// Where a layer that does not keep a KEEP_IF_NONE kind puts it: the backward
// scratch, free during the forward pass, and where backward recomputes it.
// ln1 and ln2 share one buffer: each is read by its GEMM before the other is
// written (ln1 of layer l+1 is written at the end of layer l).
static ActKind act_scratch_for(ActKind k) { return k == A_FCH_GELU ? A_SCRATCH_BT4C : A_SCRATCH_BTC; }

// Elements per token: the architecture's, but for the kinds every model has alike.
static size_t act_width(const GPTConfig* c, ActKind k) {
    switch (k) {
    case A_LOSSES: return 1;
    case A_LOGITS: return (size_t)c->padded_vocab_size;
    case A_ENCODED: case A_RESIDUAL2: case A_RESIDUAL3: case A_LNF: case A_DRESIDUAL: case A_SCRATCH_BTC:
    case A_PROJ_OUT: return (size_t)c->channels;
    default: return gpt_block(c)->act_width(c, k);
    }
}

// Statistics stay FP32 whatever the model's dtype.
static int act_is_f32(ActKind k) {
    return k == A_LN1_MEAN || k == A_LN1_RSTD || k == A_LN2_MEAN || k == A_LN2_RSTD || k == A_LNF_MEAN ||
           k == A_LNF_RSTD || k == A_ATT_LSE || k == A_LOSSES;
}

int head_chunk_rows(size_t N, int chunks) {
    if (chunks < 1) fatal("internal: %d LM-head chunks", chunks);
    size_t rows = round_up(ceil_div(N, (size_t)chunks), HEAD_ROW_BLOCK);
    return (int)(rows < N ? rows : N);
}

void act_layout_build(ActLayout* al, const GPTConfig* c, int B, int T, DType dtype, const RecomputePolicy* recompute) {
    act_layout_build_chunked(al, c, B, T, dtype, recompute, 1);
}

void act_layout_build_chunked(ActLayout* al, const GPTConfig* c, int B, int T, DType dtype,
                              const RecomputePolicy* recompute, int head_chunks) {
    int L = c->num_layers;
    al->recompute = recompute ? recompute_policy(recompute->mode, recompute->full_layers, L)
                              : recompute_policy(RECOMPUTE_NONE, 0, L);
    int F = al->recompute.full_layers;
    size_t BT = (size_t)B * T, off = 0;
    al->head_rows = head_chunk_rows(BT, head_chunks);
    for (int i = 0; i < NUM_ACT_KINDS; i++) {
        ActKind k = (ActKind)i;
        int stored = 0, slices = 0;
        switch (act_keep(k)) {
        case KEEP_GLOBAL: break;
        case KEEP_ALWAYS: stored = slices = L; break;
        case KEEP_UNLESS_FULL: stored = L - F; slices = stored + (F > 0); break;
        case KEEP_IF_NONE: stored = slices = al->recompute.mode == RECOMPUTE_NONE ? L - F : 0; break;
        }
        al->stored[k] = stored;
        al->slices[k] = slices;
        size_t rows = k == A_LOGITS ? (size_t)al->head_rows : BT;  // the logits hold one chunk
        al->count[k] = (act_keep(k) == KEEP_GLOBAL ? 1 : (size_t)slices) * rows * act_width(c, k);
        al->dtype[k] = act_is_f32(k) ? DTYPE_F32 : dtype;
        al->offset[k] = off;
        off += act_kind_bytes(al, k);
    }
    al->bytes = off;
}

size_t act_kind_bytes(const ActLayout* al, ActKind k) { return round_up(al->count[k] * dtype_size(al->dtype[k]), 256); }

void* gpt_act(const GPT* m, ActKind k) { return (char*)m->arena + m->acts.offset[k]; }

// Layer l's buffer of per-layer kind k for a pass over N = B*T tokens: its
// own slice, the working slice, or the backward scratch; NULL for a kind
// the architecture does not have.
static void* act_of_layer(const GPT* m, ActKind k, int l, size_t N) {
    const ActLayout* al = &m->acts;
    size_t width = act_width(&m->config, k);
    if (width == 0) return NULL;
    int F = al->recompute.full_layers, slice = 0;
    switch (act_keep(k)) {
    case KEEP_ALWAYS: slice = l; break;
    case KEEP_UNLESS_FULL: slice = l < F ? al->stored[k] : l - F; break;
    case KEEP_IF_NONE:
        if (l < F || al->recompute.mode != RECOMPUTE_NONE) return gpt_act(m, act_scratch_for(k));
        slice = l - F;
        break;
    case KEEP_GLOBAL: fatal("internal: %s is not a per-layer activation", act_kind_name(k));
    }
    return (char*)gpt_act(m, k) + (size_t)slice * N * width * dtype_size(al->dtype[k]);
}

LayerActs gpt_layer_acts(const GPT* m, int l, size_t N) {
    LayerActs a;
    a.input = l == 0 ? gpt_act(m, A_ENCODED) : act_of_layer(m, A_RESIDUAL3, l - 1, N);
    a.ln1 = act_of_layer(m, A_LN1, l, N);
    a.ln1_mean = (float*)act_of_layer(m, A_LN1_MEAN, l, N);
    a.ln1_rstd = (float*)act_of_layer(m, A_LN1_RSTD, l, N);
    a.qkv = act_of_layer(m, A_QKV, l, N);
    a.atty = act_of_layer(m, A_ATTY, l, N);
    a.lse = (float*)act_of_layer(m, A_ATT_LSE, l, N);
    a.residual2 = act_of_layer(m, A_RESIDUAL2, l, N);
    a.ln2 = act_of_layer(m, A_LN2, l, N);
    a.ln2_mean = (float*)act_of_layer(m, A_LN2_MEAN, l, N);
    a.ln2_rstd = (float*)act_of_layer(m, A_LN2_RSTD, l, N);
    a.fch = act_of_layer(m, A_FCH, l, N);
    a.fch_gelu = act_of_layer(m, A_FCH_GELU, l, N);
    a.output = act_of_layer(m, A_RESIDUAL3, l, N);
    a.layer = l;
    a.mode = recompute_layer_mode(&m->acts.recompute, l);
    return a;
}

// A full re-run (norm_forward, then block_forward) writes the layer's
// dropped kinds into their scratch buffers in forward order, so each buffer
// is left holding the last of them; the backward runs in reverse order and
// reads that one first, before anything overwrites it. Every other dropped
// kind must be recomputed where it is read.
int block_recompute(const Pass* p, const LayerActs* a, ActKind k) {
    if (act_keep(k) != KEEP_IF_NONE) fatal("internal: %s is never recomputed in backward", act_kind_name(k));
    if (a->mode == RECOMPUTE_NONE) return 0;
    if (a->mode == RECOMPUTE_SELECTIVE) return 1;
    for (int j = k + 1; j < NUM_ACT_KINDS; j++)
        if (act_keep((ActKind)j) == KEEP_IF_NONE && act_scratch_for((ActKind)j) == act_scratch_for(k) &&
            act_width(p->c, (ActKind)j) > 0)
            return 1;  // a later kind of the re-run overwrote it
    return 0;
}
