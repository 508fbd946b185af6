// presets.h: turning the model flags into a GPTConfig: GPT-2 presets, llm.c's
// depth convention, explicit sizes, or the shape stored in an --init-from file.
#pragma once

#include "llm/config.h"
#include "llm/gpt.h"

EXTERN_C_BEGIN

// vocab_from_tokenizer: the tokenizer's vocabulary size, or 0 when there is none.
// Fatal, naming the flags, when they contradict each other.
GPTConfig model_config_from_flags(const TrainConfig* cfg, int vocab_from_tokenizer);

EXTERN_C_END
