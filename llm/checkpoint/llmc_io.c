// llmc_io.c: reading and writing llm.c model files.
#include "llm/checkpoint/llmc_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/checkpoint/atomic_file.h"
#include "kernels/bf16.h"

size_t llmc_num_elements(const GPTConfig* c) {
    // The file stores wte (and an untied lm_head) with all Vp rows, the padding included.
    size_t heads = gpt_has_kind(c, P_LMHEAD) ? 2 : 1;
    return gpt_num_params(c) + heads * (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
}

// Walks llm.c's order: for each kind, for each layer (or once), one tensor.
// `visit` gets the flat tensor and the offset of its data in llm.c's order.
// A Llama model's kinds go in the same kind-major order (checkpoints store
// it so; llm.c's model files hold GPT-2 only).
typedef void (*TensorVisit)(const ParamTensor* t, size_t llmc_offset, void* ctx);
static void walk_llmc_order(const GPT* m, TensorVisit visit, void* ctx) {
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        if (!gpt_has_kind(&m->config, (ParamKind)k)) continue;
        int layers = param_kind_is_per_layer((ParamKind)k) ? m->config.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            const ParamTensor* t =
                &m->layout.tensors[param_tensor_index(&m->config, (ParamKind)k, param_kind_is_per_layer((ParamKind)k) ? l : -1)];
            visit(t, off, ctx);
            off += t->count;
        }
    }
}

typedef struct { const float* src; float* dst; } CopyCtx;
static void copy_to_llmc(const ParamTensor* t, size_t off, void* ctx) {
    CopyCtx* c = (CopyCtx*)ctx;
    memcpy(c->dst + off, c->src + t->offset, t->count * sizeof(float));
}
static void copy_to_flat(const ParamTensor* t, size_t off, void* ctx) {
    CopyCtx* c = (CopyCtx*)ctx;
    memcpy(c->dst + t->offset, c->src + off, t->count * sizeof(float));
}

typedef struct { const GPT* m; size_t* offsets; } OffsetCtx;
static void record_offset(const ParamTensor* t, size_t off, void* ctx) {
    OffsetCtx* c = (OffsetCtx*)ctx;
    c->offsets[t - c->m->layout.tensors] = off;
}

void llmc_tensor_offsets(const GPT* m, size_t* offsets) {
    OffsetCtx c = {m, offsets};
    walk_llmc_order(m, record_offset, &c);
}

void llmc_from_flat(const GPT* m, const float* flat, float* llmc) {
    CopyCtx c = {flat, llmc};
    walk_llmc_order(m, copy_to_llmc, &c);
}

void llmc_to_flat(const GPT* m, const float* llmc, float* flat) {
    memset(flat, 0, m->layout.total * sizeof(float));
    CopyCtx c = {llmc, flat};
    walk_llmc_order(m, copy_to_flat, &c);
}

static void read_header(const char* path, int32_t h[256]) {
    int64_t size = file_size(path);
    if (size < 0) fatal("cannot open model file '%s': no such file", path);
    FILE* f = xfopen(path, "rb");
    xfread(h, 256 * sizeof(int32_t), f, path, "the 1024-byte model header");
    fclose(f);
    if (h[0] == LLAMA_WEIGHTS_MAGIC)
        fatal("%s: a Llama's weights from a checkpoint (llm.c's format holds GPT-2 only): resume from its folder "
              "with --resume, or give --init-from a Hugging Face folder (--export-hf or --model-dir writes one)",
              path);
    if (h[0] != LLMC_MODEL_MAGIC)
        fatal("%s: bad magic %d (expected %d): not an llm.c model file", path, h[0], LLMC_MODEL_MAGIC);
    if (h[1] != LLMC_VERSION_F32 && h[1] != LLMC_VERSION_BF16)
        fatal("%s: unsupported model file version %d (expected %d for float32 or %d for bfloat16)", path, h[1],
              LLMC_VERSION_F32, LLMC_VERSION_BF16);
}

// The header and the model shape it describes, checked against the file's
// size; *file_vp: the file's own padded vocabulary (its wte rows).
static GPTConfig read_config(const char* path, int32_t h[256], int* file_vp) {
    read_header(path, h);
    GPTConfig c;
    memset(&c, 0, sizeof c);  // a GPT-2 (ARCH_GPT2): llm.c's format holds no other
    c.max_seq_len = h[2];
    c.vocab_size = h[3];
    c.num_layers = h[4];
    c.num_heads = h[5];
    c.channels = h[6];
    char why[160];
    if (gpt_config_invalid(&c, why, sizeof why))
        fatal("%s: invalid model shape in header (max_seq_len %d, vocab %d, layers %d, heads %d, channels %d): %s", path,
              c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels, why);
    gpt_config_finish(&c);
    // llm.c pads to 128 as we do; a file padded differently is still readable
    // (only its real vocabulary rows are used), so size it by its own padding.
    *file_vp = h[7] > 0 ? h[7] : c.vocab_size;
    if (*file_vp < c.vocab_size || *file_vp > GPT_MAX_VOCAB)
        fatal("%s: padded vocabulary %d is outside %d..%d (the vocabulary and the largest one)", path, *file_vp,
              c.vocab_size, GPT_MAX_VOCAB);
    GPTConfig fc = c;
    fc.padded_vocab_size = *file_vp;
    size_t elt = h[1] == LLMC_VERSION_F32 ? 4 : 2;
    int64_t want = 1024 + (int64_t)(llmc_num_elements(&fc) * elt);
    int64_t size = file_size(path);
    if (size != want)
        fatal("%s: file is %lld bytes but its header describes %lld bytes (truncated or not a model of this shape)",
              path, (long long)size, (long long)want);
    return c;
}

