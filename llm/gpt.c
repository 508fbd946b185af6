// gpt.c: the models on top of kernels/ops.h: parameter and activation
// layouts (both architectures), initialisation, GPT-2's forward and
// backward (Llama's are in llm/llama.c), and the AdamW update.
#include "llm/gpt.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "llm/fp8/fp8.h"
#include "llm/gpt_internal.h"
#include "llm/util/rng.h"

// ---------------------------------------------------------------------------
// configuration

const char* arch_name(Arch a) { return a == ARCH_LLAMA ? "llama" : "gpt2"; }

int arch_from_name(const char* name, Arch* out) {
    if (strcmp(name, "gpt2") == 0) *out = ARCH_GPT2;
    else if (strcmp(name, "llama") == 0) *out = ARCH_LLAMA;
    else return 0;
    return 1;
}

const char* gpt_config_invalid(const GPTConfig* c, char* why, size_t size) {
    static const struct {
        const char* what;
        size_t offset;
        int lo, hi;
    } LIMITS[] = {
        {"number of layers", offsetof(GPTConfig, num_layers), 1, GPT_MAX_LAYERS},
        {"channels", offsetof(GPTConfig, channels), 1, GPT_MAX_CHANNELS},
        {"number of heads", offsetof(GPTConfig, num_heads), 1, GPT_MAX_HEADS},
        {"vocabulary size", offsetof(GPTConfig, vocab_size), 2, GPT_MAX_VOCAB},
        {"max sequence length", offsetof(GPTConfig, max_seq_len), 1, GPT_MAX_SEQ_LEN},
    };
    for (size_t i = 0; i < sizeof LIMITS / sizeof LIMITS[0]; i++) {
        int v = *(const int*)((const char*)c + LIMITS[i].offset);
        if (v < LIMITS[i].lo || v > LIMITS[i].hi) {
            snprintf(why, size, "%s %d is outside %d..%d", LIMITS[i].what, v, LIMITS[i].lo, LIMITS[i].hi);
            return why;
        }
    }
    if (c->channels % c->num_heads != 0) {
        snprintf(why, size, "channels (%d) must be divisible by heads (%d)", c->channels, c->num_heads);
        return why;
    }
    return NULL;
}

void gpt_config_finish(GPTConfig* c) {
    char why[160];
    if (gpt_config_invalid(c, why, sizeof why)) fatal("model: %s", why);
    if (c->arch == ARCH_GPT2) {
        // GPT-2's fixed choices, so that the shared code reads one set of fields.
        c->num_kv_heads = c->num_heads;
        c->mlp_hidden = 4 * c->channels;
        c->tie_embeddings = 1;
    } else {
        if (c->num_kv_heads <= 0 || c->num_heads % c->num_kv_heads != 0)
            fatal("model: heads (%d) must be a multiple of the key/value heads (%d)", c->num_heads, c->num_kv_heads);
        if (c->mlp_hidden <= 0) fatal("model: the MLP width must be positive (got %d)", c->mlp_hidden);
        if (gpt_head_size(c) % 2 != 0)
            fatal("model: RoPE needs an even head size (channels %d / heads %d = %d)", c->channels, c->num_heads,
                  gpt_head_size(c));
        if (!(c->rope_theta > 1.0f)) fatal("model: the RoPE theta must be greater than 1 (got %g)", c->rope_theta);
    }
    // Padding the vocabulary to a multiple of 128 keeps the LM-head GEMM on
    // fast tile sizes; the padded logits are excluded from the loss.
    c->padded_vocab_size = (int)round_up((size_t)c->vocab_size, 128);
}

// ---------------------------------------------------------------------------
// parameter layout

static const char* PARAM_NAMES[NUM_PARAM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lm_head"};

const char* param_kind_name(ParamKind k) { return PARAM_NAMES[k]; }

// Shape of one tensor of kind k (rows x cols); vectors have rows = 1. The
// per-layer kinds repeat it L times (ParamKind in gpt.h lists every shape).
static void param_shape(const GPTConfig* c, ParamKind k, int* rows, int* cols) {
    int C = c->channels;
    if (c->arch == ARCH_LLAMA) {
        llama_param_shape(c, k, rows, cols);
        return;
    }
    switch (k) {
    case P_WTE: *rows = c->padded_vocab_size; *cols = C; return;
    case P_WPE: *rows = c->max_seq_len; *cols = C; return;
    case P_QKVW: *rows = 3 * C; *cols = C; return;
    case P_QKVB: *rows = 1; *cols = 3 * C; return;
    case P_ATTPROJW: *rows = C; *cols = C; return;
    case P_FCW: *rows = 4 * C; *cols = C; return;
    case P_FCB: *rows = 1; *cols = 4 * C; return;
    case P_FCPROJW: *rows = C; *cols = 4 * C; return;
    default: *rows = 1; *cols = C; return;  // layernorm weights/biases and C-sized biases
    }
}

int param_kind_is_per_layer(ParamKind k) {
    return k != P_WTE && k != P_WPE && k != P_LNFW && k != P_LNFB && k != P_LMHEAD;
}

// Each architecture's tensors as three lists, in flat order: the embeddings
// unit, one layer's unit, the final unit.
static const ParamKind GPT2_EMBED[] = {P_WTE, P_WPE};
static const ParamKind GPT2_LAYER[] = {P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
                                       P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB};
static const ParamKind GPT2_FINAL[] = {P_LNFW, P_LNFB};

#define KIND_LIST(a) ((KindList){(a), (int)(sizeof(a) / sizeof((a)[0]))})

static KindList unit_kinds(const GPTConfig* c, int which) {  // 0 embed, 1 layer, 2 final
    if (c->arch == ARCH_LLAMA) return llama_unit_kinds(c, which);
    return which == 0 ? KIND_LIST(GPT2_EMBED) : which == 1 ? KIND_LIST(GPT2_LAYER) : KIND_LIST(GPT2_FINAL);
}

static int kind_position(KindList list, ParamKind k) {
    for (int i = 0; i < list.n; i++)
        if (list.kinds[i] == k) return i;
    return -1;
}

int gpt_has_kind(const GPTConfig* c, ParamKind k) {
    for (int w = 0; w < 3; w++)
        if (kind_position(unit_kinds(c, w), k) >= 0) return 1;
    return 0;
}

// Summed over the tensor shapes, with wte and lm_head counted at V rather than Vp rows.
size_t gpt_num_params(const GPTConfig* c) {
    size_t n = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        if (!gpt_has_kind(c, (ParamKind)k)) continue;
        int rows, cols;
        param_shape(c, (ParamKind)k, &rows, &cols);
        if (k == P_WTE || k == P_LMHEAD) rows = c->vocab_size;
        n += (size_t)rows * cols * (param_kind_is_per_layer((ParamKind)k) ? (size_t)c->num_layers : 1);
    }
    return n;
}

