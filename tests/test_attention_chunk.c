// test_attention_chunk.c: the query-offset attention ops context parallelism
// runs (Backend.attention_forward_chunk / attention_backward_chunk) on the
// CPU backend, against a float64 causal attention over the whole sequence:
// the sequence is cut into query chunks at odd places (and in context
// parallelism's order: the late chunk first), each chunk's out and lse must
// equal the reference rows at its positions, its dq the reference's, and
// the dK, dV the chunks add into one buffer must sum to the reference's
// dK, dV over the whole sequence (keys past a chunk untouched). Outputs are
// poisoned with NaN before the ops write them; dkv starts non-zero, to
// prove it accumulates. Grouped-query (NH 4, NKV 2) and multi-head shapes.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

static Backend* be;

typedef struct {
    int B, T, NH, NKV, HS;
} Shape;

static size_t qkv_w(const Shape* s) { return (size_t)(s->NH + 2 * s->NKV) * s->HS; }

// Float64 causal attention over (B, T, NH+2NKV, HS): out (B, T, NH, HS),
// lse (B, NH, T); backward from dout: dqkv (qkv's layout).
static void reference(const Shape* s, const double* qkv, const double* dout, double* out, double* lse,
                      double* dqkv) {
    int T = s->T, HS = s->HS, W = (int)qkv_w(s), G = s->NH / s->NKV;
    double scale = 1.0 / sqrt((double)HS);
    double* p = (double*)calloc((size_t)T, sizeof(double));
    memset(dqkv, 0, sizeof(double) * (size_t)s->B * T * W);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++) {
            int kv = h / G;
            for (int i = 0; i < T; i++) {
                const double* q = qkv + ((size_t)b * T + i) * W + h * HS;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double* k = qkv + ((size_t)b * T + j) * W + (s->NH + kv) * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    p[j] = d * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += exp(p[j] - mx);
                lse[((size_t)b * s->NH + h) * T + i] = mx + log(sum);
                for (int j = 0; j <= i; j++) p[j] = exp(p[j] - mx) / sum;
                double* o = out + ((size_t)b * T + i) * s->NH * HS + h * HS;
                const double* go = dout + ((size_t)b * T + i) * s->NH * HS + h * HS;
                for (int e = 0; e < HS; e++) o[e] = 0;
                for (int j = 0; j <= i; j++) {
                    const double* v = qkv + ((size_t)b * T + j) * W + (s->NH + s->NKV + kv) * HS;
                    for (int e = 0; e < HS; e++) o[e] += p[j] * v[e];
                }
                double D = 0;
                for (int e = 0; e < HS; e++) D += go[e] * o[e];
                double* dq = dqkv + ((size_t)b * T + i) * W + h * HS;
                for (int j = 0; j <= i; j++) {
                    size_t r = ((size_t)b * T + j) * W;
                    const double* k = qkv + r + (s->NH + kv) * HS;
                    const double* v = qkv + r + (s->NH + s->NKV + kv) * HS;
                    double dp = 0;
                    for (int e = 0; e < HS; e++) dp += go[e] * v[e];
                    double ds = p[j] * (dp - D) * scale;
                    for (int e = 0; e < HS; e++) {
                        dq[e] += ds * k[e];
                        dqkv[r + (s->NH + kv) * HS + e] += ds * q[e];
                        dqkv[r + (s->NH + s->NKV + kv) * HS + e] += p[j] * go[e];
                    }
                }
            }
        }
    free(p);
}

static float* falloc(size_t n) { return (float*)be->alloc(be, n * sizeof(float), "test buffer"); }

