// adamw.cu: the AdamW update on the device, operation for operation the CPU
// reference's (kernels/cpu/adamw.c, PyTorch's torch.optim.AdamW order):
//   p = p * (1 - lr*wd)
//   m = m + (1-b1) * (g - m)           (one fma)
//   v = v*b2 + ((1-b2)*g)*g
//   p = p + (-(lr/bc1) * m) / (sqrt(v) / sqrt(bc2) + eps)
// with the scalar coefficients formed in double on the host and rounded once.
// The _rn intrinsics keep nvcc from contracting products and sums into fmas
// the CPU does not use, so the FP32 path gives the CPU's bits.
//
// With 16-bit parameters the FP32 master weights are updated and the BF16
// parameters written from them with stochastic rounding: element i adds 16
// random bits from rng_u64(seed, index_base + i) (llm/util/rng.h's generator)
// below the BF16 mantissa and truncates, so it rounds up with probability
// equal to its distance from the lower neighbour. The bits depend only on
// (seed, element index: AdamWParams.index_base + i), not on how the range was
// split into calls or blocks.
//
// BF16 moments (AdamWParams.moment_dtype, kernels templated on M): m and v are
// widened to FP32, updated as above, and stored rounded stochastically with
// bits 0-15 (m) and 16-31 (v) of the same draw, as the CPU reference does, so
// the emulator can compare the two bit for bit.
#include <math.h>

#include "kernels/cuda/cuda_backend.cuh"

typedef struct {
    float decay, m_weight, v_keep, v_weight, neg_step_size, bc2_sqrt, eps, grad_scale;
    uint64_t seed, index_base;
    float* amax;  // NULL, or the FP8 amax of the parameters written (ops.h)
} AdamWCoefficients;

static AdamWCoefficients adamw_coefficients(const AdamWParams* p) {
    double lr = p->lr, beta1 = p->beta1, beta2 = p->beta2;
    double bias_correction1 = 1.0 - pow(beta1, p->step);
    double bias_correction2 = 1.0 - pow(beta2, p->step);
    AdamWCoefficients k;
    k.decay = p->weight_decay != 0.0f ? (float)(1.0 - lr * (double)p->weight_decay) : 1.0f;
    k.m_weight = (float)(1.0 - beta1);
    k.v_keep = p->beta2;
    k.v_weight = (float)(1.0 - beta2);
    k.neg_step_size = (float)(-(lr / bias_correction1));
    k.bc2_sqrt = (float)sqrt(bias_correction2);
    k.eps = p->eps;
    k.grad_scale = p->grad_scale;
    k.seed = p->seed;
    k.index_base = p->index_base;
    k.amax = p->amax;
    return k;
}

// x rounded to BF16 stochastically with 16 random bits r (the float bit casts
// are kernels/fp8_format.h's, callable on both sides).
__device__ inline bf16 bf16_stochastic(float x, uint32_t r) {
    uint32_t u = fp8_f32_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x);  // inf and NaN stay
    u = (u + (r & 0xffffu)) & 0xffff0000u;
    return __float2bfloat16_rn(fp8_bits_f32(u));  // exact: the low half is zero
}

// Moments after the update, rounded for storage as M: FP32 as they are; BF16
// stochastically with bits 0-15 (m) and 16-31 (v) of the element's draw h
// (exactly representable afterwards, so from_float<bf16> stores them as is).
template <typename M>
__device__ inline void round_moments(float* mi, float* vi, uint64_t h) {
    if (sizeof(M) == 2) {
        *mi = __bfloat162float(bf16_stochastic(*mi, (uint32_t)h));
        *vi = __bfloat162float(bf16_stochastic(*vi, (uint32_t)(h >> 16)));
    }
}

// One element: updates m, v and the FP32 weight w in place; returns the new w.
__device__ inline float adamw_element(float* w, float g_raw, float* m, float* v, const AdamWCoefficients& k) {
    float g = __fmul_rn(g_raw, k.grad_scale);
    float mi = __fmaf_rn(k.m_weight, __fsub_rn(g, *m), *m);
    float vi = __fadd_rn(__fmul_rn(*v, k.v_keep), __fmul_rn(__fmul_rn(k.v_weight, g), g));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    float wi = __fadd_rn(__fmul_rn(*w, k.decay), __fdiv_rn(__fmul_rn(k.neg_step_size, mi), denom));
    *m = mi;
    *v = vi;
    *w = wi;
    return wi;
}

