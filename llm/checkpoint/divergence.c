// divergence.c: --on-divergence stop|rollback.
#include "llm/checkpoint/divergence.h"

#include <string.h>

#include "llm/report/report.h"

// Rollbacks to the same checkpoint, in a row of divergences.
static int last_target = -1, same_target;

void divergence_check_flags(const TrainConfig* cfg, const Checkpointer* ck) {
    const char* mode = cfg->on_divergence;
    if (strcmp(mode, "stop") != 0 && strcmp(mode, "rollback") != 0)
        fatal("--on-divergence '%s' is not one of stop, rollback", mode);
    if (cfg->max_rollbacks < 1) fatal("--max-rollbacks must be at least 1 (got %d)", cfg->max_rollbacks);
    if (strcmp(mode, "rollback") != 0) return;
    if (!checkpoint_dir(ck))
        fatal("--on-divergence rollback needs checkpoints to go back to, and --checkpoint-dir is empty");
    if (cfg->checkpoint_every <= 0)
        fatal("--on-divergence rollback needs --checkpoint-every above 0 (checkpoints during the run to go back to)");
    if (cfg->max_bad_steps <= 0)
        fatal("--on-divergence rollback needs --max-bad-steps above 0 (with 0 the run never gives up on a step)");
}

int divergence_recover(Checkpointer* ck, Trainer* tr, int steps_done) {
    const TrainConfig* cfg = tr->cfg;
    if (strcmp(cfg->on_divergence, "rollback") != 0) guard_stop_if_exhausted(&tr->guard, steps_done);
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
