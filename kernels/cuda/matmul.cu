// matmul.cu: the linear layer on the device through cuBLASLt.
//
// Row-major (N, C) @ (OC, C)^T is, read column-major, out^T (OC, N) =
// W (stored C x OC, transposed) @ inp (C x N): cuBLASLt's m = OC, n = N, k = C.
// Forward adds the bias in the epilogue; with pre_gelu it also applies the
// GELU there (GELU_AUX_BIAS: D = gelu(acc + bias), the aux matrix =
// acc + bias, the pre-activation backward reads). Backward: dinp = dout @ W
// with beta 0; dweight += dout^T @ inp with beta 1 (accumulating in place),
// with dbias summed in the same GEMM's epilogue (BGRADB: the column sums of
// the B operand, dout) into scratch and added into dbias; and
// matmul_backward_dgelu's dinp with DGELU_BGRAD (D = (dout @ W) * gelu'(aux),
// the bias vector = its column sums), which replaces a GEMM, a GELU backward
// pass and a bias-gradient pass over the (N, 4C) activation gradient.
//
// Each epilogue is asked of the heuristic once per shape; where cuBLASLt has
// no algorithm for it (an aux leading dimension that is not a multiple of 8,
// pointers less than 16-byte aligned, an FP8 aux), the
// answer is cached and the op runs our kernels instead (gelu.cu, reduce.cu),
// so a shape always takes the same path and gives the same bits. The fused
// GELU is not gelu_forward's bits (the epilogue rounds once, after its own
// tanh), which is why ops.h lets a caller that recomputes the GELU output
// call the unfused form both times. cublasLt.h gives a bias gradient the
// type of D (BF16 in a BF16 model), so the epilogue's sum is rounded to
// BF16 once before it is added into dbias (the column-sum kernels add the
// FP32 sum): at most one more BF16 rounding of each bias gradient.
//
// All products use CUBLAS_COMPUTE_32F: FP32 accumulation for BF16 inputs, and
// true FP32 (no TF32) for FP32 inputs. The heuristic's choice is cached per
// shape: the key is every descriptor parameter plus the pointer alignments,
// which the heuristic also depends on.
//
// FP8 (fp8_matmul_forward/backward): E4M3 x E4M3 forward, E5M2 gradient x
// E4M3 weight for dinp, E4M3 input x E5M2 gradient for dweight; BF16 outputs
// (and bias), FP32 accumulation; the operands' scale_inv go to cuBLASLt's
// A/B scale pointers, so D = scale_inv_A * scale_inv_B * (A @ B). Fast
// accumulation (no periodic promotion of the tensor cores' partial sums to
// FP32) only in the forward GEMM, as TransformerEngine, torchao and nanochat
// do: the gradients are the precision-sensitive part. On Hopper (FP8_TN_ONLY)
// every FP8 GEMM must read A transposed and B not, so dinp reads W^T and
// dweight X^T and dY^T (copies the caller made in the same cast pass); on
// Blackwell dinp is NN and dweight NT on the plain layouts.
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.cuh"

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)

