// test_sim_cublaslt.cu: the simulated cuBLASLt against a plain double GEMM
// computed here, for every transpose, layout, type and epilogue combination
// the backend uses (and the FP8 ones it will), plus the calls cuBLASLt
// rejects and the memory errors that would fault on a GPU.
#include <cublasLt.h>

#include <vector>

#include "tests/cuda_sim/sim_test.h"

namespace {

double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

size_t tsize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 1; }

// Round-trips a value through a storage type (so the reference sees what the device holds).
double quantize(double v, cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: return (float)v;
    case CUDA_R_16BF: return __bfloat162float(__float2bfloat16_rn((float)v));
    case CUDA_R_16F: return __half2float(__float2half_rn((float)v));
    case CUDA_R_8F_E4M3: return (float)__nv_fp8_e4m3((float)v);
    case CUDA_R_8F_E5M2: return (float)__nv_fp8_e5m2((float)v);
    default: return 0;
    }
}
void put(std::vector<unsigned char>& buf, size_t i, cudaDataType_t t, double v) {
    float f = (float)v;
    switch (t) {
    case CUDA_R_32F: memcpy(&buf[i * 4], &f, 4); break;
    case CUDA_R_16BF: { __nv_bfloat16 b = __float2bfloat16_rn(f); memcpy(&buf[i * 2], &b, 2); break; }
    case CUDA_R_16F: { __half h = __float2half_rn(f); memcpy(&buf[i * 2], &h, 2); break; }
    case CUDA_R_8F_E4M3: buf[i] = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3); break;
    case CUDA_R_8F_E5M2: buf[i] = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2); break;
    default: break;
    }
}
double get(const std::vector<unsigned char>& buf, size_t i, cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: { float f; memcpy(&f, &buf[i * 4], 4); return f; }
    case CUDA_R_16BF: { __nv_bfloat16 b; memcpy(&b, &buf[i * 2], 2); return __bfloat162float(b); }
    case CUDA_R_16F: { __half h; memcpy(&h, &buf[i * 2], 2); return __half2float(h); }
    case CUDA_R_8F_E4M3: { __nv_fp8_e4m3 x; memcpy(&x, &buf[i], 1); return (float)x; }
    case CUDA_R_8F_E5M2: { __nv_fp8_e5m2 x; memcpy(&x, &buf[i], 1); return (float)x; }
    default: return 0;
    }
}
// Relative precision of a storage type.
double eps_of(cudaDataType_t t) {
    return t == CUDA_R_32F ? 2e-6 : t == CUDA_R_16BF ? 8e-3 : t == CUDA_R_16F ? 1e-3 : t == CUDA_R_8F_E4M3 ? 0.07 : 0.13;
}

struct Case {
    const char* name;
    cublasOperation_t ta, tb;
    int m, n, k;
    cudaDataType_t a_type, b_type, d_type;
    cublasLtEpilogue_t epilogue;
    float alpha, beta;  // beta != 0: D accumulates in place (C == D)
    int batch;
    bool row_major;     // A, B, C, D in CUBLASLT_ORDER_ROW
    bool scales;        // FP8 A/B/D scale pointers and AMAX_D
};

struct Mat {
    int rows, cols, ld, batch;
    long long stride;
    cudaDataType_t type;
    bool row;
    size_t elems() const { return (size_t)stride * (batch - 1) + (row ? (size_t)(rows - 1) * ld + cols : (size_t)(cols - 1) * ld + rows); }
    size_t at(int r, int c, int b) const { return (size_t)b * stride + (row ? (size_t)r * ld + c : (size_t)c * ld + r); }
};

Mat make_mat(int rows, int cols, cudaDataType_t t, bool row, int batch, int pad) {
    Mat x;
    x.rows = rows;
    x.cols = cols;
    x.ld = (row ? cols : rows) + pad;
    x.batch = batch;
    x.stride = (long long)x.ld * (row ? rows : cols) + 16;
    x.type = t;
    x.row = row;
    return x;
}

