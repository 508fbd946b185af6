// params.c: reaching a model's parameters: a tensor inside a unit, one
// layer's named tensors, the unit hook points (ZeRO, llm/parallel/zero.h),
// the initialisation, and FP32 copies to and from the host.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "llm/fp8/fp8.h"
#include "llm/model/internal.h"
#include "llm/util/rng.h"

void* gpt_unit_slice(const GPT* m, void* flat, int u) {
    return (char*)flat + m->layout.unit_begin[u] * dtype_size(flat == m->grads ? m->grad_dtype : m->dtype);
}

void* gpt_tensor_in_unit(const GPT* m, void* unit_base, ParamKind k, int layer) {
    const ParamTensor* t = &m->layout.tensors[param_tensor_index(&m->config, k, layer)];
    return (char*)unit_base + (t->offset - m->layout.unit_begin[t->unit]) * dtype_size(m->dtype);
}

// NULL for a kind the architecture lacks (Llama's biases).
static void* layer_tensor(const GPT* m, void* unit_base, ParamKind k, int l) {
    return gpt_has_kind(&m->config, k) ? gpt_tensor_in_unit(m, unit_base, k, l) : NULL;
}

LayerTensors gpt_layer_tensors(const GPT* m, void* unit_base, int l) {
    LayerTensors w;
    w.ln1w = layer_tensor(m, unit_base, P_LN1W, l);
    w.ln1b = layer_tensor(m, unit_base, P_LN1B, l);
    w.qkvw = layer_tensor(m, unit_base, P_QKVW, l);
    w.qkvb = layer_tensor(m, unit_base, P_QKVB, l);
    w.attprojw = layer_tensor(m, unit_base, P_ATTPROJW, l);
    w.attprojb = layer_tensor(m, unit_base, P_ATTPROJB, l);
    w.ln2w = layer_tensor(m, unit_base, P_LN2W, l);
    w.ln2b = layer_tensor(m, unit_base, P_LN2B, l);
    w.fcw = layer_tensor(m, unit_base, P_FCW, l);
    w.fcb = layer_tensor(m, unit_base, P_FCB, l);
    w.fcprojw = layer_tensor(m, unit_base, P_FCPROJW, l);
    w.fcprojb = layer_tensor(m, unit_base, P_FCPROJB, l);
    return w;
}

// The hook points (see GPTHooks); without hooks, slices of the flat buffers.
void* gpt_unit_params(GPT* m, int u, int backward) {
    return m->hooks ? m->hooks->unit_params(m->hooks->ctx, m, u, backward) : gpt_unit_slice(m, m->params, u);
}
void* gpt_unit_grads(GPT* m, int u) {
    return m->hooks ? m->hooks->unit_grads(m->hooks->ctx, m, u) : gpt_unit_slice(m, m->grads, u);
}
void gpt_unit_backward_done(GPT* m, int u) {
    if (m->hooks) m->hooks->unit_backward_done(m->hooks->ctx, m, u);
}
void gpt_unit_release(GPT* m, int u, int backward) {
    if (m->hooks) m->hooks->unit_release(m->hooks->ctx, m, u, backward);
}

// ---------------------------------------------------------------------------
// initialisation and host access

void gpt_init_random(GPT* m, uint64_t seed) {
    const GPTConfig* c = &m->config;
    float* host = (float*)xcalloc(m->layout.total, sizeof(float));
    float residual_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        float* dst = host + t->offset;
        if (t->kind == P_LN1W || t->kind == P_LN2W || t->kind == P_LNFW) {  // LayerNorm or RMSNorm weights
            for (size_t j = 0; j < t->count; j++) dst[j] = 1.0f;
            continue;
        }
        if (t->rows == 1) continue;  // biases start at zero
        float std = (t->kind == P_ATTPROJW || t->kind == P_FCPROJW) ? residual_std : 0.02f;
        // Padded vocabulary rows stay zero so their logits are exactly zero.
        size_t n = t->kind == P_WTE || t->kind == P_LMHEAD ? (size_t)c->vocab_size * t->cols : t->count;
        uint64_t key = rng_key(seed, (uint64_t)t->kind, (uint64_t)(t->layer + 1));
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) dst[j] = std * rng_normal(key, j);
    }
    gpt_set_params_f32(m, host);
    free(host);
}

