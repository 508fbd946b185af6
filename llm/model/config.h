// config.h: a model's shape (GPTConfig), its limits and the sizes derived
// from it. Every architecture (llm/arch/) fills the same fields; GPT-2 fixes
// some of them (no key/value grouping, an MLP of 4C, a tied head).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"

EXTERN_C_BEGIN

// Which architecture: an id of the registry in llm/arch/arch.h (ARCH_GPT2,
// ARCH_LLAMA), as flags, manifests and Hugging Face folders name it. The
// model core never looks at it; it reads the architecture's definition
// through GPTConfig.block.
typedef int Arch;

struct BlockDef;  // llm/model/block.h: what an architecture defines

typedef struct {
    int max_seq_len;        // rows of the position embedding (GPT-2); longest T (Llama)
    int vocab_size;         // V: real tokens
    int padded_vocab_size;  // Vp: V rounded up to a multiple of 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
    Arch arch;
    int num_kv_heads;       // NKV: key/value heads (NH % NKV == 0)
    int mlp_hidden;         // H: MLP width (gate and up are H x C each)
    int tie_embeddings;     // LM head = wte (always for GPT-2)
    float rope_theta;       // RoPE base (Llama 3: 500000)
    RopeScaling rope_scaling;  // Llama 3.1's long-context scaling (factor 0: none)
    float norm_eps;         // Llama's RMSNorm epsilon; 0: Llama 3's 1e-5 (GPT-2's LayerNorm: always 1e-5)
    // The architecture's definition, set from `arch` by gpt_config_finish
    // (llm/arch/arch.h).
    const struct BlockDef* block;
} GPTConfig;

// A named model size (--model NAME), which an architecture offers.
typedef struct {
    const char* name;
    int layers, channels, heads;
    int kv_heads, mlp_hidden, tied;  // 0 where the architecture fixes them (GPT-2)
    int max_seq_len;                 // 0: follows --seq-len
} ModelPreset;

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
// The architecture's definition; fatal when the config was never finished.
const struct BlockDef* gpt_block(const GPTConfig* c);
// Head size C / NH.
static inline int gpt_head_size(const GPTConfig* c) { return c->channels / c->num_heads; }
// Elements per token of the fused q/k/v projection: (NH + 2*NKV) * HS.
static inline int gpt_qkv_width(const GPTConfig* c) {
    return (c->num_heads + 2 * c->num_kv_heads) * gpt_head_size(c);
}
// Parameter count without padding (what papers quote: wte counted once, V rows).
size_t gpt_num_params(const GPTConfig* c);

EXTERN_C_END
