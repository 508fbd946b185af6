// head.c: the LM head and the loss, in chunks of rows. For each chunk of R
// rows (act_layout.c's head_rows): logits (R, Vp) = lnf (R, C) @ head (Vp, C)^T,
// with the head weight the architecture names (the token embedding when
// tied); the cross-entropy over the real vocabulary V, which (when training)
// overwrites the logits with their gradient; then, at once, the head's
// backward: dlnf (R, C) into the backward scratch and the head weight's
// gradient. So only one chunk of logits ever exists, and the backward pass
// starts from dlnf.
#include <stdlib.h>

#include "kernels/bf16.h"
#include "llm/model/internal.h"

// dweight (Vp, C) += dlogits (n, Vp)^T @ lnf (n, C) for one chunk. A backend
// with gemm_row_block R adds R rows per call in row order, so the sums are
// split at the same rows whatever the chunk count (chunks start at multiples
// of HEAD_ROW_BLOCK, a multiple of R).
static void head_weight_grad(const Pass* p, void* dweight, const char* dlogits, const char* lnf, int n) {
    int C = p->c->channels, Vp = p->c->padded_vocab_size;
    size_t es = dtype_size(p->m->dtype);
    int R = p->be->gemm_row_block > 0 ? p->be->gemm_row_block : n;
    for (int r = 0; r < n; r += R) {
        int k = n - r < R ? n - r : R;
        p->be->matmul_backward(p->be, NULL, dweight, NULL, dlogits + (size_t)r * Vp * es, lnf + (size_t)r * C * es,
                               NULL, k, C, Vp);
    }
}

void head_loss(const Pass* p, void* embed_unit, void* final_unit, const int32_t* targets, float dloss) {
    GPT* m = p->m;
    const BlockDef* block = gpt_block(p->c);
    int C = p->c->channels, V = p->c->vocab_size, Vp = p->c->padded_vocab_size;
    int R = m->acts.head_rows;
    if (p->be->gemm_row_block > 0 && HEAD_ROW_BLOCK % p->be->gemm_row_block != 0)
        fatal("internal: the backend's GEMM row block %d does not divide HEAD_ROW_BLOCK", p->be->gemm_row_block);
    size_t es = dtype_size(m->dtype);
    const void* head = block->head_weight(m, embed_unit, final_unit);
    void* dhead = NULL;
    if (dloss != 0.0f) {
        // The head's gradient belongs to the unit that holds the head (the
        // embeddings when tied); asking for both units' buffers is what the
        // backward pass does next anyway.
        dhead = block->head_weight(m, gpt_unit_grads(m, gpt_embed_unit()), gpt_unit_grads(m, gpt_final_unit(m)));
    }
    char* logits = (char*)gpt_act(m, A_LOGITS);        // (R, Vp)
    const char* lnf = (const char*)gpt_act(m, A_LNF);  // (N, C)
    float* losses = (float*)gpt_act(m, A_LOSSES);      // (N)
    for (int r0 = 0; r0 < p->N; r0 += R) {
        int n = p->N - r0 < R ? p->N - r0 : R;
        const char* x = lnf + (size_t)r0 * C * es;
        p->be->matmul_forward(p->be, logits, NULL, x, head, NULL, n, C, Vp);
        p->be->cross_entropy(p->be, losses + r0, logits, targets + r0, n, V, Vp, dloss);
        if (dloss == 0.0f) continue;
        // The logits now hold dlogits: dlnf of these rows, then the weight's gradient.
        p->be->matmul_backward(p->be, (char*)p->dbtc + (size_t)r0 * C * es, NULL, NULL, logits, NULL, head, n, C,
                               Vp);
        head_weight_grad(p, dhead, logits, x, n);
    }
}

void gpt_accumulate_loss(GPT* m, int B, int T, int accumulate) {
    m->be->sum(m->be, &m->scalars[0], (const float*)gpt_act(m, A_LOSSES), (size_t)B * T, accumulate);
}

// Computed on demand from the kept final-norm output, so that no pass keeps
// more than one chunk of logits; the head weight comes through the hooks
// (ZeRO-3 gathers it), so every rank must call this together.
void gpt_logits_row(GPT* m, int row, float* out) {
    const BlockDef* block = gpt_block(&m->config);
    int C = m->config.channels, Vp = m->config.padded_vocab_size;
    size_t es = dtype_size(m->dtype);
    void* embed = gpt_unit_params(m, gpt_embed_unit(), 0);
    void* fin = gpt_unit_params(m, gpt_final_unit(m), 0);
    void* dst = gpt_act(m, A_LOGITS);  // its first row
    const char* x = (const char*)gpt_act(m, A_LNF) + (size_t)row * C * es;
    m->be->matmul_forward(m->be, dst, NULL, x, block->head_weight(m, embed, fin), NULL, 1, C, Vp);
    gpt_unit_release(m, gpt_final_unit(m), 0);
    gpt_unit_release(m, gpt_embed_unit(), 0);
    if (m->dtype == DTYPE_F32) {
        m->be->to_host(m->be, out, dst, (size_t)Vp * sizeof(float));
        return;
    }
    uint16_t* tmp = (uint16_t*)xmalloc((size_t)Vp * 2);
    m->be->to_host(m->be, tmp, dst, (size_t)Vp * 2);
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_f32(tmp[i]);
    free(tmp);
}