// FP32 host values to and from the model's parameter dtype, rounded on the
// host and copied in bounded pieces: a device-side FP32 staging copy of the
// whole model (4 bytes a parameter) would be a transient the planner does
// not bill, above the plan at every start, export and checkpoint. f32_to_bf16
// rounds to nearest even, as both backends' convert does.
#define HOST_CONVERT_PIECE ((size_t)1 << 22)  // elements: 8 MiB of BF16 on the host

void gpt_upload_f32_as(Backend* be, void* dst, DType dt, const float* src, size_t n) {
    if (dt == DTYPE_F32) {
        be->to_device(be, dst, src, n * sizeof(float));
        return;
    }
    if (dt != DTYPE_BF16) fatal("internal: parameters of dtype %s", dtype_name(dt));
    uint16_t* piece = (uint16_t*)malloc((n < HOST_CONVERT_PIECE ? n : HOST_CONVERT_PIECE) * sizeof(uint16_t) + 1);
    if (!piece) fatal("out of host memory converting %zu parameters to BF16", n);
    for (size_t at = 0; at < n; at += HOST_CONVERT_PIECE) {
        size_t len = n - at < HOST_CONVERT_PIECE ? n - at : HOST_CONVERT_PIECE;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < len; i++) piece[i] = f32_to_bf16(src[at + i]);
        be->to_device(be, (uint16_t*)dst + at, piece, len * sizeof(uint16_t));
    }
    free(piece);
}

void gpt_download_as_f32(Backend* be, float* dst, const void* src, DType dt, size_t n) {
    if (dt == DTYPE_F32) {
        be->to_host(be, dst, src, n * sizeof(float));
        return;
    }
    if (dt != DTYPE_BF16) fatal("internal: parameters of dtype %s", dtype_name(dt));
    // The 16-bit values land in the second half of each FP32 piece and are
    // widened front to back in place: writing element i's 4 bytes reaches
    // only 16-bit values already read (i < len), so nothing is lost.
    for (size_t at = 0; at < n; at += HOST_CONVERT_PIECE) {
        size_t len = n - at < HOST_CONVERT_PIECE ? n - at : HOST_CONVERT_PIECE;
        uint16_t* half = (uint16_t*)(dst + at) + len;  // bytes [2 len, 4 len) of the piece
        be->to_host(be, half, (const uint16_t*)src + at, len * sizeof(uint16_t));
        for (size_t i = 0; i < len; i++) dst[at + i] = bf16_to_f32(half[i]);
    }
}

// ZeRO-3: the owned pieces become the parameter shard (and master).
static void set_sharded_params_f32(GPT* m, const float* host_flat) {
    Backend* be = m->be;
    for (int u = 0; u < m->layout.num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        gpt_upload_f32_as(be, (char*)m->params + off * dtype_size(m->dtype), m->dtype, host_flat + lo, len);
        if (m->master) be->to_device(be, m->master + off, host_flat + lo, len * sizeof(float));
    }
}

void gpt_set_params_f32(GPT* m, const float* host_flat) {
    Backend* be = m->be;
    size_t n = m->layout.total;
    fp8_params_changed(m->fp8);
    if (gpt_params_sharded(m)) {
        set_sharded_params_f32(m, host_flat);
        return;
    }
    // 16-bit parameters: the FP32 values become the master copy and the
    // parameters are rounded from them (to nearest even, deterministically).
    gpt_upload_f32_as(be, m->params, m->dtype, host_flat, n);
    for (int u = 0; m->master && u < m->layout.num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        be->to_device(be, m->master + off, host_flat + lo, len * sizeof(float));
    }
}

void gpt_get_params_f32(const GPT* m, float* host_flat) {
    Backend* be = m->be;
    size_t n = m->layout.total;
    if (gpt_params_sharded(m)) {
        // The FP32 values of the owned pieces: master, or the FP32 shard itself.
        const float* src = m->master ? m->master : (const float*)m->params;
        for (int u = 0; u < m->layout.num_units; u++) {
            size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
            be->to_host(be, host_flat + lo, src + off, len * sizeof(float));
        }
        return;
    }
    gpt_download_as_f32(be, host_flat, m->params, m->dtype, n);
    // Where this process holds the FP32 master, it is the exact value.
    for (int u = 0; m->master && u < m->layout.num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        be->to_host(be, host_flat + lo, m->master + off, len * sizeof(float));
    }
}
