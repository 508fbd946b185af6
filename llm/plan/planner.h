// planner.h: the memory bill of a training run, per device, and the
// configuration the planner recommends for a device and a world size.
//
// The bill is arithmetic on the same functions the allocator uses:
// gpt_state_bytes for parameters, gradients, master weights and AdamW
// moments, act_layout_build for the activation arena, the CPU attention's own
// scratch formula. So on the CPU backend the planned bytes equal the backend's
// peak allocated bytes exactly (tests/test_planner.c checks it). On a GPU the
// bill adds what no allocator call shows: a reserve for the CUDA context,
// library and NCCL buffers, and fragmentation.
//
// FP8 (llm/fp8/fp8.h; fp8_state_bytes, the function the FP8 state allocates
// with): per transformer block an FP8 copy of its 4 GEMM weights, and on
// Hopper of their transposes (its FP8 GEMMs take only the TN layout), for
// every layer at ZeRO 0-2 and for the two layers in flight at ZeRO-3; per
// linear layer three scaled tensors (input, weight, output gradient), each
// with an FP32 amax, scale and inverse, and with delayed scaling an amax
// history; 2 (B, T, 4C) FP8 buffers for casting one GEMM's operands (3 on
// Hopper). The activations themselves stay 16-bit: backward casts the kept
// GEMM inputs again rather than storing FP8 copies (see llm/fp8/fp8.h). On the
// CPU, FP8 is FP32 storage with emulated FP8 GEMMs, whose FP32 copies of the
// operands are workspace.
#pragma once

#include "llm/model/model.h"

EXTERN_C_BEGIN

typedef enum { PREC_FP32 = 0, PREC_BF16 = 1, PREC_FP8 = 2 } Precision;
const char* precision_name(Precision p);
// Parameters from which FP8 is the default on GPUs that have it: the "7B"
// class (GPT-3's 6.7B shape counts as 7B); BF16 below. The one rule for
// --plan, --auto and --precision auto (precision_for_model).
#define PLAN_FP8_FROM_PARAMS 6.5e9

// The device a plan is for.
typedef struct {
    char name[48];        // "B200", "cpu", "GPU"
    int is_gpu;
    double memory;        // bytes per device available to the run
    double peak_bf16;     // dense FLOP/s, 0 when unknown
    double peak_fp8;      // dense FLOP/s, 0 when the GPU has no FP8 (or unknown)
    Fp8Support fp8_support;  // what its FP8 GEMMs take (decides the transposed weight copies)
    int cpu_threads;      // CPU: threads the attention scratch is sized for
} PlanDevice;

// A known GPU by its --gpu name (h100, h200, b200, a100; case-insensitive).
// Memory is the total cudaMemGetInfo/nvidia-smi report. Returns 0 if unknown.
int plan_device_gpu(PlanDevice* d, const char* name);
// The CPU backend with `memory` bytes and `threads` threads.
PlanDevice plan_device_cpu(double memory, int threads);
// Peak FLOP/s for a GPU whose name contains H100, H200, B200 or A100 (e.g.
// from cudaGetDeviceProperties); leaves them 0 otherwise.
void plan_device_set_peaks_from_name(PlanDevice* d, const char* device_name);

// One training configuration, per rank.
typedef struct {
    GPTConfig model;
    Precision precision;
    int B, T;                 // micro-batch and sequence length
    RecomputePolicy recompute;
    int head_chunks;          // LM head row chunks; 0: plan_head_chunks(model, B, T)
    int zero_stage;           // 0..3
    int zero3_prefetch;       // ZeRO-3: units gathered ahead (1 or 2; 0 counts as 1): K + 1 parameter layer slots
    int world;                // data-parallel ranks
    int ranks_per_node;
    int hybrid;               // shard inside a node, replicate across nodes
    int shard_group;          // > 0: shard over groups of this many ranks (--shard-group), whatever hybrid says
    int fp8_history;          // FP8: amax history length (delayed scaling), 0 for current scaling
    int fp8_recipe;           // FP8: an Fp8Recipe; a block-scaled one keeps no FP8 weights or casts (0: per tensor)
    const uint8_t* fp8_skip;  // FP8: --fp8-skip per layer (llm/fp8/fp8.h), or NULL
    DType adam_dtype;         // AdamW's moments (--adam-dtype): DTYPE_F32 (0) or DTYPE_BF16, half the bytes
    int grad_bf16;            // 0: FP32 gradients (behind a BF16 scratch in 16-bit runs: auto's choice when
                              // a step accumulates or has ranks); 1: BF16 in 16-bit runs (auto where FP32 ones
                              // fit no plan); 2: --grad-dtype bf16 (emulated in FP32 runs: FP32 storage + scratch)
} PlanConfig;

