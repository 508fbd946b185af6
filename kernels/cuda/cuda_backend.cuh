// cuda_backend.cuh: what the files of the CUDA backend share and nothing
// else includes: the backend's private state (stream, cuBLASLt handle and
// workspace, byte accounting, the scratch buffer), and the op entry points
// that backend.cu puts into the table of kernels/ops.h.
//
// Every op enqueues its kernels on the backend's one stream and returns
// without waiting; only to_host (and synchronize) wait for the device.
#pragma once

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda_seam.h"
#include "kernels/ops.h"

#include <cublasLt.h>

// The cuBLASLt heuristic result of one GEMM shape (see matmul.cu).
typedef struct GemmPlan GemmPlan;

typedef struct {
    int device;
    int cc_major, cc_minor;  // compute capability
    cudaStream_t stream;
    int sm_count;
    size_t smem_optin;  // max dynamic shared memory per block (bytes)

    // Every cudaMalloc of the backend, so that free() knows the size.
    void** live_ptr;
    size_t* live_bytes;
    int live_count, live_cap;
    size_t allocated, peak;

    // One scratch buffer shared by all ops: an op's temporary memory lives
    // only until its kernels are enqueued and the next op's kernels run after
    // them on the same stream. Sized at start-up (reserve_scratch) for the
    // model's shapes; should an op still need more, it grows (with a stream
    // sync) and says so once, since that op's size is missing from the reservation.
    void* scratch;
    size_t scratch_bytes;
    int scratch_reserved, scratch_warned;
    // The layernorm/RMSNorm backward's ticket counter (norm.cuh): zero
    // between launches (the kernel's last block wraps it back), so it lives
    // apart from the scratch, which other ops overwrite.
    unsigned* norm_ticket;

    // TRAIN_GPT_SYNC_CHECK=1 / TRAIN_GPT_OP_PROFILE=1: the op table before op_watch.cu wrapped it.
    Backend* unwrapped;

    // cuBLASLt.
    cublasLtHandle_t lt;
    void* lt_workspace;
    size_t lt_workspace_bytes;
    GemmPlan* plans;
    int plan_count, plan_cap;
    CudaEpilogueCounts epilogues;  // which GEMMs fused their epilogue (cuda_seam.h)
    // The block-scaled FP8 GEMM's operand codes and scales (matmul.cu), grown to the largest GEMM's.
    void* fp8_block_buf;
    size_t fp8_block_bytes;

    // Pinned staging buffers for to_device, so host-to-device copies do not
    // wait for the stream (a pageable source would).
    struct {
        void* host;
        size_t bytes;
        cudaEvent_t done;
        int used;
    } staging[4];
    int next_staging;
} CudaState;

static inline CudaState* cuda_state(Backend* be) { return (CudaState*)be->impl; }
static inline cudaStream_t cuda_stream(Backend* be) { return cuda_state(be)->stream; }

// Temporary device memory of at least `bytes` (256-byte aligned), valid until
// the next call; counted in the backend's allocated bytes.
void* cuda_scratch(Backend* be, size_t bytes);

// The scratch bytes of each op family that takes scratch (the op's own call
// to cuda_scratch uses the same function, so the reservation cannot drift).
size_t cuda_attention_scratch_bytes(int B, int T, int NH);
size_t cuda_encoder_scratch_bytes(int N);
size_t cuda_norm_scratch_bytes(Backend* be, int N, int C);  // layernorm and RMSNorm backward
size_t cuda_reduce_scratch_bytes(int N, int C);
size_t cuda_matmul_scratch_bytes(int widest);  // an epilogue's bias gradient (matmul.cu)

