// model.h: the model as the rest of the program sees it, whatever its
// architecture: creation for a micro-batch shape, a ZeRO stage and a
// recompute policy; initialisation and host access to the parameters; the
// forward and backward passes; the loss; the AdamW update over the flat
// buffers. The model core (llm/model/) implements it once; an architecture
// (llm/arch/) only defines its block (llm/model/block.h).
//
// Shapes and placement: llm/model/config.h (GPTConfig) and layout.h (the flat
// parameter layout, units, the activation arena).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "llm/fp8/fp8.h"
#include "llm/model/config.h"
#include "llm/model/layout.h"
#include "llm/recompute.h"

EXTERN_C_BEGIN

typedef struct GPT GPT;

// Where a unit's parameters and gradients live during forward and backward.
// Without hooks they are slices of m->params and m->grads. ZeRO stages 2 and
// 3 install hooks that gather a unit's parameters before use, give it a
// gradient buffer, and reduce-scatter that buffer when the unit's backward is
// done. Units are used in this order: forward 0, 1..L, L+1, 0 (the LM head,
// whose backward runs inside the forward pass when training: it asks
// unit_grads of units 0 and L+1 there); backward L+1, L..1, 0 (the
// embeddings). A fully recomputed
// layer re-runs its forward inside its backward with the parameters that
// unit_params(u, backward = 1) returned: recompute adds no hook calls.
typedef struct {
    void* ctx;
    // Base of unit u's full parameters, ready for compute.
    void* (*unit_params)(void* ctx, GPT* m, int u, int backward);
    // Base of the buffer unit u's gradients accumulate into (+=).
    void* (*unit_grads)(void* ctx, GPT* m, int u);
    // Unit u's gradients of this micro-batch are complete.
    void (*unit_backward_done)(void* ctx, GPT* m, int u);
    // Unit u's parameters are not needed again in this forward/backward.
    void (*unit_release)(void* ctx, GPT* m, int u, int backward);
} GPTHooks;

struct GPT {
    GPTConfig config;
    ParamLayout layout;
    Backend* be;
    DType dtype;          // parameters, gradients, activations
    size_t num_params;    // unpadded count

    void* params;         // (params_size) dtype: the flat parameters, or (ZeRO-3) shard + staging
    void* grads;          // (grads_size) grad_dtype: the flat gradients, or (ZeRO-2/3) shard + staging
    // --grad-dtype (gpt_set_grad_dtype): grad_dtype is what grads hold, what the
    // collectives sum and AdamW reads: dtype, or FP32 in a BF16 run. When they
    // differ, or grad_round_bf16 emulates a BF16 accumulator on an FP32 run,
    // each micro-step's unit gradients go first to grad_scratch (dtype;
    // E + F + 2*Lmax elements, slots as gpt_staging's) and ZeRO's hooks add them
    // into grads (Backend.accumulate_f32) when the unit's backward is done.
    DType grad_dtype;
    int grad_round_bf16;
    void* grad_scratch;
    // Data parallelism. With zero_stage 0 every rank holds the whole
    // optimizer state; from stage 1 on, rank r holds chunk r of every unit,
    // concatenated in unit order (opt_size = total / world elements): its
    // shard. Stage 2 keeps only the gradient shard, stage 3 also only the
    // parameter shard; such a buffer is the shard followed by full-unit
    // staging (gpt_staging) that the ZeRO hooks (llm/parallel/zero.c) fill and reuse.
    int world, rank, zero_stage;
    int param_layer_slots; // ZeRO-3: layer slots in the parameters' staging (2, or 3 to prefetch 2 ahead)
    size_t params_size;   // elements of params
    size_t grads_size;    // elements of grads
    size_t opt_size;      // elements of master / adam_m / adam_v on this rank
    float* master;        // (opt_size) FP32 master weights; NULL when dtype is FP32
    void* adam_m;         // (opt_size) adam_dtype: AdamW's first moment
    void* adam_v;         // (opt_size) adam_dtype: AdamW's second moment
    DType adam_dtype;     // DTYPE_F32 or DTYPE_BF16 (gpt_create_full's, --adam-dtype; the other creates: FP32)

    int B, T;             // the micro-batch the arena was sized for
    ActLayout acts;       // includes the recompute policy
    void* arena;          // activations
    int32_t* inputs;      // (B, T) on the backend
    int32_t* targets;     // (B, T) on the backend
    float* scalars;       // [0] loss sum, [1] grad norm^2 (backend memory)
    int adam_step;        // completed optimizer steps
    const GPTHooks* hooks;  // NULL: parameters and gradients are the flat buffers
    Fp8State* fp8;          // FP8 training (gpt_enable_fp8), or NULL
    float* rope_freqs;      // architectures with RoPE: (T, HS/2, 2) FP32 cos and sin (rope_table), backend memory
};

