// block.h: the one interface between the model core (llm/model/) and an
// architecture (llm/arch/). An architecture is a BlockDef: its tensors and
// their shapes, its activations' widths, its embedding, its norm, its block
// forward and backward, its LM head weight, its Hugging Face names and its
// presets. The core owns everything else, once for every architecture: the
// layouts, ZeRO's units, the loops over layers with the recompute policy
// and the unit hooks, the linear layer (16-bit or FP8), the loss and AdamW.
//
// A pass over the layers, as the core runs it (llm/model/passes.c):
//
//   forward:  embed_forward                      -> A_ENCODED
//             norm_forward (layer 0's input norm)
//             for l in 0..L-1:
//               block_forward(l)                 ln1 -> everything backward reads
//               block_output(l, next norm)       the layer's output, and the
//                                                next layer's (or the final) norm
//             logits = final norm @ head_weight^T, cross-entropy
//   backward: head, norm_backward (the final norm)
//             for l in L-1..0:
//               full recompute: norm_forward + block_forward again
//               block_backward(l)                the residual gradient through the layer
//             embed_backward
//
// A block reaches the backend through p->be and its parameters, gradients
// and activations through the LayerTensors / LayerActs the core hands it;
// it runs its GEMMs through linear_forward / linear_backward (below), which
// decide between 16-bit and FP8; it says which activations it recomputes
// under selective recompute by asking block_recompute (below).
#pragma once

#include "llm/model/model.h"

EXTERN_C_BEGIN

// The four linear layers of a block, in forward order: each GEMM of the
// block is one of them (FP8 scales each separately; --fp8-skip names them).
typedef enum { LINEAR_QKV = 0, LINEAR_ATTPROJ, LINEAR_FC, LINEAR_FCPROJ, NUM_LINEARS } BlockLinear;

// Named pointers to one layer's tensors (parameters or gradients), NULL for
// a kind the architecture lacks. Shapes are the architecture's (GPT-2's
// below; Llama: llm/arch/llama.c).
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

// Every activation of layer l for a pass over N = B*T tokens (pointers into
// the arena: the layer's own slice, the working slice of fully recomputed
// layers, or backward scratch). Shapes for GPT-2; widths per architecture.
typedef struct {
    void* input;      // (B, T, C) the residual stream entering the layer
    void* ln1;        // (B, T, C)
    void* qkv;        // (B, T, 3*C)
    void* atty;       // (B, T, C)
    void* residual2;  // (B, T, C)
    void* ln2;        // (B, T, C)
    void* fch;        // (B, T, 4*C)
    void* fch_gelu;   // (B, T, 4*C)
    void* output;     // (B, T, C) the next layer's input
    float* ln1_mean;  // (B, T)
    float* ln1_rstd;  // (B, T)
    float* lse;       // (B, NH, T)
    float* ln2_mean;  // (B, T)
    float* ln2_rstd;  // (B, T)
    int layer;
    RecomputeMode mode;  // how this layer keeps its activations
} LayerActs;

// One norm application: its output, statistics (NULL where the norm keeps
// none), parameters (bias NULL where it has none) and the amax slot of its
// output (FP8; NULL when no FP8 GEMM reads it).
typedef struct {
    void* out;
    float* mean;
    float* rstd;
    const void* weight;
    const void* bias;
    float* amax;
} NormIO;

// A pass over one micro-batch, as the block sees it.
typedef struct {
    GPT* m;
    Backend* be;
    const GPTConfig* c;
    int B, T, N;      // N = B*T tokens
    // Scratch, shared by every layer (widths are the architecture's):
    void* proj;       // (B, T, C) a branch's output before the residual add (A_PROJ_OUT)
    void* dres;       // (B, T, C) backward: the residual stream's gradient (A_DRESIDUAL)
    void* dbtc;       // (B, T, C) backward scratch (A_SCRATCH_BTC)
    void* dwide;      // (B, T, wide) backward scratch (A_SCRATCH_BT4C)
} Pass;

// The units a kind list belongs to.
typedef enum { UNIT_EMBED = 0, UNIT_LAYER = 1, UNIT_FINAL = 2 } UnitRole;
typedef struct {
    const ParamKind* kinds;
    int n;
} KindList;
#define KIND_LIST(a) ((KindList){(a), (int)(sizeof(a) / sizeof((a)[0]))})

// Receives one Hugging Face tensor of the architecture's folder: rows
// [row0, row0 + rows) of our tensor (kind, layer), stored transposed when
// `transpose` (llm/hf/hf_names.c).
typedef void (*HfNameSink)(void* ctx, const char* name, ParamKind kind, int layer, int row0, int rows, int cols,
                           int transpose);