// Checks the last launch; every LAUNCH is followed by it.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// The most blocks grid_for gives (65535 * 4: enough to fill any GPU many
// times over). Every kernel launched through grid_for must therefore loop
// (grid-stride) over its items: the grid may cover only part of them. The CPU
// harness lowers the cap with CUDA_SIM_MAX_GRID so that its tests reach the
// loops' later rounds at small shapes (tests/gpu/test_gpu_grid.c).
#define GRID_FOR_MAX_BLOCKS 262140u
#ifdef CUDA_SIM
unsigned cuda_sim_max_grid(unsigned cap);  // tests/cuda_sim/runtime.cpp
#else
static inline unsigned cuda_sim_max_grid(unsigned cap) { return cap; }
#endif

// Blocks for a grid-stride loop over n items with `threads` per block and
// `per_thread` items each; at least 1, at most GRID_FOR_MAX_BLOCKS.
static inline unsigned grid_for(size_t n, int threads, int per_thread) {
    size_t blocks = ceil_div(n ? n : 1, (size_t)threads * per_thread);
    size_t cap = cuda_sim_max_grid(GRID_FOR_MAX_BLOCKS);
    return (unsigned)(blocks < cap ? blocks : cap);
}

// A grid's y and z extents are at most 65535 (x: 2^31 - 1). Launches that put
// a shape on y (B * NH heads, row tiles) check it here and stop with the op's
// name instead of failing to launch.
static inline unsigned grid_y(size_t n, const char* op) {
    if (n > 65535) fatal("%s: %zu blocks along grid y, more than CUDA's 65535: lower --micro-batch", op, n);
    return (unsigned)(n ? n : 1);
}

// ---- ops (one family per file) --------------------------------------------------------------------
void cuda_convert(Backend* be, void* dst, DType dst_type, const void* src, DType src_type, size_t n);

void cuda_encoder_forward(Backend* be, void* out, const int32_t* tokens, const void* wte,
                          const void* wpe, int B, int T, int C);
void cuda_encoder_backward(Backend* be, void* dwte, void* dwpe, const void* dout,
                           const int32_t* tokens, int B, int T, int C);

void cuda_layernorm_forward(Backend* be, void* out, float* mean, float* rstd, const void* inp,
                            const void* w, const void* b, int N, int C, float* amax);
void cuda_residual_layernorm_forward(Backend* be, void* residual, void* out, float* mean,
                                     float* rstd, const void* a, const void* b, const void* w,
                                     const void* bias, int N, int C, float* amax);
void cuda_layernorm_backward(Backend* be, void* dinp, void* dw, void* db, const void* dout,
                             const void* inp, const void* w, const float* mean, const float* rstd,
                             int N, int C, float* amax);

void cuda_matmul_forward(Backend* be, void* out, void* pre_gelu, const void* inp,
                         const void* weight, const void* bias, int N, int C, int OC);
void cuda_matmul_backward(Backend* be, void* dinp, void* dweight, void* dbias, const void* dout,
                          const void* inp, const void* weight, int N, int C, int OC);
void cuda_matmul_backward_dgelu(Backend* be, void* dinp, void* dbias, const void* dout, const void* pre_gelu,
                                const void* weight, int N, int C, int OC, float* amax);
// Column sums of x (N, C) added into out (C): deterministic (fixed row chunks
// reduced in order). Shared by matmul's dbias.
void cuda_column_sum_add(Backend* be, void* out, const void* x, int N, int C);
void cuda_matmul_init(Backend* be);
// TRAIN_GPT_SYNC_CHECK=1 / TRAIN_GPT_OP_PROFILE=1: wraps every op of be's table (op_watch.cu).
void cuda_op_watch_install(Backend* be);
void cuda_matmul_destroy(Backend* be);

void cuda_gelu_forward(Backend* be, void* out, const void* inp, size_t n, float* amax);
void cuda_gelu_backward(Backend* be, void* dinp, const void* inp, const void* dout, size_t n, float* amax);

void cuda_attention_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T,
                            int NH, int NKV, int HS);
void cuda_attention_backward(Backend* be, void* dqkv, const void* dout, const void* qkv,
                             const void* out, const float* lse, int B, int T, int NH, int NKV, int HS);

