// state.c: a model's memory: parameters, gradients, master weights and AdamW
// moments per ZeRO stage (the shards and their full-unit staging), the
// activation arena, and the architecture's own tables.
#include <string.h>

#include "llm/fp8/fp8.h"
#include "llm/model/internal.h"

static size_t max_layer_unit(const ParamLayout* pl) {
    size_t mx = 0;
    for (int u = 1; u + 1 < pl->num_units; u++) mx = unit_size(pl, u) > mx ? unit_size(pl, u) : mx;
    return mx;
}

// Elements of the shard plus full-unit staging with `layer_slots` layer
// slots (see gpt_state_bytes).
static size_t staged_size(const ParamLayout* pl, int layer_slots) {
    return pl->total / (size_t)pl->world + unit_size(pl, 0) + unit_size(pl, pl->num_units - 1) +
           (size_t)layer_slots * max_layer_unit(pl);
}

static void check_layer_slots(int param_layer_slots) {
    if (param_layer_slots < GPT_GRAD_LAYER_SLOTS || param_layer_slots > GPT_MAX_LAYER_SLOTS)
        fatal("internal: %d parameter staging layer slots (%d to %d)", param_layer_slots, GPT_GRAD_LAYER_SLOTS,
              GPT_MAX_LAYER_SLOTS);
}

// Elements of params, grads and each optimizer buffer at a stage.
static void state_sizes(const ParamLayout* pl, int zero_stage, int param_layer_slots, size_t* params, size_t* grads,
                        size_t* opt) {
    size_t n = pl->total;
    *params = zero_stage >= 3 ? staged_size(pl, param_layer_slots) : n;
    *grads = zero_stage >= 2 ? staged_size(pl, GPT_GRAD_LAYER_SLOTS) : n;
    *opt = zero_stage == 0 ? n : n / (size_t)pl->world;
}

StateBytes gpt_state_bytes(const GPTConfig* c, DType dtype, int world, int zero_stage) {
    return gpt_state_bytes_staged(c, dtype, world, zero_stage, GPT_GRAD_LAYER_SLOTS);
}

StateBytes gpt_state_bytes_staged(const GPTConfig* c, DType dtype, int world, int zero_stage, int param_layer_slots) {
    return gpt_state_bytes_full(c, dtype, world, zero_stage, param_layer_slots, DTYPE_F32, dtype);
}

size_t gpt_arch_state_bytes(const GPTConfig* c, int T) {
    const BlockDef* b = gpt_block(c);
    return b->state_bytes ? b->state_bytes(c, T) : 0;
}

// Elements before `slot` in a run of slots laid out embeddings, final unit,
// then layer slots of the largest layer's size (the staging behind a shard,
// the gradient scratch).
static size_t slot_offset(const ParamLayout* pl, StagingSlot slot) {
    size_t off = 0;
    if (slot > STAGING_EMBED) off += unit_size(pl, 0);
    if (slot > STAGING_FINAL) off += unit_size(pl, pl->num_units - 1);
    if (slot > STAGING_LAYER_A) off += (size_t)(slot - STAGING_LAYER_A) * max_layer_unit(pl);
    return off;
}

void* gpt_staging(const GPT* m, void* sharded, StagingSlot slot) {
    int layer_slots = sharded == m->params ? m->param_layer_slots : GPT_GRAD_LAYER_SLOTS;
    if ((int)slot < 0 || (int)slot >= STAGING_LAYER_A + layer_slots)
        fatal("internal: staging slot %d of %d", (int)slot, STAGING_LAYER_A + layer_slots);
    size_t off = m->opt_size + slot_offset(&m->layout, slot);
    return (char*)sharded + off * dtype_size(sharded == m->grads ? m->grad_dtype : m->dtype);
}