cublasLtMatrixLayout_t layout(const Mat& x) {
    cublasLtMatrixLayout_t l;
    CHECK(cublasLtMatrixLayoutCreate(&l, x.type, x.rows, x.cols, x.ld) == CUBLAS_STATUS_SUCCESS, "layout");
    if (x.row) {
        int32_t order = CUBLASLT_ORDER_ROW;
        CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order) == 0, "order");
    }
    if (x.batch > 1) {
        int32_t bc = x.batch;
        int64_t st = x.stride;
        CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc) == 0, "batch");
        CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st) == 0, "stride");
    }
    return l;
}

void* upload(const std::vector<unsigned char>& h) {
    void* d = nullptr;
    cudaMalloc(&d, h.size());
    cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice);
    return d;
}
std::vector<unsigned char> download(const void* d, size_t bytes) {
    std::vector<unsigned char> h(bytes);
    cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
    return h;
}

uint64_t g_seed = 42;
double rnd() { return (test_rand(&g_seed) / 4294967296.0) * 2.0 - 1.0; }

// Builds the case, runs it through the heuristic and cublasLtMatmul, and
// compares D (and aux, bias gradient, amax) against a double reference.
void run_case(const Case& c) {
    bool fp8 = c.a_type == CUDA_R_8F_E4M3 || c.a_type == CUDA_R_8F_E5M2;
    bool bias_in = c.epilogue & 4, gelu = c.epilogue & 32, aux_out = gelu && (c.epilogue & 128);
    bool dgelu = c.epilogue & 64, bgrad = (c.epilogue & 16) || c.epilogue == CUBLASLT_EPILOGUE_BGRADA ||
                                          c.epilogue == CUBLASLT_EPILOGUE_BGRADB;
    int pad = fp8 ? 16 : 3;
    Mat A = make_mat(c.ta == CUBLAS_OP_N ? c.m : c.k, c.ta == CUBLAS_OP_N ? c.k : c.m, c.a_type, c.row_major, c.batch, pad);
    Mat B = make_mat(c.tb == CUBLAS_OP_N ? c.k : c.n, c.tb == CUBLAS_OP_N ? c.n : c.k, c.b_type, c.row_major, c.batch, pad);
    Mat D = make_mat(c.m, c.n, c.d_type, c.row_major, c.batch, fp8 ? 16 : 1);
    std::vector<unsigned char> ha(A.elems() * tsize(A.type)), hb(B.elems() * tsize(B.type)), hd(D.elems() * tsize(D.type), 0xff);
    for (size_t i = 0; i < A.elems(); i++) put(ha, i, A.type, rnd() * (fp8 ? 4 : 1));
    for (size_t i = 0; i < B.elems(); i++) put(hb, i, B.type, rnd() * (fp8 ? 4 : 1));
    if (c.beta != 0)
        for (size_t i = 0; i < D.elems(); i++) put(hd, i, D.type, rnd());
    cudaDataType_t bias_t = fp8 ? CUDA_R_16BF : c.d_type;
    size_t bias_len = c.epilogue == CUBLASLT_EPILOGUE_BGRADB ? c.n : c.m;
    long long bias_stride = (long long)bias_len + 8;
    std::vector<unsigned char> hbias(((size_t)bias_stride * c.batch) * tsize(bias_t), 0xff);
    if (bias_in)
        for (size_t i = 0; i < hbias.size() / tsize(bias_t); i++) put(hbias, i, bias_t, rnd());
    int aux_ld = ((c.m + 7) / 8) * 8 + 8;
    long long aux_stride = (long long)aux_ld * c.n + 8;
    cudaDataType_t aux_t = c.d_type;
    std::vector<unsigned char> haux((size_t)aux_stride * c.batch * tsize(aux_t), 0xff);
    if (dgelu)
        for (size_t i = 0; i < haux.size() / tsize(aux_t); i++) put(haux, i, aux_t, rnd() * 2);
    float scale_a = 0.5f, scale_b = 0.25f, scale_d = 2.0f;

    void *dA = upload(ha), *dB = upload(hb), *dD = upload(hd), *dbias = upload(hbias), *daux = upload(haux);
    float* dscales = nullptr;
    cudaMalloc((void**)&dscales, 4 * sizeof(float));
    float hs[4] = {scale_a, scale_b, scale_d, -1.0f};
    cudaMemcpy(dscales, hs, sizeof hs, cudaMemcpyHostToDevice);

    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t desc;
    CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0, "desc");
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.ta, sizeof c.ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.tb, sizeof c.tb);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof c.epilogue);
    if (bias_in || bgrad) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
        int64_t bs = bias_stride;
        if (c.batch > 1) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs, sizeof bs);
    }
    if (aux_out || dgelu) {
        int64_t l = aux_ld, s = aux_stride;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &l, sizeof l);
        if (c.batch > 1) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &s, sizeof s);
    }
    if (c.scales) {
        float *pa = dscales, *pb = dscales + 1, *pd = dscales + 2, *pm = dscales + 3;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &pd, sizeof pd);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &pm, sizeof pm);
        int8_t fast = 1;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    }
    // An FP8 D takes a BF16 C.
    Mat Cm = D;
    if (fp8 && (c.d_type == CUDA_R_8F_E4M3 || c.d_type == CUDA_R_8F_E5M2)) Cm.type = CUDA_R_16BF;
    cublasLtMatrixLayout_t la = layout(A), lb = layout(B), lc = layout(Cm), ld = layout(D);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = 1 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    void* workspace = nullptr;
    cudaMalloc(&workspace, ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref, 1, &res, &found);
    CHECK(st == CUBLAS_STATUS_SUCCESS && found == 1, "%s: heuristic status %d, %d algos", c.name, (int)st, found);
    st = cublasLtMatmul(h, desc, &c.alpha, dA, la, dB, lb, &c.beta, c.beta != 0 ? dD : nullptr, lc, dD, ld,
                        found ? &res.algo : nullptr, workspace, ws, 0);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "%s: cublasLtMatmul status %d", c.name, (int)st);

    std::vector<unsigned char> rd = download(dD, hd.size()), raux = download(daux, haux.size()),
                               rbias = download(dbias, hbias.size());
    float amax_got;
    cudaMemcpy(&amax_got, dscales + 3, 4, cudaMemcpyDeviceToHost);

    // The D scale (and AMAX_D) only act when D is FP8.
    bool fp8_d = c.d_type == CUDA_R_8F_E4M3 || c.d_type == CUDA_R_8F_E5M2;
    double sab = c.scales ? (double)scale_a * scale_b : 1.0, sd = c.scales && fp8_d ? scale_d : 1.0;
    double amax = 0, worst = 0;
    int bad = 0;
    for (int bt = 0; bt < c.batch; bt++) {
        std::vector<double> outv((size_t)c.m * c.n);
        for (int i = 0; i < c.m; i++)
            for (int j = 0; j < c.n; j++) {
                double acc = 0, mag = 0;
                for (int kk = 0; kk < c.k; kk++) {
                    double a = c.ta == CUBLAS_OP_N ? get(ha, A.at(i, kk, bt), A.type) : get(ha, A.at(kk, i, bt), A.type);
                    double b = c.tb == CUBLAS_OP_N ? get(hb, B.at(kk, j, bt), B.type) : get(hb, B.at(j, kk, bt), B.type);
                    acc += a * b;
                    mag += fabs(a * b);
                }
                double v = c.alpha * sab * acc;
                mag = fabs(c.alpha * sab) * mag;
                if (c.beta != 0) {
                    double cv = get(hd, D.at(i, j, bt), D.type);
                    v += c.beta * cv;
                    mag += fabs(c.beta * cv);
                }
                if (bias_in) {
                    double bv = get(hbias, (size_t)bt * bias_stride + i, bias_t);
                    v += bv;
                    mag += fabs(bv);
                }
                size_t ai = (size_t)bt * aux_stride + (size_t)j * aux_ld + i;
                if (aux_out) {
                    double got = get(raux, ai, aux_t);
                    if (fabs(got - quantize(v, aux_t)) > 1e-5 * mag + 2 * eps_of(aux_t) * fabs(v) + 1e-6) bad++;
                }
                if (gelu) v = gelu_ref(v);
                if (dgelu) {
                    double g = gelu_grad_ref(get(haux, ai, aux_t));
                    v *= g;
                    mag *= fabs(g);
                }
                outv[(size_t)j * c.m + i] = v;
                amax = std::max(amax, fabs(v));
                double got = get(rd, D.at(i, j, bt), D.type);
                double want = v * sd;
                double tol = 1e-5 * mag * sd + 2 * eps_of(D.type) * fabs(want) + 1e-6;
                if (!(fabs(got - want) <= tol)) {
                    if (bad < 3)
                        fprintf(stderr, "  %s batch %d (%d,%d): got %g want %g\n", c.name, bt, i, j, got, want);
                    bad++;
                }
                worst = std::max(worst, fabs(got - want) / (tol));
            }
        if (bgrad) {
            int len = (int)bias_len;
            for (int i = 0; i < len; i++) {
                double s = 0;
                if (c.epilogue & 16)
                    for (int j = 0; j < c.n; j++) s += outv[(size_t)j * c.m + i];
                else if (c.epilogue == CUBLASLT_EPILOGUE_BGRADA)
                    for (int kk = 0; kk < c.k; kk++)
                        s += c.ta == CUBLAS_OP_N ? get(ha, A.at(i, kk, bt), A.type) : get(ha, A.at(kk, i, bt), A.type);
                else
                    for (int kk = 0; kk < c.k; kk++)
                        s += c.tb == CUBLAS_OP_N ? get(hb, B.at(kk, i, bt), B.type) : get(hb, B.at(i, kk, bt), B.type);
                double got = get(rbias, (size_t)bt * bias_stride + i, bias_t);
                if (!(fabs(got - s) <= 2 * eps_of(bias_t) * fabs(s) + 1e-4 * c.n)) {
                    if (bad < 3) fprintf(stderr, "  %s bias grad %d: got %g want %g\n", c.name, i, got, s);
                    bad++;
                }
            }
        }
    }
    CHECK(bad == 0, "%s: %d mismatches", c.name, bad);
    if (c.scales && fp8_d) CHECK_CLOSE(amax_got, amax, 1e-6, 1e-5, c.name);
    if (c.scales && !fp8_d) CHECK(amax_got == -1.0f, "%s: AMAX_D written for a non-FP8 D", c.name);

    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    for (void* p : {dA, dB, dD, dbias, daux, (void*)dscales, workspace}) cudaFree(p);
}

