// context.c: context parallelism inside the model (m->cp, model.h), and the
// position-dependent ops every block calls through it: the embeddings'
// learned positions, RoPE and attention, at each row's true position.
//
// Rank i of n holds chunks i and 2n-1-i of c = cp.T / (2n) tokens of every
// sequence: its rows of sequence b are (b, 0..c-1) = chunk i and
// (b, c..2c-1) = chunk 2n-1-i. Row-wise ops (norms, GEMMs, the MLP, the head)
// need nothing else; the encoder and RoPE run once per chunk with the
// position tables offset to the chunk's start; attention gathers the keys
// and values of every rank, runs each local chunk's queries against the
// keys before them (Backend.attention_forward_chunk), and its backward sums
// dK, dV over the group back to the rank whose tokens they belong to.
//
// Buffers (model dtype, kvw = 2 * NKV * HS elements per token):
//   cp_work (n, B, 2c, kvw)  the all-gather, in rank order (each rank's rows)
//   cp_kv   (B, T, kvw)      the keys and values reordered into sequence order
// In backward cp_work holds dK, dV in sequence order, which are copied in
// rank order into cp_kv and reduce-scattered there. A layer's backward uses
// the K/V its forward (or a full recompute) gathered when cp_kv still holds
// them (the last layer's, or a recomputed layer's), else gathers again from
// the layer's kept qkv: one all-gather per layer forward, one more per layer
// backward except the last (two for a fully recomputed one is avoided the
// same way), one reduce-scatter per layer backward.
#include <string.h>

#include "llm/model/internal.h"

static int cp_on(const Pass* p) { return p->m->cp.n > 1; }

void gpt_set_context_parallel(GPT* m, const GPTContextParallel* cp) {
    if (cp->n <= 1) {
        m->cp.n = 1;
        return;
    }
    if (cp->T % (2 * cp->n) != 0 || m->T != cp->T / cp->n || cp->T_real > cp->T || cp->rank < 0 || cp->rank >= cp->n)
        fatal("internal: context parallelism over %d ranks at T %d (real %d) for a model of T %d", cp->n, cp->T,
              cp->T_real, m->T);
    if (!m->be->attention_forward_chunk || !m->be->attention_backward_chunk)
        fatal("--context-parallel %d: the %s backend has no query-offset attention", cp->n, m->be->name);
    m->cp = *cp;
    const GPTConfig* c = &m->config;
    size_t bytes = (size_t)m->B * cp->T * 2 * c->num_kv_heads * gpt_head_size(c) * dtype_size(m->dtype);
    m->cp_kv = m->be->alloc(m->be, bytes, "context parallelism: gathered keys and values");
    m->cp_work = m->be->alloc(m->be, bytes, "context parallelism: gather and dK/dV buffer");
    m->cp_kv_layer = -1;
    // Position tables now cover the whole sequence.
    const BlockDef* block = gpt_block(c);
    if (m->rope_freqs) {
        m->be->free(m->be, m->rope_freqs);
        m->rope_freqs = NULL;
    }
    if (block->create_state) block->create_state(m);
}

int gpt_cp_chunk_start(const GPT* m, int k) {
    int n = m->cp.n, c = m->T / 2;
    if (n <= 1) return k * c;
    return (k == 0 ? m->cp.rank : 2 * n - 1 - m->cp.rank) * c;
}

void gpt_cp_slice(const GPT* m, int32_t* dst, const int32_t* src, int B, int is_target) {
    int c = m->T / 2, Tr = m->cp.n > 1 ? m->cp.T_real : m->T;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++) {
            int pos0 = gpt_cp_chunk_start(m, k);
            for (int j = 0; j < c; j++) {
                int t = pos0 + j;
                dst[(size_t)b * m->T + k * c + j] = t < Tr ? src[(size_t)b * Tr + t] : is_target ? -1 : 0;
            }
        }
}

// ---------------------------------------------------------------------------
// positions

// The real tokens of a chunk starting at pos0 (the rest are padding).
static int real_rows(const GPT* m, int pos0, int c) {
    int r = m->cp.T_real - pos0;
    return r < 0 ? 0 : r > c ? c : r;
}

