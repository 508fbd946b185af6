// mfu.c: FLOPs per token, the dense peak table, the CPU sgemm ceiling.
#include "llm/plan/mfu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

double flops_per_token(const GPTConfig* c, int T) {
    // Tables that are only looked up: learned positions (GPT-2); the token
    // embedding when the LM head is a tensor of its own (an untied Llama).
    double lookup = (gpt_has_kind(c, P_WPE) ? (double)c->max_seq_len * c->channels : 0.0) +
                    (gpt_has_kind(c, P_LMHEAD) ? (double)c->vocab_size * c->channels : 0.0);
    double n = (double)gpt_num_params(c) - lookup;
    // h = the query heads' width NH * HS (= C): grouped-query attention shares
    // K and V but computes as many scores as multi-head attention.
    double h = (double)c->num_heads * (c->channels / c->num_heads);
    return 6.0 * n + 12.0 * c->num_layers * h * T;
}

// Dense tensor-core peaks per GPU in TFLOP/s. H100/H200 SXM and B200 (HGX,
// 1 kW) from the project notes (distributed-sagemaker-memory.md, section 5);
// A100 (SXM and PCIe: 312 BF16, no FP8) and the PCIe/NVL parts from NVIDIA's
// datasheets, which quote 2:4-sparse figures: dense is half of those.
// Matched by substring of the CUDA device name, first match wins, so the
// variants come before the plain names ("NVIDIA H100 80GB HBM3" is the SXM).
static const struct {
    const char* name;
    double bf16, fp8;  // 0: the GPU has no such tensor cores
} GPU_PEAKS[] = {
    {"H100 PCIe", 756, 1513},
    {"H100 NVL", 835, 1671},
    {"H200 NVL", 835, 1671},
    {"H100", 989, 1979},
    {"H200", 989, 1979},  // also GH200, which has the same GPU
    {"B200", 2250, 4500},
    {"A100", 312, 0},
};

// Case-insensitive substring search.
static int contains(const char* haystack, const char* needle) {
    size_t n = strlen(needle);
    for (const char* p = haystack; *p; p++)
        if (strncasecmp(p, needle, n) == 0) return 1;
    return 0;
}

double gpu_peak_tflops(const char* gpu_name, PrecisionChoice precision, const char** matched) {
    if (matched) *matched = NULL;
    if (!gpu_name) return 0;
    for (size_t i = 0; i < sizeof GPU_PEAKS / sizeof GPU_PEAKS[0]; i++) {
        if (!contains(gpu_name, GPU_PEAKS[i].name)) continue;
        if (matched) *matched = GPU_PEAKS[i].name;
        if (precision == PRECISION_BF16) return GPU_PEAKS[i].bf16;
        if (precision == PRECISION_FP8) return GPU_PEAKS[i].fp8;
        return 0;
    }
    return 0;
}

double cpu_sgemm_ceiling_flops(Backend* be) {
    // The CPU backend's memory is host memory, so plain aligned buffers serve
    // as its operands; going around be->alloc keeps this measurement out of
    // the run's memory accounting (its peak would otherwise include 12 MiB
    // that training never uses).
    const int n = 1024;
    size_t count = (size_t)n * n, bytes = count * sizeof(float);
    float* a = (float*)aligned_alloc(64, bytes);
    float* b = (float*)aligned_alloc(64, bytes);
    float* c = (float*)aligned_alloc(64, bytes);
    if (!a || !b || !c) fatal("out of host memory measuring the sgemm ceiling");
    // Values in [-1, 1): no denormals, no overflow, nothing that could slow a FMA.
    for (size_t i = 0; i < count; i++) a[i] = b[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    be->matmul_forward(be, c, NULL, a, b, NULL, n, n, n);  // warm-up: thread pool, pages, caches
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {  // the best: other load only ever slows a run down
        double t0 = now_seconds();
        be->matmul_forward(be, c, NULL, a, b, NULL, n, n, n);
        be->synchronize(be);
        double dt = now_seconds() - t0;
        double flops = 2.0 * n * n * (double)n / dt;
        if (flops > best) best = flops;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

double mfu(double tokens_per_second, double flops_per_tok, double peak_flops_per_device, int devices) {
    if (!(peak_flops_per_device > 0) || devices <= 0) return NAN;
    return tokens_per_second * flops_per_tok / (peak_flops_per_device * devices);
}