// Elements of the gradient scratch: the embeddings', the final unit's and two layer slots.
static size_t scratch_size(const ParamLayout* pl) {
    return unit_size(pl, 0) + unit_size(pl, pl->num_units - 1) + (size_t)GPT_GRAD_LAYER_SLOTS * max_layer_unit(pl);
}

void* gpt_grad_scratch(const GPT* m, StagingSlot slot) {
    if (!m->grad_scratch || (int)slot < 0 || (int)slot >= STAGING_LAYER_A + GPT_GRAD_LAYER_SLOTS)
        fatal("internal: gradient scratch slot %d", (int)slot);
    return (char*)m->grad_scratch + slot_offset(&m->layout, slot) * dtype_size(m->dtype);
}

// Gradients of a `dtype` run accumulated as `want`: where they are stored,
// and whether a scratch in dtype sits in front of them.
static DType grad_storage(DType dtype, DType want, int* scratch) {
    *scratch = want != dtype;
    return want == DTYPE_F32 || dtype == DTYPE_F32 ? DTYPE_F32 : dtype;
}

StateBytes gpt_state_bytes_full(const GPTConfig* c, DType dtype, int world, int zero_stage, int param_layer_slots,
                                DType adam_dtype, DType grad_want) {
    if (zero_stage < 0 || zero_stage > 3) fatal("internal: ZeRO stage %d does not exist", zero_stage);
    check_layer_slots(param_layer_slots);
    ParamLayout pl;
    param_layout_build(&pl, c, world);
    size_t params, grads, opt, es = dtype_size(dtype);
    state_sizes(&pl, zero_stage, param_layer_slots, &params, &grads, &opt);
    int scratch;
    StateBytes b;
    b.params = params * es;
    // As gpt_set_grad_dtype allocates them: the accumulator, and the scratch in front of it.
    b.grads = grads * dtype_size(grad_storage(dtype, grad_want, &scratch));
    if (scratch) b.grads += scratch_size(&pl) * es;
    b.master = dtype == DTYPE_F32 ? 0 : opt * sizeof(float);
    b.adam = 2 * opt * dtype_size(adam_dtype);
    param_layout_free(&pl);
    return b;
}