const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;

}  // namespace

// The four transposes for each precision, with and without accumulation.
static void transposes_and_types() {
    cudaDataType_t types[][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}, {CUDA_R_16F, CUDA_R_16F}};
    for (auto& t : types)
        for (cublasOperation_t ta : {N, T})
            for (cublasOperation_t tb : {N, T})
                for (float beta : {0.0f, 1.0f}) {
                    Case c{"gemm", ta, tb, 13, 9, 21, t[0], t[0], t[1], CUBLASLT_EPILOGUE_DEFAULT, 1.0f, beta, 1, false, false};
                    run_case(c);
                }
    run_case({"alpha 0.5 beta 2", T, N, 16, 8, 24, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 0.5f, 2.0f, 1, false, false});
}

// The backend's linear layer: forward TN with bias (+GELU_AUX in BF16),
// backward dinp NN and dweight NT accumulating; the fused backward epilogues.
static void epilogues() {
    cublasLtEpilogue_t eps[] = {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS,
                                CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB,
                                CUBLASLT_EPILOGUE_RELU_BIAS};
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16BF})
        for (cublasLtEpilogue_t e : eps) {
            Case c{"epilogue", T, N, 24, 10, 16, t, t, t, e, 1.0f, 0.0f, 1, false, false};
            run_case(c);
            c.ta = N;
            c.tb = T;
            run_case(c);
        }
}

