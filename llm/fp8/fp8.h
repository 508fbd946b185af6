// fp8.h: FP8 training state: which linear layers run in FP8, the per-tensor
// scales and amaxes of the two recipes, the FP8 copies of the weights, and
// the FP8 versions of the three GEMMs of a linear layer.
//
// What runs in FP8 (--precision fp8): the four linear layers of every block
// (qkv, attention projection, fc, fc projection), each in all three GEMMs:
//   forward  out = X W^T       X E4M3, W E4M3
//   dinp     dX  = dY W        dY E5M2, W E4M3
//   dweight  dW += dY^T X      dY E5M2, X E4M3
// with FP32 accumulation and 16-bit outputs (BF16 on GPUs; FP32 storage on
// the CPU, which emulates the FP8 GEMMs exactly: kernels/cpu/fp8.c).
// Embeddings, the LM head, attention, LayerNorm, GELU, residuals and the loss
// stay in the model's dtype; master weights and AdamW state stay FP32.
// --fp8-skip keeps chosen GEMMs in the model's dtype (fp8_parse_skip).
//
// Scaling is per tensor: 12 tensors per layer (input X, weight W, output
// gradient dY of each of the 4 GEMMs), each quantised as fp8(x * scale) and
// dequantised by scale_inv = 1/scale in the GEMM (kernels/fp8_format.h).
//   current: every quantisation takes its scale from the tensor's own amax,
//            448 / amax (E4M3) or 57344 / amax (E5M2). Stateless.
//   delayed: TransformerEngine's DelayedScaling: each tensor keeps an amax
//            history of --fp8-amax-history steps; after every applied step
//            scale = max * 2^-margin / max(history) (the previous scale kept
//            when the history holds no finite non-zero amax), used for the
//            next step; a step's amax is the max over its micro-batches.
//            Until the first step is recorded a tensor is scaled from its
//            own amax, as in current scaling (no guessed first scale). The
//            amaxes are reduced (max) over all ranks first, so every rank
//            holds the same scales and the run does not depend on how the
//            batch is split among ranks.
// Where the amaxes come from, without extra passes over the data:
//   X:  the kernel that writes the GEMM input: LayerNorm forward (qkv, fc
//       inputs), GELU forward (fc projection input); the attention output
//       (attention projection input) takes a separate amax pass, as the
//       flash-attention kernels write their output in tiles from several
//       kernels (a read of N*C 16-bit values);
//   dY: LayerNorm backward (the residual-stream gradient: fc projection and
//       attention projection), GELU backward (fc); the attention backward's
//       dqkv (qkv) takes a separate pass, as above (N*3C);
//   W:  the AdamW kernel, over the parameters it writes (with ZeRO each rank
//       sees its shard: a max-all-reduce over 4 floats per layer completes
//       it); after initialisation or loading, one amax pass at first use.
// What backward needs is not stored in FP8: the GEMM inputs a layer keeps
// (or recomputes) in 16-bit are quantised again with the same scale, which
// gives the same codes; so every recompute policy gives the same bits in FP8
// mode too. The price is one more cast per GEMM input in backward, and no
// FP8 saving of activation memory (llm/plan/planner.c bills exactly this).
//
// Memory (fp8_state_bytes, also what the planner bills): FP8 copies of each
// layer's 4 weights (12 C^2 bytes), doubled by their transposes on Hopper
// (FP8_TN_ONLY), for every layer, or at ZeRO-3 for the 2 layers in flight;
// 12 L tensors x (amax, scale, scale_inv, history) FP32; and 2 (3 on Hopper)
// cast buffers of B*T*4C bytes for the operands of one GEMM.
#pragma once

#include "kernels/ops.h"
#include "llm/parallel/comm.h"

EXTERN_C_BEGIN

typedef enum { FP8_QKV = 0, FP8_ATTPROJ, FP8_FC, FP8_FCPROJ, FP8_NUM_GEMMS } Fp8Gemm;
typedef enum { FP8_INPUT = 0, FP8_WEIGHT, FP8_GRAD, FP8_NUM_ROLES } Fp8Role;

