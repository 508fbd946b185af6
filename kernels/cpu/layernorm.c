// layernorm.c: layernorm forward (alone and fused with the residual add) and
// backward on the CPU. As PyTorch: eps 1e-5, biased variance, mean and
// 1/sqrt(var + eps) saved per row for the backward pass.
#include "kernels/cpu/cpu.h"

#define LN_EPS 1e-5f

// Normalises one row; two passes over x (mean, then centred variance) avoid
// the cancellation of E[x^2] - E[x]^2.
static void layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x,
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
#pragma omp simd
    for (int c = 0; c < C; c++) out[c] = (x[c] - m) * rs * w[c] + b[c];
    *mean_out = m;
    *rstd_out = rs;
}

void cpu_layernorm_forward(Backend* be, void* out_, float* mean, float* rstd, const void* inp_,
                           const void* w_, const void* b_, int N, int C) {
    float* out = (float*)out_;
    const float* inp = (const float*)inp_;
    const float* w = (const float*)w_;
    const float* b = (const float*)b_;
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        layernorm_row(out + o, mean + i, rstd + i, inp + o, w, b, C);
    }
}

// residual may alias a or b: each element is read before it is written.
void cpu_residual_layernorm_forward(Backend* be, void* residual_, void* out_, float* mean,
                                    float* rstd, const void* a_, const void* b_, const void* w_,
                                    const void* bias_, int N, int C) {
    float* residual = (float*)residual_;
    float* out = (float*)out_;
    const float* a = (const float*)a_;
    const float* b = (const float*)b_;
    const float* w = (const float*)w_;
    const float* bias = (const float*)bias_;
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        float* r = residual + o;
        const float* ar = a + o;
        const float* br = b + o;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] = ar[c] + br[c];
        layernorm_row(out + o, mean + i, rstd + i, r, w, bias, C);
    }
}

// dinp for one row: with xhat the normalised input and g = dout * w,
// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)).
static void layernorm_backward_row(float* dinp, const float* dout, const float* x,
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
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * rs;
        float g = dout[c] * w[c];
        dinp[c] += (g - mean_g - xhat * mean_gx) * rs;
    }
}

void cpu_layernorm_backward(Backend* be, void* dinp_, void* dw_, void* db_, const void* dout_,
                            const void* inp_, const void* w_, const float* mean, const float* rstd,
                            int N, int C) {
    float* dinp = (float*)dinp_;
    float* dw = (float*)dw_;
    float* db = (float*)db_;
    const float* dout = (const float*)dout_;
    const float* inp = (const float*)inp_;
    const float* w = (const float*)w_;
    int parallel = (size_t)N * C > CPU_PARALLEL_MIN;

#pragma omp parallel for schedule(static) if (parallel)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        layernorm_backward_row(dinp + o, dout + o, inp + o, w, mean[i], rstd[i], C);
    }

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