static void batches_and_row_major() {
    run_case({"strided batch", T, N, 12, 7, 20, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 3, false, false});
    run_case({"batch + bias + gelu aux", T, N, 16, 5, 8, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 1, 0, 2, false, false});
    run_case({"batch accumulate NT", N, T, 9, 11, 6, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 1, 1, 4, false, false});
    for (cublasOperation_t ta : {N, T})
        for (cublasOperation_t tb : {N, T})
            run_case({"row major", ta, tb, 10, 6, 14, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 1, 1, 2, true, false});
}

static void fp8_gemms() {
    // E4M3 forward, E5M2 gradients (HYBRID), TN as Hopper requires, with scales and amax.
    run_case({"e4m3 x e4m3 -> bf16", T, N, 32, 16, 48, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 1, false, true});
    run_case({"e4m3 x e4m3 -> f32 + bias", T, N, 32, 16, 48, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, 1, 0, 1, false, true});
    run_case({"e4m3 x e4m3 -> e4m3 + bias", T, N, 32, 16, 32, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUBLASLT_EPILOGUE_BIAS, 1, 0, 1, false, true});
    run_case({"e5m2 x e4m3 -> bf16", T, N, 16, 32, 16, CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 1, false, true});
    run_case({"e4m3 x e5m2 -> e5m2", T, N, 16, 32, 16, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 1, false, true});
    run_case({"e4m3 x e5m2 -> bf16 + dgelu_bgrad", T, N, 16, 32, 16, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU_BGRAD, 1, 0, 1, false, true});
    run_case({"e4m3 bgradb", T, N, 16, 32, 16, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLASLT_EPILOGUE_BGRADB, 1, 0, 1, false, true});
}

