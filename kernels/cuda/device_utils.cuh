// device_utils.cuh: the small device-side vocabulary every kernel file of the
// CUDA backend shares: the two storage types (float and bf16) with their
// conversions, 16-byte packed loads and stores, the warp sum,
// the counter-based RNG of llm/util/rng.h on the device, and alignment tests.
//
// Only what the CPU execution harness (tests/cuda_sim/, CUDA_SIM) provides is
// used here: plain C-style device code, small templates over the storage
// type, __shfl_xor_sync.
#pragma once

#include <stdint.h>

#include "kernels/cuda/common.cuh"
#include "kernels/fp8_format.h"

// `#pragma unroll` and __launch_bounds__ are hints to nvcc; the harness
// compiles with g++, which knows neither.
#ifdef CUDA_SIM
#define UNROLL
#define KERNEL_BOUNDS(threads, min_blocks)
#else
#define UNROLL _Pragma("unroll")
#define KERNEL_BOUNDS(threads, min_blocks) __launch_bounds__(threads, min_blocks)
#endif

typedef __nv_bfloat16 bf16;

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

__device__ inline int dmin(int a, int b) { return a < b ? a : b; }

// ---- storage types ------------------------------------------------------------------------------
// Kernels are templated on the element type T of their activation buffers
// (float in FP32 mode, bf16 in BF16 mode) and always compute in float.
__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

// V consecutive elements moved as one aligned access: with V * sizeof(T) = 16
// this is one 128-bit load or store (LDG.128 / STG.128), the widest a thread
// can issue, which memory-bound kernels need to reach full bandwidth. V = 1 is
// the scalar fallback for pointers or row lengths that are not 16-byte aligned.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
    T v[V];
};

// Elements of T per 16-byte access.
template <typename T>
struct Vec16 {
    static const int N = 16 / sizeof(T);
};

template <typename T, int V>
__device__ inline void load_pack(float out[V], const T* p) {
    Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
    UNROLL for (int i = 0; i < V; i++) out[i] = to_float(pk.v[i]);
}

template <typename T, int V>
__device__ inline void store_pack(T* p, const float in[V]) {
    Pack<T, V> pk;
    UNROLL for (int i = 0; i < V; i++) pk.v[i] = from_float<T>(in[i]);
    *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

// True when every pointer is aligned to `bytes`.
static inline int aligned_to(const void* p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

// ---- reductions -----------------------------------------------------------------------------------
// Butterfly sum: partners add the same two values, so every lane ends
// with bit-identical results and the order is fixed (deterministic).
__device__ inline float warp_sum(float v) {
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// ---- FP8 amax (the `float* amax` arguments of kernels/ops.h) ----------------------------------------------
// Each thread keeps the largest fp8_abs_bits of the values it stored; the
// warp takes the max over its lanes and lane 0 folds it into *amax with an
// integer atomic max (the bits of non-negative floats order like the floats,
// a NaN above all). A max needs no order: the result is deterministic. Every
// lane of the warp must call it.
__device__ inline void amax_commit_warp(float* amax, uint32_t bits) {
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
        uint32_t other = __shfl_xor_sync(FULL_MASK, bits, o);
        bits = other > bits ? other : bits;
    }
    if (threadIdx.x % WARP_SIZE == 0 && bits) atomicMax((unsigned int*)amax, bits);
}

// |v| as stored in T (rounded to BF16 first when T is bf16), as fp8_abs_bits.
template <typename T>
__device__ inline uint32_t stored_abs_bits(float v) {
    return fp8_abs_bits(to_float(from_float<T>(v)));
}

// A thread's running maximum before amax_commit_warp: top raised to bits.
__device__ inline uint32_t amax_keep(uint32_t top, uint32_t bits) { return bits > top ? bits : top; }

// top raised to the stored_abs_bits of the V values of one pack the thread stored.
template <typename T, int V>
__device__ inline uint32_t amax_keep_pack(uint32_t top, const float v[V]) {
    UNROLL for (int i = 0; i < V; i++) top = amax_keep(top, stored_abs_bits<T>(v[i]));
    return top;
}

// ---- counter-based random numbers (the device twin of llm/util/rng.h) --------------------------------------
__device__ inline uint64_t rng_mix64_device(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// rng_u64(key, i) of llm/util/rng.h: value i of stream `key`.
__device__ inline uint64_t rng_u64_device(uint64_t key, uint64_t i) {
    return rng_mix64_device(key ^ rng_mix64_device(i));
}
