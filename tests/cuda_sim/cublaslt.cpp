// cublaslt.cpp: cuBLASLt's matmul interpreted on the CPU from the descriptors
// the backend really builds (cublasLt.h's declarations, our definitions).
//
// D = epilogue(alpha * op(A) @ op(B) + beta * C), column-major by default
// (CUBLASLT_ORDER_ROW honoured), strided batches, F32 / BF16 / F16 / FP8
// (E4M3, E5M2) data with FP32 compute, the bias, GELU (tanh form), GELU_AUX,
// DGELU, DGELU_BGRAD, BGRADA/BGRADB and ReLU epilogues, FP8 A/B/C/D scale
// pointers and AMAX_D. Products accumulate in double and round once, so the
// result is the ideal one the GPU's approximates.
//
// What cuBLASLt would reject is rejected the same way (status codes, with
// the reason on stderr): attribute sizes, dimension mismatches, leading
// dimensions, type combinations, Hopper's FP8 rules (A transposed, B not,
// leading dimensions and pointers 16-byte aligned; CUDA_SIM_CC=100 lifts
// the TN rule as Blackwell does), the GELU aux leading
// dimension, a bias (gradient) type other than cublasLt.h's (D's, BF16 for
// FP8 GEMMs), an FP8 GELU aux output, in-place C == D with different layouts, an algorithm used on
// pointers less aligned than the preference it was chosen for. Matrices that
// reach outside their allocations stop the program, as the fault would on a
// GPU. Block scale modes (VEC128_32F, BLK128x128_32F on 9.0; VEC32_UE8M0 on
// 10.x; check_block_modes says what else cuBLASLt asks) read each operand's
// scales from their documented layouts (BlockScales) and multiply every
// element by its block's scale before the product. Not simulated: FP8 fast
// accumulation's reduced precision, NVFP4 (VEC16_UE4M3), outer-vector and
// output (D_OUT) scales, ReLU bit-mask epilogues, alpha vectors.
#include <cublasLt.h>
#include <stdarg.h>

#include <vector>

#include "tests/cuda_sim/sim_internal.h"

namespace {

using cuda_sim::fatal;

constexpr uint32_t kHandleMagic = 0x4c74486e, kDescMagic = 0x4c744465, kLayoutMagic = 0x4c744c61,
                   kPrefMagic = 0x4c745072, kAlgoMagic = 0x4c74416c;

struct LtHandle {
    uint32_t magic;
};

struct Desc {
    uint32_t magic;
    int32_t compute_type;  // cublasComputeType_t
    int32_t scale_type;    // cudaDataType_t
    int32_t pointer_mode;
    int32_t transa, transb, transc, fill_mode;
    uint32_t epilogue;
    const void* bias;
    int64_t bias_batch_stride;
    void* aux;
    int64_t aux_ld, aux_batch_stride, alpha_vector_batch_stride;
    int32_t sm_count_target;
    const void *a_scale, *b_scale, *c_scale, *d_scale;
    void* amax_d;
    int32_t aux_type;
    const void* aux_scale;
    void* aux_amax;
    int8_t fast_accum;
    int32_t bias_type;
    int32_t scale_mode[5];  // A, B, C, D, aux
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t), "Desc fits cuBLASLt's opaque storage");

struct Layout {
    uint32_t magic;
    int32_t type;   // cudaDataType_t
    int32_t order;  // cublasLtOrder_t
    int32_t batch_count;
    uint64_t rows, cols;
    int64_t ld, batch_stride, plane_offset;
    uint32_t batch_mode;
};
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "Layout fits cuBLASLt's opaque storage");

struct Pref {
    uint32_t magic;
    uint32_t search_mode;
    uint64_t max_workspace;
    uint32_t reduction_mask;
    uint32_t min_alignment[4];  // A, B, C, D
    float max_waves;
    uint64_t impl_mask;
};
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "Pref fits cuBLASLt's opaque storage");

// What an algorithm remembers of the problem it was chosen for.
struct Algo {
    uint32_t magic;
    int32_t type_a, type_b, type_d;
    uint32_t epilogue;
    int32_t transa, transb;
    uint32_t min_alignment[4];
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t), "Algo fits cublasLtMatmulAlgo_t");

Desc* desc_of(cublasLtMatmulDesc_t d) { return d && ((Desc*)d)->magic == kDescMagic ? (Desc*)d : nullptr; }
Layout* layout_of(cublasLtMatrixLayout_t l) { return l && ((Layout*)l)->magic == kLayoutMagic ? (Layout*)l : nullptr; }
Pref* pref_of(cublasLtMatmulPreference_t p) { return p && ((Pref*)p)->magic == kPrefMagic ? (Pref*)p : nullptr; }

cublasStatus_t reject(cublasStatus_t status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t reject(cublasStatus_t status, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_sim: cuBLASLt: %s\n", msg);
    return status;
}

// ---- element types ------------------------------------------------------------------------------------------------
bool is_fp8(int t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

size_t type_size(int t) {
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: return 1;
    }
    return 0;
}

const char* type_name(int t) {
    switch (t) {
    case CUDA_R_32F: return "F32";
    case CUDA_R_16BF: return "BF16";
    case CUDA_R_16F: return "F16";
    case CUDA_R_8F_E4M3: return "E4M3";
    case CUDA_R_8F_E5M2: return "E5M2";
    }
    return "unsupported type";
}

double load(const void* base, size_t i, int t) {
    switch (t) {
    case CUDA_R_32F: return ((const float*)base)[i];
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16*)base)[i]);
    case CUDA_R_16F: return __half2float(((const __half*)base)[i]);
    case CUDA_R_8F_E4M3: return (float)((const __nv_fp8_e4m3*)base)[i];
    case CUDA_R_8F_E5M2: return (float)((const __nv_fp8_e5m2*)base)[i];
    }
    return 0;
}