// What real cuBLASLt refuses, refused the same way.
static cublasStatus_t heuristic_status(cudaDataType_t ta_t, cudaDataType_t tb_t, cudaDataType_t td_t, cublasOperation_t ta,
                                       cublasOperation_t tb, int lda_pad, cublasLtEpilogue_t epi, int64_t aux_ld) {
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    void* fake = (void*)0x1000;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &fake, sizeof fake);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &fake, sizeof fake);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    }
    int m = 32, n = 32, k = 32;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatrixLayoutCreate(&la, ta_t, ta == N ? m : k, ta == N ? k : m, (ta == N ? m : k) + lda_pad);
    cublasLtMatrixLayoutCreate(&lb, tb_t, tb == N ? k : n, tb == N ? n : k, tb == N ? k : n);
    cublasLtMatrixLayoutCreate(&lc, td_t == CUDA_R_8F_E4M3 ? CUDA_R_16BF : td_t, m, n, m);
    cublasLtMatrixLayoutCreate(&ld, td_t, m, n, m);
    cublasLtMatmulPreference_t p;
    cublasLtMatmulPreferenceCreate(&p);
    cublasLtMatmulHeuristicResult_t r;
    int found = -1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, ld, p, 1, &r, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found != 1) st = CUBLAS_STATUS_EXECUTION_FAILED;
    if (st != CUBLAS_STATUS_SUCCESS && found != 0) st = CUBLAS_STATUS_EXECUTION_FAILED;
    cublasLtMatmulPreferenceDestroy(p);
    for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
    return st;
}

