// layout.h: where everything lives. The flat parameter layout (tensors,
// units, padding) and the activation arena of one micro-batch, for every
// architecture: the architecture says which tensor and activation kinds it
// has and their shapes (llm/model/block.h), the core places them.
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
// bucketed communication: unit 0 holds the embeddings, unit 1+l layer l, and
// the last unit the final norm (and an untied LM head). Each unit's size is
// padded to a multiple of PARAM_ALIGN * world, so it splits into `world`
// equal contiguous chunks; rank r owns chunk r of every unit. With one rank
// the padding is just PARAM_ALIGN.
#pragma once

#include "llm/model/config.h"
#include "llm/recompute.h"

EXTERN_C_BEGIN

#define PARAM_ALIGN 64

// The kinds of parameter tensor of a pre-norm decoder, the vocabulary every
// architecture draws from: GPT-2's 16 in llm.c's file order, then the untied
// LM head. An architecture lists the kinds it has, unit by unit, and gives
// each its (rows, cols) shape (llm/arch/gpt2.c and llama.c, with shapes);
// per-layer kinds have one tensor per layer. Weights are (out, in), as in
// PyTorch's nn.Linear. The numbers are part of the initialisation's seed
// (gpt_init_random): never renumber them.
typedef enum {
    P_WTE,       // token embedding (Vp rows; rows V.. stay zero); the LM head when tied
    P_WPE,       // learned position embedding
    P_LN1W,      // the norm before attention: weight
    P_LN1B,      // ... and bias (LayerNorm)
    P_QKVW,      // query, key and value projections, stacked
    P_QKVB,
    P_ATTPROJW,  // attention output projection
    P_ATTPROJB,
    P_LN2W,      // the norm before the MLP: weight
    P_LN2B,      // ... and bias
    P_FCW,       // MLP up (and gate)
    P_FCB,
    P_FCPROJW,   // MLP down
    P_FCPROJB,
    P_LNFW,      // final norm: weight
    P_LNFB,      // ... and bias
    P_LMHEAD,    // untied LM head (Vp rows)
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
    ParamTensor* tensors;  // the embeddings unit's, L x one layer's, the final unit's
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
// Elements of one tensor of kind k (0 when the architecture has none).
size_t gpt_kind_elems(const GPTConfig* c, ParamKind k);
// Index of tensor (kind, layer) in pl->tensors; fatal if the model lacks the kind.
int param_tensor_index(const GPTConfig* c, ParamKind kind, int layer);

// The kinds of activation of one micro-batch (B, T), carved from one arena.
// Per-layer kinds (ln1 .. residual3) are (slices, B, T, width): which layers
// keep a slice of their own depends on the recompute policy
// (llm/recompute.h); widths come from the architecture (GPT-2's below, S =
// the kind's slices, L without recompute). Statistics and losses are FP32,
// the rest the model's dtype. The order is the forward pass's.
typedef enum {
    A_ENCODED,      // (B, T, C) token (+ position) embedding, layer 0's input
    A_LN1,          // (S, B, T, C) norm 1 output, the qkv GEMM's input
    A_LN1_MEAN,     // (S, B, T) FP32 (LayerNorm only)
    A_LN1_RSTD,     // (S, B, T) FP32
    A_QKV,          // (S, B, T, 3*C) = (S, B, T, 3, NH, HS)
    A_ATTY,         // (S, B, T, C) attention output, before its projection
    A_ATT_LSE,      // (S, B, NH, T) FP32 log-sum-exp per query (no T x T scores are kept)
    A_RESIDUAL2,    // (S, B, T, C) layer input + attention projection
    A_LN2,          // (S, B, T, C) norm 2 output, the fc GEMM's input
    A_LN2_MEAN,     // (S, B, T) FP32
    A_LN2_RSTD,     // (S, B, T) FP32
    A_FCH,          // (S, B, T, 4*C) MLP up, before the activation
    A_FCH_GELU,     // (S, B, T, 4*C) after the activation (GELU; Llama's SwiGLU)
    A_RESIDUAL3,    // (L, B, T, C) layer output, the next layer's input
    A_LNF,          // (B, T, C) final norm output
    A_LNF_MEAN,     // (B, T) FP32
    A_LNF_RSTD,     // (B, T) FP32
    A_LOGITS,       // (R, Vp): one chunk of R rows of the LM head's logits (head_chunk_rows), then their gradient
    A_LOSSES,       // (B, T) FP32 per-token cross-entropy
    // scratch reused by every layer in backward (and proj_out in forward)
    A_DRESIDUAL,    // (B, T, C) gradient of the residual stream
    A_SCRATCH_BTC,  // (B, T, C)
    A_SCRATCH_BT4C, // (B, T, 4*C)
    A_PROJ_OUT,     // (B, T, C) a branch's output before it joins the residual stream
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
    int head_rows;  // R: rows of one LM-head chunk, the logits buffer's rows
} ActLayout;

// The LM head runs over the B*T rows in chunks whose size is a multiple of
// this (except the last), so that every chunk count splits the rows at the
// same points as the CPU GEMM's row tiles and the head gradient's row blocks
// (kernels/cpu/matmul.c's GEMM_TILE): the CPU's results are then the same
// bits for any chunk count.
#define HEAD_ROW_BLOCK 128

// Rows per chunk when N rows run in `chunks` chunks (>= 1): ceil(N / chunks)
// rounded up to HEAD_ROW_BLOCK, at most N. The chunks actually run are
// ceil(N / rows), fewer than asked when N is small.
int head_chunk_rows(size_t N, int chunks);

// The activation bill for micro-batch B and sequence length T under a
// recompute policy (NULL: none), with the LM head in one chunk. Pure
// arithmetic: the planner calls it for models it never allocates.
void act_layout_build(ActLayout* al, const GPTConfig* c, int B, int T, DType dtype, const RecomputePolicy* recompute);
// The same with the LM head in `head_chunks` chunks (>= 1): the logits
// buffer holds one chunk, (head_chunk_rows(B*T, head_chunks), Vp).
void act_layout_build_chunked(ActLayout* al, const GPTConfig* c, int B, int T, DType dtype,
                              const RecomputePolicy* recompute, int head_chunks);
const char* act_kind_name(ActKind k);
// Bytes of kind k in the arena, alignment padding included.
size_t act_kind_bytes(const ActLayout* al, ActKind k);
// Whether k has one slice per layer (ln1 .. residual3).
int act_kind_is_per_layer(ActKind k);

EXTERN_C_END
