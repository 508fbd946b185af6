// matmul.c: the linear layer on the CPU: OpenBLAS sgemm for the products, and
// our own row and column passes for bias, the fused GELU and the bias gradient.
// In FP32 a GELU "fused" into the product is the same bits as gelu_forward
// on the stored pre-activation, and matmul_backward_dgelu the same bits as
// its three ops: the CPU has no rounding step for the GPU's epilogues to skip.
//
// Threading: OpenMP, not OpenBLAS, runs the GEMMs in parallel. Each product is
// cut into fixed tiles of its output, and every tile is one single-threaded
// sgemm over the full K. Two reasons: OpenBLAS's own threading changes the
// rounding of results with its thread count for some of its kernels (we
// measured it with the Haswell ones, in 0.3.21), which would make results
// depend on the core count; and its thread pool spinning beside OpenMP's
// oversubscribes the cores. Measured on 2 Zen 5 cores, the tiles are also
// faster than OpenBLAS's threading (~210 vs 90-120 GFLOP/s on GPT-2 shapes).
#include <cblas.h>

#include "kernels/cpu/cpu.h"

// The tile edge (cpu.h's CPU_GEMM_TILE). Fixed, so the set of sgemm calls
// (and hence every rounding) does not depend on the thread count; 128 keeps
// packing overhead ~1% while giving even GPT-2 small's 768-wide outputs a
// dozen tiles at 256 rows.
#define GEMM_TILE CPU_GEMM_TILE

// C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, row-major, tile by tile.
static void sgemm_tiled_alpha(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                              const float* A, int lda, const float* B, int ldb, float beta, float* Cm,
                              int ldc) {
    if (M <= 0 || N <= 0) return;
    // The tiles must each run on one thread; set here as well as at backend
    // creation in case someone else changed it since.
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    int tiles_m = (int)ceil_div((size_t)M, GEMM_TILE);
    int tiles_n = (int)ceil_div((size_t)N, GEMM_TILE);
    int tiles = tiles_m * tiles_n;
    double flops = 2.0 * M * N * K;
#pragma omp parallel for schedule(static) if (tiles > 1 && flops > 4e6)
    for (int t = 0; t < tiles; t++) {
        int i0 = (t / tiles_n) * GEMM_TILE, j0 = (t % tiles_n) * GEMM_TILE;
        int m = M - i0 < GEMM_TILE ? M - i0 : GEMM_TILE;
        int n = N - j0 < GEMM_TILE ? N - j0 : GEMM_TILE;
        const float* a = ta == CblasNoTrans ? A + (size_t)i0 * lda : A + i0;
        const float* b = tb == CblasNoTrans ? B + j0 : B + (size_t)j0 * ldb;
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, K, alpha, a, lda, b, ldb, beta,
                    Cm + (size_t)i0 * ldc + j0, ldc);
    }
}

static void sgemm_tiled(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A, int lda,
                        const float* B, int ldb, float beta, float* Cm, int ldc) {
    sgemm_tiled_alpha(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, Cm, ldc);
}

void cpu_sgemm_tiled(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* Cm, int ldc) {
    sgemm_tiled_alpha(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                      lda, B, ldb, beta, Cm, ldc);
}

void cpu_add_bias(float* x, const float* bias, int N, int OC) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        float* row = x + (size_t)i * OC;
#pragma omp simd
        for (int j = 0; j < OC; j++) row[j] += bias[j];
    }
}

// Adds the bias to each row of x (N, OC) in place and, when out is not NULL,
// writes gelu(x) to out: one pass over the sgemm result instead of two.
static void bias_gelu_pass(float* out, float* x, const float* bias, int N, int OC) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        float* row = x + (size_t)i * OC;
        if (bias) {
#pragma omp simd
            for (int j = 0; j < OC; j++) row[j] += bias[j];
        }
        if (out) cpu_gelu_row(out + (size_t)i * OC, row, (size_t)OC);
    }
}

void cpu_matmul_forward(Backend* be, void* out_, void* pre_gelu_, const void* inp_,
                        const void* weight_, const void* bias_, int N, int C, int OC) {
    float* out = (float*)out_;
    float* pre_gelu = (float*)pre_gelu_;
    const float* inp = (const float*)inp_;
    const float* weight = (const float*)weight_;
    const float* bias = (const float*)bias_;
    // With GELU the product lands in pre_gelu and out receives its activation.
    float* prod = pre_gelu ? pre_gelu : out;
    sgemm_tiled(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, 0.0f, prod, OC);
    if (bias || pre_gelu) bias_gelu_pass(pre_gelu ? out : NULL, prod, bias, N, OC);
}

// dbias[j] += sum over rows of dout[:, j]; threads own column chunks and add
// the rows in order, so the result does not depend on the thread count.
static void bias_backward(float* dbias, const float* dout, int N, int OC) {
    int chunks = (int)ceil_div((size_t)OC, CPU_COLUMN_CHUNK);
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_PARALLEL_MIN)
    for (int k = 0; k < chunks; k++) {
        int j0 = k * CPU_COLUMN_CHUNK;
        int len = j0 + CPU_COLUMN_CHUNK < OC ? CPU_COLUMN_CHUNK : OC - j0;
        float acc[CPU_COLUMN_CHUNK] = {0};
        for (int i = 0; i < N; i++) {
            const float* g = dout + (size_t)i * OC + j0;
#pragma omp simd
            for (int j = 0; j < len; j++) acc[j] += g[j];
        }
        for (int j = 0; j < len; j++) dbias[j0 + j] += acc[j];
    }
}

void cpu_matmul_backward(Backend* be, void* dinp_, void* dweight_, void* dbias_, const void* dout_,
                         const void* inp_, const void* weight_, int N, int C, int OC) {
    float* dinp = (float*)dinp_;
    float* dweight = (float*)dweight_;
    float* dbias = (float*)dbias_;
    const float* dout = (const float*)dout_;
    const float* inp = (const float*)inp_;
    const float* weight = (const float*)weight_;
    // dinp (N,C) = dout (N,OC) @ weight (OC,C), overwritten.
    if (dinp) {
        sgemm_tiled(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, 0.0f, dinp, C);
    }
    // dweight (OC,C) += dout^T (OC,N) @ inp (N,C).
    if (dweight) {
        sgemm_tiled(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
}

// The GEMM, then gelu_backward in place, then the column sums: the three ops
// of ops.h's definition, in their order.
void cpu_matmul_backward_dgelu(Backend* be, void* dinp, void* dbias, const void* dout, const void* pre_gelu,
                               const void* weight, int N, int C, int OC, float* amax) {
    cpu_matmul_backward(be, dinp, NULL, NULL, dout, NULL, weight, N, C, OC);
    cpu_gelu_backward(be, dinp, pre_gelu, dinp, (size_t)N * C, amax);
    if (dbias) bias_backward((float*)dbias, (const float*)dinp, N, C);
}
