// cpu.h: what the files of the CPU reference backend share and nothing else
// may include: the op entry points that backend.c puts in the table, the
// thresholds below which an op stays on one thread, the fixed chunk sizes that
// make reductions independent of the thread count, and a vectorisable exp.
//
// The CPU backend computes in FP32 only, so every `void*` activation buffer of
// ops.h is a `float*` here.
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "kernels/fp8_format.h"

// Below this many elements of work an OpenMP fork costs more than it saves.
#define CPU_PARALLEL_MIN 16384

// The GEMMs' tile edge (matmul.c): fixed, so the set of single-threaded
// sgemm calls, hence every rounding, does not depend on the thread count; and
// the backend's gemm_row_block (ops.h).
#define CPU_GEMM_TILE 128

// Column reductions over rows (dbias, dw, dwte, ...) give each thread whole
// chunks of this many columns and walk the rows in order, so every sum is
// taken in the same order whatever the thread count.
#define CPU_COLUMN_CHUNK 32

// Full-buffer reductions (sum, sum_squares) split the input into chunks of
// this many elements, summed independently and combined in chunk order.
#define CPU_REDUCE_CHUNK 32768

// Scratch memory an op needs for the duration of one call. It goes through
// be->alloc so that peak_allocated_bytes shows it (tests use that to prove
// attention never holds a T x T matrix).
static inline void* cpu_scratch(Backend* be, size_t bytes, const char* what) {
    return be->alloc(be, bytes, what);
}

// exp(x) for float, as straight-line code that GCC vectorises inside
// `#pragma omp simd` loops (glibc's expf is only vectorised under
// -ffast-math). exp(x) = 2^n * exp(r) with n = round(x / ln 2) and
// |r| <= ln2 / 2; exp(r) by its degree-7 Taylor polynomial (truncation error
// < 6e-9 relative), so the result is within about 1 ulp of expf. Inputs below
// -87.3 give 0 (no denormal results), inputs above 88 are clamped (exp(88)
// ~ 1.65e38, finite), NaN propagates.
static inline float cpu_expf(float x) {
    const float lo = -87.33654f, hi = 88.0f;
    int underflow = x < lo;
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer; without
    // -ffast-math the compiler keeps both operations. In between, the sum's
    // low mantissa bits hold that integer (its bits are 0x4B400000 + n).
    const float round_magic = 12582912.0f;
    union {
        float f;
        uint32_t u;
    } t;
    t.f = x * 1.44269504088896341f + round_magic;
    float n = t.f - round_magic;
    float r = fmaf(n, -0.693145751953125f, x);  // ln2 split in a high part with
    r = fmaf(n, -1.42860682030941723e-6f, r);   // trailing zeros and the rest
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    // 2^n from those bits, in unsigned arithmetic: defined for every input.
    // (A float-to-int conversion of n, as before, is undefined for NaN, and
    // so was shifting its negative result.) A NaN's p is NaN, and so is e.
    union {
        uint32_t u;
        float f;
    } scale;
    scale.u = (t.u - 0x4B400000u + 127u) << 23;
    float e = p * scale.f;
    return underflow ? 0.0f : e;
}

// amax arguments (ops.h): a pass computes the largest fp8_abs_bits of what it
// writes (an OpenMP max reduction over unsigned ints: no order, so no
// nondeterminism) and folds it into *amax here.
static inline void cpu_amax_commit(float* amax, uint32_t bits) {
    if (amax && bits > fp8_abs_bits(*amax)) *amax = fp8_bits_f32(bits);
}

// OpenBLAS extensions; declared here because a plain (netlib) cblas.h lacks them.
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);

// ---- ops (one family per file) ------------------------------------------------------------
void cpu_convert(Backend* be, void* dst, DType dst_type, const void* src, DType src_type, size_t n);

void cpu_encoder_forward(Backend* be, void* out, const int32_t* tokens, const void* wte,
                         const void* wpe, int B, int T, int C);
void cpu_encoder_backward(Backend* be, void* dwte, void* dwpe, const void* dout,
                          const int32_t* tokens, int B, int T, int C);

void cpu_layernorm_forward(Backend* be, void* out, float* mean, float* rstd, const void* inp,
                           const void* w, const void* b, int N, int C, float* amax);
void cpu_residual_layernorm_forward(Backend* be, void* residual, void* out, float* mean,
                                    float* rstd, const void* a, const void* b, const void* w,
                                    const void* bias, int N, int C, float* amax);
void cpu_layernorm_backward(Backend* be, void* dinp, void* dw, void* db, const void* dout,
                            const void* inp, const void* w, const float* mean, const float* rstd,
                            int N, int C, float* amax);

void cpu_matmul_forward(Backend* be, void* out, void* pre_gelu, const void* inp,
                        const void* weight, const void* bias, int N, int C, int OC);
void cpu_matmul_backward(Backend* be, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, int N, int C, int OC);
void cpu_matmul_backward_dgelu(Backend* be, void* dinp, void* dbias, const void* dout, const void* pre_gelu,
                               const void* weight, int N, int C, int OC, float* amax);
// C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, row-major, in fixed
// tiles (see matmul.c), trans_a/trans_b 0 or 1.
void cpu_sgemm_tiled(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* Cm, int ldc);
// Adds bias (OC) to every row of x (N, OC) in place.
void cpu_add_bias(float* x, const float* bias, int N, int OC);

