// test_torch_parity.c: the whole model against PyTorch (dev/reference.py).
//
// A small GPT with odd sizes (padded vocabulary, heads of 16, T not a power
// of two) and random non-zero weights is exported in llm.c's format; the
// reference computes logits, loss, every gradient, and 10 AdamW steps with
// clipping, warmup and cosine decay in float64. The CPU backend (FP32) must
// match within FP32 tolerances (the checks: tests/torch_parity.h).
#include <stdlib.h>
#include <unistd.h>

#include "llm/arch/arch.h"
#include "tests/testlib.h"
#include "tests/torch_parity.h"

#define B 3
#define T 13
#define V 101

static char dir[256];
static Backend* be;
static GPT model;
static ParityExpected ex;
static int32_t inputs[B * T], targets[B * T];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/train_gpt_parity_%d", (int)getpid());
    char cmd[1536];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) exit(2);

    be = cpu_backend_create(DTYPE_F32, 0);
    GPTConfig c = {.max_seq_len = 24, .vocab_size = V, .num_layers = 2, .num_heads = 3, .channels = 48};
    gpt_config_finish(&c);
    gpt_create(&model, &c, be, B, T, 1, 0, 0);
    gpt_init_random(&model, 42);
    // Make every parameter matter: non-trivial layernorm weights and biases.
    float* flat = (float*)xmalloc(model.layout.total * sizeof(float));
    gpt_get_params_f32(&model, flat);
    uint64_t key = rng_key(7, 1, 2);
    parity_perturb_vectors(&model, flat, key);
    gpt_set_params_f32(&model, flat);
    free(flat);

    char path[512];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    llmc_save_weights(&model, path, DTYPE_F32);
    snprintf(path, sizeof path, "%s/batch.bin", dir);
    parity_write_batch(path, key, inputs, targets, B, T, V);

    char flags[256];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 dev/reference.py --model %s/model.bin --batch %s/batch.bin "
             "--out %s/expected.bin %s",
             dir, dir, dir, parity_training_flags(flags, sizeof flags, PARITY_TRAINING, PARITY_TRAINING.steps));
    parity_run_reference(cmd, "dev/reference.py");
    snprintf(path, sizeof path, "%s/expected.bin", dir);
    parity_read_expected(path, &ex, B, T, V, PARITY_TRAINING.steps);
}

static void test_reference_header(void) { parity_check_header(&ex, B, T, V, 128, llmc_num_elements(&model.config)); }

static void test_forward_logits_and_loss(void) {
    be->to_device(be, model.inputs, inputs, sizeof inputs);
    be->to_device(be, model.targets, targets, sizeof targets);
    parity_check_logits_and_loss(&model, &ex, B, T, 0.0);
}

static void test_gradients(void) { parity_check_gradients(&model, &ex, B, T); }

static void test_ten_adamw_steps(void) { parity_check_adamw_steps(&model, &ex, B, T, PARITY_TRAINING); }

int main(void) {
    setup();
    RUN(test_reference_header);
    RUN(test_forward_logits_and_loss);
    RUN(test_gradients);
    RUN(test_ten_adamw_steps);
    parity_free_expected(&ex);
    gpt_free(&model);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return TESTS_DONE();
}