// The recipes (llm/fp8/README.md). The per-tensor ones (current, delayed)
// keep the scaling state below; the block-scaled ones (blockwise: DeepSeek-V3's
// 1x128 activation / 128x128 weight blocks with FP32 scales; mxfp8: 1x32
// blocks with E8M0 power-of-two scales, all E4M3, kernels/fp8_block.h) have no
// state: each GEMM operand is quantised from its 16-bit source by the
// backend's block-scaled GEMM (Backend.fp8_block_matmul), row-wise or
// column-wise as that GEMM reads it. FP8_RECIPE_AUTO is --fp8-recipe's
// default, resolved by fp8_resolve_recipe before anything is built.
// nvfp4 (NVIDIA's NVFP4 recipe, kernels/fp4_block.h) is block-scaled too:
// E2M1 elements, E4M3 scales per 16 elements and an FP32 scale per tensor,
// through Backend.nvfp4_matmul; its last layers stay in the model's dtype
// (fp8_recipe_skip).
typedef enum {
    FP8_CURRENT = 0,
    FP8_DELAYED = 1,
    FP8_BLOCKWISE = 2,
    FP8_MXFP8 = 3,
    FP8_NVFP4 = 4,
    FP8_RECIPE_AUTO = 5
} Fp8Recipe;

const char* fp8_gemm_name(Fp8Gemm g);
const char* fp8_recipe_name(Fp8Recipe r);
// A recipe's name; fatal naming --fp8-recipe for anything else (auto included:
// a checkpoint records the resolved recipe).
Fp8Recipe fp8_parse_recipe(const char* s);
// The recipe of that name (not auto), or -1.
int fp8_recipe_lookup(const char* s);
int fp8_recipe_is_block(Fp8Recipe r);
// The layers a recipe itself keeps in the model's dtype: nvfp4 keeps the
// last 15% of the layers (rounded to the nearest whole layer; NVIDIA's 12B
// run kept about 16%, mostly the final layers, which are the most sensitive
// to FP4); the others none. Returns how many, the last ones; ORs every GEMM
// of those layers into skip (L entries) when skip is not NULL.
int fp8_recipe_skip(Fp8Recipe r, uint8_t* skip, int L);
// The NVFP4 formats of a GEMM operand: activations (1x16, nearest), weights
// (16x16, nearest), output gradients (1x16, stochastic rounding with the
// bits of key); hadamard for the weight-gradient GEMM's two operands.
Nvfp4Format fp8_nvfp4_format(Fp8Role role, int hadamard, uint64_t key);
// The block formats of a block-scaled recipe's GEMM operands: activations
// and output gradients, and weights.
Fp8BlockFormat fp8_block_format(Fp8Recipe r, Fp8Role role);

// Where the run trains: the CPU backend, or a GPU of this compute capability
// and name; and whether its backend has block-scaled GEMMs.
typedef struct {
    int gpu;            // 0: the CPU backend
    int major, minor;   // compute capability
    const char* name;   // the GPU's name, for messages
    int block_gemms;    // Backend.fp8_block_matmul is there
    int nvfp4_gemms;    // Backend.nvfp4_matmul is there
} Fp8Device;
// --fp8-recipe auto: MXFP8 on compute capability 10.x (Blackwell's native
// block scaling), per-tensor current scaling on 9.0 and below (Hopper's
// best: blockwise is slower there and needs no rescue at our scales) and on
// the CPU. Writes the reason into why. A named recipe is returned as it is.
Fp8Recipe fp8_resolve_recipe(Fp8Recipe asked, const Fp8Device* d, char* why, size_t whysize);
// Whether the device can run recipe r; 0 with one line naming the GPU and
// the recipe in why if not.
int fp8_recipe_runs(Fp8Recipe r, const Fp8Device* d, char* why, size_t whysize);

// --fp8-skip: a comma-separated list of items, each
//   NAME           that GEMM (qkv, attproj, fc, fcproj) in every layer
//   L  or  L-M     every GEMM of layer L (layers L to M), 0-based;
//                  `first` and `last` stand for 0 and the last layer
//   NAME@L, NAME@L-M   that GEMM in those layers
// e.g. "first,last" (Megatron's first/last layers in BF16), "fcproj",
// "attproj@0-3". Empty: everything in FP8. Returns a bitmask per layer (bit
// g: GEMM g stays in the model's dtype); fatal naming the item on an error.
uint8_t* fp8_parse_skip(const char* spec, int num_layers);

