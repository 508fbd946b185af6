// ops.h: the contract every compute backend implements.
//
// Model code (llm/gpt.c) calls only what is declared here and never knows
// whether the CPU reference backend or the CUDA backend runs. A backend is a
// table of function pointers plus its private state; `be->op(be, ...)`.
//
// Conventions every op follows:
// - Pointers are backend memory (host memory for the CPU backend, device
//   memory for CUDA), obtained from be->alloc.
// - Buffers typed `void*` hold elements of the backend's activation dtype
//   (be->dtype: FP32 or BF16); `float*` buffers are always FP32; token ids
//   are int32.
// - Shapes: N = B*T rows; C channels; OC output channels; NH heads;
//   HS = C/NH head size; V real vocabulary; Vp padded vocabulary (V <= Vp).
// - "+=" in a comment means the op accumulates into that output (gradient
//   accumulation); otherwise the output is overwritten.
// - Results are deterministic: the same inputs give the same bits on every
//   call (no reductions whose order depends on scheduling).
// - An op may take temporary workspace through be->alloc; it counts toward
//   the backend's peak bytes (the CPU attention keeps O(T) per thread).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util.h"

EXTERN_C_BEGIN

typedef enum {
    DTYPE_F32 = 0,
    DTYPE_BF16 = 1,
    DTYPE_FP8_E4M3 = 2,
    DTYPE_FP8_E5M2 = 3,
    DTYPE_I32 = 4,
} DType;

size_t dtype_size(DType t);
const char* dtype_name(DType t);

// Hyperparameters of one AdamW update (PyTorch's decoupled weight decay).
typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;  // 0 for tensors that are not decayed
    float grad_scale;    // multiplies every gradient first (clipping, averaging)
    int step;            // 1-based, for bias correction
    uint64_t seed;       // stochastic rounding of 16-bit parameters: element i
    uint64_t index_base; // draws from (seed, index_base + i), the flat index, so
                         // the bits do not depend on how the range was split
} AdamWParams;

typedef struct Backend Backend;

struct Backend {
    const char* name;  // "cpu" or "cuda"
    DType dtype;       // activation / parameter / gradient dtype
    void* impl;        // backend-private state

    // ---- memory -------------------------------------------------------------
    void* (*alloc)(Backend* be, size_t bytes, const char* what);  // fatal on failure
    void (*free)(Backend* be, void* p);
    void (*to_device)(Backend* be, void* dst, const void* host_src, size_t bytes);
    void (*to_host)(Backend* be, void* host_dst, const void* src, size_t bytes);
    void (*copy)(Backend* be, void* dst, const void* src, size_t bytes);
    void (*zero)(Backend* be, void* p, size_t bytes);
    void (*synchronize)(Backend* be);
    // Bytes currently allocated through alloc, and the peak since start.
    size_t (*allocated_bytes)(Backend* be);
    size_t (*peak_allocated_bytes)(Backend* be);
    void (*destroy)(Backend* be);
    // The backend's compute stream (a cudaStream_t for CUDA), so that
    // communication (NCCL) can order itself after the kernels; NULL on the CPU.
    void* (*native_stream)(Backend* be);

    // ---- conversions ----------------------------------------------------------
    // dst[i] = src[i] converted (round-to-nearest-even into 16-bit types).
    void (*convert)(Backend* be, void* dst, DType dst_type, const void* src, DType src_type, size_t n);

    // ---- embedding ------------------------------------------------------------
    // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
    void (*encoder_forward)(Backend* be, void* out, const int32_t* tokens, const void* wte,
                            const void* wpe, int B, int T, int C);
    // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]
    void (*encoder_backward)(Backend* be, void* dwte, void* dwpe, const void* dout,
                             const int32_t* tokens, int B, int T, int C);

