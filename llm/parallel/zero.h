// zero.h: data parallelism with ZeRO stages 0-3 over llm/parallel/comm.h, driven by
// the model's unit hooks (GPTHooks in llm/model/model.h).
//
//   stage 0  every rank keeps everything; gradients are all-reduced.
//   stage 1  gradients are reduce-scattered: each rank receives the sum of
//            its chunk of every unit, runs AdamW on its shard of the master
//            weights and moments, and the updated parameters are gathered.
//   stage 2  as 1, but only the gradient shard is kept: each unit's gradients
//            are computed into a full-unit staging buffer and reduce-scattered
//            into the shard as soon as the unit's backward is done.
//   stage 3  as 2, and only the parameter shard is kept: units are
//            gathered into staging slots ahead of their use. The order in
//            which units are used (their acquires: forward, backward, and the
//            next forward's start) is recorded on the first micro-step; from
//            then on, each acquire and release gathers the units of the next
//            K uses (--zero3-prefetch K, 1 or 2; m->param_layer_slots = K + 1
//            layer slots) that are not resident. A layer slot is taken from
//            the unit, among those nobody computes with, that is used again
//            farthest away, and only if that is after the unit it receives
//            (Belady's rule), so the last K + 1 layers of the forward stay for
//            the backward and the first K + 1 of the backward for the next
//            forward: 2L - 2(K + 1) layer gathers per micro-step. The
//            embeddings and the final unit (a Llama's untied LM head) have a
//            slot each, gathered once per optimizer step as they come into
//            the window (the embeddings right behind the update).
//
// Gradients are communicated per unit as each unit's backward finishes, so on
// the GPU the collectives (on their own stream) overlap the backward of the
// units after it. Stages 0 and 1 accumulate micro-steps locally and
// communicate in the last micro-step only; stages 2 and 3 reduce every
// micro-step into the shard, since the full gradient is never kept.
//
// With --shard-scope node the shard group is the node; after a unit's
// reduction in the node, the last micro-step all-reduces the shard's chunk
// across nodes (the ranks with the same node rank): one inter-node reduction
// per optimizer step.
#pragma once

#include "llm/parallel/comm.h"
#include "llm/model/model.h"

EXTERN_C_BEGIN

typedef struct {
    GPT* m;
    Comm* comm;
    int stage;
    GPTHooks hooks;
    int communicate;                // this micro-step's backward reduces gradients
    int last_micro;                 // ... and it is the optimizer step's last one
    int param_unit[NUM_STAGING];    // ZeRO-3: unit gathered into each staging slot (-1: none)
    int param_busy[NUM_STAGING];    // ... between unit_params and unit_release
    long param_used[NUM_STAGING];   // ... the acquire that last used it (a count of acquires)
    long uses;
    int prefetch;                   // ZeRO-3: uses gathered ahead (K)
    int* order;                     // ZeRO-3: the recorded uses, 2 * unit + backward, in order
    int order_len, order_cap;
    int order_known;                // the recording is complete
    int order_has_backward;         // ... it holds a backward use
    int pos;                        // position of the latest use in order (-1: unknown)
    int grad_unit[NUM_STAGING];     // ZeRO-2/3: unit accumulating in each slot (-1: none)
    int scratch_unit[NUM_STAGING];  // --grad-dtype: unit whose micro-step gradients are in each scratch slot
} Zero;

// The host-side bookkeeping that a micro-step reads and changes (which unit
// is gathered into which staging slot, the position in ZeRO-3's recorded
// order, which unit accumulates in each gradient slot), for
// llm/step_graph.c: a micro-step captured in a CUDA graph is valid only when
// replayed from the same state, and leaves the state its capture left.
// Comparable with memcmp (zero_host_state clears the padding).
typedef struct {
    int communicate, last_micro;
    int param_unit[NUM_STAGING], param_busy[NUM_STAGING];
    long param_age[NUM_STAGING];  // uses since the slot's unit was last used (0: empty slot)
    int order_known, order_len, order_has_backward, pos;
    int grad_unit[NUM_STAGING], scratch_unit[NUM_STAGING];
} ZeroHostState;
void zero_host_state(const Zero* z, ZeroHostState* s);
// Sets the state to s after `uses` more parameter uses (the replayed micro-step's).
void zero_set_host_state(Zero* z, const ZeroHostState* s, long uses);

// Installs the hooks on a model created with gpt_create(..., shard world,
// shard rank, stage) for the comm's COMM_SHARD group.
void zero_init(Zero* z, GPT* m, Comm* comm);
void zero_free(Zero* z);

// Before the first micro-step of an optimizer step: gradients to zero.
void zero_begin_step(Zero* z);
// Before micro-step `micro` of `accum`: whether its backward communicates.
void zero_begin_micro_step(Zero* z, int micro, int accum);
// After the last backward: the loss summed over this rank's micro-steps
// (scalars[0]) and the squared norm of the reduced gradient, both summed over
// the ranks. One host synchronisation.
void zero_step_totals(Zero* z, double* loss_sum, double* grad_norm_sq);
// AdamW on this rank's pieces, then the parameters every rank needs:
// gathered (stages 1, 2) or gathered again when next used (stage 3).
void zero_update(Zero* z, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                 uint64_t seed);
// The parameters were replaced (a checkpoint reloaded): ZeRO-3's gathered
// copies are stale.
void zero_params_changed(Zero* z);
// The whole model as FP32 on the host, on every rank (collective).
void zero_gather_params_f32(Zero* z, float* host_flat);

EXTERN_C_END
