// zero.c: ZeRO stages 0-3 through the model's unit hooks. See zero.h.
//
// Staging (stages 2 and 3, see gpt_staging): the embeddings and the final
// norm have a slot each for the whole step; layers alternate between two
// slots. Communication events: one per parameter slot and one per gradient
// slot, recorded after the collective that fills or drains the slot.
#include "llm/parallel/zero.h"

#include <stdlib.h>
#include <string.h>

#include "llm/util/util.h"

enum { EV_PARAMS = 0, EV_GRADS = NUM_STAGING };

static size_t es_of(const GPT* m) { return dtype_size(m->dtype); }
// Gradients are accumulated and communicated in m->grad_dtype (--grad-dtype).
static size_t ges_of(const GPT* m) { return dtype_size(m->grad_dtype); }

// This rank's chunk of unit u's gradients, where its reduced sum lands: in
// the shard (stages 2, 3) or in the flat buffer (stages 0, 1).
static void* grad_chunk(const GPT* m, int u) {
    const ParamLayout* pl = &m->layout;
    if (gpt_grads_sharded(m)) return (char*)m->grads + pl->unit_begin[u] / (size_t)m->world * ges_of(m);
    return (char*)gpt_unit_slice(m, m->grads, u) + (size_t)m->rank * unit_chunk(pl, u) * ges_of(m);
}

// ---------------------------------------------------------------------------
// ZeRO-3 parameters: the recorded order of use, gathers ahead of it, eviction

#define NEVER (1 << 30)

// A use of a unit in the order: the unit and whether it is a backward use.
static int use_code(int u, int backward) { return 2 * u + (backward ? 1 : 0); }
static int use_unit(int code) { return code / 2; }

static int param_slot_of(const Zero* z, int u) {
    for (int s = 0; s < STAGING_LAYER_A + z->m->param_layer_slots; s++)
        if (z->param_unit[s] == u) return s;
    return -1;
}

// Uses from the position after z->pos until unit u is used again (1: the
// next use), or NEVER when the order is not known or lacks u.
static int next_use(const Zero* z, int u) {
    if (!z->order_known || z->pos < 0) return NEVER;
    for (int k = 1; k <= z->order_len; k++)
        if (use_unit(z->order[(z->pos + k) % z->order_len]) == u) return k;
    return NEVER;
}

static void order_append(Zero* z, int code) {
    if (z->order_len == z->order_cap) {
        z->order_cap = z->order_cap ? 2 * z->order_cap : 64;
        z->order = (int*)xrealloc(z->order, (size_t)z->order_cap * sizeof(int));
    }
    z->order[z->order_len++] = code;
}

// Moves z->pos to this use. Until the order is known, records it: the order
// is the uses from a forward's first unit through its backward, known when
// the next forward starts (a forward without a backward, as in evaluation,
// starts the recording again). Once known, a use off the order (evaluation,
// generation) finds its place in it again, or leaves the position unknown.
static void note_use(Zero* z, int code) {
    if (!z->order_known) {
        int closes = z->order_len > 0 && code == z->order[0];
        if (closes && z->order_has_backward) {
            z->order_known = 1;
            z->pos = 0;
            return;
        }
        if (closes) z->order_len = 0;
        z->order_has_backward |= code & 1;
        order_append(z, code);
        z->pos = -1;
        return;
    }
    int n = z->order_len;
    for (int k = 1; k <= n; k++) {
        int at = ((z->pos < 0 ? -1 : z->pos) + k + n) % n;
        if (z->order[at] == code) {
            z->pos = at;
            return;
        }
    }
    z->pos = -1;
}

static void gather_into(Zero* z, int slot, int u) {
    GPT* m = z->m;
    size_t lo, off, chunk = gpt_owned_piece(m, u, &lo, &off);
    // The slot's previous contents must no longer be read by queued compute.
    comm_wait_compute(z->comm);
    comm_all_gather(z->comm, COMM_SHARD, (char*)m->params + off * es_of(m), gpt_staging(m, m->params, (StagingSlot)slot),
                    chunk, m->dtype);
    comm_record(z->comm, EV_PARAMS + slot);
    z->param_unit[slot] = u;
}