int param_tensor_index(const GPTConfig* c, ParamKind kind, int layer) {
    KindList e = unit_kinds(c, 0), l = unit_kinds(c, 1), f = unit_kinds(c, 2);
    int i;
    if ((i = kind_position(e, kind)) >= 0) return i;
    if ((i = kind_position(l, kind)) >= 0) return e.n + l.n * layer + i;
    if ((i = kind_position(f, kind)) >= 0) return e.n + l.n * c->num_layers + i;
    fatal("internal: a %s model has no %s tensor", arch_name(c->arch), param_kind_name(kind));
}

static void add_tensor(ParamLayout* pl, const GPTConfig* c, ParamKind k, int layer) {
    ParamTensor* t = &pl->tensors[pl->num_tensors++];
    t->kind = k;
    t->layer = layer;
    t->unit = pl->num_units;
    param_shape(c, k, &t->rows, &t->cols);
    t->count = (size_t)t->rows * t->cols;
    t->decay = t->rows > 1;
    t->offset = round_up(pl->total, PARAM_ALIGN);
    pl->total = t->offset + t->count;
}

// Closes the current unit: pads it to a multiple of PARAM_ALIGN * world.
static void end_unit(ParamLayout* pl) {
    size_t begin = pl->unit_begin[pl->num_units];
    size_t size = round_up(pl->total - begin, (size_t)PARAM_ALIGN * pl->world);
    if (size == 0) size = (size_t)PARAM_ALIGN * pl->world;
    pl->total = begin + size;
    pl->unit_begin[++pl->num_units] = pl->total;
}

void param_layout_build(ParamLayout* pl, const GPTConfig* c, int world) {
    if (world <= 0) fatal("internal: parameter layout for %d ranks", world);
    pl->num_tensors = 0;
    pl->num_units = 0;
    pl->total = 0;
    pl->world = world;
    KindList e = unit_kinds(c, 0), lk = unit_kinds(c, 1), f = unit_kinds(c, 2);
    pl->tensors = (ParamTensor*)xcalloc((size_t)e.n + f.n + (size_t)lk.n * c->num_layers, sizeof(ParamTensor));
    pl->unit_begin = (size_t*)xcalloc((size_t)c->num_layers + 3, sizeof(size_t));
    for (int i = 0; i < e.n; i++) add_tensor(pl, c, e.kinds[i], -1);
    end_unit(pl);
    for (int l = 0; l < c->num_layers; l++) {
        for (int i = 0; i < lk.n; i++) add_tensor(pl, c, lk.kinds[i], l);
        end_unit(pl);
    }
    for (int i = 0; i < f.n; i++) add_tensor(pl, c, f.kinds[i], -1);
    end_unit(pl);
}

void param_layout_free(ParamLayout* pl) {
    free(pl->tensors);
    free(pl->unit_begin);
    pl->tensors = NULL;
    pl->unit_begin = NULL;
    pl->num_tensors = 0;
    pl->num_units = 0;
}

size_t gpt_owned_piece(const GPT* m, int u, size_t* lo, size_t* state_offset) {
    const ParamLayout* pl = &m->layout;
    if (m->zero_stage == 0) {
        *lo = pl->unit_begin[u];
        *state_offset = pl->unit_begin[u];
        return unit_size(pl, u);
    }
    size_t chunk = unit_chunk(pl, u);
    *lo = pl->unit_begin[u] + (size_t)m->rank * chunk;
    // Units are multiples of world, so the chunks of earlier units add up to
    // unit_begin[u] / world.
    *state_offset = pl->unit_begin[u] / (size_t)pl->world;
    return chunk;
}

void* gpt_unit_slice(const GPT* m, void* flat, int u) {
    return (char*)flat + m->layout.unit_begin[u] * dtype_size(m->dtype);
}

void* gpt_tensor_in_unit(const GPT* m, void* unit_base, ParamKind k, int layer) {
    const ParamTensor* t = &m->layout.tensors[param_tensor_index(&m->config, k, layer)];
    return (char*)unit_base + (t->offset - m->layout.unit_begin[t->unit]) * dtype_size(m->dtype);
}

// NULL for a kind the architecture lacks (Llama's biases).
static void* layer_tensor(const GPT* m, void* unit_base, ParamKind k, int l) {
    return gpt_has_kind(&m->config, k) ? gpt_tensor_in_unit(m, unit_base, k, l) : NULL;
}

