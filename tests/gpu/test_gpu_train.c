// test_gpu_train.c: the whole model (llm/model/, GPT-2's block) on the CUDA backend
// against the CPU backend:
//   - one training step in FP32: loss and every parameter's gradient agree
//     with the CPU to 1e-5 (relative to each tensor's largest value), the
//     parameters after AdamW to 1e-5 of the largest parameter;
//   - training in BF16 on the GPU follows FP32 training on the CPU on the
//     same batches for 50 steps (30 small): every step's loss within 0.03
//     (and the loss falls);
//   - two GPU runs from the same seed give bit-identical losses and weights,
//     in FP32 and in BF16;
//   - activation recompute (none, selective, full, and mixes) gives the same
//     gradients bit for bit, in FP32 and in BF16, among policies whose layers
//     agree on keeping or recomputing the GELU output (a kept one may come
//     from the GEMM's epilogue); policies that differ there agree to rounding;
//   - the LM head in 1 and 3 chunks agrees with the CPU's and with itself
//     (loss, gradients, the logits a sampler reads), in FP32 and in BF16;
//   - (full size only) a 1-layer model trains a step at T = 131072.
// TEST_SMALL=1 (the CPU execution harness) shrinks the model and the number
// of steps.
#include "kernels/cuda_seam.h"
#include "llm/arch/arch.h"
#include "llm/model/model.h"
#include "llm/recompute.h"
#include "llm/trainer.h"
#include "tests/gpu/gpu_test.h"

static int small;

static GPTConfig small_config(int T) {
    GPTConfig c;
    memset(&c, 0, sizeof c);  // GPT-2 (arch 0), the Llama fields unset
    c.max_seq_len = T;
    c.vocab_size = small ? 250 : 1000;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = small ? 64 : 128;
    gpt_config_finish(&c);
    return c;
}

// Host FP32 copy of a model's flat buffer (parameters or gradients).
static float* read_flat(GPT* m, void* flat) {
    size_t n = m->layout.total;
    float* x = (float*)xmalloc(n * sizeof(float));
    if (m->dtype == DTYPE_F32) {
        m->be->to_host(m->be, x, flat, n * sizeof(float));
    } else {
        uint16_t* h = (uint16_t*)xmalloc(n * 2);
        m->be->to_host(m->be, h, flat, n * 2);
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(h[i]);
        free(h);
    }
    return x;
}

// Relative error per tensor of the layout; returns the worst and names it.
static double worst_tensor_error(const GPT* m, const float* got, const float* want, char* name, size_t cap) {
    double worst = 0.0;
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        double e = rel_error(got + t->offset, want + t->offset, t->count);
        if (e > worst || !(e == e)) {
            worst = e;
            snprintf(name, cap, "%s (layer %d)", param_kind_name(t->kind), t->layer);
        }
    }
    return worst;
}

