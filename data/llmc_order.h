// llmc_order.h: llm.c's random numbers and shuffle, so that train_gpt can
// read the training data in the order llm.c's train_gpt2 reads it
// (--llmc-compat; dataloader_use_llmc_order in data/dataloader.h).
//
// llm.c draws from MT19937 (the generator torch.manual_seed seeds, and
// numpy's RandomState: the same 32-bit outputs for the same seed) and
// shuffles with Fisher-Yates from the top: for i = n-1 down to 1, swap
// element i with element randint32() % (i + 1). Its data loader seeds one
// generator with 42 + rank and draws, per epoch, one permutation of the shard
// order (applied on top of the previous epoch's order, not to a fresh
// identity) and then, as each shard is opened, one permutation of that
// shard's samples (from the identity).
#pragma once

#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    uint32_t state[624];
    int next;
} Mt19937;

// Seeds as torch.manual_seed(seed) and llm.c's manual_seed do.
void mt19937_seed(Mt19937* mt, uint32_t seed);
// The next 32-bit output.
uint32_t mt19937_u32(Mt19937* mt);
// llm.c's random_permutation on n ints / n uint32s.
void llmc_shuffle_int(int* data, int n, Mt19937* mt);
void llmc_shuffle_u32(uint32_t* data, int n, Mt19937* mt);

EXTERN_C_END
