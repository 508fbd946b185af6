// ops.h: the contract every compute backend implements.
//
// Model code (llm/model/, llm/arch/) calls only what is declared here and never knows
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
//   NKV key/value heads; HS head size (C/NH for GPT-2); V real vocabulary;
//   Vp padded vocabulary (V <= Vp).
// - "+=" in a comment means the op accumulates into that output (gradient
//   accumulation); otherwise the output is overwritten.
// - Results are deterministic: the same inputs give the same bits on every
//   call (no reductions whose order depends on scheduling).
// - An op may take temporary workspace through be->alloc; it counts toward
//   the backend's peak bytes (the CPU attention keeps O(T) per thread).
// - `float* amax` arguments (FP8 training, llm/fp8/fp8.h) may be NULL; otherwise
//   the op also does *amax = max(*amax, max |y|) over the values y it writes
//   to the named output, as stored (after rounding to the activation dtype),
//   a NaN anywhere making it NaN. The maximum needs no order, so it costs
//   no determinism.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/fp4_block.h"
#include "kernels/fp8_block.h"
#include "llm/util/util.h"

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
// Whether an FP8 dtype is E4M3 (else E5M2); fatal, naming `backend`, for any other dtype.
int dtype_fp8_is_e4m3(DType t, const char* backend);

// Hyperparameters of one AdamW update (PyTorch's decoupled weight decay).
typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;  // 0 for tensors that are not decayed
    float grad_scale;    // multiplies every gradient first (clipping, averaging)
    int step;            // 1-based, for bias correction
    uint64_t seed;       // stochastic rounding of 16-bit parameters: element i
    uint64_t index_base; // draws from (seed, index_base + i), an element index (the
                         // model's: the position in the unpadded parameter order,
                         // the same at any world size), so the bits do not depend
                         // on how the range was split into calls or ranks
    float* amax;         // NULL, or the amax (see above) of the parameters written
    DType moment_dtype;  // m and v: DTYPE_F32 (0, the default) or DTYPE_BF16. BF16
                         // moments are loaded, updated in FP32 and stored rounded
                         // stochastically with 16 bits each of the same draw
                         // rng_u64(seed, index_base + i) as the parameters (those take
                         // bits 48-63, m bits 0-15, v bits 16-31), so the rounding is a
                         // pure function of (seed, element index), the same on every backend
    int grads_f32;       // grads are FP32 whatever the activation dtype (--grad-dtype fp32
                         // in a BF16 run; adamw_tensors only)
} AdamWParams;

// One tensor of an AdamW step over the flat buffers (Backend.adamw_tensors):
// what would otherwise be one adamw call per tensor.
typedef struct {
    size_t param, grad, state;  // its first element (not byte) in params, in grads, and in master / m / v
    size_t count;
    uint64_t index_base;        // AdamWParams.index_base of its first element
    float weight_decay;         // its own (0: none)
    float* amax;                // AdamWParams.amax: NULL or its FP8 amax
} AdamWTensor;

// An FP8 GEMM operand: FP8 codes of a row-major (rows, cols) matrix and/or
// its transpose, and the multiplier that dequantises them (1 / the scale the
// values were multiplied by before rounding, in backend memory).
typedef struct {
    const void* q;           // (rows, cols), or NULL where the op does not need it
    const void* qt;          // (cols, rows), or NULL (only FP8_TN_ONLY backends need it)
    DType type;              // DTYPE_FP8_E4M3 or DTYPE_FP8_E5M2
    const float* scale_inv;  // one float
} Fp8Tensor;

typedef struct Backend Backend;

