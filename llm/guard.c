// guard.c: non-finite and spike checks on the step's loss and gradient norm.
#include "llm/guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Parses "3" or "3,7,8" into a list of positive step numbers.
static void parse_inject_steps(Guard* g, const char* spec) {
    const char* p = spec;
    while (*p) {
        char item[32];
        size_t n = strcspn(p, ",");
        long step;
        if (n == 0 || n >= sizeof item) fatal("TRAIN_GPT_INJECT_NAN='%s': expected step[,step...]", spec);
        memcpy(item, p, n);
        item[n] = 0;
        if (!parse_long(item, &step) || step < 1 || step > 2147483647L)
            fatal("TRAIN_GPT_INJECT_NAN='%s': '%s' is not a step number (1, 2, ...)", spec, item);
        g->inject = (int*)xrealloc(g->inject, (size_t)(g->num_inject + 1) * sizeof(int));
        g->inject[g->num_inject++] = (int)step;
        p += n;
        if (*p == ',') p++;
    }
}

void guard_init(Guard* g, const TrainConfig* cfg) {
    memset(g, 0, sizeof *g);
    g->max_bad_steps = cfg->max_bad_steps;
    g->spike_z = cfg->spike_z;
    g->spike_window = cfg->spike_window;
    g->skip_spikes = cfg->skip_spikes;
    g->history = (double*)xcalloc((size_t)g->spike_window, sizeof(double));
    const char* spec = getenv("TRAIN_GPT_INJECT_NAN");
    if (spec && spec[0]) parse_inject_steps(g, spec);
}

void guard_free(Guard* g) {
    free(g->history);
    free(g->inject);
    memset(g, 0, sizeof *g);
}

int guard_inject_nan_at(Guard* g, int step) {
    for (int i = 0; i < g->num_inject; i++)
        if (g->inject[i] == step) {
            g->inject[i] = 0;  // one fault per listed step: a rollback that repeats the step finds it healthy
            return 1;
        }
    return 0;
}

void guard_poison_gradient(GPT* m) {
    // ZeRO-2/3 note: with sharded gradients this element belongs to rank 0's
    // chunk of unit 0, so it enters the global norm exactly once.
    if (m->grad_dtype == DTYPE_F32) {
        float nan_f32 = NAN;
        m->be->to_device(m->be, m->grads, &nan_f32, sizeof nan_f32);
    } else {
        uint16_t nan_16 = m->grad_dtype == DTYPE_BF16 ? 0x7FC0 : 0;
        if (m->grad_dtype != DTYPE_BF16)
            fatal("TRAIN_GPT_INJECT_NAN: no NaN pattern for %s gradients", dtype_name(m->grad_dtype));
        m->be->to_device(m->be, m->grads, &nan_16, sizeof nan_16);
    }
}

// z-score of x against the window; NaN until the window is full. A window of
// identical losses has no spread: nothing counts as a spike against it.
static double window_z(const Guard* g, double x) {
    if (g->filled < g->spike_window) return NAN;
    double mean = 0, var = 0;
    for (int i = 0; i < g->filled; i++) mean += g->history[i];
    mean /= g->filled;
    for (int i = 0; i < g->filled; i++) var += (g->history[i] - mean) * (g->history[i] - mean);
    double sd = sqrt(var / g->filled);
    return sd > 0 ? (x - mean) / sd : 0.0;
}

static void window_push(Guard* g, double x) {
    g->history[g->next] = x;
    g->next = (g->next + 1) % g->spike_window;
    if (g->filled < g->spike_window) g->filled++;
}

GuardVerdict guard_check(Guard* g, int step, double loss, double grad_norm) {
    GuardVerdict v = {GUARD_UPDATE, 0, NAN};
    if (!isfinite(loss) || !isfinite(grad_norm)) {
        v.action = GUARD_SKIP_NONFINITE;
        g->nonfinite++;
    } else {
        v.loss_z = window_z(g, loss);
        v.spike = g->spike_z > 0 && v.loss_z > g->spike_z;
        if (v.spike) g->spikes++;
        if (v.spike && g->skip_spikes) v.action = GUARD_SKIP_SPIKE;
        else window_push(g, loss);  // a skipped spike stays out of the baseline
    }
    if (v.action == GUARD_UPDATE) {
        g->bad_in_row = 0;
    } else {
        g->bad_in_row++;
        g->skipped++;
        g->last_skipped_step = step;
        g->last_action = v.action;
    }
    return v;
}

int guard_exhausted(const Guard* g) { return g->max_bad_steps > 0 && g->bad_in_row >= g->max_bad_steps; }

const char* guard_last_skip_reason(const Guard* g) {
    return g->last_action == GUARD_SKIP_SPIKE ? "a loss spike" : "a non-finite loss or gradient norm";
}

void guard_stop_if_exhausted(const Guard* g, int step) {
    if (guard_exhausted(g))
        fatal("step %d: %d steps in a row skipped (the last for %s), reaching --max-bad-steps %d; "
              "stopping so the run can restart from its last good checkpoint",
              step, g->bad_in_row, guard_last_skip_reason(g), g->max_bad_steps);
}

const char* guard_action_name(GuardAction a) {
    switch (a) {
    case GUARD_UPDATE: return "update";
    case GUARD_SKIP_NONFINITE: return "nonfinite";
    case GUARD_SKIP_SPIKE: return "spike";
    }
    return "?";
}
