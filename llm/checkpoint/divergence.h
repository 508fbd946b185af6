// divergence.h: what a run does when the guard gives up (--max-bad-steps
// skipped steps in a row, llm/guard.h): --on-divergence stop ends it with
// exit status 1 and a message naming the step; --on-divergence rollback
// reloads the newest complete checkpoint (parameters, optimizer state, the
// guard's loss window) and trains on from its step, while the data loader
// keeps moving forward: the batches that preceded the divergence are not
// read again (as PaLM did when its loss spiked). Reloading the same
// checkpoint more than --max-rollbacks times stops the run: it diverges from
// there whatever the data.
#pragma once

#include "llm/checkpoint/checkpoint.h"

EXTERN_C_BEGIN

// Checks --on-divergence and --max-rollbacks against the checkpoint settings
// (rollback needs a checkpoint directory, --checkpoint-every and
// --max-bad-steps above 0). Fatal, naming the flag.
void divergence_check_flags(const TrainConfig* cfg, const Checkpointer* ck);
// Call after each step when guard_exhausted(): stops the run, or rolls back
// and returns the number of steps completed after the rollback (the
// checkpoint's step) for the loop to continue from. Collective.
int divergence_recover(Checkpointer* ck, Trainer* tr, int steps_done);

EXTERN_C_END
