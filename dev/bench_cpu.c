// bench_cpu.c: CPU backend throughput (`make bench`).
//
// Measures, in one run: the sgemm ceiling of this machine (OpenBLAS on a
// large square GEMM), then full training steps (forward, backward, gradient
// norm, AdamW) of two GPT-2 shapes at micro-batch 4, sequence 64, GPT-2
// vocabulary. Prints ms/step, tokens/s and effective GFLOP/s (6 * params *
// tokens), and that figure as a fraction of the sgemm ceiling measured here.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/gpt.h"
#include "llm/rng.h"

// The backend's own GEMM (OpenBLAS sgemm tiles on every core) on a large
// square problem: the most this machine gives a training step.
static double sgemm_ceiling_gflops(Backend* be) {
    const int n = 1536;
    size_t bytes = (size_t)n * n * 4;
    float* host = (float*)xmalloc(bytes);
    void* a = be->alloc(be, bytes, "bench a");
    void* b = be->alloc(be, bytes, "bench b");
    void* c = be->alloc(be, bytes, "bench c");
    for (size_t i = 0; i < (size_t)n * n; i++) host[i] = rng_normal(1, i);
    be->to_device(be, a, host, bytes);
    be->to_device(be, b, host, bytes);
    be->matmul_forward(be, c, NULL, a, b, NULL, n, n, n);  // warm-up
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_seconds();
        be->matmul_forward(be, c, NULL, a, b, NULL, n, n, n);
        be->synchronize(be);
        double g = 2.0 * n * n * n / (now_seconds() - t0) / 1e9;
        if (g > best) best = g;
    }
    be->free(be, a);
    be->free(be, b);
    be->free(be, c);
    free(host);
    return best;
}

typedef struct { double ms, tok_s, gflops; } BenchResult;

static BenchResult bench_model(Backend* be, const char* name, int L, int C, int NH, int maxT, int B, int T,
                               int steps) {
    GPTConfig c = {.max_seq_len = maxT, .vocab_size = 50257, .num_layers = L, .num_heads = NH, .channels = C};
    gpt_config_finish(&c);
    GPT m;
    gpt_create(&m, &c, be, B, T, 1, 0, 0);
    gpt_init_random(&m, 1);
    int32_t* tok = (int32_t*)xmalloc((size_t)(B * T + 1) * sizeof(int32_t));
    for (int i = 0; i <= B * T; i++) tok[i] = (int32_t)rng_below(3, (uint64_t)i, 50257);
    be->to_device(be, m.inputs, tok, (size_t)B * T * 4);
    be->to_device(be, m.targets, tok + 1, (size_t)B * T * 4);
    double total = 0;
    for (int s = -1; s < steps; s++) {  // step -1 warms caches and thread pools
        double t0 = now_seconds();
        gpt_zero_grads(&m);
        gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (B * T));
        gpt_accumulate_loss(&m, B, T, 0);
        gpt_backward(&m, m.inputs, B, T);
        gpt_grad_norm_squared(&m, 0, m.layout.total);
        float sc[2];
        be->to_host(be, sc, m.scalars, sizeof sc);
        gpt_update(&m, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0);
        if (s >= 0) total += now_seconds() - t0;
        if (!isfinite(sc[0])) fatal("bench %s: loss is not finite", name);
    }
    BenchResult r;
    r.ms = total / steps * 1e3;
    r.tok_s = (double)B * T / (total / steps);
    r.gflops = 6.0 * (double)m.num_params * B * T / (total / steps) / 1e9;
    printf("%-26s %6.1fM params | %8.1f ms/step | %7.0f tok/s | %6.1f GFLOP/s\n", name, m.num_params / 1e6, r.ms,
           r.tok_s, r.gflops);
    fflush(stdout);
    free(tok);
    gpt_free(&m);
    return r;
}

int main(void) {
    Backend* be = cpu_backend_create(DTYPE_F32, 0);
    printf("CPU backend benchmark (micro-batch 4, sequence 64, GPT-2 vocabulary 50257)\n");
    double ceiling = sgemm_ceiling_gflops(be);
    printf("%-26s %.1f GFLOP/s (the backend's GEMM at 1536^3, best of 5)\n", "sgemm ceiling", ceiling);
    BenchResult small = bench_model(be, "4 layers x 256 channels", 4, 256, 4, 256, 4, 64, 20);
    BenchResult gpt2 = bench_model(be, "GPT-2 124M", 12, 768, 12, 1024, 4, 64, 5);
    printf("\nfraction of the sgemm ceiling: 4x256 %.0f%% | GPT-2 124M %.0f%%\n", 100 * small.gflops / ceiling,
           100 * gpt2.gflops / ceiling);
    printf("llm.c's train_gpt2.c on a 2-core machine of this kind (notes, not measured here): ~500 ms/step and\n"
           "~3000 ms/step for these two shapes; here: %.0f ms and %.0f ms (%.1fx and %.1fx faster)\n",
           small.ms, gpt2.ms, 500.0 / small.ms, 3000.0 / gpt2.ms);
    be->destroy(be);
    return 0;
}
