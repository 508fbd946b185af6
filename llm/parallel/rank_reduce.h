// rank_reduce.h: how per-rank statistics (GPU telemetry, memory) reach rank
// 0: a min/max reduction supplied by whoever owns the communicator. With one
// rank there is nothing to reduce and the reducer is left empty.
#pragma once

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    void* ctx;
    // In place, over all ranks: lo[i] = min of every rank's lo[i], hi[i] = max
    // of every rank's hi[i]. Collective: every rank calls it with the same n.
    // The values are finite or +-infinity (never NaN), so any MPI_MIN/MPI_MAX
    // all-reduce of doubles implements it.
    void (*minmax)(void* ctx, double* lo, double* hi, int n);
} RankReducer;

static inline void rank_minmax(const RankReducer* r, double* lo, double* hi, int n) {
    if (r && r->minmax) r->minmax(r->ctx, lo, hi, n);
}

EXTERN_C_END
