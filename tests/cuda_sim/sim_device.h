// sim_device.h: the CUDA device language on the CPU: qualifiers, the built-in
// index variables, barriers, warp primitives and the math intrinsics.
// Included through cuda_sim.h; the scheduler behind it is scheduler.cpp.
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

// ---- qualifiers --------------------------------------------------------------------------------
// __global__, __device__, __host__, __constant__ and __managed__ are already
// empty in host mode (crt/host_defines.h): kernels are plain functions and
// device/constant variables plain globals.
//
// __shared__ variables are thread_local: every block runs on one worker OS
// thread, whose copy is shared by all thread contexts of that block and
// poisoned before each block starts. `extern __shared__ T name[]` (dynamic
// shared memory) becomes an extern thread_local array that the build defines
// (gen_dynamic_smem.sh) with room for the largest dynamic size a GPU allows.
#undef __shared__
#define __shared__ thread_local
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
#define __launch_bounds__(...)
#ifndef __cluster_dims__
#define __cluster_dims__(...)
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif

namespace cuda_sim {

// The indices of the simulated thread that runs on this OS thread right now.
struct ThreadView {
    uint3 tid;       // threadIdx
    uint3 bid;       // blockIdx
    dim3 bdim;       // blockDim
    dim3 gdim;       // gridDim
    unsigned lane;   // linear thread index % 32
    unsigned warp;   // linear thread index / 32
    unsigned linear; // x + y*bdim.x + z*bdim.x*bdim.y
};
extern thread_local ThreadView* tls_view;

// ---- scheduler entry points (scheduler.cpp) -----------------------------------------------------
enum BarrierKind { BARRIER_SYNC, BARRIER_COUNT, BARRIER_AND, BARRIER_OR };
int block_barrier(BarrierKind kind, int predicate);

// One lane's part of a warp collective. When every lane named in `mask` has
// arrived (lanes that have exited count as arrived with data == nullptr), the
// last one calls resolve(data, arrived_mask) once, with data[lane] pointing to
// each arrived lane's LaneData; then all of them continue.
typedef void (*WarpResolve)(void* const* data, unsigned arrived);
void warp_collective(const char* what, unsigned mask, void* lane_data, WarpResolve resolve);

// Under random scheduling, gives the other threads of the block a chance to run
// first (atomics, fences, __nanosleep); a no-op in order.
void maybe_yield();

[[noreturn]] void device_trap(const char* what);

// Shuffles move up to 8 bytes per lane.
enum ShflMode { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };
uint64_t warp_shfl(const char* what, ShflMode mode, unsigned mask, uint64_t value, unsigned bytes,
                   int arg, int width);
enum VoteMode { VOTE_BALLOT, VOTE_ANY, VOTE_ALL, VOTE_UNI };
unsigned warp_vote(const char* what, VoteMode mode, unsigned mask, int predicate);
enum ReduceMode { REDUCE_ADD, REDUCE_MIN, REDUCE_MAX, REDUCE_AND, REDUCE_OR, REDUCE_XOR };
unsigned warp_reduce(const char* what, ReduceMode mode, bool is_signed, unsigned mask, unsigned value);
unsigned warp_match(const char* what, bool all, unsigned mask, uint64_t value, int* pred);
unsigned active_mask();

template <typename T>
inline uint64_t to_bits(const T& v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles move at most 8 bytes of a trivially copyable type");
    uint64_t b = 0;
    memcpy(&b, (const void*)&v, sizeof(T));
    return b;
}
template <typename T>
inline T from_bits(uint64_t b, T like) {
    memcpy((void*)&like, &b, sizeof(T));
    return like;
}

}  // namespace cuda_sim

// ---- built-in variables ----------------------------------------------------------------------------
// device_launch_parameters.h declares them as extern consts; these macros take
// their place. warpSize stays that declared constant (defined as 32 in
// scheduler.cpp) so that host code may still name cudaDeviceProp::warpSize.
#define threadIdx (::cuda_sim::tls_view->tid)
#define blockIdx (::cuda_sim::tls_view->bid)
#define blockDim (::cuda_sim::tls_view->bdim)
#define gridDim (::cuda_sim::tls_view->gdim)

// ---- barriers and fences -------------------------------------------------------------------------------
inline void __syncthreads() { ::cuda_sim::block_barrier(::cuda_sim::BARRIER_SYNC, 0); }
inline int __syncthreads_count(int p) { return ::cuda_sim::block_barrier(::cuda_sim::BARRIER_COUNT, p); }
inline int __syncthreads_and(int p) { return ::cuda_sim::block_barrier(::cuda_sim::BARRIER_AND, p); }
inline int __syncthreads_or(int p) { return ::cuda_sim::block_barrier(::cuda_sim::BARRIER_OR, p); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); ::cuda_sim::maybe_yield(); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); ::cuda_sim::maybe_yield(); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); ::cuda_sim::maybe_yield(); }
inline void __nanosleep(unsigned) { ::cuda_sim::maybe_yield(); }
[[noreturn]] inline void __trap() { ::cuda_sim::device_trap("__trap()"); }
inline void __brkpt() { ::cuda_sim::device_trap("__brkpt()"); }
long long clock64();
inline void __prof_trigger(int) {}