LayerTensors gpt_layer_tensors(const GPT* m, void* unit_base, int l) {
    LayerTensors w;
    w.ln1w = layer_tensor(m, unit_base, P_LN1W, l);
    w.ln1b = layer_tensor(m, unit_base, P_LN1B, l);
    w.qkvw = layer_tensor(m, unit_base, P_QKVW, l);
    w.qkvb = layer_tensor(m, unit_base, P_QKVB, l);
    w.attprojw = layer_tensor(m, unit_base, P_ATTPROJW, l);
    w.attprojb = layer_tensor(m, unit_base, P_ATTPROJB, l);
    w.ln2w = layer_tensor(m, unit_base, P_LN2W, l);
    w.ln2b = layer_tensor(m, unit_base, P_LN2B, l);
    w.fcw = layer_tensor(m, unit_base, P_FCW, l);
    w.fcb = layer_tensor(m, unit_base, P_FCB, l);
    w.fcprojw = layer_tensor(m, unit_base, P_FCPROJW, l);
    w.fcprojb = layer_tensor(m, unit_base, P_FCPROJB, l);
    return w;
}

// The hook points (see GPTHooks); without hooks, slices of the flat buffers.
void* gpt_unit_params(GPT* m, int u, int backward) {
    return m->hooks ? m->hooks->unit_params(m->hooks->ctx, m, u, backward) : gpt_unit_slice(m, m->params, u);
}
void* gpt_unit_grads(GPT* m, int u) {
    return m->hooks ? m->hooks->unit_grads(m->hooks->ctx, m, u) : gpt_unit_slice(m, m->grads, u);
}
void gpt_unit_backward_done(GPT* m, int u) {
    if (m->hooks) m->hooks->unit_backward_done(m->hooks->ctx, m, u);
}
void gpt_unit_release(GPT* m, int u, int backward) {
    if (m->hooks) m->hooks->unit_release(m->hooks->ctx, m, u, backward);
}

// ---------------------------------------------------------------------------
// activation layout

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
    KEEP_IF_NONE,      // cheap to recompute: the layernorm and GELU outputs
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

// Elements per token.
static size_t act_width(const GPTConfig* c, ActKind k) {
    size_t C = c->channels;
    if (c->arch == ARCH_LLAMA) {
        size_t w = llama_act_width(c, k);
        if (w != (size_t)-1) return w;
    }
    switch (k) {
    case A_LN1_MEAN: case A_LN1_RSTD: case A_LN2_MEAN: case A_LN2_RSTD: case A_LNF_MEAN: case A_LNF_RSTD:
    case A_LOSSES: return 1;
    case A_QKV: return 3 * C;
    case A_ATT_LSE: return (size_t)c->num_heads;
    case A_FCH: case A_FCH_GELU: case A_SCRATCH_BT4C: return 4 * C;
    case A_LOGITS: return (size_t)c->padded_vocab_size;
    default: return C;
    }
}

// Statistics stay FP32 whatever the model's dtype.
static int act_is_f32(ActKind k) {
    return k == A_LN1_MEAN || k == A_LN1_RSTD || k == A_LN2_MEAN || k == A_LN2_RSTD || k == A_LNF_MEAN ||
           k == A_LNF_RSTD || k == A_ATT_LSE || k == A_LOSSES;
}

void act_layout_build(ActLayout* al, const GPTConfig* c, int B, int T, DType dtype, const RecomputePolicy* recompute) {
    int L = c->num_layers;
    al->recompute = recompute ? recompute_policy(recompute->mode, recompute->full_layers, L)
                              : recompute_policy(RECOMPUTE_NONE, 0, L);
    int F = al->recompute.full_layers;
    size_t BT = (size_t)B * T, off = 0;
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
        al->count[k] = (act_keep(k) == KEEP_GLOBAL ? 1 : (size_t)slices) * BT * act_width(c, k);
        al->dtype[k] = act_is_f32(k) ? DTYPE_F32 : dtype;
        al->offset[k] = off;
        off += act_kind_bytes(al, k);
    }
    al->bytes = off;
}

size_t act_kind_bytes(const ActLayout* al, ActKind k) { return round_up(al->count[k] * dtype_size(al->dtype[k]), 256); }

// Base pointer of activation k.
void* gpt_act(const GPT* m, ActKind k) { return (char*)m->arena + m->acts.offset[k]; }

// Layer l's buffer of per-layer kind k for a pass over N = B*T tokens: its
// own slice, the working slice, or the backward scratch.
static void* act_of_layer(const GPT* m, ActKind k, int l, size_t N) {
    const ActLayout* al = &m->acts;
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
    return (char*)gpt_act(m, k) + (size_t)slice * N * act_width(&m->config, k) * dtype_size(al->dtype[k]);
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
    return a;
}

// ---------------------------------------------------------------------------
// model state per ZeRO stage

static size_t max_layer_unit(const ParamLayout* pl) {
    size_t mx = 0;
    for (int u = 1; u + 1 < pl->num_units; u++) mx = unit_size(pl, u) > mx ? unit_size(pl, u) : mx;
    return mx;
}

// Elements of the shard plus full-unit staging (see gpt_state_bytes).
static size_t staged_size(const ParamLayout* pl) {
    return pl->total / (size_t)pl->world + unit_size(pl, 0) + unit_size(pl, pl->num_units - 1) +
           2 * max_layer_unit(pl);
}

// Elements of params, grads and each optimizer buffer at a stage.
static void state_sizes(const ParamLayout* pl, int zero_stage, size_t* params, size_t* grads, size_t* opt) {
    size_t n = pl->total;
    *params = zero_stage >= 3 ? staged_size(pl) : n;
    *grads = zero_stage >= 2 ? staged_size(pl) : n;
    *opt = zero_stage == 0 ? n : n / (size_t)pl->world;
}

