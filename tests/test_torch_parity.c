// test_torch_parity.c: the whole model against PyTorch (dev/reference.py).
//
// A small GPT with odd sizes (padded vocabulary, heads of 16, T not a power
// of two) and random non-zero weights is exported in llm.c's format; the
// reference computes logits, loss, every gradient, and 10 AdamW steps with
// clipping, warmup and cosine decay in float64. The CPU backend (FP32) must
// match within FP32 tolerances.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm/gpt.h"
#include "llm/checkpoint/llmc_io.h"
#include "llm/util/rng.h"
#include "llm/schedule.h"
#include "llm/trainer.h"
#include "tests/testlib.h"

#define B 3
#define T 13
#define STEPS 10

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
static GPT model;
static Expected ex;
static int32_t inputs[B * T], targets[B * T];

// Largest |a - b| relative to the largest |b|: one number per tensor, so small
// entries of a large tensor are judged on the tensor's scale.
static double max_rel_err(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/train_gpt_parity_%d", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) exit(2);

    be = cpu_backend_create(DTYPE_F32, 0);
    GPTConfig c = {.max_seq_len = 24, .vocab_size = 101, .num_layers = 2, .num_heads = 3, .channels = 48};
    gpt_config_finish(&c);
    gpt_create(&model, &c, be, B, T, 1, 0, 0);
    gpt_init_random(&model, 42);
    // Make every parameter matter: non-trivial layernorm weights and biases.
    float* flat = (float*)xmalloc(model.layout.total * sizeof(float));
    gpt_get_params_f32(&model, flat);
    uint64_t key = rng_key(7, 1, 2);
    for (int i = 0; i < model.layout.num_tensors; i++) {
        const ParamTensor* t = &model.layout.tensors[i];
        if (t->rows != 1) continue;
        for (size_t j = 0; j < t->count; j++) flat[t->offset + j] += 0.1f * rng_normal(key, t->offset + j);
    }
    gpt_set_params_f32(&model, flat);
    free(flat);

    char path[512];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    llmc_save_weights(&model, path, DTYPE_F32);

    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int32_t)rng_below(key, 1000 + i, 101);
        targets[i] = (int32_t)rng_below(key, 2000 + i, 101);
    }
    snprintf(path, sizeof path, "%s/batch.bin", dir);
    FILE* f = xfopen(path, "wb");
    int32_t bt[2] = {B, T};
    fwrite(bt, 4, 2, f);
    fwrite(inputs, 4, B * T, f);
    fwrite(targets, 4, B * T, f);
    fclose(f);

    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 dev/reference.py --model %s/model.bin --batch %s/batch.bin --out %s/expected.bin "
             "--steps %d --lr %g --warmup %g --lr-final-frac %g --weight-decay %g --grad-clip %g",
             dir, dir, dir, STEPS, LR, WARMUP, FINAL_FRAC, WD, CLIP);
    if (system(cmd) != 0) {
        printf("FAIL reference: dev/reference.py failed (is python3-torch installed? scripts/install_deps.sh)\n");
        exit(1);
    }

    snprintf(path, sizeof path, "%s/expected.bin", dir);
    f = xfopen(path, "rb");
    xfread(ex.h, sizeof ex.h, f, path, "header");
    size_t P = (size_t)ex.h[6], nl = (size_t)B * T * c.vocab_size;
    ex.logits = (float*)xmalloc(nl * 4);
    ex.grads = (float*)xmalloc(P * 4);
    ex.params = (float*)xmalloc(P * 4);
    xfread(ex.logits, nl * 4, f, path, "logits");
    xfread(&ex.loss, 4, f, path, "loss");
    xfread(ex.grads, P * 4, f, path, "grads");
    xfread(ex.losses, sizeof ex.losses, f, path, "losses");
    xfread(ex.norms, sizeof ex.norms, f, path, "norms");
    xfread(ex.params, P * 4, f, path, "params");
    fclose(f);
}

static void test_reference_header(void) {
    CHECK(ex.h[0] == 20241130 && ex.h[2] == B && ex.h[3] == T && ex.h[4] == 101 && ex.h[5] == 128,
          "unexpected reference header");
    CHECK((size_t)ex.h[6] == llmc_num_elements(&model.config), "parameter count %d vs %zu", ex.h[6],
          llmc_num_elements(&model.config));
}

