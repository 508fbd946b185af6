// arch.h: the architectures this program trains, by id and by name, and the
// step that turns a filled-in shape into a model config: its block
// definition (llm/model/block.h) looked up and its own choices applied.
//
//   gpt2   llm/arch/gpt2.c    LayerNorm, learned positions, GELU MLP, tied head
//   llama  llm/arch/llama.c   RMSNorm, RoPE, grouped-query attention, SwiGLU
//
// Adding an architecture: llm/README.md ("A third architecture").
#pragma once

#include "llm/model/config.h"

EXTERN_C_BEGIN

enum { ARCH_GPT2 = 0, ARCH_LLAMA = 1, NUM_BUILTIN_ARCHS, MAX_ARCHS = 8 };

extern const struct BlockDef GPT2_BLOCK;
extern const struct BlockDef LLAMA_BLOCK;

// The definition of architecture a (fatal for an id outside the registry).
const struct BlockDef* arch_block(Arch a);
// Adds an architecture that is not built in (a test's own block) and returns
// its id; fatal when its name is taken or the registry is full.
Arch arch_register(const struct BlockDef* block);
const char* arch_name(Arch a);
// "gpt2" or "llama" -> *out; 0 for any other name.
int arch_from_name(const char* name, Arch* out);

// Checks the shape (gpt_config_invalid), sets c->block from c->arch, applies the architecture's fixed choices
// and checks (GPT-2: NKV = NH, 4C, tied), and pads the vocabulary to a
// multiple of 128. Fatal naming the offending values.
void gpt_config_finish(GPTConfig* c);

// The preset called `name` of any architecture, and that architecture; NULL when none is.
const ModelPreset* arch_find_preset(const char* name, Arch* arch);
// The vocabulary architecture a's presets are defined with, and whose it is ("GPT-2's").
int arch_preset_vocab(Arch a, const char** whose);

EXTERN_C_END