typedef struct BlockDef {
    const char* name;  // "gpt2", "llama": --arch, manifests, messages

    // ---- shapes ---------------------------------------------------------------------------
    // The architecture's fixed choices and checks, after the flags filled
    // the shape (fatal naming the values).
    void (*finish_config)(GPTConfig* c);
    // Its tensor kinds, in flat order, of the embeddings unit, one layer, the final unit.
    KindList (*unit_kinds)(const GPTConfig* c, UnitRole role);
    // (rows, cols) of one tensor of kind k; vectors have rows = 1.
    void (*param_shape)(const GPTConfig* c, ParamKind k, int* rows, int* cols);
    // Elements per token of activation kind k (0: the block has no such activation).
    size_t (*act_width)(const GPTConfig* c, ActKind k);
    // Its own tables' bytes at sequence length T, and their creation (may be NULL).
    size_t (*state_bytes)(const GPTConfig* c, int T);
    void (*create_state)(GPT* m);

    // ---- the passes (see the top of this file) ----------------------------------------------
    void (*embed_forward)(const Pass* p, void* embed_unit, const int32_t* inputs);
    void (*embed_backward)(const Pass* p, void* dembed_unit, const int32_t* inputs);  // reads p->dres
    void (*norm_forward)(const Pass* p, const NormIO* n, const void* inp);
    // dinp += the norm's input gradient (the residual stream's); dweight, dbias +=;
    // dinp_amax: FP8 amax of dinp after the accumulation (may be NULL).
    void (*norm_backward)(const Pass* p, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const NormIO* n, float* dinp_amax);
    void (*block_forward)(const Pass* p, const LayerTensors* w, const LayerActs* a);
    // a->output = the layer's output, and next = norm(a->output) (layer l+1's
    // input norm, or the final norm), fused as the block likes.
    void (*block_output)(const Pass* p, const LayerTensors* w, const LayerActs* a, const NormIO* next);
    // p->dres: the gradient of the layer's output in, of its input out;
    // gradients += into g.
    void (*block_backward)(const Pass* p, const LayerTensors* w, const LayerTensors* g, const LayerActs* a);
    // The LM head's weight (Vp, C): a tensor of the embeddings unit (tied) or of the final unit.
    void* (*head_weight)(const GPT* m, void* embed_unit, void* final_unit);

    // ---- names --------------------------------------------------------------------------------
    // Its Hugging Face tensors (llm/hf/), and the names a folder may hold that map to nothing.
    void (*hf_tensors)(const GPTConfig* c, HfNameSink add, void* ctx);
    int (*hf_ignorable)(const GPTConfig* c, const char* name);
    const ModelPreset* presets;
    int num_presets;
    int preset_vocab;              // the vocabulary its presets are defined with
    const char* preset_vocab_name; // whose it is ("GPT-2's")
} BlockDef;

// ---- what the core offers a block ------------------------------------------------------------

// The linear layer out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias: FP8
// GEMMs where FP8 training covers (layer, g), else the model's dtype. With
// pre_gelu: pre_gelu = that result and out = its GELU, which the backend
// may fuse into the GEMM (not then gelu_forward's bits: a layer that
// recomputes out in backward calls this without pre_gelu and then
// gelu_forward, in forward and recompute alike); out_amax (may be NULL)
// receives the amax of out.
void linear_forward(const Pass* p, int l, BlockLinear g, void* out, void* pre_gelu, float* out_amax, void* inp,
                    const void* weight, const void* bias, int C, int OC);
// dinp = dout @ weight, dweight += dout^T @ inp, dbias += column sums of
// dout. dinp may be the buffer inp points to (a recomputed input in backward
// scratch): the weight gradient reads it before dinp overwrites it, with the
// same bits as separate buffers.
void linear_backward(const Pass* p, int l, BlockLinear g, void* dinp, void* dweight, void* dbias, const void* dout,
                     const void* inp, const void* weight, int C, int OC);
// linear_backward for a layer whose input is a GELU's output: dinp becomes
// the gradient of the GELU's input pre_gelu (N, C) and pre_dbias (C, may be
// NULL) += its column sums, the bias gradient of the layer before the GELU,
// fused into the dinp GEMM's epilogue where the backend can
// (matmul_backward_dgelu); dinp_amax: of that gradient. dinp may be inp's
// buffer, as in linear_backward.
void linear_backward_gelu(const Pass* p, int l, BlockLinear g, void* dinp, void* dweight, void* dbias,
                          const void* dout, const void* inp, const void* weight, const void* pre_gelu,
                          void* pre_dbias, float* dinp_amax, int C, int OC);
// The FP8 amax slot of linear (l, g)'s input, or of its output gradient dY:
// what the op that writes that tensor measures into. NULL when (l, g) runs
// in the model's dtype (or l is outside the model).
float* linear_input_amax(const Pass* p, int l, BlockLinear g);
float* linear_grad_amax(const Pass* p, int l, BlockLinear g);
// A separate amax pass over a linear's input (or dY) of n elements, for
// producers that measure nothing (the attention kernels); no-op without FP8.
void linear_measure_input(const Pass* p, int l, BlockLinear g, const void* x, size_t n);
void linear_measure_grad(const Pass* p, int l, BlockLinear g, const void* dy, size_t n);

// Whether the block's backward must recompute activation k (a kind its
// act_width gives and the recompute policy lets layers drop: ln1, ln2,
// fch_gelu) before reading it: the layer did not keep it, and no full
// re-run left it in the scratch buffer where a->... points. The block
// recomputes it into that pointer.
int block_recompute(const Pass* p, const LayerActs* a, ActKind k);

// The ops that depend on a token's position, at each row's true position in
// its sequence (llm/model/context.c): the plain ops without context
// parallelism, chunk by chunk with it (m->cp).
// A_ENCODED = wte[inputs] + wpe[position] (wpe NULL: none), and its backward (+=).
void block_encoder_forward(const Pass* p, const int32_t* inputs, const void* wte, const void* wpe);
void block_encoder_backward(const Pass* p, const int32_t* inputs, void* dwte, void* dwpe);
// RoPE in place on qkv's query and key heads (backward: its transpose on dqkv's).
void block_rope(const Pass* p, void* qkv, int backward);
// a->atty, a->lse = causal attention over a->qkv; with context parallelism
// over the keys and values of the whole sequence, gathered from the group.
void block_attention_forward(const Pass* p, const LayerActs* a);
// dqkv from dout (B, T, NH, HS); with context parallelism the keys' and
// values' gradients are summed over the group back to the ranks holding them.
void block_attention_backward(const Pass* p, void* dqkv, const void* dout, const LayerActs* a);

EXTERN_C_END
