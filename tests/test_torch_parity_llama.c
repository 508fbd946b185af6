// test_torch_parity_llama.c: the whole Llama model against PyTorch
// (dev/reference.py --arch llama).
//
// An odd configuration (3 layers, 96 channels, 6 heads of 16 sharing 2 kv
// heads, an MLP of 136, a padded vocabulary, T = 37, an untied LM head) with
// random non-zero weights (RMSNorm weights perturbed off 1) goes to the
// reference as raw float32 in kind-major order; the reference computes
// logits, loss, every gradient, and 10 AdamW steps with clipping, warmup and
// cosine decay in float64. The CPU backend (FP32) must match within FP32
// tolerances. The same again with the head tied to the embedding (gradients).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm/checkpoint/llmc_io.h"
#include "llm/gpt.h"
#include "llm/schedule.h"
#include "llm/trainer.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

#define B 2
#define T 37
#define STEPS 10
#define V 101
#define VP 128

static const double LR = 3e-3, WARMUP = 3, FINAL_FRAC = 0.1, WD = 0.1, CLIP = 0.5;

typedef struct {
    int32_t h[256];
    float* logits;
    float loss;
    float* grads;
    float losses[STEPS], norms[STEPS];
    float* params;
} Expected;

static char dir[256];
static Backend* be;
static int32_t inputs[B * T], targets[B * T];

static double max_rel_err(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static GPTConfig llama_config(int tied) {
    GPTConfig c = {.max_seq_len = T, .vocab_size = V, .num_layers = 3, .num_heads = 6, .channels = 96,
                   .arch = ARCH_LLAMA, .num_kv_heads = 2, .mlp_hidden = 136, .tie_embeddings = tied,
                   .rope_theta = 10000.0f};
    gpt_config_finish(&c);
    return c;
}

// Creates the model with random weights, runs the reference, reads its answers.
static void setup(GPT* m, Expected* ex, int tied, int steps) {
    char cmd[1536], path[512];
    GPTConfig c = llama_config(tied);
    gpt_create(m, &c, be, B, T, 1, 0, 0);
    gpt_init_random(m, 42);
    float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
    gpt_get_params_f32(m, flat);
    uint64_t key = rng_key(7, 1, 2 + tied);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        if (t->rows != 1) continue;
        for (size_t j = 0; j < t->count; j++) flat[t->offset + j] += 0.1f * rng_normal(key, t->offset + j);
    }
    gpt_set_params_f32(m, flat);
    size_t P = llmc_num_elements(&c);
    float* ordered = (float*)xmalloc(P * sizeof(float));
    llmc_from_flat(m, flat, ordered);
    snprintf(path, sizeof path, "%s/llama.f32", dir);
    FILE* f = xfopen(path, "wb");
    fwrite(ordered, sizeof(float), P, f);
    fclose(f);
    free(ordered);
    free(flat);

    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int32_t)rng_below(key, 1000 + i, V);
        targets[i] = (int32_t)rng_below(key, 2000 + i, V);
    }
    snprintf(path, sizeof path, "%s/batch.bin", dir);
    f = xfopen(path, "wb");
    int32_t bt[2] = {B, T};
    fwrite(bt, 4, 2, f);
    fwrite(inputs, 4, B * T, f);
    fwrite(targets, 4, B * T, f);
    fclose(f);

    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 dev/reference.py --arch llama --model %s/llama.f32 --batch %s/batch.bin "
             "--out %s/expected.bin --layers %d --channels %d --heads %d --kv-heads %d --mlp-hidden %d --vocab %d "
             "--rope-theta %g --tied %d --steps %d --lr %g --warmup %g --lr-final-frac %g --weight-decay %g "
             "--grad-clip %g",
             dir, dir, dir, c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.mlp_hidden, V, c.rope_theta, tied,
             steps, LR, WARMUP, FINAL_FRAC, WD, CLIP);
    if (system(cmd) != 0) {
        printf("FAIL reference: dev/reference.py --arch llama failed (is python3-torch installed?)\n");
        exit(1);
    }
    snprintf(path, sizeof path, "%s/expected.bin", dir);
    f = xfopen(path, "rb");
    xfread(ex->h, sizeof ex->h, f, path, "header");
    size_t nl = (size_t)B * T * V;
    CHECK((size_t)ex->h[6] == P && ex->h[4] == V && ex->h[5] == VP, "reference header: %d values for %zu", ex->h[6], P);
    ex->logits = (float*)xmalloc(nl * 4);
    ex->grads = (float*)xmalloc(P * 4);
    ex->params = (float*)xmalloc(P * 4);
    xfread(ex->logits, nl * 4, f, path, "logits");
    xfread(&ex->loss, 4, f, path, "loss");
    xfread(ex->grads, P * 4, f, path, "grads");
    xfread(ex->losses, (size_t)steps * 4, f, path, "losses");
    xfread(ex->norms, (size_t)steps * 4, f, path, "norms");
    xfread(ex->params, P * 4, f, path, "params");
    fclose(f);
    be->to_device(be, m->inputs, inputs, sizeof inputs);
    be->to_device(be, m->targets, targets, sizeof targets);
}

static void free_expected(Expected* ex) {
    free(ex->logits);
    free(ex->grads);
    free(ex->params);
}

