// adamw.c: the AdamW update on the CPU, written to reproduce PyTorch's
// torch.optim.AdamW (decoupled weight decay, single-tensor CPU path) operation
// by operation in FP32, so that a training run can be compared with PyTorch's
// to rounding level:
//   p = p * (1 - lr*wd)                         param.mul_(1 - lr * weight_decay)
//   m = m + (1-b1) * (g - m)  (one fma)         exp_avg.lerp_(grad, 1 - beta1)
//   v = v*b2 + ((1-b2)*g)*g                     exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//   denom = sqrt(v) / sqrt(bc2) + eps           (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   p = p + (-(lr/bc1) * m) / denom             param.addcdiv_(exp_avg, denom, value=-step_size)
// Scalar coefficients are formed in double and rounded to float once, as
// Python does before handing them to the tensor kernels.
//
// BF16 moments (AdamWParams.moment_dtype): m and v are widened to FP32, updated
// by the same operations, and stored rounded stochastically with bits 0-15 (m)
// and 16-31 (v) of rng_u64(seed, element index), the draw whose top 16 bits round
// BF16 parameters on the GPU (kernels/cuda/adamw.cu makes the same decisions).
#include <math.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include "kernels/bf16.h"
#include "kernels/cpu/cpu.h"
#include "llm/util/rng.h"

typedef struct {
    float decay, m_weight, v_keep, v_weight, neg_step_size, bc2_sqrt, eps, grad_scale;
    uint64_t seed;  // the stochastic rounding's key (BF16 moments)
} AdamWCoefficients;

static AdamWCoefficients adamw_coefficients(const AdamWParams* p) {
    double lr = p->lr, beta1 = p->beta1, beta2 = p->beta2;
    double bias_correction1 = 1.0 - pow(beta1, p->step);
    double bias_correction2 = 1.0 - pow(beta2, p->step);
    AdamWCoefficients k;
    // PyTorch skips the decay when weight_decay == 0; multiplying by exactly
    // 1.0f is the same and keeps the loop free of branches.
    k.decay = p->weight_decay != 0.0f ? (float)(1.0 - lr * (double)p->weight_decay) : 1.0f;
    k.m_weight = (float)(1.0 - beta1);
    k.v_keep = p->beta2;
    k.v_weight = (float)(1.0 - beta2);
    k.neg_step_size = (float)(-(lr / bias_correction1));
    k.bc2_sqrt = (float)sqrt(bias_correction2);
    k.eps = p->eps;
    k.grad_scale = p->grad_scale;
    k.seed = p->seed;
    return k;
}

// out[i] = sqrtf(x[i]), correctly rounded like sqrtf. GCC vectorises sqrtf
// only under -fno-math-errno (per-function attributes do not reach it), and a
// scalar sqrt made the whole update loop scalar, 4x slower than memory speed.
static void sqrt_block(float* out, const float* x, int n) {
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) out[i] = sqrtf(x[i]);
}

// The update of one block of at most ADAMW_BLOCK elements, in three passes
// that stay in L1: the moments, their square roots, the parameters. Returns
// the largest |new weight| as fp8_abs_bits (the FP8 amax).
#define ADAMW_BLOCK 2048
static uint32_t adamw_block(float* w, const float* grads, float* m, float* v, int n,
                            const AdamWCoefficients* k) {
    float root[ADAMW_BLOCK];
#pragma omp simd
    for (int i = 0; i < n; i++) {
        float g = grads[i] * k->grad_scale;
        m[i] = fmaf(k->m_weight, g - m[i], m[i]);
        v[i] = v[i] * k->v_keep + (k->v_weight * g) * g;
    }
    sqrt_block(root, v, n);
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int i = 0; i < n; i++) {
        float denom = root[i] / k->bc2_sqrt + k->eps;
        w[i] = w[i] * k->decay + (k->neg_step_size * m[i]) / denom;
        uint32_t a = fp8_abs_bits(w[i]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

// A block with BF16 moments: widened into FP32 copies, updated by adamw_block,
// stored rounded stochastically (element i draws rng_u64(seed, index)).
static uint32_t adamw_block_bf16_moments(float* w, const float* grads, uint16_t* m, uint16_t* v, int n,
                                         uint64_t index, const AdamWCoefficients* k) {
    float mf[ADAMW_BLOCK], vf[ADAMW_BLOCK];
    for (int i = 0; i < n; i++) {
        mf[i] = bf16_to_f32(m[i]);
        vf[i] = bf16_to_f32(v[i]);
    }
    uint32_t amax = adamw_block(w, grads, mf, vf, n, k);
    for (int i = 0; i < n; i++) {
        uint64_t r = rng_u64(k->seed, index + (uint64_t)i);
        m[i] = f32_to_bf16_stochastic(mf[i], (uint32_t)r);
        v[i] = f32_to_bf16_stochastic(vf[i], (uint32_t)(r >> 16));
    }
    return amax;
}

void cpu_adamw(Backend* be, void* params_, float* master, const void* grads_, void* m_, void* v_,
               size_t n, const AdamWParams* p) {
    float* params = (float*)params_;
    const float* grads = (const float*)grads_;
    if (p->step < 1) fatal("adamw: step must be >= 1 (it is 1-based), got %d", p->step);
    if (p->moment_dtype != DTYPE_F32 && p->moment_dtype != DTYPE_BF16)
        fatal("adamw: moments must be fp32 or bf16, got %s", dtype_name(p->moment_dtype));
    const int bf_moments = p->moment_dtype == DTYPE_BF16;
    AdamWCoefficients k = adamw_coefficients(p);
    // With 16-bit params the FP32 weights live in master; the CPU backend's
    // params are FP32 too, so they simply receive a copy.
    float* w = master ? master : params;
    size_t blocks = ceil_div(n, ADAMW_BLOCK);
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if (n > CPU_PARALLEL_MIN)
    for (size_t b = 0; b < blocks; b++) {
        size_t i0 = b * ADAMW_BLOCK;
        int len = (int)(n - i0 < ADAMW_BLOCK ? n - i0 : ADAMW_BLOCK);
        uint32_t a = bf_moments ? adamw_block_bf16_moments(w + i0, grads + i0, (uint16_t*)m_ + i0, (uint16_t*)v_ + i0,
                                                           len, p->index_base + i0, &k)
                                : adamw_block(w + i0, grads + i0, (float*)m_ + i0, (float*)v_ + i0, len, &k);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(p->amax, mx);
    if (master && n) memcpy(params, master, n * sizeof(float));
}

void cpu_adamw_tensors(Backend* be, void* params_, float* master, const void* grads_, void* m, void* v,
                       const AdamWTensor* t, int n, const AdamWParams* p) {
    float* params = (float*)params_;
    const float* grads = (const float*)grads_;
    size_t ms = dtype_size(p->moment_dtype);
    for (int i = 0; i < n; i++) {
        AdamWParams q = *p;
        q.weight_decay = t[i].weight_decay;
        q.index_base = t[i].index_base;
        q.amax = t[i].amax;
        cpu_adamw(be, params + t[i].param, master ? master + t[i].state : NULL, grads + t[i].grad,
                  (char*)m + t[i].state * ms, (char*)v + t[i].state * ms, t[i].count, &q);
    }
}
