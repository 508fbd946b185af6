// recompute.c: parsing, normalising and naming recompute policies.
#include "llm/recompute.h"

#include <stdio.h>
#include <string.h>

static const char* MODE_NAMES[] = {"none", "selective", "full"};

const char* recompute_mode_name(RecomputeMode m) { return MODE_NAMES[m]; }

RecomputePolicy recompute_policy(RecomputeMode mode, int full_layers, int num_layers) {
    RecomputePolicy p;
    p.mode = mode;
    p.full_layers = full_layers;
    if (mode == RECOMPUTE_FULL || full_layers >= num_layers) {
        p.mode = RECOMPUTE_FULL;
        p.full_layers = num_layers;
    }
    return p;
}

RecomputePolicy recompute_policy_from_flags(RecomputeMode mode, int full_layers, int num_layers) {
    if (full_layers < 0 || full_layers > num_layers)
        fatal("--recompute-layers %d is outside 0..%d (the model's layers)", full_layers, num_layers);
    if (mode == RECOMPUTE_FULL && full_layers != 0 && full_layers != num_layers)
        fatal("--recompute-layers %d: with --recompute full every layer is recomputed; choose "
              "--recompute none or selective for the other layers",
              full_layers);
    return recompute_policy(mode, full_layers, num_layers);
}

RecomputeMode recompute_layer_mode(const RecomputePolicy* p, int layer) {
    return layer < p->full_layers ? RECOMPUTE_FULL : p->mode;
}

const char* recompute_policy_describe(const RecomputePolicy* p, int num_layers, char* buf, size_t len) {
    if (p->mode == RECOMPUTE_FULL || p->full_layers == 0)
        snprintf(buf, len, "%s", recompute_mode_name(p->mode));
    else
        snprintf(buf, len, "%s + full x %d of %d layers", recompute_mode_name(p->mode), p->full_layers, num_layers);
    return buf;
}
