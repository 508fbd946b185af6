// encoder.c: token + position embeddings, forward and backward, on the CPU.
// Without position embeddings (wpe and dwpe NULL: Llama) only the token rows.
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_encoder_forward(Backend* be, void* out_, const int32_t* tokens, const void* wte_,
                         const void* wpe_, int B, int T, int C) {
    float* out = (float*)out_;
    const float* wte = (const float*)wte_;
    const float* wpe = (const float*)wpe_;
    size_t rows = (size_t)B * T;
#pragma omp parallel for schedule(static) if (rows * C > CPU_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float* e = wte + (size_t)tokens[r] * C;
        float* o = out + r * C;
        if (!wpe) {
            memcpy(o, e, (size_t)C * sizeof(float));
            continue;
        }
        const float* p = wpe + (r % T) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

// Deterministic without atomics: each thread owns whole chunks of channels and
// walks all tokens in order, so a token that occurs many times has its rows
// added in the same order whatever the thread count.
void cpu_encoder_backward(Backend* be, void* dwte_, void* dwpe_, const void* dout_,
                          const int32_t* tokens, int B, int T, int C) {
    float* dwte = (float*)dwte_;
    float* dwpe = (float*)dwpe_;
    const float* dout = (const float*)dout_;
    size_t rows = (size_t)B * T;
    int chunks = (int)ceil_div((size_t)C, CPU_COLUMN_CHUNK);
    int parallel = rows * C > CPU_PARALLEL_MIN;
#pragma omp parallel for schedule(static) if (parallel)
    for (int k = 0; k < chunks; k++) {
        int c0 = k * CPU_COLUMN_CHUNK;
        int c1 = c0 + CPU_COLUMN_CHUNK < C ? c0 + CPU_COLUMN_CHUNK : C;
        for (size_t r = 0; r < rows; r++) {
            float* d = dwte + (size_t)tokens[r] * C;
            const float* g = dout + r * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
    if (!dwpe) return;
    // dwpe[t] gets one row from each batch element, added in batch order.
#pragma omp parallel for schedule(static) if (parallel)
    for (int t = 0; t < T; t++) {
        float* d = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* g = dout + ((size_t)b * T + t) * C;
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}