// FP32 parameters, updated in place; moments of type M.
template <typename M>
__global__ void adamw_f32_kernel(float* params, const float* grads, M* m, M* v, size_t n, AdamWCoefficients k) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t top = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float w = params[i], mi = to_float(m[i]), vi = to_float(v[i]);
        adamw_element(&w, grads[i], &mi, &vi, k);
        if (sizeof(M) == 2) round_moments<M>(&mi, &vi, rng_u64_device(k.seed, k.index_base + i));
        params[i] = w;
        m[i] = from_float<M>(mi);
        v[i] = from_float<M>(vi);
        top = amax_keep(top, fp8_abs_bits(w));
    }
    if (k.amax) amax_commit_warp(k.amax, top);
}

// BF16 parameters written from the FP32 master weights; moments of type M.
template <typename M>
__global__ void adamw_bf16_kernel(bf16* params, float* master, const bf16* grads, M* m, M* v, size_t n,
                                  AdamWCoefficients k) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t top = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float w = master[i], mi = to_float(m[i]), vi = to_float(v[i]);
        adamw_element(&w, __bfloat162float(grads[i]), &mi, &vi, k);
        uint64_t h = rng_u64_device(k.seed, k.index_base + i);
        round_moments<M>(&mi, &vi, h);
        master[i] = w;
        m[i] = from_float<M>(mi);
        v[i] = from_float<M>(vi);
        uint32_t r = (uint32_t)(h >> 48);
        bf16 p = bf16_stochastic(w, r);
        params[i] = p;
        top = amax_keep(top, fp8_abs_bits(__bfloat162float(p)));  // the rounded value the FP8 cast will read
    }
    if (k.amax) amax_commit_warp(k.amax, top);
}

template <typename M>
static void adamw_launch(Backend* be, void* params, float* master, const void* grads, M* m, M* v, size_t n,
                         const AdamWCoefficients& k) {
    unsigned grid = grid_for(n, 256, 4);
    if (be->dtype == DTYPE_BF16) {
        if (!master) fatal("adamw: bf16 parameters need FP32 master weights");
        LAUNCH(adamw_bf16_kernel<M>, grid, 256, 0, cuda_stream(be), (bf16*)params, master, (const bf16*)grads, m, v,
               n, k);
    } else {
        if (master) {
            // FP32 parameters with a separate master copy: update it, then copy.
            LAUNCH(adamw_f32_kernel<M>, grid, 256, 0, cuda_stream(be), master, (const float*)grads, m, v, n, k);
            CUDA_CHECK_LAUNCH();
            CUDA_CHECK(cudaMemcpyAsync(params, master, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream(be)));
            return;
        }
        LAUNCH(adamw_f32_kernel<M>, grid, 256, 0, cuda_stream(be), (float*)params, (const float*)grads, m, v, n, k);
    }
    CUDA_CHECK_LAUNCH();
}

static void check_moment_dtype(const AdamWParams* p) {
    if (p->moment_dtype != DTYPE_F32 && p->moment_dtype != DTYPE_BF16)
        fatal("adamw: moments must be fp32 or bf16, got %s", dtype_name(p->moment_dtype));
}

void cuda_adamw(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                size_t n, const AdamWParams* p) {
    if (p->step < 1) fatal("adamw: step must be >= 1 (it is 1-based), got %d", p->step);
    if (p->grads_f32 && be->dtype == DTYPE_BF16) fatal("internal: adamw reads FP32 gradients through adamw_tensors only");
    check_moment_dtype(p);
    if (n == 0) return;
    AdamWCoefficients k = adamw_coefficients(p);
    if (p->moment_dtype == DTYPE_BF16) adamw_launch<bf16>(be, params, master, grads, (bf16*)m, (bf16*)v, n, k);
    else adamw_launch<float>(be, params, master, grads, (float*)m, (float*)v, n, k);
}

// ---- all tensors in one launch ---------------------------------------------------------------------------------
// The tensor table travels as a kernel parameter (no device memory, nothing to
// upload): up to ADAMW_TABLE tensors per launch, 8 elements per thread step
// ("unit"): for a tensor whose offsets are 8-element aligned (and buffers
// 16-byte aligned) a unit moves with 128-bit loads and stores (two float4
// per FP32 array, one 16-byte pack of 8 bf16); others, and a tensor's last
// partial unit, go element by element. Element math, stochastic rounding
// keys and amaxes are those of adamw_*_kernel, so the results are the same bits.
#define ADAMW_TABLE 192
#define ADAMW_UNIT 8

