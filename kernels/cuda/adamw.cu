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
// (seed, flat index), not on how the range was split into calls or blocks.
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

// FP32 parameters, updated in place.
__global__ void adamw_f32_kernel(float* params, const float* grads, float* m, float* v, size_t n,
                                 AdamWCoefficients k) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t top = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float w = params[i], mi = m[i], vi = v[i];
        adamw_element(&w, grads[i], &mi, &vi, k);
        params[i] = w;
        m[i] = mi;
        v[i] = vi;
        top = amax_keep(top, fp8_abs_bits(w));
    }
    if (k.amax) amax_commit_warp(k.amax, top);
}

// BF16 parameters written from the FP32 master weights.
__global__ void adamw_bf16_kernel(bf16* params, float* master, const bf16* grads, float* m, float* v,
                                  size_t n, AdamWCoefficients k) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t top = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float w = master[i], mi = m[i], vi = v[i];
        adamw_element(&w, __bfloat162float(grads[i]), &mi, &vi, k);
        master[i] = w;
        m[i] = mi;
        v[i] = vi;
        uint32_t r = (uint32_t)(rng_u64_device(k.seed, k.index_base + i) >> 48);
        bf16 p = bf16_stochastic(w, r);
        params[i] = p;
        top = amax_keep(top, fp8_abs_bits(__bfloat162float(p)));  // the rounded value the FP8 cast will read
    }
    if (k.amax) amax_commit_warp(k.amax, top);
}

void cuda_adamw(Backend* be, void* params, float* master, const void* grads, float* m, float* v,
                size_t n, const AdamWParams* p) {
    if (p->step < 1) fatal("adamw: step must be >= 1 (it is 1-based), got %d", p->step);
    if (n == 0) return;
    AdamWCoefficients k = adamw_coefficients(p);
    unsigned grid = grid_for(n, 256, 4);
    if (be->dtype == DTYPE_BF16) {
        if (!master) fatal("adamw: bf16 parameters need FP32 master weights");
        LAUNCH(adamw_bf16_kernel, grid, 256, 0, cuda_stream(be), (bf16*)params, master, (const bf16*)grads, m, v,
               n, k);
    } else {
        if (master) {
            // FP32 parameters with a separate master copy: update it, then copy.
            LAUNCH(adamw_f32_kernel, grid, 256, 0, cuda_stream(be), master, (const float*)grads, m, v, n, k);
            CUDA_CHECK_LAUNCH();
            CUDA_CHECK(cudaMemcpyAsync(params, master, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream(be)));
            return;
        }
        LAUNCH(adamw_f32_kernel, grid, 256, 0, cuda_stream(be), (float*)params, (const float*)grads, m, v, n, k);
    }
    CUDA_CHECK_LAUNCH();
}
