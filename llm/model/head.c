// head.c: the LM head and the loss. logits (B, T, Vp) = lnf (B, T, C) @
// head (Vp, C)^T, with the head weight the architecture names (the token
// embedding when tied); then the mean cross-entropy over the real
// vocabulary V, whose backward overwrites the logits with their gradient.
#include <stdlib.h>

#include "kernels/bf16.h"
#include "llm/model/internal.h"

void head_logits(const Pass* p, void* embed_unit, void* final_unit) {
    GPT* m = p->m;
    const void* head = gpt_block(p->c)->head_weight(m, embed_unit, final_unit);
    p->be->matmul_forward(p->be, gpt_act(m, A_LOGITS), NULL, gpt_act(m, A_LNF), head, NULL, p->N, p->c->channels,
                          p->c->padded_vocab_size);
}

void loss_forward(const Pass* p, const int32_t* targets, float dloss) {
    GPT* m = p->m;
    p->be->cross_entropy(p->be, (float*)gpt_act(m, A_LOSSES), gpt_act(m, A_LOGITS), targets, p->N,
                         p->c->vocab_size, p->c->padded_vocab_size, dloss);
}

void head_backward(const Pass* p, void* embed_unit, void* final_unit, void* dembed_unit, void* dfinal_unit) {
    GPT* m = p->m;
    const BlockDef* block = gpt_block(p->c);
    p->be->matmul_backward(p->be, p->dbtc, block->head_weight(m, dembed_unit, dfinal_unit), NULL,
                           gpt_act(m, A_LOGITS), gpt_act(m, A_LNF), block->head_weight(m, embed_unit, final_unit),
                           p->N, p->c->channels, p->c->padded_vocab_size);
}

void gpt_accumulate_loss(GPT* m, int B, int T, int accumulate) {
    m->be->sum(m->be, &m->scalars[0], (const float*)gpt_act(m, A_LOSSES), (size_t)B * T, accumulate);
}

void gpt_logits_row(GPT* m, int row, float* out) {
    int Vp = m->config.padded_vocab_size;
    size_t es = dtype_size(m->dtype);
    const char* src = (const char*)gpt_act(m, A_LOGITS) + (size_t)row * Vp * es;
    if (m->dtype == DTYPE_F32) {
        m->be->to_host(m->be, out, src, (size_t)Vp * sizeof(float));
        return;
    }
    uint16_t* tmp = (uint16_t*)xmalloc((size_t)Vp * 2);
    m->be->to_host(m->be, tmp, src, (size_t)Vp * 2);
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_f32(tmp[i]);
    free(tmp);
}