void store(void* base, size_t i, int t, double v) {
    float f = (float)v;
    switch (t) {
    case CUDA_R_32F: ((float*)base)[i] = f; break;
    case CUDA_R_16BF: ((__nv_bfloat16*)base)[i] = __float2bfloat16_rn(f); break;
    case CUDA_R_16F: ((__half*)base)[i] = __float2half_rn(f); break;
    case CUDA_R_8F_E4M3: ((__nv_fp8_storage_t*)base)[i] = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3); break;
    case CUDA_R_8F_E5M2: ((__nv_fp8_storage_t*)base)[i] = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2); break;
    }
}

// Inputs as the compute type sees them.
double compute_input(double v, int compute_type) {
    float f = (float)v;
    uint32_t b;
    switch (compute_type) {
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        memcpy(&b, &f, 4);
        if ((b & 0x7f800000u) != 0x7f800000u) b = (b + 0x1000u) & 0xffffe000u;
        memcpy(&f, &b, 4);
        return f;
    case CUBLAS_COMPUTE_32F_FAST_16BF: return __bfloat162float(__float2bfloat16_rn(f));
    case CUBLAS_COMPUTE_32F_FAST_16F: return __half2float(__float2half_rn(f));
    }
    return v;
}

// The offset, in elements, of (r, c) in batch b.
size_t offset(const Layout* l, uint64_t r, uint64_t c, int64_t b) {
    size_t o = l->order == CUBLASLT_ORDER_ROW ? r * (size_t)l->ld + c : c * (size_t)l->ld + r;
    return o + (size_t)(b * l->batch_stride);
}

// Bytes spanned by all batches of a layout.
size_t extent_bytes(const Layout* l) {
    if (l->rows == 0 || l->cols == 0) return 0;
    size_t last = offset(l, l->rows - 1, l->cols - 1, 0) + 1;
    size_t span = last + (size_t)(l->batch_count - 1) * (size_t)(l->batch_stride > 0 ? l->batch_stride : 0);
    return span * type_size(l->type);
}

int alignment_of(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int al = 1;
    while (al < 256 && a % (2 * al) == 0) al *= 2;
    return al;
}

float gelu(float x) {
    const float s = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}
float gelu_grad(float x) {
    const float s = 0.7978845608028654f;
    float u = s * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * s * (1.0f + 3.0f * 0.044715f * x * x);
}

enum { EPI_BIAS = 4, EPI_RELU = 2, EPI_GELU = 32, EPI_AUX = 128, EPI_DRELU = 8, EPI_DGELU = 64, EPI_BGRAD = 16 };

bool epilogue_known(uint32_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
    }
    return false;
}

bool epilogue_has_aux(uint32_t e) { return (e & EPI_AUX) && (e & (EPI_GELU | EPI_DGELU)); }

// The types the epilogue vectors and aux matrix have when not set explicitly.
int bias_type(const Desc* d, int type_a, int type_d) {
    if (d->bias_type != -1) return d->bias_type;
    if (is_fp8(type_a) && (type_d == CUDA_R_32F || is_fp8(type_d))) return CUDA_R_16BF;
    return type_d;
}
int aux_type(const Desc* d, int type_d) { return d->aux_type != -1 ? d->aux_type : type_d; }

// The problem as cublasLtMatmul sees it, checked the way cuBLASLt checks it.
struct Problem {
    const Desc* d;
    const Layout *a, *b, *c, *dd;
    uint64_t m, n, k;
};

const char* op_name(int op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

cublasStatus_t check_layout(const char* name, const Layout* l) {
    if (!l) return reject(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: not a layout created by cublasLtMatrixLayoutCreate", name);
    if (!type_size(l->type))
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: data type %d is not simulated", name, l->type);
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: only column- and row-major orders are simulated", name);
    uint64_t need = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
    if (l->ld < 0 || (uint64_t)l->ld < need)
        return reject(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: leading dimension %lld is less than its %s (%llu)", name,
                      (long long)l->ld, l->order == CUBLASLT_ORDER_COL ? "rows" : "columns", (unsigned long long)need);
    if (l->batch_count < 1) return reject(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: batch count %d", name, l->batch_count);
    if (l->batch_mode != 0) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: pointer-array batches are not simulated", name);
    if (l->plane_offset != 0) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: planar complex is not simulated", name);
    return CUBLAS_STATUS_SUCCESS;
}

// ---- block scale modes --------------------------------------------------------------------------------------------
// What cuBLASLt takes (cublasLt.h's cublasLtMatmulMatrixScale_t; the cuBLAS
// docs' "block scaling factors layout"; /work/shared/notes/fp8.md): the
// 1 x 128 and 128 x 128 FP32 modes (DeepSeek-V3's) on compute capability 9.0
// only (an NVIDIA maintainer in CUDALibrarySamples issue #310; Blackwell
// runs that recipe as MXFP8, TransformerEngine's
// nvte_swizzle_block_scaling_to_mxfp8_scaling_factors), never 128 x 128 on
// both operands (TransformerEngine: "Only 1D by 1D, 1D by 2D, and 2D by 1D
// block scaling supported"); 1 x 32 E8M0 (MXFP8) on 10.x and later; both
// operands block-scaled, in the TN layout only, D not FP8 (a block-scaled
// FP8 D takes D_OUT scale modes, not simulated). VEC16_UE4M3 (NVFP4, FP4
// data) and OUTER_VEC_32F are not simulated.
bool is_block_mode(int m) {
    return m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 || m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
           m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

const char* mode_name(int m) {
    switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return "SCALAR_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: return "VEC32_UE8M0";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return "VEC128_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return "BLK128x128_32F";
    }
    return "an unsimulated scale mode";
}

cublasStatus_t check_block_modes(const Desc* d, int cc, int td) {
    int ma = d->scale_mode[0], mb = d->scale_mode[1];
    for (int m : {ma, mb})
        if (m != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && !is_block_mode(m))
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "scale mode %d is not simulated", m);
    bool ba = is_block_mode(ma), bb = is_block_mode(mb);
    if (!ba && !bb) return CUBLAS_STATUS_SUCCESS;
    if (ba != bb)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "A scale mode %s with B %s: both operands must be block-scaled",
                      mode_name(ma), mode_name(mb));
    bool mx = ma == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 || mb == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    if (mx && ma != mb)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "A scale mode %s with B %s", mode_name(ma), mode_name(mb));
    if (mx && cc < 100)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "VEC32_UE8M0 (MXFP8) needs compute capability 10.x; this is sm_%d", cc);
    if (!mx && cc != 90)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "%s x %s block scaling runs on compute capability 9.0 only; this is sm_%d",
                      mode_name(ma), mode_name(mb), cc);
    if (ma == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F && mb == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "BLK128x128_32F on both A and B is not supported");
    if (d->transa != CUBLAS_OP_T || d->transb != CUBLAS_OP_N)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "block-scaled FP8 needs TN (transa T, transb N), got %s%s",
                      op_name(d->transa), op_name(d->transb));
    if (is_fp8(td)) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "block-scaled FP8 with an FP8 D is not simulated");
    return CUBLAS_STATUS_SUCCESS;
}