// One shape, its sequence cut at `cuts` (chunk starts, ascending, then T),
// the chunks run in the order `order` gives.
static void check_chunks(const Shape* s, const int* cuts, int nchunks, const int* order) {
    int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HS = s->HS, W = (int)qkv_w(s);
    size_t nqkv = (size_t)B * T * W, nout = (size_t)B * T * NH * HS, nkv = (size_t)B * T * 2 * NKV * HS;
    double *dq = malloc(nqkv * 8), *dd = malloc(nout * 8), *ro = malloc(nout * 8), *rl = malloc((size_t)B * NH * T * 8),
           *rd = malloc(nqkv * 8);
    float* qkv = falloc(nqkv);
    float* dout = falloc(nout);
    float* kv = falloc(nkv);
    float* dkv = falloc(nkv);
    float* dkv0 = falloc(nkv);
    uint64_t key = rng_key(26, (uint64_t)T, (uint64_t)NH * 16 + NKV);
    for (size_t i = 0; i < nqkv; i++) dq[i] = qkv[i] = rng_normal(key, i);
    for (size_t i = 0; i < nout; i++) dd[i] = dout[i] = rng_normal(key, nqkv + i);
    for (size_t i = 0; i < nkv; i++) dkv0[i] = dkv[i] = 0.5f * rng_normal(key, nqkv + nout + i);
    reference(s, dq, dd, ro, rl, rd);
    // The sequence's keys and values in kv's layout.
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            memcpy(kv + ((size_t)b * T + t) * 2 * NKV * HS, qkv + ((size_t)b * T + t) * W + NH * HS,
                   sizeof(float) * 2 * NKV * HS);
    double worst_o = 0, worst_l = 0, worst_q = 0, worst_kv = 0;
    for (int ci = 0; ci < nchunks; ci++) {
        int c = order[ci], q0 = cuts[c], Tq = cuts[c + 1] - q0;
        // The chunk's own rows, packed (B, Tq, ...) as the model passes them.
        float* cq = falloc((size_t)B * Tq * W);
        float* cdo = falloc((size_t)B * Tq * NH * HS);
        float* co = falloc((size_t)B * Tq * NH * HS);
        float* cl = falloc((size_t)B * NH * Tq);
        float* cdq = falloc((size_t)B * Tq * W);
        for (int b = 0; b < B; b++) {
            memcpy(cq + (size_t)b * Tq * W, qkv + ((size_t)b * T + q0) * W, sizeof(float) * Tq * W);
            memcpy(cdo + (size_t)b * Tq * NH * HS, dout + ((size_t)b * T + q0) * NH * HS, sizeof(float) * Tq * NH * HS);
        }
        for (size_t i = 0; i < (size_t)B * Tq * NH * HS; i++) co[i] = NAN;
        for (size_t i = 0; i < (size_t)B * NH * Tq; i++) cl[i] = NAN;
        for (size_t i = 0; i < (size_t)B * Tq * W; i++) cdq[i] = 7.0f;  // key/value heads must stay 7
        be->attention_forward_chunk(be, co, cl, cq, kv, B, Tq, T, q0, NH, NKV, HS);
        be->attention_backward_chunk(be, cdq, dkv, cdo, cq, kv, co, cl, B, Tq, T, q0, NH, NKV, HS);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < Tq; i++) {
                for (int e = 0; e < NH * HS; e++) {
                    double g = co[((size_t)b * Tq + i) * NH * HS + e], w = ro[((size_t)b * T + q0 + i) * NH * HS + e];
                    worst_o = fmax(worst_o, isfinite(g) ? fabs(g - w) : INFINITY);
                }
                for (int h = 0; h < NH; h++) {
                    double g = cl[((size_t)b * NH + h) * Tq + i], w = rl[((size_t)b * NH + h) * T + q0 + i];
                    worst_l = fmax(worst_l, isfinite(g) ? fabs(g - w) : INFINITY);
                }
                for (int e = 0; e < W; e++) {
                    double g = cdq[((size_t)b * Tq + i) * W + e];
                    double w = e < NH * HS ? rd[((size_t)b * T + q0 + i) * W + e] : 7.0;
                    worst_q = fmax(worst_q, isfinite(g) ? fabs(g - w) : INFINITY);
                }
            }
        be->free(be, cq);
        be->free(be, cdo);
        be->free(be, co);
        be->free(be, cl);
        be->free(be, cdq);
    }
    // dkv - its starting value = the reference's dK, dV over the whole sequence.
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int e = 0; e < 2 * NKV * HS; e++) {
                size_t i = ((size_t)b * T + t) * 2 * NKV * HS + e;
                double g = (double)dkv[i] - dkv0[i], w = rd[((size_t)b * T + t) * W + NH * HS + e];
                worst_kv = fmax(worst_kv, isfinite(g) ? fabs(g - w) : INFINITY);
            }
    printf("# attention chunks B=%d T=%d NH=%d NKV=%d HS=%d in %d chunks: max |diff| out %.2g lse %.2g dq %.2g "
           "dkv %.2g\n",
           B, T, NH, NKV, HS, nchunks, worst_o, worst_l, worst_q, worst_kv);
    CHECK(worst_o <= 2e-5, "out differs by %g", worst_o);
    CHECK(worst_l <= 2e-5, "lse differs by %g", worst_l);
    CHECK(worst_q <= 5e-5, "dq (or the untouched k/v heads) differs by %g", worst_q);
    CHECK(worst_kv <= 5e-5, "dk/dv differ by %g", worst_kv);
    free(dq);
    free(dd);
    free(ro);
    free(rl);
    free(rd);
    be->free(be, qkv);
    be->free(be, dout);
    be->free(be, kv);
    be->free(be, dkv);
    be->free(be, dkv0);
}

