// internal.h: what the model core's files share among themselves and with
// nobody else (architectures see llm/model/block.h, everyone else
// llm/model/model.h).
#pragma once

#include "llm/model/block.h"

EXTERN_C_BEGIN

// Layer l's activations for a pass over N = B*T tokens (act_layout.c).
LayerActs gpt_layer_acts(const GPT* m, int l, size_t N);
// Pointers to layer l's tensors given the base of unit gpt_layer_unit(l) (params.c).
LayerTensors gpt_layer_tensors(const GPT* m, void* unit_base, int l);

// The hook points of GPTHooks: plain slices of the flat buffers without hooks (params.c).
void* gpt_unit_params(GPT* m, int u, int backward);
void* gpt_unit_grads(GPT* m, int u);
void gpt_unit_backward_done(GPT* m, int u);
void gpt_unit_release(GPT* m, int u, int backward);

// A pass over (B, T) tokens of m (passes.c).
Pass gpt_pass(GPT* m, int B, int T);

// The LM head and the loss (head.c), chunk by chunk: per-token
// cross-entropy into A_LOSSES; with dloss != 0 also the head's backward: the
// final norm's output gradient into p->dbtc and the head weight's gradient
// (+=, through the unit_grads hook).
void head_loss(const Pass* p, void* embed_unit, void* final_unit, const int32_t* targets, float dloss);

// The AdamW amax slot of FP8 weight tensor (kind, layer), or NULL (linear.c).
float* gpt_weight_update_amax(GPT* m, ParamKind kind, int layer);

EXTERN_C_END
