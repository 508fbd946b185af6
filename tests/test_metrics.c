// test_metrics.c: FLOPs per token and MFU against values computed by hand,
// the dense peak table, the CPU sgemm ceiling, and the JSON writer behind
// metrics.jsonl (escaping, null for non-finite numbers, nesting, the config).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/config.h"
#include "llm/util/json.h"
#include "llm/plan/mfu.h"
#include "tests/testlib.h"

// GPT-2 124M at T = 1024: L 12, C 768, V 50257, 1024 positions.
//   parameters: wte 50257*768 = 38,597,376; wpe 786,432; per layer
//   12*768^2 + 13*768 = 7,087,872 (x12 = 85,054,464); final norm 1,536;
//   total 124,439,808 (the published count).
//   N = total - wpe = 123,653,376; 6N = 741,920,256
//   12*L*h*s = 12 * 12 * 768 * 1024 = 113,246,208
//   FLOPs per token = 855,166,464
static void flops_gpt2_124m(void) {
    GPTConfig c = {.max_seq_len = 1024, .vocab_size = 50257, .num_layers = 12, .num_heads = 12, .channels = 768};
    gpt_config_finish(&c);
    CHECK(gpt_num_params(&c) == 124439808u, "params %zu", gpt_num_params(&c));
    CHECK_CLOSE(flops_per_token(&c, 1024), 855166464.0, 0, 0, "FLOPs/token GPT-2 124M, T 1024");
    // At T = 256 only the attention term changes: 12*12*768*256 = 28,311,552.
    CHECK_CLOSE(flops_per_token(&c, 256), 741920256.0 + 28311552.0, 0, 0, "FLOPs/token GPT-2 124M, T 256");
}

// The bundled demo (--depth 4 with the 4,096-token tokenizer) at T = 256:
//   wte 4096*256 = 1,048,576; wpe 65,536; per layer 12*256^2 + 13*256 =
//   789,760 (x4 = 3,159,040); final norm 512; total 4,273,664.
//   6N = 6 * 4,208,128 = 25,248,768; 12*4*256*256 = 3,145,728
//   FLOPs per token = 28,394,496
static void flops_demo_model(void) {
    GPTConfig c = {.max_seq_len = 256, .vocab_size = 4096, .num_layers = 4, .num_heads = 4, .channels = 256};
    gpt_config_finish(&c);
    CHECK(gpt_num_params(&c) == 4273664u, "params %zu", gpt_num_params(&c));
    CHECK_CLOSE(flops_per_token(&c, 256), 28394496.0, 0, 0, "FLOPs/token demo model");
}

// Llama 3 8B (untied): the published 8,030,261,248 parameters; 6N leaves out
// the 128256 x 4096 embedding lookup: 6 * 7,504,924,672 + 12*32*4096*8192.
// Llama 3.2 1B (tied): 1,235,814,400 parameters, all counted.
static void flops_llama(void) {
    GPTConfig c = {.max_seq_len = 8192, .vocab_size = 128256, .num_layers = 32, .num_heads = 32, .channels = 4096,
                   .arch = ARCH_LLAMA, .num_kv_heads = 8, .mlp_hidden = 14336, .rope_theta = 500000.0f};
    gpt_config_finish(&c);
    CHECK(gpt_num_params(&c) == 8030261248u, "Llama 3 8B params %zu", gpt_num_params(&c));
    CHECK_CLOSE(flops_per_token(&c, 8192), 6.0 * 7504924672.0 + 12.0 * 32 * 4096 * 8192, 0, 0, "FLOPs/token Llama 3 8B");
    GPTConfig d = {.max_seq_len = 2048, .vocab_size = 128256, .num_layers = 16, .num_heads = 32, .channels = 2048,
                   .arch = ARCH_LLAMA, .num_kv_heads = 8, .mlp_hidden = 8192, .tie_embeddings = 1,
                   .rope_theta = 500000.0f};
    gpt_config_finish(&d);
    CHECK(gpt_num_params(&d) == 1235814400u, "Llama 3.2 1B params %zu", gpt_num_params(&d));
    CHECK_CLOSE(flops_per_token(&d, 2048), 6.0 * 1235814400.0 + 12.0 * 16 * 2048 * 2048, 0, 0, "FLOPs/token Llama 1B");
}

static void mfu_by_hand(void) {
    GPTConfig c = {.max_seq_len = 1024, .vocab_size = 50257, .num_layers = 12, .num_heads = 12, .channels = 768};
    gpt_config_finish(&c);
    // 8 H100s in BF16 at 1.2M tokens/s: 1.2e6 * 855,166,464 / (8 * 989e12) = 0.12970168817...
    double u = mfu(1.2e6, flops_per_token(&c, 1024), 989e12, 8);
    CHECK_CLOSE(u, 1.2e6 * 855166464.0 / (8 * 989e12), 0, 1e-15, "MFU 8xH100");
    CHECK_CLOSE(u, 0.1297016882, 1e-10, 0, "MFU 8xH100, decimal");
    // The demo model on one CPU with a 200 GFLOP/s ceiling at 6,000 tokens/s:
    // 6000 * 28,394,496 / 2e11 = 0.85183488
    GPTConfig d = {.max_seq_len = 256, .vocab_size = 4096, .num_layers = 4, .num_heads = 4, .channels = 256};
    gpt_config_finish(&d);
    CHECK_CLOSE(mfu(6000, flops_per_token(&d, 256), 2e11, 1), 0.85183488, 1e-12, 0, "MFU demo on CPU");
    CHECK(isnan(mfu(6000, 1e6, 0, 1)), "MFU with an unknown peak should be NaN");
}

