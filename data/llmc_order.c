// llmc_order.c: MT19937 and llm.c's Fisher-Yates (see llmc_order.h).
#include "data/llmc_order.h"

#define MT_N 624
#define MT_M 397

void mt19937_seed(Mt19937* mt, uint32_t seed) {
    mt->state[0] = seed;
    for (uint32_t j = 1; j < MT_N; j++)
        mt->state[j] = 1812433253u * (mt->state[j - 1] ^ (mt->state[j - 1] >> 30)) + j;
    mt->next = MT_N;  // the first draw regenerates the whole state
}

// The twist: the next 624 words of state from the current ones.
static void regenerate(Mt19937* mt) {
    for (int j = 0; j < MT_N; j++) {
        uint32_t y = (mt->state[j] & 0x80000000u) | (mt->state[(j + 1) % MT_N] & 0x7fffffffu);
        mt->state[j] = mt->state[(j + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    mt->next = 0;
}

uint32_t mt19937_u32(Mt19937* mt) {
    if (mt->next >= MT_N) regenerate(mt);
    uint32_t y = mt->state[mt->next++];
    // tempering
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

void llmc_shuffle_int(int* data, int n, Mt19937* mt) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mt19937_u32(mt) % (uint32_t)(i + 1));
        int t = data[i];
        data[i] = data[j];
        data[j] = t;
    }
}

void llmc_shuffle_u32(uint32_t* data, int n, Mt19937* mt) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mt19937_u32(mt) % (uint32_t)(i + 1));
        uint32_t t = data[i];
        data[i] = data[j];
        data[j] = t;
    }
}
