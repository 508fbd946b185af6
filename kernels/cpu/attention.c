// attention.c: causal multi-head self-attention on the CPU, in O(T) memory
// per thread: only lse (log-sum-exp of each query's scaled scores) is kept for
// the backward pass, which recomputes the probabilities. No T x T matrix ever
// exists: queries are processed four at a time, with a row of T scores each.
//
// Layout: qkv (B,T,NH+2*NKV,HS): token (b,t)'s row holds its NH query heads,
// then its NKV key heads, then its NKV value heads (GPT-2: NKV = NH, three
// C-wide blocks). Query head h reads kv head h / (NH/NKV). out (B,T,NH,HS);
// lse (B,NH,T).
//
// The same code runs the query-offset form of context parallelism
// (attention_forward_chunk): T queries at positions q0..q0+T-1 of a
// sequence, whose keys and values come from a separate (B,Tkv,2*NKV,HS)
// buffer of the whole sequence; query i sees keys 0..q0+i. The plain op is
// q0 = 0 with the keys read from qkv itself, so both share every line below.
//
// Speed: every inner loop runs along the keys, 16 per AVX-512 vector, never
// along the head dimension (a dot product of HS = 16..64 floats per key costs
// a horizontal reduction per key). For that each worker first copies the K
// and V of its head into transposed HS x T panels (kt[d][j] = K_j[d]), so the
// scores of a query are HS scaled rows of kt summed, and its output is HS dot
// products of the probability row with rows of vt. Scratch per thread:
// forward 2*HS*T + 4*T floats, backward 4*HS*T + 12*T floats. The build is
// ISO C (no implicit FMA contraction), so the inner products use fmaf.
#include <omp.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

// Keys per block in the score loops (4 AVX-512 vectors of accumulators).
#define KEY_BLOCK 64
// Queries that share each pass over the key panels.
#define QUERY_GROUP 4
// Queries per forward task (a multiple of QUERY_GROUP); each task
// re-transposes the keys it needs, ~1/(2*QUERY_BLOCK) of its arithmetic.
#define QUERY_BLOCK 128

typedef struct {
    int T, NH, NKV, HS;  // T: the queries
    int q0;         // the first query's position: query i sees keys 0..q0+i
    int group;      // NH / NKV: query heads per kv head
    int C;          // floats per token of out and dout (NH*HS)
    size_t stride;  // floats between consecutive tokens' rows of qkv ((NH+2*NKV)*HS)
    size_t kv_stride;       // ... of the key/value rows (stride, or 2*NKV*HS for a separate kv buffer)
    size_t k_off0, v_off0;  // kv head 0's key and value inside a key/value row
    size_t ld;      // row length of the transposed panels: >= q0+T rounded up to KEY_BLOCK
    float scale;    // 1/sqrt(HS)
} Shape;

// The plain layout: queries at positions 0..T-1, keys and values in qkv.
static Shape make_shape(int T, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
        fatal("attention: NH=%d query heads are not a multiple of NKV=%d key/value heads", NH, NKV);
    if (HS <= 0) fatal("attention: head size %d", HS);
    Shape s;
    s.T = T;
    s.NH = NH;
    s.NKV = NKV;
    s.HS = HS;
    s.group = NH / NKV;
    s.C = NH * HS;
    s.stride = (size_t)(NH + 2 * NKV) * HS;
    s.q0 = 0;
    s.kv_stride = s.stride;
    s.k_off0 = (size_t)NH * HS;
    s.v_off0 = (size_t)(NH + NKV) * HS;
    // One extra cache line per panel row: with rows a multiple of 4 KiB apart
    // the HS rows would all fall in the same L1 sets.
    s.ld = round_up((size_t)T, KEY_BLOCK) + 16;
    s.scale = 1.0f / sqrtf((float)s.HS);
    return s;
}

// The query-offset layout: T queries at q0.., keys and values (Tkv >= q0+T
// rows of 2*NKV heads: keys, then values) in a buffer of their own.
static Shape make_chunk_shape(int T, int Tkv, int q0, int NH, int NKV, int HS) {
    if (q0 < 0 || T <= 0 || q0 + T > Tkv)
        fatal("attention: queries %d..%d do not fit in %d keys", q0, q0 + T - 1, Tkv);
    Shape s = make_shape(T, NH, NKV, HS);
    s.q0 = q0;
    s.kv_stride = (size_t)2 * NKV * HS;
    s.k_off0 = 0;
    s.v_off0 = (size_t)NKV * HS;
    s.ld = round_up((size_t)(q0 + T), KEY_BLOCK) + 16;
    return s;
}

