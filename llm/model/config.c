// config.c: the limits of a model's shape, and its architecture's definition.
#include "llm/model/config.h"

#include <stdio.h>

#include "llm/model/block.h"

const char* gpt_config_invalid(const GPTConfig* c, char* why, size_t size) {
    static const struct {
        const char* what;
        size_t offset;
        int lo, hi;
    } LIMITS[] = {
        {"number of layers", offsetof(GPTConfig, num_layers), 1, GPT_MAX_LAYERS},
        {"channels", offsetof(GPTConfig, channels), 1, GPT_MAX_CHANNELS},
        {"number of heads", offsetof(GPTConfig, num_heads), 1, GPT_MAX_HEADS},
        {"vocabulary size", offsetof(GPTConfig, vocab_size), 2, GPT_MAX_VOCAB},
        {"max sequence length", offsetof(GPTConfig, max_seq_len), 1, GPT_MAX_SEQ_LEN},
    };
    for (size_t i = 0; i < sizeof LIMITS / sizeof LIMITS[0]; i++) {
        int v = *(const int*)((const char*)c + LIMITS[i].offset);
        if (v < LIMITS[i].lo || v > LIMITS[i].hi) {
            snprintf(why, size, "%s %d is outside %d..%d", LIMITS[i].what, v, LIMITS[i].lo, LIMITS[i].hi);
            return why;
        }
    }
    if (c->channels % c->num_heads != 0) {
        snprintf(why, size, "channels (%d) must be divisible by heads (%d)", c->channels, c->num_heads);
        return why;
    }
    return NULL;
}

const BlockDef* gpt_block(const GPTConfig* c) {
    if (!c->block) fatal("internal: a model config used before gpt_config_finish gave it its architecture");
    return c->block;
}
