// grad_dtype_check.h: the accuracy of --grad-dtype (gpt_set_grad_dtype, the
// ZeRO hooks of llm/parallel/zero.c) on any backend, shared by
// tests/test_grad_dtype.c (the CPU backend, where bf16 is an emulation) and
// tests/gpu/test_gpu_grad_dtype.c (a BF16 CUDA backend, in the emulator).
//
// One optimizer step's gradient over MICRO micro-steps, accumulated through
// ZeRO's hooks at a stage with the gradient dtype asked for, against the
// reference: the same micro-steps' gradients, each computed alone (zeroed
// gradients, no hooks) by the same backend, summed in float64 on the host.
// Both see the same per-micro-step values, so the difference is the
// accumulation's rounding alone. Single process (the shard group is one rank).
#pragma once

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "llm/arch/arch.h"
#include "llm/model/model.h"
#include "llm/parallel/zero.h"
#include "llm/util/rng.h"

#define GD_B 2
#define GD_T 16

static const GPTConfig GD_GPT2 = {.max_seq_len = GD_T, .vocab_size = 101, .num_layers = 2, .num_heads = 2, .channels = 32};
static const GPTConfig GD_LLAMA = {.max_seq_len = GD_T, .vocab_size = 101, .num_layers = 2, .num_heads = 4, .channels = 32,
                                   .arch = ARCH_LLAMA, .num_kv_heads = 2, .mlp_hidden = 40, .rope_theta = 10000.0f};

// Micro-batch a's tokens (inputs then targets), random.
static void gd_load_batch(GPT* m, int a) {
    int32_t tok[2 * GD_B * GD_T];
    for (int i = 0; i < 2 * GD_B * GD_T; i++) tok[i] = (int32_t)(rng_u64(rng_key(77, (uint64_t)a, 3), (uint64_t)i) % 101);
    m->be->to_device(m->be, m->inputs, tok, (size_t)GD_B * GD_T * sizeof(int32_t));
    m->be->to_device(m->be, m->targets, tok + GD_B * GD_T, (size_t)GD_B * GD_T * sizeof(int32_t));
}

// The first n gradients of m (its flat gradients, or at one rank its shard) as doubles.
static void gd_read_grads(GPT* m, double* out, size_t n) {
    size_t es = dtype_size(m->grad_dtype);
    void* h = xmalloc(n * es);
    m->be->synchronize(m->be);
    m->be->to_host(m->be, h, m->grads, n * es);
    for (size_t i = 0; i < n; i++)
        out[i] = m->grad_dtype == DTYPE_F32 ? ((float*)h)[i] : bf16_to_f32(((uint16_t*)h)[i]);
    free(h);
}

static void gd_micro_step(GPT* m, int a, float dloss) {
    gd_load_batch(m, a);
    gpt_forward(m, m->inputs, m->targets, GD_B, GD_T, dloss);
    gpt_backward(m, m->inputs, GD_B, GD_T);
}

// The float64 sum of `micro` micro-steps' gradients, each computed alone (n values).
static double* gd_reference(Backend* be, const GPTConfig* c, int micro, size_t* n) {
    GPT m;
    gpt_create(&m, c, be, GD_B, GD_T, 1, 0, 0);
    gpt_init_random(&m, 11);
    *n = m.layout.total;
    double* sum = (double*)calloc(*n, sizeof(double));
    double* one = (double*)xmalloc(*n * sizeof(double));
    for (int a = 0; a < micro; a++) {
        gpt_zero_grads(&m);
        gd_micro_step(&m, a, 1.0f / (float)(GD_B * GD_T * micro));
        gd_read_grads(&m, one, *n);
        for (size_t i = 0; i < *n; i++) sum[i] += one[i];
    }
    free(one);
    gpt_free(&m);
    return sum;
}

// The relative L2 error (against ref, n values) of the gradient accumulated
// over `micro` micro-steps through ZeRO at `stage` with gradients in `want`.
static double gd_accumulated_error(Backend* be, Comm* comm, const GPTConfig* c, int stage, DType want, int micro,
                                   const double* expect, size_t n) {
    GPT m;
    gpt_create(&m, c, be, GD_B, GD_T, 1, 0, stage);
    gpt_init_random(&m, 11);
    gpt_set_grad_dtype(&m, want);
    Zero z;
    zero_init(&z, &m, comm);
    zero_begin_step(&z);
    for (int a = 0; a < micro; a++) {
        zero_begin_micro_step(&z, a, micro);
        gd_micro_step(&m, a, 1.0f / (float)(GD_B * GD_T * micro));
    }
    comm_compute_wait_all(comm);
    double* got = (double*)xmalloc(n * sizeof(double));
    gd_read_grads(&m, got, n);  // one rank: the shard is the whole flat range
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - expect[i]) * (got[i] - expect[i]);
        den += expect[i] * expect[i];
    }
    free(got);
    zero_free(&z);
    gpt_free(&m);
    return sqrt(num / den);
}
