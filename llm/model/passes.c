// passes.c: the forward and backward passes over the layers, for every
// architecture: the unit hooks around each unit's use (ZeRO), the recompute
// policy (llm/recompute.h), and the FP8 passes' begin and end. What happens
// inside a layer is the architecture's block (llm/model/block.h).
#include "llm/fp8/fp8.h"
#include "llm/model/internal.h"

Pass gpt_pass(GPT* m, int B, int T) {
    Pass p;
    p.m = m;
    p.be = m->be;
    p.c = &m->config;
    p.B = B;
    p.T = T;
    p.N = B * T;
    p.proj = gpt_act(m, A_PROJ_OUT);
    p.dres = gpt_act(m, A_DRESIDUAL);
    p.dbtc = gpt_act(m, A_SCRATCH_BTC);
    p.dwide = gpt_act(m, A_SCRATCH_BT4C);
    return p;
}

// The norm that feeds layer l: its input norm (ln1), written into its activations.
static NormIO layer_input_norm(const Pass* p, const LayerTensors* w, const LayerActs* a) {
    NormIO n = {a->ln1, a->ln1_mean, a->ln1_rstd, w->ln1w, w->ln1b, linear_input_amax(p, a->layer, LINEAR_QKV)};
    return n;
}

// The final norm, before the LM head; nothing in FP8 reads its output.
static NormIO final_norm(const Pass* p, void* final_unit) {
    GPT* m = p->m;
    NormIO n;
    n.out = gpt_act(m, A_LNF);
    n.mean = m->acts.count[A_LNF_MEAN] ? (float*)gpt_act(m, A_LNF_MEAN) : NULL;
    n.rstd = (float*)gpt_act(m, A_LNF_RSTD);
    n.weight = gpt_tensor_in_unit(m, final_unit, P_LNFW, -1);
    n.bias = gpt_has_kind(&m->config, P_LNFB) ? gpt_tensor_in_unit(m, final_unit, P_LNFB, -1) : NULL;
    n.amax = NULL;
    return n;
}

void gpt_forward(GPT* m, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
    const BlockDef* block = gpt_block(&m->config);
    int L = m->config.num_layers;
    if (B > m->B || T > m->T) fatal("internal: forward at (%d, %d) exceeds the arena (%d, %d)", B, T, m->B, m->T);
    Pass p = gpt_pass(m, B, T);
    void* embed = gpt_unit_params(m, gpt_embed_unit(), 0);
    fp8_begin_forward(m->fp8);

    block->embed_forward(&p, embed, inputs);
    LayerTensors w = gpt_layer_tensors(m, gpt_unit_params(m, gpt_layer_unit(0), 0), 0);
    LayerActs a = gpt_layer_acts(m, 0, (size_t)p.N);
    NormIO n = layer_input_norm(&p, &w, &a);
    block->norm_forward(&p, &n, a.input);

    void* fin = NULL;
    for (int l = 0; l < L; l++) {
        block->block_forward(&p, &w, &a);
        // The layer's output, fused with the norm of what reads it next.
        LayerTensors wn = w;
        LayerActs an = a;
        NormIO next;
        if (l + 1 < L) {
            wn = gpt_layer_tensors(m, gpt_unit_params(m, gpt_layer_unit(l + 1), 0), l + 1);
            an = gpt_layer_acts(m, l + 1, (size_t)p.N);
            next = layer_input_norm(&p, &wn, &an);
        } else {
            fin = gpt_unit_params(m, gpt_final_unit(m), 0);
            next = final_norm(&p, fin);
        }
        block->block_output(&p, &w, &a, &next);
        gpt_unit_release(m, gpt_layer_unit(l), 0);
        w = wn;
        a = an;
    }
    // The head and the loss, chunk by chunk; when training, the head's
    // backward too (head.c), which leaves dlnf in p.dbtc for gpt_backward.
    // Without targets (sampling) the logits are made per row on demand
    // (gpt_logits_row).
    if (targets) head_loss(&p, embed, fin, targets, dloss);
    gpt_unit_release(m, gpt_final_unit(m), 0);
    gpt_unit_release(m, gpt_embed_unit(), 0);
    fp8_end_forward(m->fp8);
}

void gpt_zero_grads(GPT* m) { m->be->zero(m->be, m->grads, m->grads_size * dtype_size(m->grad_dtype)); }

void gpt_backward(GPT* m, const int32_t* inputs, int B, int T) {
    const BlockDef* block = gpt_block(&m->config);
    int L = m->config.num_layers;
    Pass p = gpt_pass(m, B, T);
    int fu = gpt_final_unit(m);
    void* dembed = gpt_unit_grads(m, gpt_embed_unit());
    void* fin = gpt_unit_params(m, fu, 1);
    void* dfin = gpt_unit_grads(m, fu);
    fp8_begin_backward(m->fp8);

    // The forward pass (with dloss != 0) ran the head's backward: p.dbtc
    // holds the final norm's output gradient, the head weight its gradient.
    p.be->zero(p.be, p.dres, (size_t)p.N * m->config.channels * dtype_size(m->dtype));
    NormIO fn = final_norm(&p, fin);
    void* dlnfb = gpt_has_kind(&m->config, P_LNFB) ? gpt_tensor_in_unit(m, dfin, P_LNFB, -1) : NULL;
    block->norm_backward(&p, p.dres, gpt_tensor_in_unit(m, dfin, P_LNFW, -1), dlnfb, p.dbtc,
                         gpt_layer_acts(m, L - 1, (size_t)p.N).output, &fn, linear_grad_amax(&p, L - 1, LINEAR_FCPROJ));
    gpt_unit_backward_done(m, fu);
    gpt_unit_release(m, fu, 1);

    for (int l = L - 1; l >= 0; l--) {
        int u = gpt_layer_unit(l);
        LayerTensors w = gpt_layer_tensors(m, gpt_unit_params(m, u, 1), l);
        LayerTensors g = gpt_layer_tensors(m, gpt_unit_grads(m, u), l);
        LayerActs a = gpt_layer_acts(m, l, (size_t)p.N);
        if (a.mode == RECOMPUTE_FULL) {
            // Re-run the layer's forward from its input into the working set
            // (the activations it dropped land in backward scratch).
            NormIO n = layer_input_norm(&p, &w, &a);
            block->norm_forward(&p, &n, a.input);
            block->block_forward(&p, &w, &a);
        }
        block->block_backward(&p, &w, &g, &a);
        gpt_unit_backward_done(m, u);
        gpt_unit_release(m, u, 1);
    }
    fp8_end_backward(m->fp8);
    block->embed_backward(&p, dembed, inputs);
    gpt_unit_backward_done(m, gpt_embed_unit());
}