StateBytes gpt_state_bytes(const GPTConfig* c, DType dtype, int world, int zero_stage) {
    if (zero_stage < 0 || zero_stage > 3) fatal("internal: ZeRO stage %d does not exist", zero_stage);
    ParamLayout pl;
    param_layout_build(&pl, c, world);
    size_t params, grads, opt, es = dtype_size(dtype);
    state_sizes(&pl, zero_stage, &params, &grads, &opt);
    param_layout_free(&pl);
    StateBytes b;
    b.params = params * es;
    b.grads = grads * es;
    b.master = dtype == DTYPE_F32 ? 0 : opt * sizeof(float);
    b.adam = 2 * opt * sizeof(float);
    return b;
}

void* gpt_staging(const GPT* m, void* sharded, StagingSlot slot) {
    const ParamLayout* pl = &m->layout;
    size_t off = m->opt_size;
    if (slot > STAGING_EMBED) off += unit_size(pl, 0);
    if (slot > STAGING_FINAL) off += unit_size(pl, pl->num_units - 1);
    if (slot > STAGING_LAYER_A) off += max_layer_unit(pl);
    return (char*)sharded + off * dtype_size(m->dtype);
}

// ---------------------------------------------------------------------------
// creation

void gpt_create(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage) {
    gpt_create_recompute(m, c, be, B, T, world, rank, zero_stage, NULL);
}

void gpt_create_recompute(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank,
                          int zero_stage, const RecomputePolicy* recompute) {
    memset(m, 0, sizeof *m);
    m->config = *c;
    m->be = be;
    m->dtype = be->dtype;
    m->B = B;
    m->T = T;
    if (T > c->max_seq_len)
        fatal("sequence length %d exceeds the model's maximum sequence length %d", T, c->max_seq_len);
    if (zero_stage < 0 || zero_stage > 3) fatal("internal: ZeRO stage %d is not available", zero_stage);
    if (rank < 0 || rank >= world) fatal("internal: rank %d of %d", rank, world);
    m->world = world;
    m->rank = rank;
    m->zero_stage = zero_stage;
    param_layout_build(&m->layout, c, world);
    m->num_params = gpt_num_params(c);
    size_t es = dtype_size(m->dtype);
    state_sizes(&m->layout, zero_stage, &m->params_size, &m->grads_size, &m->opt_size);
    size_t ns = m->opt_size;
    m->params = be->alloc(be, m->params_size * es, "parameters");
    m->grads = be->alloc(be, m->grads_size * es, "gradients");
    if (m->dtype != DTYPE_F32) m->master = (float*)be->alloc(be, ns * sizeof(float), "master weights");
    m->adam_m = (float*)be->alloc(be, ns * sizeof(float), "AdamW first moment");
    m->adam_v = (float*)be->alloc(be, ns * sizeof(float), "AdamW second moment");
    be->zero(be, m->params, m->params_size * es);
    be->zero(be, m->grads, m->grads_size * es);
    if (m->master) be->zero(be, m->master, ns * sizeof(float));
    be->zero(be, m->adam_m, ns * sizeof(float));
    be->zero(be, m->adam_v, ns * sizeof(float));
    act_layout_build(&m->acts, c, B, T, m->dtype, recompute);
    m->arena = be->alloc(be, m->acts.bytes, "activations");
    m->inputs = (int32_t*)be->alloc(be, (size_t)B * T * sizeof(int32_t), "input tokens");
    m->targets = (int32_t*)be->alloc(be, (size_t)B * T * sizeof(int32_t), "target tokens");
    m->scalars = (float*)be->alloc(be, 4 * sizeof(float), "scalars");
    be->zero(be, m->scalars, 4 * sizeof(float));
    if (c->arch == ARCH_LLAMA) llama_create(m);
}

void gpt_free(GPT* m) {
    Backend* be = m->be;
    if (m->fp8) gpt_disable_fp8(m);
    be->free(be, m->params);
    be->free(be, m->grads);
    if (m->master) be->free(be, m->master);
    be->free(be, m->adam_m);
    be->free(be, m->adam_v);
    be->free(be, m->arena);
    be->free(be, m->inputs);
    be->free(be, m->targets);
    be->free(be, m->scalars);
    if (m->rope_freqs) be->free(be, m->rope_freqs);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------
// initialisation and host access

void gpt_init_random(GPT* m, uint64_t seed) {
    const GPTConfig* c = &m->config;
    float* host = (float*)xcalloc(m->layout.total, sizeof(float));
    float residual_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        float* dst = host + t->offset;
        if (t->kind == P_LN1W || t->kind == P_LN2W || t->kind == P_LNFW) {  // LayerNorm or RMSNorm weights
            for (size_t j = 0; j < t->count; j++) dst[j] = 1.0f;
            continue;
        }
        if (t->rows == 1) continue;  // biases start at zero
        float std = (t->kind == P_ATTPROJW || t->kind == P_FCPROJW) ? residual_std : 0.02f;
        // Padded vocabulary rows stay zero so their logits are exactly zero.
        size_t n = t->kind == P_WTE || t->kind == P_LMHEAD ? (size_t)c->vocab_size * t->cols : t->count;
        uint64_t key = rng_key(seed, (uint64_t)t->kind, (uint64_t)(t->layer + 1));
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) dst[j] = std * rng_normal(key, j);
    }
    gpt_set_params_f32(m, host);
    free(host);
}

// ZeRO-3: the owned pieces become the parameter shard (and master).
static void set_sharded_params_f32(GPT* m, const float* host_flat) {
    Backend* be = m->be;
    float* staging = (float*)be->alloc(be, m->opt_size * sizeof(float), "parameter staging");
    for (int u = 0; u < m->layout.num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        be->to_device(be, staging + off, host_flat + lo, len * sizeof(float));
    }
    be->convert(be, m->params, m->dtype, staging, DTYPE_F32, m->opt_size);
    if (m->master) be->copy(be, m->master, staging, m->opt_size * sizeof(float));
    be->free(be, staging);
}

