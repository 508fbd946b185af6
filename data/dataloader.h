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
    // llm.c's order (dataloader_use_llmc_order); llmc_group 0: this loader's own
    int llmc_group;              // windows per llm.c sample: B x ranks
    uint32_t llmc_seed;          // 42 + rank
    uint64_t* shard_samples;     // samples per shard
    int* llmc_shards;            // llm.c's shard order, permuted in place epoch after epoch
    void* llmc_rng;              // Mt19937 at the start of epoch llmc_next_epoch
    uint64_t llmc_next_epoch;
} DataLoader;

// Opens every shard matching `pattern` (the flag name is used in errors).
// Fatal if nothing matches or if the shards hold no complete window of T+1
// tokens ("sequence length T is longer than the data in <pattern>").
void dataloader_init(DataLoader* dl, const char* pattern, const char* flag, int T, int vocab_size,
                     int shuffle, uint64_t seed);
void dataloader_free(DataLoader* dl);

// Switches to llm.c's data order (--llmc-compat), for a loader whose windows
// are read B at a time by each of `ranks` ranks: a sample is B x ranks
// consecutive windows (llm.c's B*T+1 tokens at stride B*T, per rank), a
// shard holds floor((n - 1) / (B*ranks*T)) of them (the tail is unused), and
// with shuffle on, the shard order and each shard's sample order come from
// llm.c's MT19937 seeded with 42 + rank (data/llmc_order.h). Window g of the
// position is then window g % (B x ranks) of sample g / (B x ranks) in that
// order; windows_per_epoch counts only whole samples. Fatal when a shard
// holds no whole sample, as llm.c would.
void dataloader_use_llmc_order(DataLoader* dl, int B, int ranks, int rank, const char* flag);

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