void block_encoder_forward(const Pass* p, const int32_t* inputs, const void* wte, const void* wpe) {
    Backend* be = p->be;
    int C = p->c->channels;
    char* out = (char*)gpt_act(p->m, A_ENCODED);
    if (!cp_on(p)) {
        be->encoder_forward(be, out, inputs, wte, wpe, p->B, p->T, C);
        return;
    }
    size_t es = dtype_size(p->m->dtype);
    int c = p->T / 2;
    for (int b = 0; b < p->B; b++)
        for (int k = 0; k < 2; k++) {
            int pos0 = gpt_cp_chunk_start(p->m, k), r = real_rows(p->m, pos0, c);
            size_t row = (size_t)b * p->T + (size_t)k * c;
            const void* w = wpe ? (const char*)wpe + (size_t)pos0 * C * es : NULL;
            if (r > 0) be->encoder_forward(be, out + row * C * es, inputs + row, wte, w, 1, r, C);
            // Padding has no position (no real token attends to it).
            if (r < c) be->encoder_forward(be, out + (row + r) * C * es, inputs + row + r, wte, NULL, 1, c - r, C);
        }
}

void block_encoder_backward(const Pass* p, const int32_t* inputs, void* dwte, void* dwpe) {
    Backend* be = p->be;
    int C = p->c->channels;
    const char* dout = (const char*)p->dres;
    if (!cp_on(p)) {
        be->encoder_backward(be, dwte, dwpe, dout, inputs, p->B, p->T, C);
        return;
    }
    size_t es = dtype_size(p->m->dtype);
    int c = p->T / 2;
    for (int b = 0; b < p->B; b++)
        for (int k = 0; k < 2; k++) {
            int pos0 = gpt_cp_chunk_start(p->m, k), r = real_rows(p->m, pos0, c);
            size_t row = (size_t)b * p->T + (size_t)k * c;
            void* w = dwpe ? (char*)dwpe + (size_t)pos0 * C * es : NULL;
            // Padding rows have a zero gradient (target -1, attended by no real token).
            if (r > 0) be->encoder_backward(be, dwte, w, dout + row * C * es, inputs + row, 1, r, C);
        }
}

void block_rope(const Pass* p, void* qkv, int backward) {
    Backend* be = p->be;
    const GPTConfig* c = p->c;
    int NH = c->num_heads, NKV = c->num_kv_heads, HS = gpt_head_size(c);
    const float* f = p->m->rope_freqs;
    if (!cp_on(p)) {
        if (backward) be->rope_backward(be, qkv, f, p->B, p->T, NH, NKV, HS);
        else be->rope_forward(be, qkv, f, p->B, p->T, NH, NKV, HS);
        return;
    }
    size_t row_bytes = (size_t)gpt_qkv_width(c) * dtype_size(p->m->dtype);
    int ch = p->T / 2;
    for (int b = 0; b < p->B; b++)
        for (int k = 0; k < 2; k++) {
            char* x = (char*)qkv + ((size_t)b * p->T + (size_t)k * ch) * row_bytes;
            const float* fk = f + (size_t)gpt_cp_chunk_start(p->m, k) * HS;  // (T, HS/2, 2)
            if (backward) be->rope_backward(be, x, fk, 1, ch, NH, NKV, HS);
            else be->rope_forward(be, x, fk, 1, ch, NH, NKV, HS);
        }
}

// ---------------------------------------------------------------------------
// attention

// Copies chunk rows between the rank-ordered buffer (n, B, 2c, kvw) and the
// sequence-ordered one (B, T, kvw): to_seq 1 from rank order to sequence order.
static void reorder(const Pass* p, char* rank_order, char* seq, int to_seq) {
    GPT* m = p->m;
    int n = m->cp.n, ch = p->T / 2, B = p->B, Tfull = m->cp.T;
    size_t kvb = (size_t)2 * p->c->num_kv_heads * gpt_head_size(p->c) * dtype_size(m->dtype);
    size_t per_rank = (size_t)m->B * p->T * kvb;  // chunk of the collectives: the arena's B
    for (int r = 0; r < n; r++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++) {
                int pos0 = (k == 0 ? r : 2 * n - 1 - r) * ch;
                char* a = rank_order + r * per_rank + ((size_t)b * p->T + (size_t)k * ch) * kvb;
                char* s = seq + ((size_t)b * Tfull + pos0) * kvb;
                if (to_seq) p->be->copy(p->be, s, a, (size_t)ch * kvb);
                else p->be->copy(p->be, a, s, (size_t)ch * kvb);
            }
}

