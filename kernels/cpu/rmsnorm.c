// rmsnorm.c: RMSNorm (Llama's normalisation) forward, alone and fused with the
// residual add, and backward on the CPU. out = x * rstd * w with
// rstd = 1 / sqrt(mean(x^2) + eps) saved per row for the backward pass; no
// mean is subtracted and there is no bias.
#include "kernels/cpu/cpu.h"

// Normalises one row; returns its largest |out| as fp8_abs_bits (the FP8 amax).
static uint32_t rmsnorm_row(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    float rs = 1.0f / sqrtf(ss / (float)C + eps);
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int c = 0; c < C; c++) {
        out[c] = x[c] * rs * w[c];
        uint32_t a = fp8_abs_bits(out[c]);
        amax = a > amax ? a : amax;
    }
    *rstd_out = rs;
    return amax;
}

void cpu_rmsnorm_forward(Backend* be, void* out_, float* rstd, const void* inp_, const void* w_, int N,
                         int C, float eps, float* amax) {
    float* out = (float*)out_;
    const float* inp = (const float*)inp_;
    const float* w = (const float*)w_;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        uint32_t a = rmsnorm_row(out + o, rstd + i, inp + o, w, C, eps);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(amax, mx);
}

// residual may alias a or b: each element is read before it is written.
void cpu_residual_rmsnorm_forward(Backend* be, void* residual_, void* out_, float* rstd,
                                  const void* a_, const void* b_, const void* w_, int N, int C,
                                  float eps, float* amax) {
    float* residual = (float*)residual_;
    float* out = (float*)out_;
    const float* a = (const float*)a_;
    const float* b = (const float*)b_;
    const float* w = (const float*)w_;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        float* r = residual + o;
        const float* ar = a + o;
        const float* br = b + o;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] = ar[c] + br[c];
        uint32_t am = rmsnorm_row(out + o, rstd + i, r, w, C, eps);
        mx = am > mx ? am : mx;
    }
    cpu_amax_commit(amax, mx);
}

// dinp for one row: with xhat = x * rstd and g = dout * w,
// dinp += rstd * (g - xhat * mean(g * xhat)). Returns the row's largest
// |dinp| (after the addition) as fp8_abs_bits.
static uint32_t rmsnorm_backward_row(float* dinp, const float* dout, const float* x, const float* w, float rs,
                                     int C) {
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int c = 0; c < C; c++) sum_gx += dout[c] * w[c] * (x[c] * rs);
    float mean_gx = sum_gx / (float)C;
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int c = 0; c < C; c++) {
        float xhat = x[c] * rs;
        float g = dout[c] * w[c];
        dinp[c] += (g - xhat * mean_gx) * rs;
        uint32_t a = fp8_abs_bits(dinp[c]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

void cpu_rmsnorm_backward(Backend* be, void* dinp_, void* dw_, const void* dout_, const void* inp_,
                          const void* w_, const float* rstd, int N, int C, float* amax) {
    float* dinp = (float*)dinp_;
    float* dw = (float*)dw_;
    const float* dout = (const float*)dout_;
    const float* inp = (const float*)inp_;
    const float* w = (const float*)w_;
    int parallel = (size_t)N * C > CPU_PARALLEL_MIN;

    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if (parallel)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        uint32_t a = rmsnorm_backward_row(dinp + o, dout + o, inp + o, w, rstd[i], C);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(amax, mx);

    // dw is a column sum over the rows: each thread owns whole column chunks
    // and adds the rows in order, so the sums do not depend on the threads.
    int chunks = (int)ceil_div((size_t)C, CPU_COLUMN_CHUNK);
#pragma omp parallel for schedule(static) if (parallel)
    for (int k = 0; k < chunks; k++) {
        int c0 = k * CPU_COLUMN_CHUNK;
        int len = c0 + CPU_COLUMN_CHUNK < C ? CPU_COLUMN_CHUNK : C - c0;
        float acc[CPU_COLUMN_CHUNK] = {0};
        for (int i = 0; i < N; i++) {
            const float* g = dout + (size_t)i * C + c0;
            const float* x = inp + (size_t)i * C + c0;
            float rs = rstd[i];
#pragma omp simd
            for (int c = 0; c < len; c++) acc[c] += g[c] * (x[c] * rs);
        }
        for (int c = 0; c < len; c++) dw[c0 + c] += acc[c];
    }
}