static void test_forward_logits_and_loss(void) {
    be->to_device(be, model.inputs, inputs, sizeof inputs);
    be->to_device(be, model.targets, targets, sizeof targets);
    gpt_forward(&model, model.inputs, model.targets, B, T, 0.0f);
    int V = 101, Vp = 128;
    float* logits = (float*)xmalloc((size_t)B * T * Vp * 4);
    be->to_host(be, logits, (char*)model.arena + model.acts.offset[A_LOGITS], (size_t)B * T * Vp * 4);
    double worst = 0;
    for (int i = 0; i < B * T; i++) {
        for (int v = 0; v < V; v++) {
            double d = fabs(logits[(size_t)i * Vp + v] - ex.logits[(size_t)i * V + v]);
            if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
        }
        for (int v = V; v < Vp; v++) CHECK(logits[(size_t)i * Vp + v] == 0.0f, "padded logit %d of row %d not 0", v, i);
    }
    CHECK(worst < 1e-5, "logits differ by %g", worst);
    gpt_accumulate_loss(&model, B, T, 0);
    float sum;
    be->to_host(be, &sum, model.scalars, 4);
    CHECK_CLOSE(sum / (B * T), ex.loss, 1e-6, 1e-5, "loss");
    free(logits);
}

// Compares a flat-layout host buffer with the reference's values (llm.c
// order), tensor kind by tensor kind, each against the tensor's largest entry.
static void check_against_reference(const float* flat, const float* ref, double tol, const char* what) {
    size_t P = (size_t)ex.h[6];
    float* ours = (float*)xmalloc(P * 4);
    llmc_from_flat(&model, flat, ours);
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        if (!gpt_has_kind(&model.config, (ParamKind)k)) continue;  // lm_head: Llama's
        int layers = param_kind_is_per_layer((ParamKind)k) ? model.config.num_layers : 1;
        size_t n = model.layout.tensors[param_tensor_index(&model.config, (ParamKind)k, 0)].count * layers;
        double err = max_rel_err(ours + off, ref + off, n);
        CHECK(err < tol, "%s of %s: max error %.3g relative to its largest entry", what,
              param_kind_name((ParamKind)k), err);
        off += n;
    }
    CHECK(off == P, "walked %zu of %zu values", off, P);
    free(ours);
}

static void test_gradients(void) {
    gpt_zero_grads(&model);
    gpt_forward(&model, model.inputs, model.targets, B, T, 1.0f / (B * T));
    gpt_backward(&model, model.inputs, B, T);
    float* flat = (float*)xmalloc(model.layout.total * 4);
    be->to_host(be, flat, model.grads, model.layout.total * 4);
    check_against_reference(flat, ex.grads, 2e-5, "gradient");
    free(flat);
}

static void test_ten_adamw_steps(void) {
    LRSchedule s = {LR, FINAL_FRAC, (int)WARMUP, STEPS};
    int clipped = 0;
    for (int step = 0; step < STEPS; step++) {
        gpt_zero_grads(&model);
        gpt_forward(&model, model.inputs, model.targets, B, T, 1.0f / (B * T));
        gpt_accumulate_loss(&model, B, T, 0);
        gpt_backward(&model, model.inputs, B, T);
        gpt_grad_norm_squared(&model, 0, model.layout.total);
        float sc[2];
        be->to_host(be, sc, model.scalars, sizeof sc);
        double norm = sqrt(sc[1]);
        double scale = grad_clip_scale(norm, CLIP);
        clipped += scale < 1.0;
        CHECK_CLOSE(sc[0] / (B * T), ex.losses[step], 1e-5, 1e-5, "loss during training");
        CHECK_CLOSE(norm, ex.norms[step], 1e-6, 1e-4, "gradient norm");
        gpt_update(&model, (float)lr_at(&s, step), 0.9f, 0.95f, 1e-8f, (float)WD, (float)scale, 0);
    }
    CHECK(clipped > 0, "clipping never engaged; the test would not cover it");
    float* flat = (float*)xmalloc(model.layout.total * 4);
    gpt_get_params_f32(&model, flat);
    // AdamW divides by sqrt(v): where a gradient is tiny its FP32 rounding
    // moves the update a little, hence a looser bound than the gradients'.
    check_against_reference(flat, ex.params, 1e-4, "parameters after 10 steps");
    CHECK(ex.losses[STEPS - 1] < ex.losses[0], "reference loss did not fall");
    free(flat);
}

int main(void) {
    setup();
    RUN(test_reference_header);
    RUN(test_forward_logits_and_loss);
    RUN(test_gradients);
    RUN(test_ten_adamw_steps);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return TESTS_DONE();
}