#define LT_CHECK(call)                                                                            \
    do {                                                                                          \
        cublasStatus_t st_ = (call);                                                              \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                         \
            fatal("cuBLASLt error %d at %s:%d (%s)", (int)st_, __FILE__, __LINE__, #call);        \
    } while (0)

struct GemmPlan {
    int key[18];
    int found;  // 0: cuBLASLt has no algorithm (only an optional Gemm may get this far)
    cublasLtMatmulAlgo_t algo;
};

// One GEMM in column-major terms: D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * D,
// then the epilogue (bias of length m).
typedef struct {
    int transa, transb, m, n, k, lda, ldb, ldd;
    const void *A, *B;
    void* D;
    float beta;
    cublasLtEpilogue_t epilogue;
    const void* bias;
    void* aux;                 // the GELU epilogues' pre-activation, (m, n) with leading dimension ldd
    int optional;              // 1: return 0 where cuBLASLt has no algorithm (the caller falls back)
    // FP8 operands (0: A and B have the backend's dtype): their types, the
    // dequantisation multipliers, and fast accumulation.
    cudaDataType_t type_a, type_b;
    const float *scale_a, *scale_b;
    int fast_accum;
    // Block-scaled FP8 (0: per-tensor scalars): cublasLtMatmulMatrixScale_t of A and B, whose
    // scale_a / scale_b then point at the block scales in that mode's layout (fp8_block.cu).
    int scale_mode_a, scale_mode_b;
} Gemm;

void cuda_matmul_init(Backend* be) {
    CudaState* s = cuda_state(be);
    LT_CHECK(cublasLtCreate(&s->lt));
    s->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    s->lt_workspace = be->alloc(be, s->lt_workspace_bytes, "cuBLASLt workspace");
}

void cuda_matmul_destroy(Backend* be) {
    CudaState* s = cuda_state(be);
    if (s->lt_workspace) be->free(be, s->lt_workspace);
    s->lt_workspace = NULL;
    if (s->fp8_block_buf) be->free(be, s->fp8_block_buf);
    s->fp8_block_buf = NULL;
    s->fp8_block_bytes = 0;
    LT_CHECK(cublasLtDestroy(s->lt));
    free(s->plans);
    s->plans = NULL;
    s->plan_count = s->plan_cap = 0;
}

// Largest power of two (up to 256) dividing the address; 256 for NULL.
static int alignment_of(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int al = 1;
    while (al < 256 && a % (2 * al) == 0) al *= 2;
    return al;
}

static void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t size) {
    LT_CHECK(cublasLtMatmulDescSetAttribute(d, a, v, size));
}

// Runs g; returns 1, or 0 for an optional Gemm cuBLASLt has no algorithm for
// (decided once per shape and cached, so a shape always takes the same path).
static int run_gemm(Backend* be, const Gemm* g) {
    CudaState* s = cuda_state(be);
    cudaDataType_t type = be->dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType_t type_a = g->type_a ? g->type_a : type, type_b = g->type_b ? g->type_b : type;

    int align_a = alignment_of(g->A), align_b = alignment_of(g->B), align_d = alignment_of(g->D);
    int align_e = alignment_of(g->bias), align_x = alignment_of(g->aux);
    int key[18] = {g->transa, g->transb, g->m, g->n, g->k, g->lda, g->ldb, g->ldd, (int)be->dtype,
                   (int)g->epilogue, g->beta != 0.0f, align_a | align_b << 9, align_d | align_e << 9,
                   (int)type_a, (int)type_b, g->fast_accum, g->scale_mode_a | g->scale_mode_b << 8, align_x};
    GemmPlan* plan = NULL;
    for (int i = 0; i < s->plan_count && !plan; i++) {
        if (memcmp(s->plans[i].key, key, sizeof key) == 0) plan = &s->plans[i];
    }
    if (plan && !plan->found) return 0;

    cublasLtMatmulDesc_t desc;
    LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue, sizeof g->epilogue);
    if (g->bias) set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
    if (g->aux) {
        int64_t aux_ld = g->ldd;
        set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux);
        set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    }
    if (g->scale_a) set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->scale_a, sizeof g->scale_a);
    if (g->scale_b) set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->scale_b, sizeof g->scale_b);
    if (g->scale_mode_a || g->scale_mode_b) {
        int32_t ma = g->scale_mode_a, mb = g->scale_mode_b;
        set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma);
        set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb);
    }
    if (g->type_a) {
        int8_t fast = (int8_t)g->fast_accum;
        set_attr(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    }

    // Stored shapes: op(X) = X^T means X is stored transposed.
    cublasLtMatrixLayout_t la, lb, ld;
    LT_CHECK(cublasLtMatrixLayoutCreate(&la, type_a, g->transa ? g->k : g->m, g->transa ? g->m : g->k, g->lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&lb, type_b, g->transb ? g->n : g->k, g->transb ? g->k : g->n, g->ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&ld, type, g->m, g->n, g->ldd));

    if (!plan) {
        cublasLtMatmulPreference_t pref;
        LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = s->lt_workspace_bytes;
        uint32_t al[4] = {(uint32_t)align_a, (uint32_t)align_b, (uint32_t)align_d, (uint32_t)align_d};
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4));
        cublasLtMatmulHeuristicResult_t result;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s->lt, desc, la, lb, ld, ld, pref, 1, &result, &found);
        LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        // An unsupported epilogue or type comes back as NOT_SUPPORTED or as no algorithm.
        if (st == CUBLAS_STATUS_NOT_SUPPORTED && g->optional) found = 0;
        else LT_CHECK(st);
        if (found == 0 && !g->optional) {
            fatal("cuBLASLt has no algorithm for a %s GEMM m=%d n=%d k=%d (transa=%d transb=%d, epilogue %d%s)",
                  dtype_name(be->dtype), g->m, g->n, g->k, g->transa, g->transb, (int)g->epilogue,
                  g->type_a ? ", FP8 operands" : "");
        }
        if (s->plan_count == s->plan_cap) {
            s->plan_cap = s->plan_cap ? 2 * s->plan_cap : 32;
            s->plans = (GemmPlan*)xrealloc(s->plans, s->plan_cap * sizeof(GemmPlan));
        }
        plan = &s->plans[s->plan_count++];
        memcpy(plan->key, key, sizeof key);
        plan->found = found > 0;
        if (found) plan->algo = result.algo;
    }

    if (plan->found) {
        float alpha = 1.0f, beta = g->beta;
        LT_CHECK(cublasLtMatmul(s->lt, desc, &alpha, g->A, la, g->B, lb, &beta, g->D, ld, g->D, ld, &plan->algo,
                                s->lt_workspace, s->lt_workspace_bytes, s->stream));
    }
    LT_CHECK(cublasLtMatrixLayoutDestroy(la));
    LT_CHECK(cublasLtMatrixLayoutDestroy(lb));
    LT_CHECK(cublasLtMatrixLayoutDestroy(ld));
    LT_CHECK(cublasLtMatmulDescDestroy(desc));
    return plan->found;
}