// The block scales of one operand, in its mode's layout: op(X) is outer x k
// (outer = m for A, n for B; blocks run along k). Written from the layout
// descriptions (not shared with the backend's fp8_block.cu, so a wrong
// layout there fails here): VEC128_32F (k/128, outer) column-major with the
// leading dimension rounded up to 4 floats; BLK128x128_32F (outer/128, k/128)
// row-major with the row length rounded up to 4 floats; VEC32_UE8M0 in
// 512-byte tiles of 128 outer x 4 scales, tiles row-major, inside a tile
// the 32 x 16-byte rows (outer % 32) holding 4 groups (outer / 32 % 4) of 4
// scales (k / 32 % 4).
struct BlockScales {
    int mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    const void* p = nullptr;
    uint64_t outer = 0, k = 0;
    uint64_t kblocks() const { return (k + (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ? 31 : 127)) /
                                      (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ? 32 : 128); }
    static uint64_t up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
    size_t bytes() const {
        switch (mode) {
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: return up(outer, 128) * up(kblocks(), 4);
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return kblocks() * up(outer, 4) * 4;
        case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return (outer + 127) / 128 * up(kblocks(), 4) * 4;
        }
        return 0;
    }
    double at(uint64_t o, uint64_t kk) const {
        switch (mode) {
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: {
            uint64_t kb = kk / 32, tile = (o / 128) * (up(kblocks(), 4) / 4) + kb / 4;
            uint8_t e = ((const uint8_t*)p)[tile * 512 + (o % 32) * 16 + (o % 128 / 32) * 4 + kb % 4];
            return e == 0xFF ? NAN : ldexp(1.0, (int)e - 127);
        }
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return ((const float*)p)[(kk / 128) * up(outer, 4) + o];
        case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return ((const float*)p)[(o / 128) * up(kblocks(), 4) + kk / 128];
        }
        return 1.0;
    }
};

