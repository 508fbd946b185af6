// presets.c: GPT-2 and Llama 3 sizes and the rules for combining the model flags.
#include "llm/presets.h"

#include <stdio.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/checkpoint/llmc_io.h"
#include "llm/hf/hf.h"
#include "llm/util/atomic_dir.h"

// The presets themselves belong to their architectures (llm/arch/gpt2.c,
// llama.c); arch_find_preset finds one by name in any of them.

int preset_vocab_size(const char* model, const char** name) {
    Arch a;
    return arch_find_preset(model, &a) ? arch_preset_vocab(a, name) : 0;
}

static void reject_if_set(const TrainConfig* cfg, const char* flag, const char* why) {
    if (config_is_set(cfg, flag)) fatal("--%s conflicts with %s", flag, why);
}

// The depth rule's kv heads: the largest divisor of NH not above NH/4 (Llama
// 3's ratio), at least 1.
static int depth_kv_heads(int heads) {
    int kv = heads / 4 > 0 ? heads / 4 : 1;
    while (heads % kv != 0) kv--;
    return kv;
}

// The Llama fields of c: from a preset (p may be NULL) and the explicit flags.
// The depth rule's MLP width 8C/3 (rounded up to 64) gives the MLP GPT-2's
// 8 C^2 weights, so a Llama and a GPT-2 of one depth have about equal size.
static void llama_fields(const TrainConfig* cfg, const ModelPreset* p, GPTConfig* c) {
    c->arch = ARCH_LLAMA;
    c->num_kv_heads = p ? p->kv_heads : depth_kv_heads(c->num_heads);
    c->mlp_hidden = p ? p->mlp_hidden : (int)round_up((size_t)(8 * c->channels + 2) / 3, 64);
    c->tie_embeddings = p ? p->tied : 0;
    if (cfg->kv_heads) c->num_kv_heads = cfg->kv_heads;
    if (cfg->mlp_hidden) c->mlp_hidden = cfg->mlp_hidden;
    if (config_is_set(cfg, "tie-embeddings")) c->tie_embeddings = cfg->tie_embeddings;
    if (c->num_kv_heads <= 0 || c->num_heads % c->num_kv_heads != 0)
        fatal("--kv-heads %d does not divide --heads %d", c->num_kv_heads, c->num_heads);
    if (c->mlp_hidden <= 0) fatal("--mlp-hidden must be positive (got %d)", c->mlp_hidden);
    if ((c->channels / c->num_heads) % 2 != 0)
        fatal("--arch llama: the head size %d (channels %d / heads %d) must be even for RoPE", c->channels / c->num_heads,
              c->channels, c->num_heads);
    if (!(cfg->rope_theta > 1.0)) fatal("--rope-theta must be greater than 1 (got %g)", cfg->rope_theta);
    c->rope_theta = (float)cfg->rope_theta;
    if (cfg->rope_scaling) c->rope_scaling = (RopeScaling){8.0f, 1.0f, 4.0f, 8192};
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
        char stranded[4200];
        if (atomic_dir_stranded(cfg->init_from, stranded, sizeof stranded))
            fatal("--init-from %s does not exist, but %s beside it holds the folder before a write that was killed "
                  "between its two renames (llm/hf/README.md): rename it back, or run that write again",
                  cfg->init_from, stranded);
        if (hf_is_folder(cfg->init_from)) {
            // A Hugging Face folder names its architecture; flags may only agree.
            hf_read_config(cfg->init_from, &c);
            if (config_is_set(cfg, "arch") && cfg->arch != c.arch)
                fatal("--arch %s conflicts with --init-from %s, a %s model", arch_name(cfg->arch), cfg->init_from,
                      arch_name(c.arch));
            const char* llama_flags[] = {"kv-heads", "mlp-hidden", "rope-theta", "rope-scaling", "tie-embeddings"};
            for (size_t i = 0; i < sizeof llama_flags / sizeof llama_flags[0]; i++)
                reject_if_set(cfg, llama_flags[i], why);
        } else {
            hf_refuse_folder_file(cfg->init_from);
            if (cfg->arch != ARCH_GPT2)
                fatal("--init-from: llm.c's model format holds GPT-2 models only (got --arch %s; a Hugging Face folder holds either)", arch_name(cfg->arch));
            llmc_read_config(cfg->init_from, &c);
        }
        if (config_is_set(cfg, "vocab-size") && cfg->vocab_size != c.vocab_size)
            fatal("--vocab-size %d does not match %s (vocabulary %d)", cfg->vocab_size, cfg->init_from, c.vocab_size);
        return c;
    }

    Arch arch = (Arch)cfg->arch;
    int from_preset = 0, positions = 0;
    int depth = cfg->depth;
    Arch preset_arch = ARCH_GPT2;
    const ModelPreset* preset = cfg->model[0] ? arch_find_preset(cfg->model, &preset_arch) : NULL;
    if (preset) {
        reject_if_set(cfg, "depth", "--model");
        if (config_is_set(cfg, "arch") && arch != preset_arch) {
            if (preset_arch == ARCH_LLAMA)
                fatal("--model %s is a Llama; it conflicts with --arch %s", preset->name, arch_name(arch));
            fatal("--model %s is a GPT-2-style preset; it conflicts with --arch %s", preset->name, arch_name(arch));
        }
        arch = preset_arch;
        c.num_layers = preset->layers;
        c.channels = preset->channels;
        c.num_heads = preset->heads;
        positions = preset->max_seq_len;
        from_preset = 1;
    } else if (cfg->model[0]) {
        reject_if_set(cfg, "depth", "--model");
        int d;
        char tail;
        if (sscanf(cfg->model, "d%d%c", &d, &tail) == 1 && d > 0) depth = d;
        else
            fatal("--model '%s' is not a preset (gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M, gpt-1B, gpt-7B, "
                  "gpt-13B, gpt-30B, gpt-64B, llama3-1B, llama3-3B, llama3-8B, llama3-70B) or dN",
                  cfg->model);
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
    if (arch == ARCH_LLAMA) {
        llama_fields(cfg, preset, &c);
    } else {
        const char* llama_only[] = {"kv-heads", "mlp-hidden", "rope-theta", "rope-scaling", "tie-embeddings"};
        for (size_t i = 0; i < sizeof llama_only / sizeof llama_only[0]; i++)
            reject_if_set(cfg, llama_only[i], "--arch gpt2 (it is a Llama flag)");
    }

    if (cfg->vocab_size) c.vocab_size = cfg->vocab_size;
    else if (vocab_from_tokenizer) c.vocab_size = vocab_from_tokenizer;
    else c.vocab_size = arch_preset_vocab(arch, NULL);  // the family's tokenizer
    // Rows past the tokenizer's ids would never be trained, and samples would
    // draw ids it cannot print; padding for fast GEMMs is the model's own.
    if (vocab_from_tokenizer && c.vocab_size != vocab_from_tokenizer)
        fatal("--vocab-size %d does not match the tokenizer's vocabulary (%d); the model pads it to a multiple of 128 "
              "itself",
              c.vocab_size, vocab_from_tokenizer);

    if (cfg->max_seq_len) c.max_seq_len = cfg->max_seq_len;
    else c.max_seq_len = positions && cfg->seq_len <= positions ? positions : cfg->seq_len;
    if (cfg->seq_len > c.max_seq_len)
        fatal("--seq-len %d exceeds --max-seq-len %d", cfg->seq_len, c.max_seq_len);
    char why[160];
    if (gpt_config_invalid(&c, why, sizeof why))
        fatal("%s%s: %s", cfg->model[0] ? "--model " : "the model of --depth/--layers/--channels/--heads/--vocab-size",
              cfg->model, why);
    c.arch = arch;
    gpt_config_finish(&c);
    return c;
}