void cpu_gelu_forward(Backend* be, void* out, const void* inp, size_t n, float* amax);
void cpu_gelu_backward(Backend* be, void* dinp, const void* inp, const void* dout, size_t n, float* amax);
// gelu of n contiguous floats on the calling thread (matmul fuses it into its bias pass).
void cpu_gelu_row(float* out, const float* inp, size_t n);

void cpu_attention_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T,
                           int NH, int NKV, int HS);
void cpu_attention_backward(Backend* be, void* dqkv, const void* dout, const void* qkv,
                            const void* out, const float* lse, int B, int T, int NH, int NKV,
                            int HS);
void cpu_attention_forward_chunk(Backend* be, void* out, float* lse, const void* qkv, const void* kv, int B, int T,
                                 int Tkv, int q0, int NH, int NKV, int HS);
void cpu_attention_backward_chunk(Backend* be, void* dqkv, void* dkv, const void* dout, const void* qkv,
                                  const void* kv, const void* out, const float* lse, int B, int T, int Tkv, int q0,
                                  int NH, int NKV, int HS);

void cpu_rmsnorm_forward(Backend* be, void* out, float* rstd, const void* inp, const void* w, int N,
                         int C, float eps, float* amax);
void cpu_residual_rmsnorm_forward(Backend* be, void* residual, void* out, float* rstd,
                                  const void* a, const void* b, const void* w, int N, int C,
                                  float eps, float* amax);
void cpu_rmsnorm_backward(Backend* be, void* dinp, void* dw, const void* dout, const void* inp,
                          const void* w, const float* rstd, int N, int C, float* amax);
void cpu_rope_forward(Backend* be, void* qkv, const float* freqs, int B, int T, int NH, int NKV,
                      int HS);
void cpu_rope_backward(Backend* be, void* dqkv, const float* freqs, int B, int T, int NH, int NKV,
                       int HS);
void cpu_swiglu_forward(Backend* be, void* out, const void* inp, int N, int H, float* amax);
void cpu_swiglu_backward(Backend* be, void* dinp, const void* inp, const void* dout, int N, int H,
                         float* amax);

void cpu_cross_entropy(Backend* be, float* losses, void* logits, const int32_t* targets, int N,
                       int V, int Vp, float dloss);

void cpu_sum(Backend* be, float* out, const float* x, size_t n, int accumulate);
void cpu_sum_squares(Backend* be, float* out, const void* x, size_t n, int accumulate);
void cpu_sum_squares_f32(Backend* be, float* out, const float* x, size_t n, int accumulate);
void cpu_accumulate_f32(Backend* be, float* acc, const void* x, size_t n, int round_bf16);

void cpu_adamw(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
               size_t n, const AdamWParams* p);
void cpu_adamw_tensors(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                       const AdamWTensor* t, int n, const AdamWParams* p);

void cpu_amax(Backend* be, float* amax, const void* x, size_t n);
void cpu_fp8_amax_fold(Backend* be, float* acc, const float* amax, size_t n);
void cpu_fp8_quantize(Backend* be, void* q, void* qt, DType fmt, const void* x, int rows, int cols,
                      const float* amax, float* scale, float* scale_inv);
void cpu_fp8_update_scales(Backend* be, float* scale, float* scale_inv, float* history, int len, size_t ld,
                           int pos, size_t n, DType fmt, int margin);
void cpu_fp8_matmul_forward(Backend* be, void* out, const Fp8Tensor* inp, const Fp8Tensor* weight,
                            const void* bias, int N, int C, int OC);
void cpu_fp8_matmul_backward(Backend* be, void* dinp, void* dweight, const Fp8Tensor* dout,
                             const Fp8Tensor* inp, const Fp8Tensor* weight, int N, int C, int OC);
// Block-scaled FP8 (fp8_block.c): op(x) (M,K) (x stored (K,M) when trans) into
// E4M3 codes (M,K) and scales (ceil(M/br), ceil(K/bc)) row-major (FP32 or
// E8M0 bytes), and back to FP32.
size_t cpu_fp8_block_scale_count(int M, int K, Fp8BlockFormat f);
void cpu_fp8_block_quantize(uint8_t* codes, void* scales, const float* x, int trans, int M, int K, Fp8BlockFormat f);
void cpu_fp8_block_dequantize(float* out, const uint8_t* codes, const void* scales, int M, int K, Fp8BlockFormat f);
void cpu_fp8_block_matmul(Backend* be, void* out, const void* a, int a_trans, Fp8BlockFormat fa, const void* b,
                          int b_trans, Fp8BlockFormat fb, const void* bias, int M, int N, int K, float beta);
// NVFP4 (fp4_block.c): op(x) (M, K) -> codes (M*K, one per byte), scales (one
// E4M3 per block), the tensor's decode scale; work is (M, K) FP32 scratch.
size_t cpu_nvfp4_scale_count(int M, int K, Nvfp4Format f);
void cpu_nvfp4_quantize(uint8_t* codes, uint8_t* scales, float* s_dec, float* work, const float* x, int trans, int M,
                        int K, Nvfp4Format f);
void cpu_nvfp4_dequantize(float* out, const uint8_t* codes, const uint8_t* scales, float s_dec, int M, int K,
                          Nvfp4Format f);
void cpu_nvfp4_matmul(Backend* be, void* out, const void* a, int a_trans, Nvfp4Format fa, const void* b, int b_trans,
                      Nvfp4Format fb, const void* bias, int M, int N, int K, float beta);