// Allocates parameters, gradients, optimizer state and activations for
// micro-batches up to (B, T) on rank `rank` of `world` at a ZeRO stage.
// Parameters are left zero.
void gpt_create(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage);
// The same with a recompute policy for the activations (NULL: none).
void gpt_create_recompute(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank,
                          int zero_stage, const RecomputePolicy* recompute);
// The same with `param_layer_slots` layer slots in ZeRO-3's parameter
// staging (GPT_GRAD_LAYER_SLOTS to GPT_MAX_LAYER_SLOTS; one more than the
// layers ZeRO-3 prefetches ahead, see llm/parallel/zero.h).
void gpt_create_staged(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage,
                       const RecomputePolicy* recompute, int param_layer_slots);
// The same as gpt_create_recompute with the LM head run in `head_chunks`
// chunks of rows (>= 1; see act_layout_build_chunked): only one chunk of
// logits is ever allocated.
void gpt_create_chunked(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank,
                        int zero_stage, const RecomputePolicy* recompute, int head_chunks);
// All of the above: ZeRO-3's layer slots and the LM head's chunks; and
// AdamW's moments stored as adam_dtype (DTYPE_F32, or DTYPE_BF16: --adam-dtype).
void gpt_create_full(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage,
                     const RecomputePolicy* recompute, int param_layer_slots, int head_chunks, DType adam_dtype);
void gpt_free(GPT* m);

// Model-state bytes per rank for `world` ranks sharing the shards at a ZeRO
// stage, without allocating (gpt_create allocates exactly these). With
// es = bytes of dtype, N = the padded flat size for `world`, S = N / world,
// E, F = the sizes of the first (embeddings) and last (final norm) units and
// Lmax = the largest layer unit:
//   stage 0: params N*es, grads N*es, master N*4 (16-bit dtypes), adam 2*N*4 (FP32 moments; BF16: half)
//   stage 1: params N*es, grads N*es, master S*4, adam 2*S*4
//   stage 2: params N*es, grads (S + E + F + 2*Lmax)*es, master S*4, adam 2*S*4
//   stage 3: params (S + E + F + P*Lmax)*es, grads (S + E + F + 2*Lmax)*es, master S*4, adam 2*S*4
// The staging holds the embeddings' and final unit's full units for the step
// and layer units: two for gradients (one accumulating while the other is
// reduced), P = param_layer_slots for parameters (2 by default: one in use
// while the next is gathered).
typedef struct {
    size_t params, grads, master, adam;  // adam: both moments
} StateBytes;
StateBytes gpt_state_bytes(const GPTConfig* c, DType dtype, int world, int zero_stage);
StateBytes gpt_state_bytes_staged(const GPTConfig* c, DType dtype, int world, int zero_stage, int param_layer_slots);
// The same with AdamW's moments in adam_dtype (--adam-dtype) and gradients
// accumulated as grad_want (--grad-dtype, as gpt_set_grad_dtype: FP32 behind a
// scratch in dtype, or dtype itself); _staged is this with FP32 moments and
// grad_want = dtype.
StateBytes gpt_state_bytes_full(const GPTConfig* c, DType dtype, int world, int zero_stage, int param_layer_slots,
                                DType adam_dtype, DType grad_want);
// Bytes of the architecture's own tables at sequence length T (a RoPE
// table), which gpt_create allocates beside the state and the arena.
size_t gpt_arch_state_bytes(const GPTConfig* c, int T);

// Full-unit staging after the shard in a sharded buffer (ZeRO-2 gradients,
// ZeRO-3 parameters): the embeddings unit, the final unit, then layer slots
// (STAGING_LAYER_A + i: GPT_GRAD_LAYER_SLOTS of them for gradients,
// m->param_layer_slots for parameters).
typedef enum { STAGING_EMBED, STAGING_FINAL, STAGING_LAYER_A, STAGING_LAYER_B } StagingSlot;
#define GPT_GRAD_LAYER_SLOTS 2
#define GPT_MAX_LAYER_SLOTS 3
#define NUM_STAGING (STAGING_LAYER_A + GPT_MAX_LAYER_SLOTS)
void* gpt_staging(const GPT* m, void* sharded, StagingSlot slot);
// A slot of m->grad_scratch (gradient slots: embeddings, final, two layers).
void* gpt_grad_scratch(const GPT* m, StagingSlot slot);

// --grad-dtype: the dtype gradients are accumulated in across micro-steps
// and summed in across ranks. `want` = m->dtype: the backward kernels
// accumulate straight into m->grads (the default of gpt_create); FP32 in a
// BF16 run: FP32 gradients behind a BF16 scratch; BF16 in an FP32 run: FP32
// storage rounded to BF16 at every add (an emulation, for the CPU reference).
// Call before the ZeRO hooks are installed; reallocates m->grads (zeroed).
void gpt_set_grad_dtype(GPT* m, DType want);
// *out (+)= the squared L2 norm of n gradients (m->grad_dtype) at x.
void gpt_grad_sum_squares(GPT* m, float* out, const void* x, size_t n, int accumulate);
// Whether m->grads / m->params hold only this rank's shard (plus staging).
static inline int gpt_grads_sharded(const GPT* m) { return m->zero_stage >= 2; }
static inline int gpt_params_sharded(const GPT* m) { return m->zero_stage >= 3; }

