// torch_parity.h: what the two whole-model parity tests against PyTorch
// share (test_torch_parity.c for GPT-2, test_torch_parity_llama.c for
// Llama): the batch file and the answers of dev/reference.py (its output
// format is in its docstring), and the checks of a model on the CPU backend
// against them: logits and loss, every gradient, and the losses, norms and
// parameters through AdamW steps with the schedule and clipping.
// Include after tests/testlib.h; every check is a CHECK of the running case.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llm/checkpoint/llmc_io.h"
#include "llm/model/model.h"
#include "llm/schedule.h"
#include "llm/trainer.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

#define PARITY_MAX_STEPS 16

// The reference's answers for a batch (B, T), vocabulary V padded to Vp, P
// parameters in llm.c's (or, for Llama, kind-major) order.
typedef struct {
    int32_t h[256];  // [0] magic 20241130, [2] B, [3] T, [4] V, [5] Vp, [6] P, [7] steps
    float* logits;   // (B, T, V) real vocabulary columns only
    float loss;
    float* grads;    // (P)
    float losses[PARITY_MAX_STEPS], norms[PARITY_MAX_STEPS];  // (steps) each
    float* params;   // (P) after the last update
} ParityExpected;

// The hyperparameters of the AdamW steps both sides take.
typedef struct {
    double lr, warmup, final_frac, weight_decay, clip;
    int steps;
} ParityTraining;

// What both tests train with: 10 steps, warmup 3, cosine decay to 0.1 of the
// peak, weight decay 0.1, and clipping at 0.5 (which engages).
static const ParityTraining PARITY_TRAINING = {.lr = 3e-3, .warmup = 3, .final_frac = 0.1, .weight_decay = 0.1,
                                               .clip = 0.5, .steps = 10};

// reference.py's flags for tr's schedule and clipping over `steps` steps, into buf.
static inline const char* parity_training_flags(char* buf, size_t size, ParityTraining tr, int steps) {
    snprintf(buf, size, "--steps %d --lr %g --warmup %g --lr-final-frac %g --weight-decay %g --grad-clip %g", steps,
             tr.lr, tr.warmup, tr.final_frac, tr.weight_decay, tr.clip);
    return buf;
}

// Largest |a - b| relative to the largest |b|: one number per tensor, so small
// entries of a large tensor are judged on the tensor's scale.
static inline double parity_max_rel_err(const float* a, const float* b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

// Makes every parameter matter: adds 0.1 N(0, 1) to each 1-D tensor (norm
// weights, biases) of flat (the model's flat layout, FP32 host values).
static inline void parity_perturb_vectors(const GPT* m, float* flat, uint64_t key) {
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        if (t->rows != 1) continue;
        for (size_t j = 0; j < t->count; j++) flat[t->offset + j] += 0.1f * rng_normal(key, t->offset + j);
    }
}

// Random inputs and targets (B*T each) below V, written as reference.py's
// batch file (int32 B, T, inputs, targets) at path.
static inline void parity_write_batch(const char* path, uint64_t key, int32_t* inputs, int32_t* targets, int B, int T,
                                      int V) {
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int32_t)rng_below(key, 1000 + i, (uint64_t)V);
        targets[i] = (int32_t)rng_below(key, 2000 + i, (uint64_t)V);
    }
    FILE* f = xfopen(path, "wb");
    int32_t bt[2] = {B, T};
    fwrite(bt, 4, 2, f);
    fwrite(inputs, 4, (size_t)B * T, f);
    fwrite(targets, 4, (size_t)B * T, f);
    fclose(f);
}

// Runs cmd (a reference.py command line); on failure a FAIL line and exit 1.
static inline void parity_run_reference(const char* cmd, const char* what) {
    if (system(cmd) != 0) {
        printf("FAIL reference: %s failed (is python3-torch installed? scripts/install_deps.sh)\n", what);
        exit(1);
    }
}

// Reads reference.py's output file: logits (B*T*V), loss, P gradients, `steps` losses and norms, P parameters.
static inline void parity_read_expected(const char* path, ParityExpected* ex, int B, int T, int V, int steps) {
    FILE* f = xfopen(path, "rb");
    xfread(ex->h, sizeof ex->h, f, path, "header");
    if (steps > PARITY_MAX_STEPS || ex->h[6] <= 0) fatal("%s: %d steps or %d values", path, steps, ex->h[6]);
    size_t P = (size_t)ex->h[6], nl = (size_t)B * T * V;
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
}

static inline void parity_free_expected(ParityExpected* ex) {
    free(ex->logits);
    free(ex->grads);
    free(ex->params);
}

// The header names this batch, vocabulary and parameter count.
static inline void parity_check_header(const ParityExpected* ex, int B, int T, int V, int Vp, size_t P) {
    CHECK(ex->h[0] == 20241130 && ex->h[2] == B && ex->h[3] == T && ex->h[4] == V && ex->h[5] == Vp,
          "unexpected reference header (B %d T %d V %d Vp %d)", ex->h[2], ex->h[3], ex->h[4], ex->h[5]);
    CHECK((size_t)ex->h[6] == P, "reference header: %d values for %zu", ex->h[6], P);
}

