// gpt.h: the models (GPT-2 and Llama 3, one trainer for both): their
// configuration, the flat parameter layout, the activation layout,
// initialisation, and forward/backward through kernels/ops.h. The Llama
// block itself is in llm/llama.c; both share everything else here.
//
// Memory is flat: parameters, gradients, FP32 master weights and the two
// AdamW moments are each one buffer in the same element order, so ZeRO
// shards, checkpoint slices and checksums are ranges of one index space.
// The order is layer-major (all of layer 0's tensors, then layer 1's, ...),
// so one layer's parameters are one contiguous range; llm.c's file order
// (each tensor stacked over layers) is produced only on import/export.
// Every tensor starts at a multiple of PARAM_ALIGN elements; the gaps are
// zero and stay zero (their gradients are zero).
//
// The flat space is cut into units, the granule of ZeRO sharding and of
// bucketed communication: unit 0 holds the embeddings (wte, wpe), unit 1+l
// layer l, and the last unit the final layernorm. Each unit's size is padded
// to a multiple of PARAM_ALIGN * world, so it splits into `world` equal
// contiguous chunks; rank r owns chunk r of every unit. With one rank the
// padding is just PARAM_ALIGN.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "llm/fp8/fp8.h"
#include "llm/recompute.h"

EXTERN_C_BEGIN

#define PARAM_ALIGN 64

// The architectures: GPT-2 (LayerNorm, learned positions, GELU MLP,
// multi-head attention, biases, tied head) and Llama 3 (RMSNorm, RoPE,
// grouped-query attention, SwiGLU MLP, no biases, untied head unless tied).
typedef enum { ARCH_GPT2 = 0, ARCH_LLAMA = 1 } Arch;
const char* arch_name(Arch a);
// "gpt2" or "llama" -> *out; 0 for any other name.
int arch_from_name(const char* name, Arch* out);

typedef struct {
    int max_seq_len;        // rows of the position embedding (GPT-2); longest T (Llama)
    int vocab_size;         // V: real tokens
    int padded_vocab_size;  // Vp: V rounded up to a multiple of 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
    // Llama (gpt_config_finish fills GPT-2's values: NKV = NH, 4C, tied).
    Arch arch;
    int num_kv_heads;       // NKV: key/value heads (NH % NKV == 0)
    int mlp_hidden;         // H: MLP width (gate and up are H x C each)
    int tie_embeddings;     // LM head = wte (always for GPT-2)
    float rope_theta;       // RoPE base (Llama 3: 500000)
    RopeScaling rope_scaling;  // Llama 3.1's long-context scaling (factor 0: none)
    float norm_eps;         // Llama's RMSNorm epsilon; 0: Llama 3's 1e-5 (GPT-2's LayerNorm: always 1e-5)
} GPTConfig;

// The largest shapes a model may have. Within them every size the code
// computes in int (3*C, 4*C, Vp, 12*L + 4 tensors, T*NH) fits, and every
// element count fits easily in size_t; the flag table's ranges (config.c)
// stay inside them, and model files are checked against them (llmc_io.c).
#define GPT_MAX_LAYERS 4096
#define GPT_MAX_CHANNELS 65536
#define GPT_MAX_HEADS 4096
#define GPT_MAX_VOCAB (1 << 24)
#define GPT_MAX_SEQ_LEN (1 << 20)
// NULL when the shape is valid, else why not (e.g. "channels 70000 exceed
// 65536"), in why.
const char* gpt_config_invalid(const GPTConfig* c, char* why, size_t size);
// Fills padded_vocab_size and GPT-2's fixed choices, and checks the shape
// (gpt_config_invalid; C divisible by NH, NH by NKV); fatal naming the
// offending values otherwise.
void gpt_config_finish(GPTConfig* c);
// Head size C / NH.
static inline int gpt_head_size(const GPTConfig* c) { return c->channels / c->num_heads; }
// Elements per token of the fused q/k/v projection: (NH + 2*NKV) * HS.
static inline int gpt_qkv_width(const GPTConfig* c) {
    return (c->num_heads + 2 * c->num_kv_heads) * gpt_head_size(c);
}
// Parameter count without padding (what papers quote: wte counted once, V rows).
size_t gpt_num_params(const GPTConfig* c);