typedef struct {
    size_t param, grad, state, count;
    uint64_t index_base;
    float decay;   // 1 - lr * weight_decay, or 1
    int vector;    // offsets allow the 128-bit path
    float* amax;
} AdamWSlot;

typedef struct {
    int n;
    size_t unit_end[ADAMW_TABLE];  // units of tensors 0..i (prefix sums)
    AdamWSlot t[ADAMW_TABLE];
} AdamWTable;

// One unit of 8 values of type T as FP32, with 128-bit loads and stores (8 bf16, or 2 x 4 floats).
template <typename T>
__device__ inline void load_unit(float out[ADAMW_UNIT], const T* p) {
    if (sizeof(T) == 2) {
        load_pack<T, 8>(out, p);
    } else {
        load_pack<T, 4>(out, p);
        load_pack<T, 4>(out + 4, p + 4);
    }
}
template <typename T>
__device__ inline void store_unit(T* p, const float in[ADAMW_UNIT]) {
    if (sizeof(T) == 2) {
        store_pack<T, 8>(p, in);
    } else {
        store_pack<T, 4>(p, in);
        store_pack<T, 4>(p + 4, in + 4);
    }
}

// P: the parameters' type; G: the gradients' (P, or FP32 with --grad-dtype fp32); M: the moments'.
template <typename P, typename G, typename M>
__device__ inline void adamw_unit(P* params, float* master, const G* grads, M* m, M* v, const AdamWSlot& s,
                                  size_t first, AdamWCoefficients k, uint32_t* top) {
    const bool bf = sizeof(P) == 2, bf_moments = sizeof(M) == 2;
    size_t n = s.count - first < ADAMW_UNIT ? s.count - first : ADAMW_UNIT;
    size_t ps = s.param + first, gs = s.grad + first, ss = s.state + first;
    // The FP32 weights: the master copy (at the state's index) or FP32 params themselves.
    const float* w_src = master ? master + ss : (const float*)params + ps;
    k.decay = s.decay;
    float w[ADAMW_UNIT], g[ADAMW_UNIT], mi[ADAMW_UNIT], vi[ADAMW_UNIT];
    const bool vec = s.vector && n == ADAMW_UNIT;
    if (vec) {
        load_unit<float>(w, w_src);
        load_unit<M>(mi, m + ss);
        load_unit<M>(vi, v + ss);
        load_unit<G>(g, grads + gs);
    } else {
        for (size_t e = 0; e < n; e++) {
            w[e] = w_src[e];
            mi[e] = to_float(m[ss + e]);
            vi[e] = to_float(v[ss + e]);
            g[e] = to_float(grads[gs + e]);
        }
    }
    float out[ADAMW_UNIT];
    UNROLL for (int e = 0; e < ADAMW_UNIT; e++) {
        if ((size_t)e >= n) break;
        adamw_element(&w[e], g[e], &mi[e], &vi[e], k);
        uint64_t h = bf || bf_moments ? rng_u64_device(k.seed, s.index_base + first + e) : 0;
        round_moments<M>(&mi[e], &vi[e], h);
        if (bf) {
            uint32_t r = (uint32_t)(h >> 48);
            out[e] = __bfloat162float(bf16_stochastic(w[e], r));  // exact in bf16: stored as is below
        } else {
            out[e] = w[e];
        }
        *top = amax_keep(*top, fp8_abs_bits(out[e]));
    }
    if (vec) {
        store_unit<M>(m + ss, mi);
        store_unit<M>(v + ss, vi);
        if (master) store_unit<float>(master + ss, w);
        store_unit<P>(params + ps, out);
    } else {
        for (size_t e = 0; e < n; e++) {
            m[ss + e] = from_float<M>(mi[e]);
            v[ss + e] = from_float<M>(vi[e]);
            if (master) master[ss + e] = w[e];
            params[ps + e] = from_float<P>(out[e]);
        }
    }
}

