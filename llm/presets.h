// presets.h: turning the model flags into a GPTConfig: GPT-2 presets, llm.c's
// depth convention, explicit sizes, or the shape stored in an --init-from file.
#pragma once

#include "llm/config.h"
#include "llm/model/model.h"

EXTERN_C_BEGIN

// vocab_from_tokenizer: the tokenizer's vocabulary size, or 0 when there is none.
// Fatal, naming the flags, when they contradict each other.
GPTConfig model_config_from_flags(const TrainConfig* cfg, int vocab_from_tokenizer);

// The vocabulary a preset is defined with, and its name (GPT-2's 50257 for
// the GPT presets); 0 when `model` is not a preset. What --plan sizes the
// embeddings and logits with when no --vocab-size or --tokenizer is given.
int preset_vocab_size(const char* model, const char** name);

EXTERN_C_END