// A flat-layout host buffer against the reference's values (kind-major
// order), kind by kind, each against the tensor's largest entry.
static void check_against_reference(const GPT* m, const Expected* ex, const float* flat, const float* ref, double tol,
                                    const char* what) {
    size_t P = (size_t)ex->h[6];
    float* ours = (float*)xmalloc(P * 4);
    llmc_from_flat(m, flat, ours);
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        if (!gpt_has_kind(&m->config, (ParamKind)k)) continue;
        int layers = param_kind_is_per_layer((ParamKind)k) ? m->config.num_layers : 1;
        size_t n = m->layout.tensors[param_tensor_index(&m->config, (ParamKind)k, 0)].count * layers;
        double err = max_rel_err(ours + off, ref + off, n);
        printf("#   %-28s %-9s max error %.2e relative to its largest entry\n", what, param_kind_name((ParamKind)k), err);
        CHECK(err < tol, "%s of %s: max error %.3g relative to its largest entry", what, param_kind_name((ParamKind)k),
              err);
        off += n;
    }
    CHECK(off == P, "walked %zu of %zu values", off, P);
    free(ours);
}

static void check_logits_and_loss(GPT* m, const Expected* ex) {
    gpt_forward(m, m->inputs, m->targets, B, T, 0.0f);
    float* logits = (float*)xmalloc((size_t)B * T * VP * 4);
    be->to_host(be, logits, (char*)m->arena + m->acts.offset[A_LOGITS], (size_t)B * T * VP * 4);
    double worst = 0, scale = 0;
    for (int i = 0; i < B * T; i++) {
        for (int v = 0; v < V; v++) {
            double d = fabs(logits[(size_t)i * VP + v] - ex->logits[(size_t)i * V + v]);
            if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
            scale = fmax(scale, fabs(ex->logits[(size_t)i * V + v]));
        }
        for (int v = V; v < VP; v++) CHECK(logits[(size_t)i * VP + v] == 0.0f, "padded logit %d of row %d not 0", v, i);
    }
    printf("#   logits: max difference %.2e (largest logit %.2f)\n", worst, scale);
    CHECK(scale > 0.1 && worst < 1e-5, "logits differ by %g (largest %g)", worst, scale);
    gpt_accumulate_loss(m, B, T, 0);
    float sum;
    be->to_host(be, &sum, m->scalars, 4);
    CHECK_CLOSE(sum / (B * T), ex->loss, 1e-6, 1e-5, "loss");
    free(logits);
}

static void check_gradients(GPT* m, const Expected* ex) {
    gpt_zero_grads(m);
    gpt_forward(m, m->inputs, m->targets, B, T, 1.0f / (B * T));
    gpt_backward(m, m->inputs, B, T);
    float* flat = (float*)xmalloc(m->layout.total * 4);
    be->to_host(be, flat, m->grads, m->layout.total * 4);
    check_against_reference(m, ex, flat, ex->grads, 2e-5, "gradient");
    free(flat);
}

static void test_untied(void) {
    GPT m;
    Expected ex;
    setup(&m, &ex, 0, STEPS);
    CHECK(gpt_has_kind(&m.config, P_LMHEAD) && !gpt_has_kind(&m.config, P_WPE) && !gpt_has_kind(&m.config, P_QKVB),
          "untied Llama tensor kinds");
    check_logits_and_loss(&m, &ex);
    check_gradients(&m, &ex);

    LRSchedule s = {LR, FINAL_FRAC, (int)WARMUP, STEPS};
    int clipped = 0;
    for (int step = 0; step < STEPS; step++) {
        gpt_zero_grads(&m);
        gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (B * T));
        gpt_accumulate_loss(&m, B, T, 0);
        gpt_backward(&m, m.inputs, B, T);
        gpt_grad_norm_squared(&m, 0, m.layout.total);
        float sc[2];
        be->to_host(be, sc, m.scalars, sizeof sc);
        double norm = sqrt(sc[1]);
        double scale = grad_clip_scale(norm, CLIP);
        clipped += scale < 1.0;
        CHECK_CLOSE(sc[0] / (B * T), ex.losses[step], 1e-5, 1e-5, "loss during training");
        CHECK_CLOSE(norm, ex.norms[step], 1e-6, 1e-4, "gradient norm");
        gpt_update(&m, (float)lr_at(&s, step), 0.9f, 0.95f, 1e-8f, (float)WD, (float)scale, 0);
    }
    CHECK(clipped > 0, "clipping never engaged; the test would not cover it");
    float* flat = (float*)xmalloc(m.layout.total * 4);
    gpt_get_params_f32(&m, flat);
    check_against_reference(&m, &ex, flat, ex.params, 1e-4, "parameters after 10 steps");
    CHECK(ex.losses[STEPS - 1] < ex.losses[0], "reference loss did not fall");
    free(flat);
    free_expected(&ex);
    gpt_free(&m);
}

// Tied: the embedding's gradient sums the head's and the lookup's.
static void test_tied(void) {
    GPT m;
    Expected ex;
    setup(&m, &ex, 1, 1);
    CHECK(!gpt_has_kind(&m.config, P_LMHEAD), "a tied Llama has no lm_head");
    check_logits_and_loss(&m, &ex);
    check_gradients(&m, &ex);
    free_expected(&ex);
    gpt_free(&m);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/train_gpt_parity_llama_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 2;
    be = cpu_backend_create(DTYPE_F32, 0);
    RUN(test_untied);
    RUN(test_tied);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return TESTS_DONE();
}
