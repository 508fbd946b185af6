// test_head_chunks.c: the LM head in chunks of rows (llm/model/head.c) on the
// CPU backend.
//
// Losses, gradient norms, gradients and weights after several AdamW steps
// are the same bits for 1, 2, 3 and 7 chunks at an odd B*T, for GPT-2 (tied
// head) and Llama with grouped-query attention (untied head), in FP32 and
// with FP8 GEMMs; the head's loss, input gradient and weight gradient match
// a float64 reference; evaluation and the logits a sampler reads work with
// any chunk count; the arena holds one chunk of logits.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "llm/arch/arch.h"
#include "llm/fp8/fp8.h"
#include "llm/model/model.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

// B*T = 849 rows: 7 chunks of 128 (the last 81), 3 of 384, 2 of 512.
#define B 3
#define T 283
static const GPTConfig GPT2 = {.max_seq_len = 288, .vocab_size = 101, .num_layers = 2, .num_heads = 3, .channels = 48};
// 6 heads of 8 sharing 2 kv heads, an MLP of 72, an untied head.
static const GPTConfig LLAMA = {.max_seq_len = 288, .vocab_size = 101, .num_layers = 2, .num_heads = 6,
                                .channels = 48, .arch = ARCH_LLAMA, .num_kv_heads = 2, .mlp_hidden = 72,
                                .rope_theta = 10000.0f};
static const int CHUNKS[] = {1, 2, 3, 7};
static const int EXPECT_ROWS[] = {849, 512, 384, 128};
#define NUM_CHUNKS 4

static Backend* be;
static int llama;

static GPTConfig config(void) {
    GPTConfig c = llama ? LLAMA : GPT2;
    gpt_config_finish(&c);
    return c;
}

static void tokens(int32_t* x, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)(rng_uniform(rng_key(seed, 3, 4), (uint64_t)i) * 101) % 101;
}

typedef struct {
    float loss[4], norm[4];
    float *weights, *grads;
    size_t n;
} Run;

// Four AdamW steps of two micro-batches each (the second B-1 rows, so its
// last chunk is shorter), with a forward without targets in between (as
// sampling does).
static void train(Run* r, int chunks, int fp8) {
    GPTConfig c = config();
    GPT m;
    Fp8State s;
    // FP8 GEMMs need rows in multiples of 16: 2 x 256 rows there.
    int b = fp8 ? 2 : B, t = fp8 ? 256 : T;
    gpt_create_chunked(&m, &c, be, b, t, 1, 0, 0, NULL, chunks);
    if (fp8) {
        Fp8Options o = {FP8_CURRENT, 1, 0, NULL};
        gpt_enable_fp8(&m, &s, &o);
    }
    gpt_init_random(&m, 42);
    int32_t* in = (int32_t*)xmalloc((size_t)b * t * sizeof(int32_t));
    int32_t* tg = (int32_t*)xmalloc((size_t)b * t * sizeof(int32_t));
    for (int step = 0; step < 4; step++) {
        if (fp8) fp8_begin_step(&s, step);
        gpt_zero_grads(&m);
        for (int a = 0; a < 2; a++) {
            int rows = a == 0 ? b : b - 1;
            tokens(in, b * t, 100 + a);
            tokens(tg, b * t, 200 + a);
            be->to_device(be, m.inputs, in, (size_t)b * t * sizeof(int32_t));
            gpt_forward(&m, m.inputs, NULL, rows, t, 0.0f);
            be->to_device(be, m.targets, tg, (size_t)b * t * sizeof(int32_t));
            gpt_forward(&m, m.inputs, m.targets, rows, t, 1.0f / (float)((2 * b - 1) * t));
            gpt_accumulate_loss(&m, rows, t, a > 0);
            gpt_backward(&m, m.inputs, rows, t);
        }
        gpt_grad_norm_squared(&m, 0, m.layout.total);
        float sc[2];
        be->to_host(be, sc, m.scalars, sizeof sc);
        r->loss[step] = sc[0];
        r->norm[step] = sc[1];
        if (step == 3) {
            r->n = m.layout.total;
            r->grads = (float*)xmalloc(r->n * sizeof(float));
            memcpy(r->grads, m.grads, r->n * sizeof(float));
        }
        gpt_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, rng_key(5, 6, (uint64_t)step));
    }
    r->weights = (float*)xmalloc(r->n * sizeof(float));
    gpt_get_params_f32(&m, r->weights);
    free(in);
    free(tg);
    gpt_free(&m);
}

static size_t first_difference(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return n;
}