// The flat range [*lo, *lo + return value) of unit u whose optimizer state
// this rank holds, and where it starts in master / adam_m / adam_v.
size_t gpt_owned_piece(const GPT* m, int u, size_t* lo, size_t* state_offset);

// Initialisation: N(0, 0.02) weights, residual projections (attention and
// MLP outputs) scaled by 1/sqrt(2L), norm weights 1, biases 0, padded
// vocabulary rows 0 (GPT-2's, which Llama 3 shares here). Every value is a
// function of (seed, tensor kind, layer, index) only.
void gpt_init_random(GPT* m, uint64_t seed);

// Copies FP32 host values in the flat layout into the model (params and
// master; with ZeRO-3 only this rank's owned pieces are read).
void gpt_set_params_f32(GPT* m, const float* host_flat);
// Reads the model's parameters as FP32 (from master when it exists) in the
// flat layout. With ZeRO-3 only the owned pieces are written (zero.h's
// zero_gather_params_f32 assembles the whole model from every rank).
void gpt_get_params_f32(const GPT* m, float* host_flat);
// n FP32 host values into a device buffer of dtype dt (FP32 or BF16), and
// back: rounded (to nearest even) or widened on the host in bounded pieces,
// so loading and saving a model allocates nothing on the device.
void gpt_upload_f32_as(Backend* be, void* dst, DType dt, const float* src, size_t n);
void gpt_download_as_f32(Backend* be, float* dst, const void* src, DType dt, size_t n);

// Forward over inputs (B, T) already on the backend. With targets, computes
// per-token losses; returns nothing (read the loss via gpt_accumulate_loss).
// If dloss != 0 it also runs the LM head's backward, chunk by chunk (head.c):
// the head weight's gradient is added here, and gpt_backward continues from
// the final norm's output gradient it leaves behind.
void gpt_forward(GPT* m, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss);
// Row `row` of the last forward's logits (Vp values) as float32 on the host,
// computed from the final norm's output: what sampling and generation read.
// The head weight comes through the hooks: under ZeRO every rank calls it.
void gpt_logits_row(GPT* m, int row, float* out);
// Backward of the last forward (which must have had dloss != 0); gradients += .
void gpt_backward(GPT* m, const int32_t* inputs, int B, int T);
void gpt_zero_grads(GPT* m);
// Adds the sum of the last forward's per-token losses into scalars[0] (or sets it).
void gpt_accumulate_loss(GPT* m, int B, int T, int accumulate);
// Squared L2 norm of m->grads over the element range [lo, hi) into scalars[1].
void gpt_grad_norm_squared(GPT* m, size_t lo, size_t hi);

// One AdamW step over the pieces whose optimizer state this rank holds,
// reading the reduced gradients of those pieces. Weight decay applies to the
// 2-D tensors only.
void gpt_update(GPT* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                float grad_scale, uint64_t seed);

// FP8 training (llm/fp8/fp8.h): allocates s for this model's linear layers
// and attaches it (m->fp8 = s); from then on every linear layer that FP8
// covers runs its GEMMs in FP8. gpt_disable_fp8 frees it again.
void gpt_enable_fp8(GPT* m, Fp8State* s, const Fp8Options* o);
void gpt_disable_fp8(GPT* m);
// The shapes an FP8 state for a model of config c is made for (its linear layers' weights).
void gpt_fp8_shapes(const GPTConfig* c, Fp8Shapes* s);
// The bytes gpt_enable_fp8 allocates for a model of config c (what the planner bills).
Fp8Bytes gpt_fp8_bytes(const GPTConfig* c, int B, int T, int zero_stage, Fp8Support support, Fp8Recipe recipe,
                       int history, const uint8_t* skip);

// Units by role.
static inline int gpt_embed_unit(void) { return 0; }
static inline int gpt_layer_unit(int l) { return 1 + l; }
static inline int gpt_final_unit(const GPT* m) { return m->config.num_layers + 1; }

// Pointer to tensor (k, layer) given the base of the unit that holds it
// (a slice of a flat buffer, or a gathered copy of the unit).
void* gpt_tensor_in_unit(const GPT* m, void* unit_base, ParamKind k, int layer);
// Base of unit u inside a flat buffer of the model's dtype (of grad_dtype for m->grads).
void* gpt_unit_slice(const GPT* m, void* flat, int u);
// Base of activation kind k in the arena.
void* gpt_act(const GPT* m, ActKind k);

EXTERN_C_END
