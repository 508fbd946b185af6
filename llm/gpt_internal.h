// gpt_internal.h: what the two architectures' forward and backward passes
// share inside llm/ (llm/gpt.c for GPT-2, llm/llama.c for Llama): the
// activation arena, the unit hooks, the linear layers (FP8 or not), and
// Llama's pieces of the layouts that gpt.c builds. Not for code outside the
// model; everyone else uses llm/gpt.h.
#pragma once

#include "llm/fp8/fp8.h"
#include "llm/gpt.h"

EXTERN_C_BEGIN

// Every activation of one layer for a pass over N = B*T tokens (pointers
// into the arena, see ActLayout). Shapes for GPT-2; Llama's in brackets
// (QKV = (NH + 2*NKV) * HS, H = --mlp-hidden; RMSNorm keeps no mean).
typedef struct {
    void* input;      // (B, T, C) the residual stream entering the layer
    void* ln1;        // (B, T, C)
    void* qkv;        // (B, T, 3*C)   [(B, T, QKV), after RoPE]
    void* atty;       // (B, T, C)
    void* residual2;  // (B, T, C)
    void* ln2;        // (B, T, C)
    void* fch;        // (B, T, 4*C)   [(B, T, 2*H) gate and up]
    void* fch_gelu;   // (B, T, 4*C)   [(B, T, H) SwiGLU output]
    void* output;     // (B, T, C) the next layer's input
    float* ln1_mean;  // (B, T)
    float* ln1_rstd;  // (B, T)
    float* lse;       // (B, NH, T)
    float* ln2_mean;  // (B, T)
    float* ln2_rstd;  // (B, T)
} LayerActs;

// Base of activation kind k; layer l's activations for N = B*T tokens.
void* gpt_act(const GPT* m, ActKind k);
LayerActs gpt_layer_acts(const GPT* m, int l, size_t N);

// The hook points of GPTHooks (plain slices of the flat buffers without hooks).
void* gpt_unit_params(GPT* m, int u, int backward);
void* gpt_unit_grads(GPT* m, int u);
void gpt_unit_backward_done(GPT* m, int u);
void gpt_unit_release(GPT* m, int u, int backward);

// FP8 amax slot of (layer, GEMM, role), NULL when FP8 is off.
float* gpt_amax_slot(GPT* m, int l, Fp8Gemm g, Fp8Role role);
// A linear layer: FP8 GEMMs where FP8 training covers it, else matmul_*.
// out_amax (may be NULL) receives the amax of out.
void gpt_linear_forward(GPT* m, int l, Fp8Gemm g, void* out, void* pre_gelu, float* out_amax, void* inp,
                        const void* weight, const void* bias, int N, int C, int OC);
void gpt_linear_backward(GPT* m, int l, Fp8Gemm g, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, int N, int C, int OC);
// linear_backward whose input was recomputed into the buffer that receives dinp.
void gpt_linear_backward_over_input(GPT* m, int l, Fp8Gemm g, void* inp_then_dinp, void* dweight, void* dbias,
                                    const void* dout, const void* weight, int N, int C, int OC);

// ---- Llama (llm/llama.c) --------------------------------------------------------------------
// Shape of a Llama tensor of kind k.
void llama_param_shape(const GPTConfig* c, ParamKind k, int* rows, int* cols);
// Llama's kinds of the embeddings unit (which 0), a layer (1) and the final unit (2).
typedef struct {
    const ParamKind* kinds;
    int n;
} KindList;
KindList llama_unit_kinds(const GPTConfig* c, int which);
// Elements per token of activation kind k where Llama differs from GPT-2, else (size_t)-1.
size_t llama_act_width(const GPTConfig* c, ActKind k);
// Llama's extra state at gpt_create: the RoPE table for T = m->T.
void llama_create(GPT* m);
void llama_forward(GPT* m, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss);
void llama_backward(GPT* m, const int32_t* inputs, int B, int T);

EXTERN_C_END
