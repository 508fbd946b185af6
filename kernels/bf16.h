// bf16.h: host-side bfloat16 conversions (bfloat16 is the upper half of an
// IEEE float32). Round-to-nearest-even: adding 0x7FFF plus the lowest kept
// bit rounds ties to even and carries into the exponent where needed (the
// largest finite floats round to infinity, as they must); NaN is kept a
// quiet NaN instead of letting the carry turn it into infinity.
#pragma once

#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// x rounded to BF16 stochastically with 16 random bits r (the low 16 of r):
// adding r below the kept bits and truncating rounds away from the lower
// neighbour with probability (dropped bits) / 65536, so the mean over draws
// is x. Infinity and NaN round to nearest. The host twin of the CUDA AdamW's
// rounding of BF16 parameters (kernels/cuda/adamw.cu).
static inline uint16_t f32_to_bf16_stochastic(float f, uint32_t r) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f32_to_bf16(f);
    return (uint16_t)((u + (r & 0xffffu)) >> 16);
}
