// bench_cpu.c: CPU backend throughput (`make bench`).
//
// Measures, in one run: the sgemm ceiling of this machine (OpenBLAS on a
// large square GEMM), then full training steps (forward, backward, gradient
// norm, AdamW) of two GPT-2 shapes and a Llama of GPT-2 124M's size (its
// step's time over GPT-2's, measured in the same run) at micro-batch 4,
// sequence 64, GPT-2 vocabulary. Prints the fastest step's ms (the machine
// may be shared: load only ever slows a step down, so the best of several is
// the steadiest figure and the one the Llama/GPT-2 ratio divides), tokens/s
// and effective GFLOP/s (6 * params * tokens), and that figure as a fraction
// of the sgemm ceiling measured here.
// Then FP8 against the 16/32-bit path at hidden 2048, 4096 and 8192 (128
// tokens, H -> H): the CPU has no BF16 or FP8 arithmetic, so --precision
// bf16 is not offered here and FP8 is an exact emulation (cast the input,
// decode both operands to FP32, the same sgemm); the ratio shows what the
// emulation costs, not what FP8 gains on a GPU (dev/bench_gpu.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/fp8/fp8.h"
#include "llm/model/model.h"
#include "llm/util/rng.h"

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

// "52%" of the ceiling, or "n/a" above 100%: a step cannot outrun the GEMM it
// is made of, so the ceiling was measured low (the machine was busier then).
static const char* ceiling_frac(char* buf, size_t size, double gflops, double ceiling) {
    double f = gflops / ceiling;
    if (!(f > 0) || f > 1) snprintf(buf, size, "n/a");
    else snprintf(buf, size, "%.0f%%", 100 * f);
    return buf;
}

static BenchResult bench_config(Backend* be, const char* name, GPTConfig c, int B, int T, int steps) {
    gpt_config_finish(&c);
    GPT m;
    gpt_create(&m, &c, be, B, T, 1, 0, 0);
    gpt_init_random(&m, 1);
    int32_t* tok = (int32_t*)xmalloc((size_t)(B * T + 1) * sizeof(int32_t));
    for (int i = 0; i <= B * T; i++) tok[i] = (int32_t)rng_below(3, (uint64_t)i, 50257);
    be->to_device(be, m.inputs, tok, (size_t)B * T * 4);
    be->to_device(be, m.targets, tok + 1, (size_t)B * T * 4);
    double best = INFINITY;  // the fastest step: other load on a shared machine only ever slows one down
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
        if (s >= 0) best = fmin(best, now_seconds() - t0);
        if (!isfinite(sc[0])) fatal("bench %s: loss is not finite", name);
    }
    BenchResult r;
    r.ms = best * 1e3;
    r.tok_s = (double)B * T / best;
    r.gflops = 6.0 * (double)m.num_params * B * T / best / 1e9;
    printf("%-26s %6.1fM params | %8.1f ms/step (best of %d) | %7.0f tok/s | %6.1f GFLOP/s\n", name,
           m.num_params / 1e6, r.ms, steps, r.tok_s, r.gflops);
    fflush(stdout);
    free(tok);
    gpt_free(&m);
    return r;
}

static BenchResult bench_model(Backend* be, const char* name, int L, int C, int NH, int maxT, int B, int T,
                               int steps) {
    GPTConfig c = {.max_seq_len = maxT, .vocab_size = 50257, .num_layers = L, .num_heads = NH, .channels = C};
    return bench_config(be, name, c, B, T, steps);
}