void gpt_set_params_f32(GPT* m, const float* host_flat) {
    Backend* be = m->be;
    size_t n = m->layout.total;
    fp8_params_changed(m->fp8);
    if (gpt_params_sharded(m)) {
        set_sharded_params_f32(m, host_flat);
        return;
    }
    if (m->dtype == DTYPE_F32) {
        be->to_device(be, m->params, host_flat, n * sizeof(float));
        return;
    }
    // 16-bit parameters: the FP32 values become the master copy and the
    // parameters are rounded from it (to nearest even, deterministically).
    float* staging = (float*)be->alloc(be, n * sizeof(float), "parameter staging");
    be->to_device(be, staging, host_flat, n * sizeof(float));
    be->convert(be, m->params, m->dtype, staging, DTYPE_F32, n);
    for (int u = 0; u < m->layout.num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        be->copy(be, m->master + off, staging + lo, len * sizeof(float));
    }
    be->free(be, staging);
}

void gpt_get_params_f32(const GPT* m, float* host_flat) {
    Backend* be = m->be;
    size_t n = m->layout.total;
    if (gpt_params_sharded(m)) {
        // The FP32 values of the owned pieces: master, or the FP32 shard itself.
        const float* src = m->master ? m->master : (const float*)m->params;
        for (int u = 0; u < m->layout.num_units; u++) {
            size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
            be->to_host(be, host_flat + lo, src + off, len * sizeof(float));
        }
        return;
    }
    if (m->dtype == DTYPE_F32) {
        be->to_host(be, host_flat, m->params, n * sizeof(float));
        return;
    }
    float* staging = (float*)be->alloc(be, n * sizeof(float), "parameter staging");
    be->convert(be, staging, DTYPE_F32, m->params, m->dtype, n);
    be->to_host(be, host_flat, staging, n * sizeof(float));
    be->free(be, staging);
    // Where this process holds the FP32 master, it is the exact value.
    for (int u = 0; m->master && u < m->layout.num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        be->to_host(be, host_flat + lo, m->master + off, len * sizeof(float));
    }
}

// ---------------------------------------------------------------------------
// the linear layers of a block: FP8 or the model's dtype
//
// With FP8 training on (m->fp8, llm/fp8/fp8.h), each of a block's four linear
// layers runs its GEMMs in FP8 unless --fp8-skip names it; the producers of
// their inputs and output gradients (layernorm, GELU, ...) also write those
// tensors' amaxes into the slots fp8_amax_slot names (NULL when FP8 is off).

float* gpt_amax_slot(GPT* m, int l, Fp8Gemm g, Fp8Role role) { return fp8_amax_slot(m->fp8, l, g, role); }

// The weight tensor of each FP8 GEMM, in the flat layout.
static const ParamKind GEMM_WEIGHT[FP8_NUM_GEMMS] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};

void gpt_fp8_shapes(const GPTConfig* c, Fp8Shapes* s) {
    s->layers = c->num_layers;
    for (int g = 0; g < FP8_NUM_GEMMS; g++) {
        int rows, cols;
        param_shape(c, GEMM_WEIGHT[g], &rows, &cols);
        s->rows[g] = (size_t)rows;
        s->cols[g] = (size_t)cols;
    }
}

Fp8Bytes gpt_fp8_bytes(const GPTConfig* c, int B, int T, int zero_stage, Fp8Support support, Fp8Recipe recipe,
                       int history, const uint8_t* skip) {
    Fp8Shapes s;
    gpt_fp8_shapes(c, &s);
    return fp8_state_bytes(&s, B, T, zero_stage, support, recipe, history, skip);
}

void gpt_enable_fp8(GPT* m, Fp8State* s, const Fp8Options* o) {
    Fp8Shapes shapes;
    gpt_fp8_shapes(&m->config, &shapes);
    fp8_create(s, m->be, &shapes, m->B, m->T, m->zero_stage, o);
    m->fp8 = s;
}

void gpt_disable_fp8(GPT* m) {
    if (!m->fp8) return;
    fp8_free(m->fp8);
    m->fp8 = NULL;
}

// The AdamW amax slot of FP8 weight tensor (kind, layer), or NULL.
static float* weight_update_amax(GPT* m, ParamKind kind, int layer) {
    for (int g = 0; g < FP8_NUM_GEMMS; g++)
        if (GEMM_WEIGHT[g] == kind) return fp8_amax_slot(m->fp8, layer, (Fp8Gemm)g, FP8_WEIGHT);
    return NULL;
}

// matmul_forward; out_amax (may be NULL) receives the amax of out.
void gpt_linear_forward(GPT* m, int l, Fp8Gemm g, void* out, void* pre_gelu, float* out_amax, void* inp,
                           const void* weight, const void* bias, int N, int C, int OC) {
    if (fp8_gemm_on(m->fp8, l, g, N)) {
        fp8_linear_forward(m->fp8, l, g, out, pre_gelu, out_amax, inp, weight, bias, N, C, OC);
        return;
    }
    m->be->matmul_forward(m->be, out, pre_gelu, inp, weight, bias, N, C, OC);
    // A GELU fused into the GEMM's epilogue measures nothing: a pass of its own.
    if (out_amax) m->be->amax(m->be, out_amax, out, (size_t)N * OC);
}

