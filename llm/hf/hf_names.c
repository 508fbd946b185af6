// hf_names.c: which Hugging Face tensor is which piece of our layout. Each
// architecture names its own tensors (BlockDef.hf_tensors: llm/arch/gpt2.c,
// llama.c): GPT-2's GPT2LMHeadModel under "transformer.", Llama's
// LlamaForCausalLM under "model."; this file turns those names into the
// list the readers and the writer walk. Token embeddings and the LM head hold
// the real vocabulary's V rows; our padding rows V..Vp are not in the files.
#include <stdio.h>
#include <string.h>

#include "llm/hf/hf.h"
#include "llm/model/block.h"

typedef struct {
    HfTensor* t;
    int n, cap;
} List;

// An HfNameSink (llm/model/block.h) appending to a List.
static void add(void* ctx, const char* name, ParamKind kind, int layer, int row0, int rows, int cols, int transpose) {
    List* l = (List*)ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = (HfTensor*)xrealloc(l->t, (size_t)l->cap * sizeof(HfTensor));
    }
    HfTensor* t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    t->row0 = row0;
    t->rows = rows;
    t->cols = cols;
    t->transpose = transpose;
    t->is_vector = rows == 1 && !transpose;
}

HfTensor* hf_tensor_map(const GPTConfig* c, int* n) {
    List l = {0};
    gpt_block(c)->hf_tensors(c, add, &l);
    *n = l.n;
    return l.t;
}

int hf_tensor_ignorable(const GPTConfig* c, const char* name) { return gpt_block(c)->hf_ignorable(c, name); }
