// divergence.c: --on-divergence stop|rollback.
#include "llm/checkpoint/divergence.h"

#include <string.h>

#include "llm/report/report.h"

// Rollbacks to the same checkpoint, in a row of divergences.
static int last_target = -1, same_target;

void divergence_check_flags(const TrainConfig* cfg, const Checkpointer* ck) {
    // The flags alone are config_check's; this needs the directory that
    // --checkpoint-dir auto resolved to (none when $TRAIN_GPT_CHECKPOINT_DIR is empty).
    if (cfg->on_divergence == ON_DIVERGENCE_ROLLBACK && !checkpoint_dir(ck))
        fatal("--on-divergence rollback needs checkpoints to go back to, and --checkpoint-dir %s resolves to none "
              "($TRAIN_GPT_CHECKPOINT_DIR is empty)",
              cfg->checkpoint_dir);
}

int divergence_recover(Checkpointer* ck, Trainer* tr, int steps_done) {
    const TrainConfig* cfg = tr->cfg;
    if (cfg->on_divergence != ON_DIVERGENCE_ROLLBACK) guard_stop_if_exhausted(&tr->guard, steps_done);
    const Guard* g = &tr->guard;
    const char* reason = guard_last_skip_reason(g);
    int bad = g->bad_in_row;
    int to = checkpoint_rollback(ck, steps_done);
    if (to < 0)
        fatal("step %d: %d steps in a row skipped (the last for %s), reaching --max-bad-steps %d; "
              "--on-divergence rollback: no complete checkpoint in '%s' to go back to (the first is written at step %d)",
              steps_done, bad, reason, cfg->max_bad_steps, checkpoint_dir(ck), cfg->checkpoint_every);
    same_target = to == last_target ? same_target + 1 : 1;
    last_target = to;
    if (same_target > cfg->max_rollbacks)
        fatal("step %d: %d steps in a row skipped (the last for %s) after %d rollbacks to the checkpoint of step %d "
              "(--max-rollbacks %d); the run diverges again from it: stopping",
              steps_done, bad, reason, same_target - 1, to, cfg->max_rollbacks);
    tr->guard.rollbacks++;
    report_rollback(tr, steps_done, to, bad, reason);
    return to;
}