cublasStatus_t check_problem(Problem* p) {
    const Desc* d = p->d;
    if (!d) return reject(CUBLAS_STATUS_INVALID_VALUE, "not a matmul descriptor created by cublasLtMatmulDescCreate");
    cublasStatus_t st;
    if ((st = check_layout("A", p->a)) || (st = check_layout("B", p->b)) || (st = check_layout("C", p->c)) ||
        (st = check_layout("D", p->dd)))
        return st;
    const Layout *A = p->a, *B = p->b, *C = p->c, *D = p->dd;
    if (d->compute_type != CUBLAS_COMPUTE_32F && d->compute_type != CUBLAS_COMPUTE_32F_FAST_TF32 &&
        d->compute_type != CUBLAS_COMPUTE_32F_FAST_16BF && d->compute_type != CUBLAS_COMPUTE_32F_FAST_16F &&
        d->compute_type != CUBLAS_COMPUTE_32F_PEDANTIC)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d is not simulated (CUBLAS_COMPUTE_32F variants are)", d->compute_type);
    if (d->scale_type != CUDA_R_32F)
        return reject(CUBLAS_STATUS_INVALID_VALUE, "scale type %d with a 32F compute type: alpha/beta must be CUDA_R_32F", d->scale_type);
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST && d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "pointer mode %d is not simulated", d->pointer_mode);
    if (d->transc != CUBLAS_OP_N) return reject(CUBLAS_STATUS_INVALID_VALUE, "TRANSC must be CUBLAS_OP_N");
    for (int op : {d->transa, d->transb})
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
            return reject(CUBLAS_STATUS_INVALID_VALUE, "transpose %d is not a cublasOperation_t", op);
    if (!epilogue_known(d->epilogue)) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u is not simulated", d->epilogue);
    for (int i = 2; i < 5; i++)
        if (d->scale_mode[i] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "%s scale mode %d: only A and B block scale modes are simulated",
                          i == 2 ? "C" : i == 3 ? "D" : "aux", d->scale_mode[i]);

    // Shapes: D is m x n; op(A) m x k; op(B) k x n; C like D.
    p->m = D->rows;
    p->n = D->cols;
    bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
    uint64_t a_rows = ta ? A->cols : A->rows, a_cols = ta ? A->rows : A->cols;
    uint64_t b_rows = tb ? B->cols : B->rows, b_cols = tb ? B->rows : B->cols;
    p->k = a_cols;
    if (a_rows != p->m || b_cols != p->n || b_rows != p->k || C->rows != p->m || C->cols != p->n)
        return reject(CUBLAS_STATUS_INVALID_VALUE,
                      "dimensions do not match: op%s(A) is %llux%llu, op%s(B) %llux%llu, C %llux%llu, D %llux%llu",
                      op_name(d->transa), (unsigned long long)a_rows, (unsigned long long)a_cols, op_name(d->transb),
                      (unsigned long long)b_rows, (unsigned long long)b_cols, (unsigned long long)C->rows,
                      (unsigned long long)C->cols, (unsigned long long)p->m, (unsigned long long)p->n);
    if (A->batch_count != D->batch_count || B->batch_count != D->batch_count || C->batch_count != D->batch_count)
        return reject(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: A %d, B %d, C %d, D %d", A->batch_count,
                      B->batch_count, C->batch_count, D->batch_count);
    if (D->batch_count > 1 && (uint64_t)D->batch_stride < (D->order == CUBLASLT_ORDER_COL ? (uint64_t)D->ld * D->cols
                                                                                          : (uint64_t)D->ld * D->rows))
        return reject(CUBLAS_STATUS_INVALID_VALUE, "batches of D overlap: stride %lld", (long long)D->batch_stride);

    // Types.
    int ta_t = A->type, tb_t = B->type, tc = C->type, td = D->type;
    bool fp8 = is_fp8(ta_t) || is_fp8(tb_t);
    if (fp8) {
        if (!is_fp8(ta_t) || !is_fp8(tb_t))
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "A %s with B %s: FP8 needs both inputs in FP8", type_name(ta_t), type_name(tb_t));
        if (ta_t == CUDA_R_8F_E5M2 && tb_t == CUDA_R_8F_E5M2)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "E5M2 x E5M2 is not supported");
        bool d_ok = td == CUDA_R_16BF || td == CUDA_R_16F || td == CUDA_R_32F || td == CUDA_R_8F_E4M3 ||
                    (td == CUDA_R_8F_E5M2 && (ta_t == CUDA_R_8F_E5M2 || tb_t == CUDA_R_8F_E5M2));
        if (!d_ok) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 %s x %s cannot write D as %s", type_name(ta_t), type_name(tb_t), type_name(td));
        if (is_fp8(td) ? (tc != CUDA_R_16BF && tc != CUDA_R_16F) : tc != td)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 GEMM with D %s needs C %s, not %s", type_name(td),
                          is_fp8(td) ? "BF16 or F16" : type_name(td), type_name(tc));
        // Ada and Hopper: "A must be transposed and B non-transposed (the TN
        // format)"; Blackwell (10.x, 11.x) takes any layout for per-tensor FP8.
        int cc = cuda_sim::compute_capability();
        bool any_layout = (cc >= 100 && cc < 120) || cc >= 130;
        if ((st = check_block_modes(d, cc, td))) return st;
        if (!any_layout && (d->transa != CUBLAS_OP_T || d->transb != CUBLAS_OP_N))
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 on sm_%d needs TN (transa T, transb N), got %s%s", cc,
                          op_name(d->transa), op_name(d->transb));
        if (A->order != CUBLASLT_ORDER_COL || B->order != CUBLASLT_ORDER_COL || D->order != CUBLASLT_ORDER_COL)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 needs column-major A, B and D");
        if (A->ld % 16 || B->ld % 16 || (is_fp8(td) && D->ld % 16))
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 needs leading dimensions that are multiples of 16 (lda %lld, ldb %lld, ldd %lld)",
                          (long long)A->ld, (long long)B->ld, (long long)D->ld);
        if (epilogue_has_aux(d->epilogue) && is_fp8(aux_type(d, td)))
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 GELU aux output is not supported");
    } else {
        if (ta_t != tb_t) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "A %s with B %s", type_name(ta_t), type_name(tb_t));
        bool ok = (ta_t == CUDA_R_32F && td == CUDA_R_32F) ||
                  ((ta_t == CUDA_R_16BF || ta_t == CUDA_R_16F) && (td == ta_t || td == CUDA_R_32F));
        if (!ok || tc != td)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "A/B %s with C %s and D %s is not a supported combination",
                          type_name(ta_t), type_name(tc), type_name(td));
        if (d->a_scale || d->b_scale || d->c_scale || d->d_scale)
            return reject(CUBLAS_STATUS_INVALID_VALUE, "scale pointers are for FP8 inputs, not %s", type_name(ta_t));
        if (is_block_mode(d->scale_mode[0]) || is_block_mode(d->scale_mode[1]))
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "block scale modes need FP8 A and B, not %s", type_name(ta_t));
        if (d->compute_type == CUBLAS_COMPUTE_32F_FAST_TF32 && ta_t != CUDA_R_32F)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FAST_TF32 compute with %s inputs", type_name(ta_t));
    }

    // Epilogue inputs and outputs.
    uint32_t e = d->epilogue;
    bool bias_in = e & EPI_BIAS, bgrad = (e & EPI_BGRAD) || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
    if ((bias_in || bgrad) && !d->bias)
        return reject(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", e);
    if ((bias_in || bgrad) && !type_size(bias_type(d, ta_t, td)))
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "bias data type %d", bias_type(d, ta_t, td));
    // cublasLt.h: a bias (or bias gradient) has D's type, save IMMA and FP8 GEMMs whose D is FP32 or FP8
    // (BF16 bias, or FP32 with an FP32 D); a BF16 GEMM's bias gradient cannot be FP32.
    if ((bias_in || bgrad) && d->bias_type != -1) {
        bool fp8_wide = is_fp8(ta_t) && (td == CUDA_R_32F || is_fp8(td));
        bool ok = fp8_wide ? (d->bias_type == CUDA_R_16BF || d->bias_type == td) : d->bias_type == td;
        if (!ok)
            return reject(CUBLAS_STATUS_NOT_SUPPORTED, "bias data type %s with D %s (it must be D's type)",
                          type_name(d->bias_type), type_name(td));
    }
    if (epilogue_has_aux(e)) {
        if (!d->aux) return reject(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", e);
        if (d->aux_ld < (int64_t)p->m || d->aux_ld % 8)
            return reject(CUBLAS_STATUS_INVALID_VALUE,
                          "EPILOGUE_AUX_LD %lld must be divisible by 8 and at least the rows of D (%llu)",
                          (long long)d->aux_ld, (unsigned long long)p->m);
        if (d->aux_batch_stride % 8)
            return reject(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_BATCH_STRIDE %lld must be divisible by 8", (long long)d->aux_batch_stride);
        if (!type_size(aux_type(d, td))) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "aux data type %d", aux_type(d, td));
    }
    if ((e & (EPI_RELU | EPI_DRELU)) && (e & EPI_AUX))
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "ReLU bit-mask epilogues are not simulated");
    return CUBLAS_STATUS_SUCCESS;
}