static void compare_runs(const Run* got, const Run* want, const char* what) {
    CHECK(memcmp(got->loss, want->loss, sizeof got->loss) == 0, "%s: losses %.9g %.9g %.9g %.9g vs %.9g %.9g %.9g %.9g",
          what, got->loss[0], got->loss[1], got->loss[2], got->loss[3], want->loss[0], want->loss[1], want->loss[2],
          want->loss[3]);
    CHECK(memcmp(got->norm, want->norm, sizeof got->norm) == 0, "%s: gradient norms differ (%.9g vs %.9g last)", what,
          got->norm[3], want->norm[3]);
    size_t g = first_difference(got->grads, want->grads, got->n), w = first_difference(got->weights, want->weights, got->n);
    CHECK(g == got->n, "%s: gradient %zu differs: %.9g vs %.9g", what, g, g < got->n ? got->grads[g] : 0.0,
          g < got->n ? want->grads[g] : 0.0);
    CHECK(w == got->n, "%s: weight %zu differs: %.9g vs %.9g", what, w, w < got->n ? got->weights[w] : 0.0,
          w < got->n ? want->weights[w] : 0.0);
}

static void free_run(Run* r) {
    free(r->grads);
    free(r->weights);
}

static void training_bitwise_across_chunk_counts(int fp8) {
    Run ref;
    train(&ref, 1, fp8);
    CHECK(isfinite(ref.loss[3]) && ref.loss[3] < ref.loss[0], "the reference did not learn: loss %g then %g",
          ref.loss[0], ref.loss[3]);
    CHECK(ref.norm[3] > 0, "zero gradient");
    for (int k = 1; k < NUM_CHUNKS; k++) {
        Run r;
        train(&r, CHUNKS[k], fp8);
        char what[64];
        snprintf(what, sizeof what, "%d chunks%s", CHUNKS[k], fp8 ? " (fp8)" : "");
        compare_runs(&r, &ref, what);
        free_run(&r);
    }
    free_run(&ref);
}
static void training_bitwise_fp32(void) { training_bitwise_across_chunk_counts(0); }
static void training_bitwise_fp8(void) { training_bitwise_across_chunk_counts(1); }

// The arena holds one chunk of logits, and the chunk sizes are the documented ones.
static void arena_holds_one_chunk(void) {
    GPTConfig c = config();
    for (int k = 0; k < NUM_CHUNKS; k++) {
        ActLayout al;
        act_layout_build_chunked(&al, &c, B, T, DTYPE_F32, NULL, CHUNKS[k]);
        CHECK(al.head_rows == EXPECT_ROWS[k], "%d chunks: %d rows a chunk, want %d", CHUNKS[k], al.head_rows,
              EXPECT_ROWS[k]);
        CHECK(al.count[A_LOGITS] == (size_t)EXPECT_ROWS[k] * c.padded_vocab_size, "%d chunks: %zu logits",
              CHUNKS[k], al.count[A_LOGITS]);
    }
    CHECK(head_chunk_rows(100, 7) == 100, "100 rows in 7 chunks: one chunk of 100, got %d", head_chunk_rows(100, 7));
    CHECK(head_chunk_rows(1000000, 3) == 333440, "got %d", head_chunk_rows(1000000, 3));
}