// The slot unit u is gathered into when it is next used in `distance` uses
// (0: now): its own for the embeddings and the final unit; for a layer an
// empty layer slot, or else the one nobody computes with whose unit is used
// again farthest away, only if that is later than u's use (Belady's rule).
// While the order is not known, the least recently used.
static int slot_for(const Zero* z, int u, int distance) {
    const GPT* m = z->m;
    if (u == 0) return STAGING_EMBED;
    if (u == gpt_final_unit(m)) return STAGING_FINAL;
    int best = -1, best_next = 0;
    for (int s = STAGING_LAYER_A; s < STAGING_LAYER_A + m->param_layer_slots; s++) {
        if (z->param_busy[s]) continue;
        if (z->param_unit[s] < 0) return s;
        int next = next_use(z, z->param_unit[s]);
        if (best < 0 || next > best_next || (next == best_next && z->param_used[s] < z->param_used[best])) {
            best = s;
            best_next = next;
        }
    }
    return best >= 0 && best_next > distance ? best : -1;
}

// Gathers the units of the next `prefetch` uses after the current position
// that are not resident, nearest first, as long as a slot can take them.
static void prefetch(Zero* z) {
    if (!z->order_known || z->pos < 0) return;
    for (int k = 1; k <= z->prefetch && k < z->order_len; k++) {
        int v = use_unit(z->order[(z->pos + k) % z->order_len]);
        if (param_slot_of(z, v) >= 0) continue;
        int s = slot_for(z, v, k);
        if (s < 0 || z->param_busy[s]) return;
        gather_into(z, s, v);
    }
}

static void* acquire_params(Zero* z, int u, int backward) {
    GPT* m = z->m;
    note_use(z, use_code(u, backward));
    int s = param_slot_of(z, u);
    if (s < 0) {
        s = slot_for(z, u, 0);
        if (s < 0 || z->param_busy[s]) fatal("internal: ZeRO-3 has no free staging slot for unit %d", u);
        gather_into(z, s, u);
    }
    z->param_busy[s] = 1;
    z->param_used[s] = ++z->uses;
    comm_compute_wait(z->comm, EV_PARAMS + s);
    prefetch(z);
    return gpt_staging(m, m->params, (StagingSlot)s);
}

static void release_params(Zero* z, int u) {
    int s = param_slot_of(z, u);
    if (s < 0) fatal("internal: ZeRO-3 release of unit %d, which is not gathered", u);
    z->param_busy[s] = 0;
    prefetch(z);
}

// ---------------------------------------------------------------------------
// the hooks

static void* hook_unit_params(void* ctx, GPT* m, int u, int backward) {
    Zero* z = (Zero*)ctx;
    return gpt_params_sharded(m) ? acquire_params(z, u, backward) : gpt_unit_slice(m, m->params, u);
}

static int grad_slot_for(const GPT* m, int u) {
    if (u == 0) return STAGING_EMBED;
    if (u == gpt_final_unit(m)) return STAGING_FINAL;
    return STAGING_LAYER_A + (u & 1);
}

// Where unit u's gradients accumulate: its slice of the flat gradients
// (stages 0, 1) or a staging slot (stages 2, 3), zeroed on its first use in
// the micro-step.
static void* grad_target(Zero* z, GPT* m, int u) {
    if (!gpt_grads_sharded(m)) return gpt_unit_slice(m, m->grads, u);
    int s = grad_slot_for(m, u);
    void* buf = gpt_staging(m, m->grads, (StagingSlot)s);
    if (z->grad_unit[s] != u) {
        // The slot's last reduce-scatter must have read it before it is zeroed.
        comm_compute_wait(z->comm, EV_GRADS + s);
        m->be->zero(m->be, buf, unit_size(&m->layout, u) * ges_of(m));
        z->grad_unit[s] = u;
    }
    return buf;
}

// The backward kernels write unit u's gradients here: into the target
// itself, or (--grad-dtype differing from the compute dtype) into a scratch
// slot in the compute dtype that hook_unit_backward_done adds into the target.
static void* hook_unit_grads(void* ctx, GPT* m, int u) {
    Zero* z = (Zero*)ctx;
    if (!m->grad_scratch) return grad_target(z, m, u);
    int s = grad_slot_for(m, u);
    void* buf = gpt_grad_scratch(m, (StagingSlot)s);
    if (z->scratch_unit[s] != u) {
        m->be->zero(m->be, buf, unit_size(&m->layout, u) * es_of(m));
        z->scratch_unit[s] = u;
    }
    return buf;
}