void gpt_linear_backward(GPT* m, int l, Fp8Gemm g, void* dinp, void* dweight, void* dbias, const void* dout,
                            const void* inp, const void* weight, int N, int C, int OC) {
    if (fp8_gemm_on(m->fp8, l, g, N)) fp8_linear_backward(m->fp8, l, g, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    else m->be->matmul_backward(m->be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

// linear_backward when the input `inp` was recomputed into the buffer that
// receives the input gradient: the weight gradients read it first, then dinp
// overwrites it. The same bits as one call (the two products are separate;
// the FP8 path quantises the input before it writes dinp).
void gpt_linear_backward_over_input(GPT* m, int l, Fp8Gemm g, void* inp_then_dinp, void* dweight, void* dbias,
                                       const void* dout, const void* weight, int N, int C, int OC) {
    if (fp8_gemm_on(m->fp8, l, g, N)) {
        fp8_linear_backward(m->fp8, l, g, inp_then_dinp, dweight, dbias, dout, inp_then_dinp, weight, N, C, OC);
        return;
    }
    m->be->matmul_backward(m->be, NULL, dweight, dbias, dout, inp_then_dinp, weight, N, C, OC);
    m->be->matmul_backward(m->be, inp_then_dinp, NULL, NULL, dout, NULL, weight, N, C, OC);
}

// ---------------------------------------------------------------------------
// forward

// Layer l from its layernormed input a->ln1 (with its statistics) up to the
// GELU: everything the layer's backward reads. The attention projection
// passes through A_PROJ_OUT. The forward pass and full recompute both run it.
static void layer_forward_to_gelu(GPT* m, int l, const LayerTensors* w, const LayerActs* a, int B, int T) {
    Backend* be = m->be;
    int C = m->config.channels, NH = m->config.num_heads, N = B * T;
    void* proj = gpt_act(m, A_PROJ_OUT);
    // attention block: residual2 = input + proj(attention(qkv(ln1)))
    gpt_linear_forward(m, l, FP8_QKV, a->qkv, NULL, NULL, a->ln1, w->qkvw, w->qkvb, N, C, 3 * C);
    be->attention_forward(be, a->atty, a->lse, a->qkv, B, T, NH, NH, C / NH);
    float* atty_amax = gpt_amax_slot(m, l, FP8_ATTPROJ, FP8_INPUT);
    if (atty_amax) be->amax(be, atty_amax, a->atty, (size_t)N * C);  // the attention kernels measure nothing
    gpt_linear_forward(m, l, FP8_ATTPROJ, proj, NULL, NULL, a->atty, w->attprojw, w->attprojb, N, C, C);
    be->residual_layernorm_forward(be, a->residual2, a->ln2, a->ln2_mean, a->ln2_rstd, a->input, proj, w->ln2w,
                                   w->ln2b, N, C, gpt_amax_slot(m, l, FP8_FC, FP8_INPUT));
    // MLP block, first half: fch = fc(ln2), fch_gelu = gelu(fch)
    gpt_linear_forward(m, l, FP8_FC, a->fch_gelu, a->fch, gpt_amax_slot(m, l, FP8_FCPROJ, FP8_INPUT), a->ln2, w->fcw,
                       w->fcb,
                   N, C, 4 * C);
}

void gpt_forward(GPT* m, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
    const GPTConfig* c = &m->config;
    if (B > m->B || T > m->T) fatal("internal: forward at (%d, %d) exceeds the arena (%d, %d)", B, T, m->B, m->T);
    if (c->arch == ARCH_LLAMA) {
        llama_forward(m, inputs, targets, B, T, dloss);
        return;
    }
    Backend* be = m->be;
    int C = c->channels, L = c->num_layers, V = c->vocab_size, Vp = c->padded_vocab_size;
    int N = B * T;
    void* embed = gpt_unit_params(m, gpt_embed_unit(), 0);
    void* wte = gpt_tensor_in_unit(m, embed, P_WTE, -1);
    void* wpe = gpt_tensor_in_unit(m, embed, P_WPE, -1);
    void* proj = gpt_act(m, A_PROJ_OUT);
    fp8_begin_forward(m->fp8);

    be->encoder_forward(be, gpt_act(m, A_ENCODED), inputs, wte, wpe, B, T, C);
    LayerTensors w = gpt_layer_tensors(m, gpt_unit_params(m, gpt_layer_unit(0), 0), 0);
    LayerActs a = gpt_layer_acts(m, 0, (size_t)N);
    be->layernorm_forward(be, a.ln1, a.ln1_mean, a.ln1_rstd, a.input, w.ln1w, w.ln1b, N, C,
                          gpt_amax_slot(m, 0, FP8_QKV, FP8_INPUT));

    for (int l = 0; l < L; l++) {
        layer_forward_to_gelu(m, l, &w, &a, B, T);
        // MLP block, second half: output = residual2 + fcproj(fch_gelu) ...
        gpt_linear_forward(m, l, FP8_FCPROJ, proj, NULL, NULL, a.fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C);
        // ... fused with the layernorm that feeds the next layer (or the final one)
        void *next_ln, *next_w, *next_b;
        float *next_mean, *next_rstd;
        LayerTensors wn = w;
        LayerActs an = a;
        if (l + 1 < L) {
            wn = gpt_layer_tensors(m, gpt_unit_params(m, gpt_layer_unit(l + 1), 0), l + 1);
            an = gpt_layer_acts(m, l + 1, (size_t)N);
            next_ln = an.ln1;
            next_mean = an.ln1_mean;
            next_rstd = an.ln1_rstd;
            next_w = wn.ln1w;
            next_b = wn.ln1b;
        } else {
            void* fin = gpt_unit_params(m, gpt_final_unit(m), 0);
            next_ln = gpt_act(m, A_LNF);
            next_mean = (float*)gpt_act(m, A_LNF_MEAN);
            next_rstd = (float*)gpt_act(m, A_LNF_RSTD);
            next_w = gpt_tensor_in_unit(m, fin, P_LNFW, -1);
            next_b = gpt_tensor_in_unit(m, fin, P_LNFB, -1);
        }
        be->residual_layernorm_forward(be, a.output, next_ln, next_mean, next_rstd, a.residual2, proj, next_w,
                                       next_b, N, C, gpt_amax_slot(m, l + 1, FP8_QKV, FP8_INPUT));
        gpt_unit_release(m, gpt_layer_unit(l), 0);
        w = wn;
        a = an;
    }
    gpt_unit_release(m, gpt_final_unit(m), 0);

    // LM head tied to the token embedding.
    be->matmul_forward(be, gpt_act(m, A_LOGITS), NULL, gpt_act(m, A_LNF), wte, NULL, N, C, Vp);
    gpt_unit_release(m, gpt_embed_unit(), 0);
    fp8_end_forward(m->fp8);
    if (targets) be->cross_entropy(be, (float*)gpt_act(m, A_LOSSES), gpt_act(m, A_LOGITS), targets, N, V, Vp, dloss);
}

// ---------------------------------------------------------------------------
// backward

void gpt_zero_grads(GPT* m) { m->be->zero(m->be, m->grads, m->grads_size * dtype_size(m->dtype)); }

void gpt_backward(GPT* m, const int32_t* inputs, int B, int T) {
    const GPTConfig* c = &m->config;
    if (c->arch == ARCH_LLAMA) {
        llama_backward(m, inputs, B, T);
        return;
    }
    Backend* be = m->be;
    int C = c->channels, NH = c->num_heads, L = c->num_layers, Vp = c->padded_vocab_size;
    int N = B * T;
    size_t BTC = (size_t)N * C, es = dtype_size(m->dtype);
    void* dres = gpt_act(m, A_DRESIDUAL);       // gradient of the residual stream
    void* dbtc = gpt_act(m, A_SCRATCH_BTC);     // (B,T,C) scratch
    void* dbt4c = gpt_act(m, A_SCRATCH_BT4C);   // (B,T,4C) scratch, also dqkv (B,T,3C)
    int fu = gpt_final_unit(m);
    void* embed = gpt_unit_params(m, gpt_embed_unit(), 1);
    void* dembed = gpt_unit_grads(m, gpt_embed_unit());
    void* fin = gpt_unit_params(m, fu, 1);
    void* dfin = gpt_unit_grads(m, fu);
    fp8_begin_backward(m->fp8);

    // The logits buffer already holds dlogits (cross_entropy with dloss != 0).
    be->matmul_backward(be, dbtc, gpt_tensor_in_unit(m, dembed, P_WTE, -1), NULL, gpt_act(m, A_LOGITS),
                        gpt_act(m, A_LNF),
                        gpt_tensor_in_unit(m, embed, P_WTE, -1), N, C, Vp);
    be->zero(be, dres, BTC * es);
    be->layernorm_backward(be, dres, gpt_tensor_in_unit(m, dfin, P_LNFW, -1), gpt_tensor_in_unit(m, dfin, P_LNFB, -1),
                           dbtc, gpt_layer_acts(m, L - 1, (size_t)N).output, gpt_tensor_in_unit(m, fin, P_LNFW, -1),
                           gpt_act(m, A_LNF_MEAN), gpt_act(m, A_LNF_RSTD), N, C,
                           gpt_amax_slot(m, L - 1, FP8_FCPROJ, FP8_GRAD));
    gpt_unit_backward_done(m, fu);
    gpt_unit_release(m, fu, 1);

    for (int l = L - 1; l >= 0; l--) {
        int u = gpt_layer_unit(l);
        LayerTensors w = gpt_layer_tensors(m, gpt_unit_params(m, u, 1), l);
        LayerTensors g = gpt_layer_tensors(m, gpt_unit_grads(m, u), l);
        LayerActs a = gpt_layer_acts(m, l, (size_t)N);
        RecomputeMode mode = recompute_layer_mode(&m->acts.recompute, l);
        if (mode == RECOMPUTE_FULL) {
            // Re-run the forward from the layer's input into the working set.
            // ln2 and the GELU output are then in dbtc and dbt4c, as a
            // selective layer would recompute them below.
            be->layernorm_forward(be, a.ln1, a.ln1_mean, a.ln1_rstd, a.input, w.ln1w, w.ln1b, N, C,
                                  gpt_amax_slot(m, l, FP8_QKV, FP8_INPUT));
            layer_forward_to_gelu(m, l, &w, &a, B, T);
        }

        // MLP block; dres is the gradient of the layer's output and, by the
        // identity path, of residual2, to which the layernorm adds its branch.
        if (mode == RECOMPUTE_NONE) {
            gpt_linear_backward(m, l, FP8_FCPROJ, dbt4c, g.fcprojw, g.fcprojb, dres, a.fch_gelu, w.fcprojw, N, 4 * C,
                                C);
        } else {
            if (mode == RECOMPUTE_SELECTIVE)
                be->gelu_forward(be, dbt4c, a.fch, 4 * BTC, gpt_amax_slot(m, l, FP8_FCPROJ, FP8_INPUT));
            gpt_linear_backward_over_input(m, l, FP8_FCPROJ, dbt4c, g.fcprojw, g.fcprojb, dres, w.fcprojw, N, 4 * C, C);
        }
        be->gelu_backward(be, dbt4c, a.fch, dbt4c, 4 * BTC, gpt_amax_slot(m, l, FP8_FC, FP8_GRAD));
        if (mode == RECOMPUTE_NONE) {
            gpt_linear_backward(m, l, FP8_FC, dbtc, g.fcw, g.fcb, dbt4c, a.ln2, w.fcw, N, C, 4 * C);
        } else {
            if (mode == RECOMPUTE_SELECTIVE)
                be->layernorm_forward(be, dbtc, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, N, C,
                                      gpt_amax_slot(m, l, FP8_FC, FP8_INPUT));
            gpt_linear_backward_over_input(m, l, FP8_FC, dbtc, g.fcw, g.fcb, dbt4c, w.fcw, N, C, 4 * C);
        }
        be->layernorm_backward(be, dres, g.ln2w, g.ln2b, dbtc, a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd, N, C,
                               gpt_amax_slot(m, l, FP8_ATTPROJ, FP8_GRAD));
        // attention block; dres becomes the gradient of this layer's input.
        gpt_linear_backward(m, l, FP8_ATTPROJ, dbtc, g.attprojw, g.attprojb, dres, a.atty, w.attprojw, N, C, C);
        be->attention_backward(be, dbt4c, dbtc, a.qkv, a.atty, a.lse, B, T, NH, NH, C / NH);
        float* dqkv_amax = gpt_amax_slot(m, l, FP8_QKV, FP8_GRAD);
        if (dqkv_amax) be->amax(be, dqkv_amax, dbt4c, 3 * BTC);  // the attention kernels measure nothing
        if (mode == RECOMPUTE_NONE) {
            gpt_linear_backward(m, l, FP8_QKV, dbtc, g.qkvw, g.qkvb, dbt4c, a.ln1, w.qkvw, N, C, 3 * C);
        } else {
            // ln1 shares dbtc with ln2, so full layers recompute it again too.
            be->layernorm_forward(be, dbtc, a.ln1_mean, a.ln1_rstd, a.input, w.ln1w, w.ln1b, N, C,
                                  gpt_amax_slot(m, l, FP8_QKV, FP8_INPUT));
            gpt_linear_backward_over_input(m, l, FP8_QKV, dbtc, g.qkvw, g.qkvb, dbt4c, w.qkvw, N, C, 3 * C);
        }
        be->layernorm_backward(be, dres, g.ln1w, g.ln1b, dbtc, a.input, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C,
                               gpt_amax_slot(m, l - 1, FP8_FCPROJ, FP8_GRAD));
        gpt_unit_backward_done(m, u);
        gpt_unit_release(m, u, 1);
    }
    fp8_end_backward(m->fp8);
    be->encoder_backward(be, gpt_tensor_in_unit(m, dembed, P_WTE, -1), gpt_tensor_in_unit(m, dembed, P_WPE, -1), dres,
                         inputs, B, T, C);
    gpt_unit_backward_done(m, gpt_embed_unit());
    gpt_unit_release(m, gpt_embed_unit(), 1);
}

// ---------------------------------------------------------------------------
// reductions and the update

void gpt_accumulate_loss(GPT* m, int B, int T, int accumulate) {
    m->be->sum(m->be, &m->scalars[0], (const float*)gpt_act(m, A_LOSSES), (size_t)B * T, accumulate);
}

void gpt_grad_norm_squared(GPT* m, size_t lo, size_t hi) {
    m->be->sum_squares(m->be, &m->scalars[1], (char*)m->grads + lo * dtype_size(m->dtype), hi - lo, 0);
}

void gpt_update(GPT* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                float grad_scale, uint64_t seed) {
    Backend* be = m->be;
    m->adam_step++;
    fp8_before_update(m->fp8);  // AdamW measures the FP8 weights it writes
    // Each tensor's part of each owned piece, as its own range (weight decay
    // differs per tensor; the zero padding between tensors is never touched),
    // all updated by one adamw_tensors call.
    AdamWTensor* ts = (AdamWTensor*)xmalloc((size_t)(m->layout.num_tensors ? m->layout.num_tensors : 1) * sizeof *ts);
    int nt = 0;
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        size_t lo, state_off, len = gpt_owned_piece(m, t->unit, &lo, &state_off);
        size_t hi = lo + len;
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->count < hi ? t->offset + t->count : hi;
        if (a >= b) continue;
        size_t s = state_off + (a - lo);  // index into master / adam_m / adam_v
        // A sharded buffer holds the piece at the optimizer state's index.
        AdamWTensor* x = &ts[nt++];
        x->grad = gpt_grads_sharded(m) ? s : a;
        x->param = gpt_params_sharded(m) ? s : a;
        x->state = s;
        x->count = b - a;
        x->index_base = a;
        x->weight_decay = t->decay ? weight_decay : 0.0f;
        x->amax = weight_update_amax(m, t->kind, t->layer);
    }
    AdamWParams p;
    memset(&p, 0, sizeof p);
    p.lr = lr;
    p.beta1 = beta1;
    p.beta2 = beta2;
    p.eps = eps;
    p.grad_scale = grad_scale;
    p.step = m->adam_step;
    p.seed = seed;
    be->adamw_tensors(be, m->params, m->master, m->grads, m->adam_m, m->adam_v, ts, nt, &p);
    free(ts);
}

void gpt_logits_row(GPT* m, int row, float* out) {
    int Vp = m->config.padded_vocab_size;
    size_t es = dtype_size(m->dtype);
    const char* src = (const char*)m->arena + m->acts.offset[A_LOGITS] + (size_t)row * Vp * es;
    if (m->dtype == DTYPE_F32) {
        m->be->to_host(m->be, out, src, (size_t)Vp * sizeof(float));
        return;
    }
    uint16_t* tmp = (uint16_t*)xmalloc((size_t)Vp * 2);
    m->be->to_host(m->be, tmp, src, (size_t)Vp * 2);
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_f32(tmp[i]);
    free(tmp);
}