static inline float dot(const float* a, const float* b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

// Copies HS-float rows 0..n-1 (`stride` apart) of src into the columns of the
// HS x ld panel dst, and zeroes columns n..round_up(n, KEY_BLOCK)-1 so that
// whole key blocks can be read. Works in blocks of 16 keys so that each
// store fills a whole cache line of a panel row.
static void transpose_rows(float* dst, const float* src, int n, const Shape* s) {
    int padded = (int)round_up((size_t)n, KEY_BLOCK);
    for (int j0 = 0; j0 < padded; j0 += 16) {
        int len = n - j0 < 16 ? n - j0 : 16;
        if (len < 0) len = 0;
        for (int d = 0; d < s->HS; d++) {
            float* out = dst + d * s->ld + j0;
            const float* in = src + j0 * s->kv_stride + d;
            for (int j = 0; j < len; j++) out[j] = in[j * s->kv_stride];
            for (int j = len; j < 16; j++) out[j] = 0.0f;
        }
    }
}

// out[g][j] = scale * sum_d x[g][d] * panel[d][j] for the QUERY_GROUP vectors
// x[g] and j < n (and the rest of the last key block); out rows are `ld`
// apart. The accumulators of one key block stay in registers across the HS
// rows, and every panel value loaded serves four queries, which keeps the
// loop off the memory bus once the panels outgrow the caches.
static void panel_products_group(float* out, const float* const x[QUERY_GROUP],
                                 const float* panel, int n, float scale, const Shape* s) {
    size_t ld = s->ld;
    for (int j0 = 0; j0 < n; j0 += KEY_BLOCK) {
        float a0[KEY_BLOCK], a1[KEY_BLOCK], a2[KEY_BLOCK], a3[KEY_BLOCK];
#pragma omp simd
        for (int j = 0; j < KEY_BLOCK; j++) a0[j] = a1[j] = a2[j] = a3[j] = 0.0f;
        for (int d = 0; d < s->HS; d++) {
            const float* row = panel + d * ld + j0;
            float x0 = x[0][d], x1 = x[1][d], x2 = x[2][d], x3 = x[3][d];
#pragma omp simd
            for (int j = 0; j < KEY_BLOCK; j++) {
                float r = row[j];
                a0[j] = fmaf(x0, r, a0[j]);
                a1[j] = fmaf(x1, r, a1[j]);
                a2[j] = fmaf(x2, r, a2[j]);
                a3[j] = fmaf(x3, r, a3[j]);
            }
        }
#pragma omp simd
        for (int j = 0; j < KEY_BLOCK; j++) {
            out[j0 + j] = a0[j] * scale;
            out[ld + j0 + j] = a1[j] * scale;
            out[2 * ld + j0 + j] = a2[j] * scale;
            out[3 * ld + j0 + j] = a3[j] * scale;
        }
    }
}

// Turns a row of n scores into exp(score - max) in place, zeroes it from n to
// n_pad (the keys a later query of the group sees but this one must not), and
// returns the lse and 1/sum.
static float softmax_row(float* row, int n, int n_pad, float* inv_sum) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        float e = cpu_expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    for (int j = n; j < n_pad; j++) row[j] = 0.0f;
    *inv_sum = 1.0f / sum;
    return mx + logf(sum);
}

// Queries i..i+QUERY_GROUP-1 of one head (those past T, if any, repeat the
// last one and are not stored): outputs o (rows C apart) and lse.
static void attend_query_group(float* o, float* lse, const float* q, int i, const float* kt,
                               const float* vt, float* rows, const Shape* s) {
    int last = s->T - 1;
    const float* x[QUERY_GROUP];
    int n[QUERY_GROUP];
    for (int g = 0; g < QUERY_GROUP; g++) {
        int t = i + g < last ? i + g : last;
        x[g] = q + (size_t)(t - i) * s->stride;
        n[g] = s->q0 + t + 1;
    }
    int n_max = n[QUERY_GROUP - 1];
    panel_products_group(rows, x, kt, n_max, s->scale, s);
    float inv[QUERY_GROUP], l[QUERY_GROUP];
    for (int g = 0; g < QUERY_GROUP; g++) l[g] = softmax_row(rows + g * s->ld, n[g], n_max, &inv[g]);
    const float* r0 = rows;
    const float* r1 = rows + s->ld;
    const float* r2 = rows + 2 * s->ld;
    const float* r3 = rows + 3 * s->ld;
    int stored = s->T - i < QUERY_GROUP ? s->T - i : QUERY_GROUP;
    for (int d = 0; d < s->HS; d++) {
        const float* v = vt + d * s->ld;
        float o0 = 0.0f, o1 = 0.0f, o2 = 0.0f, o3 = 0.0f;
#pragma omp simd reduction(+ : o0, o1, o2, o3)
        for (int j = 0; j < n_max; j++) {
            o0 = fmaf(r0[j], v[j], o0);
            o1 = fmaf(r1[j], v[j], o1);
            o2 = fmaf(r2[j], v[j], o2);
            o3 = fmaf(r3[j], v[j], o3);
        }
        float og[QUERY_GROUP] = {o0, o1, o2, o3};
        for (int g = 0; g < stored; g++) o[(size_t)g * s->C + d] = og[g] * inv[g];
    }
    for (int g = 0; g < stored; g++) lse[g] = l[g];
}

