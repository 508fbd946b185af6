// generate.h: ./train_gpt --generate: continue --prompt with the model's
// weights (the newest checkpoint, or --init-from), --sample-tokens tokens,
// each printed as soon as it is chosen. --temperature 0 takes the most likely
// token (ties: the lowest id); otherwise softmax(logits / temperature) over
// the --top-k most likely tokens (0: all), drawn with a generator keyed by
// --seed and the position only, so a seed gives the same text every time, on
// any number of ranks (every rank runs the forward; rank 0 prints).
#pragma once

#include "llm/trainer.h"

EXTERN_C_BEGIN

// Writes the continuation to stdout (decoded with --tokenizer, else token
// ids) and returns the number of tokens generated. Collective.
int generate_run(Trainer* tr);

// The next token from one row of logits (V of them), with the uniform draw u in [0, 1).
int generate_pick(const float* logits, int V, double temperature, int top_k, float u);

EXTERN_C_END
