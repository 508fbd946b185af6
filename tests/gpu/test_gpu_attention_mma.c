// test_gpu_attention_mma.c: the native mma.sync attention (kernels/cuda/
// attention_mma.cu) through its contract entry points, against a float64
// reference in this file that implements grouped-query attention: qkv
// (B, T, NH + 2 NKV, HS), query head h reading kv head h / (NH / NKV), out
// (B, T, NH, HS), lse (B, NH, T), dqkv like qkv. Odd shapes: T not a multiple
// of any tile, NH not a power of two, NKV < NH; outputs poisoned with NaN so an
// element never written fails; backward twice, bit for bit. The harness runs
// this program in order and with random thread scheduling.
#include "tests/gpu/gpu_test.h"

void cuda_attention_forward_native(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                                   int HS);
void cuda_attention_backward_native(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                                    const float* lse, int B, int T, int NH, int NKV, int HS);

// float64 reference: out, lse; then dqkv from dout (D from the reference's own out).
static void reference(const float* qkv, const float* dout, double* out, double* lse, double* dqkv, int B, int T,
                      int NH, int NKV, int HS) {
    int W = NH + 2 * NKV, group = NH / NKV;
    double scale = 1.0 / sqrt((double)HS);
    double* p = (double*)xmalloc((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * W * HS * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / group;
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)(b * T + t) * W + h) * HS;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float* k = qkv + ((size_t)(b * T + j) * W + NH + g) * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += (double)q[d] * k[d];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
                double* o = out + ((size_t)(b * T + t) * NH + h) * HS;
                for (int d = 0; d < HS; d++) o[d] = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float* v = qkv + ((size_t)(b * T + j) * W + NH + NKV + g) * HS;
                    for (int d = 0; d < HS; d++) o[d] += p[j] / sum * v[d];
                }
                // Backward of this row: D = dout . out; dS_j = P_j (dout . v_j - D) scale.
                const float* go = dout + ((size_t)(b * T + t) * NH + h) * HS;
                double D = 0.0;
                for (int d = 0; d < HS; d++) D += (double)go[d] * o[d];
                double* dq = dqkv + ((size_t)(b * T + t) * W + h) * HS;
                for (int j = 0; j <= t; j++) {
                    const float* k = qkv + ((size_t)(b * T + j) * W + NH + g) * HS;
                    const float* v = qkv + ((size_t)(b * T + j) * W + NH + NKV + g) * HS;
                    double* dk = dqkv + ((size_t)(b * T + j) * W + NH + g) * HS;
                    double* dv = dqkv + ((size_t)(b * T + j) * W + NH + NKV + g) * HS;
                    double P = p[j] / sum, dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += (double)go[d] * v[d];
                    double ds = P * (dp - D) * scale;
                    for (int d = 0; d < HS; d++) {
                        dv[d] += P * go[d];
                        dq[d] += ds * k[d];
                        dk[d] += ds * q[d];
                    }
                }
            }
        }
    free(p);
}

// max |got - want| / max |want| over n, infinite if got has a non-finite value.
static double error_vs(const float* got, const double* want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num = fmax(num, fabs(got[i] - want[i]));
        den = fmax(den, fabs(want[i]));
    }
    return den > 0 ? num / den : num;
}