static void test_fp32_step_matches_cpu(void) {
    int B = small ? 2 : 4, T = small ? 32 : 64;
    GPTConfig c = small_config(T);
    GPT mc, mg;
    gpt_create(&mc, &c, ref, B, T, 1, 0, 0);
    gpt_create(&mg, &c, gpu, B, T, 1, 0, 0);
    gpt_init_random(&mc, 5);
    gpt_init_random(&mg, 5);
    int32_t* in = (int32_t*)xmalloc((size_t)B * T * 4);
    int32_t* tgt = (int32_t*)xmalloc((size_t)B * T * 4);
    structured_batch(4242, in, tgt, B, T, c.vocab_size, 0);

    // Forward and backward, then compare loss and gradients before the update.
    double losses[2];
    GPT* models[2] = {&mc, &mg};
    for (int k = 0; k < 2; k++) {
        GPT* m = models[k];
        m->be->to_device(m->be, m->inputs, in, (size_t)B * T * 4);
        m->be->to_device(m->be, m->targets, tgt, (size_t)B * T * 4);
        gpt_zero_grads(m);
        gpt_forward(m, m->inputs, m->targets, B, T, 1.0f / (float)(B * T));
        gpt_accumulate_loss(m, B, T, 0);
        gpt_backward(m, m->inputs, B, T);
        float s;
        m->be->to_host(m->be, &s, m->scalars, sizeof s);
        losses[k] = s / ((double)B * T);
    }
    printf("#   loss cpu %.7f gpu %.7f\n", losses[0], losses[1]);
    CHECK_CLOSE(losses[1], losses[0], 0, 1e-5, "FP32 loss");
    float *gc = read_flat(&mc, mc.grads), *gg = read_flat(&mg, mg.grads);
    char name[64] = "";
    double e = worst_tensor_error(&mc, gg, gc, name, sizeof name);
    printf("#   worst gradient: %s rel err %.2e\n", name, e);
    CHECK(e <= 1e-5, "FP32 gradient of %s differs by %.3g relative", name, e);
    free(gc);
    free(gg);

    // The update (norm, clipping, AdamW) on both.
    float sc[2], sg[2];
    gpt_grad_norm_squared(&mc, 0, mc.layout.total);
    gpt_grad_norm_squared(&mg, 0, mg.layout.total);
    ref->to_host(ref, sc, mc.scalars, sizeof sc);
    gpu->to_host(gpu, sg, mg.scalars, sizeof sg);
    CHECK_CLOSE(sg[1], sc[1], 0, 1e-5, "FP32 squared gradient norm");
    double clip = grad_clip_scale(sqrt((double)sc[1]), 1.0);
    // eps 1e-6: the k part of qkvb has a zero true gradient (softmax ignores
    // a shift shared by all keys), so both backends hold rounding noise there
    // (~3e-11), which AdamW's g / (|g| + eps) would turn into different
    // updates of up to lr / 300 with eps 1e-8.
    gpt_update(&mc, 1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f, (float)clip, 1);
    gpt_update(&mg, 1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f, (float)clip, 1);
    // Parameters against the largest parameter of the model: per tensor, the
    // biases (zero before the step) would be compared with the step alone.
    float *pc = read_flat(&mc, mc.params), *pg = read_flat(&mg, mg.params);
    e = worst_tensor_error(&mc, pg, pc, name, sizeof name);
    double global = rel_error(pg, pc, mc.layout.total);
    printf("#   updated parameters: rel err %.2e (worst tensor on its own scale: %s %.2e)\n", global, name, e);
    CHECK(global <= 1e-5, "FP32 updated parameters differ by %.3g relative", global);
    free(pc);
    free(pg);
    free(in);
    free(tgt);
    gpt_free(&mc);
    gpt_free(&mg);
}

// One forward and backward of a fresh model (seed 5) on be with the LM head
// in `chunks` chunks: the mean loss, the gradients (host FP32) and the last
// row's logits as a sampler reads them.
static float* head_chunk_step(Backend* be, int chunks, int B, int T, double* loss, float* last_logits) {
    GPTConfig c = small_config(T);
    GPT m;
    gpt_create_chunked(&m, &c, be, B, T, 1, 0, 0, NULL, chunks);
    gpt_init_random(&m, 5);
    int32_t* in = (int32_t*)xmalloc((size_t)B * T * 4);
    int32_t* tgt = (int32_t*)xmalloc((size_t)B * T * 4);
    structured_batch(4243, in, tgt, B, T, c.vocab_size, 0);
    be->to_device(be, m.inputs, in, (size_t)B * T * 4);
    be->to_device(be, m.targets, tgt, (size_t)B * T * 4);
    gpt_zero_grads(&m);
    gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (float)(B * T));
    gpt_accumulate_loss(&m, B, T, 0);
    gpt_backward(&m, m.inputs, B, T);
    float s;
    be->to_host(be, &s, m.scalars, sizeof s);
    *loss = s / ((double)B * T);
    gpt_logits_row(&m, B * T - 1, last_logits);
    float* g = read_flat(&m, m.grads);
    free(in);
    free(tgt);
    gpt_free(&m);
    return g;
}