// Floats of scratch per thread: the K and V panels and a group of score rows
// (forward); K, V, dK, dV panels and three groups of rows (backward).
static size_t forward_floats_per_thread(const Shape* s) { return (2 * (size_t)s->HS + QUERY_GROUP) * s->ld; }
static size_t backward_floats_per_thread(const Shape* s) { return (4 * (size_t)s->HS + 3 * QUERY_GROUP) * s->ld; }

size_t cpu_attention_scratch_bytes(int T, int HS, int threads) {
    Shape s = make_shape(T, 1, 1, HS);
    size_t f = forward_floats_per_thread(&s), b = backward_floats_per_thread(&s);
    return (size_t)threads * (f > b ? f : b) * sizeof(float);
}

// Offsets inside a token's qkv row of query head h, kv head kv's key and value.
static size_t q_offset(const Shape* s, int h) { return (size_t)h * s->HS; }
static size_t k_offset(const Shape* s, int kv) { return s->k_off0 + (size_t)kv * s->HS; }
static size_t v_offset(const Shape* s, int kv) { return s->v_off0 + (size_t)kv * s->HS; }

// Both forms: kv holds batch row b's keys and values from kv + b * kv_batch.
static void attention_forward(Backend* be, float* out, float* lse, const float* qkv, const float* kv,
                              size_t kv_batch, int B, const Shape* sp) {
    Shape s = *sp;
    int T = s.T, NH = s.NH, C = s.C;
    size_t per_thread = forward_floats_per_thread(&s);
    int nthreads = omp_get_max_threads();
    float* scratch = (float*)cpu_scratch(be, nthreads * per_thread * sizeof(float),
                                         "attention forward panels");
    int blocks = (int)ceil_div((size_t)T, QUERY_BLOCK);
    int tasks = B * NH * blocks;
    double work = (double)B * NH * T * (s.q0 + T) * s.HS;
    // Task cost grows with its last query (causal); handing tasks out
    // round-robin (chunk 1) keeps the threads' shares even.
#pragma omp parallel num_threads(nthreads) if (work > 1e6)
    {
        float* kt = scratch + omp_get_thread_num() * per_thread;
        float* vt = kt + s.HS * s.ld;
        float* rows = vt + s.HS * s.ld;
#pragma omp for schedule(static, 1)
        for (int task = 0; task < tasks; task++) {
            int blk = task % blocks, bh = task / blocks;
            int b = bh / NH, h = bh % NH;
            int i0 = blk * QUERY_BLOCK;
            int i1 = i0 + QUERY_BLOCK < T ? i0 + QUERY_BLOCK : T;
            const float* base = qkv + (size_t)b * T * s.stride;
            const float* kvb = kv + b * kv_batch;
            int g = h / s.group;
            transpose_rows(kt, kvb + k_offset(&s, g), s.q0 + i1, &s);
            transpose_rows(vt, kvb + v_offset(&s, g), s.q0 + i1, &s);
            for (int i = i0; i < i1; i += QUERY_GROUP) {
                attend_query_group(out + ((size_t)b * T + i) * C + h * s.HS,
                                   lse + (size_t)bh * T + i, base + q_offset(&s, h) + i * s.stride,
                                   i, kt, vt, rows, &s);
            }
        }
    }
    be->free(be, scratch);
}

void cpu_attention_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                           int HS) {
    Shape s = make_shape(T, NH, NKV, HS);
    attention_forward(be, (float*)out, lse, (const float*)qkv, (const float*)qkv, (size_t)T * s.stride, B, &s);
}