    // ---- layernorm ------------------------------------------------------------
    // out = (inp - mean) * rstd * w + b over the last dimension; mean and rstd (N) saved.
    void (*layernorm_forward)(Backend* be, void* out, float* mean, float* rstd, const void* inp,
                              const void* w, const void* b, int N, int C);
    // residual = a + b; out = layernorm(residual). The residual stream and the
    // next layer's input in one pass. residual may alias a. out, mean and
    // rstd must be bit for bit what layernorm_forward gives for `residual`:
    // activation recompute (llm/recompute.h) redoes them that way.
    void (*residual_layernorm_forward)(Backend* be, void* residual, void* out, float* mean,
                                       float* rstd, const void* a, const void* b, const void* w,
                                       const void* bias, int N, int C);
    // dinp += ..., dw += ..., db += ... (dinp accumulates: it is the residual gradient)
    void (*layernorm_backward)(Backend* be, void* dinp, void* dw, void* db, const void* dout,
                               const void* inp, const void* w, const float* mean,
                               const float* rstd, int N, int C);

    // ---- matmul -----------------------------------------------------------------
    // out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC, may be NULL).
    // If pre_gelu is not NULL: pre_gelu = that result and out = gelu(pre_gelu),
    // bit for bit what gelu_forward gives (recompute redoes it that way).
    void (*matmul_forward)(Backend* be, void* out, void* pre_gelu, const void* inp,
                           const void* weight, const void* bias, int N, int C, int OC);
    // dinp (N,C) = dout @ weight (skipped if dinp is NULL);
    // dweight (OC,C) += dout^T @ inp (skipped if NULL; inp may then be NULL);
    // dbias (OC) += column sums of dout (skipped if NULL).
    // Each result is the same bits whether computed alone or with the others.
    void (*matmul_backward)(Backend* be, void* dinp, void* dweight, void* dbias, const void* dout,
                            const void* inp, const void* weight, int N, int C, int OC);

    // ---- gelu (tanh approximation) --------------------------------------------------
    void (*gelu_forward)(Backend* be, void* out, const void* inp, size_t n);
    // dinp = dout * gelu'(inp); dinp may alias dout.
    void (*gelu_backward)(Backend* be, void* dinp, const void* inp, const void* dout, size_t n);

    // ---- causal self-attention ---------------------------------------------------------
    // qkv (B,T,3,NH,HS) -> out (B,T,NH,HS); lse (B,NH,T) = log-sum-exp of each
    // query's scaled scores, the only softmax state kept for backward. No T x T
    // matrix is ever stored.
    void (*attention_forward)(Backend* be, void* out, float* lse, const void* qkv, int B, int T,
                              int C, int NH);
    // dqkv (B,T,3,NH,HS) from dout (B,T,C), recomputing the scores from qkv and lse.
    void (*attention_backward)(Backend* be, void* dqkv, const void* dout, const void* qkv,
                               const void* out, const float* lse, int B, int T, int C, int NH);

    // ---- classifier -------------------------------------------------------------------
    // losses[i] = -log softmax(logits[i, :V])[targets[i]] for each of the N rows.
    // If dloss != 0, logits[i,:] is overwritten with its gradient
    // dloss * (softmax - onehot(target)), and the padded columns V..Vp with 0.
    void (*cross_entropy)(Backend* be, float* losses, void* logits, const int32_t* targets, int N,
                          int V, int Vp, float dloss);

    // ---- reductions (results land in backend memory; read them with to_host) -----------------
    // *out (+)= sum of x[i], i < n. `accumulate` selects += over =.
    void (*sum)(Backend* be, float* out, const float* x, size_t n, int accumulate);
    // *out (+)= sum of x[i]^2 over an activation-dtype buffer.
    void (*sum_squares)(Backend* be, float* out, const void* x, size_t n, int accumulate);

    // ---- optimizer --------------------------------------------------------------------
    // AdamW on n elements. `master` holds the FP32 weights when params are
    // 16-bit (params are then written from it, rounded stochastically with
    // p->seed); with FP32 params master is NULL and params are updated in place.
    void (*adamw)(Backend* be, void* params, float* master, const void* grads, float* m, float* v,
                  size_t n, const AdamWParams* p);
};

// Backend constructors. Each exits with a clear error if its device is unusable.
Backend* cpu_backend_create(DType dtype, int num_threads);
// The most scratch one CPU attention call allocates (backward's, which is
// larger than forward's) with `threads` OpenMP threads: the planner bills it.
size_t cpu_attention_scratch_bytes(int T, int C, int NH, int threads);
// Defined only in builds with CUDA; returns the number of usable GPUs (0 without).
int cuda_device_count(void);

EXTERN_C_END