// The LM head in 1 and 3 chunks (B*T = 333 rows: 3 chunks of 128, the last
// 77) on the GPU against the CPU in one chunk: loss, every gradient and the
// sampled logits within the dtype's tolerance; and the two chunk counts
// against each other.
static void test_head_chunks_match_cpu(void) {
    int B = 9, T = 37;
    GPTConfig c = small_config(T);
    int Vp = c.padded_vocab_size;
    float* want_logits = (float*)xmalloc((size_t)Vp * sizeof(float));
    float* got_logits = (float*)xmalloc((size_t)Vp * sizeof(float));
    double want_loss, loss1, loss3;
    float* want = head_chunk_step(ref, 1, B, T, &want_loss, want_logits);
    float* g1 = head_chunk_step(gpu, 1, B, T, &loss1, got_logits);
    float* g3 = head_chunk_step(gpu, 3, B, T, &loss3, got_logits);
    GPT shape;  // the layout, for per-tensor errors
    gpt_create(&shape, &c, ref, 1, 1, 1, 0, 0);
    char name[64] = "";
    CHECK_CLOSE(loss3, want_loss, 0, tolerance(1), "loss, 3 chunks vs the CPU");
    CHECK_CLOSE(loss3, loss1, 0, tolerance(1), "loss, 3 chunks vs 1");
    double e = worst_tensor_error(&shape, g3, want, name, sizeof name);
    printf("#   3 chunks vs the CPU: worst gradient %s rel err %.2e\n", name, e);
    CHECK(e <= tolerance(1), "3 chunks: gradient of %s differs from the CPU's by %.3g", name, e);
    e = worst_tensor_error(&shape, g3, g1, name, sizeof name);
    printf("#   3 chunks vs 1: worst gradient %s rel err %.2e\n", name, e);
    CHECK(e <= tolerance(1), "3 chunks: gradient of %s differs from 1 chunk's by %.3g", name, e);
    EXPECT_CLOSE(got_logits, want_logits, (size_t)Vp, tolerance(1), "sampled logits of the last row");
    gpt_free(&shape);
    free(want);
    free(g1);
    free(g3);
    free(want_logits);
    free(got_logits);
}
static void test_head_chunks_match_cpu_fp32(void) { test_head_chunks_match_cpu(); }
static void test_head_chunks_match_cpu_bf16(void) { test_head_chunks_match_cpu(); }

// Loss curve of `steps` steps of a fresh model (seed 5) on backend be.
static double* train_curve(Backend* be, int steps, int B, int T, float** final_params, size_t* nparams) {
    GPTConfig c = small_config(T);
    GPT m;
    gpt_create(&m, &c, be, B, T, 1, 0, 0);
    gpt_init_random(&m, 5);
    int32_t* in = (int32_t*)xmalloc((size_t)B * T * 4);
    int32_t* tgt = (int32_t*)xmalloc((size_t)B * T * 4);
    double* losses = (double*)xmalloc(steps * sizeof(double));
    for (int s = 0; s < steps; s++) {
        structured_batch(4242, in, tgt, B, T, c.vocab_size, (uint64_t)s);
        losses[s] = gpu_train_step(&m, in, tgt, B, T, s, 1e-3f);
    }
    if (final_params) {
        *final_params = read_flat(&m, m.params);
        *nparams = m.layout.total;
    }
    free(in);
    free(tgt);
    gpt_free(&m);
    return losses;
}

static void test_bf16_training_follows_fp32_cpu(void) {
    int steps = small ? 30 : 50, B = small ? 2 : 8, T = small ? 32 : 64;
    double* cpu = train_curve(ref, steps, B, T, NULL, NULL);
    double* g16 = train_curve(gpu, steps, B, T, NULL, NULL);
    if (getenv("TEST_VERBOSE"))
        for (int s = 0; s < steps; s++) printf("#   step %d: cpu %.5f gpu %.5f\n", s, cpu[s], g16[s]);
    int at;
    double worst = largest_gap(g16, cpu, steps, &at);
    printf("#   %d steps: loss cpu fp32 %.4f -> %.4f, gpu bf16 %.4f -> %.4f, largest gap %.4f at step %d\n", steps,
           cpu[0], cpu[steps - 1], g16[0], g16[steps - 1], worst, at);
    CHECK(worst <= 0.03, "BF16 GPU loss departs from the FP32 CPU loss by %.4f at step %d", worst, at);
    CHECK(g16[steps - 1] < g16[0] - (small ? 0.3 : 1.0), "BF16 GPU training did not learn (%.4f -> %.4f)", g16[0],
          g16[steps - 1]);
    free(cpu);
    free(g16);
}

