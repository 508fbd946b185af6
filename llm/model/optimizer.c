// optimizer.c: AdamW over the flat buffers: one update of the pieces whose
// optimizer state this rank holds, tensor by tensor (weight decay on 2-D
// weights only), and the gradient's squared norm.
#include <stdlib.h>
#include <string.h>

#include "llm/fp8/fp8.h"
#include "llm/model/internal.h"

void gpt_grad_norm_squared(GPT* m, size_t lo, size_t hi) {
    gpt_grad_sum_squares(m, &m->scalars[1], (char*)m->grads + lo * dtype_size(m->grad_dtype), hi - lo, 0);
}

void gpt_grad_sum_squares(GPT* m, float* out, const void* x, size_t n, int accumulate) {
    if (m->grad_dtype == m->dtype) m->be->sum_squares(m->be, out, x, n, accumulate);
    else m->be->sum_squares_f32(m->be, out, (const float*)x, n, accumulate);
}

void gpt_update(GPT* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                float grad_scale, uint64_t seed) {
    Backend* be = m->be;
    m->adam_step++;
    fp8_before_update(m->fp8);  // AdamW measures the FP8 weights it writes
    // Each tensor's part of each owned piece, as its own range (weight decay
    // differs per tensor; the zero padding between tensors is never touched),
    // all updated by one adamw_tensors call.
    AdamWTensor* ts = (AdamWTensor*)xmalloc((size_t)(m->layout.num_tensors ? m->layout.num_tensors : 1) * sizeof *ts);
    int nt = 0;
    // The stochastic rounding's element index: the position in the unpadded
    // parameter order, which (unlike the flat index, padded for the world
    // size) is the same for any number of ranks, so that a sharded run rounds
    // every parameter and moment as an unsharded one does.
    size_t element = 0;
    for (int i = 0; i < m->layout.num_tensors; element += m->layout.tensors[i].count, i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        size_t lo, state_off, len = gpt_owned_piece(m, t->unit, &lo, &state_off);
        size_t hi = lo + len;
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->count < hi ? t->offset + t->count : hi;
        if (a >= b) continue;
        size_t s = state_off + (a - lo);  // index into master / adam_m / adam_v
        // A sharded buffer holds the piece at the optimizer state's index.
        AdamWTensor* x = &ts[nt++];
        x->grad = gpt_grads_sharded(m) ? s : a;
        x->param = gpt_params_sharded(m) ? s : a;
        x->state = s;
        x->count = b - a;
        x->index_base = element + (a - t->offset);
        x->weight_decay = t->decay ? weight_decay : 0.0f;
        x->amax = gpt_weight_update_amax(m, t->kind, t->layer);
    }
    AdamWParams p;
    memset(&p, 0, sizeof p);
    p.lr = lr;
    p.beta1 = beta1;
    p.beta2 = beta2;
    p.eps = eps;
    p.grad_scale = grad_scale;
    p.step = m->adam_step;
    p.seed = seed;
    p.moment_dtype = m->adam_dtype;
    p.grads_f32 = m->grad_dtype != m->dtype;
    be->adamw_tensors(be, m->params, m->master, m->grads, m->adam_m, m->adam_v, ts, nt, &p);
    free(ts);
}