// What a backend's FP8 GEMMs can do. Hopper and Ada take FP8 operands only in
// the "TN" layout (A transposed, B not, in cuBLAS's column-major terms), so
// two of a linear layer's three GEMMs need transposed copies; the CPU and
// Blackwell read the plain layouts.
typedef enum { FP8_NONE = 0, FP8_ANY_LAYOUT = 1, FP8_TN_ONLY = 2 } Fp8Support;

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
    // Optional (NULL: nothing to do). Makes room now, at start-up, for the
    // temporary memory the ops take at these shapes (B*T rows of at most
    // `widest` channels in a linear layer with bias, C in layernorm, NH query
    // and NKV key/value heads of C / NH channels: cuDNN attention's workspace
    // too), so that no training step allocates device memory (a cudaMalloc
    // or cudaFree inside a step would stall the stream).
    void (*reserve_scratch)(Backend* be, int B, int T, int C, int widest, int NH, int NKV);
    // Optional (NULL: this backend cannot capture; --cuda-graphs on is
    // refused). CUDA graphs of the compute stream (llm/step_graph.c):
    // between graph_begin and graph_end the ops' work (and what other streams
    // join through events) is recorded, not run, with its arguments as they
    // are now and its pointers as pointers; graph_end returns the
    // instantiated graph, graph_launch runs it on the compute stream. No op
    // may allocate, free or wait for the device in between (CUDA refuses it).
    void (*graph_begin)(Backend* be);
    void* (*graph_end)(Backend* be);
    void (*graph_launch)(Backend* be, void* graph);
    void (*graph_free)(Backend* be, void* graph);

    // ---- conversions ----------------------------------------------------------
    // dst[i] = src[i] converted (round-to-nearest-even into 16-bit types).
    void (*convert)(Backend* be, void* dst, DType dst_type, const void* src, DType src_type, size_t n);

    // ---- embedding ------------------------------------------------------------
    // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe NULL: no position
    // embeddings, as in Llama, whose positions are RoPE's)
    void (*encoder_forward)(Backend* be, void* out, const int32_t* tokens, const void* wte,
                            const void* wpe, int B, int T, int C);
    // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (skipped if NULL)
    void (*encoder_backward)(Backend* be, void* dwte, void* dwpe, const void* dout,
                             const int32_t* tokens, int B, int T, int C);

    // ---- layernorm ------------------------------------------------------------
    // out = (inp - mean) * rstd * w + b over the last dimension; mean and rstd (N) saved.
    void (*layernorm_forward)(Backend* be, void* out, float* mean, float* rstd, const void* inp,
                              const void* w, const void* b, int N, int C, float* amax);
    // residual = a + b; out = layernorm(residual). The residual stream and the
    // next layer's input in one pass. residual may alias a. out, mean and
    // rstd must be bit for bit what layernorm_forward gives for `residual`:
    // activation recompute (llm/recompute.h) redoes them that way.
    // amax: of out.
    void (*residual_layernorm_forward)(Backend* be, void* residual, void* out, float* mean,
                                       float* rstd, const void* a, const void* b, const void* w,
                                       const void* bias, int N, int C, float* amax);
    // dinp += ..., dw += ..., db += ... (dinp accumulates: it is the residual gradient).
    // amax: of dinp after the accumulation.
    void (*layernorm_backward)(Backend* be, void* dinp, void* dw, void* db, const void* dout,
                               const void* inp, const void* w, const float* mean,
                               const float* rstd, int N, int C, float* amax);

    // ---- matmul -----------------------------------------------------------------
    // out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC, may be NULL).
    // If pre_gelu is not NULL: pre_gelu = that result and out = its GELU. The
    // backend may apply the GELU in the GEMM's epilogue (CUDA: cuBLASLt's
    // GELU_AUX_BIAS) to the FP32 value before it is rounded, with its own
    // GELU: so out need NOT be the bits gelu_forward gives for pre_gelu (it
    // was required before the epilogue; the rounding step and cuBLASLt's tanh
    // make that impossible with it). It is the same bits on every call with
    // the same inputs. A caller that recomputes the GELU output later from
    // pre_gelu must therefore not use this form in the forward: it calls
    // matmul_forward without pre_gelu and then gelu_forward, in the forward
    // and in the recompute alike (llm/arch/gpt2.c does, per layer).
    void (*matmul_forward)(Backend* be, void* out, void* pre_gelu, const void* inp,
                           const void* weight, const void* bias, int N, int C, int OC);
    // dinp (N,C) = dout @ weight (skipped if dinp is NULL);
    // dweight (OC,C) += dout^T @ inp (skipped if NULL; inp may then be NULL);
    // dbias (OC) += column sums of dout (skipped if NULL).
    // dinp and dweight are the same bits whether computed alone or with the
    // others; dbias is the same bits on every call that also asks for dweight
    // (CUDA sums it in dweight's GEMM epilogue, cuBLASLt's BGRADB, then) and
    // on every call that does not, but the two may differ in rounding.
    void (*matmul_backward)(Backend* be, void* dinp, void* dweight, void* dbias, const void* dout,
                            const void* inp, const void* weight, int N, int C, int OC);
    // The GEMM that produces a GELU's input gradient, fused with the GELU's
    // backward: dinp (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(pre_gelu
    // (N,C)), and dbias (C, may be NULL) += column sums of dinp: the bias
    // gradient of the layer that produced pre_gelu. What matmul_backward's
    // dinp, gelu_backward and matmul_backward's dbias give, except that the
    // backend may do it in the GEMM's epilogue (CUDA: cuBLASLt's DGELU_BGRAD),
    // where the product is not rounded before the multiply: the same bits on
    // every call, not necessarily the three ops' bits. amax: of dinp.
    void (*matmul_backward_dgelu)(Backend* be, void* dinp, void* dbias, const void* dout, const void* pre_gelu,
                                  const void* weight, int N, int C, int OC, float* amax);
    // > 0: the row count R at which the products above are the same bits
    // however the N rows are cut into calls, provided every cut falls on a
    // multiple of R and dweight is accumulated by one call per R rows, in row
    // order (the CPU: its GEMM row tile). The LM head then adds its weight
    // gradient R rows at a time, so its results do not depend on its chunk
    // count. 0: no such promise; the head adds it once per chunk.
    int gemm_row_block;

    // ---- gelu (tanh approximation) --------------------------------------------------
    void (*gelu_forward)(Backend* be, void* out, const void* inp, size_t n, float* amax);
    // dinp = dout * gelu'(inp); dinp may alias dout.
    void (*gelu_backward)(Backend* be, void* dinp, const void* inp, const void* dout, size_t n, float* amax);

    // ---- causal self-attention (multi-head or grouped-query) ----------------------------
    // NH query heads share NKV key/value heads (NH % NKV == 0): query head h
    // reads kv head h / (NH / NKV). GPT-2 has NKV = NH. HS is the head size.
    // qkv (B, T, NH + 2*NKV, HS): each token's NH query heads, then its NKV
    // key heads, then its NKV value heads -> out (B, T, NH, HS); lse (B, NH, T)
    // = natural-log log-sum-exp of each query's scores scaled by 1/sqrt(HS),
    // the only softmax state kept for backward. No T x T matrix is ever stored.
    void (*attention_forward)(Backend* be, void* out, float* lse, const void* qkv, int B, int T,
                              int NH, int NKV, int HS);
    // dqkv (qkv's layout) from dout (B, T, NH, HS), recomputing the scores from
    // qkv and lse. A key head's gradient sums over the NH / NKV query heads
    // that read it, in a fixed order.
    void (*attention_backward)(Backend* be, void* dqkv, const void* dout, const void* qkv,
                               const void* out, const float* lse, int B, int T, int NH, int NKV,
                               int HS);
    // Query-offset attention for context parallelism (llm/model/context.c),
    // NULL where the backend has none (CUDA: a later piece of work, so the
    // CUDA backend refuses --context-parallel > 1). The T queries of qkv
    // (B, T, NH + 2*NKV, HS; only its query heads are read) sit at positions
    // q0..q0+T-1 of their sequence; kv (B, Tkv, 2*NKV, HS) holds the keys (NKV
    // heads) then values of every token of the sequence in order (Tkv >= q0 + T);
    // query i sees keys 0..q0+i. out (B, T, NH, HS), lse (B, NH, T) as above.
    void (*attention_forward_chunk)(Backend* be, void* out, float* lse, const void* qkv, const void* kv, int B,
                                    int T, int Tkv, int q0, int NH, int NKV, int HS);
    // Its backward: dqkv's query heads = dq (its key/value heads untouched);
    // dkv (kv's layout) += dK, dV of keys 0..q0+T-1 (the rest untouched).
    void (*attention_backward_chunk)(Backend* be, void* dqkv, void* dkv, const void* dout, const void* qkv,
                                     const void* kv, const void* out, const float* lse, int B, int T, int Tkv,
                                     int q0, int NH, int NKV, int HS);

    // ---- Llama block ops ------------------------------------------------------------------
    // RMSNorm: out = inp * rstd * w over the last dimension, rstd (N) =
    // 1 / sqrt(mean(inp^2) + eps) saved for backward. amax: of out.
    void (*rmsnorm_forward)(Backend* be, void* out, float* rstd, const void* inp, const void* w,
                            int N, int C, float eps, float* amax);
    // residual = a + b; out = rmsnorm(residual), bit for bit what
    // rmsnorm_forward gives for `residual` (recompute redoes it that way).
    // residual may alias a. amax: of out.
    void (*residual_rmsnorm_forward)(Backend* be, void* residual, void* out, float* rstd,
                                     const void* a, const void* b, const void* w, int N, int C,
                                     float eps, float* amax);
    // dinp += ..., dw += ... (dinp accumulates: it is the residual gradient).
    // amax: of dinp after the accumulation.
    void (*rmsnorm_backward)(Backend* be, void* dinp, void* dw, const void* dout, const void* inp,
                             const void* w, const float* rstd, int N, int C, float* amax);
    // Rotary position embedding, in place on the NH query and NKV key heads
    // of qkv (B, T, NH + 2*NKV, HS) (value heads untouched). freqs (T, HS/2, 2)
    // FP32 holds cos and sin of the angle of token t and pair i (rope_table);
    // pair i of a head is (x[i], x[i + HS/2]) (Hugging Face's rotate_half
    // convention): x[i] <- x[i] cos - x[i+HS/2] sin, x[i+HS/2] <- x[i] sin +
    // x[i+HS/2] cos. HS must be even.
    void (*rope_forward)(Backend* be, void* qkv, const float* freqs, int B, int T, int NH, int NKV,
                         int HS);
    // The transpose (rotation by minus the angle), in place on dqkv's q and k heads.
    void (*rope_backward)(Backend* be, void* dqkv, const float* freqs, int B, int T, int NH,
                          int NKV, int HS);
    // SwiGLU: inp (N, 2H) holds the gate in columns 0..H-1 and the up
    // projection in H..2H-1; out (N, H) = silu(gate) * up, silu(x) = x * sigmoid(x).
    // amax: of out.
    void (*swiglu_forward)(Backend* be, void* out, const void* inp, int N, int H, float* amax);
    // dinp (N, 2H) = the gradients of gate and up from dout (N, H). amax: of dinp.
    void (*swiglu_backward)(Backend* be, void* dinp, const void* inp, const void* dout, int N, int H,
                            float* amax);

    // ---- classifier -------------------------------------------------------------------
    // losses[i] = -log softmax(logits[i, :V])[targets[i]] for each of the N rows.
    // If dloss != 0, logits[i,:] is overwritten with its gradient
    // dloss * (softmax - onehot(target)), and the padded columns V..Vp with 0.
    // A target of -1 is a pad (context parallelism pads sequences to a
    // multiple of its chunks): its loss is 0 and its gradient row all 0.
    void (*cross_entropy)(Backend* be, float* losses, void* logits, const int32_t* targets, int N,
                          int V, int Vp, float dloss);

    // ---- reductions (results land in backend memory; read them with to_host) -----------------
    // *out (+)= sum of x[i], i < n. `accumulate` selects += over =.
    void (*sum)(Backend* be, float* out, const float* x, size_t n, int accumulate);
    // *out (+)= sum of x[i]^2 over an activation-dtype buffer.
    void (*sum_squares)(Backend* be, float* out, const void* x, size_t n, int accumulate);
    // The same over an FP32 buffer whatever the activation dtype (FP32 gradients of a BF16 run).
    void (*sum_squares_f32)(Backend* be, float* out, const float* x, size_t n, int accumulate);
    // acc[i] += x[i], i < n: one micro-step's gradients (activation dtype) added
    // into an FP32 accumulator (--grad-dtype fp32). round_bf16: acc[i] =
    // bf16(acc[i] + bf16(x[i])) instead, in round-to-nearest-even: a BF16
    // accumulator emulated in FP32 storage (--grad-dtype bf16 on an FP32 run).
    void (*accumulate_f32)(Backend* be, float* acc, const void* x, size_t n, int round_bf16);

    // ---- optimizer --------------------------------------------------------------------
    // AdamW on n elements. `master` holds the FP32 weights when params are
    // 16-bit (params are then written from it, rounded stochastically with
    // p->seed); with FP32 params master is NULL and params are updated in place.
    // m and v are FP32 or BF16 (p->moment_dtype).
    void (*adamw)(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                  size_t n, const AdamWParams* p);
    // adamw on each of n tensors of the same buffers, with p's lr, betas, eps,
    // grad_scale, step and seed and the tensor's offsets, weight decay, index
    // base and amax (p's own three are ignored): bit for bit the results of n
    // adamw calls, in one launch on the GPU (a few for thousands of tensors).
    void (*adamw_tensors)(Backend* be, void* params, float* master, const void* grads, void* m, void* v,
                          const AdamWTensor* t, int n, const AdamWParams* p);

    // ---- FP8 (llm/fp8/fp8.h keeps the scaling state; formats, rounding and scale
    // rules: kernels/fp8_format.h) ------------------------------------------------------
    // FP8_TN_ONLY: callers pass the transposed copies (Fp8Tensor.qt) that
    // fp8_matmul_backward names. FP8_NONE: the FP8 ops must not be called.
    Fp8Support fp8_support;
    // *amax = max(*amax, max |x[i]|), i < n, over an activation-dtype buffer
    // (for tensors whose producer does not compute it).
    void (*amax)(Backend* be, float* amax, const void* x, size_t n);
    // acc[i] = max(acc[i], amax[i]), i < n, over FP32 amaxes (NaN stays NaN):
    // a pass's amaxes folded into a step's (delayed scaling).
    void (*fp8_amax_fold)(Backend* be, float* acc, const float* amax, size_t n);
    // q (rows, cols) and/or qt (cols, rows), either may be NULL, = FP8 (type
    // fmt) of x (rows, cols; activation dtype) * s: the product in FP32,
    // rounded to nearest even, saturating at +-max (fp8_quantize_value). With
    // amax NULL, s = *scale (delayed scaling); otherwise s is
    // fp8_scale_from_amax(*amax, max of fmt) (current scaling), stored to
    // *scale and 1/s to *scale_inv.
    void (*fp8_quantize)(Backend* be, void* q, void* qt, DType fmt, const void* x, int rows, int cols,
                         const float* amax, float* scale, float* scale_inv);
    // Delayed scaling after an applied optimizer step, for n tensors of format
    // fmt: history is (len, ld) row-major, row `pos` this step's amaxes. Per
    // tensor i: a non-finite history[pos][i] becomes 0; the window is the max
    // of column i; scale[i] is updated by fp8_delayed_scale (kept when the
    // window is 0) and scale_inv[i] = 1 / scale[i] with it.
    void (*fp8_update_scales)(Backend* be, float* scale, float* scale_inv, float* history, int len, size_t ld,
                              int pos, size_t n, DType fmt, int margin);
    // out (N,OC) = inp (N,C) @ weight (OC,C)^T, dequantised (times both
    // scale_inv), + bias (OC, activation dtype, may be NULL); out in the
    // activation dtype; FP32 accumulation. inp and weight E4M3, plain layouts.
    void (*fp8_matmul_forward)(Backend* be, void* out, const Fp8Tensor* inp, const Fp8Tensor* weight,
                               const void* bias, int N, int C, int OC);
    // dinp (N,C) = dout (N,OC) @ weight (OC,C) (skipped if dinp is NULL);
    // dweight (OC,C) += dout^T @ inp (N,C) (skipped if NULL). dout E5M2,
    // weight and inp E4M3. A backend with FP8_TN_ONLY reads weight->qt for
    // dinp and dout->qt, inp->qt for dweight (dout->q for dinp); the others
    // read the plain layouts. dinp may alias a buffer inp was quantised from.
    // N, C and OC must be multiples of 16 (FP8 tensor-core GEMMs need it).
    void (*fp8_matmul_backward)(Backend* be, void* dinp, void* dweight, const Fp8Tensor* dout,
                                const Fp8Tensor* inp, const Fp8Tensor* weight, int N, int C, int OC);
    // Block-scaled FP8 GEMM (recipes blockwise and mxfp8, kernels/fp8_block.h),
    // or NULL where the backend has none: out (M,N) = op(a) (M,K) @ op(b) (N,K)^T
    // + beta * out (beta 0 or 1) + bias (N, may be NULL), FP32 accumulation.
    // op(a) is a (M,K) as stored, or with a_trans the transpose of a stored
    // (K,M); likewise b. Each operand is quantised here from its
    // activation-dtype source in its format, blocks along K: a column-wise
    // copy comes from the source, never from the row-wise codes.
    void (*fp8_block_matmul)(Backend* be, void* out, const void* a, int a_trans, Fp8BlockFormat fa, const void* b,
                             int b_trans, Fp8BlockFormat fb, const void* bias, int M, int N, int K, float beta);
    // NVFP4 GEMM (recipe nvfp4, kernels/fp4_block.h), or NULL where the
    // backend has none: as fp8_block_matmul, each operand quantised here from
    // its source in its Nvfp4Format (Hadamard transform, stochastic rounding).
    void (*nvfp4_matmul)(Backend* be, void* out, const void* a, int a_trans, Nvfp4Format fa, const void* b,
                         int b_trans, Nvfp4Format fb, const void* bias, int M, int N, int K, float beta);
};