// The kinds of parameter tensor: GPT-2's 16 in llm.c's file order, then the
// untied LM head, with the shape of each kind over a GPT-2 model (per-layer kinds have one (rows, cols) tensor
// per layer; weights are (out, in) as in PyTorch's nn.Linear).
// Llama uses the analogous kinds (llm/llama.c lists them with their shapes):
// wte, ln1w (attention RMSNorm), qkvw, attprojw, ln2w (MLP RMSNorm), fcw
// (gate and up fused, 2H x C), fcprojw (down), lnfw, and lm_head if untied.
typedef enum {
    P_WTE,       // (Vp, C) token embedding, also the LM head; rows V.. stay zero
    P_WPE,       // (max_seq_len, C) position embedding
    P_LN1W,      // (L, C) layernorm before attention: weight
    P_LN1B,      // (L, C) ... and bias
    P_QKVW,      // (L, 3*C, C) query, key and value projections, stacked
    P_QKVB,      // (L, 3*C)
    P_ATTPROJW,  // (L, C, C) attention output projection
    P_ATTPROJB,  // (L, C)
    P_LN2W,      // (L, C) layernorm before the MLP: weight
    P_LN2B,      // (L, C) ... and bias
    P_FCW,       // (L, 4*C, C) MLP up
    P_FCB,       // (L, 4*C)
    P_FCPROJW,   // (L, C, 4*C) MLP down
    P_FCPROJB,   // (L, C)
    P_LNFW,      // (C) final layernorm: weight
    P_LNFB,      // (C) ... and bias
    P_LMHEAD,    // (Vp, C) untied LM head (Llama without --tie-embeddings)
    NUM_PARAM_KINDS
} ParamKind;

typedef struct {
    ParamKind kind;
    int layer;        // -1 for tensors that are not per layer
    int unit;         // the unit (ZeRO granule) that holds it
    size_t offset;    // in elements, into the flat buffer
    size_t count;     // elements
    int rows, cols;   // 2-D shape (rows = 1 for vectors)
    int decay;        // AdamW weight decay applies (2-D weights)
} ParamTensor;

typedef struct {
    ParamTensor* tensors;  // wte, wpe, L x (12 per layer), lnfw, lnfb
    int num_tensors;
    int world;             // ranks the units are padded for
    int num_units;         // L + 2
    size_t* unit_begin;    // (num_units + 1): unit u is [unit_begin[u], unit_begin[u+1])
    size_t total;          // flat size in elements, padding included
} ParamLayout;

void param_layout_build(ParamLayout* pl, const GPTConfig* c, int world);
static inline size_t unit_size(const ParamLayout* pl, int u) { return pl->unit_begin[u + 1] - pl->unit_begin[u]; }
// Elements of unit u that each rank owns.
static inline size_t unit_chunk(const ParamLayout* pl, int u) { return unit_size(pl, u) / (size_t)pl->world; }
void param_layout_free(ParamLayout* pl);
const char* param_kind_name(ParamKind k);
// Whether a kind has one tensor per layer (all but wte, wpe, lnfw, lnfb, lm_head).
int param_kind_is_per_layer(ParamKind k);
// Whether the model's architecture has tensors of kind k.
int gpt_has_kind(const GPTConfig* c, ParamKind k);
// Index of tensor (kind, layer) in pl->tensors; fatal if the model lacks the kind.
int param_tensor_index(const GPTConfig* c, ParamKind kind, int layer);

// Named pointers into a flat buffer (parameters or gradients) for one layer,
// in the model's dtype; shapes as the ParamKind of the same name, without L.
typedef struct {
    void* ln1w;      // (C)
    void* ln1b;      // (C)
    void* qkvw;      // (3*C, C)
    void* qkvb;      // (3*C)
    void* attprojw;  // (C, C)
    void* attprojb;  // (C)
    void* ln2w;      // (C)
    void* ln2b;      // (C)
    void* fcw;       // (4*C, C)
    void* fcb;       // (4*C)
    void* fcprojw;   // (C, 4*C)
    void* fcprojb;   // (C)
} LayerTensors;

