// presets.c: GPT-2 sizes and the rules for combining the model flags.
#include "llm/presets.h"

#include <stdio.h>
#include <string.h>

#include "llm/checkpoint/llmc_io.h"

typedef struct { const char* name; int layers, channels, heads; } Preset;

// The four GPT-2 sizes (Radford et al. 2019), all with heads of 64 channels.
static const Preset PRESETS[] = {
    {"gpt2-124M", 12, 768, 12},
    {"gpt2-350M", 24, 1024, 16},
    {"gpt2-774M", 36, 1280, 20},
    {"gpt2-1558M", 48, 1600, 25},
};

// Larger GPT-3-style shapes for planning and training at scale (Brown et al.
// 2020, Table 2.1, with widths rounded to multiples of 128 and heads of 128
// channels): the parameter counts with GPT-2's vocabulary and 4K positions
// are 1.31B, 6.66B, 12.9B, 29.9B and 64.8B. Their maximum sequence length
// follows --seq-len.
static const Preset LARGE_PRESETS[] = {
    {"gpt-1B", 24, 2048, 16},
    {"gpt-7B", 32, 4096, 32},
    {"gpt-13B", 40, 5120, 40},
    {"gpt-30B", 48, 7168, 56},
    {"gpt-64B", 80, 8192, 64},
};

int preset_vocab_size(const char* model, const char** name) {
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(model, PRESETS[i].name) == 0) return *name = "GPT-2's", 50257;
    for (size_t i = 0; i < sizeof LARGE_PRESETS / sizeof LARGE_PRESETS[0]; i++)
        if (strcmp(model, LARGE_PRESETS[i].name) == 0) return *name = "GPT-2's", 50257;
    return 0;
}

static void reject_if_set(const TrainConfig* cfg, const char* flag, const char* why) {
    if (config_is_set(cfg, flag)) fatal("--%s conflicts with %s", flag, why);
}

GPTConfig model_config_from_flags(const TrainConfig* cfg, int vocab_from_tokenizer) {
    GPTConfig c;
    memset(&c, 0, sizeof c);
    if (cfg->init_from[0]) {
        // The file fixes the whole shape; shape flags would silently disagree.
        const char* why = "--init-from (the model shape comes from the file)";
        reject_if_set(cfg, "model", why);
        reject_if_set(cfg, "depth", why);
        reject_if_set(cfg, "layers", why);
        reject_if_set(cfg, "channels", why);
        reject_if_set(cfg, "heads", why);
        reject_if_set(cfg, "max-seq-len", why);
        llmc_read_config(cfg->init_from, &c);
        if (config_is_set(cfg, "vocab-size") && cfg->vocab_size != c.vocab_size)
            fatal("--vocab-size %d does not match %s (vocabulary %d)", cfg->vocab_size, cfg->init_from, c.vocab_size);
        return c;
    }

    int is_gpt2 = 0, from_preset = 0;
    int depth = cfg->depth;
    if (cfg->model[0]) {
        reject_if_set(cfg, "depth", "--model");
        const Preset* p = NULL;
        for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
            if (strcmp(cfg->model, PRESETS[i].name) == 0) p = &PRESETS[i];
        const Preset* large = NULL;
        for (size_t i = 0; i < sizeof LARGE_PRESETS / sizeof LARGE_PRESETS[0]; i++)
            if (strcmp(cfg->model, LARGE_PRESETS[i].name) == 0) large = &LARGE_PRESETS[i];
        int d;
        char tail;
        if (large || p) {
            const Preset* q = large ? large : p;
            c.num_layers = q->layers;
            c.channels = q->channels;
            c.num_heads = q->heads;
            is_gpt2 = p != NULL;
            from_preset = 1;
        } else if (sscanf(cfg->model, "d%d%c", &d, &tail) == 1 && d > 0) {
            depth = d;
        } else {
            fatal("--model '%s' is not a preset (gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M, gpt-1B, gpt-7B, "
                  "gpt-13B, gpt-30B, gpt-64B) or dN",
                  cfg->model);
        }
    }
    if (!from_preset) {
        if (depth <= 0) fatal("--depth must be positive (got %d)", depth);
        c.num_layers = depth;
        c.channels = 64 * depth;
        c.num_heads = depth;
    }
    if (cfg->layers) c.num_layers = cfg->layers;
    if (cfg->channels) c.channels = cfg->channels;
    if (cfg->heads) c.num_heads = cfg->heads;
    if (c.channels % c.num_heads != 0)
        fatal("--channels %d is not divisible by --heads %d", c.channels, c.num_heads);

    if (cfg->vocab_size) c.vocab_size = cfg->vocab_size;
    else if (vocab_from_tokenizer) c.vocab_size = vocab_from_tokenizer;
    else c.vocab_size = 50257;  // GPT-2's tokenizer
    // Rows past the tokenizer's ids would never be trained, and samples would
    // draw ids it cannot print; padding for fast GEMMs is the model's own.
    if (vocab_from_tokenizer && c.vocab_size != vocab_from_tokenizer)
        fatal("--vocab-size %d does not match the tokenizer's vocabulary (%d); the model pads it to a multiple of 128 "
              "itself",
              c.vocab_size, vocab_from_tokenizer);

    if (cfg->max_seq_len) c.max_seq_len = cfg->max_seq_len;
    else c.max_seq_len = is_gpt2 && cfg->seq_len <= 1024 ? 1024 : cfg->seq_len;
    if (cfg->seq_len > c.max_seq_len)
        fatal("--seq-len %d exceeds --max-seq-len %d", cfg->seq_len, c.max_seq_len);
    char why[160];
    if (gpt_config_invalid(&c, why, sizeof why))
        fatal("%s%s: %s", cfg->model[0] ? "--model " : "the model of --depth/--layers/--channels/--heads/--vocab-size",
              cfg->model, why);
    gpt_config_finish(&c);
    return c;
}
