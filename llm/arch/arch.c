// arch.c: the registry of architectures (see arch.h).
#include "llm/arch/arch.h"

#include <string.h>

#include "llm/model/block.h"

static const BlockDef* blocks[MAX_ARCHS] = {[ARCH_GPT2] = &GPT2_BLOCK, [ARCH_LLAMA] = &LLAMA_BLOCK};
static int num_archs = NUM_BUILTIN_ARCHS;

const BlockDef* arch_block(Arch a) {
    if (a < 0 || a >= num_archs) fatal("internal: architecture %d is not in the registry", a);
    return blocks[a];
}

Arch arch_register(const BlockDef* block) {
    Arch existing;
    if (arch_from_name(block->name, &existing)) fatal("internal: an architecture is already called '%s'", block->name);
    if (num_archs == MAX_ARCHS) fatal("internal: more than %d architectures", MAX_ARCHS);
    blocks[num_archs] = block;
    return num_archs++;
}

const char* arch_name(Arch a) { return a >= 0 && a < num_archs ? blocks[a]->name : "unknown"; }

int arch_from_name(const char* name, Arch* out) {
    for (int a = 0; a < num_archs; a++)
        if (strcmp(name, blocks[a]->name) == 0) {
            *out = a;
            return 1;
        }
    return 0;
}

void gpt_config_finish(GPTConfig* c) {
    char why[160];
    if (gpt_config_invalid(c, why, sizeof why)) fatal("model: %s", why);
    c->block = arch_block(c->arch);
    c->block->finish_config(c);
    // Padding the vocabulary to a multiple of 128 keeps the LM-head GEMM on
    // fast tile sizes; the padded logits are excluded from the loss.
    c->padded_vocab_size = (int)round_up((size_t)c->vocab_size, 128);
}

const ModelPreset* arch_find_preset(const char* name, Arch* arch) {
    for (int a = 0; a < num_archs; a++)
        for (int i = 0; i < blocks[a]->num_presets; i++)
            if (strcmp(name, blocks[a]->presets[i].name) == 0) {
                if (arch) *arch = a;
                return &blocks[a]->presets[i];
            }
    return NULL;
}

int arch_preset_vocab(Arch a, const char** whose) {
    const BlockDef* b = arch_block(a);
    if (whose) *whose = b->preset_vocab_name;
    return b->preset_vocab;
}