// Activations of one micro-batch (B, T), carved from one arena. Per-layer
// kinds (ln1 .. residual3) are (slices, B, T, ...): which layers keep a
// slice of their own depends on the recompute policy (llm/recompute.h).
// Shapes below: S = the kind's slices (act_layout_build decides them; L
// without recompute); statistics and losses are FP32, the rest the dtype.
typedef enum {
    A_ENCODED,      // (B, T, C) token + position embedding, layer 0's input
    A_LN1,          // (S, B, T, C) layernorm 1 output, the qkv GEMM's input
    A_LN1_MEAN,     // (S, B, T) FP32
    A_LN1_RSTD,     // (S, B, T) FP32
    A_QKV,          // (S, B, T, 3*C) = (S, B, T, 3, NH, HS)
    A_ATTY,         // (S, B, T, C) attention output, before its projection
    A_ATT_LSE,      // (S, B, NH, T) FP32 log-sum-exp per query (no T x T scores are kept)
    A_RESIDUAL2,    // (S, B, T, C) layer input + attention projection
    A_LN2,          // (S, B, T, C) layernorm 2 output, the fc GEMM's input
    A_LN2_MEAN,     // (S, B, T) FP32
    A_LN2_RSTD,     // (S, B, T) FP32
    A_FCH,          // (S, B, T, 4*C) MLP up, before GELU
    A_FCH_GELU,     // (S, B, T, 4*C) after GELU
    A_RESIDUAL3,    // (L, B, T, C) layer output, the next layer's input
    A_LNF,          // (B, T, C) final layernorm output
    A_LNF_MEAN,     // (B, T) FP32
    A_LNF_RSTD,     // (B, T) FP32
    A_LOGITS,       // (B, T, Vp); the loss backward overwrites them with their gradient
    A_LOSSES,       // (B, T) FP32 per-token cross-entropy
    // scratch reused by every layer in backward (and proj_out in forward)
    A_DRESIDUAL,    // (B, T, C) gradient of the residual stream
    A_SCRATCH_BTC,  // (B, T, C)
    A_SCRATCH_BT4C, // (B, T, 4*C)
    A_PROJ_OUT,     // (B, T, C)
    NUM_ACT_KINDS
} ActKind;

typedef struct {
    size_t count[NUM_ACT_KINDS];   // elements
    DType dtype[NUM_ACT_KINDS];
    size_t offset[NUM_ACT_KINDS];  // bytes into the arena (aligned)
    size_t bytes;                  // arena size
    // Per-layer kinds: layer slices in the buffer: first `stored` slices of
    // the layers that keep the kind, then (slices > stored) one working slice
    // that fully recomputed layers share. 0 for the other kinds, and for a
    // per-layer kind that lives in backward scratch under this policy.
    int slices[NUM_ACT_KINDS];
    int stored[NUM_ACT_KINDS];
    RecomputePolicy recompute;
} ActLayout;

// The activation bill for micro-batch B and sequence length T under a
// recompute policy (NULL: none). Pure arithmetic: the planner calls it for
// models it never allocates.
void act_layout_build(ActLayout* al, const GPTConfig* c, int B, int T, DType dtype, const RecomputePolicy* recompute);
const char* act_kind_name(ActKind k);
// Bytes of kind k in the arena, alignment padding included.
size_t act_kind_bytes(const ActLayout* al, ActKind k);
// Whether k has one slice per layer (ln1 .. residual3).
int act_kind_is_per_layer(ActKind k);


typedef struct GPT GPT;

// Where a unit's parameters and gradients live during forward and backward.
// Without hooks they are slices of m->params and m->grads. ZeRO stages 2 and
// 3 install hooks that gather a unit's parameters before use, give it a
// gradient buffer, and reduce-scatter that buffer when the unit's backward is
// done. Units are used in this order: forward 0, 1..L, L+1, 0 (the LM head);
// backward 0 (LM head), L+1, L..1, 0 (the embeddings). A fully recomputed
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
    void* grads;          // (grads_size) dtype: the flat gradients, or (ZeRO-2/3) shard + staging
    // Data parallelism. With zero_stage 0 every rank holds the whole
    // optimizer state; from stage 1 on, rank r holds chunk r of every unit,
    // concatenated in unit order (opt_size = total / world elements): its
    // shard. Stage 2 keeps only the gradient shard, stage 3 also only the
    // parameter shard; such a buffer is the shard followed by full-unit
    // staging (gpt_staging) that the ZeRO hooks (llm/parallel/zero.c) fill and reuse.
    int world, rank, zero_stage;
    size_t params_size;   // elements of params
    size_t grads_size;    // elements of grads
    size_t opt_size;      // elements of master / adam_m / adam_v on this rank
    float* master;        // (opt_size) FP32 master weights; NULL when dtype is FP32
    float* adam_m;        // (opt_size) FP32
    float* adam_v;        // (opt_size) FP32

    int B, T;             // the micro-batch the arena was sized for
    ActLayout acts;       // includes the recompute policy
    void* arena;          // activations
    int32_t* inputs;      // (B, T) on the backend
    int32_t* targets;     // (B, T) on the backend
    float* scalars;       // [0] loss sum, [1] grad norm^2 (backend memory)
    int adam_step;        // completed optimizer steps
    const GPTHooks* hooks;  // NULL: parameters and gradients are the flat buffers
    Fp8State* fp8;          // FP8 training (gpt_enable_fp8), or NULL
    float* rope_freqs;      // Llama: (T, HS/2, 2) FP32 cos and sin (rope_table), backend memory
};

