// fp8_block.c: block-scaled FP8 on the CPU (recipes blockwise and mxfp8,
// kernels/fp8_block.h): an operand quantised into E4M3 codes and one scale
// per block, decoded again, and the emulated block-scaled GEMM.
//
// The GEMM is the FP32-accumulated product of the dequantised operands: each
// element decoded and multiplied by its block's scale in FP32 (exact for the
// power-of-two E8M0 scales; one FP32 rounding for blockwise's FP32 scales),
// then an FP32 sgemm. A GPU's block-scaled tensor cores apply the scales to
// partial sums instead, so the two differ by summation order only.
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/fp8_block.h"

size_t cpu_fp8_block_scale_count(int M, int K, Fp8BlockFormat f) {
    return ceil_div((size_t)M, (size_t)f.br) * ceil_div((size_t)K, (size_t)f.bc);
}

// Element (i, k) of op(x) (M, K): x is (M, K), or (K, M) when trans.
static inline float op_elem(const float* x, int trans, int M, int K, int i, int k) {
    return trans ? x[(size_t)k * M + i] : x[(size_t)i * K + k];
}

void cpu_fp8_block_quantize(uint8_t* codes, void* scales, const float* x, int trans, int M, int K,
                            Fp8BlockFormat f) {
    int nbr = (int)ceil_div((size_t)M, (size_t)f.br), nbc = (int)ceil_div((size_t)K, (size_t)f.bc);
#pragma omp parallel for schedule(static) if ((size_t)M * K > CPU_PARALLEL_MIN)
    for (int b = 0; b < nbr * nbc; b++) {
        int r0 = (b / nbc) * f.br, c0 = (b % nbc) * f.bc;
        int r1 = r0 + f.br < M ? r0 + f.br : M, c1 = c0 + f.bc < K ? c0 + f.bc : K;
        float amax = 0.0f;
        for (int i = r0; i < r1; i++)
            for (int k = c0; k < c1; k++) amax = fp8_block_amax_fold(amax, op_elem(x, trans, M, K, i, k));
        uint32_t stored;
        float mult = fp8_block_scale_from_amax(f.scale, amax, &stored);
        if (f.scale == FP8_BLOCK_E8M0) ((uint8_t*)scales)[b] = (uint8_t)stored;
        else memcpy((uint8_t*)scales + (size_t)b * 4, &stored, 4);
        for (int i = r0; i < r1; i++)
            for (int k = c0; k < c1; k++)
                codes[(size_t)i * K + k] = fp8_quantize_value(op_elem(x, trans, M, K, i, k), mult, 1);
    }
}

void cpu_fp8_block_dequantize(float* out, const uint8_t* codes, const void* scales, int M, int K,
                              Fp8BlockFormat f) {
    int nbc = (int)ceil_div((size_t)K, (size_t)f.bc);
#pragma omp parallel for schedule(static) if ((size_t)M * K > CPU_PARALLEL_MIN)
    for (int i = 0; i < M; i++) {
        for (int k = 0; k < K; k++) {
            size_t b = (size_t)(i / f.br) * nbc + k / f.bc;
            uint32_t stored;
            if (f.scale == FP8_BLOCK_E8M0) stored = ((const uint8_t*)scales)[b];
            else memcpy(&stored, (const uint8_t*)scales + b * 4, 4);
            out[(size_t)i * K + k] = fp8_decode(codes[(size_t)i * K + k], 1) * fp8_block_scale_value(f.scale, stored);
        }
    }
}

size_t cpu_fp8_block_matmul_scratch_bytes(int M, int N, int K) {
    size_t big = (size_t)(M > N ? M : N) * K;
    // Both operands dequantised in FP32, the larger one's codes, its scales (at most one FP32 per element).
    return ((size_t)M + N) * K * sizeof(float) + big + big * sizeof(float);
}

// op(x) (M, K) quantised in format f and decoded into out (M, K) FP32.
static void quantize_dequantize(float* out, uint8_t* codes, void* scales, const float* x, int trans, int M, int K,
                                Fp8BlockFormat f) {
    cpu_fp8_block_quantize(codes, scales, x, trans, M, K, f);
    cpu_fp8_block_dequantize(out, codes, scales, M, K, f);
}

void cpu_fp8_block_matmul(Backend* be, void* out, const void* a, int a_trans, Fp8BlockFormat fa, const void* b,
                          int b_trans, Fp8BlockFormat fb, const void* bias, int M, int N, int K, float beta) {
    if (M <= 0 || N <= 0) return;
    size_t big = (size_t)(M > N ? M : N) * K;
    float* A = (float*)cpu_scratch(be, cpu_fp8_block_matmul_scratch_bytes(M, N, K), "block-scaled FP8 GEMM operands");
    float* B = A + (size_t)M * K;
    float* scales = B + (size_t)N * K;
    uint8_t* codes = (uint8_t*)(scales + big);
    quantize_dequantize(A, codes, scales, (const float*)a, a_trans, M, K, fa);
    quantize_dequantize(B, codes, scales, (const float*)b, b_trans, N, K, fb);
    // out (M, N) = A (M, K) @ B (N, K)^T  (+ beta * out)
    cpu_sgemm_tiled(0, 1, M, N, K, 1.0f, A, K, B, K, beta, (float*)out, N);
    if (bias) cpu_add_bias((float*)out, (const float*)bias, M, N);
    be->free(be, A);
}