// The ranks the ZeRO shards are spread over.
int plan_shard_world(const PlanConfig* pc);
// Layer slots in ZeRO-3's parameter staging: one more than the units prefetched.
int plan_param_layer_slots(const PlanConfig* pc);

typedef struct {
    StateBytes state;         // gpt_state_bytes: params, grads, master, adam
    size_t fp8_weights;       // FP8 weight copies and transposes
    size_t fp8_scaling;       // amaxes, scales, amax histories
    ActLayout acts;           // the arena (16/32-bit)
    size_t activations;       // arena bytes, plus the FP8 cast buffers
    size_t tokens;            // inputs, targets (int32) and the 4 scalars
    size_t workspace;         // CPU: attention scratch; GPU: cuBLASLt workspace + plan_gpu_op_scratch + the norm ticket
    size_t allocated;         // the sum of the above: the backend's peak
    size_t reserve;           // GPU: runtime (1 GiB) + 5% of allocated; CPU: 0
    size_t total;             // allocated + reserve
} MemoryBill;

#define PLAN_CUBLASLT_WORKSPACE ((size_t)32 << 20)
// The CUDA layernorm backward's completion counter (one unsigned, kernels/cuda/backend.cu).
#define PLAN_CUDA_NORM_TICKET sizeof(unsigned)
#define PLAN_GPU_RUNTIME_RESERVE ((size_t)1 << 30)
#define PLAN_FRAGMENTATION_PERCENT 5

// A plan for a GPU leaves this share of its memory unplanned, beyond the
// reserve: allocator growth, NCCL's buffers on more peers, a longer batch of
// the data than the average, a library update; a plan at 98% is a plan to
// run out of memory.
#define PLAN_GPU_HEADROOM_PERCENT 10

// The largest SM count a GPU the plan is for may have (B200: 148), for the
// layernorm backward's partials (2 blocks per SM).
#define PLAN_GPU_MAX_SMS 160

// The CUDA backend's op scratch (kernels/cuda/backend.cu cuda_reserve_scratch),
// bounded without a GPU: the largest of the cuDNN attention backward's D plus
// its workspace (what cuDNN's engines may ask, the deterministic backward's
// B*NH*T*T*2-byte dP at long sequences, capped by the workspace limit that
// the backend enforces: kernels/cudnn_workspace.h; cuDNN reports the exact
// size only at start-up), the layernorm backward's partials, the bias
// gradients' partials and the encoder backward's sort keys.
size_t plan_gpu_op_scratch(const GPTConfig* c, int B, int T);

// The LM head's chunk count for micro-batch (B, T) when --head-chunks is 0:
// the fewest chunks whose logits take no more than the MLP's backward
// scratch (B, T, 4C), but no chunk under PLAN_HEAD_MIN_ROWS rows (a smaller
// GEMM would leave a GPU idle). GPT-2 124M at 4 x 1024: 4 chunks of 1024
// rows, 103 MB of BF16 logits instead of 412 MB.
#define PLAN_HEAD_MIN_ROWS 1024
int plan_head_chunks(const GPTConfig* c, int B, int T);
// pc->head_chunks, or plan_head_chunks when it is 0.
int plan_resolved_head_chunks(const PlanConfig* pc);