// cuBLASLt's GELU aux matrix needs a leading dimension that is a multiple
// of 8; we also ask for 16-byte aligned pointers (the vectorised epilogue
// loads), else the fallback runs.
static int epilogue_aux_ok(const void* aux, int ld) { return ld % 8 == 0 && alignment_of(aux) >= 16; }

void cuda_matmul_forward(Backend* be, void* out, void* pre_gelu, const void* inp,
                         const void* weight, const void* bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    Gemm g;
    memset(&g, 0, sizeof g);
    g.transa = 1;
    g.transb = 0;
    g.m = OC;
    g.n = N;
    g.k = C;
    g.A = weight;
    g.lda = C;
    g.B = inp;
    g.ldb = C;
    g.ldd = OC;
    g.bias = bias;
    if (pre_gelu && epilogue_aux_ok(pre_gelu, OC) && alignment_of(out) >= 16) {
        // out = gelu(acc + bias), pre_gelu = acc + bias, in one pass.
        g.D = out;
        g.aux = pre_gelu;
        g.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        g.optional = 1;
        if (run_gemm(be, &g)) {
            cuda_state(be)->epilogues.fused[0]++;
            return;
        }
        g.aux = NULL;
        g.optional = 0;
    }
    g.D = pre_gelu ? pre_gelu : out;
    g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    run_gemm(be, &g);
    if (pre_gelu) {
        cuda_state(be)->epilogues.fallback[0]++;
        cuda_gelu_forward(be, out, pre_gelu, (size_t)N * OC, NULL);
    }
}

size_t cuda_matmul_scratch_bytes(int widest) {
    return round_up((size_t)widest * sizeof(float), (size_t)256) + (size_t)widest * sizeof(float);
}

// Scratch for an epilogue's bias gradient of n elements (D's type), and
// beside it room for its FP32 copy.
static void* bias_grad_scratch(Backend* be, int n) { return cuda_scratch(be, cuda_matmul_scratch_bytes(n)); }

// dbias (n) += sum (n, D's type, in bias_grad_scratch).
static void bias_grad_add(Backend* be, void* dbias, void* sum, int n) {
    float* f = (float*)sum;
    if (be->dtype == DTYPE_BF16) {
        f = (float*)((char*)sum + round_up((size_t)n * sizeof(float), (size_t)256));
        cuda_convert(be, f, DTYPE_F32, sum, DTYPE_BF16, (size_t)n);
    }
    cuda_reduce_partials_add(be, dbias, f, 1, (size_t)n, n);
}

