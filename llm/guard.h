// guard.h: the training guard: a step whose loss or gradient norm is NaN or
// infinite does not update the model, and neither (optionally) does a loss
// spike; too many bad steps in a row stop the run.
//
// The trainer reads the step's loss and gradient norm on the host before the
// optimizer update (they are global: every rank sees the same values, so
// every rank takes the same decision). A skipped step leaves the parameters,
// the AdamW moments and the AdamW step counter exactly as they were; the
// batch it read is consumed, and the learning-rate schedule moves on.
//
// Spikes: the z-score of the loss against the mean and standard deviation of
// the last --spike-window losses of updated steps. Above --spike-z the step
// is reported as a spike, and with --skip-spikes also skipped.
//
// Testing hook: the environment variable TRAIN_GPT_INJECT_NAN=step[,step...]
// poisons one gradient element with NaN at those (1-based) steps, as a broken
// kernel or a bad GPU would; each entry once.
#pragma once

#include "llm/config.h"
#include "llm/model/model.h"

EXTERN_C_BEGIN

typedef enum { GUARD_UPDATE = 0, GUARD_SKIP_NONFINITE, GUARD_SKIP_SPIKE } GuardAction;

// For a resume identical to never having stopped, a checkpoint carries the
// loss window (history, filled, next) and the counters (bad_in_row, skipped,
// nonfinite, spikes): with --skip-spikes they decide which updates happen.
typedef struct {
    // settings
    int max_bad_steps;   // stop after this many skipped steps in a row; 0: never stop
    double spike_z;      // 0: no spike detection
    int spike_window;
    int skip_spikes;
    // rolling window of the losses of updated steps (a ring)
    double* history;
    int filled, next;
    // counters
    int bad_in_row;
    long skipped, nonfinite, spikes;
    int last_skipped_step;
    long rollbacks;      // checkpoints reloaded by --on-divergence rollback (not saved in checkpoints)
    GuardAction last_action;  // of the latest skipped step
    // TRAIN_GPT_INJECT_NAN
    int* inject;
    int num_inject;
} Guard;

typedef struct {
    GuardAction action;
    int spike;        // the loss z-score exceeded --spike-z (skipped or not)
    double loss_z;    // NaN until the window is full, or for a non-finite loss
} GuardVerdict;

// Reads the guard flags and TRAIN_GPT_INJECT_NAN; fatal, naming the flag or
// the variable, on a bad value.
void guard_init(Guard* g, const TrainConfig* cfg);
void guard_free(Guard* g);

// Whether the testing hook poisons a gradient at `step` (1-based). Each
// listed step fires once (list a step twice to poison it twice, e.g. again
// after --on-divergence rollback has gone back before it).
int guard_inject_nan_at(Guard* g, int step);
// Writes NaN into the first gradient element (wte[0][0], which every step's
// LM head touches), as the hook does.
void guard_poison_gradient(GPT* m);

// Decides about step `step` (1-based) from its loss and gradient norm, and
// updates the counters and the loss window.
GuardVerdict guard_check(Guard* g, int step, double loss, double grad_norm);

// Whether max_bad_steps steps in a row were skipped (never with 0): the
// point where a run stops, or (later) rolls back to a checkpoint.
int guard_exhausted(const Guard* g);
// Fatal when guard_exhausted: names the step and the reason.
void guard_stop_if_exhausted(const Guard* g, int step);
// Why the latest skipped step was skipped, for messages: "a loss spike" or
// "a non-finite loss or gradient norm".
const char* guard_last_skip_reason(const Guard* g);

const char* guard_action_name(GuardAction a);  // "update", "nonfinite", "spike"

EXTERN_C_END
