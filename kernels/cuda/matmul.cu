// matmul.cu: the linear layer on the device through cuBLASLt.
//
// Row-major (N, C) @ (OC, C)^T is, read column-major, out^T (OC, N) =
// W (stored C x OC, transposed) @ inp (C x N): cuBLASLt's m = OC, n = N, k = C.
// Forward adds the bias in the epilogue. The GELU runs as our own kernel on
// the stored pre-activation, not in cuBLASLt's GELU_AUX epilogue: ops.h
// requires out to be bit for bit gelu_forward(pre_gelu), because activation
// recompute recomputes it that way, and the epilogue applies its own (fast)
// tanh to the FP32 accumulator before rounding. Fusing would save one pass
// over the (N, 4C) activation and make gradients depend on --recompute.
// Backward: dinp = dout @ W with beta 0; dweight += dout^T @ inp with beta 1
// (accumulating in place); dbias by the deterministic column sum of reduce.cu.
//
// All products use CUBLAS_COMPUTE_32F: FP32 accumulation for BF16 inputs, and
// true FP32 (no TF32) for FP32 inputs. The heuristic's choice is cached per
// shape: the key is every descriptor parameter plus the pointer alignments,
// which the heuristic also depends on.
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
    int key[13];
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

static void run_gemm(Backend* be, const Gemm* g) {
    CudaState* s = cuda_state(be);
    cudaDataType_t type = be->dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;

    cublasLtMatmulDesc_t desc;
    LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue, sizeof g->epilogue);
    if (g->bias) set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);

    // Stored shapes: op(X) = X^T means X is stored transposed.
    cublasLtMatrixLayout_t la, lb, ld;
    LT_CHECK(cublasLtMatrixLayoutCreate(&la, type, g->transa ? g->k : g->m, g->transa ? g->m : g->k, g->lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&lb, type, g->transb ? g->n : g->k, g->transb ? g->k : g->n, g->ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&ld, type, g->m, g->n, g->ldd));

    int align_a = alignment_of(g->A), align_b = alignment_of(g->B), align_d = alignment_of(g->D);
    int align_e = alignment_of(g->bias);
    int key[13] = {g->transa, g->transb, g->m, g->n, g->k, g->lda, g->ldb, g->ldd, (int)be->dtype,
                   (int)g->epilogue, g->beta != 0.0f, align_a | align_b << 9, align_d | align_e << 9};
    GemmPlan* plan = NULL;
    for (int i = 0; i < s->plan_count && !plan; i++) {
        if (memcmp(s->plans[i].key, key, sizeof key) == 0) plan = &s->plans[i];
    }
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
        LT_CHECK(cublasLtMatmulAlgoGetHeuristic(s->lt, desc, la, lb, ld, ld, pref, 1, &result, &found));
        LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        if (found == 0) {
            fatal("cuBLASLt has no algorithm for a %s GEMM m=%d n=%d k=%d (transa=%d transb=%d, epilogue %d)",
                  dtype_name(be->dtype), g->m, g->n, g->k, g->transa, g->transb, (int)g->epilogue);
        }
        if (s->plan_count == s->plan_cap) {
            s->plan_cap = s->plan_cap ? 2 * s->plan_cap : 32;
            s->plans = (GemmPlan*)xrealloc(s->plans, s->plan_cap * sizeof(GemmPlan));
        }
        plan = &s->plans[s->plan_count++];
        memcpy(plan->key, key, sizeof key);
        plan->algo = result.algo;
    }

    float alpha = 1.0f, beta = g->beta;
    LT_CHECK(cublasLtMatmul(s->lt, desc, &alpha, g->A, la, g->B, lb, &beta, g->D, ld, g->D, ld, &plan->algo,
                            s->lt_workspace, s->lt_workspace_bytes, s->stream));
    LT_CHECK(cublasLtMatrixLayoutDestroy(la));
    LT_CHECK(cublasLtMatrixLayoutDestroy(lb));
    LT_CHECK(cublasLtMatrixLayoutDestroy(ld));
    LT_CHECK(cublasLtMatmulDescDestroy(desc));
}

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
    g.D = pre_gelu ? pre_gelu : out;
    g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    run_gemm(be, &g);
    if (pre_gelu) cuda_gelu_forward(be, out, pre_gelu, (size_t)N * OC);
}

void cuda_matmul_backward(Backend* be, void* dinp, void* dweight, void* dbias, const void* dout,
                          const void* inp, const void* weight, int N, int C, int OC) {
    if (N <= 0) return;
    Gemm g;
    if (dinp) {
        // dinp^T (C, N) = W (stored C x OC) @ dout^T (stored OC x N).
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
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        run_gemm(be, &g);
    }
    if (dweight) {
        // dW^T (C, OC) += inp^T (stored C x N) @ dout (stored OC x N, transposed).
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
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        run_gemm(be, &g);
    }
    if (dbias) cuda_column_sum_add(be, dbias, dout, N, OC);
}