// The head alone against float64, at 3 chunks (the untied Llama head, whose
// weight gradient is the head's only): per-token losses, the gradient of the
// final norm's output the forward leaves for backward, the head weight's
// gradient; then the logits a sampler reads, row by row, and an evaluation
// forward (dloss 0) that gives the training forward's losses bit for bit.
static void head_matches_float64(void) {
    GPTConfig c = config();
    int C = c.channels, V = c.vocab_size, Vp = c.padded_vocab_size, N = B * T;
    GPT m;
    gpt_create_chunked(&m, &c, be, B, T, 1, 0, 0, NULL, 3);
    gpt_init_random(&m, 9);
    int32_t in[B * T], tg[B * T];
    tokens(in, N, 11);
    tokens(tg, N, 12);
    be->to_device(be, m.inputs, in, sizeof in);
    be->to_device(be, m.targets, tg, sizeof tg);
    float dloss = 1.0f / (float)N;
    // Poison what the head writes.
    float* dbtc = (float*)((char*)m.arena + m.acts.offset[A_SCRATCH_BTC]);
    float* losses = (float*)((char*)m.arena + m.acts.offset[A_LOSSES]);
    for (size_t i = 0; i < (size_t)N * C; i++) dbtc[i] = NAN;
    for (int i = 0; i < N; i++) losses[i] = NAN;
    gpt_zero_grads(&m);
    gpt_forward(&m, m.inputs, m.targets, B, T, dloss);
    const float* lnf = (const float*)((char*)m.arena + m.acts.offset[A_LNF]);
    ParamKind head_kind = llama ? P_LMHEAD : P_WTE;
    int unit = llama ? gpt_final_unit(&m) : gpt_embed_unit();
    const float* W = (const float*)gpt_tensor_in_unit(&m, gpt_unit_slice(&m, m.params, unit), head_kind, -1);
    const float* dW = (const float*)gpt_tensor_in_unit(&m, gpt_unit_slice(&m, m.grads, unit), head_kind, -1);
    double* dlnf = (double*)xcalloc((size_t)N * C, sizeof(double));
    double* dWr = (double*)xcalloc((size_t)Vp * C, sizeof(double));
    double* z = (double*)xmalloc((size_t)Vp * sizeof(double));
    double loss_err = 0, logit_err = 0, logit_scale = 0;
    float* row = (float*)xmalloc((size_t)Vp * sizeof(float));
    float* saved_losses = (float*)xmalloc((size_t)N * sizeof(float));
    memcpy(saved_losses, losses, (size_t)N * sizeof(float));
    for (int n = 0; n < N; n++) {
        const float* x = lnf + (size_t)n * C;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < Vp; v++) {
            double acc = 0;
            for (int k = 0; k < C; k++) acc += (double)x[k] * W[(size_t)v * C + k];
            z[v] = acc;
            if (v < V && acc > mx) mx = acc;
        }
        for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
        double loss = mx + log(sum) - z[tg[n]];
        loss_err = fmax(loss_err, fabs(loss - losses[n]) / fabs(loss));
        for (int v = 0; v < V; v++) {
            double g = dloss * (exp(z[v] - mx) / sum - (v == tg[n] ? 1.0 : 0.0));
            for (int k = 0; k < C; k++) {
                dlnf[(size_t)n * C + k] += g * W[(size_t)v * C + k];
                dWr[(size_t)v * C + k] += g * x[k];
            }
        }
        if (n % 97 == 0 || n == N - 1) {  // rows of every chunk, the last row included
            gpt_logits_row(&m, n, row);
            for (int v = 0; v < Vp; v++) {
                logit_err = fmax(logit_err, fabs(row[v] - z[v]));
                logit_scale = fmax(logit_scale, fabs(z[v]));
            }
        }
    }
    CHECK(loss_err < 1e-5, "losses: relative error %.3g", loss_err);
    CHECK(logit_scale > 0 && logit_err < 1e-5 * logit_scale, "sampled logits: error %.3g of %.3g", logit_err,
          logit_scale);
    double e = 0, s = 0;
    for (size_t i = 0; i < (size_t)N * C; i++) {
        e = fmax(e, fabs(dbtc[i] - dlnf[i]));
        s = fmax(s, fabs(dlnf[i]));
    }
    CHECK(s > 0 && e < 1e-4 * s, "final norm output gradient: error %.3g of %.3g", e, s);
    if (llama) {  // GPT-2's tied head gradient also holds the embedding's, added in backward
        e = s = 0;
        for (size_t i = 0; i < (size_t)Vp * C; i++) {
            e = fmax(e, fabs(dW[i] - dWr[i]));
            s = fmax(s, fabs(dWr[i]));
        }
        CHECK(s > 0 && e < 1e-4 * s, "head weight gradient: error %.3g of %.3g", e, s);
    }
    // Evaluation: the same losses without the gradient.
    for (int i = 0; i < N; i++) losses[i] = NAN;
    gpt_forward(&m, m.inputs, m.targets, B, T, 0.0f);
    CHECK(memcmp(losses, saved_losses, (size_t)N * sizeof(float)) == 0, "evaluation losses differ from training's");
    free(dlnf);
    free(dWr);
    free(z);
    free(row);
    free(saved_losses);
    gpt_free(&m);
}

int main(void) {
    be = cpu_backend_create(DTYPE_F32, 0);
    RUN(arena_holds_one_chunk);
    RUN(head_matches_float64);
    RUN(training_bitwise_fp32);
    RUN(training_bitwise_fp8);
    llama = 1;
    RUN_SUFFIXED(head_matches_float64, "_llama");
    RUN_SUFFIXED(training_bitwise_fp32, "_llama");
    RUN_SUFFIXED(training_bitwise_fp8, "_llama");
    be->destroy(be);
    return TESTS_DONE();
}