void gpt_set_grad_dtype(GPT* m, DType want) {
    if (want != DTYPE_F32 && want != DTYPE_BF16) fatal("internal: gradients in %s", dtype_name(want));
    if (m->hooks) fatal("internal: gpt_set_grad_dtype after the ZeRO hooks are installed");
    Backend* be = m->be;
    int scratch;
    DType storage = grad_storage(m->dtype, want, &scratch);
    be->free(be, m->grads);
    if (m->grad_scratch) be->free(be, m->grad_scratch);
    m->grad_scratch = NULL;
    m->grad_dtype = storage;
    m->grad_round_bf16 = want == DTYPE_BF16 && m->dtype == DTYPE_F32;
    m->grads = be->alloc(be, m->grads_size * dtype_size(storage), "gradients");
    be->zero(be, m->grads, m->grads_size * dtype_size(storage));
    if (scratch) {
        size_t bytes = scratch_size(&m->layout) * dtype_size(m->dtype);
        m->grad_scratch = be->alloc(be, bytes, "gradient scratch (one micro-step)");
        be->zero(be, m->grad_scratch, bytes);
    }
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

void gpt_create(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage) {
    gpt_create_recompute(m, c, be, B, T, world, rank, zero_stage, NULL);
}

void gpt_create_recompute(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank,
                          int zero_stage, const RecomputePolicy* recompute) {
    gpt_create_staged(m, c, be, B, T, world, rank, zero_stage, recompute, GPT_GRAD_LAYER_SLOTS);
}

void gpt_create_staged(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage,
                       const RecomputePolicy* recompute, int param_layer_slots) {
    gpt_create_full(m, c, be, B, T, world, rank, zero_stage, recompute, param_layer_slots, 1, DTYPE_F32);
}

void gpt_create_chunked(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank,
                        int zero_stage, const RecomputePolicy* recompute, int head_chunks) {
    gpt_create_full(m, c, be, B, T, world, rank, zero_stage, recompute, GPT_GRAD_LAYER_SLOTS, head_chunks,
                    DTYPE_F32);
}

void gpt_create_full(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage,
                     const RecomputePolicy* recompute, int param_layer_slots, int head_chunks, DType adam_dtype) {
    check_layer_slots(param_layer_slots);
    memset(m, 0, sizeof *m);
    m->config = *c;
    m->be = be;
    m->dtype = be->dtype;
    m->grad_dtype = be->dtype;
    m->B = B;
    m->T = T;
    if (T > c->max_seq_len)
        fatal("sequence length %d exceeds the model's maximum sequence length %d", T, c->max_seq_len);
    if (zero_stage < 0 || zero_stage > 3) fatal("internal: ZeRO stage %d is not available", zero_stage);
    if (rank < 0 || rank >= world) fatal("internal: rank %d of %d", rank, world);
    m->world = world;
    m->rank = rank;
    m->zero_stage = zero_stage;
    m->param_layer_slots = param_layer_slots;
    param_layout_build(&m->layout, c, world);
    m->num_params = gpt_num_params(c);
    size_t es = dtype_size(m->dtype);
    state_sizes(&m->layout, zero_stage, param_layer_slots, &m->params_size, &m->grads_size, &m->opt_size);
    size_t ns = m->opt_size;
    m->params = be->alloc(be, m->params_size * es, "parameters");
    m->grads = be->alloc(be, m->grads_size * es, "gradients");
    if (m->dtype != DTYPE_F32) m->master = (float*)be->alloc(be, ns * sizeof(float), "master weights");
    if (adam_dtype != DTYPE_F32 && adam_dtype != DTYPE_BF16)
        fatal("internal: AdamW moments must be fp32 or bf16, not %s", dtype_name(adam_dtype));
    m->adam_dtype = adam_dtype;
    size_t ms = dtype_size(adam_dtype);
    m->adam_m = be->alloc(be, ns * ms, "AdamW first moment");
    m->adam_v = be->alloc(be, ns * ms, "AdamW second moment");
    be->zero(be, m->params, m->params_size * es);
    be->zero(be, m->grads, m->grads_size * es);
    if (m->master) be->zero(be, m->master, ns * sizeof(float));
    be->zero(be, m->adam_m, ns * ms);
    be->zero(be, m->adam_v, ns * ms);
    act_layout_build_chunked(&m->acts, c, B, T, m->dtype, recompute, head_chunks);
    m->arena = be->alloc(be, m->acts.bytes, "activations");
    m->inputs = (int32_t*)be->alloc(be, (size_t)B * T * sizeof(int32_t), "input tokens");
    m->targets = (int32_t*)be->alloc(be, (size_t)B * T * sizeof(int32_t), "target tokens");
    m->scalars = (float*)be->alloc(be, 4 * sizeof(float), "scalars");
    be->zero(be, m->scalars, 4 * sizeof(float));
    const BlockDef* block = gpt_block(c);
    m->cp.n = 1;
    m->cp_kv_layer = -1;
    if (block->create_state) block->create_state(m);
}

void gpt_free(GPT* m) {
    Backend* be = m->be;
    if (m->fp8) gpt_disable_fp8(m);
    be->free(be, m->params);
    be->free(be, m->grads);
    if (m->grad_scratch) be->free(be, m->grad_scratch);
    if (m->master) be->free(be, m->master);
    be->free(be, m->adam_m);
    be->free(be, m->adam_v);
    be->free(be, m->arena);
    be->free(be, m->inputs);
    be->free(be, m->targets);
    be->free(be, m->scalars);
    if (m->rope_freqs) be->free(be, m->rope_freqs);
    if (m->cp_kv) be->free(be, m->cp_kv);
    if (m->cp_work) be->free(be, m->cp_work);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}
