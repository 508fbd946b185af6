// classifier.c: softmax cross-entropy over the real vocabulary, fused with its
// gradient (written over the logits, as llm.c does, so no probability matrix
// is ever stored), on the CPU.
#include <string.h>

#include "kernels/cpu/cpu.h"

// Loss of one row; when dloss != 0 the row becomes dloss * (softmax - onehot)
// over its first V columns and 0 over the padding V..Vp-1.
static float cross_entropy_row(float* x, int target, int V, int Vp, float dloss) {
    float target_logit = x[target];
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < V; c++) mx = x[c] > mx ? x[c] : mx;
    // The sum is taken in double: it has ~50k terms.
    double sum = 0.0;
    if (dloss != 0.0f) {
        // Keep exp(x - max) in the row; the gradient pass below only rescales it.
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < V; c++) {
            float e = cpu_expf(x[c] - mx);
            x[c] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int c = 0; c < V; c++) x[c] = dloss * (x[c] * inv - (c == target ? 1.0f : 0.0f));
        for (int c = V; c < Vp; c++) x[c] = 0.0f;
    } else {
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < V; c++) sum += cpu_expf(x[c] - mx);
    }
    return (float)((double)mx + log(sum) - (double)target_logit);
}

void cpu_cross_entropy(Backend* be, float* losses, void* logits_, const int32_t* targets, int N,
                       int V, int Vp, float dloss) {
    float* logits = (float*)logits_;
    if (V <= 0 || V > Vp) fatal("cross_entropy: need 0 < V <= Vp, got V=%d Vp=%d", V, Vp);
    // A bad target would read outside the row; checking costs one pass over N ints.
    for (int i = 0; i < N; i++) {
        if (targets[i] < -1 || targets[i] >= V) {
            fatal("cross_entropy: target %d of row %d is outside the vocabulary [0, %d)",
                  targets[i], i, V);
        }
    }
#pragma omp parallel for schedule(static) if ((size_t)N * V > CPU_PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        float* row = logits + (size_t)i * Vp;
        if (targets[i] == -1) {  // a pad (context parallelism): no loss, no gradient
            losses[i] = 0.0f;
            if (dloss != 0.0f) memset(row, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        losses[i] = cross_entropy_row(row, targets[i], V, Vp, dloss);
    }
}