typedef struct Fp8Options {
    Fp8Recipe recipe;
    int history;     // delayed: amax history length, >= 1
    int margin;      // delayed: scales are max * 2^-margin / amax, 0..31
    const uint8_t* skip;  // per layer (num_layers), or NULL: nothing skipped; copied
} Fp8Options;

// The shapes FP8 training needs of a model (llm/model/linear.c fills them):
// its layers and each linear layer's weight (out, in) = (rows, cols).
typedef struct {
    int layers;
    size_t rows[FP8_NUM_GEMMS], cols[FP8_NUM_GEMMS];
} Fp8Shapes;

// Bytes an Fp8State allocates for a model.
typedef struct {
    size_t weights;  // FP8 weight copies (and transposes)
    size_t scaling;  // amax, scale, scale_inv and history per tensor
    size_t casts;    // cast buffers for one GEMM's operands
    size_t cpu_gemm_scratch;  // the CPU backend's largest emulated FP8 GEMM's scratch (not allocated here)
    size_t gpu_block_buffer;  // the CUDA block GEMM's codes and scales at its largest GEMM (kernels/cuda/matmul.cu)
} Fp8Bytes;
Fp8Bytes fp8_state_bytes(const Fp8Shapes* shapes, int B, int T, int zero_stage, Fp8Support support,
                         Fp8Recipe recipe, int history, const uint8_t* skip);

// What nvfp4 needs on a GPU of compute capability 10.x (the planner bills
// it; the CUDA backend has no NVFP4 GEMMs yet, so nothing allocates it):
// each weight as E2M1 codes (half a byte) plus an E4M3 scale per 16 and two
// FP32 tensor scales, twice (W and W^T: FP4 GEMMs take the TN layout only;
// the 16x16 blocks make the two the same values), for every layer or at
// ZeRO-3 the 2 in flight; one GEMM's four quantised operands (X, the
// Hadamard-transformed X^T, dY, dY^T) of B*T*widest elements at 9/16 byte
// each; the same per-tensor arrays as the other block recipes.
Fp8Bytes fp8_nvfp4_gpu_bytes(const Fp8Shapes* shapes, int B, int T, int zero_stage, const uint8_t* skip);
// Bytes of n elements in NVFP4: n/2 codes and n/16 E4M3 scales.
size_t fp8_nvfp4_bytes(size_t n);

typedef struct Fp8State {
    Fp8Options opt;
    uint8_t* skip;           // (L) owned copy
    Fp8Shapes shapes;
    Backend* be;
    int L, n;                // n = 12 L tensors, ordered role-major: [role][layer][gemm]
    int tn_only;             // the backend wants transposed copies
    int block;               // a block-scaled recipe: no FP8 weights, casts or amaxes (fp8_recipe_is_block)
    float* amax;             // (n) the current pass's amaxes, and the weights' (from the update)
    float* scale;            // (n)
    float* scale_inv;        // (n)
    float* history;          // (history, n) delayed recipe, else NULL
    int pos;                 // delayed: the history row of this step
    int steps_recorded;      // delayed: applied steps in the history
    // FP8 weights: `slots` copies of one layer's 4 weights (+ transposes).
    uint8_t* weights;
    int slots;
    size_t slot_bytes;
    int* slot_layer;         // (slots) layer a slot holds, -1: none
    uint64_t* slot_version;  // (slots x 4) params version each weight was cast from
    uint64_t version;        // bumped whenever the parameters change
    uint64_t* amax_version;  // (L x 4) version each weight's amax belongs to
    void* cast[3];           // cast buffers of B*T*4C bytes
    int step;                // the training step (for the spike hook)
    // TRAIN_GPT_FP8_SPIKE=STEP,LAYER,GEMM,FACTOR: a test hook that multiplies
    // that GEMM's input by FACTOR in the forward passes of that step.
    int spike_step, spike_layer, spike_gemm;
    float spike_factor;
    // nvfp4: the stochastic rounding's random bits are a function of
    // (sr_seed, step, backward pass of the step, tensor, element): the
    // trainer sets sr_seed to --seed; sr_pass counts the step's backward passes.
    uint64_t sr_seed;
    int sr_pass;
} Fp8State;

