// trainer.h: the pieces of the training loop that train.cu strings together:
// setting up a run from its config, one optimizer step (gradient
// accumulation, clipping, AdamW), validation and text samples.
#pragma once

#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "llm/parallel/comm.h"
#include "llm/config.h"
#include "llm/fp8/fp8.h"
#include "llm/model/model.h"
#include "llm/guard.h"
#include "llm/schedule.h"
#include "llm/parallel/zero.h"
#include "llm/step_graph.h"

EXTERN_C_BEGIN

typedef struct {
    const TrainConfig* cfg;
    Backend* be;
    Comm* comm;
    GPT model;
    Zero zero;             // how the ranks share the model (--zero, --shard-scope)
    DataLoader train;
    DataLoader val;
    int has_val;
    Tokenizer tok;
    int has_tok;

    int rank, world;       // this process among all ranks
    int cp;                // --context-parallel: ranks per sequence (COMM_CP), 1: none
    int dp_rank, dp_world; // data parallelism: rank / cp of world / cp (each reads its own windows)
    int B, T;              // micro-batch and sequence length (--seq-len: the real tokens)
    int T_model;           // the model's rows per sequence: T, or its padded length / cp
    int32_t* host_local;   // (2, B, T_model): this rank's rows of inputs, then targets (cp > 1)
    int accum;             // micro-steps per optimizer step
    long tokens_per_step;  // B * T * dp_world * accum
    LRSchedule sched;
    int32_t* host_inputs;  // (B, T)
    int32_t* host_targets; // (B, T)
    int first_step;        // 0, or the step a resumed run continues from
    Guard guard;           // skips non-finite (and spiking) steps
    Fp8State fp8;          // --precision fp8 (model.fp8 points here), else unused
    int stop_requested;    // a stop signal cut validation or a sample short (every rank agrees)
    StepGraphs graphs;     // --cuda-graphs on: the captured micro-steps
} Trainer;

typedef struct {
    double loss;        // mean over the step's tokens
    double grad_norm;   // before clipping
    double lr;
    double seconds;
    double tokens_per_second;
    GuardAction action;  // GUARD_UPDATE, or why the update was skipped
    int spike;          // the loss was a spike (skipped or only reported)
    double loss_z;      // z-score of the loss against the spike window (NaN: none yet)
} StepResult;

// Opens data and tokenizer, sets up the ranks' sharding, builds and
// initialises the model, checks the batch geometry. Fatal, naming the flag,
// on any inconsistency. Collective: every rank calls it.
// --grad-dtype resolved for a run computing in `dtype` with `accum`
// micro-steps per step over `ranks` ranks (auto: FP32 for a 16-bit run
// that accumulates or sums over ranks, else dtype).
DType trainer_grad_dtype(GradDtypeChoice choice, DType dtype, int accum, int ranks);
void trainer_setup(Trainer* tr, const TrainConfig* cfg, Backend* be, Comm* comm);
void trainer_free(Trainer* tr);
// Writes the final weights in llm.c's format from rank 0 (collective: the
// shards are gathered from every rank).
void trainer_export(Trainer* tr, const char* path, DType dtype);
// The same as a Hugging Face model folder (llm/hf/hf.h), written by rank 0.
void trainer_export_hf(Trainer* tr, const char* dir, DType dtype);

// One optimizer step: accumulate gradients over the global batch's windows
// of this rank, clip by the global norm, AdamW.
StepResult trainer_step(Trainer* tr, int step);
// Mean loss over the first --val-batches x micro-batch windows of the
// validation set (0: all of it), shared out among the ranks; the same on
// every rank and, up to summation order, for any number of ranks.
// A stop signal (llm/checkpoint/signals.h) on any rank ends it between two
// batches: then NAN, with tr->stop_requested set.
double trainer_validate(Trainer* tr);
// Generates --sample-tokens tokens from an end-of-text prompt; returns the
// decoded text (malloc'ed). A stop signal ends it between two tokens, with
// the text so far and tr->stop_requested set.
char* trainer_sample(Trainer* tr, int step);
// Whether any rank has received a stop signal (sets tr->stop_requested).
// Collective: one host reduction.
int trainer_stop_requested(Trainer* tr);

// The factor that clips gradients of global norm `norm` to `max_norm`, as
// torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm is 0 (clipping off).
double grad_clip_scale(double norm, double max_norm);

// Whether something scheduled "every n steps" happens before step `step`.
static inline int every(int step, int n) { return n > 0 && step > 0 && step % n == 0; }

EXTERN_C_END