static void test_training_is_deterministic(void) {
    int steps = small ? 4 : 20, B = small ? 2 : 4, T = small ? 32 : 64;
    float *p1, *p2;
    size_t n1, n2;
    double* a = train_curve(gpu, steps, B, T, &p1, &n1);
    double* b = train_curve(gpu, steps, B, T, &p2, &n2);
    CHECK(same_bits(a, b, steps * sizeof(double)), "two %s runs from one seed gave different losses",
          dtype_name(gdt()));
    CHECK(n1 == n2 && same_bits(p1, p2, n1 * sizeof(float)), "two %s runs from one seed gave different weights",
          dtype_name(gdt()));
    free(a);
    free(b);
    free(p1);
    free(p2);
}

// Gradients of one micro-batch under every recompute policy: recompute
// reruns the same kernels on the same inputs (ops.h requires the fused
// residual+layernorm to match its unfused form bit for bit), and a layer
// that recomputes its GELU output runs the unfused GEMM and GELU in forward
// too. Policies whose layers agree on that (the GELU key) give the same
// bits; across keys the fused epilogue's GELU differs in rounding only.
static void test_recompute_policies_bitwise(void) {
    int B = 2, T = small ? 32 : 64;
    GPTConfig c = small_config(T);
    c.num_layers = 3;
    struct { RecomputeMode mode; int full; } policies[] = {
        {RECOMPUTE_NONE, 0}, {RECOMPUTE_SELECTIVE, 0}, {RECOMPUTE_FULL, 0}, {RECOMPUTE_NONE, 1},
        {RECOMPUTE_SELECTIVE, 2}, {RECOMPUTE_SELECTIVE, 1}, {RECOMPUTE_SELECTIVE, 0}};
    enum { NP = sizeof policies / sizeof policies[0] };
    int32_t* in = (int32_t*)xmalloc((size_t)B * T * 4);
    int32_t* tgt = (int32_t*)xmalloc((size_t)B * T * 4);
    structured_batch(4242, in, tgt, B, T, c.vocab_size, 7);
    float* grads[NP] = {0};
    int key[NP];  // bit l: layer l recomputes its GELU output from fch (selective)
    size_t n = 0;
    for (int i = 0; i < NP; i++) {
        RecomputePolicy p = recompute_policy(policies[i].mode, policies[i].full, c.num_layers);
        key[i] = 0;
        for (int l = 0; l < c.num_layers; l++)
            if (recompute_layer_mode(&p, l) == RECOMPUTE_SELECTIVE) key[i] |= 1 << l;
        GPT m;
        gpt_create_recompute(&m, &c, gpu, B, T, 1, 0, 0, &p);
        gpt_init_random(&m, 11);
        gpu->to_device(gpu, m.inputs, in, (size_t)B * T * 4);
        gpu->to_device(gpu, m.targets, tgt, (size_t)B * T * 4);
        gpt_zero_grads(&m);
        CudaEpilogueCounts before, after;
        cuda_epilogue_counts(gpu, &before);
        gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (float)(B * T));
        gpt_backward(&m, m.inputs, B, T);
        cuda_epilogue_counts(gpu, &after);
        grads[i] = read_flat(&m, m.grads);
        n = m.layout.total;
        char desc[96];
        recompute_policy_describe(&p, c.num_layers, desc, sizeof desc);
        // The fused GELU runs once per kept layer, twice per full one (its
        // forward re-runs in backward), never in a selective one: the
        // harness fuses every GEMM it can, a GPU where it has an algorithm.
        long want = 0, fused = after.fused[0] - before.fused[0], all = fused + after.fallback[0] - before.fallback[0];
        for (int l = 0; l < c.num_layers; l++) {
            RecomputeMode lm = recompute_layer_mode(&p, l);
            want += lm == RECOMPUTE_NONE ? 1 : lm == RECOMPUTE_FULL ? 2 : 0;
        }
#ifdef CUDA_SIM
        CHECK(fused == want && all == want, "recompute %s: %ld fused GELU GEMMs of %ld, expected %ld", desc, fused, all, want);
#else
        CHECK(all == want, "recompute %s: %ld GEMMs with a GELU, expected %ld", desc, all, want);
#endif
        for (int j = 0; j < i; j++) {
            if (key[j] == key[i]) {
                CHECK(same_bits(grads[j], grads[i], n * sizeof(float)), "%s gradients under recompute %s differ from "
                      "policy %d's, which treats the GELU the same way", dtype_name(gdt()), desc, j);
                break;
            }
            if (j == 0) {  // another GELU key: the gradients agree to the dtype's rounding
                double e = rel_error(grads[i], grads[0], n);
                printf("#   recompute %-30s %s vs none: rel err %.2e\n", desc, dtype_name(gdt()), e);
                CHECK(e <= tolerance(1), "%s gradients under recompute %s are %.3g from none's", dtype_name(gdt()), desc, e);
            }
        }
        gpt_free(&m);
    }
    for (int i = 0; i < NP; i++) free(grads[i]);
    free(in);
    free(tgt);
}