// Allocates the state for a model of these shapes, micro-batches up to
// (B, T) and a ZeRO stage, on backend be. The model attaches it
// (gpt_enable_fp8, llm/model/model.h).
void fp8_create(Fp8State* s, Backend* be, const Fp8Shapes* shapes, int B, int T, int zero_stage, const Fp8Options* o);
void fp8_free(Fp8State* s);

// ---- called by the model (llm/model/linear.c, passes.c, optimizer.c) ---------------
// Whether GEMM g of layer l runs in FP8 for a pass over N tokens (FP8 GEMMs
// need N a multiple of 16: shorter passes, as when sampling text, fall back).
int fp8_gemm_on(const Fp8State* s, int l, Fp8Gemm g, int N);
// The amax the producer of tensor (l, g, role) accumulates into, or NULL when
// that GEMM does not run in FP8.
float* fp8_amax_slot(Fp8State* s, int l, Fp8Gemm g, Fp8Role role);
// The start and end of a forward / backward pass: its amaxes start from zero,
// and delayed scaling folds them into the step's history row at the end.
void fp8_begin_forward(Fp8State* s);
void fp8_end_forward(Fp8State* s);
void fp8_begin_backward(Fp8State* s);
void fp8_end_backward(Fp8State* s);
// The linear layer in FP8 (kernels/ops.h's matmul_forward/backward
// semantics; weight is the 16-bit weight of (l, g)). With pre_gelu, out =
// gelu(pre_gelu) and its amax goes to out_amax. dinp may be the buffer inp
// points to (recompute writes the input gradient over the input).
void fp8_linear_forward(Fp8State* s, int l, Fp8Gemm g, void* out, void* pre_gelu, float* out_amax, void* inp,
                        const void* weight, const void* bias, int N, int C, int OC);
void fp8_linear_backward(Fp8State* s, int l, Fp8Gemm g, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, int N, int C, int OC);
// The parameters changed: by an update (the amaxes of the FP8 weights come
// from AdamW; fp8_before_update zeroes them first) or by being set.
void fp8_before_update(Fp8State* s);
void fp8_params_changed(Fp8State* s);

// ---- called by the trainer ---------------------------------------------------------
// The start of training step `step` (delayed: the step's history row starts empty).
void fp8_begin_step(Fp8State* s, int step);
// The micro-batch about to run: its index in the step's global batch (micro-
// step a of rank r is a * world + r), which keys nvfp4's random bits, so that
// ranks splitting a batch draw the bits one rank accumulating it would.
// Without it, a step's backward passes are counted from 0.
void fp8_set_micro_batch(Fp8State* s, int index);
// After an applied optimizer step on every rank: the amaxes made whole over
// the ranks (comm may be NULL for one process), then (delayed) the scales.
// A skipped step (the guard) calls neither gpt_update nor this.
void fp8_end_step(Fp8State* s, Comm* comm);

// ---- checkpoints ---------------------------------------------------------------------
// The scaling state a checkpoint keeps (llm/checkpoint/ckpt_manifest.c writes it into
// the manifest): the settings, and for delayed scaling the history position,
// the recorded steps, the scales and the amax histories (host copies). That
// is everything: current scaling's scales come from each tensor's own amax,
// and the weights' amaxes are measured again from the loaded weights (the
// values AdamW measured when it wrote them).
typedef struct {
    Fp8Recipe recipe;
    int margin;
    int tensors;             // 12 L
    int history;             // delayed: the history length; 0 for current scaling
    int pos, steps_recorded; // delayed
    float* scale;            // (tensors) delayed, else NULL
    float* scale_inv;        // (tensors)
    float* amax_history;     // (history, tensors): row r holds the amaxes of one step
} Fp8Snapshot;

void fp8_snapshot_take(const Fp8State* s, Fp8Snapshot* out);
// Restores a snapshot taken with the same recipe, margin, history length and
// model; returns 0 (state unchanged) with the difference in `why` otherwise.
int fp8_snapshot_restore(Fp8State* s, const Fp8Snapshot* snap, char* why, size_t whysize);
void fp8_snapshot_free(Fp8Snapshot* snap);

EXTERN_C_END
