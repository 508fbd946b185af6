// sim_atomic.h: CUDA's atomic functions on the CPU.
//
// They are real atomic read-modify-writes (GCC __atomic builtins), so they
// stay correct if blocks run on several worker threads. Under random
// scheduling each one may first yield to the other threads of the block, so
// the order in which threads reach their atomics varies from seed to seed.
// The _block and _system variants are the same operations.
#pragma once

#include <stdint.h>
#include <string.h>

namespace cuda_sim {

// Compare-and-swap loop on the bits of a T of 2, 4 or 8 bytes: new = op(old).
template <typename T, typename Op>
inline T atomic_update(T* address, Op op) {
    maybe_yield();
    using Bits = typename std::conditional<sizeof(T) == 2, uint16_t,
                 typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type>::type;
    static_assert(sizeof(T) == sizeof(Bits), "atomics on 2, 4 or 8 bytes");
    Bits* p = reinterpret_cast<Bits*>(address);
    Bits old_bits = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
        T old_value, new_value;
        memcpy((void*)&old_value, &old_bits, sizeof(T));
        new_value = op(old_value);
        Bits new_bits;
        memcpy(&new_bits, (const void*)&new_value, sizeof(T));
        if (__atomic_compare_exchange_n(p, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return old_value;
    }
}

}  // namespace cuda_sim

#define CUDA_SIM_ATOMIC_INT(T)                                                                            \
    inline T atomicAdd(T* a, T v) { ::cuda_sim::maybe_yield(); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    inline T atomicExch(T* a, T v) { ::cuda_sim::maybe_yield(); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    inline T atomicAnd(T* a, T v) { ::cuda_sim::maybe_yield(); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    inline T atomicOr(T* a, T v) { ::cuda_sim::maybe_yield(); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
    inline T atomicXor(T* a, T v) { ::cuda_sim::maybe_yield(); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    inline T atomicMin(T* a, T v) { return ::cuda_sim::atomic_update(a, [v](T o) { return v < o ? v : o; }); }    \
    inline T atomicMax(T* a, T v) { return ::cuda_sim::atomic_update(a, [v](T o) { return o < v ? v : o; }); }    \
    inline T atomicCAS(T* a, T compare, T v) {                                                             \
        ::cuda_sim::maybe_yield();                                                                         \
        __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        return compare;                                                                                    \
    }
CUDA_SIM_ATOMIC_INT(int)
CUDA_SIM_ATOMIC_INT(unsigned int)
CUDA_SIM_ATOMIC_INT(unsigned long long)
CUDA_SIM_ATOMIC_INT(long long)
#undef CUDA_SIM_ATOMIC_INT

inline int atomicSub(int* a, int v) { ::cuda_sim::maybe_yield(); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) { ::cuda_sim::maybe_yield(); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned short atomicCAS(unsigned short* a, unsigned short compare, unsigned short v) {
    ::cuda_sim::maybe_yield();
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;
}
inline unsigned atomicInc(unsigned* a, unsigned limit) {
    return ::cuda_sim::atomic_update(a, [limit](unsigned o) { return o >= limit ? 0u : o + 1u; });
}
inline unsigned atomicDec(unsigned* a, unsigned limit) {
    return ::cuda_sim::atomic_update(a, [limit](unsigned o) { return (o == 0 || o > limit) ? limit : o - 1u; });
}

inline float atomicAdd(float* a, float v) { return ::cuda_sim::atomic_update(a, [v](float o) { return o + v; }); }
inline double atomicAdd(double* a, double v) { return ::cuda_sim::atomic_update(a, [v](double o) { return o + v; }); }
inline float atomicExch(float* a, float v) { return ::cuda_sim::atomic_update(a, [v](float) { return v; }); }
inline __half atomicAdd(__half* a, __half v) {
    return ::cuda_sim::atomic_update(a, [v](__half o) { return __float2half_rn(__half2float(o) + __half2float(v)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
    return ::cuda_sim::atomic_update(a, [v](__nv_bfloat16 o) {
        return __float2bfloat16_rn(__bfloat162float(o) + __bfloat162float(v));
    });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
    return ::cuda_sim::atomic_update(a, [v](__nv_bfloat162 o) {
        __nv_bfloat162 r;
        r.x = __float2bfloat16_rn(__bfloat162float(o.x) + __bfloat162float(v.x));
        r.y = __float2bfloat16_rn(__bfloat162float(o.y) + __bfloat162float(v.y));
        return r;
    });
}
inline __half2 atomicAdd(__half2* a, __half2 v) {
    return ::cuda_sim::atomic_update(a, [v](__half2 o) {
        __half2 r;
        r.x = __float2half_rn(__half2float(o.x) + __half2float(v.x));
        r.y = __float2half_rn(__half2float(o.y) + __half2float(v.y));
        return r;
    });
}
// sm_90 vector atomics: each component is its own atomic add.
inline float2 atomicAdd(float2* a, float2 v) {
    float2 o;
    o.x = atomicAdd(&a->x, v.x);
    o.y = atomicAdd(&a->y, v.y);
    return o;
}
inline float4 atomicAdd(float4* a, float4 v) {
    float4 o;
    o.x = atomicAdd(&a->x, v.x);
    o.y = atomicAdd(&a->y, v.y);
    o.z = atomicAdd(&a->z, v.z);
    o.w = atomicAdd(&a->w, v.w);
    return o;
}

#define CUDA_SIM_SCOPED(name)                                                           \
    template <typename... A> inline auto name##_block(A... a) { return name(a...); }    \
    template <typename... A> inline auto name##_system(A... a) { return name(a...); }
CUDA_SIM_SCOPED(atomicAdd)
CUDA_SIM_SCOPED(atomicSub)
CUDA_SIM_SCOPED(atomicExch)
CUDA_SIM_SCOPED(atomicMin)
CUDA_SIM_SCOPED(atomicMax)
CUDA_SIM_SCOPED(atomicInc)
CUDA_SIM_SCOPED(atomicDec)
CUDA_SIM_SCOPED(atomicCAS)
CUDA_SIM_SCOPED(atomicAnd)
CUDA_SIM_SCOPED(atomicOr)
CUDA_SIM_SCOPED(atomicXor)
#undef CUDA_SIM_SCOPED