static void hook_unit_backward_done(void* ctx, GPT* m, int u) {
    Zero* z = (Zero*)ctx;
    if (m->grad_scratch) {
        // This micro-step's gradients of u, added into the accumulator in its dtype.
        int s = grad_slot_for(m, u);
        if (z->scratch_unit[s] != u) fatal("internal: unit %d's backward is done but its gradients are not in scratch", u);
        m->be->accumulate_f32(m->be, (float*)grad_target(z, m, u), gpt_grad_scratch(m, (StagingSlot)s),
                              unit_size(&m->layout, u), m->grad_round_bf16);
        z->scratch_unit[s] = -1;
    }
    if (!z->communicate) return;
    Comm* c = z->comm;
    size_t chunk = unit_chunk(&m->layout, u);
    int replicas = c->group[COMM_REPLICA].size > 1 && z->last_micro;
    comm_wait_compute(c);  // the unit's gradients are complete
    if (z->stage == 0) {
        comm_all_reduce(c, COMM_WORLD, gpt_unit_slice(m, m->grads, u), unit_size(&m->layout, u), m->grad_dtype);
    } else if (z->stage == 1) {
        comm_reduce_scatter(c, COMM_SHARD, gpt_unit_slice(m, m->grads, u), chunk, m->grad_dtype, NULL);
        if (replicas) comm_all_reduce(c, COMM_REPLICA, grad_chunk(m, u), chunk, m->grad_dtype);
    } else {
        int s = grad_slot_for(m, u);
        void* staged = gpt_staging(m, m->grads, (StagingSlot)s);
        if (m->grad_round_bf16) {
            // The emulated BF16 shard: the group's sum (in FP32) lands in this
            // rank's chunk of the slot, then is added into the shard rounded.
            comm_reduce_scatter(c, COMM_SHARD, staged, chunk, m->grad_dtype, NULL);
            comm_record(c, EV_GRADS + s);
            comm_compute_wait(c, EV_GRADS + s);
            m->be->accumulate_f32(m->be, (float*)grad_chunk(m, u),
                                  (char*)staged + (size_t)c->group[COMM_SHARD].rank * chunk * ges_of(m), chunk, 1);
            comm_wait_compute(c);
        } else {
            comm_reduce_scatter(c, COMM_SHARD, staged, chunk, m->grad_dtype, grad_chunk(m, u));
        }
        if (replicas) comm_all_reduce(c, COMM_REPLICA, grad_chunk(m, u), chunk, m->grad_dtype);
        comm_record(c, EV_GRADS + s);
        z->grad_unit[s] = -1;
    }
}

static void hook_unit_release(void* ctx, GPT* m, int u, int backward) {
    Zero* z = (Zero*)ctx;
    (void)backward;
    if (gpt_params_sharded(m)) release_params(z, u);
}

// ---------------------------------------------------------------------------
// the step

void zero_init(Zero* z, GPT* m, Comm* comm) {
    memset(z, 0, sizeof *z);
    z->m = m;
    z->comm = comm;
    z->stage = m->zero_stage;
    z->prefetch = m->param_layer_slots - 1;
    z->pos = -1;
    if (m->world != comm->group[COMM_SHARD].size || m->rank != comm->group[COMM_SHARD].rank)
        fatal("internal: model sharded as rank %d of %d, shard group is rank %d of %d", m->rank, m->world,
              comm->group[COMM_SHARD].rank, comm->group[COMM_SHARD].size);
    if (z->stage == 0 && comm->group[COMM_SHARD].size != comm->world)
        fatal("internal: ZeRO-0 replicates over the world, not a node");
    for (int s = 0; s < NUM_STAGING; s++) {
        z->param_unit[s] = -1;
        z->grad_unit[s] = -1;
        z->scratch_unit[s] = -1;
    }
    z->hooks.ctx = z;
    z->hooks.unit_params = hook_unit_params;
    z->hooks.unit_grads = hook_unit_grads;
    z->hooks.unit_backward_done = hook_unit_backward_done;
    z->hooks.unit_release = hook_unit_release;
    m->hooks = &z->hooks;
}

void zero_free(Zero* z) {
    if (z->m) z->m->hooks = NULL;
    free(z->order);
    memset(z, 0, sizeof *z);
}

