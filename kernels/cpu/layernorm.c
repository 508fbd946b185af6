// layernorm.c: layernorm and RMSNorm (Llama's normalisation) on the CPU,
// forward (alone and fused with the residual add) and backward. One code path
// for both, with `ln` choosing: layernorm as PyTorch (eps 1e-5, biased
// variance, mean and rstd = 1/sqrt(var + eps) saved per row); RMSNorm is the
// same with the mean taken as 0 and no bias (out = x * rstd * w, rstd =
// 1/sqrt(mean(x^2) + eps)): x - 0 is x exactly, so sharing costs no bit.
#include "kernels/cpu/cpu.h"

#define LN_EPS 1e-5f

// Normalises one row; for layernorm two passes over x (mean, then centred
// variance) avoid the cancellation of E[x^2] - E[x]^2. mean_out and bias are
// layernorm's only (NULL otherwise). Returns the row's largest |out| as
// fp8_abs_bits (the FP8 amax).
static uint32_t norm_row(int ln, float* out, float* mean_out, float* rstd_out, const float* x, const float* w,
                         const float* b, int C, float eps) {
    float m = 0.0f;
    if (ln) {
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        m = s / (float)C;
    }
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(v / (float)C + eps);
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int c = 0; c < C; c++) {
        out[c] = ln ? (x[c] - m) * rs * w[c] + b[c] : x[c] * rs * w[c];
        uint32_t a = fp8_abs_bits(out[c]);
        amax = a > amax ? a : amax;
    }
    if (ln) *mean_out = m;
    *rstd_out = rs;
    return amax;
}

// With residual (the fused form): residual = a + b, then normalised; residual
// may alias a or b (each element is read before it is written). Without: a
// is normalised.
static void norm_forward(int ln, float* residual, float* out, float* mean, float* rstd, const float* a,
                         const float* b, const float* w, const float* bias, int N, int C, float eps, float* amax) {
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * C > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        const float* x = a + o;
        if (residual) {
            float* r = residual + o;
            const float* br = b + o;
#pragma omp simd
            for (int c = 0; c < C; c++) r[c] = x[c] + br[c];
            x = r;
        }
        uint32_t am = norm_row(ln, out + o, ln ? mean + i : NULL, rstd + i, x, w, bias, C, eps);
        mx = am > mx ? am : mx;
    }
    cpu_amax_commit(amax, mx);
}

void cpu_layernorm_forward(Backend* be, void* out, float* mean, float* rstd, const void* inp, const void* w,
                           const void* b, int N, int C, float* amax) {
    norm_forward(1, NULL, (float*)out, mean, rstd, (const float*)inp, NULL, (const float*)w, (const float*)b, N, C,
                 LN_EPS, amax);
}

void cpu_residual_layernorm_forward(Backend* be, void* residual, void* out, float* mean, float* rstd, const void* a,
                                    const void* b, const void* w, const void* bias, int N, int C, float* amax) {
    norm_forward(1, (float*)residual, (float*)out, mean, rstd, (const float*)a, (const float*)b, (const float*)w,
                 (const float*)bias, N, C, LN_EPS, amax);
}

void cpu_rmsnorm_forward(Backend* be, void* out, float* rstd, const void* inp, const void* w, int N, int C, float eps,
                         float* amax) {
    norm_forward(0, NULL, (float*)out, NULL, rstd, (const float*)inp, NULL, (const float*)w, NULL, N, C, eps, amax);
}

void cpu_residual_rmsnorm_forward(Backend* be, void* residual, void* out, float* rstd, const void* a, const void* b,
                                  const void* w, int N, int C, float eps, float* amax) {
    norm_forward(0, (float*)residual, (float*)out, NULL, rstd, (const float*)a, (const float*)b, (const float*)w, NULL,
                 N, C, eps, amax);
}

// dinp for one row: with xhat = (x - m) * rstd (m = 0 for RMSNorm) and
// g = dout * w, dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), without
// the mean(g) term for RMSNorm. Returns the row's largest |dinp| (after the
// addition) as fp8_abs_bits.
static uint32_t norm_backward_row(int ln, float* dinp, const float* dout, const float* x, const float* w, float m,
                                  float rs, int C) {
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
        dinp[c] += (ln ? g - mean_g - xhat * mean_gx : g - xhat * mean_gx) * rs;
        uint32_t a = fp8_abs_bits(dinp[c]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

// dinp (N, C), dw (C) and, for layernorm, db (C) accumulate; mean: layernorm's.
static void norm_backward(int ln, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int N, int C, float* amax) {
    int parallel = (size_t)N * C > CPU_PARALLEL_MIN;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if (parallel)
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        uint32_t a = norm_backward_row(ln, dinp + o, dout + o, inp + o, w, ln ? mean[i] : 0.0f, rstd[i], C);
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
            float m = ln ? mean[i] : 0.0f, rs = rstd[i];
#pragma omp simd
            for (int c = 0; c < len; c++) {
                acc_w[c] += g[c] * ((x[c] - m) * rs);
                acc_b[c] += g[c];
            }
        }
        for (int c = 0; c < len; c++) {
            dw[c0 + c] += acc_w[c];
            if (ln) db[c0 + c] += acc_b[c];
        }
    }
}

void cpu_layernorm_backward(Backend* be, void* dinp, void* dw, void* db, const void* dout, const void* inp,
                            const void* w, const float* mean, const float* rstd, int N, int C, float* amax) {
    norm_backward(1, (float*)dinp, (float*)dw, (float*)db, (const float*)dout, (const float*)inp, (const float*)w,
                  mean, rstd, N, C, amax);
}

void cpu_rmsnorm_backward(Backend* be, void* dinp, void* dw, const void* dout, const void* inp, const void* w,
                          const float* rstd, int N, int C, float* amax) {
    norm_backward(0, (float*)dinp, (float*)dw, NULL, (const float*)dout, (const float*)inp, (const float*)w, NULL,
                  rstd, N, C, amax);
}