// GQA, an odd length cut at odd places, run last chunk first.
static void test_attention_chunk_gqa(void) {
    Shape s = {2, 37, 4, 2, 8};
    int cuts[] = {0, 5, 18, 19, 37};
    int order[] = {3, 0, 2, 1};
    check_chunks(&s, cuts, 4, order);
}

// Multi-head (GPT-2), context parallelism's order for 2 ranks of 2 chunks:
// rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2; long enough to use
// several query blocks and key blocks.
static void test_attention_chunk_mha_cp_order(void) {
    Shape s = {1, 200, 3, 3, 16};
    int cuts[] = {0, 50, 100, 150, 200};
    int order[] = {0, 3, 1, 2};
    check_chunks(&s, cuts, 4, order);
}

// One chunk of the whole sequence is the plain op.
static void test_attention_chunk_whole_is_plain(void) {
    int B = 2, T = 29, NH = 4, NKV = 1, HS = 6, W = (NH + 2 * NKV) * HS;
    float* qkv = falloc((size_t)B * T * W);
    float* kv = falloc((size_t)B * T * 2 * NKV * HS);
    uint64_t key = rng_key(26, 1, 2);
    for (int i = 0; i < B * T * W; i++) qkv[i] = rng_normal(key, (uint64_t)i);
    for (int t = 0; t < B * T; t++) memcpy(kv + (size_t)t * 2 * NKV * HS, qkv + (size_t)t * W + NH * HS, sizeof(float) * 2 * NKV * HS);
    float* o1 = falloc((size_t)B * T * NH * HS);
    float* o2 = falloc((size_t)B * T * NH * HS);
    float* l1 = falloc((size_t)B * NH * T);
    float* l2 = falloc((size_t)B * NH * T);
    be->attention_forward(be, o1, l1, qkv, B, T, NH, NKV, HS);
    be->attention_forward_chunk(be, o2, l2, qkv, kv, B, T, T, 0, NH, NKV, HS);
    CHECK(!memcmp(o1, o2, sizeof(float) * B * T * NH * HS), "out differs from the plain op's bits");
    CHECK(!memcmp(l1, l2, sizeof(float) * B * NH * T), "lse differs from the plain op's bits");
    be->free(be, qkv);
    be->free(be, kv);
    be->free(be, o1);
    be->free(be, o2);
    be->free(be, l1);
    be->free(be, l2);
}

int main(void) {
    be = cpu_backend_create(DTYPE_F32, 2);
    RUN(test_attention_chunk_gqa);
    RUN(test_attention_chunk_mha_cp_order);
    RUN(test_attention_chunk_whole_is_plain);
    be->destroy(be);
    return testlib_failures > 100 ? 100 : testlib_failures;
}