// Fault-like errors: a matrix that does not fit in the memory it points to.
void check_memory(const char* name, const void* ptr, size_t bytes) {
    if (bytes == 0) return;
    if (!ptr) fatal("cublasLtMatmul: matrix %s is NULL", name);
    if (!cuda_sim::device_range(ptr, bytes))
        fatal("cublasLtMatmul: %s at %p spans %zu bytes, which is not inside one device allocation (too small, a "
              "wrong leading dimension or batch stride, or host memory)",
              name, ptr, bytes);
}

}  // namespace

// ---- the API ------------------------------------------------------------------------------------------------------------------
extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = (cublasLtHandle_t) new LtHandle{kHandleMagic};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    LtHandle* h = (LtHandle*)handle;
    if (!h || h->magic != kHandleMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

const char* cublasLtGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "an unknown cuBLAS error";
    }
}

// ---- matrix layouts ----
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld) {
    if (!l || size < sizeof(Layout)) return CUBLAS_STATUS_ALLOC_FAILED;
    Layout* x = (Layout*)l;
    memset(x, 0, sizeof *x);
    x->magic = kLayoutMagic;
    x->type = type;
    x->order = CUBLASLT_ORDER_COL;
    x->batch_count = 1;
    x->rows = rows;
    x->cols = cols;
    x->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayoutOpaque_t* x = new cublasLtMatrixLayoutOpaque_t;
    *l = x;
    return cublasLtMatrixLayoutInit_internal(x, sizeof *x, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    Layout* x = layout_of(l);
    if (!x) return CUBLAS_STATUS_INVALID_VALUE;
    x->magic = 0;
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

namespace {
struct Field {
    size_t offset, size;
};

bool layout_field(cublasLtMatrixLayoutAttribute_t a, Field* f) {
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: *f = {offsetof(Layout, type), 4}; return true;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: *f = {offsetof(Layout, order), 4}; return true;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: *f = {offsetof(Layout, rows), 8}; return true;
    case CUBLASLT_MATRIX_LAYOUT_COLS: *f = {offsetof(Layout, cols), 8}; return true;
    case CUBLASLT_MATRIX_LAYOUT_LD: *f = {offsetof(Layout, ld), 8}; return true;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: *f = {offsetof(Layout, batch_count), 4}; return true;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: *f = {offsetof(Layout, batch_stride), 8}; return true;
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: *f = {offsetof(Layout, plane_offset), 8}; return true;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: *f = {offsetof(Layout, batch_mode), 4}; return true;
    }
    return false;
}

bool desc_field(cublasLtMatmulDescAttributes_t a, Field* f) {
    switch (a) {
#define F(attr, member) case attr: *f = {offsetof(Desc, member), sizeof(((Desc*)0)->member)}; return true;
    F(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute_type)
    F(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale_type)
    F(CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode)
    F(CUBLASLT_MATMUL_DESC_TRANSA, transa)
    F(CUBLASLT_MATMUL_DESC_TRANSB, transb)
    F(CUBLASLT_MATMUL_DESC_TRANSC, transc)
    F(CUBLASLT_MATMUL_DESC_FILL_MODE, fill_mode)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue)
    F(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias)
    F(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_batch_stride)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_batch_stride)
    F(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, alpha_vector_batch_stride)
    F(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sm_count_target)
    F(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale)
    F(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale)
    F(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, c_scale)
    F(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale)
    F(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_d)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, aux_scale)
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, aux_amax)
    F(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum)
    F(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type)
    F(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, scale_mode[0])
    F(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, scale_mode[1])
    F(CUBLASLT_MATMUL_DESC_C_SCALE_MODE, scale_mode[2])
    F(CUBLASLT_MATMUL_DESC_D_SCALE_MODE, scale_mode[3])
    F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, scale_mode[4])