// Backend constructors. Each exits with a clear error if its device is unusable.
Backend* cpu_backend_create(DType dtype, int num_threads);
// The most scratch one CPU attention call allocates (backward's, which is
// larger than forward's) with `threads` OpenMP threads: the planner bills it.
size_t cpu_attention_scratch_bytes(int T, int HS, int threads);
// The most scratch one CPU FP8 GEMM call of a (N, C) -> (N, OC) linear layer
// allocates (its operands decoded to FP32): the planner bills it.
size_t cpu_fp8_matmul_scratch_bytes(int N, int C, int OC);
// The same for one block-scaled GEMM (M,K) x (N,K)^T.
size_t cpu_fp8_block_matmul_scratch_bytes(int M, int N, int K);
// The same for one NVFP4 GEMM (M,K) x (N,K)^T.
size_t cpu_nvfp4_matmul_scratch_bytes(int M, int N, int K);
// Llama 3.1's long-context frequency scaling of RoPE (factor 0: none).
typedef struct {
    float factor;            // 8 in Llama 3.1
    float low_freq_factor;   // 1
    float high_freq_factor;  // 4
    int original_max_pos;    // 8192
} RopeScaling;
// freqs (T, HS/2, 2) = cos and sin of t * theta^(-2i/HS) (scaled as `scaling`
// says, may be NULL), computed in double on the host: the table rope_forward
// takes, the same bits for every backend. Defined in kernels/cpu/rope.c.
void rope_table(float* freqs, int T, int HS, double theta, const RopeScaling* scaling);

EXTERN_C_END
