// test_guard.c: the training guard (llm/guard.c): non-finite and spike
// decisions on synthetic losses, counters, the TRAIN_GPT_INJECT_NAN parser;
// and through the real trainer, that a poisoned step leaves parameters,
// AdamW moments and the AdamW step counter bit-identical.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm/parallel/comm.h"
#include "llm/guard.h"
#include "llm/trainer.h"
#include "tests/testlib.h"

static TrainConfig config_from(int argc, char** argv) {
    TrainConfig cfg;
    config_parse(&cfg, argc, argv);
    return cfg;
}

static void nonfinite_steps_skipped_and_counted(void) {
    char* argv[] = {"t", "--max-bad-steps", "3"};
    TrainConfig cfg = config_from(3, argv);
    unsetenv("TRAIN_GPT_INJECT_NAN");
    Guard g;
    guard_init(&g, &cfg);
    CHECK(guard_check(&g, 1, 5.0, 1.0).action == GUARD_UPDATE, "finite step skipped");
    GuardVerdict v = guard_check(&g, 2, NAN, 1.0);
    CHECK(v.action == GUARD_SKIP_NONFINITE && isnan(v.loss_z), "NaN loss: action %d", v.action);
    CHECK(guard_check(&g, 3, 5.0, INFINITY).action == GUARD_SKIP_NONFINITE, "inf grad norm not skipped");
    CHECK(guard_check(&g, 4, -INFINITY, 1.0).action == GUARD_SKIP_NONFINITE, "-inf loss not skipped");
    CHECK(g.bad_in_row == 3 && g.skipped == 3 && g.nonfinite == 3 && g.last_skipped_step == 4,
          "in a row %d, skipped %ld, nonfinite %ld, last %d", g.bad_in_row, g.skipped, g.nonfinite, g.last_skipped_step);
    CHECK(guard_check(&g, 5, 5.0, 1.0).action == GUARD_UPDATE, "finite step after bad ones skipped");
    CHECK(g.bad_in_row == 0 && g.skipped == 3, "a good step must reset the run of bad steps");
    guard_free(&g);
}

// Losses with small noise around a slowly falling trend, then a jump.
static void spikes_by_z_score(void) {
    char* argv[] = {"t", "--spike-z", "4", "--spike-window", "20"};
    TrainConfig cfg = config_from(5, argv);
    Guard g;
    guard_init(&g, &cfg);
    for (int i = 0; i < 20; i++) {
        double loss = 4.0 - 0.001 * i + 0.01 * sin(1.7 * i);
        GuardVerdict v = guard_check(&g, i + 1, loss, 1.0);
        CHECK(v.action == GUARD_UPDATE && !v.spike, "step %d flagged", i + 1);
        CHECK(isnan(v.loss_z), "z-score before the window is full: %g", v.loss_z);
    }
    // Window full: mean ~3.99, sd ~0.01. A loss of 4.0 is ordinary ...
    GuardVerdict v = guard_check(&g, 21, 3.99, 1.0);
    CHECK(isfinite(v.loss_z) && fabs(v.loss_z) < 2 && !v.spike, "ordinary loss: z %g", v.loss_z);
    // ... and 4.5 is a spike, reported but (without --skip-spikes) applied.
    v = guard_check(&g, 22, 4.5, 1.0);
    CHECK(v.spike && v.loss_z > 4 && v.action == GUARD_UPDATE, "spike: z %g action %d", v.loss_z, v.action);
    CHECK(g.spikes == 1 && g.skipped == 0 && g.bad_in_row == 0, "counters after a reported spike");
    guard_free(&g);

    // With --skip-spikes the spike is skipped and stays out of the baseline,
    // so the same spike again is still a spike.
    char* argv2[] = {"t", "--spike-z", "4", "--spike-window", "20", "--skip-spikes", "1"};
    cfg = config_from(7, argv2);
    guard_init(&g, &cfg);
    for (int i = 0; i < 20; i++) guard_check(&g, i + 1, 4.0 - 0.001 * i + 0.01 * sin(1.7 * i), 1.0);
    v = guard_check(&g, 21, 4.5, 1.0);
    GuardVerdict v2 = guard_check(&g, 22, 4.5, 1.0);
    CHECK(v.action == GUARD_SKIP_SPIKE && v2.action == GUARD_SKIP_SPIKE, "actions %d %d", v.action, v2.action);
    CHECK(v2.loss_z == v.loss_z, "a skipped spike entered the baseline: z %g then %g", v.loss_z, v2.loss_z);
    CHECK(g.bad_in_row == 2 && g.spikes == 2 && g.skipped == 2 && g.nonfinite == 0, "counters after skipped spikes");
    CHECK(guard_check(&g, 23, 3.98, 1.0).action == GUARD_UPDATE && g.bad_in_row == 0, "recovery");
    guard_free(&g);

    // A window of identical losses: no spread, no spike.
    char* argv3[] = {"t", "--spike-z", "1", "--spike-window", "4"};
    cfg = config_from(5, argv3);
    guard_init(&g, &cfg);
    for (int i = 0; i < 4; i++) guard_check(&g, i + 1, 2.0, 1.0);
    v = guard_check(&g, 5, 2.0, 1.0);
    CHECK(v.loss_z == 0 && !v.spike, "constant window: z %g", v.loss_z);
    guard_free(&g);
}