#undef F
    default: return false;
    }
}

bool pref_field(cublasLtMatmulPreferenceAttributes_t a, Field* f) {
    switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: *f = {offsetof(Pref, search_mode), 4}; return true;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: *f = {offsetof(Pref, max_workspace), 8}; return true;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: *f = {offsetof(Pref, reduction_mask), 4}; return true;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: *f = {offsetof(Pref, min_alignment[0]), 4}; return true;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: *f = {offsetof(Pref, min_alignment[1]), 4}; return true;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: *f = {offsetof(Pref, min_alignment[2]), 4}; return true;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: *f = {offsetof(Pref, min_alignment[3]), 4}; return true;
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: *f = {offsetof(Pref, max_waves), 4}; return true;
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: *f = {offsetof(Pref, impl_mask), 8}; return true;
    }
    return false;
}

cublasStatus_t set_field(const char* what, int attr, bool known, Field f, void* obj, const void* buf, size_t size) {
    if (!obj) return reject(CUBLAS_STATUS_INVALID_VALUE, "%s: not a descriptor", what);
    if (!known) return reject(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d is not simulated", what, attr);
    if (!buf || size != f.size)
        return reject(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d takes %zu bytes, got %zu", what, attr, f.size, size);
    memcpy((char*)obj + f.offset, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t get_field(bool known, Field f, const void* obj, void* buf, size_t size, size_t* written) {
    if (!obj || !known) return CUBLAS_STATUS_INVALID_VALUE;
    if (size == 0 && written) {
        *written = f.size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size < f.size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, (const char*)obj + f.offset, f.size);
    if (written) *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
    Field f;
    bool known = layout_field(attr, &f);
    return set_field("cublasLtMatrixLayoutSetAttribute", attr, known, f, layout_of(l), buf, size);
}
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t size, size_t* written) {
    Field f;
    bool known = layout_field(attr, &f);
    return get_field(known, f, layout_of(l), buf, size, written);
}

// ---- matmul descriptors ----
cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t d, size_t size, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
    if (!d || size < sizeof(Desc)) return CUBLAS_STATUS_ALLOC_FAILED;
    Desc* x = (Desc*)d;
    memset(x, 0, sizeof *x);
    x->magic = kDescMagic;
    x->compute_type = compute;
    x->scale_type = scale;
    x->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    x->transa = x->transb = x->transc = CUBLAS_OP_N;
    x->fill_mode = CUBLAS_FILL_MODE_FULL;
    x->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    x->aux_type = -1;
    x->bias_type = -1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDescOpaque_t* x = new cublasLtMatmulDescOpaque_t;
    *d = x;
    return cublasLtMatmulDescInit_internal(x, sizeof *x, compute, scale);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    Desc* x = desc_of(d);
    if (!x) return CUBLAS_STATUS_INVALID_VALUE;
    x->magic = 0;
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    Field f;
    bool known = desc_field(attr, &f);
    return set_field("cublasLtMatmulDescSetAttribute", attr, known, f, desc_of(d), buf, size);
}
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
    Field f;
    bool known = desc_field(attr, &f);
    return get_field(known, f, desc_of(d), buf, size, written);
}

// ---- preferences ----
cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t p, size_t size) {
    if (!p || size < sizeof(Pref)) return CUBLAS_STATUS_ALLOC_FAILED;
    Pref* x = (Pref*)p;
    memset(x, 0, sizeof *x);
    x->magic = kPrefMagic;
    x->reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    for (int i = 0; i < 4; i++) x->min_alignment[i] = 256;
    x->impl_mask = ~0ull;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreferenceOpaque_t* x = new cublasLtMatmulPreferenceOpaque_t;
    *p = x;
    return cublasLtMatmulPreferenceInit_internal(x, sizeof *x);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    Pref* x = pref_of(p);
    if (!x) return CUBLAS_STATUS_INVALID_VALUE;
    x->magic = 0;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    Field f;
    bool known = pref_field(attr, &f);
    return set_field("cublasLtMatmulPreferenceSetAttribute", attr, known, f, pref_of(p), buf, size);
}
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf, size_t size,
                                                    size_t* written) {
    Field f;
    bool known = pref_field(attr, &f);
    return get_field(known, f, pref_of(p), buf, size, written);
}

