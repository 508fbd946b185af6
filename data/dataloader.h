// dataloader.h: turns a set of shards into training windows of T+1 tokens.
//
// Each shard is cut into non-overlapping windows: window w covers tokens
// [w*T, w*T + T + 1) (inputs are the first T, targets the last T), so a shard
// of n tokens holds floor((n - 1) / T) windows and the tail is unused.
//
// One epoch visits every window of every shard once. The order is fixed by
// the seed: each epoch e permutes the shard order and, inside each shard, the
// window order (a Fisher-Yates shuffle driven by a counter-based RNG keyed on
// (seed, e) and (seed, e, shard)). With shuffle off, shards are read in
// sorted-path order and windows in file order.
//
// The position is one number: the global window counter g (epoch = g / W,
// index within the epoch = g % W, W = windows per epoch). A training step
// consumes the windows [g, g + G) for a global batch of G sequences; the
// caller tells which of those windows this rank reads, so ranks read disjoint
// windows and the global batch does not depend on the number of ranks.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "data/shard.h"

EXTERN_C_BEGIN

typedef struct {
    Shard* shards;
    int num_shards;
    int T;                       // sequence length
    int vocab_size;              // tokens must be < vocab_size
    int shuffle;
    uint64_t seed;
    uint64_t* shard_windows;     // windows in each shard
    uint64_t windows_per_epoch;  // W
    uint64_t position;           // g: next global window
    // permutation state of the epoch currently cached
    uint64_t cached_epoch;
    int* shard_order;            // shard visiting order in cached_epoch
    uint64_t* order_prefix;      // prefix sums of windows in that order (num_shards + 1)
    uint32_t** window_order;     // per shard, lazily built window permutation (NULL until used)
} DataLoader;

// Opens every shard matching `pattern` (the flag name is used in errors).
// Fatal if nothing matches or if the shards hold no complete window of T+1
// tokens ("sequence length T is longer than the data in <pattern>").
void dataloader_init(DataLoader* dl, const char* pattern, const char* flag, int T, int vocab_size,
                     int shuffle, uint64_t seed);
void dataloader_free(DataLoader* dl);

// Fills inputs[T] and targets[T] with window g (any g >= 0; epochs wrap).
void dataloader_window(DataLoader* dl, uint64_t g, int32_t* inputs, int32_t* targets);

// Reads `count` consecutive windows starting at global window `first` into
// inputs/targets laid out (count, T). Does not move the position.
void dataloader_read(DataLoader* dl, uint64_t first, int count, int32_t* inputs, int32_t* targets);

// Position for checkpoints: save it, and set it back to resume exactly.
static inline uint64_t dataloader_position(const DataLoader* dl) { return dl->position; }
static inline void dataloader_set_position(DataLoader* dl, uint64_t g) { dl->position = g; }
static inline uint64_t dataloader_epoch(const DataLoader* dl) {
    return dl->position / dl->windows_per_epoch;
}

EXTERN_C_END