static void inject_steps_parsed(void) {
    char* argv[] = {"t"};
    TrainConfig cfg = config_from(1, argv);
    setenv("TRAIN_GPT_INJECT_NAN", "3,17,4", 1);
    Guard g;
    guard_init(&g, &cfg);
    CHECK(g.num_inject == 3, "%d steps", g.num_inject);
    CHECK(guard_inject_nan_at(&g, 3) && guard_inject_nan_at(&g, 4) && guard_inject_nan_at(&g, 17), "missing step");
    CHECK(!guard_inject_nan_at(&g, 1) && !guard_inject_nan_at(&g, 5), "extra step");
    guard_free(&g);
    unsetenv("TRAIN_GPT_INJECT_NAN");
}

// Host copies of everything an update writes.
typedef struct {
    float *params, *m, *v;
    int adam_step;
} Snapshot;

static Snapshot snapshot(const GPT* m) {
    Snapshot s;
    size_t n = m->layout.total, bytes = m->opt_size * sizeof(float);
    s.params = (float*)malloc(n * sizeof(float));
    s.m = (float*)malloc(bytes);
    s.v = (float*)malloc(bytes);
    gpt_get_params_f32(m, s.params);
    m->be->to_host(m->be, s.m, m->adam_m, bytes);
    m->be->to_host(m->be, s.v, m->adam_v, bytes);
    s.adam_step = m->adam_step;
    return s;
}

static void snapshot_free(Snapshot* s) {
    free(s->params);
    free(s->m);
    free(s->v);
}

static Comm* comm;  // a world of one

static void poisoned_step_leaves_model_untouched(void) {
    setenv("TRAIN_GPT_INJECT_NAN", "4", 1);
    char* argv[] = {"t", "--device", "cpu", "--depth", "2", "--seq-len", "32", "--micro-batch", "2", "--steps", "6",
                    "--val-every", "0", "--sample-every", "0"};
    TrainConfig cfg = config_from((int)(sizeof argv / sizeof argv[0]), argv);
    Backend* be = cpu_backend_create(DTYPE_F32, 0);
    Trainer tr;
    trainer_setup(&tr, &cfg, be, comm);
    unsetenv("TRAIN_GPT_INJECT_NAN");
    for (int step = 0; step < 3; step++) {
        StepResult r = trainer_step(&tr, step);
        CHECK(r.action == GUARD_UPDATE && isfinite(r.grad_norm), "step %d: action %d norm %g", step + 1, r.action,
              r.grad_norm);
    }
    Snapshot before = snapshot(&tr.model);
    StepResult r = trainer_step(&tr, 3);  // step 4: poisoned
    CHECK(r.action == GUARD_SKIP_NONFINITE && isnan(r.grad_norm) && isfinite(r.loss), "poisoned step: action %d norm %g",
          r.action, r.grad_norm);
    Snapshot after = snapshot(&tr.model);
    size_t n = tr.model.layout.total, bytes = tr.model.opt_size * sizeof(float);
    CHECK(memcmp(before.params, after.params, n * sizeof(float)) == 0, "parameters changed by a skipped step");
    CHECK(memcmp(before.m, after.m, bytes) == 0, "AdamW m changed by a skipped step");
    CHECK(memcmp(before.v, after.v, bytes) == 0, "AdamW v changed by a skipped step");
    CHECK(after.adam_step == 3 && before.adam_step == 3, "AdamW step counter %d -> %d, want 3 -> 3", before.adam_step,
          after.adam_step);
    // The next step trains again from the untouched state.
    r = trainer_step(&tr, 4);
    Snapshot next = snapshot(&tr.model);
    CHECK(r.action == GUARD_UPDATE && isfinite(r.grad_norm) && next.adam_step == 4, "step 5: action %d, adam step %d",
          r.action, next.adam_step);
    CHECK(memcmp(after.params, next.params, n * sizeof(float)) != 0, "step 5 did not update");
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(next.params[i]);
    CHECK(finite, "NaN leaked into the parameters");
    CHECK(tr.guard.skipped == 1 && tr.guard.bad_in_row == 0, "skipped %ld, in a row %d", tr.guard.skipped,
          tr.guard.bad_in_row);
    snapshot_free(&before);
    snapshot_free(&after);
    snapshot_free(&next);
    trainer_free(&tr);
    be->destroy(be);
}

int main(int argc, char** argv) {
    comm = comm_init(&argc, &argv);
    RUN(nonfinite_steps_skipped_and_counted);
    RUN(spikes_by_z_score);
    RUN(inject_steps_parsed);
    RUN(poisoned_step_leaves_model_untouched);
    comm_finalize(comm);
    return TESTS_DONE();
}
