// dataloader.c: maps a global window counter to (shard, window) through the
// per-epoch permutations described in dataloader.h, and reads the windows.
// Only the current epoch's permutations are kept: the shard order eagerly,
// each shard's window order when that shard is first touched.
//
// RNG streams: the shard order of epoch e uses rng_key(seed, e, 0); the window
// order of shard s in epoch e uses rng_key(seed, e, s + 1).
#include "data/dataloader.h"

#include <stdlib.h>
#include <string.h>

#include "data/llmc_order.h"
#include "data/shard_manifest.h"
#include "llm/util/rng.h"

typedef unsigned long long ull;

void dataloader_init(DataLoader* dl, const char* pattern, const char* flag, int T, int vocab_size,
                     int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof *dl);
    if (T <= 0) fatal("sequence length T=%d must be positive (%s)", T, flag ? flag : "pattern");
    char** paths = glob_paths(pattern, flag, &dl->num_shards);
    shard_manifest_check(paths, dl->num_shards, flag ? flag : pattern);
    dl->shards = (Shard*)xcalloc((size_t)dl->num_shards, sizeof *dl->shards);
    dl->shard_windows = (uint64_t*)xcalloc((size_t)dl->num_shards, sizeof *dl->shard_windows);
    for (int i = 0; i < dl->num_shards; i++) {
        shard_open(&dl->shards[i], paths[i]);
        uint64_t n = dl->shards[i].num_tokens;
        dl->shard_windows[i] = n > 0 ? (n - 1) / (uint64_t)T : 0;
        // Window permutations are uint32 (4 bytes per window keeps them small).
        if (shuffle && dl->shard_windows[i] > UINT32_MAX)
            fatal("shard '%s' holds %llu windows of T=%d, more than the shuffler's 2^32 limit: split it",
                  paths[i], (ull)dl->shard_windows[i], T);
        dl->windows_per_epoch += dl->shard_windows[i];
    }
    if (dl->windows_per_epoch == 0)
        fatal("sequence length T=%d is longer than the data in '%s' (%s): no shard holds T+1 tokens", T,
              pattern, flag ? flag : "pattern");
    free_paths(paths, dl->num_shards);
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->shuffle = shuffle;
    dl->seed = seed;
    dl->shard_order = (int*)xmalloc((size_t)dl->num_shards * sizeof *dl->shard_order);
    dl->order_prefix = (uint64_t*)xmalloc(((size_t)dl->num_shards + 1) * sizeof *dl->order_prefix);
    dl->window_order = (uint32_t**)xcalloc((size_t)dl->num_shards, sizeof *dl->window_order);
    dl->cached_epoch = UINT64_MAX;  // nothing cached yet
}

void dataloader_free(DataLoader* dl) {
    for (int i = 0; i < dl->num_shards; i++) {
        shard_close(&dl->shards[i]);
        free(dl->window_order[i]);
    }
    free(dl->shards);
    free(dl->shard_windows);
    free(dl->shard_order);
    free(dl->order_prefix);
    free(dl->window_order);
    free(dl->shard_samples);
    free(dl->llmc_shards);
    free(dl->llmc_rng);
    memset(dl, 0, sizeof *dl);
}

void dataloader_use_llmc_order(DataLoader* dl, int B, int ranks, int rank, const char* flag) {
    uint64_t group = (uint64_t)B * (uint64_t)ranks;
    dl->llmc_group = (int)group;
    dl->llmc_seed = 42u + (uint32_t)rank;
    dl->shard_samples = (uint64_t*)xcalloc((size_t)dl->num_shards, sizeof *dl->shard_samples);
    dl->llmc_shards = (int*)xmalloc((size_t)dl->num_shards * sizeof *dl->llmc_shards);
    dl->llmc_rng = xmalloc(sizeof(Mt19937));
    dl->windows_per_epoch = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        dl->shard_samples[i] = dl->shard_windows[i] / group;
        if (dl->shard_samples[i] == 0)
            fatal("%s: shard '%s' holds %llu tokens, fewer than llm.c's one batch of micro-batch x seq-len x ranks + 1 "
                  "= %llu (--llmc-compat reads whole batches from every shard)",
                  flag, dl->shards[i].path, (ull)dl->shards[i].num_tokens, (ull)(group * (uint64_t)dl->T + 1));
        if (dl->shard_samples[i] > INT32_MAX)
            fatal("%s: shard '%s' holds more than 2^31 batches, more than llm.c's shuffle takes: split it", flag,
                  dl->shards[i].path);
        dl->windows_per_epoch += dl->shard_samples[i] * group;
    }
    dl->cached_epoch = UINT64_MAX;
    dl->llmc_next_epoch = UINT64_MAX;  // no generator state kept yet
}

// ---- permutations -------------------------------------------------------------------------------

