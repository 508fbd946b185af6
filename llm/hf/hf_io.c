// hf_io.c: moving the values between a Hugging Face folder and our flat
// layout (the names and orientations are hf_names.c's, the files
// safetensors.c's): one file or shards named by model.safetensors.index.json
// on import, one model.safetensors on export.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm/arch/arch.h"
#include "llm/checkpoint/atomic_file.h"
#include "llm/hf/hf.h"
#include "llm/hf/safetensors.h"
#include "llm/util/atomic_dir.h"
#include "llm/util/json_read.h"

// The folder's safetensors files and, for shards, the index's weight map.
typedef struct {
    StFile* files;
    int num_files;
    JsonValue* index;           // the parsed index (NULL for one file)
    const JsonValue* weight_map;
    char index_path[4096];
    int** used;                 // used[f][i]: tensor i of file f was read
} Source;

static void source_open(Source* s, const char* dir) {
    memset(s, 0, sizeof *s);
    char path[4096];
    snprintf(s->index_path, sizeof s->index_path, "%s/model.safetensors.index.json", dir);
    if (file_exists(s->index_path)) {
        int64_t size = file_size(s->index_path);
        FILE* f = xfopen(s->index_path, "rb");
        char* text = (char*)xmalloc((size_t)size + 1);
        xfread(text, (size_t)size, f, s->index_path, "index");
        fclose(f);
        char err[160];
        s->index = json_parse(text, (size_t)size, err, sizeof err);
        free(text);
        if (!s->index) fatal("%s: not valid JSON: %s", s->index_path, err);
        s->weight_map = json_get(s->index, "weight_map");
        if (!s->weight_map || s->weight_map->type != JSON_OBJECT)
            fatal("%s: no \"weight_map\" object", s->index_path);
        s->files = (StFile*)xcalloc((size_t)s->weight_map->count + 1, sizeof(StFile));
        for (int i = 0; i < s->weight_map->count; i++) {
            const JsonValue* v = &s->weight_map->items[i];
            if (v->type != JSON_STRING) fatal("%s: weight_map entry '%s' is not a file name", s->index_path, s->weight_map->keys[i]);
            if (strchr(v->text, '/') || !strcmp(v->text, "..") || !v->text[0])
                fatal("%s: weight_map entry '%s' names '%s', not a file in the folder", s->index_path,
                      s->weight_map->keys[i], v->text);
            snprintf(path, sizeof path, "%s/%s", dir, v->text);
            int seen = 0;
            for (int j = 0; j < s->num_files; j++) seen |= !strcmp(s->files[j].path, path);
            if (!seen) st_open(&s->files[s->num_files++], path);
        }
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!file_exists(path))
            fatal("%s: no model.safetensors or model.safetensors.index.json in this Hugging Face folder", dir);
        s->files = (StFile*)xcalloc(1, sizeof(StFile));
        st_open(&s->files[0], path);
        s->num_files = 1;
    }
    s->used = (int**)xmalloc((size_t)s->num_files * sizeof(int*));
    for (int i = 0; i < s->num_files; i++) s->used[i] = (int*)xcalloc((size_t)s->files[i].num_tensors + 1, sizeof(int));
}

static void source_close(Source* s) {
    for (int i = 0; i < s->num_files; i++) {
        st_close(&s->files[i]);
        free(s->used[i]);
    }
    free(s->files);
    free(s->used);
    if (s->index) json_value_free(s->index);
}

// The file and tensor of `name`; NULL in *file when absent.
static const StTensor* lookup_exact(Source* s, const char* name, int* file) {
    *file = -1;
    if (s->index) {
        const char* fname = json_get_string(s->weight_map, name);
        if (!fname) return NULL;
        for (int i = 0; i < s->num_files; i++) {
            const char* base = strrchr(s->files[i].path, '/');
            if (strcmp(base ? base + 1 : s->files[i].path, fname)) continue;
            const StTensor* t = st_find(&s->files[i], name);
            if (!t) fatal("%s: weight_map puts tensor '%s' in %s, which does not hold it", s->index_path, name, s->files[i].path);
            *file = i;
            return t;
        }
        return NULL;
    }
    const StTensor* t = st_find(&s->files[0], name);
    if (t) *file = 0;
    return t;
}

// `name`, or the same without its model prefix ("transformer." or "model."):
// a GPT2Model or LlamaModel saves its tensors without one.
static const StTensor* lookup(Source* s, const char* name, int* file) {
    const StTensor* t = lookup_exact(s, name, file);
    if (t) return t;
    const char* dot = strchr(name, '.');
    if (!strncmp(name, "transformer.", 12) || !strncmp(name, "model.", 6)) return lookup_exact(s, dot + 1, file);
    return NULL;
}

static void shape_text(char* out, size_t size, int ndim, const int64_t* shape) {
    size_t at = (size_t)snprintf(out, size, "[");
    for (int i = 0; i < ndim && at < size; i++) at += (size_t)snprintf(out + at, size - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < size) snprintf(out + at, size - at, "]");
}

// Hugging Face's shape of h: (cols) for a vector, (cols, rows) transposed, else (rows, cols).
static int hf_shape(const HfTensor* h, int64_t* shape) {
    if (h->is_vector) { shape[0] = h->cols; return 1; }
    shape[0] = h->transpose ? h->cols : h->rows;
    shape[1] = h->transpose ? h->rows : h->cols;
    return 2;
}