static void peak_table(void) {
    const char* row;
    CHECK(gpu_peak_tflops("NVIDIA H100 80GB HBM3", PRECISION_BF16, &row) == 989 && !strcmp(row, "H100"), "H100 SXM bf16");
    CHECK(gpu_peak_tflops("NVIDIA H100 80GB HBM3", PRECISION_FP8, NULL) == 1979, "H100 SXM fp8");
    CHECK(gpu_peak_tflops("NVIDIA H200", PRECISION_BF16, NULL) == 989, "H200 bf16");
    CHECK(gpu_peak_tflops("NVIDIA H200", PRECISION_FP8, NULL) == 1979, "H200 fp8");
    CHECK(gpu_peak_tflops("NVIDIA B200", PRECISION_BF16, NULL) == 2250, "B200 bf16");
    CHECK(gpu_peak_tflops("NVIDIA B200", PRECISION_FP8, NULL) == 4500, "B200 fp8");
    CHECK(gpu_peak_tflops("NVIDIA A100-SXM4-80GB", PRECISION_BF16, NULL) == 312, "A100 bf16");
    CHECK(gpu_peak_tflops("NVIDIA A100-SXM4-80GB", PRECISION_FP8, &row) == 0 && row && !strcmp(row, "A100"), "A100 has no fp8");
    CHECK(gpu_peak_tflops("NVIDIA H100 PCIe", PRECISION_BF16, &row) == 756 && !strcmp(row, "H100 PCIe"), "H100 PCIe");
    CHECK(gpu_peak_tflops("NVIDIA H100 NVL", PRECISION_BF16, NULL) == 835, "H100 NVL");
    CHECK(gpu_peak_tflops("NVIDIA H100 80GB HBM3", PRECISION_FP32, NULL) == 0, "no fp32 entry");
    CHECK(gpu_peak_tflops("NVIDIA L40S", PRECISION_BF16, &row) == 0 && row == NULL, "unknown GPU");
    CHECK(gpu_peak_tflops("nvidia h100 80gb hbm3", PRECISION_BF16, NULL) == 989, "case-insensitive");
}

static void cpu_ceiling_measured(void) {
    Backend* be = cpu_backend_create(DTYPE_F32, 0);
    size_t before = be->peak_allocated_bytes(be);
    double f = cpu_sgemm_ceiling_flops(be);
    // No timing claim: only that a number came out (a GFLOP/s to a TFLOP/s
    // covers any CPU) and that it stayed out of the run's memory accounting.
    CHECK(isfinite(f) && f > 1e9 && f < 1e14, "ceiling %g FLOP/s", f);
    CHECK(be->peak_allocated_bytes(be) == before, "measurement changed the backend's peak bytes");
    printf("# CPU sgemm ceiling: %.1f GFLOP/s\n", f / 1e9);
    be->destroy(be);
}

static void json_writer(void) {
    JsonWriter j = {0};
    json_begin(&j);
    json_string(&j, "s", "a\"b\\c\nd\te\x01");
    json_number(&j, "x", 1.5);
    json_number(&j, "nan", NAN);
    json_number(&j, "inf", -INFINITY);
    json_int(&j, "big", 1234567890123LL);
    json_bool(&j, "t", 1);
    json_string(&j, "none", NULL);
    json_open_object(&j, "o");
    json_int(&j, "a", 1);
    json_open_object(&j, "p");
    json_close_object(&j);
    json_int(&j, "b", 2);
    json_close_object(&j);
    json_null(&j, "z");
    const char* want =
        "{\"s\":\"a\\\"b\\\\c\\nd\\te\\u0001\",\"x\":1.5,\"nan\":null,\"inf\":null,\"big\":1234567890123,"
        "\"t\":true,\"none\":null,\"o\":{\"a\":1,\"p\":{},\"b\":2},\"z\":null}";
    const char* got = json_end(&j);
    CHECK(!strcmp(got, want), "got %s", got);
    // A second object on the same writer starts clean.
    json_begin(&j);
    json_int(&j, "k", 3);
    CHECK(!strcmp(json_end(&j), "{\"k\":3}"), "reuse: %s", j.text);
    json_free(&j);
}

static void config_as_json(void) {
    TrainConfig cfg;
    char* argv[] = {"train_gpt", "--steps", "7", "--log-dir", "runs/a \"b\"", "--skip-spikes", "1", "--lr", "0.5"};
    config_parse(&cfg, (int)(sizeof argv / sizeof argv[0]), argv);
    JsonWriter j = {0};
    json_begin(&j);
    config_write_json(&cfg, &j);
    const char* s = json_end(&j);
    const char* want[] = {"\"steps\":7,", "\"log-dir\":\"runs/a \\\"b\\\"\"", "\"skip-spikes\":true", "\"lr\":0.5,",
                          "\"shuffle\":true", "\"telemetry-every\":100", "\"spike-z\":5,"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK(strstr(s, want[i]), "%s not in the config JSON", want[i]);
    json_free(&j);
}

int main(void) {
    RUN(flops_gpt2_124m);
    RUN(flops_demo_model);
    RUN(flops_llama);
    RUN(mfu_by_hand);
    RUN(peak_table);
    RUN(cpu_ceiling_measured);
    RUN(json_writer);
    RUN(config_as_json);
    return TESTS_DONE();
}