// llm.c's epochs come from one generator drawn in sequence (its shard order,
// then each shard's samples as the shard is opened), so epoch e is replayed
// from the seed, or continued from where epoch e - 1 left the generator.
static void cache_epoch_llmc(DataLoader* dl, uint64_t epoch) {
    int n = dl->num_shards;
    Mt19937* mt = (Mt19937*)dl->llmc_rng;
    uint64_t e = 0;
    if (dl->llmc_next_epoch == epoch) {
        e = epoch;
    } else {
        mt19937_seed(mt, dl->llmc_seed);
        for (int i = 0; i < n; i++) dl->llmc_shards[i] = i;
    }
    for (; e <= epoch; e++) {
        if (dl->shuffle) llmc_shuffle_int(dl->llmc_shards, n, mt);
        for (int p = 0; p < n; p++) {
            int s = dl->llmc_shards[p];
            int k = (int)dl->shard_samples[s];
            if (!dl->window_order[s]) dl->window_order[s] = (uint32_t*)xmalloc((size_t)k * sizeof(uint32_t));
            for (int i = 0; i < k; i++) dl->window_order[s][i] = (uint32_t)i;
            if (dl->shuffle) llmc_shuffle_u32(dl->window_order[s], k, mt);
        }
    }
    dl->llmc_next_epoch = epoch + 1;
    dl->order_prefix[0] = 0;
    for (int p = 0; p < n; p++) {
        dl->shard_order[p] = dl->llmc_shards[p];
        dl->order_prefix[p + 1] = dl->order_prefix[p] + dl->shard_samples[dl->shard_order[p]] * (uint64_t)dl->llmc_group;
    }
    dl->cached_epoch = epoch;
}

static void cache_epoch(DataLoader* dl, uint64_t epoch) {
    if (dl->cached_epoch == epoch) return;
    if (dl->llmc_group) {
        cache_epoch_llmc(dl, epoch);
        return;
    }
    int n = dl->num_shards;
    for (int i = 0; i < n; i++) {
        free(dl->window_order[i]);
        dl->window_order[i] = NULL;
        dl->shard_order[i] = i;
    }
    if (dl->shuffle) {
        uint64_t key = rng_key(dl->seed, epoch, 0);
        for (int i = n - 1; i > 0; i--) {
            int j = (int)rng_below(key, (uint64_t)i, (uint64_t)i + 1);
            int t = dl->shard_order[i];
            dl->shard_order[i] = dl->shard_order[j];
            dl->shard_order[j] = t;
        }
    }
    dl->order_prefix[0] = 0;
    for (int p = 0; p < n; p++) dl->order_prefix[p + 1] = dl->order_prefix[p] + dl->shard_windows[dl->shard_order[p]];
    dl->cached_epoch = epoch;
}

static const uint32_t* window_order_of(DataLoader* dl, int shard) {
    if (!dl->window_order[shard]) {
        uint64_t n = dl->shard_windows[shard];
        uint32_t* perm = (uint32_t*)xmalloc((size_t)n * sizeof *perm);
        for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
        uint64_t key = rng_key(dl->seed, dl->cached_epoch, (uint64_t)shard + 1);
        for (uint64_t i = n; i-- > 1;) {
            uint64_t j = rng_below(key, i, i + 1);
            uint32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        dl->window_order[shard] = perm;
    }
    return dl->window_order[shard];
}

// The shard slot p in the epoch's order whose window range holds index i.
static int find_slot(const DataLoader* dl, uint64_t i) {
    int lo = 0, hi = dl->num_shards - 1;  // invariant: prefix[lo] <= i < prefix[hi + 1]
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (dl->order_prefix[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// ---- reading ------------------------------------------------------------------------------------

void dataloader_window(DataLoader* dl, uint64_t g, int32_t* inputs, int32_t* targets) {
    uint64_t W = dl->windows_per_epoch;
    cache_epoch(dl, g / W);
    uint64_t i = g % W;
    int p = find_slot(dl, i);
    int s = dl->shard_order[p];
    uint64_t w = i - dl->order_prefix[p];
    if (dl->llmc_group) {
        // window w % G of the shard's (w / G)-th sample in llm.c's order
        uint64_t G = (uint64_t)dl->llmc_group;
        w = (uint64_t)dl->window_order[s][w / G] * G + w % G;
    } else if (dl->shuffle) {
        w = window_order_of(dl, s)[w];
    }

    // Inputs are tokens [start, start+T); targets are the same shifted by one,
    // so only the last target needs a read of its own.
    int T = dl->T;
    uint64_t start = w * (uint64_t)T;
    const Shard* sh = &dl->shards[s];
    shard_read(sh, start, (size_t)T, inputs, dl->vocab_size);
    memcpy(targets, inputs + 1, (size_t)(T - 1) * sizeof *targets);
    shard_read(sh, start + (uint64_t)T, 1, targets + T - 1, dl->vocab_size);
}

void dataloader_read(DataLoader* dl, uint64_t first, int count, int32_t* inputs, int32_t* targets) {
    size_t T = (size_t)dl->T;
    for (int k = 0; k < count; k++)
        dataloader_window(dl, first + (uint64_t)k, inputs + (size_t)k * T, targets + (size_t)k * T);
}