static const ParamTensor* our_tensor(const GPT* m, const HfTensor* h) {
    const ParamTensor* t = &m->layout.tensors[param_tensor_index(&m->config, h->kind, h->layer)];
    if (t->cols != h->cols || h->row0 + h->rows > t->rows)
        fatal("internal: Hugging Face tensor %s (rows %d..%d of %d columns) does not fit %s (%d x %d)", h->name, h->row0,
              h->row0 + h->rows, h->cols, param_kind_name(h->kind), t->rows, t->cols);
    return t;
}

void hf_load_weights(GPT* m, const char* dir) {
    const GPTConfig* c = &m->config;
    Source s;
    source_open(&s, dir);
    int n;
    HfTensor* map = hf_tensor_map(c, &n);
    float* flat = (float*)xcalloc(m->layout.total, sizeof(float));  // padding rows stay zero
    float* tmp = NULL;
    size_t tmp_cap = 0;
    for (int i = 0; i < n; i++) {
        const HfTensor* h = &map[i];
        int fi;
        const StTensor* st = lookup(&s, h->name, &fi);
        if (!st)
            fatal("%s: tensor '%s' is missing (a %s model of this config.json needs it)",
                  s.index ? s.index_path : s.files[0].path, h->name, arch_name(c->arch));
        s.used[fi][st - s.files[fi].tensors] = 1;
        int64_t want[2];
        int nd = hf_shape(h, want);
        int same = st->ndim == nd;
        for (int d = 0; same && d < nd; d++) same = st->shape[d] == want[d];
        if (!same) {
            char a[96], b[96];
            shape_text(a, sizeof a, st->ndim, st->shape);
            shape_text(b, sizeof b, nd, want);
            fatal("%s: tensor '%s' has shape %s but config.json implies %s", s.files[fi].path, h->name, a, b);
        }
        size_t count = (size_t)h->rows * h->cols;
        if (count > tmp_cap) {
            free(tmp);
            tmp = (float*)xmalloc(count * sizeof(float));
            tmp_cap = count;
        }
        st_read_f32(&s.files[fi], st, tmp);
        for (size_t j = 0; j < count; j++)
            if (!isfinite(tmp[j]))
                fatal("%s: tensor '%s' holds a non-finite value (%g) at element %zu", s.files[fi].path, h->name, tmp[j], j);
        const ParamTensor* t = our_tensor(m, h);
        float* dst = flat + t->offset + (size_t)h->row0 * h->cols;
        if (h->transpose) {  // file (cols, rows) -> ours (rows, cols)
            for (int r = 0; r < h->rows; r++)
                for (int k = 0; k < h->cols; k++) dst[(size_t)r * h->cols + k] = tmp[(size_t)k * h->rows + r];
        } else {
            memcpy(dst, tmp, count * sizeof(float));
        }
    }
    free(tmp);
    // Every tensor in the files is one we read or one that may be ignored.
    for (int f = 0; f < s.num_files; f++)
        for (int i = 0; i < s.files[f].num_tensors; i++)
            if (!s.used[f][i] && !hf_tensor_ignorable(c, s.files[f].tensors[i].name))
                fatal("%s: unexpected tensor '%s' (not part of a %s model of this config.json)", s.files[f].path,
                      s.files[f].tensors[i].name, arch_name(c->arch));
    free(map);
    source_close(&s);
    gpt_set_params_f32(m, flat);
    free(flat);
}

const char* const HF_MODEL_FILES[] = {"config.json", "model.bin", "model.safetensors", "model.safetensors.index.json",
                                     "model-*-of-*.safetensors", NULL};

void hf_write_files(const GPT* m, const float* flat, const char* dir, DType dtype, int eot_id) {
    const GPTConfig* c = &m->config;
    char path[4096];
    int n;
    HfTensor* map = hf_tensor_map(c, &n);
    StWriteTensor* ws = (StWriteTensor*)xcalloc((size_t)n, sizeof(StWriteTensor));
    float** owned = (float**)xcalloc((size_t)n, sizeof(float*));
    for (int i = 0; i < n; i++) {
        const HfTensor* h = &map[i];
        const ParamTensor* t = our_tensor(m, h);
        const float* src = flat + t->offset + (size_t)h->row0 * h->cols;
        ws[i].name = h->name;
        ws[i].ndim = hf_shape(h, ws[i].shape);
        if (h->transpose) {  // ours (rows, cols) -> file (cols, rows)
            float* buf = (float*)xmalloc((size_t)h->rows * h->cols * sizeof(float));
            for (int r = 0; r < h->rows; r++)
                for (int k = 0; k < h->cols; k++) buf[(size_t)k * h->rows + r] = src[(size_t)r * h->cols + k];
            owned[i] = buf;
            src = buf;
        }
        ws[i].data = src;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char* meta[] = {"format", "pt", NULL};
    st_write(path, ws, n, dtype == DTYPE_BF16 ? ST_BF16 : ST_F32, meta);
    for (int i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(ws);
    free(map);

    char* json = hf_config_json(c, dtype, eot_id);
    snprintf(path, sizeof path, "%s/config.json", dir);
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, json, strlen(json));
    atomic_file_commit(&af);
    free(json);
}

void hf_write_folder(const GPT* m, const float* flat, const char* dir, DType dtype, int eot_id, const char* flag) {
    AtomicDir ad;
    char err[8192];
    if (atomic_dir_begin(&ad, dir, HF_MODEL_FILES, err, sizeof err)) fatal("%s %s: %s", flag, dir, err);
    hf_write_files(m, flat, atomic_dir_path(&ad), dtype, eot_id);
    if (atomic_dir_commit(&ad, err, sizeof err)) fatal("%s %s: %s", flag, dir, err);
}
