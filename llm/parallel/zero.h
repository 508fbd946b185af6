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
//   stage 3  as 2, and only the parameter shard is kept: each unit is
//            gathered into staging just before its forward and again before
//            its backward, the next layer prefetched into the second slot
//            while the current one computes. A slot is reused only when
//            needed, so the last two layers of the forward are still there
//            for the start of the backward, and the first two for the next
//            micro-step; the embeddings and final norm stay for the step.
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
    int grad_unit[NUM_STAGING];     // ZeRO-2/3: unit accumulating in each slot (-1: none)
} Zero;

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