static void attention_case(int B, int T, int NH, int NKV, int HS) {
    int W = NH + 2 * NKV;
    size_t nqkv = (size_t)B * T * W * HS, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    float *qkv = host_normal(nqkv, 1.0f), *dout = host_normal(nout, 1.0f);
    double* r_out = (double*)xmalloc(nout * sizeof(double));
    double* r_lse = (double*)xmalloc(nlse * sizeof(double));
    double* r_dqkv = (double*)xmalloc(nqkv * sizeof(double));
    reference(qkv, dout, r_out, r_lse, r_dqkv, B, T, NH, NKV, HS);

    void *g_qkv = gpu_from(qkv, nqkv), *g_out = gpu_nan(nout), *g_dout = gpu_from(dout, nout);
    void* g_dqkv = gpu_nan(nqkv);
    float* g_lse = gpu_nan_f32(nlse);
    cuda_attention_forward_native(gpu, g_out, g_lse, g_qkv, B, T, NH, NKV, HS);
    cuda_attention_backward_native(gpu, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, NH, NKV, HS);
    float* out = gpu_read(g_out, nout);
    float* lse = gpu_read_f32(g_lse, nlse);
    float* dqkv = gpu_read(g_dqkv, nqkv);
    double e_out = error_vs(out, r_out, nout), e_lse = error_vs(lse, r_lse, nlse), e_d = error_vs(dqkv, r_dqkv, nqkv);
    printf("#   B=%d T=%d NH=%d NKV=%d HS=%d: rel err out %.2e lse %.2e dqkv %.2e\n", B, T, NH, NKV, HS, e_out, e_lse,
           e_d);
    // BF16 inputs are exact in both; the kernel rounds P to BF16 for P V (2^-9
    // relative) and stores BF16 results: 1-2% of the largest value.
    CHECK(e_out <= 0.01, "out B=%d T=%d NH=%d NKV=%d HS=%d: relative error %.3g", B, T, NH, NKV, HS, e_out);
    CHECK(e_lse <= 0.005, "lse B=%d T=%d NH=%d NKV=%d HS=%d: relative error %.3g", B, T, NH, NKV, HS, e_lse);
    CHECK(e_d <= 0.02, "dqkv B=%d T=%d NH=%d NKV=%d HS=%d: relative error %.3g", B, T, NH, NKV, HS, e_d);
    // Each of dq, dk, dv on its own (a part left unwritten or zero must not hide behind a larger one).
    for (int part = 0; part < 3; part++) {
        int h0 = part == 0 ? 0 : part == 1 ? NH : NH + NKV, nh = part == 0 ? NH : NKV;
        double num = 0.0, den = 0.0;
        for (size_t bt = 0; bt < (size_t)B * T; bt++)
            for (size_t i = 0; i < (size_t)nh * HS; i++) {
                size_t k = bt * W * HS + (size_t)h0 * HS + i;
                num = fmax(num, isfinite(dqkv[k]) ? fabs(dqkv[k] - r_dqkv[k]) : INFINITY);
                den = fmax(den, fabs(r_dqkv[k]));
            }
        // (With one token dq and dk are exactly zero: P = 1, so dS = dout . v - D = 0.)
        CHECK((den > 0 || T == 1) && num <= 0.02 * den, "d%c T=%d NH=%d NKV=%d HS=%d: error %.3g of max %.3g", "qkv"[part], T, NH,
              NKV, HS, num, den);
    }
    // Deterministic: a second backward into a fresh poisoned buffer is the same bits.
    void* g_dqkv2 = gpu_nan(nqkv);
    cuda_attention_backward_native(gpu, g_dqkv2, g_dout, g_qkv, g_out, g_lse, B, T, NH, NKV, HS);
    float* dqkv2 = gpu_read(g_dqkv2, nqkv);
    CHECK(memcmp(dqkv, dqkv2, nqkv * sizeof(float)) == 0, "backward T=%d NH=%d NKV=%d is not deterministic", T, NH,
          NKV);
    free(dqkv2);
    gpu->free(gpu, g_dqkv2);
    free(out);
    free(lse);
    free(dqkv);
    gpu->free(gpu, g_qkv);
    gpu->free(gpu, g_out);
    gpu->free(gpu, g_dout);
    gpu->free(gpu, g_dqkv);
    gpu->free(gpu, g_lse);
    free(r_out);
    free(r_lse);
    free(r_dqkv);
    free(qkv);
    free(dout);
}

static void test_native_attention_mha(void) {
    attention_case(1, 1, 1, 1, 64);     // one token
    attention_case(2, 37, 3, 3, 64);    // T below every tile, NH = 3
    attention_case(1, 161, 3, 3, 128);  // two forward blocks, 3 dK/dV blocks, the last ones partial
    attention_case(1, 70, 2, 2, 32);
    if (!test_small()) {
        attention_case(2, 1000, 12, 12, 64);
        attention_case(1, 2053, 5, 5, 128);
    }
}

static void test_native_attention_gqa(void) {
    attention_case(1, 75, 6, 2, 64);    // groups of 3
    attention_case(2, 130, 3, 1, 128);  // one kv head for three query heads
    attention_case(1, 33, 4, 2, 32);
    if (!test_small()) {
        attention_case(2, 1500, 12, 4, 64);
        attention_case(1, 4099, 8, 2, 128);
    }
}

int main(void) {
    gpu = cuda_backend_create(DTYPE_BF16);
    RUN(test_native_attention_mha);
    RUN(test_native_attention_gqa);
    gpu->destroy(gpu);
    return TESTS_DONE();
}