static void rejected_like_cublaslt() {
    const cudaDataType_t E4 = CUDA_R_8F_E4M3, E5 = CUDA_R_8F_E5M2, BF = CUDA_R_16BF, F = CUDA_R_32F;
    const cublasLtEpilogue_t DEF = CUBLASLT_EPILOGUE_DEFAULT;
    CHECK(heuristic_status(E4, E4, BF, T, N, 0, DEF, 0) == CUBLAS_STATUS_SUCCESS, "FP8 TN is supported");
    CHECK(heuristic_status(E4, E4, BF, N, N, 0, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "FP8 NN is not (Hopper)");
    CHECK(heuristic_status(E4, E4, BF, T, T, 0, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "FP8 TT is not");
    setenv("CUDA_SIM_CC", "100", 1);  // a Blackwell takes per-tensor FP8 in any layout
    CHECK(heuristic_status(E4, E4, BF, N, N, 0, DEF, 0) == CUBLAS_STATUS_SUCCESS, "FP8 NN on sm_100");
    CHECK(heuristic_status(E4, E5, BF, N, T, 0, DEF, 0) == CUBLAS_STATUS_SUCCESS, "FP8 NT on sm_100");
    setenv("CUDA_SIM_CC", "89", 1);  // Ada: TN only, as Hopper
    CHECK(heuristic_status(E4, E4, BF, N, N, 0, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "FP8 NN on sm_89");
    unsetenv("CUDA_SIM_CC");
    CHECK(heuristic_status(E5, E5, BF, T, N, 0, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "E5M2 x E5M2 is not");
    CHECK(heuristic_status(E4, E4, BF, T, N, 8, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "FP8 lda 40 (not a multiple of 16)");
    CHECK(heuristic_status(E4, E4, E5, T, N, 0, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "E4M3 x E4M3 cannot write E5M2");
    CHECK(heuristic_status(BF, F, F, T, N, 0, DEF, 0) == CUBLAS_STATUS_NOT_SUPPORTED, "mixed BF16 x F32 inputs");
    CHECK(heuristic_status(BF, BF, BF, T, N, 0, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 36) == CUBLAS_STATUS_INVALID_VALUE,
          "GELU aux ld 36 is not divisible by 8");
    CHECK(heuristic_status(BF, BF, BF, T, N, 0, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 40) == CUBLAS_STATUS_SUCCESS, "aux ld 40");
    CHECK(heuristic_status(BF, BF, BF, T, N, -1, DEF, 0) == CUBLAS_STATUS_INVALID_VALUE, "lda below the rows");

    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int64_t wrong = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &wrong, sizeof wrong) == CUBLAS_STATUS_INVALID_VALUE,
          "TRANSA takes an int32, not 8 bytes");
    int32_t ld32 = 8;
    CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld32, sizeof ld32) == CUBLAS_STATUS_INVALID_VALUE,
          "EPILOGUE_AUX_LD takes an int64");
    cublasLtMatmulDescDestroy(d);
}

// Block scale modes (issue 27): which combinations cuBLASLt takes on which
// GPU, and scale tensors that are misaligned or smaller than their layout.
static cublasStatus_t block_status(int32_t ma, int32_t mb, cublasOperation_t ta, cublasOperation_t tb, cudaDataType_t td_t,
                                   bool run = false, size_t a_scale_bytes = 4096, int a_scale_skew = 0) {
    const int m = 256, n = 64, k = 256;
    uint8_t* A = device_alloc<uint8_t>((size_t)m * k);
    uint8_t* B = device_alloc<uint8_t>((size_t)n * k);
    uint8_t* sa = device_alloc<uint8_t>(a_scale_bytes + 16);
    uint8_t* sb = device_alloc<uint8_t>(4096);
    float* D = device_alloc<float>((size_t)m * n);
    cudaMemset(A, 0x38, (size_t)m * k);  // E4M3 1.0
    cudaMemset(B, 0x38, (size_t)n * k);
    cudaMemset(sa, 0, a_scale_bytes + 16);
    cudaMemset(sb, 0, 4096);
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb);
    const void* pa = sa + a_scale_skew;
    const void* pb = sb;
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb);
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, ta == N ? m : k, ta == N ? k : m, ta == N ? m : k);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, tb == N ? k : n, tb == N ? n : k, tb == N ? k : n);
    cublasLtMatrixLayoutCreate(&ld, td_t, m, n, m);
    cublasLtMatmulPreference_t p;
    cublasLtMatmulPreferenceCreate(&p);
    cublasLtMatmulHeuristicResult_t r;
    int found = -1;
    cublasLtMatrixLayout_t lc;  // an FP8 D takes a BF16 C
    cublasLtMatrixLayoutCreate(&lc, td_t == CUDA_R_8F_E4M3 ? CUDA_R_16BF : td_t, m, n, m);
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, ld, p, 1, &r, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found != 1) st = CUBLAS_STATUS_EXECUTION_FAILED;
    if (st == CUBLAS_STATUS_SUCCESS && run) {
        float alpha = 1, beta = 0;
        st = cublasLtMatmul(h, d, &alpha, A, la, B, lb, &beta, D, ld, D, ld, nullptr, nullptr, 0, 0);
    }
    cublasLtMatmulPreferenceDestroy(p);
    for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
    for (void* q : {(void*)A, (void*)B, (void*)sa, (void*)sb, (void*)D}) cudaFree(q);
    return st;
}