void cpu_attention_forward_chunk(Backend* be, void* out, float* lse, const void* qkv, const void* kv, int B, int T,
                                 int Tkv, int q0, int NH, int NKV, int HS) {
    Shape s = make_chunk_shape(T, Tkv, q0, NH, NKV, HS);
    attention_forward(be, (float*)out, lse, (const float*)qkv, (const float*)kv, (size_t)Tkv * s.kv_stride, B, &s);
}

// Gradients of one query head. For
// query i with p_ij = exp(s_ij - lse_i) and D_i = dout_i . out_i
// (= sum_j p_ij dout_i . v_j):
//   ds_ij = p_ij (dout_i . v_j - D_i) * scale
//   dq_i = sum_j ds_ij k_j,  dk_j += ds_ij q_i,  dv_j += p_ij dout_i.
// Queries go in groups of QUERY_GROUP, so each pass over the dk and dv panels
// adds four queries' terms. This writes dq and adds the head's terms to the
// dk and dv panels (dkt, dvt) of the kv head it reads (K and V panels kt,
// vt); q and dq point at the query head inside qkv and dqkv rows, dout and
// out at it in (T, NH, HS). One thread adds the terms in a fixed order, so
// the result does not depend on the threads.
static void attention_backward_query_head(float* dq, float* dkt, float* dvt, const float* dout,
                                          const float* q, const float* out, const float* lse,
                                          const float* kt, const float* vt, float* rows,
                                          const Shape* s) {
    int T = s->T, C = s->C, HS = s->HS;
    size_t ld = s->ld;
    float* P = rows;                       // QUERY_GROUP rows of probabilities
    float* DP = P + QUERY_GROUP * ld;      // ... of dout_i . v_j
    float* DS = DP + QUERY_GROUP * ld;     // ... of score gradients

    for (int i = 0; i < T; i += QUERY_GROUP) {
        int count = T - i < QUERY_GROUP ? T - i : QUERY_GROUP;
        int n_max = s->q0 + i + count;
        const float* xq[QUERY_GROUP];
        const float* xo[QUERY_GROUP];
        for (int g = 0; g < QUERY_GROUP; g++) {
            int t = g < count ? i + g : i + count - 1;  // padding queries repeat the last
            xq[g] = q + t * s->stride;
            xo[g] = dout + (size_t)t * C;
        }
        panel_products_group(P, xq, kt, n_max, s->scale, s);
        panel_products_group(DP, xo, vt, n_max, 1.0f, s);
        for (int g = 0; g < QUERY_GROUP; g++) {
            float* p = P + g * ld;
            float* dp = DP + g * ld;
            float* ds = DS + g * ld;
            // Query i+g sees keys 0..q0+i+g; padding queries see none.
            int n = g < count ? s->q0 + i + g + 1 : 0;
            float l = g < count ? lse[i + g] : 0.0f;
            float D = g < count ? dot(xo[g], out + (size_t)(i + g) * C, HS) : 0.0f;
#pragma omp simd
            for (int j = 0; j < n; j++) {
                p[j] = cpu_expf(p[j] - l);
                ds[j] = p[j] * (dp[j] - D) * s->scale;
            }
            for (int j = n; j < n_max; j++) p[j] = ds[j] = 0.0f;
        }
        const float *p0 = P, *p1 = P + ld, *p2 = P + 2 * ld, *p3 = P + 3 * ld;
        const float *s0 = DS, *s1 = DS + ld, *s2 = DS + 2 * ld, *s3 = DS + 3 * ld;
        for (int d = 0; d < HS; d++) {
            const float* k = kt + d * ld;
            float* dk = dkt + d * ld;
            float* dv = dvt + d * ld;
            float q0 = xq[0][d], q1 = xq[1][d], q2 = xq[2][d], q3 = xq[3][d];
            float o0 = xo[0][d], o1 = xo[1][d], o2 = xo[2][d], o3 = xo[3][d];
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
            for (int j = 0; j < n_max; j++) {
                a0 = fmaf(s0[j], k[j], a0);
                a1 = fmaf(s1[j], k[j], a1);
                a2 = fmaf(s2[j], k[j], a2);
                a3 = fmaf(s3[j], k[j], a3);
                dk[j] = fmaf(q3, s3[j], fmaf(q2, s2[j], fmaf(q1, s1[j], fmaf(q0, s0[j], dk[j]))));
                dv[j] = fmaf(o3, p3[j], fmaf(o2, p2[j], fmaf(o1, p1[j], fmaf(o0, p0[j], dv[j]))));
            }
            float dqg[QUERY_GROUP] = {a0, a1, a2, a3};
            for (int g = 0; g < count; g++) dq[(i + g) * s->stride + d] = dqg[g];
        }
    }
}

