// rng.h: counter-based random numbers, so that every random value is a pure
// function of (seed, stream, index). Nothing depends on how many threads or
// ranks drew numbers before, which keeps initialisation, data shuffling and
// sampling identical across thread counts, world sizes and resumes.
#pragma once

#include <math.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// SplitMix64's finaliser: a bijective 64-bit mix with full avalanche.
static inline uint64_t rng_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// A key naming one independent stream: rng_key(seed, a, b) for, e.g.,
// (seed, tensor, layer) or (seed, epoch, shard).
static inline uint64_t rng_key(uint64_t seed, uint64_t a, uint64_t b) {
    return rng_mix64(rng_mix64(rng_mix64(seed) ^ a) ^ (b * 0xD6E8FEB86659FD93ull));
}

// The i-th 64-bit value of a stream.
static inline uint64_t rng_u64(uint64_t key, uint64_t i) { return rng_mix64(key ^ rng_mix64(i)); }

// Uniform in [0, 1) with 24 random bits (exactly representable as float).
static inline float rng_uniform(uint64_t key, uint64_t i) {
    return (float)(rng_u64(key, i) >> 40) * (1.0f / 16777216.0f);
}

// Uniform integer in [0, n) (n > 0), by 128-bit multiply (bias < n / 2^64).
static inline uint64_t rng_below(uint64_t key, uint64_t i, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_u64(key, i) * n) >> 64);
}

// Standard normal sample number i of a stream (Box-Muller on two draws, in double).
static inline float rng_normal(uint64_t key, uint64_t i) {
    uint64_t a = rng_u64(key, 2 * i), b = rng_u64(key, 2 * i + 1);
    double u1 = ((double)(a >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);          // [0, 1)
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

EXTERN_C_END