// ---- heuristics ----
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    if (!handle || ((LtHandle*)handle)->magic != kHandleMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!returned || requested < 1 || !results) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    Pref* p = pref_of(pref);
    if (!p) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: not a preference descriptor");
    Problem pr{desc_of(desc), layout_of(a), layout_of(b), layout_of(c), layout_of(d), 0, 0, 0};
    cublasStatus_t st = check_problem(&pr);
    if (st) return st;
    // FP8 kernels need 16-byte aligned operands; an alignment preference below that leaves no algorithm.
    if (is_fp8(pr.a->type))
        for (int i = 0; i < 4; i++)
            if (p->min_alignment[i] < 16)
                return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 needs 16-byte aligned matrices; MIN_ALIGNMENT_%c_BYTES is %u",
                              "ABCD"[i], p->min_alignment[i]);
    memset(&results[0], 0, sizeof results[0]);
    Algo* al = (Algo*)&results[0].algo;
    al->magic = kAlgoMagic;
    al->type_a = pr.a->type;
    al->type_b = pr.b->type;
    al->type_d = pr.dd->type;
    al->epilogue = pr.d->epilogue;
    al->transa = pr.d->transa;
    al->transb = pr.d->transb;
    for (int i = 0; i < 4; i++) al->min_alignment[i] = p->min_alignment[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// ---- the product ----
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc,
                              const void* beta_p, const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    if (!handle || ((LtHandle*)handle)->magic != kHandleMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
    Problem pr{desc_of(desc), layout_of(adesc), layout_of(bdesc), layout_of(cdesc), layout_of(ddesc), 0, 0, 0};
    cublasStatus_t st = check_problem(&pr);
    if (st) return st;
    if (!cuda_sim::valid_stream(stream)) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: invalid stream");
    const Desc* ds = pr.d;
    const Layout *la = pr.a, *lb = pr.b, *lc = pr.c, *ld = pr.dd;
    if (!alpha_p || !beta_p) return reject(CUBLAS_STATUS_INVALID_VALUE, "alpha and beta must not be NULL");
    float alpha = *(const float*)alpha_p, beta = *(const float*)beta_p;
    if (beta != 0.0f && is_fp8(ld->type))
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "beta != 0 (accumulation) with an FP8 D");
    if (algo) {
        const Algo* al = (const Algo*)algo;
        if (al->magic != kAlgoMagic)
            return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the algo did not come from cublasLtMatmulAlgoGetHeuristic");
        if (al->type_a != la->type || al->type_b != lb->type || al->type_d != ld->type || al->epilogue != ds->epilogue ||
            al->transa != ds->transa || al->transb != ds->transb)
            return reject(CUBLAS_STATUS_INVALID_VALUE,
                          "cublasLtMatmul: the algo was chosen for other types, transposes or epilogue");
        const void* ptrs[4] = {A, B, C, D};
        for (int i = 0; i < 4; i++) {
            uint32_t need = al->min_alignment[i] < 16 ? al->min_alignment[i] : 16;
            if (ptrs[i] && (uint32_t)alignment_of(ptrs[i]) < need)
                return reject(CUBLAS_STATUS_INVALID_VALUE,
                              "cublasLtMatmul: matrix %c at %p is %d-byte aligned, but the algo was chosen for "
                              "MIN_ALIGNMENT_%c_BYTES %u",
                              "ABCD"[i], ptrs[i], alignment_of(ptrs[i]), "ABCD"[i], al->min_alignment[i]);
        }
    }
    if (is_fp8(la->type)) {
        const void* ptrs[4] = {A, B, C, D};
        for (int i = 0; i < 4; i++)
            if (ptrs[i] && alignment_of(ptrs[i]) < 16)
                return reject(CUBLAS_STATUS_NOT_SUPPORTED, "FP8: matrix %c at %p is not 16-byte aligned", "ABCD"[i], ptrs[i]);
    }
    if (workspace_bytes && !cuda_sim::device_range(workspace, workspace_bytes))
        fatal("cublasLtMatmul: the workspace (%p, %zu bytes) is not inside one device allocation", workspace, workspace_bytes);
    bool use_c = beta != 0.0f;
    if (!C && use_c) return reject(CUBLAS_STATUS_INVALID_VALUE, "C is NULL with beta %g", beta);
    if (C == D && C && (lc->type != ld->type || lc->ld != ld->ld || lc->order != ld->order || lc->batch_stride != ld->batch_stride))
        return reject(CUBLAS_STATUS_INVALID_VALUE, "in-place C == D needs identical C and D layouts");
    check_memory("A", A, extent_bytes(la));
    check_memory("B", B, extent_bytes(lb));
    if (use_c) check_memory("C", C, extent_bytes(lc));
    check_memory("D", D, extent_bytes(ld));
    if (D == A || D == B) fatal("cublasLtMatmul: D aliases an input matrix");

    // Block scale modes: the scale pointers are tensors, 16-byte aligned;
    // refused when called (and so when captured), their contents read at run time.
    if (is_block_mode(ds->scale_mode[0])) {
        const void* sp[2] = {ds->a_scale, ds->b_scale};
        for (int i = 0; i < 2; i++) {
            const char* name = i ? "B_SCALE" : "A_SCALE";
            if (!sp[i]) return reject(CUBLAS_STATUS_INVALID_VALUE, "%s mode %s needs a scale pointer", name, mode_name(ds->scale_mode[i]));
            if (alignment_of(sp[i]) < 16)
                return reject(CUBLAS_STATUS_INVALID_VALUE, "%s (%s) at %p is not 16-byte aligned", name, mode_name(ds->scale_mode[i]), sp[i]);
        }
    }
    // What a stream capture freezes (graph.cpp): the descriptors' contents and
    // host-mode alpha and beta, as they are now. Device-mode alpha/beta and
    // every matrix, bias, aux and scale are read through their pointers when
    // the work runs, at each graph launch.
    const Desc dsc = *ds;
    const Layout lac = *la, lbc = *lb, lcc = *lc, ldc = *ld;
    const bool device_mode = ds->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
    const uint64_t m = pr.m, n = pr.n, k = pr.k;
    auto run = [=]() {
    const Desc* ds = &dsc;
    const Layout *la = &lac, *lb = &lbc, *lc = &lcc, *ld = &ldc;
    const double alpha_now = device_mode ? *(const float*)alpha_p : alpha;
    const double beta_now = device_mode ? *(const float*)beta_p : beta;
    const int batches = ld->batch_count;
    const uint32_t e = ds->epilogue;
    const int t_bias = bias_type(ds, la->type, ld->type), t_aux = aux_type(ds, ld->type);
    const size_t bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    if ((e & EPI_BIAS) || (e & EPI_BGRAD) || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB)
        check_memory("the bias vector", ds->bias,
                     (bias_len + (size_t)(batches - 1) * (size_t)ds->bias_batch_stride) * type_size(t_bias));
    if (epilogue_has_aux(e))
        check_memory("the epilogue aux matrix", ds->aux,
                     ((n - 1) * (size_t)ds->aux_ld + m + (size_t)(batches - 1) * (size_t)ds->aux_batch_stride) *
                         type_size(t_aux));
    auto scale = [&](const void* p, const char* name) {
        if (!p) return 1.0;
        check_memory(name, p, 4);
        return (double)*(const float*)p;
    };
    // Block scale modes: each scale tensor as large as its layout.
    BlockScales bsa, bsb;
    if (is_block_mode(ds->scale_mode[0])) {
        bsa = BlockScales{ds->scale_mode[0], ds->a_scale, pr.m, pr.k};
        bsb = BlockScales{ds->scale_mode[1], ds->b_scale, pr.n, pr.k};
        for (const BlockScales* b : {&bsa, &bsb}) check_memory(b == &bsa ? "A_SCALE" : "B_SCALE", b->p, b->bytes());
    }
    const bool block = bsa.p != nullptr;
    const double sa = block ? 1.0 : scale(ds->a_scale, "A_SCALE"), sb = block ? 1.0 : scale(ds->b_scale, "B_SCALE");
    const double sc = scale(ds->c_scale, "C_SCALE");
    const double sd = is_fp8(ld->type) ? scale(ds->d_scale, "D_SCALE") : 1.0;
    double amax = 0.0;

    std::vector<double> opa(m * k), opb(n * k), out(m * n);
    for (int bt = 0; bt < batches; bt++) {
        // op(A) row by row (m x k) and op(B) column by column (n x k), so each output is one dot product.
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t kk = 0; kk < k; kk++) {
                size_t o = ds->transa == CUBLAS_OP_N ? offset(la, i, kk, bt) : offset(la, kk, i, bt);
                double v = load(A, o, la->type);
                if (block) v *= bsa.at(i, kk);  // exact in double: an FP8 value times an FP32 or power-of-two scale
                opa[i * k + kk] = compute_input(v, ds->compute_type);
            }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t kk = 0; kk < k; kk++) {
                size_t o = ds->transb == CUBLAS_OP_N ? offset(lb, kk, j, bt) : offset(lb, j, kk, bt);
                double v = load(B, o, lb->type);
                if (block) v *= bsb.at(j, kk);
                opb[j * k + kk] = compute_input(v, ds->compute_type);
            }
#pragma omp parallel for schedule(static) if (m * n * k > (1u << 22))
        for (int64_t j = 0; j < (int64_t)n; j++)
            for (uint64_t i = 0; i < m; i++) {
                const double* x = &opa[i * k];
                const double* y = &opb[j * k];
                double acc = 0;
                for (uint64_t kk = 0; kk < k; kk++) acc += x[kk] * y[kk];
                double v = alpha_now * sa * sb * acc;
                if (use_c) v += beta_now * sc * load(C, offset(lc, i, j, bt), lc->type);
                out[j * m + i] = v;
            }
        const size_t bias_off = (size_t)bt * (size_t)ds->bias_batch_stride;
        const size_t aux_off = (size_t)bt * (size_t)ds->aux_batch_stride;
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                double v = out[j * m + i];
                if (e & EPI_BIAS) v += load(ds->bias, bias_off + i, t_bias);
                if (epilogue_has_aux(e) && (e & EPI_GELU)) store(ds->aux, aux_off + j * ds->aux_ld + i, t_aux, v);
                if (e & EPI_GELU) v = gelu((float)v);
                if ((e & EPI_RELU) && v < 0) v = 0;
                if (e & EPI_DGELU) v *= gelu_grad((float)load(ds->aux, aux_off + j * ds->aux_ld + i, t_aux));
                out[j * m + i] = v;
                amax = (v != v || amax != amax) ? NAN : std::max(amax, fabs(v));
                store(D, offset(ld, i, j, bt), ld->type, v * sd);
            }
        if (e & EPI_BGRAD) {  // DGELU_BGRAD: the epilogue's output summed over the columns
            for (uint64_t i = 0; i < m; i++) {
                double s = 0;
                for (uint64_t j = 0; j < n; j++) s += out[j * m + i];
                store((void*)ds->bias, bias_off + i, t_bias, s);
            }
        } else if (e == CUBLASLT_EPILOGUE_BGRADA) {
            for (uint64_t i = 0; i < m; i++) {
                double s = 0;
                for (uint64_t kk = 0; kk < k; kk++) s += opa[i * k + kk];
                store((void*)ds->bias, bias_off + i, t_bias, s);
            }
        } else if (e == CUBLASLT_EPILOGUE_BGRADB) {
            for (uint64_t j = 0; j < n; j++) {
                double s = 0;
                for (uint64_t kk = 0; kk < k; kk++) s += opb[j * k + kk];
                store((void*)ds->bias, bias_off + j, t_bias, s);
            }
        }
    }
    // cuBLASLt fills AMAX_D only when it writes an FP8 D: the absolute maximum before the D scale.
    if (ds->amax_d && is_fp8(ld->type)) {
        check_memory("AMAX_D", ds->amax_d, 4);
        *(float*)ds->amax_d = (float)amax;
    }
    cuda_sim::check_canaries("cublasLtMatmul");
    };
    cuda_sim::CaptureResult captured = cuda_sim::capture_record(stream, "cublasLtMatmul", run);
    if (captured == cuda_sim::CAPTURE_INVALIDATED) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (captured == cuda_sim::CAPTURE_NONE) run();
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