void zero_begin_step(Zero* z) {
    gpt_zero_grads(z->m);
    for (int s = 0; s < NUM_STAGING; s++) z->grad_unit[s] = z->scratch_unit[s] = -1;
}

void zero_begin_micro_step(Zero* z, int micro, int accum) {
    z->last_micro = micro == accum - 1;
    z->communicate = z->stage >= 2 || z->last_micro;
}

void zero_step_totals(Zero* z, double* loss_sum, double* grad_norm_sq) {
    GPT* m = z->m;
    Backend* be = m->be;
    const ParamLayout* pl = &m->layout;
    comm_compute_wait_all(z->comm);
    // The squared norm of the chunks this rank reduced (chunk r of every
    // unit), unit by unit, the same way at every stage.
    for (int u = 0; u < pl->num_units; u++) gpt_grad_sum_squares(m, &m->scalars[1], grad_chunk(m, u), unit_chunk(pl, u), u > 0);
    float scalars[2];
    be->to_host(be, scalars, m->scalars, sizeof scalars);
    *loss_sum = scalars[0];
    *grad_norm_sq = scalars[1];
    comm_host_sum(z->comm, COMM_WORLD, loss_sum, 1);
    // Replicas hold the same shard: the norm is a sum over the shard group.
    comm_host_sum(z->comm, COMM_SHARD, grad_norm_sq, 1);
}

void zero_update(Zero* z, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                 uint64_t seed) {
    GPT* m = z->m;
    gpt_update(m, lr, beta1, beta2, eps, weight_decay, grad_scale, seed);
    if (z->stage == 1 || z->stage == 2) {
        comm_wait_compute(z->comm);
        for (int u = 0; u < m->layout.num_units; u++)
            comm_all_gather(z->comm, COMM_SHARD, NULL, gpt_unit_slice(m, m->params, u), unit_chunk(&m->layout, u),
                            m->dtype);
        comm_compute_wait_all(z->comm);
    } else if (z->stage == 3) {
        // Gathered copies are stale: gather the next forward's first units
        // now, behind the update.
        zero_params_changed(z);
        prefetch(z);
    }
}

void zero_host_state(const Zero* z, ZeroHostState* s) {
    memset(s, 0, sizeof *s);
    s->communicate = z->communicate;
    s->last_micro = z->last_micro;
    for (int k = 0; k < NUM_STAGING; k++) {
        s->param_unit[k] = z->param_unit[k];
        s->param_busy[k] = z->param_busy[k];
        s->param_age[k] = z->param_unit[k] < 0 ? 0 : z->uses - z->param_used[k];
        s->grad_unit[k] = z->grad_unit[k];
        s->scratch_unit[k] = z->scratch_unit[k];
    }
    s->order_known = z->order_known;
    s->order_len = z->order_len;
    s->order_has_backward = z->order_has_backward;
    s->pos = z->pos;
}

void zero_set_host_state(Zero* z, const ZeroHostState* s, long uses) {
    z->uses += uses;
    z->communicate = s->communicate;
    z->last_micro = s->last_micro;
    for (int k = 0; k < NUM_STAGING; k++) {
        z->param_unit[k] = s->param_unit[k];
        z->param_busy[k] = s->param_busy[k];
        z->param_used[k] = s->param_unit[k] < 0 ? z->param_used[k] : z->uses - s->param_age[k];
        z->grad_unit[k] = s->grad_unit[k];
        z->scratch_unit[k] = s->scratch_unit[k];
    }
    z->order_known = s->order_known;
    z->order_len = s->order_len;
    z->order_has_backward = s->order_has_backward;
    z->pos = s->pos;
}

void zero_params_changed(Zero* z) {
    for (int s = 0; s < NUM_STAGING; s++) {
        z->param_unit[s] = -1;
        z->param_busy[s] = 0;
    }
}

void zero_gather_params_f32(Zero* z, float* host_flat) {
    GPT* m = z->m;
    gpt_get_params_f32(m, host_flat);
    // Every rank holds exact FP32 values only for its own pieces when the
    // master weights (or, at stage 3, the parameters) are sharded.
    if (z->stage == 0 || (!m->master && !gpt_params_sharded(m))) return;
    for (int u = 0; u < m->layout.num_units; u++)
        comm_host_all_gather(z->comm, COMM_SHARD, host_flat + m->layout.unit_begin[u],
                             unit_chunk(&m->layout, u) * sizeof(float));
}