MemoryBill plan_bill(const PlanConfig* pc, const PlanDevice* dev);
// Whether the bill's total fits in plan_usable_memory.
int plan_fits(const MemoryBill* b, const PlanDevice* dev);
// The memory a plan may use: all of the CPU's; a GPU's less the headroom.
double plan_usable_memory(const PlanDevice* dev);

// Throughput estimate from FLOPs per token and an assumed utilization.
#define PLAN_ASSUMED_MFU 0.40
typedef struct {
    double model_flops;       // per token: 6 N + 12 L h s (N without the position embedding)
    double recompute_flops;   // per token: forward GEMMs and attention re-run by full recompute
    double peak;              // dense FLOP/s per GPU for the precision (0: unknown)
    double tokens_per_s_gpu;  // PLAN_ASSUMED_MFU * peak / model_flops, less the recompute share
    double tokens_per_s;      // all ranks
    double gpu_hours_per_billion;
    double hours_per_billion; // wall-clock on `world` GPUs
} PlanSpeed;
PlanSpeed plan_speed(const PlanConfig* pc, const PlanDevice* dev);

// Which parts of the request the planner must keep (explicit flags).
typedef struct {
    int precision, micro_batch, recompute, zero_stage, hybrid;  // hybrid: --shard-scope or --shard-group
    long batch_tokens;  // > 0: micro-batches must divide it per rank
    int grad_dtype;     // --grad-dtype fp32 or bf16 (else auto: fp32 gradients where a plan fits with them, else bf16)
} PlanFixed;

// Micro-batch limits when --batch-tokens does not bound it.
#define PLAN_MAX_MICRO_BATCH 1024
#define PLAN_MAX_MICRO_BATCH_TOKENS (1L << 20)
// The longest sequence train_gpt supports.
#define PLAN_MAX_SEQ_LEN 131072

typedef struct {
    int fits;
    PlanConfig config;        // the recommendation, or when nothing fits the least memory the fixed choices allow
    MemoryBill bill;
    PlanSpeed speed;
    // When nothing fits: what would, each 0 (or -1) when it does not help.
    // fits_with_*: at micro-batch 1, full recompute, the least-memory ZeRO stage
    int fits_with_world;      // fewest ranks
    int fits_with_seq_len;    // longest sequence (a halving of T) at this world size
    int fits_when_unfixed;    // dropping the explicit choices would fit
    PlanConfig unfixed;       // ... with this configuration
} PlanResult;

// The default precision for a model of `params` parameters: fp32 on the CPU
// (it computes in FP32); on GPUs BF16, or FP8 from PLAN_FP8_FROM_PARAMS
// where the GPU has FP8 tensor cores.
Precision precision_for_model(double params, int is_gpu, int gpu_has_fp8);
// The same for a model on a planned device.
Precision plan_default_precision(const GPTConfig* c, const PlanDevice* dev);

// Searches, in this order, the ZeRO stage that communicates least and of
// those the one with the least memory (1, then 0 on more than one rank of
// the shard group; then 2 and 3; hybrid sharding first when the world spans
// nodes), then the cheapest recompute at micro-batch 1
// (none, selective, selective + full for the fewest layers, full), then the
// largest micro-batch at that stage and policy. Knobs in `fixed` keep the
// request's value.
PlanResult plan_recommend(const PlanConfig* request, const PlanFixed* fixed, const PlanDevice* dev);

// The largest micro-batch that fits at the config's other settings (0: none).
int plan_max_micro_batch(const PlanConfig* pc, const PlanFixed* fixed, const PlanDevice* dev);

// The configuration, device and bill of a model as created (its dtype,
// arena, recompute policy, ZeRO stage and world) on its backend: what the
// trainer prints at start and compares with the backend's peak bytes.
PlanConfig plan_config_of_model(const GPT* m);
PlanDevice plan_device_of_backend(const Backend* be);
MemoryBill plan_bill_of_model(const GPT* m);

EXTERN_C_END