// dinp^T (C, N) = W (stored C x OC) @ dout^T (stored OC x N), optionally
// with a GELU-gradient epilogue (aux = the pre-activation, bias = the column
// sums of the result). Returns 0 where an optional epilogue has no algorithm.
static int dinp_gemm(Backend* be, void* dinp, const void* dout, const void* weight, int N, int C, int OC,
                     cublasLtEpilogue_t epilogue, const void* aux, void* bias) {
    Gemm g;
    memset(&g, 0, sizeof g);
    g.m = C;
    g.n = N;
    g.k = OC;
    g.A = weight;
    g.lda = C;
    g.B = dout;
    g.ldb = OC;
    g.D = dinp;
    g.ldd = C;
    g.epilogue = epilogue;
    g.aux = (void*)aux;
    g.bias = bias;
    g.optional = epilogue != CUBLASLT_EPILOGUE_DEFAULT;
    return run_gemm(be, &g);
}

void cuda_matmul_backward(Backend* be, void* dinp, void* dweight, void* dbias, const void* dout,
                          const void* inp, const void* weight, int N, int C, int OC) {
    if (N <= 0) return;
    if (dinp) dinp_gemm(be, dinp, dout, weight, N, C, OC, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    int bias_done = 0;
    if (dweight) {
        // dW^T (C, OC) += inp^T (stored C x N) @ dout (stored OC x N, transposed);
        // BGRADB: the column sums of op(B) = dout (N x OC), i.e. dbias's increment.
        Gemm g;
        memset(&g, 0, sizeof g);
        g.transb = 1;
        g.m = C;
        g.n = OC;
        g.k = N;
        g.A = inp;
        g.lda = C;
        g.B = dout;
        g.ldb = OC;
        g.D = dweight;
        g.ldd = C;
        g.beta = 1.0f;
        if (dbias) {
            void* sum = bias_grad_scratch(be, OC);
            g.epilogue = CUBLASLT_EPILOGUE_BGRADB;
            g.bias = sum;
            g.optional = 1;
            bias_done = run_gemm(be, &g);
            if (bias_done) bias_grad_add(be, dbias, sum, OC);
            if (bias_done) cuda_state(be)->epilogues.fused[2]++;
            else cuda_state(be)->epilogues.fallback[2]++;
        }
        if (!bias_done) {
            g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
            g.bias = NULL;
            g.optional = 0;
            run_gemm(be, &g);
        }
    }
    if (dbias && !bias_done) cuda_column_sum_add(be, dbias, dout, N, OC);
}

void cuda_matmul_backward_dgelu(Backend* be, void* dinp, void* dbias, const void* dout, const void* pre_gelu,
                                const void* weight, int N, int C, int OC, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (epilogue_aux_ok(pre_gelu, C) && alignment_of(dinp) >= 16) {
        void* sum = dbias ? bias_grad_scratch(be, C) : NULL;
        cublasLtEpilogue_t e = dbias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
        if (dinp_gemm(be, dinp, dout, weight, N, C, OC, e, pre_gelu, sum)) {
            if (dbias) bias_grad_add(be, dbias, sum, C);
            if (amax) cuda_amax(be, amax, dinp, (size_t)N * C);  // the epilogue measures nothing
            cuda_state(be)->epilogues.fused[1]++;
            return;
        }
    }
    cuda_state(be)->epilogues.fallback[1]++;
    dinp_gemm(be, dinp, dout, weight, N, C, OC, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    cuda_gelu_backward(be, dinp, pre_gelu, dinp, (size_t)N * C, amax);
    if (dbias) cuda_column_sum_add(be, dbias, dinp, N, C);
}

// ---- FP8 --------------------------------------------------------------------------------------------------

static cudaDataType_t fp8_type(const Fp8Tensor* t, DType want, const char* what) {
    if (t->type != want)
        fatal("FP8 GEMM: the %s is %s, expected %s", what, dtype_name(t->type), dtype_name(want));
    return want == DTYPE_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

static const void* need(const void* p, const char* what) {
    if (!p) fatal("FP8 GEMM: the %s is missing (a caller bug: see fp8_matmul_backward in kernels/ops.h)", what);
    return p;
}

// FP8 tensor-core GEMMs need every dimension (they are the leading dimensions
// of one layout or another) a multiple of 16; the trainer checks the model's
// shapes at start-up with an error that names the flag, this is the backstop.
static void check_fp8_gemm(Backend* be, int N, int C, int OC) {
    if (be->fp8_support == FP8_NONE)
        fatal("FP8 GEMM on a GPU without FP8 tensor cores (compute capability %d.%d; FP8 needs 8.9 or newer)",
              cuda_state(be)->cc_major, cuda_state(be)->cc_minor);
    if (be->dtype != DTYPE_BF16) fatal("FP8 GEMMs write BF16: the CUDA backend must run in bf16 (it is %s)", dtype_name(be->dtype));
    if (N % 16 || C % 16 || OC % 16)
        fatal("FP8 GEMM of %d tokens, %d -> %d channels: every dimension must be a multiple of 16", N, C, OC);
}

void cuda_fp8_matmul_forward(Backend* be, void* out, const Fp8Tensor* inp, const Fp8Tensor* weight,
                             const void* bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    check_fp8_gemm(be, N, C, OC);
    // out^T (OC, N) = W (stored C x OC, transposed) @ X^T (stored C x N): TN on every architecture.
    Gemm g;
    memset(&g, 0, sizeof g);
    g.transa = 1;
    g.m = OC;
    g.n = N;
    g.k = C;
    g.A = need(weight->q, "weight");
    g.lda = C;
    g.type_a = fp8_type(weight, DTYPE_FP8_E4M3, "weight");
    g.scale_a = weight->scale_inv;
    g.B = need(inp->q, "input");
    g.ldb = C;
    g.type_b = fp8_type(inp, DTYPE_FP8_E4M3, "input");
    g.scale_b = inp->scale_inv;
    g.D = out;
    g.ldd = OC;
    g.bias = bias;
    g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    g.fast_accum = 1;
    run_gemm(be, &g);
}

void cuda_fp8_matmul_backward(Backend* be, void* dinp, void* dweight, const Fp8Tensor* dout,
                              const Fp8Tensor* inp, const Fp8Tensor* weight, int N, int C, int OC) {
    if (N <= 0 || (!dinp && !dweight)) return;
    check_fp8_gemm(be, N, C, OC);
    int tn = be->fp8_support == FP8_TN_ONLY;
    Gemm g;
    if (dinp) {
        // dinp^T (C, N) = W^T (C x OC) @ dY^T (stored OC x N).
        memset(&g, 0, sizeof g);
        g.m = C;
        g.n = N;
        g.k = OC;
        if (tn) {  // A = W^T stored (C, OC) row-major, i.e. column-major OC x C, read transposed
            g.transa = 1;
            g.A = need(weight->qt, "transposed weight");
            g.lda = OC;
        } else {   // A = W stored (OC, C) row-major, i.e. column-major C x OC, as is
            g.A = need(weight->q, "weight");
            g.lda = C;
        }
        g.type_a = fp8_type(weight, DTYPE_FP8_E4M3, "weight");
        g.scale_a = weight->scale_inv;
        g.B = need(dout->q, "output gradient");
        g.ldb = OC;
        g.type_b = fp8_type(dout, DTYPE_FP8_E5M2, "output gradient");
        g.scale_b = dout->scale_inv;
        g.D = dinp;
        g.ldd = C;
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        run_gemm(be, &g);
    }
    if (dweight) {
        // dW^T (C, OC) += X^T (C x N) @ dY (N x OC).
        memset(&g, 0, sizeof g);
        g.m = C;
        g.n = OC;
        g.k = N;
        if (tn) {  // A = X^T stored (C, N), read transposed; B = dY^T stored (OC, N), as is
            g.transa = 1;
            g.A = need(inp->qt, "transposed input");
            g.lda = N;
            g.B = need(dout->qt, "transposed output gradient");
            g.ldb = N;
        } else {   // A = X stored (N, C), as is; B = dY stored (N, OC), read transposed
            g.A = need(inp->q, "input");
            g.lda = C;
            g.transb = 1;
            g.B = need(dout->q, "output gradient");
            g.ldb = OC;
        }
        g.type_a = fp8_type(inp, DTYPE_FP8_E4M3, "input");
        g.scale_a = inp->scale_inv;
        g.type_b = fp8_type(dout, DTYPE_FP8_E5M2, "output gradient");
        g.scale_b = dout->scale_inv;
        g.D = dweight;
        g.ldd = C;
        g.beta = 1.0f;
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        run_gemm(be, &g);
    }
}

// ---- block-scaled FP8 (recipes blockwise and mxfp8) ------------------------------------------------
// out (M, N) row-major = op(a) (M, K) @ op(b) (N, K)^T, read column-major as
// out^T (N, M) = B' (stored K x N, transposed) @ A' (K x M): each operand is
// quantised into codes (rows, K) with K contiguous (fp8_block.cu; a
// transposed source gives the column-wise copy, from the 16-bit values), so
// the GEMM is TN whichever way the sources are stored, the only layout
// cuBLASLt's block scale modes take (VEC128_32F / BLK128x128_32F on 9.0,
// VEC32_UE8M0 on 10.x). cuBLASLt's A is our b (its outer dimension m = N),
// its B our a (n = M). A bias is written into every row of out first and the
// GEMM accumulates onto it (beta 1: D = acc + C, one rounding), the path the
// dweight GEMM takes anyway, rather than a BIAS epilogue, which cuBLASLt's
// block-scaled kernels need not offer.
// The codes and scales live in a buffer of their own that grows to the
// largest GEMM's (the first step's calls; a stream sync each time it grows).

// kernels/fp8_block.h's sizes, which llm/fp8/fp8.c bills for the planner.
size_t cuda_fp8_block_matmul_buffer_bytes(int M, int N, int K, Fp8BlockFormat fa, Fp8BlockFormat fb) {
    return fp8_block_gpu_operand_bytes(M, K, fa) + fp8_block_gpu_operand_bytes(N, K, fb);
}

static void* block_buffer(Backend* be, size_t bytes) {
    CudaState* s = cuda_state(be);
    if (bytes > s->fp8_block_bytes) {
        if (s->fp8_block_buf) be->free(be, s->fp8_block_buf);
        s->fp8_block_buf = be->alloc(be, bytes, "block-scaled FP8 codes and scales");
        s->fp8_block_bytes = bytes;
    }
    return s->fp8_block_buf;
}

void cuda_fp8_block_matmul(Backend* be, void* out, const void* a, int a_trans, Fp8BlockFormat fa, const void* b,
                           int b_trans, Fp8BlockFormat fb, const void* bias, int M, int N, int K, float beta) {
    if (M <= 0 || N <= 0) return;
    check_fp8_gemm(be, M, N, K);
    uint8_t* buf = (uint8_t*)block_buffer(be, cuda_fp8_block_matmul_buffer_bytes(M, N, K, fa, fb));
    uint8_t* qa = buf;                                              // (M, K) codes of op(a)
    uint8_t* sa = qa + round_up((size_t)M * K, 256);                // its scales
    uint8_t* qb = sa + round_up(cuda_fp8_block_scale_bytes(M, K, fa), 256);  // (N, K) codes of op(b)
    uint8_t* sb = qb + round_up((size_t)N * K, 256);
    cuda_fp8_block_quantize(be, qa, sa, a, a_trans, M, K, fa);
    cuda_fp8_block_quantize(be, qb, sb, b, b_trans, N, K, fb);
    Gemm g;
    memset(&g, 0, sizeof g);
    g.transa = 1;
    g.m = N;
    g.n = M;
    g.k = K;
    g.A = qb;
    g.lda = K;
    g.type_a = CUDA_R_8F_E4M3;
    g.scale_a = (const float*)sb;
    g.scale_mode_a = cuda_fp8_block_scale_mode(fb);
    g.B = qa;
    g.ldb = K;
    g.type_b = CUDA_R_8F_E4M3;
    g.scale_b = (const float*)sa;
    g.scale_mode_b = cuda_fp8_block_scale_mode(fa);
    g.D = out;
    g.ldd = N;
    g.beta = beta;
    if (bias) {  // out starts as the bias in every row and the GEMM accumulates onto it: no epilogue needed
        if (beta != 0.0f) fatal("block-scaled FP8 GEMM: a bias with beta %g (a caller bug: kernels/ops.h)", beta);
        cuda_fp8_block_bias_rows(be, out, bias, M, N);
        g.beta = 1.0f;
    }
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    run_gemm(be, &g);
}

extern "C" void cuda_epilogue_counts(Backend* be, CudaEpilogueCounts* out) { *out = cuda_state(be)->epilogues; }
