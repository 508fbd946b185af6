// reduce.c: whole-buffer sums (the loss sum, the squared gradient norm) on
// the CPU, and the gradient accumulator's add (accumulate_f32). Deterministic whatever the thread count: the input is cut into
// fixed chunks of CPU_REDUCE_CHUNK elements, each summed in double on its own,
// and the partial sums are added in chunk order by one thread.
#include <stdlib.h>

#include "kernels/bf16.h"
#include "kernels/cpu/cpu.h"

static double chunk_sum(const float* x, size_t n, int squares) {
    double s = 0.0;
    if (squares) {
#pragma omp simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    } else {
#pragma omp simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += (double)x[i];
    }
    return s;
}

static double chunked_sum(const float* x, size_t n, int squares) {
    size_t chunks = ceil_div(n, CPU_REDUCE_CHUNK);
    if (chunks <= 1) return chunk_sum(x, n, squares);
    double* partial = (double*)xmalloc(chunks * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < chunks; k++) {
        size_t i0 = k * CPU_REDUCE_CHUNK;
        size_t len = i0 + CPU_REDUCE_CHUNK < n ? CPU_REDUCE_CHUNK : n - i0;
        partial[k] = chunk_sum(x + i0, len, squares);
    }
    double total = 0.0;
    for (size_t k = 0; k < chunks; k++) total += partial[k];
    free(partial);
    return total;
}

static void store_result(float* out, double total, int accumulate) {
    *out = accumulate ? (float)((double)*out + total) : (float)total;
}

void cpu_sum(Backend* be, float* out, const float* x, size_t n, int accumulate) {
    store_result(out, chunked_sum(x, n, 0), accumulate);
}

void cpu_sum_squares(Backend* be, float* out, const void* x, size_t n, int accumulate) {
    store_result(out, chunked_sum((const float*)x, n, 1), accumulate);
}

void cpu_sum_squares_f32(Backend* be, float* out, const float* x, size_t n, int accumulate) {
    cpu_sum_squares(be, out, x, n, accumulate);
}

// A BF16 gradient buffer under beta = 1 GEMMs rounds the micro-step's
// contribution and the sum: the emulation rounds both.
static float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

void cpu_accumulate_f32(Backend* be, float* acc, const void* x_, size_t n, int round) {
    (void)be;
    const float* x = (const float*)x_;
    if (round) {
#pragma omp parallel for schedule(static) if (n > CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) acc[i] = round_bf16(acc[i] + round_bf16(x[i]));
    } else {
#pragma omp parallel for schedule(static) if (n > CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) acc[i] += x[i];
    }
}