void cuda_rmsnorm_forward(Backend* be, void* out, float* rstd, const void* inp, const void* w, int N, int C,
                          float eps, float* amax);
void cuda_residual_rmsnorm_forward(Backend* be, void* residual, void* out, float* rstd, const void* a, const void* b,
                                   const void* w, int N, int C, float eps, float* amax);
void cuda_rmsnorm_backward(Backend* be, void* dinp, void* dw, const void* dout, const void* inp, const void* w,
                           const float* rstd, int N, int C, float* amax);
void cuda_rope_forward(Backend* be, void* qkv, const float* freqs, int B, int T, int NH, int NKV, int HS);
void cuda_rope_backward(Backend* be, void* dqkv, const float* freqs, int B, int T, int NH, int NKV, int HS);
void cuda_swiglu_forward(Backend* be, void* out, const void* inp, int N, int H, float* amax);
void cuda_swiglu_backward(Backend* be, void* dinp, const void* inp, const void* dout, int N, int H, float* amax);

void cuda_cross_entropy(Backend* be, float* losses, void* logits, const int32_t* targets, int N,
                        int V, int Vp, float dloss);

// out[c] += sum over b < blocks of partial[b * stride + c], c < C, in a fixed
// order (out has the backend's dtype): the second pass of every deterministic
// column reduction (matmul dbias).
void cuda_reduce_partials_add(Backend* be, void* out, const float* partial, int blocks, size_t stride, int C);
void cuda_sum(Backend* be, float* out, const float* x, size_t n, int accumulate);
void cuda_sum_squares(Backend* be, float* out, const void* x, size_t n, int accumulate);
void cuda_sum_squares_f32(Backend* be, float* out, const float* x, size_t n, int accumulate);
void cuda_accumulate_f32(Backend* be, float* acc, const void* x, size_t n, int round_bf16);

void cuda_adamw(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                size_t n, const AdamWParams* p);
void cuda_adamw_tensors(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                        const AdamWTensor* t, int n, const AdamWParams* p);

// FP8 (fp8.cu; the GEMMs in matmul.cu).
void cuda_amax(Backend* be, float* amax, const void* x, size_t n);
void cuda_fp8_amax_fold(Backend* be, float* acc, const float* amax, size_t n);
void cuda_fp8_quantize(Backend* be, void* q, void* qt, DType fmt, const void* x, int rows, int cols,
                       const float* amax, float* scale, float* scale_inv);
void cuda_fp8_update_scales(Backend* be, float* scale, float* scale_inv, float* history, int len, size_t ld,
                            int pos, size_t n, DType fmt, int margin);
void cuda_fp8_matmul_forward(Backend* be, void* out, const Fp8Tensor* inp, const Fp8Tensor* weight,
                             const void* bias, int N, int C, int OC);
void cuda_fp8_matmul_backward(Backend* be, void* dinp, void* dweight, const Fp8Tensor* dout,
                              const Fp8Tensor* inp, const Fp8Tensor* weight, int N, int C, int OC);
void cuda_fp8_block_matmul(Backend* be, void* out, const void* a, int a_trans, Fp8BlockFormat fa, const void* b,
                           int b_trans, Fp8BlockFormat fb, const void* bias, int M, int N, int K, float beta);
size_t cuda_fp8_block_matmul_buffer_bytes(int M, int N, int K, Fp8BlockFormat fa, Fp8BlockFormat fb);
void cuda_fp8_block_bias_rows(Backend* be, void* out, const void* bias, int M, int N);  // fp8_block.cu
// FP8 GEMM layouts by compute capability: none before 8.9 (Ada); TN only on
// 8.9, 9.x (Hopper) and 12.x; any layout on 10.x and 11.x (Blackwell) and
// from 13.0, as TransformerEngine's nvte_is_non_tn_fp8_gemm_supported.
Fp8Support cuda_fp8_support_for(int major, int minor);