void llmc_read_config(const char* path, GPTConfig* out) {
    int32_t h[256];
    int file_vp;
    *out = read_config(path, h, &file_vp);
}

// A NaN or an infinity among the weights would only surface as a skipped
// step (or a diverged run) later; refuse the file, naming the tensor.
static void check_finite(const GPT* m, const float* flat, const char* path) {
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        const float* v = flat + t->offset;
        for (size_t j = 0; j < t->count; j++) {
            if (isfinite(v[j])) continue;
            char layer[32] = "";
            if (t->layer >= 0) snprintf(layer, sizeof layer, " of layer %d", t->layer);
            fatal("%s: tensor %s%s holds a non-finite value (%g) at element %zu of %zu (row %zu, column %zu)", path,
                  param_kind_name(t->kind), layer, v[j], j, t->count, j / (size_t)t->cols, j % (size_t)t->cols);
        }
    }
}

void llmc_load_weights(GPT* m, const char* path) {
    int32_t h[256];
    int file_vp;
    GPTConfig fc = read_config(path, h, &file_vp);
    const GPTConfig* c = &m->config;
    if (fc.num_layers != c->num_layers || fc.channels != c->channels || fc.num_heads != c->num_heads ||
        fc.vocab_size != c->vocab_size || fc.max_seq_len != c->max_seq_len)
        fatal("%s: model shape (L=%d C=%d NH=%d V=%d maxT=%d) does not match the configured model (L=%d C=%d NH=%d V=%d maxT=%d)",
              path, fc.num_layers, fc.channels, fc.num_heads, fc.vocab_size, fc.max_seq_len, c->num_layers,
              c->channels, c->num_heads, c->vocab_size, c->max_seq_len);
    size_t C = c->channels;
    size_t elt = h[1] == LLMC_VERSION_F32 ? 4 : 2;
    GPTConfig filec = *c;
    filec.padded_vocab_size = file_vp;
    size_t n_file = llmc_num_elements(&filec);

    // Read everything as float32 in the file's own order.
    FILE* f = xfopen(path, "rb");
    fseek(f, 1024, SEEK_SET);
    float* file_vals = (float*)xmalloc(n_file * sizeof(float));
    if (elt == 4) {
        xfread(file_vals, n_file * 4, f, path, "parameters");
    } else {
        uint16_t* raw = (uint16_t*)xmalloc(n_file * 2);
        xfread(raw, n_file * 2, f, path, "parameters");
        for (size_t i = 0; i < n_file; i++) file_vals[i] = bf16_to_f32(raw[i]);
        free(raw);
    }
    fclose(f);

    // Re-pad wte to our padded vocabulary: real rows copied, padded rows zero.
    size_t n_ours = llmc_num_elements(c);
    float* ours = (float*)xcalloc(n_ours, sizeof(float));
    size_t wte_file = (size_t)file_vp * C, wte_ours = (size_t)c->padded_vocab_size * C;
    memcpy(ours, file_vals, (size_t)c->vocab_size * C * sizeof(float));
    memcpy(ours + wte_ours, file_vals + wte_file, (n_file - wte_file) * sizeof(float));
    free(file_vals);

    float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
    llmc_to_flat(m, ours, flat);
    free(ours);
    check_finite(m, flat, path);
    gpt_set_params_f32(m, flat);
    free(flat);
}

void llmc_header(const GPTConfig* c, DType dtype, int32_t h[256]) {
    if (dtype != DTYPE_F32 && dtype != DTYPE_BF16) fatal("llm.c model files hold float32 or bfloat16, not %s", dtype_name(dtype));
    memset(h, 0, 256 * sizeof(int32_t));
    h[0] = c->arch == ARCH_GPT2 ? LLMC_MODEL_MAGIC : LLAMA_WEIGHTS_MAGIC;
    h[1] = dtype == DTYPE_F32 ? LLMC_VERSION_F32 : LLMC_VERSION_BF16;
    h[2] = c->max_seq_len;
    h[3] = c->vocab_size;
    h[4] = c->num_layers;
    h[5] = c->num_heads;
    h[6] = c->channels;
    h[7] = c->padded_vocab_size;
    if (c->arch != ARCH_GPT2) {
        h[8] = c->num_kv_heads;
        h[9] = c->mlp_hidden;
        h[10] = c->tie_embeddings;
    }
}

void llmc_save_weights(const GPT* m, const char* path, DType dtype) {
    float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
    gpt_get_params_f32(m, flat);
    llmc_write_weights(m, flat, path, dtype);
    free(flat);
}

void llmc_write_weights(const GPT* m, const float* flat, const char* path, DType dtype) {
    const GPTConfig* c = &m->config;
    int32_t h[256];
    llmc_header(c, dtype, h);
    size_t n = llmc_num_elements(c);
    float* vals = (float*)xmalloc(n * sizeof(float));
    llmc_from_flat(m, flat, vals);

    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, h, sizeof h);
    if (dtype == DTYPE_F32) {
        atomic_file_write(&af, vals, n * sizeof(float));
    } else {
        uint16_t* raw = (uint16_t*)xmalloc(n * 2);
        for (size_t i = 0; i < n; i++) raw[i] = f32_to_bf16(vals[i]);
        atomic_file_write(&af, raw, n * 2);
        free(raw);
    }
    atomic_file_commit(&af);
    free(vals);
}
