// cost.h: the planner's time model of one optimizer step per GPU: compute
// (GEMMs at the rate of the precision they run in, attention in BF16, the
// memory-bound kernels by the bytes they move, op by op), communication
// (bytes and busy time per collective kind and link) and the part of the
// communication the schedule leaves exposed. Arithmetic on shapes only, like
// the memory bill (planner.h); the assumptions are the PLAN_*_EFF constants
// below and llm/plan/README.md ("The step-time model") says where each
// figure comes from.
#pragma once

#include <stdio.h>

#include "llm/plan/planner.h"

EXTERN_C_BEGIN

// Bandwidths of one GPU type, bytes/s: HBM; NVLink per GPU and direction;
// the network per GPU and direction (a node's EFA divided by its 8 GPUs).
typedef struct {
    double hbm, nvlink, network;
} PlanLinks;

// The table's figures for a planned device (by its name: H100, H200, B200,
// A100; zeros otherwise), then the environment's overrides in GB/s:
// TRAIN_GPT_PLAN_HBM_GBS, TRAIN_GPT_PLAN_NVLINK_GBS, TRAIN_GPT_PLAN_NET_GBS.
// A malformed or non-positive override is fatal, naming the variable.
PlanLinks plan_links_of(const PlanDevice* dev);

// Fractions of the peaks that the kernels are assumed to reach.
#define PLAN_GEMM_EFF 0.65    // dense BF16 GEMMs, of the BF16 peak (TF32: of half of it)
#define PLAN_GEMM_EFF_FP8 0.50  // FP8 GEMMs, of the FP8 peak: their scaling and epilogues reach less of it
#define PLAN_ATTN_EFF 0.45    // flash attention forward + backward, of the BF16 peak
#define PLAN_HBM_EFF 0.80     // memory-bound kernels, of the HBM bandwidth
#define PLAN_LINK_EFF 0.80    // collectives' bus bandwidth, of the link's

// The memory-bound ops of one micro-step (forward, backward and recompute)
// or of the optimizer step (AdamW, gradient accumulation into a shard).
typedef enum {
    MB_NORMS,      // LayerNorm / RMSNorm forward and backward (2 per layer + the final)
    MB_ACT,        // GELU or SwiGLU forward and backward
    MB_RESIDUAL,   // the residual adds (2 per layer)
    MB_BIAS_GRAD,  // GPT-2: the bias gradients' column sums
    MB_ROPE,       // Llama: RoPE on q and k, forward and backward
    MB_EMBED,      // the embedding lookup and its scatter-add backward
    MB_LOSS,       // softmax + cross-entropy + the logits' gradient, 3 passes over the logits
    MB_CASTS,      // FP8: the GEMM inputs and output gradients, and the weights, cast to E4M3
    MB_RECOMPUTE,  // the forward memory-bound ops recompute re-runs
    MB_GRAD_ACCUM, // ZeRO-2/3: the shard's accumulation of each micro-step's gradient; FP32 gradients: the scratch's add
    MB_ADAMW,      // the optimizer over this rank's shard: params, grads, master, m, v
    NUM_MB_OPS
} MemOp;
const char* mem_op_name(MemOp op);

typedef enum { COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_REDUCE, NUM_COLL } CollKind;
typedef enum { LINK_NVLINK, LINK_NETWORK, NUM_LINKS } LinkKind;
const char* coll_name(CollKind k);
const char* link_name(LinkKind k);

typedef struct {
    PlanLinks links;
    int accum;                     // micro-steps per optimizer step
    // Compute per micro-step (seconds) and its FLOPs.
    double gemm_flops_bf16, gemm_flops_fp8;  // per micro-step, recompute included (FP32 runs: in bf16)
    double attn_flops;             // per micro-step, causal (half of the model FLOPs' 12 L h s), recompute included
    double t_gemm, t_attn;
    double mem_bytes[NUM_MB_OPS];  // per step (micro-step ops x accum; the optimizer's once)
    double t_mem;                  // per step, all memory-bound ops
    double t_micro;                // compute of one micro-step: GEMMs + attention + its memory-bound ops
    double t_optimizer;            // AdamW (+ gradient accumulation) once per step
    // Communication per step: bytes each GPU sends and the busy time, per kind and link.
    double comm_bytes[NUM_COLL][NUM_LINKS];
    double comm_time[NUM_COLL][NUM_LINKS];
    double exposed;                // seconds the compute waits on communication per step
    double step;                   // accum x t_micro + t_optimizer + exposed
    double tokens_per_s_gpu;       // accum x B x T / step
    double mfu;                    // tokens_per_s_gpu x 6N + 12 L h s over the dense peak of the precision
} PlanCost;

// The time model of pc's step with `accum` micro-steps (>= 1) per optimizer step.
// The schedule it prices:
// - ZeRO-3 gathers unit i+K (K = --zero3-prefetch) while unit i computes;
//   each micro-step gathers the 2 non-layer units once and 2L - 2(K+1) layers
//   (the K+1 layers the forward ends with start the backward, the K+1 the
//   backward ends with start the next forward). Gathers and reduce-scatters
//   share the shard group's link.
// - Reduce-scatters (ZeRO-2/3 every micro-step, ZeRO-1 on the last) and ZeRO-0's
//   all-reduce run unit by unit under the backward; the cross-replica
//   all-reduce of the shard (hybrid / shard groups) under the last
//   micro-step's backward, on the network.
// - ZeRO-1/2's post-step parameter all-gather under the next forward.
// Each overlapped stream exposes what exceeds the compute it hides under,
// plus its last unit (nothing computes after it). Step time is their sum:
// accum x micro-step compute + optimizer + exposed communication.
PlanCost plan_cost(const PlanConfig* pc, const PlanDevice* dev, int accum);

// The memory-bound bytes of k, one row per op (name, GB per step, ms at
// PLAN_HBM_EFF of the HBM), then "= total": --plan's table and bench_gpu's.
void plan_cost_print_bytes(FILE* f, const PlanCost* k);

// Micro-steps per optimizer step: batch_tokens / (B T world) when batch_tokens
// > 0 (rounded up), else 1.
int plan_accum(const PlanConfig* pc, long batch_tokens);

EXTERN_C_END