// A grid-stride loop over the units of all tensors of the table; a thread
// commits its amax whenever it moves to another tensor, and at the end.
template <typename P, typename G, typename M>
__global__ void adamw_tensors_kernel(P* params, float* master, const G* grads, M* m, M* v, AdamWCoefficients k,
                                     const AdamWTable tab) {
    size_t units = tab.unit_end[tab.n - 1], stride = (size_t)gridDim.x * blockDim.x;
    int cur = -1;
    uint32_t top = 0;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += stride) {
        int lo = 0, hi = tab.n - 1;  // the first tensor whose units end past u
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (tab.unit_end[mid] > u) hi = mid;
            else lo = mid + 1;
        }
        if (lo != cur) {
            if (cur >= 0 && tab.t[cur].amax && top) atomicMax((unsigned int*)tab.t[cur].amax, top);
            cur = lo;
            top = 0;
        }
        size_t first = (u - (lo ? tab.unit_end[lo - 1] : 0)) * ADAMW_UNIT;
        adamw_unit<P, G, M>(params, master, grads, m, v, tab.t[lo], first, k, &top);
    }
    if (cur >= 0 && tab.t[cur].amax && top) atomicMax((unsigned int*)tab.t[cur].amax, top);
}

// One launch of adamw_tensors_kernel<P, G, M> (a function pointer, as LAUNCH's
// macro argument cannot hold the template's commas).
template <typename P, typename G, typename M>
static void launch_tensors(Backend* be, unsigned grid, void* params, float* master, const void* grads, void* m,
                           void* v, const AdamWCoefficients& k, const AdamWTable& tab) {
    void (*adamw_tensors)(P*, float*, const G*, M*, M*, AdamWCoefficients, const AdamWTable) =
        adamw_tensors_kernel<P, G, M>;
    LAUNCH(adamw_tensors, grid, 256, 0, cuda_stream(be), (P*)params, master, (const G*)grads, (M*)m, (M*)v, k, tab);
}

template <typename M>
static void launch_tensors_for(Backend* be, bool bf, bool grads_f32, unsigned grid, void* params, float* master,
                               const void* grads, void* m, void* v, const AdamWCoefficients& k, const AdamWTable& tab) {
    if (bf && grads_f32) launch_tensors<bf16, float, M>(be, grid, params, master, grads, m, v, k, tab);
    else if (bf) launch_tensors<bf16, bf16, M>(be, grid, params, master, grads, m, v, k, tab);
    else launch_tensors<float, float, M>(be, grid, params, master, grads, m, v, k, tab);
}

void cuda_adamw_tensors(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                        const AdamWTensor* t, int n, const AdamWParams* p) {
    if (p->step < 1) fatal("adamw: step must be >= 1 (it is 1-based), got %d", p->step);
    check_moment_dtype(p);
    const bool bf_moments = p->moment_dtype == DTYPE_BF16;
    const bool bf = be->dtype == DTYPE_BF16;
    if (bf && !master) fatal("adamw: bf16 parameters need FP32 master weights");
    AdamWCoefficients k = adamw_coefficients(p);
    int aligned = aligned_to(params, 16) && aligned_to(grads, 16) && aligned_to(m, 16) && aligned_to(v, 16) &&
                  (!master || aligned_to(master, 16));
    AdamWTable tab;  // the kernel's parameter: ~12 KB (CUDA allows 32 KB from Volta on)
    for (int i0 = 0; i0 < n; i0 += ADAMW_TABLE) {
        tab.n = 0;
        size_t units = 0;
        for (int i = i0; i < n && i < i0 + ADAMW_TABLE; i++) {
            if (t[i].count == 0) continue;
            AdamWSlot* s = &tab.t[tab.n];
            s->param = t[i].param;
            s->grad = t[i].grad;
            s->state = t[i].state;
            s->count = t[i].count;
            s->index_base = t[i].index_base;
            AdamWParams q = *p;
            q.weight_decay = t[i].weight_decay;
            s->decay = adamw_coefficients(&q).decay;
            s->vector = aligned && s->param % ADAMW_UNIT == 0 && s->grad % ADAMW_UNIT == 0 &&
                        s->state % ADAMW_UNIT == 0;
            s->amax = t[i].amax;
            units += ceil_div(s->count, (size_t)ADAMW_UNIT);
            tab.unit_end[tab.n++] = units;
        }
        if (tab.n == 0) continue;
        unsigned grid = grid_for(units, 256, 1);
        if (bf_moments) launch_tensors_for<bf16>(be, bf, p->grads_f32, grid, params, master, grads, m, v, k, tab);
        else launch_tensors_for<float>(be, bf, p->grads_f32, grid, params, master, grads, m, v, k, tab);
        CUDA_CHECK_LAUNCH();
    }
}
