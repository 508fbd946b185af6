// layernorm.c: layernorm forward (alone and fused with the residual add) and
// backward on the CPU. As PyTorch: eps 1e-5, biased variance, mean and
// 1/sqrt(var + eps) saved per row for the backward pass.
#include "kernels/cpu/cpu.h"

#define LN_EPS 1e-5f

// Normalises one row; two passes over x (mean, then centred variance) avoid
// the cancellation of E[x^2] - E[x]^2. Returns the row's largest |out| as
// fp8_abs_bits (the FP8 amax).
static uint32_t layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x,
                              const float* w, const float* b, int C) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    float m = s / (float)C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(v / (float)C + LN_EPS);
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int c = 0; c < C; c++) {
        out[c] = (x[c] - m) * rs * w[c] + b[c];
        uint32_t a = fp8_abs_bits(out[c]);
        amax = a > amax ? a : amax;
    }
    *mean_out = m;
    *rstd_out = rs;
    return amax;
}

void cpu_layernorm_forward(Backend* be, void* out_, float* mean, float* rstd, const void* inp_,
                           const void* w_, const void* b_, int N, int C, float* amax) {
    float* out = (float*)out_;
    const float* inp = (const float*)inp_;
    const float* w = (const float*)w_;
    const float* b = (const float*)b_;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        uint32_t a = layernorm_row(out + o, mean + i, rstd + i, inp + o, w, b, C);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(amax, mx);
}

// residual may alias a or b: each element is read before it is written.
void cpu_residual_layernorm_forward(Backend* be, void* residual_, void* out_, float* mean,
                                    float* rstd, const void* a_, const void* b_, const void* w_,
                                    const void* bias_, int N, int C, float* amax) {
    float* residual = (float*)residual_;
    float* out = (float*)out_;
    const float* a = (const float*)a_;
    const float* b = (const float*)b_;
    const float* w = (const float*)w_;
    const float* bias = (const float*)bias_;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        float* r = residual + o;
        const float* ar = a + o;
        const float* br = b + o;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] = ar[c] + br[c];
        uint32_t am = layernorm_row(out + o, mean + i, rstd + i, r, w, bias, C);
        mx = am > mx ? am : mx;
    }
    cpu_amax_commit(amax, mx);
}

// dinp for one row: with xhat the normalised input and g = dout * w,
// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)). Returns the row's
// largest |dinp| (after the addition) as fp8_abs_bits.
static uint32_t layernorm_backward_row(float* dinp, const float* dout, const float* x,
                                       const float* w, float m, float rs, int C) {
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int c = 0; c < C; c++) {
        float g = dout[c] * w[c];
        sum_g += g;
        sum_gx += g * ((x[c] - m) * rs);
    }
    float mean_g = sum_g / (float)C;
    float mean_gx = sum_gx / (float)C;
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * rs;
        float g = dout[c] * w[c];
        dinp[c] += (g - mean_g - xhat * mean_gx) * rs;
        uint32_t a = fp8_abs_bits(dinp[c]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

void cpu_layernorm_backward(Backend* be, void* dinp_, void* dw_, void* db_, const void* dout_,
                            const void* inp_, const void* w_, const float* mean, const float* rstd,
                            int N, int C, float* amax) {
    float* dinp = (float*)dinp_;
    float* dw = (float*)dw_;
    float* db = (float*)db_;
    const float* dout = (const float*)dout_;
    const float* inp = (const float*)inp_;
    const float* w = (const float*)w_;
    int parallel = (size_t)N * C > CPU_PARALLEL_MIN;

    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if (parallel)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        uint32_t a = layernorm_backward_row(dinp + o, dout + o, inp + o, w, mean[i], rstd[i], C);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(amax, mx);

    // dw and db are column sums over the rows: each thread owns whole column
    // chunks and adds the rows in order, so the sums do not depend on threads.
    int chunks = (int)ceil_div((size_t)C, CPU_COLUMN_CHUNK);
#pragma omp parallel for schedule(static) if (parallel)
    for (int k = 0; k < chunks; k++) {
        int c0 = k * CPU_COLUMN_CHUNK;
        int len = c0 + CPU_COLUMN_CHUNK < C ? CPU_COLUMN_CHUNK : C - c0;
        float acc_w[CPU_COLUMN_CHUNK] = {0}, acc_b[CPU_COLUMN_CHUNK] = {0};
        for (int i = 0; i < N; i++) {
            const float* g = dout + (size_t)i * C + c0;
            const float* x = inp + (size_t)i * C + c0;
            float m = mean[i], rs = rstd[i];
#pragma omp simd
            for (int c = 0; c < len; c++) {
                acc_w[c] += g[c] * ((x[c] - m) * rs);
                acc_b[c] += g[c];
            }
        }
        for (int c = 0; c < len; c++) {
            dw[c0 + c] += acc_w[c];
            db[c0 + c] += acc_b[c];
        }
    }
}
