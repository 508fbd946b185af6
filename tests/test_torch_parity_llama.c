// test_torch_parity_llama.c: the whole Llama model against PyTorch
// (dev/reference.py --arch llama).
//
// An odd configuration (3 layers, 96 channels, 6 heads of 16 sharing 2 kv
// heads, an MLP of 136, a padded vocabulary, T = 37, an untied LM head) with
// random non-zero weights (RMSNorm weights perturbed off 1) goes to the
// reference as raw float32 in kind-major order; the reference computes
// logits, loss, every gradient, and 10 AdamW steps with clipping, warmup and
// cosine decay in float64. The CPU backend (FP32) must match within FP32
// tolerances (the checks: tests/torch_parity.h). The same again with the head
// tied to the embedding (gradients).
#include <stdlib.h>
#include <unistd.h>

#include "llm/arch/arch.h"
#include "tests/testlib.h"
#include "tests/torch_parity.h"

#define B 2
#define T 37
#define V 101
#define VP 128

static char dir[256];
static Backend* be;
static int32_t inputs[B * T], targets[B * T];

static GPTConfig llama_config(int tied) {
    GPTConfig c = {.max_seq_len = T, .vocab_size = V, .num_layers = 3, .num_heads = 6, .channels = 96,
                   .arch = ARCH_LLAMA, .num_kv_heads = 2, .mlp_hidden = 136, .tie_embeddings = tied,
                   .rope_theta = 10000.0f};
    gpt_config_finish(&c);
    return c;
}

// Creates the model with random weights, runs the reference, reads its answers.
static void setup(GPT* m, ParityExpected* ex, int tied, int steps) {
    char cmd[1536], path[512];
    GPTConfig c = llama_config(tied);
    gpt_create(m, &c, be, B, T, 1, 0, 0);
    gpt_init_random(m, 42);
    float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
    gpt_get_params_f32(m, flat);
    uint64_t key = rng_key(7, 1, 2 + tied);
    parity_perturb_vectors(m, flat, key);  // RMSNorm weights off 1
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
    snprintf(path, sizeof path, "%s/batch.bin", dir);
    parity_write_batch(path, key, inputs, targets, B, T, V);

    char flags[256];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 dev/reference.py --arch llama --model %s/llama.f32 --batch %s/batch.bin "
             "--out %s/expected.bin --layers %d --channels %d --heads %d --kv-heads %d --mlp-hidden %d --vocab %d "
             "--rope-theta %g --tied %d %s",
             dir, dir, dir, c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.mlp_hidden, V, c.rope_theta, tied,
             parity_training_flags(flags, sizeof flags, PARITY_TRAINING, steps));
    parity_run_reference(cmd, "dev/reference.py --arch llama");
    snprintf(path, sizeof path, "%s/expected.bin", dir);
    parity_read_expected(path, ex, B, T, V, steps);
    parity_check_header(ex, B, T, V, VP, P);
    be->to_device(be, m->inputs, inputs, sizeof inputs);
    be->to_device(be, m->targets, targets, sizeof targets);
}

static void test_untied(void) {
    GPT m;
    ParityExpected ex;
    setup(&m, &ex, 0, PARITY_TRAINING.steps);
    CHECK(gpt_has_kind(&m.config, P_LMHEAD) && !gpt_has_kind(&m.config, P_WPE) && !gpt_has_kind(&m.config, P_QKVB),
          "untied Llama tensor kinds");
    parity_check_logits_and_loss(&m, &ex, B, T, 0.1);
    parity_check_gradients(&m, &ex, B, T);
    parity_check_adamw_steps(&m, &ex, B, T, PARITY_TRAINING);
    parity_free_expected(&ex);
    gpt_free(&m);
}

// Tied: the embedding's gradient sums the head's and the lookup's.
static void test_tied(void) {
    GPT m;
    ParityExpected ex;
    setup(&m, &ex, 1, 1);
    CHECK(!gpt_has_kind(&m.config, P_LMHEAD), "a tied Llama has no lm_head");
    parity_check_logits_and_loss(&m, &ex, B, T, 0.1);
    parity_check_gradients(&m, &ex, B, T);
    parity_free_expected(&ex);
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