// Allocates parameters, gradients, optimizer state and activations for
// micro-batches up to (B, T) on rank `rank` of `world` at a ZeRO stage.
// Parameters are left zero.
void gpt_create(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank, int zero_stage);
// The same with a recompute policy for the activations (NULL: none).
void gpt_create_recompute(GPT* m, const GPTConfig* c, Backend* be, int B, int T, int world, int rank,
                          int zero_stage, const RecomputePolicy* recompute);

// Model-state bytes per rank for `world` ranks sharing the shards at a ZeRO
// stage, without allocating (gpt_create allocates exactly these). With
// es = bytes of dtype, N = the padded flat size for `world`, S = N / world,
// E, F = the sizes of the first (embeddings) and last (final norm) units and
// Lmax = the largest layer unit:
//   stage 0: params N*es, grads N*es, master N*4 (16-bit dtypes), adam 2*N*4
//   stage 1: params N*es, grads N*es, master S*4, adam 2*S*4
//   stage 2: params N*es, grads (S + E + F + 2*Lmax)*es, master S*4, adam 2*S*4
//   stage 3: params and grads (S + E + F + 2*Lmax)*es, master S*4, adam 2*S*4
// The staging holds the embeddings' and final norm's full units for the step
// and two layer units (one in use while the other is communicated).
typedef struct {
    size_t params, grads, master, adam;  // adam: both moments
} StateBytes;
StateBytes gpt_state_bytes(const GPTConfig* c, DType dtype, int world, int zero_stage);

// Full-unit staging after the shard in a sharded buffer (ZeRO-2 gradients,
// ZeRO-3 parameters): the embeddings unit, the final unit, two layer slots.
typedef enum { STAGING_EMBED, STAGING_FINAL, STAGING_LAYER_A, STAGING_LAYER_B, NUM_STAGING } StagingSlot;
void* gpt_staging(const GPT* m, void* sharded, StagingSlot slot);
// Whether m->grads / m->params hold only this rank's shard (plus staging).
static inline int gpt_grads_sharded(const GPT* m) { return m->zero_stage >= 2; }
static inline int gpt_params_sharded(const GPT* m) { return m->zero_stage >= 3; }

// The flat range [*lo, *lo + return value) of unit u whose optimizer state
// this rank holds, and where it starts in master / adam_m / adam_v.
size_t gpt_owned_piece(const GPT* m, int u, size_t* lo, size_t* state_offset);
void gpt_free(GPT* m);

// GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
// 1/sqrt(2L), LayerNorm weights 1, biases 0, padded vocabulary rows 0. Every
// value is a function of (seed, tensor, layer, index) only.
void gpt_init_random(GPT* m, uint64_t seed);

// Copies FP32 host values in the flat layout into the model (params and
// master; with ZeRO-3 only this rank's owned pieces are read).
void gpt_set_params_f32(GPT* m, const float* host_flat);
// Reads the model's parameters as FP32 (from master when it exists) in the
// flat layout. With ZeRO-3 only the owned pieces are written (zero.h's
// zero_gather_params_f32 assembles the whole model from every rank).
void gpt_get_params_f32(const GPT* m, float* host_flat);

// Forward over inputs (B, T) already on the backend. With targets, computes
// per-token losses; returns nothing (read the loss via gpt_loss_sum).
// If dloss != 0 the logits buffer is turned into its gradient for backward.
void gpt_forward(GPT* m, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss);
// Row `row` of the last forward's logits (Vp values) as float32 on the host:
// what sampling and generation read.
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
// covers runs its GEMMs in FP8. gpt_disable_fp8 (and gpt_free) frees it again.
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
// Pointers to layer l's tensors given the base of unit gpt_layer_unit(l).
LayerTensors gpt_layer_tensors(const GPT* m, void* unit_base, int l);
// Base of unit u inside a flat buffer of the model's dtype.
void* gpt_unit_slice(const GPT* m, void* flat, int u);

EXTERN_C_END