static void block_scale_modes() {
    const int32_t V32 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, V128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                  B128 = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, S = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    const cudaDataType_t BF = CUDA_R_16BF, F = CUDA_R_32F;
    const cublasStatus_t OK = CUBLAS_STATUS_SUCCESS, NO = CUBLAS_STATUS_NOT_SUPPORTED;
    // Hopper (the emulator's default device): DeepSeek's 1x128 and 128x128 FP32 scales, TN only.
    CHECK(block_status(B128, V128, T, N, BF) == OK, "BLK128x128 x VEC128 TN on sm_90");
    CHECK(block_status(V128, V128, T, N, F) == OK, "VEC128 x VEC128 TN on sm_90");
    CHECK(block_status(V128, B128, T, N, BF) == OK, "VEC128 x BLK128x128 TN on sm_90");
    CHECK(block_status(B128, B128, T, N, BF) == NO, "BLK128x128 on both operands");
    CHECK(block_status(B128, V128, N, N, BF) == NO, "block scales NN");
    CHECK(block_status(B128, V128, T, T, BF) == NO, "block scales TT");
    CHECK(block_status(B128, S, T, N, BF) == NO, "a block-scaled A with a scalar B");
    CHECK(block_status(V128, V128, T, N, CUDA_R_8F_E4M3) == NO, "block scales with an FP8 D");
    CHECK(block_status(V32, V32, T, N, BF) == NO, "MXFP8 on sm_90");
    CHECK(block_status(CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, T, N, BF) == NO,
          "VEC16_UE4M3 (not simulated)");
    // Blackwell: MXFP8, TN only although its per-tensor FP8 takes any layout; no 128-blocks.
    setenv("CUDA_SIM_CC", "100", 1);
    CHECK(block_status(V32, V32, T, N, BF) == OK, "MXFP8 TN on sm_100");
    CHECK(block_status(V32, V32, N, N, BF) == NO, "MXFP8 NN on sm_100");
    CHECK(block_status(V32, V128, T, N, BF) == NO, "VEC32 with VEC128");
    CHECK(block_status(B128, V128, T, N, BF) == NO, "BLK128x128 x VEC128 on sm_100");
    CHECK(block_status(V32, V32, T, N, BF, true, 256 * 8) == OK, "MXFP8 with a scale tensor of its layout's size runs");
    CHECK(block_status(V32, V32, T, N, BF, true, 256 * 8, 4) == CUBLAS_STATUS_INVALID_VALUE,
          "a scale tensor 4 bytes off 16-byte alignment");
    // 256 rows x 8 scales is 4 tiles of 512 bytes: one byte short reads past the allocation (a GPU faults).
    check_child_error([] { block_status(V32, V32, T, N, BF, true, 256 * 8 - 16 - 1); },
                      {"cublasLtMatmul: A_SCALE at", "not inside one device allocation"});
    unsetenv("CUDA_SIM_CC");
    // VEC128: 2 block columns x 256 rows of FP32; the buffer is 16 bytes bigger than asked, so ask 17 less.
    CHECK(block_status(V128, V128, T, N, BF, true, 2 * 256 * 4) == OK, "VEC128 with its layout's size runs");
    check_child_error([] { block_status(V128, V128, T, N, BF, true, 2 * 256 * 4 - 17); },
                      {"cublasLtMatmul: A_SCALE at", "not inside one device allocation"});
}

// Matrices that do not fit their allocations stop the program (a GPU faults).
static void memory_errors_are_reported() {
    float* a = device_alloc<float>(16 * 16);
    float* b = device_alloc<float>(16 * 16);
    float* out = device_alloc<float>(16 * 15);  // one column short
    auto gemm = [&](int ldd) {
        cublasLtHandle_t h;
        cublasLtCreate(&h);
        cublasLtMatmulDesc_t d;
        cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 16, 16, 16);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 16, 16, 16);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 16, 16, ldd);
        float alpha = 1, beta = 0;
        cublasLtMatmul(h, d, &alpha, a, la, b, lb, &beta, out, ld, out, ld, nullptr, nullptr, 0, 0);
    };
    check_child_error([&] { gemm(16); }, {"cublasLtMatmul: D at", "not inside one device allocation"});
    float host[256];
    check_child_error([&] {
        cublasLtHandle_t h;
        cublasLtCreate(&h);
        cublasLtMatmulDesc_t d;
        cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayout_t l;
        cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 16, 16, 16);
        float alpha = 1, beta = 0;
        cublasLtMatmul(h, d, &alpha, host, l, b, l, &beta, a, l, a, l, nullptr, nullptr, 0, 0);
    }, {"cublasLtMatmul: A at", "host memory"});
    cudaFree(a);
    cudaFree(b);
    cudaFree(out);
}

int main() {
    RUN(transposes_and_types);
    RUN(epilogues);
    RUN(batches_and_row_major);
    RUN(fp8_gemms);
    RUN(rejected_like_cublaslt);
    RUN(block_scale_modes);
    RUN(memory_errors_are_reported);
    return TESTS_DONE();
}