// A flat-layout host buffer against the reference's values (llm.c order,
// which llmc_from_flat produces for either model), kind by kind, each against
// the tensor's largest entry.
static inline void parity_check_against_reference(const GPT* m, const ParityExpected* ex, const float* flat,
                                                  const float* ref, double tol, const char* what) {
    size_t P = (size_t)ex->h[6];
    float* ours = (float*)xmalloc(P * 4);
    llmc_from_flat(m, flat, ours);
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        if (!gpt_has_kind(&m->config, (ParamKind)k)) continue;  // GPT-2 has no lm_head, Llama no wpe or biases
        int layers = param_kind_is_per_layer((ParamKind)k) ? m->config.num_layers : 1;
        size_t n = m->layout.tensors[param_tensor_index(&m->config, (ParamKind)k, 0)].count * layers;
        double err = parity_max_rel_err(ours + off, ref + off, n);
        printf("#   %-28s %-9s max error %.2e relative to its largest entry\n", what, param_kind_name((ParamKind)k), err);
        CHECK(err < tol, "%s of %s: max error %.3g relative to its largest entry", what, param_kind_name((ParamKind)k),
              err);
        off += n;
    }
    CHECK(off == P, "walked %zu of %zu values", off, P);
    free(ours);
}

// One forward on the model's inputs: logits within 1e-5 of the reference's
// (and the largest of them above min_scale, so that they are not trivially
// small), the padded columns exactly 0, the loss within 1e-5 relative.
static inline void parity_check_logits_and_loss(GPT* m, const ParityExpected* ex, int B, int T, double min_scale) {
    int V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    gpt_forward(m, m->inputs, m->targets, B, T, 0.0f);
    float* logits = (float*)xmalloc((size_t)B * T * Vp * 4);
    m->be->to_host(m->be, logits, (char*)m->arena + m->acts.offset[A_LOGITS], (size_t)B * T * Vp * 4);
    double worst = 0, scale = 0;
    for (int i = 0; i < B * T; i++) {
        for (int v = 0; v < V; v++) {
            double d = fabs(logits[(size_t)i * Vp + v] - ex->logits[(size_t)i * V + v]);
            if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
            scale = fmax(scale, fabs(ex->logits[(size_t)i * V + v]));
        }
        for (int v = V; v < Vp; v++) CHECK(logits[(size_t)i * Vp + v] == 0.0f, "padded logit %d of row %d not 0", v, i);
    }
    printf("#   logits: max difference %.2e (largest logit %.2f)\n", worst, scale);
    CHECK(scale > min_scale && worst < 1e-5, "logits differ by %g (largest %g)", worst, scale);
    gpt_accumulate_loss(m, B, T, 0);
    float sum;
    m->be->to_host(m->be, &sum, m->scalars, 4);
    CHECK_CLOSE(sum / (B * T), ex->loss, 1e-6, 1e-5, "loss");
    free(logits);
}

// Every gradient of one forward and backward, within 2e-5 of the tensor's largest.
static inline void parity_check_gradients(GPT* m, const ParityExpected* ex, int B, int T) {
    gpt_zero_grads(m);
    gpt_forward(m, m->inputs, m->targets, B, T, 1.0f / (B * T));
    gpt_backward(m, m->inputs, B, T);
    float* flat = (float*)xmalloc(m->layout.total * 4);
    m->be->to_host(m->be, flat, m->grads, m->layout.total * 4);
    parity_check_against_reference(m, ex, flat, ex->grads, 2e-5, "gradient");
    free(flat);
}

// tr.steps AdamW steps on the same batch with the reference's schedule and
// clipping: each step's loss and gradient norm, clipping engaged at least
// once, the parameters after the last step within 1e-4 (AdamW divides by
// sqrt(v): where a gradient is tiny its FP32 rounding moves the update a
// little, hence a looser bound than the gradients'), and the reference's loss falling.
static inline void parity_check_adamw_steps(GPT* m, const ParityExpected* ex, int B, int T, ParityTraining tr) {
    LRSchedule s = {.peak = tr.lr, .final_frac = tr.final_frac, .warmup = (int)tr.warmup, .total = tr.steps};
    int clipped = 0;
    for (int step = 0; step < tr.steps; step++) {
        gpt_zero_grads(m);
        gpt_forward(m, m->inputs, m->targets, B, T, 1.0f / (B * T));
        gpt_accumulate_loss(m, B, T, 0);
        gpt_backward(m, m->inputs, B, T);
        gpt_grad_norm_squared(m, 0, m->layout.total);
        float sc[2];
        m->be->to_host(m->be, sc, m->scalars, sizeof sc);
        double norm = sqrt(sc[1]);
        double scale = grad_clip_scale(norm, tr.clip);
        clipped += scale < 1.0;
        CHECK_CLOSE(sc[0] / (B * T), ex->losses[step], 1e-5, 1e-5, "loss during training");
        CHECK_CLOSE(norm, ex->norms[step], 1e-6, 1e-4, "gradient norm");
        gpt_update(m, (float)lr_at(&s, step), 0.9f, 0.95f, 1e-8f, (float)tr.weight_decay, (float)scale, 0);
    }
    CHECK(clipped > 0, "clipping never engaged; the test would not cover it");
    float* flat = (float*)xmalloc(m->layout.total * 4);
    gpt_get_params_f32(m, flat);
    parity_check_against_reference(m, ex, flat, ex->params, 1e-4, "parameters after the steps");
    CHECK(ex->losses[tr.steps - 1] < ex->losses[0], "reference loss did not fall");
    free(flat);
}