// Gradients of kv head kv of batch row b: its query heads in order, then its
// dk and dv out of the panels, written into dkv's rows (added when
// `accumulate`). Pointers are at the batch row's first token.
static void attention_backward_kv_head(float* dqkv, float* dkv, int accumulate, const float* dout, const float* qkv,
                                       const float* kvrows, const float* out, const float* lse, int kv, float* work,
                                       const Shape* s) {
    int T = s->T, HS = s->HS, keys = s->q0 + s->T;
    size_t ld = s->ld;
    float* kt = work;
    float* vt = kt + HS * ld;
    float* dkt = vt + HS * ld;
    float* dvt = dkt + HS * ld;
    float* rows = dvt + HS * ld;
    transpose_rows(kt, kvrows + k_offset(s, kv), keys, s);
    transpose_rows(vt, kvrows + v_offset(s, kv), keys, s);
    memset(dkt, 0, 2 * HS * ld * sizeof(float));  // dkt and dvt
    for (int h = kv * s->group; h < (kv + 1) * s->group; h++) {
        attention_backward_query_head(dqkv + q_offset(s, h), dkt, dvt, dout + h * HS,
                                      qkv + q_offset(s, h), out + h * HS, lse + (size_t)h * T, kt,
                                      vt, rows, s);
    }
    for (int j = 0; j < keys; j++) {
        float* dk = dkv + j * s->kv_stride + k_offset(s, kv);
        float* dv = dkv + j * s->kv_stride + v_offset(s, kv);
        for (int d = 0; d < HS; d++) {
            dk[d] = accumulate ? dk[d] + dkt[d * ld + j] : dkt[d * ld + j];
            dv[d] = accumulate ? dv[d] + dvt[d * ld + j] : dvt[d * ld + j];
        }
    }
}

// Both forms: dkv and kv hold batch row b's key/value rows from + b * kv_batch.
static void attention_backward(Backend* be, float* dqkv, float* dkv, int accumulate, const float* dout,
                               const float* qkv, const float* kv, size_t kv_batch, const float* out,
                               const float* lse, int B, const Shape* sp) {
    Shape s = *sp;
    int T = s.T, NH = s.NH, NKV = s.NKV, C = s.C;
    size_t per_thread = backward_floats_per_thread(&s);
    int nthreads = omp_get_max_threads();
    float* scratch = (float*)cpu_scratch(be, nthreads * per_thread * sizeof(float),
                                         "attention backward panels");
    // One thread owns a kv head and the query heads that read it, so its dk
    // and dv sum their terms in a fixed order without atomics.
    int tasks = B * NKV;
    double work = (double)B * NH * T * (s.q0 + T) * s.HS;
#pragma omp parallel num_threads(nthreads) if (work > 1e6)
    {
        float* mine = scratch + omp_get_thread_num() * per_thread;
#pragma omp for schedule(static, 1)
        for (int task = 0; task < tasks; task++) {
            int b = task / NKV, g_kv = task % NKV;
            size_t tok0 = (size_t)b * T;
            attention_backward_kv_head(dqkv + tok0 * s.stride, dkv + b * kv_batch, accumulate, dout + tok0 * C,
                                       qkv + tok0 * s.stride, kv + b * kv_batch, out + tok0 * C,
                                       lse + (size_t)b * NH * T, g_kv, mine, &s);
        }
    }
    be->free(be, scratch);
}

void cpu_attention_backward(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                            const float* lse, int B, int T, int NH, int NKV, int HS) {
    Shape s = make_shape(T, NH, NKV, HS);
    attention_backward(be, (float*)dqkv, (float*)dqkv, 0, (const float*)dout, (const float*)qkv, (const float*)qkv,
                       (size_t)T * s.stride, (const float*)out, lse, B, &s);
}

void cpu_attention_backward_chunk(Backend* be, void* dqkv, void* dkv, const void* dout, const void* qkv,
                                  const void* kv, const void* out, const float* lse, int B, int T, int Tkv, int q0,
                                  int NH, int NKV, int HS) {
    Shape s = make_chunk_shape(T, Tkv, q0, NH, NKV, HS);
    attention_backward(be, (float*)dqkv, (float*)dkv, 1, (const float*)dout, (const float*)qkv, (const float*)kv,
                       (size_t)Tkv * s.kv_stride, (const float*)out, lse, B, &s);
}