// ---- warp primitives --------------------------------------------------------------------------------------
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    ::cuda_sim::warp_collective("__syncwarp", mask, nullptr, nullptr);
}
inline unsigned __activemask() { return ::cuda_sim::active_mask(); }

template <typename T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
    return ::cuda_sim::from_bits(::cuda_sim::warp_shfl("__shfl_sync", ::cuda_sim::SHFL_IDX, mask,
                                                       ::cuda_sim::to_bits(var), sizeof(T), src_lane, width),
                                 var);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return ::cuda_sim::from_bits(::cuda_sim::warp_shfl("__shfl_up_sync", ::cuda_sim::SHFL_UP, mask,
                                                       ::cuda_sim::to_bits(var), sizeof(T), (int)delta, width),
                                 var);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return ::cuda_sim::from_bits(::cuda_sim::warp_shfl("__shfl_down_sync", ::cuda_sim::SHFL_DOWN, mask,
                                                       ::cuda_sim::to_bits(var), sizeof(T), (int)delta, width),
                                 var);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    return ::cuda_sim::from_bits(::cuda_sim::warp_shfl("__shfl_xor_sync", ::cuda_sim::SHFL_XOR, mask,
                                                       ::cuda_sim::to_bits(var), sizeof(T), lane_mask, width),
                                 var);
}
inline unsigned __ballot_sync(unsigned mask, int p) {
    return ::cuda_sim::warp_vote("__ballot_sync", ::cuda_sim::VOTE_BALLOT, mask, p);
}
inline int __any_sync(unsigned mask, int p) { return (int)::cuda_sim::warp_vote("__any_sync", ::cuda_sim::VOTE_ANY, mask, p); }
inline int __all_sync(unsigned mask, int p) { return (int)::cuda_sim::warp_vote("__all_sync", ::cuda_sim::VOTE_ALL, mask, p); }
inline int __uni_sync(unsigned mask, int p) { return (int)::cuda_sim::warp_vote("__uni_sync", ::cuda_sim::VOTE_UNI, mask, p); }
template <typename T>
inline unsigned __match_any_sync(unsigned mask, T value) {
    return ::cuda_sim::warp_match("__match_any_sync", false, mask, ::cuda_sim::to_bits(value), nullptr);
}
template <typename T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
    return ::cuda_sim::warp_match("__match_all_sync", true, mask, ::cuda_sim::to_bits(value), pred);
}
#define CUDA_SIM_WARP_REDUCE(name, mode, type, is_signed)                                                    \
    inline type name(unsigned mask, type value) {                                                           \
        return (type)::cuda_sim::warp_reduce(#name, ::cuda_sim::mode, is_signed, mask, (unsigned)value);   \
    }
CUDA_SIM_WARP_REDUCE(__reduce_add_sync, REDUCE_ADD, unsigned, false)
CUDA_SIM_WARP_REDUCE(__reduce_add_sync, REDUCE_ADD, int, true)
CUDA_SIM_WARP_REDUCE(__reduce_min_sync, REDUCE_MIN, unsigned, false)
CUDA_SIM_WARP_REDUCE(__reduce_min_sync, REDUCE_MIN, int, true)
CUDA_SIM_WARP_REDUCE(__reduce_max_sync, REDUCE_MAX, unsigned, false)
CUDA_SIM_WARP_REDUCE(__reduce_max_sync, REDUCE_MAX, int, true)
CUDA_SIM_WARP_REDUCE(__reduce_and_sync, REDUCE_AND, unsigned, false)
CUDA_SIM_WARP_REDUCE(__reduce_or_sync, REDUCE_OR, unsigned, false)
CUDA_SIM_WARP_REDUCE(__reduce_xor_sync, REDUCE_XOR, unsigned, false)
#undef CUDA_SIM_WARP_REDUCE

// ---- memory access intrinsics (cache hints have no meaning here) -------------------------------------------------
template <typename T> inline T __ldg(const T* p) { return *p; }
template <typename T> inline T __ldca(const T* p) { return *p; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
template <typename T> inline T __ldcs(const T* p) { return *p; }
template <typename T> inline T __ldlu(const T* p) { return *p; }
template <typename T> inline T __ldcv(const T* p) { return *p; }
template <typename T> inline void __stwb(T* p, T v) { *p = v; }
template <typename T> inline void __stcg(T* p, T v) { *p = v; }
template <typename T> inline void __stcs(T* p, T v) { *p = v; }
template <typename T> inline void __stwt(T* p, T v) { *p = v; }

// ---- math intrinsics ---------------------------------------------------------------------------------------------------
// The fast-math forms compute the accurate result: the harness checks logic,
// not the last bits of an approximation. __expf, __logf, __sinf, __cosf,
// __powf, __exp10f, __tanf, __log2f and __log10f are declared by glibc's
// <math.h> (and defined in math.cpp), so only the others are here.
namespace cuda_sim {
// A value the compiler must materialise: the explicitly rounded intrinsics
// below are never contracted into fused multiply-adds, as on a GPU (where
// plain a*b+c may be fused, like here: kernels compile with FMA contraction).
template <typename T>
inline T opaque(T x) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(x));
#elif defined(__aarch64__)
    __asm__("" : "+w"(x));
#else
    volatile T v = x;
    x = v;
#endif
    return x;
}
}  // namespace cuda_sim
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline double rsqrt(double a) { return 1.0 / sqrt(a); }
inline float __saturatef(float a) { return a > 0.0f ? (a < 1.0f ? a : 1.0f) : 0.0f; }  // NaN -> 0
inline float __fadd_rn(float a, float b) { return ::cuda_sim::opaque(a) + ::cuda_sim::opaque(b); }
inline float __fsub_rn(float a, float b) { return ::cuda_sim::opaque(a) - ::cuda_sim::opaque(b); }
inline float __fmul_rn(float a, float b) { return ::cuda_sim::opaque(a * b); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rz(float a, float b) { return ::cuda_sim::opaque(a) + ::cuda_sim::opaque(b); }
inline float __fmul_rz(float a, float b) { return ::cuda_sim::opaque(a * b); }
inline double __dadd_rn(double a, double b) { return ::cuda_sim::opaque(a) + ::cuda_sim::opaque(b); }
inline double __dmul_rn(double a, double b) { return ::cuda_sim::opaque(a * b); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline int __float2int_rn(float a) { return (int)nearbyintf(a); }
inline int __float2int_rz(float a) { return (int)a; }
inline int __float2int_rd(float a) { return (int)floorf(a); }
inline int __float2int_ru(float a) { return (int)ceilf(a); }
inline unsigned __float2uint_rn(float a) { return (unsigned)nearbyintf(a); }
inline unsigned __float2uint_rz(float a) { return (unsigned)a; }
inline long long __float2ll_rn(float a) { return (long long)nearbyintf(a); }
inline float __int2float_rn(int a) { return (float)a; }
inline float __uint2float_rn(unsigned a) { return (float)a; }
inline float __double2float_rn(double a) { return (float)a; }
inline int __float_as_int(float a) { int r; memcpy(&r, &a, 4); return r; }
inline unsigned __float_as_uint(float a) { unsigned r; memcpy(&r, &a, 4); return r; }
inline float __int_as_float(int a) { float r; memcpy(&r, &a, 4); return r; }
inline float __uint_as_float(unsigned a) { float r; memcpy(&r, &a, 4); return r; }
inline long long __double_as_longlong(double a) { long long r; memcpy(&r, &a, 8); return r; }
inline double __longlong_as_double(long long a) { double r; memcpy(&r, &a, 8); return r; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (((s >> (4 * i)) & 7) * 8)) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}
inline int __mul24(int a, int b) { return (int)(((long long)(a << 8 >> 8)) * (b << 8 >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return (unsigned)(a > b ? a - b : b - a) + c; }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }

// The min/max overloads device code calls unqualified.
#define CUDA_SIM_MINMAX(T)                                   \
    inline T min(T a, T b) { return b < a ? b : a; }         \
    inline T max(T a, T b) { return a < b ? b : a; }
CUDA_SIM_MINMAX(int)
CUDA_SIM_MINMAX(unsigned int)
CUDA_SIM_MINMAX(long)
CUDA_SIM_MINMAX(unsigned long)
CUDA_SIM_MINMAX(long long)
CUDA_SIM_MINMAX(unsigned long long)
#undef CUDA_SIM_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline float min(float a, double b) { return fminf(a, (float)b); }
inline float max(float a, double b) { return fmaxf(a, (float)b); }
inline float min(double a, float b) { return fminf((float)a, b); }
inline float max(double a, float b) { return fmaxf((float)a, b); }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline unsigned umin(unsigned a, unsigned b) { return min(a, b); }
inline unsigned umax(unsigned a, unsigned b) { return max(a, b); }