// cp_kv = every rank's keys and values of this layer, in sequence order.
static void gather_kv(const Pass* p, const LayerActs* a) {
    GPT* m = p->m;
    const GPTConfig* c = p->c;
    size_t es = dtype_size(m->dtype);
    size_t kvb = (size_t)2 * c->num_kv_heads * gpt_head_size(c) * es;
    size_t qkvb = (size_t)gpt_qkv_width(c) * es, qb = (size_t)c->num_heads * gpt_head_size(c) * es;
    size_t per_rank = (size_t)m->B * p->T * kvb;
    char* mine = (char*)m->cp_work + m->cp.rank * per_rank;
    for (size_t i = 0; i < (size_t)p->N; i++) p->be->copy(p->be, mine + i * kvb, (char*)a->qkv + i * qkvb + qb, kvb);
    m->cp.all_gather(m->cp.ctx, m->cp_work, per_rank / es);
    reorder(p, (char*)m->cp_work, (char*)m->cp_kv, 1);
    m->cp_kv_layer = a->layer;
}

// Local chunk k of sequence b: its first row, its first position.
#define FOR_LOCAL_CHUNKS(p, b, k, row, pos0)                                    \
    for (int b = 0; b < (p)->B; b++)                                            \
        for (int k = 0, pos0 = gpt_cp_chunk_start((p)->m, 0); k < 2;            \
             k++, pos0 = gpt_cp_chunk_start((p)->m, 1))                         \
            for (size_t row = (size_t)b * (p)->T + (size_t)k * ((p)->T / 2), once_ = 1; once_; once_ = 0)

void block_attention_forward(const Pass* p, const LayerActs* a) {
    Backend* be = p->be;
    const GPTConfig* c = p->c;
    int NH = c->num_heads, NKV = c->num_kv_heads, HS = gpt_head_size(c);
    if (!cp_on(p)) {
        be->attention_forward(be, a->atty, a->lse, a->qkv, p->B, p->T, NH, NKV, HS);
        return;
    }
    GPT* m = p->m;
    gather_kv(p, a);
    size_t es = dtype_size(m->dtype), kvw = (size_t)2 * NKV * HS;
    int ch = p->T / 2;
    // lse of local chunk (b, k): (NH, c) at a->lse + (2b + k) * NH * c.
    FOR_LOCAL_CHUNKS(p, b, k, row, pos0) {
        be->attention_forward_chunk(be, (char*)a->atty + row * NH * HS * es, a->lse + (size_t)(2 * b + k) * NH * ch,
                                    (const char*)a->qkv + row * gpt_qkv_width(c) * es,
                                    (const char*)m->cp_kv + (size_t)b * m->cp.T * kvw * es, 1, ch, m->cp.T, pos0, NH,
                                    NKV, HS);
    }
}

void block_attention_backward(const Pass* p, void* dqkv, const void* dout, const LayerActs* a) {
    Backend* be = p->be;
    const GPTConfig* c = p->c;
    int NH = c->num_heads, NKV = c->num_kv_heads, HS = gpt_head_size(c);
    if (!cp_on(p)) {
        be->attention_backward(be, dqkv, dout, a->qkv, a->atty, a->lse, p->B, p->T, NH, NKV, HS);
        return;
    }
    GPT* m = p->m;
    if (m->cp_kv_layer != a->layer) gather_kv(p, a);
    size_t es = dtype_size(m->dtype), kvw = (size_t)2 * NKV * HS, kvb = kvw * es;
    size_t qkvb = (size_t)gpt_qkv_width(c) * es, qb = (size_t)NH * HS * es;
    size_t per_rank = (size_t)m->B * p->T * kvb;
    int ch = p->T / 2;
    // dK, dV of the whole sequence, summed over both local chunks' queries.
    char* dkv = (char*)m->cp_work;
    be->zero(be, dkv, (size_t)m->B * m->cp.T * kvb);
    FOR_LOCAL_CHUNKS(p, b, k, row, pos0) {
        be->attention_backward_chunk(be, (char*)dqkv + row * qkvb, dkv + (size_t)b * m->cp.T * kvb,
                                     (const char*)dout + row * NH * HS * es, (const char*)a->qkv + row * qkvb,
                                     (const char*)m->cp_kv + (size_t)b * m->cp.T * kvb,
                                     (const char*)a->atty + row * NH * HS * es,
                                     a->lse + (size_t)(2 * b + k) * NH * ch, 1, ch, m->cp.T, pos0, NH, NKV, HS);
    }
    // Into rank order (over the gathered K/V, no longer needed), summed over
    // the group: this rank's chunk then holds its own tokens' dK, dV.
    reorder(p, (char*)m->cp_kv, dkv, 0);
    m->cp_kv_layer = -1;
    m->cp.reduce_scatter(m->cp.ctx, m->cp_kv, per_rank / es);
    const char* mine = (const char*)m->cp_kv + m->cp.rank * per_rank;
    for (size_t i = 0; i < (size_t)p->N; i++) be->copy(be, (char*)dqkv + i * qkvb + qb, mine + i * kvb, kvb);
}
