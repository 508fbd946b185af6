// fp4_block.c: NVFP4 on the CPU (recipe nvfp4, kernels/fp4_block.h): an
// operand op(x) (M, K) optionally Hadamard-transformed along K, quantised
// into E2M1 codes, one E4M3 scale per block and an FP32 tensor scale,
// decoded again; and the emulated NVFP4 GEMM, the FP32-accumulated product
// of the dequantised operands (a GPU's tensor cores apply the scales to
// partial sums: the two differ by summation order only).
//
// The codes are kept one per byte here (the low nibble); a GPU packs two per
// byte. The element index of the stochastic rounding's random bits is
// i * K + k in op(x), whichever way x is stored.
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/fp4_block.h"
#include "kernels/fp8_block.h"

size_t cpu_nvfp4_scale_count(int M, int K, Nvfp4Format f) {
    return ceil_div((size_t)M, (size_t)f.br) * ceil_div((size_t)K, (size_t)f.bc);
}

// op(x) (M, K) into y (M, K) FP32, Hadamard-transformed along K when f says
// so (whole groups of 16; a tail of K % 16 stays as it is).
static void gather(float* y, const float* x, int trans, int M, int K, Nvfp4Format f) {
#pragma omp parallel for schedule(static) if ((size_t)M * K > CPU_PARALLEL_MIN)
    for (int i = 0; i < M; i++) {
        float* row = y + (size_t)i * K;
        for (int k = 0; k < K; k++) row[k] = trans ? x[(size_t)k * M + i] : x[(size_t)i * K + k];
        if (f.hadamard)
            for (int k = 0; k + NVFP4_BLOCK <= K; k += NVFP4_BLOCK) nvfp4_rht16(row + k);
    }
}

// Quantises y (M, K) FP32 (op(x), already transformed): codes (M*K),
// scales (one E4M3 byte per block, blocks row-major), *s_dec.
static void quantize_rows(uint8_t* codes, uint8_t* scales, float* s_dec, const float* y, int M, int K,
                          Nvfp4Format f) {
    float amax = 0.0f;
    for (size_t i = 0; i < (size_t)M * K; i++) amax = fp8_block_amax_fold(amax, y[i]);  // NaN ignored
    float s_enc = nvfp4_tensor_encode_scale(amax);
    *s_dec = 1.0f / s_enc;
    int nbr = (int)ceil_div((size_t)M, (size_t)f.br), nbc = (int)ceil_div((size_t)K, (size_t)f.bc);
#pragma omp parallel for schedule(static) if ((size_t)M * K > CPU_PARALLEL_MIN)
    for (int b = 0; b < nbr * nbc; b++) {
        int r0 = (b / nbc) * f.br, c0 = (b % nbc) * f.bc;
        int r1 = r0 + f.br < M ? r0 + f.br : M, c1 = c0 + f.bc < K ? c0 + f.bc : K;
        float bamax = 0.0f;
        int nan = 0;
        for (int i = r0; i < r1; i++)
            for (int k = c0; k < c1; k++) {
                float v = y[(size_t)i * K + k];
                bamax = fp8_block_amax_fold(bamax, v);
                nan |= v != v;
            }
        uint8_t sc = nvfp4_block_scale(bamax, s_enc);
        float mult = nvfp4_element_multiplier(sc, s_enc);
        scales[b] = nan ? 0x7F : sc;  // a NaN in the block: the block decodes to NaN
        for (int i = r0; i < r1; i++)
            for (int k = c0; k < c1; k++) {
                size_t idx = (size_t)i * K + k;
                uint32_t bits = f.stochastic ? nvfp4_random_bits(f.rng_key, idx) : 0;
                codes[idx] = nvfp4_e2m1_encode(y[idx] * mult, f.stochastic, bits);
            }
    }
}

void cpu_nvfp4_dequantize(float* out, const uint8_t* codes, const uint8_t* scales, float s_dec, int M, int K,
                          Nvfp4Format f) {
    int nbc = (int)ceil_div((size_t)K, (size_t)f.bc);
#pragma omp parallel for schedule(static) if ((size_t)M * K > CPU_PARALLEL_MIN)
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            size_t b = (size_t)(i / f.br) * nbc + k / f.bc;
            out[(size_t)i * K + k] = nvfp4_decode(codes[(size_t)i * K + k], scales[b], s_dec);
        }
}

void cpu_nvfp4_quantize(uint8_t* codes, uint8_t* scales, float* s_dec, float* work, const float* x, int trans, int M,
                        int K, Nvfp4Format f) {
    gather(work, x, trans, M, K, f);
    quantize_rows(codes, scales, s_dec, work, M, K, f);
}

size_t cpu_nvfp4_matmul_scratch_bytes(int M, int N, int K) {
    size_t big = (size_t)(M > N ? M : N) * K;
    // Both operands in FP32, the larger one's codes and block scales (at most one per element).
    return ((size_t)M + N) * K * sizeof(float) + 2 * big;
}

void cpu_nvfp4_matmul(Backend* be, void* out, const void* a, int a_trans, Nvfp4Format fa, const void* b, int b_trans,
                      Nvfp4Format fb, const void* bias, int M, int N, int K, float beta) {
    if (M <= 0 || N <= 0) return;
    size_t big = (size_t)(M > N ? M : N) * K;
    float* A = (float*)cpu_scratch(be, cpu_nvfp4_matmul_scratch_bytes(M, N, K), "NVFP4 GEMM operands");
    float* B = A + (size_t)M * K;
    uint8_t* codes = (uint8_t*)(B + (size_t)N * K);
    uint8_t* scales = codes + big;
    float s_dec;
    // Each operand gathered (and transformed) into its FP32 buffer, quantised
    // from there, and decoded over it.
    cpu_nvfp4_quantize(codes, scales, &s_dec, A, (const float*)a, a_trans, M, K, fa);
    cpu_nvfp4_dequantize(A, codes, scales, s_dec, M, K, fa);
    cpu_nvfp4_quantize(codes, scales, &s_dec, B, (const float*)b, b_trans, N, K, fb);
    cpu_nvfp4_dequantize(B, codes, scales, s_dec, N, K, fb);
    // out (M, N) = A (M, K) @ B (N, K)^T  (+ beta * out)
    cpu_sgemm_tiled(0, 1, M, N, K, 1.0f, A, K, B, K, beta, (float*)out, N);
    if (bias) cpu_add_bias((float*)out, (const float*)bias, M, N);
    be->free(be, A);
}