static void test_recompute_policies_bitwise_fp32(void) { test_recompute_policies_bitwise(); }
static void test_recompute_policies_bitwise_bf16(void) { test_recompute_policies_bitwise(); }

// A 1-layer model at T = 131072 on one GPU: attention memory is linear in T.
static void test_long_context_step(void) {
    int T = 131072;
    GPTConfig c;
    memset(&c, 0, sizeof c);  // GPT-2 (arch 0), the Llama fields unset
    c.max_seq_len = T;
    c.vocab_size = 512;
    c.num_layers = 1;
    c.num_heads = 2;
    c.channels = 128;
    gpt_config_finish(&c);
    GPT m;
    gpt_create(&m, &c, gpu, 1, T, 1, 0, 0);
    gpt_init_random(&m, 5);
    int32_t* in = (int32_t*)xmalloc((size_t)T * 4);
    int32_t* tgt = (int32_t*)xmalloc((size_t)T * 4);
    structured_batch(4242, in, tgt, 1, T, c.vocab_size, 0);
    double loss = gpu_train_step(&m, in, tgt, 1, T, 0, 1e-3f);
    printf("#   T=%d: loss %.4f, peak %.1f MiB on the GPU\n", T, loss, gpu->peak_allocated_bytes(gpu) / 1048576.0);
    CHECK(isfinite(loss) && loss > 0, "the T=%d step gave loss %g", T, loss);
    free(in);
    free(tgt);
    gpt_free(&m);
}

#define RUN_AS(dt, fn)                                                  \
    do {                                                                \
        gpu = cuda_backend_create(dt);                                  \
        RUN(fn);                                                        \
        gpu->destroy(gpu);                                              \
    } while (0)

static void test_training_is_deterministic_fp32(void) { test_training_is_deterministic(); }
static void test_training_is_deterministic_bf16(void) { test_training_is_deterministic(); }

int main(void) {
    small = test_small();
    ref = cpu_backend_create(DTYPE_F32, 0);
    RUN_AS(DTYPE_F32, test_fp32_step_matches_cpu);
    RUN_AS(DTYPE_BF16, test_bf16_training_follows_fp32_cpu);
    RUN_AS(DTYPE_F32, test_training_is_deterministic_fp32);
    RUN_AS(DTYPE_BF16, test_training_is_deterministic_bf16);
    RUN_AS(DTYPE_F32, test_recompute_policies_bitwise_fp32);
    RUN_AS(DTYPE_BF16, test_recompute_policies_bitwise_bf16);
    RUN_AS(DTYPE_F32, test_head_chunks_match_cpu_fp32);
    RUN_AS(DTYPE_BF16, test_head_chunks_match_cpu_bf16);
    if (!small) RUN_AS(DTYPE_BF16, test_long_context_step);
    ref->destroy(ref);
    return TESTS_DONE();
}