// FP32 GEMM against the emulated FP8 one (input cast with current scaling
// each call; the weight cast once, as training does per optimizer step).
static void bench_fp8_gemm(Backend* be, int H) {
    const int N = 128;
    size_t nx = (size_t)N * H, nw = (size_t)H * H;
    float* host = (float*)xmalloc(nw * sizeof(float));
    for (size_t i = 0; i < nw; i++) host[i] = rng_normal(7, i);
    float* x = (float*)be->alloc(be, nx * 4, "bench x");
    float* w = (float*)be->alloc(be, nw * 4, "bench w");
    float* out = (float*)be->alloc(be, (size_t)N * H * 4, "bench out");
    uint8_t* xq = (uint8_t*)be->alloc(be, nx, "bench x e4m3");
    uint8_t* wq = (uint8_t*)be->alloc(be, nw, "bench w e4m3");
    float* sc = (float*)be->alloc(be, 6 * sizeof(float), "bench scales");
    memcpy(x, host, nx * 4);
    memcpy(w, host, nw * 4);
    memset(sc, 0, 6 * sizeof(float));
    be->amax(be, &sc[3], w, nw);
    be->fp8_quantize(be, wq, NULL, DTYPE_FP8_E4M3, w, H, H, &sc[3], &sc[4], &sc[5]);
    Fp8Tensor xt = {xq, NULL, DTYPE_FP8_E4M3, &sc[2]}, wt = {wq, NULL, DTYPE_FP8_E4M3, &sc[5]};
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 3; rep++) {  // rep 0 warms up
        double t0 = now_seconds();
        be->matmul_forward(be, out, NULL, x, w, NULL, N, H, H);
        double t1 = now_seconds();
        sc[0] = 0;
        be->amax(be, &sc[0], x, nx);
        be->fp8_quantize(be, xq, NULL, DTYPE_FP8_E4M3, x, N, H, &sc[0], &sc[1], &sc[2]);
        be->fp8_matmul_forward(be, out, &xt, &wt, NULL, N, H, H);
        double t2 = now_seconds();
        if (rep && t1 - t0 < best[0]) best[0] = t1 - t0;
        if (rep && t2 - t1 < best[1]) best[1] = t2 - t1;
    }
    double flops = 2.0 * N * H * H;
    printf("gemm hidden %-5d %d x %d -> %d | fp32 %6.1f GFLOP/s | fp8 emulated %6.1f GFLOP/s | fp8/fp32 %.2fx\n", H, N, H,
           H, flops / best[0] / 1e9, flops / best[1] / 1e9, best[0] / best[1]);
    fflush(stdout);
    be->free(be, x);
    be->free(be, w);
    be->free(be, out);
    be->free(be, xq);
    be->free(be, wq);
    be->free(be, sc);
    free(host);
}

int main(void) {
    Backend* be = cpu_backend_create(DTYPE_F32, 0);
    printf("CPU backend benchmark (micro-batch 4, sequence 64, GPT-2 vocabulary 50257)\n");
    double ceiling = sgemm_ceiling_gflops(be);
    printf("%-26s %.1f GFLOP/s (the backend's GEMM at 1536^3, best of 5)\n", "sgemm ceiling", ceiling);
    BenchResult small = bench_model(be, "4 layers x 256 channels", 4, 256, 4, 256, 4, 64, 20);
    BenchResult gpt2 = bench_model(be, "GPT-2 124M", 12, 768, 12, 1024, 4, 64, 5);
    // Llama at GPT-2 124M's size: 12 x 768, 12 query heads sharing 4 kv heads,
    // tied head, an MLP of 2432 (124.7M parameters, 0.2% more).
    GPTConfig lc = {.max_seq_len = 1024, .vocab_size = 50257, .num_layers = 12, .num_heads = 12, .channels = 768,
                    .arch = ARCH_LLAMA, .num_kv_heads = 4, .mlp_hidden = 2432, .tie_embeddings = 1,
                    .rope_theta = 500000.0f};
    BenchResult llama = bench_config(be, "Llama 124M (GQA 12/4)", lc, 4, 64, 5);
    char f1[16], f2[16], f3[16];
    printf("\nfraction of the sgemm ceiling: 4x256 %s | GPT-2 124M %s | Llama 124M %s\n",
           ceiling_frac(f1, sizeof f1, small.gflops, ceiling), ceiling_frac(f2, sizeof f2, gpt2.gflops, ceiling),
           ceiling_frac(f3, sizeof f3, llama.gflops, ceiling));
    printf("Llama 124M step / GPT-2 124M step, this run: %.2fx the time\n", llama.ms / gpt2.ms);
    printf("llm.c's train_gpt2.c on a 2-core machine of this kind (notes, not measured here): ~500 ms/step and\n"
           "~3000 ms/step for these two shapes; here: %.0f ms and %.0f ms (%.1fx and %.1fx faster)\n",
           small.ms, gpt2.ms, 500.0 / small.ms, 3000.0 / gpt2.ms);
    printf("\nFP8 against FP32 GEMMs on the CPU (bf16 runs compute in fp32 here; FP8 is emulated exactly)\n");
    bench_fp8_gemm(be, 2048);
    bench_fp8_gemm(be, 4096);
    bench_fp8_gemm(be, 8192);
    be->destroy(be);
    return 0;
}
