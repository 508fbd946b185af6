// ckpt_manifest.c: building, writing and reading checkpoint manifests.
#include "llm/checkpoint/ckpt_manifest.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "llm/arch/arch.h"
#include "llm/util/json_read.h"
#include "llm/util/strbuf.h"

void ckpt_shard_name(char* buf, size_t size, int shard, int shards) {
    snprintf(buf, size, "shard_%05d_of_%05d.bin", shard, shards);
}

static void add_section(Manifest* man, const char* name, DType dtype, int64_t* offset) {
    CkptSection* s = &man->sections[man->num_sections++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->dtype = dtype;
    s->offset = *offset;
    *offset += man->shard_elements * (int64_t)dtype_size(dtype);
}

void manifest_describe(Manifest* man, const GPT* m) {
    memset(man, 0, sizeof *man);
    const ParamLayout* pl = &m->layout;
    man->version = CKPT_VERSION;
    man->world = m->world;
    man->layout_world = pl->world;
    man->zero_stage = m->zero_stage;
    snprintf(man->precision, sizeof man->precision, "%s", dtype_name(m->dtype));
    man->model = m->config;
    man->num_units = pl->num_units;
    man->unit_begin = (int64_t*)xmalloc(((size_t)pl->num_units + 1) * sizeof(int64_t));
    for (int u = 0; u <= pl->num_units; u++) man->unit_begin[u] = (int64_t)pl->unit_begin[u];
    man->num_tensors = pl->num_tensors;
    man->tensors = (CkptTensor*)xcalloc((size_t)pl->num_tensors, sizeof(CkptTensor));
    for (int i = 0; i < pl->num_tensors; i++) {
        const ParamTensor* t = &pl->tensors[i];
        CkptTensor* c = &man->tensors[i];
        c->kind = t->kind;
        c->layer = t->layer;
        c->unit = t->unit;
        c->offset = (int64_t)(t->offset - pl->unit_begin[t->unit]);
        c->elements = (int64_t)t->count;
    }
    man->shard_elements = (int64_t)(pl->total / (size_t)pl->world);
    int64_t off = CKPT_SHARD_HEADER_BYTES;
    add_section(man, "master", DTYPE_F32, &off);
    add_section(man, "adam_m", m->adam_dtype, &off);  // --adam-dtype: fp32 or bf16
    add_section(man, "adam_v", m->adam_dtype, &off);
    // 16-bit parameters are rounded stochastically from the masters, so they
    // cannot be recomputed from them: saved as they are.
    if (m->dtype != DTYPE_F32) add_section(man, "params", m->dtype, &off);
}

void manifest_set_config(Manifest* man, const TrainConfig* cfg) {
    int n = config_num_flags();
    man->num_flags = n;
    man->flag_names = (char**)xcalloc((size_t)n, sizeof(char*));
    man->flag_values = (char**)xcalloc((size_t)n, sizeof(char*));
    man->flag_is_string = (int*)xcalloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++) {
        char value[4096];
        config_flag_value(cfg, i, value, sizeof value);
        man->flag_names[i] = xstrdup(config_flag_name(i));
        man->flag_values[i] = xstrdup(value);
        man->flag_is_string[i] = config_flag_is_string(i);
    }
}

void manifest_add_file(Manifest* man, const CkptFileEntry* e) {
    man->files = (CkptFileEntry*)xrealloc(man->files, ((size_t)man->num_files + 1) * sizeof(CkptFileEntry));
    man->files[man->num_files++] = *e;
}

void manifest_set_guard(Manifest* man, const Guard* g) {
    CkptGuard* c = &man->guard;
    if (!c->history || c->window != g->spike_window) {
        free(c->history);
        c->history = (double*)xcalloc((size_t)g->spike_window, sizeof(double));
    }
    c->present = 1;
    c->window = g->spike_window;
    c->filled = g->filled;
    c->next = g->next;
    memcpy(c->history, g->history, (size_t)g->spike_window * sizeof(double));
    c->bad_in_row = g->bad_in_row;
    c->last_skipped_step = g->last_skipped_step;
    c->last_action = (int)g->last_action;
    c->skipped = g->skipped;
    c->nonfinite = g->nonfinite;
    c->spikes = g->spikes;
}

void manifest_restore_guard_window(const Manifest* man, Guard* g) {
    const CkptGuard* c = &man->guard;
    if (!c->present) return;
    if (c->window == g->spike_window) {
        // The same ring, slot for slot: the window's sums run in the same order.
        memcpy(g->history, c->history, (size_t)c->window * sizeof(double));
        g->filled = c->filled;
        g->next = c->next;
    } else {
        // Another --spike-window: the newest losses, oldest first.
        int k = c->filled < g->spike_window ? c->filled : g->spike_window;
        for (int i = 0; i < k; i++) {
            int age = k - 1 - i;  // 0: the newest
            g->history[i] = c->history[((c->next - 1 - age) % c->window + c->window) % c->window];
        }
        g->filled = k;
        g->next = k % g->spike_window;
    }
}

void manifest_restore_guard(const Manifest* man, Guard* g) {
    const CkptGuard* c = &man->guard;
    if (!c->present) return;
    manifest_restore_guard_window(man, g);
    g->bad_in_row = c->bad_in_row;
    g->last_skipped_step = c->last_skipped_step;
    g->last_action = (GuardAction)c->last_action;
    g->skipped = c->skipped;
    g->nonfinite = c->nonfinite;
    g->spikes = c->spikes;
}

void manifest_set_fp8(Manifest* man, const Fp8State* s) {
    fp8_snapshot_free(&man->fp8);
    man->fp8_present = s != NULL;
    if (s) fp8_snapshot_take(s, &man->fp8);
}

int manifest_restore_fp8(const Manifest* man, Fp8State* s, char* why, size_t whysize) {
    if (!man->fp8_present) {
        snprintf(why, whysize, "the checkpoint's run did not train in FP8");
        return 0;
    }
    return fp8_snapshot_restore(s, &man->fp8, why, whysize);
}

void manifest_free(Manifest* man) {
    free(man->guard.history);
    fp8_snapshot_free(&man->fp8);
    free(man->unit_begin);
    free(man->tensors);
    free(man->files);
    for (int i = 0; i < man->num_flags; i++) {
        free(man->flag_names[i]);
        free(man->flag_values[i]);
    }
    free(man->flag_names);
    free(man->flag_values);
    free(man->flag_is_string);
    memset(man, 0, sizeof *man);
}

int manifest_section(const Manifest* man, const char* name) {
    for (int i = 0; i < man->num_sections; i++)
        if (strcmp(man->sections[i].name, name) == 0) return i;
    return -1;
}

int64_t manifest_shard_bytes(const Manifest* man) {
    int64_t end = CKPT_SHARD_HEADER_BYTES;
    for (int i = 0; i < man->num_sections; i++) {
        int64_t e = man->sections[i].offset + man->shard_elements * (int64_t)dtype_size(man->sections[i].dtype);
        if (e > end) end = e;
    }
    return end;
}

// ---------------------------------------------------------------------------
// writing

// A float array, every value exact (%.9g reads back to the same float);
// the non-finite ones as strings.
static void write_floats(StrBuf* sb, const char* name, const float* v, size_t n) {
    sb_printf(sb, ", \"%s\": [", name);
    for (size_t i = 0; i < n; i++) {
        const char* sep = i ? "," : "";
        if (isnan(v[i])) sb_printf(sb, "%s\"nan\"", sep);
        else if (isinf(v[i])) sb_printf(sb, "%s\"%sinf\"", sep, v[i] < 0 ? "-" : "");
        else sb_printf(sb, "%s%.9g", sep, (double)v[i]);
    }
    sb_printf(sb, "]");
}

static void write_fp8(StrBuf* sb, const Manifest* man) {
    if (!man->fp8_present) {
        sb_printf(sb, "  \"fp8\": null,\n");
        return;
    }
    const Fp8Snapshot* f = &man->fp8;
    sb_printf(sb, "  \"fp8\": {\"recipe\": \"%s\", \"formats\": \"%s\", \"margin\": %d, \"tensors\": %d",
              fp8_recipe_name(f->recipe),
              f->recipe == FP8_NVFP4         ? "e2m1 everywhere, e4m3 block scales, fp32 tensor scales"
              : fp8_recipe_is_block(f->recipe) ? "e4m3 everywhere, block-scaled"
                                               : "e4m3 inputs and weights, e5m2 gradients",
              f->margin, f->tensors);
    if (f->history > 0) {
        sb_printf(sb, ", \"amax_history_len\": %d, \"position\": %d, \"steps_recorded\": %d", f->history, f->pos,
                  f->steps_recorded);
        write_floats(sb, "scale", f->scale, (size_t)f->tensors);
        write_floats(sb, "scale_inv", f->scale_inv, (size_t)f->tensors);
        write_floats(sb, "amax_history", f->amax_history, (size_t)f->history * f->tensors);
    }
    sb_printf(sb, "},\n");
}

char* manifest_to_json(const Manifest* man) {
    StrBuf sb = {0};
    const GPTConfig* c = &man->model;
    // This writer writes the current format (every version 2 member, and the
    // seal), whatever version the manifest was read from.
    sb_printf(&sb, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n", CKPT_FORMAT, CKPT_VERSION);
    sb_printf(&sb, "  \"step\": %d,\n  \"adam_step\": %d,\n", man->step, man->adam_step);
    sb_printf(&sb, "  \"world\": %d,\n  \"layout_world\": %d,\n  \"zero_stage\": %d,\n", man->world,
              man->layout_world, man->zero_stage);
    sb_printf(&sb, "  \"precision\": \"%s\",\n", man->precision);
    write_fp8(&sb, man);
    sb_printf(&sb,
              "  \"rng\": {\"seed\": %llu, \"step\": %d, \"streams\": \"initialisation (seed, tensor kind, layer); "
              "data order (seed, epoch) and (seed, epoch, shard); AdamW rounding (seed, 0xADA3, step); "
              "samples (seed, 0x5A3F1E, step)\"},\n",
              (unsigned long long)man->seed, man->step);
    // epoch and window_in_epoch repeat train_position in the terms of the
    // data, so that a reader can check one against the other.
    uint64_t W = man->windows_per_epoch;
    sb_printf(&sb,
              "  \"data\": {\"train_position\": %llu, \"windows_per_epoch\": %llu, \"epoch\": %llu, "
              "\"window_in_epoch\": %llu, \"tokens_per_step\": %lld},\n",
              (unsigned long long)man->data_position, (unsigned long long)W,
              (unsigned long long)(W ? man->data_position / W : 0), (unsigned long long)(W ? man->data_position % W : 0),
              (long long)man->tokens_per_step);
    sb_printf(&sb,
              "  \"model\": {\"arch\": \"%s\", \"layers\": %d, \"channels\": %d, \"heads\": %d, \"kv_heads\": %d, "
              "\"mlp_hidden\": %d, \"tie_embeddings\": %d, \"rope_theta\": %.9g, \"rope_scaling\": %.9g, ",
              arch_name(c->arch), c->num_layers, c->channels, c->num_heads, c->num_kv_heads, c->mlp_hidden,
              c->tie_embeddings, c->rope_theta, c->rope_scaling.factor);
    // The scaling's other values (a Hugging Face config may set any): low and
    // high frequency factors and the original context.
    if (c->rope_scaling.factor > 0)
        sb_printf(&sb, "\"rope_scaling_bands\": [%.9g, %.9g, %d], ", c->rope_scaling.low_freq_factor,
                  c->rope_scaling.high_freq_factor, c->rope_scaling.original_max_pos);
    // A Llama's RMSNorm epsilon where it is not Llama 3's 1e-5 (a Hugging Face config's rms_norm_eps).
    if (c->arch == ARCH_LLAMA && c->norm_eps > 0 && c->norm_eps != 1e-5f)
        sb_printf(&sb, "\"norm_eps\": %.9g, ", (double)c->norm_eps);
    sb_printf(&sb, "\"vocab_size\": %d, \"padded_vocab_size\": %d, \"max_seq_len\": %d},\n", c->vocab_size,
              c->padded_vocab_size, c->max_seq_len);
    if (man->guard.present) {
        const CkptGuard* g = &man->guard;
        sb_printf(&sb,
                  "  \"guard\": {\"bad_in_row\": %d, \"skipped\": %ld, \"nonfinite\": %ld, \"spikes\": %ld, "
                  "\"last_skipped_step\": %d, \"last_action\": %d, \"window\": %d, \"filled\": %d, \"next\": %d, "
                  "\"history\": [",
                  g->bad_in_row, g->skipped, g->nonfinite, g->spikes, g->last_skipped_step, g->last_action, g->window,
                  g->filled, g->next);
        // Every digit, so that the window's sums come back bit for bit.
        for (int i = 0; i < g->window; i++)
            sb_printf(&sb, "%s%.17g", i ? ", " : "", isfinite(g->history[i]) ? g->history[i] : 0.0);
        sb_printf(&sb, "]},\n");
    }
    sb_printf(&sb, "  \"layout\": {\n    \"unit_begin\": [");
    for (int u = 0; u <= man->num_units; u++) sb_printf(&sb, "%s%lld", u ? ", " : "", (long long)man->unit_begin[u]);
    sb_printf(&sb, "],\n    \"tensors\": [\n");
    for (int i = 0; i < man->num_tensors; i++) {
        const CkptTensor* t = &man->tensors[i];
        sb_printf(&sb, "      {\"name\": \"%s\", \"layer\": %d, \"unit\": %d, \"offset\": %lld, \"elements\": %lld}%s\n",
                  param_kind_name(t->kind), t->layer, t->unit, (long long)t->offset, (long long)t->elements,
                  i + 1 < man->num_tensors ? "," : "");
    }
    sb_printf(&sb, "    ]\n  },\n");
    sb_printf(&sb, "  \"shard_elements\": %lld,\n  \"sections\": [", (long long)man->shard_elements);
    for (int i = 0; i < man->num_sections; i++) {
        const CkptSection* s = &man->sections[i];
        sb_printf(&sb, "%s\n    {\"name\": \"%s\", \"dtype\": \"%s\", \"offset\": %lld}", i ? "," : "", s->name,
                  dtype_name(s->dtype), (long long)s->offset);
    }
    sb_printf(&sb, "\n  ],\n  \"files\": [");
    for (int i = 0; i < man->num_files; i++) {
        const CkptFileEntry* f = &man->files[i];
        sb_printf(&sb, "%s\n    {\"name\": ", i ? "," : "");
        sb_json_string(&sb, f->name);
        if (f->shard >= 0) sb_printf(&sb, ", \"shard\": %d", f->shard);
        sb_printf(&sb, ", \"bytes\": %lld, \"xxh3\": \"%016llx\"}", (long long)f->bytes, (unsigned long long)f->xxh3);
    }
    sb_printf(&sb, "\n  ],\n  \"config\": {");
    for (int i = 0; i < man->num_flags; i++) {
        sb_printf(&sb, "%s\n    ", i ? "," : "");
        sb_json_string(&sb, man->flag_names[i]);
        sb_printf(&sb, ": ");
        if (man->flag_is_string[i]) sb_json_string(&sb, man->flag_values[i]);
        else sb_printf(&sb, "%s", man->flag_values[i]);
    }
    sb_printf(&sb, "\n  },\n");
    char* sealed = manifest_seal(sb.data, sb.len);
    sb_free(&sb);
    return sealed;
}

// The seal is the manifest's last member, on a line of its own: the XXH3 of
// every byte before that line. A write torn anywhere loses it (a manifest
// without its seal is refused), and an edit anywhere changes the hash.
#define SEAL_KEY "  \"manifest_xxh3\": \""
#define SEAL_END "\"\n}\n"
#define SEAL_BYTES (sizeof SEAL_KEY - 1 + 16 + sizeof SEAL_END - 1)

char* manifest_seal(const char* body, size_t len) {
    char* out = (char*)xmalloc(len + SEAL_BYTES + 1);
    memcpy(out, body, len);
    snprintf(out + len, SEAL_BYTES + 1, "%s%016llx%s", SEAL_KEY, (unsigned long long)XXH3_64bits(body, len), SEAL_END);
    return out;
}

size_t manifest_seal_offset(const char* text, size_t len) {
    if (len < SEAL_BYTES) return len;
    size_t at = len - SEAL_BYTES;
    if (memcmp(text + at, SEAL_KEY, sizeof SEAL_KEY - 1) != 0 ||
        memcmp(text + len - (sizeof SEAL_END - 1), SEAL_END, sizeof SEAL_END - 1) != 0)
        return len;
    return at;
}

// ---------------------------------------------------------------------------
// reading

typedef struct {
    char* why;
    size_t size;
    int bad;
} Problem;

static int problem(Problem* p, const char* fmt, ...) PRINTF_LIKE(2, 3);
static int problem(Problem* p, const char* fmt, ...) {
    if (!p->bad) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->why, p->size, fmt, ap);
        va_end(ap);
    }
    p->bad = 1;
    return 0;
}

static int get_int(Problem* p, const JsonValue* obj, const char* key, int* out, int lo) {
    if (!json_get_int(obj, key, out)) return problem(p, "'%s' is missing or not an integer", key);
    if (*out < lo) return problem(p, "'%s' is %d (must be at least %d)", key, *out, lo);
    return 1;
}

static int get_i64(Problem* p, const JsonValue* obj, const char* key, int64_t* out) {
    if (!json_get_i64(obj, key, out) || *out < 0) return problem(p, "'%s' is missing or not a non-negative integer", key);
    return 1;
}

static int parse_dtype(const char* s, DType* out) {
    DType all[] = {DTYPE_F32, DTYPE_BF16, DTYPE_FP8_E4M3, DTYPE_FP8_E5M2};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, dtype_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}

static int parse_kind(const char* s, ParamKind* out) {
    for (int k = 0; s && k < NUM_PARAM_KINDS; k++)
        if (strcmp(s, param_kind_name((ParamKind)k)) == 0) {
            *out = (ParamKind)k;
            return 1;
        }
    return 0;
}

static int parse_layout(Problem* p, const JsonValue* root, Manifest* man) {
    const JsonValue* layout = json_get(root, "layout");
    const JsonValue* ub = json_get(layout, "unit_begin");
    const JsonValue* ts = json_get(layout, "tensors");
    if (!ub || ub->type != JSON_ARRAY || ub->count < 2) return problem(p, "'layout.unit_begin' is missing");
    if (!ts || ts->type != JSON_ARRAY || ts->count < 1) return problem(p, "'layout.tensors' is missing");
    man->num_units = ub->count - 1;
    man->unit_begin = (int64_t*)xmalloc((size_t)ub->count * sizeof(int64_t));
    for (int u = 0; u <= man->num_units; u++) {
        if (!json_as_i64(&ub->items[u], &man->unit_begin[u]) || man->unit_begin[u] < 0 ||
            (u > 0 && man->unit_begin[u] <= man->unit_begin[u - 1]) ||
            man->unit_begin[u] % man->layout_world != 0)
            return problem(p, "'layout.unit_begin' is not an increasing list of multiples of layout_world");
    }
    if (man->unit_begin[0] != 0) return problem(p, "'layout.unit_begin' does not start at 0");
    man->num_tensors = ts->count;
    man->tensors = (CkptTensor*)xcalloc((size_t)ts->count, sizeof(CkptTensor));
    for (int i = 0; i < ts->count; i++) {
        const JsonValue* t = &ts->items[i];
        CkptTensor* c = &man->tensors[i];
        if (!parse_kind(json_get_string(t, "name"), &c->kind)) return problem(p, "tensor %d has an unknown name", i);
        if (!json_get_int(t, "layer", &c->layer) || !json_get_int(t, "unit", &c->unit) ||
            !json_get_i64(t, "offset", &c->offset) || !json_get_i64(t, "elements", &c->elements))
            return problem(p, "tensor %d (%s) lacks layer, unit, offset or elements", i, param_kind_name(c->kind));
        if (c->unit < 0 || c->unit >= man->num_units || c->offset < 0 || c->elements <= 0 ||
            c->offset + c->elements > man->unit_begin[c->unit + 1] - man->unit_begin[c->unit])
            return problem(p, "tensor %d (%s) lies outside its unit", i, param_kind_name(c->kind));
    }
    return 1;
}

static int parse_sections_and_files(Problem* p, const JsonValue* root, Manifest* man) {
    if (!get_i64(p, root, "shard_elements", &man->shard_elements)) return 0;
    if (man->shard_elements * man->layout_world != man->unit_begin[man->num_units])
        return problem(p, "'shard_elements' %lld x %d shards is not the layout's %lld elements",
                       (long long)man->shard_elements, man->layout_world,
                       (long long)man->unit_begin[man->num_units]);
    const JsonValue* secs = json_get(root, "sections");
    if (!secs || secs->type != JSON_ARRAY || secs->count < 1 || secs->count > CKPT_MAX_SECTIONS)
        return problem(p, "'sections' is missing or has more than %d entries", CKPT_MAX_SECTIONS);
    man->num_sections = secs->count;
    for (int i = 0; i < secs->count; i++) {
        const JsonValue* s = &secs->items[i];
        CkptSection* c = &man->sections[i];
        const char* name = json_get_string(s, "name");
        if (!name || strlen(name) >= sizeof c->name) return problem(p, "section %d has no valid name", i);
        snprintf(c->name, sizeof c->name, "%s", name);
        if (!parse_dtype(json_get_string(s, "dtype"), &c->dtype)) return problem(p, "section %s has an unknown dtype", name);
        if (!json_get_i64(s, "offset", &c->offset) || c->offset < CKPT_SHARD_HEADER_BYTES)
            return problem(p, "section %s has a bad offset", name);
    }
    const char* needed[] = {"master", "adam_m", "adam_v"};
    for (int i = 0; i < 3; i++) {
        int s = manifest_section(man, needed[i]);
        if (s < 0) return problem(p, "section '%s' is missing", needed[i]);
        // The moments may be BF16 (--adam-dtype bf16); the masters are FP32.
        DType d = man->sections[s].dtype;
        if (d != DTYPE_F32 && (i == 0 || d != DTYPE_BF16))
            return problem(p, "section '%s' is %s, not fp32%s", needed[i], dtype_name(d), i ? " or bf16" : "");
    }
    if (man->sections[manifest_section(man, "adam_m")].dtype != man->sections[manifest_section(man, "adam_v")].dtype)
        return problem(p, "sections 'adam_m' and 'adam_v' have different dtypes");

    const JsonValue* files = json_get(root, "files");
    if (!files || files->type != JSON_ARRAY) return problem(p, "'files' is missing");
    man->num_files = files->count;
    man->files = (CkptFileEntry*)xcalloc((size_t)files->count + 1, sizeof(CkptFileEntry));
    int* seen = (int*)xcalloc((size_t)man->layout_world, sizeof(int));
    int ok = 1, weights = 0;
    for (int i = 0; i < files->count && ok; i++) {
        const JsonValue* f = &files->items[i];
        CkptFileEntry* e = &man->files[i];
        const char* name = json_get_string(f, "name");
        const char* hash = json_get_string(f, "xxh3");
        char* end = NULL;
        if (!name || !*name || strlen(name) >= sizeof e->name || strchr(name, '/') || name[0] == '.') {
            ok = problem(p, "file %d has no valid name", i);
            break;
        }
        snprintf(e->name, sizeof e->name, "%s", name);
        if (!json_get_i64(f, "bytes", &e->bytes) || e->bytes < 0) ok = problem(p, "file %s: bad 'bytes'", name);
        else if (!hash || strlen(hash) != 16 || (e->xxh3 = strtoull(hash, &end, 16), *end))
            ok = problem(p, "file %s: 'xxh3' is not 16 hex digits", name);
        else if (json_get(f, "shard")) {
            char want[64];
            if (!json_get_int(f, "shard", &e->shard) || e->shard < 0 || e->shard >= man->layout_world)
                ok = problem(p, "file %s: bad shard index", name);
            else if (seen[e->shard]++)
                ok = problem(p, "shard %d is listed twice", e->shard);
            else if (ckpt_shard_name(want, sizeof want, e->shard, man->layout_world), strcmp(want, name) != 0)
                ok = problem(p, "file %s should be named %s", name, want);
            else if (e->bytes != manifest_shard_bytes(man))
                ok = problem(p, "file %s: %lld bytes listed, the sections need %lld", name, (long long)e->bytes,
                             (long long)manifest_shard_bytes(man));
        } else {
            e->shard = -1;
            weights += strcmp(name, CKPT_WEIGHTS_NAME) == 0;
        }
    }
    for (int s = 0; ok && s < man->layout_world; s++)
        if (!seen[s]) ok = problem(p, "shard %d of %d is not listed in 'files'", s, man->layout_world);
    free(seen);
    if (ok && weights != 1) ok = problem(p, "'%s' is not listed in 'files'", CKPT_WEIGHTS_NAME);
    return ok;
}

static int parse_config(Problem* p, const JsonValue* root, Manifest* man) {
    const JsonValue* cfg = json_get(root, "config");
    if (!cfg || cfg->type != JSON_OBJECT) return problem(p, "'config' is missing");
    man->num_flags = cfg->count;
    man->flag_names = (char**)xcalloc((size_t)cfg->count + 1, sizeof(char*));
    man->flag_values = (char**)xcalloc((size_t)cfg->count + 1, sizeof(char*));
    man->flag_is_string = (int*)xcalloc((size_t)cfg->count + 1, sizeof(int));
    for (int i = 0; i < cfg->count; i++) {
        const JsonValue* v = &cfg->items[i];
        man->flag_names[i] = xstrdup(cfg->keys[i]);
        man->flag_is_string[i] = v->type == JSON_STRING;
        man->flag_values[i] = xstrdup(v->type == JSON_STRING || v->type == JSON_NUMBER ? v->text : "?");
    }
    return 1;
}

// Optional (absent before the guard existed).
static int parse_guard(Problem* p, const JsonValue* root, Manifest* man) {
    const JsonValue* g = json_get(root, "guard");
    if (!g || g->type == JSON_NULL) return 1;
    CkptGuard* c = &man->guard;
    int64_t skipped, nonfinite, spikes;
    const JsonValue* h = json_get(g, "history");
    if (!json_get_int(g, "bad_in_row", &c->bad_in_row) || !json_get_int(g, "last_skipped_step", &c->last_skipped_step) ||
        !json_get_int(g, "last_action", &c->last_action) || !json_get_int(g, "window", &c->window) ||
        !json_get_int(g, "filled", &c->filled) || !json_get_int(g, "next", &c->next) ||
        !json_get_i64(g, "skipped", &skipped) || !json_get_i64(g, "nonfinite", &nonfinite) ||
        !json_get_i64(g, "spikes", &spikes) || !h || h->type != JSON_ARRAY || c->window <= 0 || h->count != c->window ||
        c->filled < 0 || c->filled > c->window || c->next < 0 || c->next >= c->window)
        return problem(p, "'guard' is incomplete or inconsistent");
    c->skipped = (long)skipped;
    c->nonfinite = (long)nonfinite;
    c->spikes = (long)spikes;
    c->history = (double*)xcalloc((size_t)c->window, sizeof(double));
    for (int i = 0; i < c->window; i++) {
        if (h->items[i].type != JSON_NUMBER) return problem(p, "'guard.history' holds a non-number");
        c->history[i] = h->items[i].number;
    }
    c->present = 1;
    return 1;
}

static int read_floats(const JsonValue* a, float* out, size_t n) {
    if (!a || a->type != JSON_ARRAY || (size_t)a->count != n) return 0;
    for (size_t i = 0; i < n; i++) {
        const JsonValue* v = &a->items[i];
        if (v->type == JSON_NUMBER) out[i] = strtof(v->text, NULL);
        else if (v->type == JSON_STRING && !strcmp(v->text, "nan")) out[i] = NAN;
        else if (v->type == JSON_STRING && !strcmp(v->text, "inf")) out[i] = INFINITY;
        else if (v->type == JSON_STRING && !strcmp(v->text, "-inf")) out[i] = -INFINITY;
        else return 0;
    }
    return 1;
}

// Optional (null or absent without FP8).
static int parse_fp8(Problem* p, const JsonValue* root, Manifest* man) {
    const JsonValue* f = json_get(root, "fp8");
    if (!f || f->type == JSON_NULL) return 1;
    Fp8Snapshot* s = &man->fp8;
    const char* recipe = json_get_string(f, "recipe");
    if (fp8_recipe_lookup(recipe) < 0 || !json_get_int(f, "margin", &s->margin) ||
        !json_get_int(f, "tensors", &s->tensors) || s->tensors <= 0)
        return problem(p, "'fp8' lacks a known recipe, its margin or its tensor count");
    s->recipe = fp8_parse_recipe(recipe);
    man->fp8_present = 1;
    if (s->recipe != FP8_DELAYED) return 1;
    if (!json_get_int(f, "amax_history_len", &s->history) || !json_get_int(f, "position", &s->pos) ||
        !json_get_int(f, "steps_recorded", &s->steps_recorded) || s->history <= 0 || s->pos < 0 || s->pos >= s->history)
        return problem(p, "'fp8' (delayed scaling) lacks a valid amax_history_len, position or steps_recorded");
    size_t n = (size_t)s->tensors, h = (size_t)s->history;
    s->scale = (float*)xmalloc(n * sizeof(float));
    s->scale_inv = (float*)xmalloc(n * sizeof(float));
    s->amax_history = (float*)xmalloc(h * n * sizeof(float));
    if (!read_floats(json_get(f, "scale"), s->scale, n) || !read_floats(json_get(f, "scale_inv"), s->scale_inv, n) ||
        !read_floats(json_get(f, "amax_history"), s->amax_history, h * n))
        return problem(p, "'fp8': scale, scale_inv or amax_history is not an array of %zu, %zu and %zu numbers", n, n,
                       h * n);
    return 1;
}

// Version 2 on: the seal must be there and match.
static int check_seal(Problem* p, const char* text, size_t len, int version) {
    size_t at = manifest_seal_offset(text, len);
    if (at == len) {
        if (version < 2) return 1;  // written before manifests were sealed
        return problem(p, "its seal (the last line, \"manifest_xxh3\") is missing or malformed: the file was cut short "
                          "or edited");
    }
    char hex[17];
    memcpy(hex, text + at + sizeof SEAL_KEY - 1, 16);
    hex[16] = 0;
    char* end = NULL;
    unsigned long long want = strtoull(hex, &end, 16);
    unsigned long long got = (unsigned long long)XXH3_64bits(text, at);
    if (*end || want != got)
        return problem(p, "seal mismatch: its bytes hash to %016llx, its seal says %s: the manifest was edited or "
                          "damaged after it was written",
                       got, hex);
    return 1;
}

// The facts a manifest states twice, or that follow from others: a manifest
// that passes its seal but disagrees with itself was written wrong.
static int check_step_and_data(Problem* p, const JsonValue* root, const Manifest* man) {
    if (man->adam_step > man->step)
        return problem(p, "'adam_step' %d is more than 'step' %d (AdamW updates at most once per step)", man->adam_step,
                       man->step);
    // Every step that did not update was counted by the guard as skipped
    // (a rollback keeps counting, so the count can only be larger).
    if (man->guard.present && (long)(man->step - man->adam_step) > man->guard.skipped)
        return problem(p, "'step' %d minus 'adam_step' %d is more than the %ld steps the guard skipped", man->step,
                       man->adam_step, man->guard.skipped);
    const JsonValue* data = json_get(root, "data");
    uint64_t epoch, within, W = man->windows_per_epoch;
    int has_epoch = json_get_u64(data, "epoch", &epoch), has_within = json_get_u64(data, "window_in_epoch", &within);
    if (man->version >= 2 && (!has_epoch || !has_within)) return problem(p, "'data' lacks epoch or window_in_epoch");
    if (has_epoch && has_within && W && (epoch != man->data_position / W || within != man->data_position % W))
        return problem(p, "'data': train_position %llu is epoch %llu window %llu of %llu windows, but it records epoch "
                          "%llu window %llu",
                       (unsigned long long)man->data_position, (unsigned long long)(man->data_position / W),
                       (unsigned long long)(man->data_position % W), (unsigned long long)W, (unsigned long long)epoch,
                       (unsigned long long)within);
    if (man->data_position > 0 && W == 0) return problem(p, "'data': a position in data of 0 windows");
    return 1;
}

// The layout, unit by unit and tensor by tensor, against the one this
// program builds from the manifest's model and layout_world; the sections
// one after the other from the end of the header.
static int check_layout(Problem* p, Manifest* man) {
    GPTConfig c = man->model;
    if (c.channels % c.num_heads != 0)
        return problem(p, "'model': channels %d are not divisible by heads %d", c.channels, c.num_heads);
    int padded = c.padded_vocab_size;
    gpt_config_finish(&c);
    man->model.block = c.block;  // the manifest's model is a finished config from here on
    if (c.padded_vocab_size != padded)
        return problem(p, "'model': padded_vocab_size %d, but vocab_size %d pads to %d", padded, c.vocab_size,
                       c.padded_vocab_size);
    ParamLayout pl;
    param_layout_build(&pl, &c, man->layout_world);
    if (man->num_tensors != pl.num_tensors || man->num_units != pl.num_units) {
        problem(p, "'layout' has %d tensors in %d units; a %d-layer %s model has %d in %d", man->num_tensors,
                man->num_units, c.num_layers, arch_name(c.arch), pl.num_tensors, pl.num_units);
        param_layout_free(&pl);
        return 0;
    }
    int ok = 1;
    for (int u = 0; ok && u <= pl.num_units; u++)
        if (man->unit_begin[u] != (int64_t)pl.unit_begin[u])
            ok = problem(p, "'layout.unit_begin'[%d] is %lld; the model's layout for %d shards has %zu", u,
                         (long long)man->unit_begin[u], man->layout_world, pl.unit_begin[u]);
    for (int i = 0; ok && i < pl.num_tensors; i++) {
        const ParamTensor* t = &pl.tensors[i];
        const CkptTensor* m = &man->tensors[i];
        int64_t offset = (int64_t)(t->offset - pl.unit_begin[t->unit]);
        if (m->kind != t->kind || m->layer != t->layer || m->unit != t->unit || m->offset != offset ||
            m->elements != (int64_t)t->count)
            ok = problem(p, "tensor %d is %s (layer %d) in unit %d at offset %lld with %lld values; the model's layout "
                            "has %s (layer %d) in unit %d at offset %lld with %zu",
                         i, param_kind_name(m->kind), m->layer, m->unit, (long long)m->offset, (long long)m->elements,
                         param_kind_name(t->kind), t->layer, t->unit, (long long)offset, t->count);
    }
    param_layout_free(&pl);
    int64_t off = CKPT_SHARD_HEADER_BYTES;
    for (int i = 0; ok && i < man->num_sections; i++) {
        const CkptSection* s = &man->sections[i];
        if (s->offset != off)
            ok = problem(p, "section %s is at offset %lld; after the header and the sections before it it starts at %lld",
                         s->name, (long long)s->offset, (long long)off);
        off += man->shard_elements * (int64_t)dtype_size(s->dtype);
    }
    return ok;
}

// An unsealed manifest is accepted as what a version 1 program wrote: one
// holding a member that only version 2 (which seals) writes is a version 2
// manifest edited and stripped of its seal. And the run a manifest
// describes must be one a program could have run.
// The run's own flags ('config') fix its ZeRO stage and how many shards its
// world was cut into; a manifest whose fields disagree with them (a world of
// 2 with one shard under --shard-scope world) describes no run that was.
// Flags an older program did not record are not checked.
static const char* flag_of(const Manifest* man, const char* name) {
    for (int i = 0; i < man->num_flags; i++)
        if (!strcmp(man->flag_names[i], name)) return man->flag_values[i];
    return NULL;
}

static int check_run_flags(Problem* p, const Manifest* man) {
    const char* zero = flag_of(man, "zero");
    const char* group = flag_of(man, "shard-group");
    const char* scope = flag_of(man, "shard-scope");
    long z, g = 0;
    if (zero && parse_long(zero, &z) && z != man->zero_stage)
        return problem(p, "'zero_stage' %d, but the run's 'config.zero' is %ld", man->zero_stage, z);
    if (group && !parse_long(group, &g)) return problem(p, "'config.shard-group' '%s' is not a number", group);
    if (g > 0) {
        long want = g < man->world ? g : man->world;
        if (man->layout_world != want)
            return problem(p, "'layout_world' %d (shards), but 'world' %d ranks in groups of 'config.shard-group' %ld "
                              "make %ld shards",
                           man->layout_world, man->world, g, want);
    } else if (scope && !strcmp(scope, "world") && man->layout_world != man->world) {
        return problem(p, "'layout_world' %d (shards), but 'config.shard-scope' world cuts the model over all "
                          "'world' %d ranks",
                       man->layout_world, man->world);
    }
    return 1;
}

static int check_run(Problem* p, const JsonValue* root, const Manifest* man) {
    if (man->version < 2) {
        static const char* const v2_data[] = {"epoch", "window_in_epoch"};
        static const char* const v2_model[] = {"arch", "kv_heads", "mlp_hidden", "norm_eps", "rope_theta", "rope_scaling",
                                               "rope_scaling_bands", "tie_embeddings"};
        for (size_t i = 0; i < sizeof v2_data / sizeof v2_data[0]; i++)
            if (json_get(json_get(root, "data"), v2_data[i]))
                return problem(p, "'version' 1 (unsealed), but it holds 'data.%s', which only a sealed version 2 "
                                  "manifest has: an edited manifest without its seal",
                               v2_data[i]);
        for (size_t i = 0; i < sizeof v2_model / sizeof v2_model[0]; i++)
            if (json_get(json_get(root, "model"), v2_model[i]))
                return problem(p, "'version' 1 (unsealed), but it holds 'model.%s', which only a sealed version 2 "
                                  "manifest has: an edited manifest without its seal",
                               v2_model[i]);
    }
    if (man->zero_stage < 0 || man->zero_stage > 3)
        return problem(p, "'zero_stage' %d is not a ZeRO stage (0 to 3)", man->zero_stage);
    if (man->world % man->layout_world != 0)
        return problem(p, "'layout_world' %d (shards) does not divide 'world' %d (ranks)", man->layout_world, man->world);
    if (!check_run_flags(p, man)) return 0;
    // 16-bit parameters are saved as they are (a "params" section of the
    // precision's type); FP32 ones are the masters.
    int params = manifest_section(man, "params");
    DType pdt = DTYPE_F32;
    parse_dtype(man->precision, &pdt);
    if (pdt != DTYPE_F32 && (params < 0 || man->sections[params].dtype != pdt))
        return problem(p, "'precision' %s, but 'sections' has no \"params\" section of %s", man->precision, man->precision);
    if (pdt == DTYPE_F32 && params >= 0)
        return problem(p, "'precision' fp32, but 'sections' has a \"params\" section (FP32 parameters are the masters)");
    return 1;
}

int manifest_parse(const char* text, size_t len, Manifest* man, char* why, size_t whysize) {
    memset(man, 0, sizeof *man);
    Problem p = {why, whysize, 0};
    char err[256];
    JsonValue* root = json_parse(text, len, err, sizeof err);
    if (!root) {
        problem(&p, "not valid JSON (%s)", err);
        return 0;
    }
    const char* format = json_get_string(root, "format");
    const JsonValue* model = json_get(root, "model");
    const JsonValue* data = json_get(root, "data");
    const JsonValue* rng = json_get(root, "rng");
    const char* precision = json_get_string(root, "precision");
    DType pdt;
    if (!format || strcmp(format, CKPT_FORMAT) != 0) {
        problem(&p, "not a train_gpt checkpoint manifest ('format' is not \"%s\")", CKPT_FORMAT);
    } else if (get_int(&p, root, "version", &man->version, 1) && man->version > CKPT_VERSION) {
        problem(&p, "format version %d is newer than this program's %d", man->version, CKPT_VERSION);
    } else if (!check_seal(&p, text, len, man->version)) {
        // (the problem is recorded)
    } else if (get_int(&p, root, "step", &man->step, 0) && get_int(&p, root, "adam_step", &man->adam_step, 0) &&
               get_int(&p, root, "world", &man->world, 1) && get_int(&p, root, "layout_world", &man->layout_world, 1) &&
               get_int(&p, root, "zero_stage", &man->zero_stage, 0)) {
        if (!precision || !parse_dtype(precision, &pdt)) problem(&p, "'precision' is missing or unknown");
        else snprintf(man->precision, sizeof man->precision, "%s", precision);
        if (!rng || !json_get_u64(rng, "seed", &man->seed)) problem(&p, "'rng.seed' is missing");
        if (!data || !json_get_u64(data, "train_position", &man->data_position) ||
            !json_get_u64(data, "windows_per_epoch", &man->windows_per_epoch) ||
            !json_get_i64(data, "tokens_per_step", &man->tokens_per_step))
            problem(&p, "'data' lacks train_position, windows_per_epoch or tokens_per_step");
        GPTConfig* c = &man->model;
        if (!p.bad && !(get_int(&p, model, "layers", &c->num_layers, 1) && get_int(&p, model, "channels", &c->channels, 1) &&
                        get_int(&p, model, "heads", &c->num_heads, 1) && get_int(&p, model, "vocab_size", &c->vocab_size, 2) &&
                        get_int(&p, model, "padded_vocab_size", &c->padded_vocab_size, 2) &&
                        get_int(&p, model, "max_seq_len", &c->max_seq_len, 1)))
            problem(&p, "'model' is incomplete");
        // Manifests from before Llama have no arch: GPT-2, with its fixed kv heads, MLP and tied head.
        const char* arch = json_get_string(model, "arch");
        if (!p.bad && arch && !arch_from_name(arch, &c->arch)) problem(&p, "'model.arch' '%s' is unknown", arch);
        if (!p.bad && c->arch == ARCH_LLAMA) {
            const JsonValue* theta = json_get(model, "rope_theta");
            const JsonValue* scaling = json_get(model, "rope_scaling");
            if (!(get_int(&p, model, "kv_heads", &c->num_kv_heads, 1) &&
                  get_int(&p, model, "mlp_hidden", &c->mlp_hidden, 1) &&
                  get_int(&p, model, "tie_embeddings", &c->tie_embeddings, 0)) ||
                !theta || theta->type != JSON_NUMBER || !scaling || scaling->type != JSON_NUMBER) {
                problem(&p, "'model' is incomplete for a Llama");
            } else {
                c->rope_theta = (float)theta->number;
                // The factor, and the other values as recorded; manifests from
                // before rope_scaling_bands hold --rope-scaling's one set (llm/presets.c).
                const JsonValue* eps = json_get(model, "norm_eps");
                if (eps && (eps->type != JSON_NUMBER || !(eps->number > 0)))
                    problem(&p, "'model.norm_eps' is not a positive number");
                else if (eps)
                    c->norm_eps = (float)eps->number;
                const JsonValue* bands = json_get(model, "rope_scaling_bands");
                int64_t orig = 8192;
                if (scaling->number > 0) c->rope_scaling = (RopeScaling){(float)scaling->number, 1.0f, 4.0f, 8192};
                if (scaling->number > 0 && bands) {
                    if (bands->type != JSON_ARRAY || bands->count != 3 || bands->items[0].type != JSON_NUMBER ||
                        bands->items[1].type != JSON_NUMBER || !json_as_i64(&bands->items[2], &orig) || orig <= 0 ||
                        orig > INT32_MAX)
                        problem(&p, "'model.rope_scaling_bands' is not [low, high, original context]");
                    else
                        c->rope_scaling = (RopeScaling){(float)scaling->number, (float)bands->items[0].number,
                                                        (float)bands->items[1].number, (int)orig};
                }
            }
        } else if (!p.bad) {
            c->num_kv_heads = c->num_heads;
            c->mlp_hidden = 4 * c->channels;
            c->tie_embeddings = 1;
        }
        if (!p.bad && parse_layout(&p, root, man) && parse_sections_and_files(&p, root, man) &&
            parse_config(&p, root, man) && parse_guard(&p, root, man) && parse_fp8(&p, root, man) &&
            check_step_and_data(&p, root, man) && check_run(&p, root, man))
            check_layout(&p, man);
    }
    json_value_free(root);
    if (p.bad) manifest_free(man);
    return !p.bad;
}

// ---------------------------------------------------------------------------
// compatibility

int manifest_matches_model(const Manifest* man, const GPT* m, char* why, size_t whysize) {
    const GPTConfig* a = &man->model;
    const GPTConfig* b = &m->config;
    if (a->arch != b->arch) {
        snprintf(why, whysize, "written for a %s model; this run trains a %s (--arch %s)", arch_name(a->arch),
                 arch_name(b->arch), arch_name(b->arch));
        return 0;
    }
    float eps_a = a->norm_eps > 0 ? a->norm_eps : 1e-5f, eps_b = b->norm_eps > 0 ? b->norm_eps : 1e-5f;
    if (a->arch == ARCH_LLAMA && eps_a != eps_b) {
        snprintf(why, whysize, "written for a Llama with RMSNorm epsilon %g; this run's is %g", eps_a, eps_b);
        return 0;
    }
    if (a->arch == ARCH_LLAMA && (a->num_kv_heads != b->num_kv_heads || a->mlp_hidden != b->mlp_hidden ||
                                  a->tie_embeddings != b->tie_embeddings || a->rope_theta != b->rope_theta ||
                                  a->rope_scaling.factor != b->rope_scaling.factor ||
                                  a->rope_scaling.low_freq_factor != b->rope_scaling.low_freq_factor ||
                                  a->rope_scaling.high_freq_factor != b->rope_scaling.high_freq_factor ||
                                  a->rope_scaling.original_max_pos != b->rope_scaling.original_max_pos)) {
        snprintf(why, whysize,
                 "written for another Llama (kv heads %d, MLP %d, tied %d, RoPE theta %g, scaling %g (%g, %g, %d); "
                 "this run: kv heads %d, MLP %d, tied %d, RoPE theta %g, scaling %g (%g, %g, %d))",
                 a->num_kv_heads, a->mlp_hidden, a->tie_embeddings, a->rope_theta, a->rope_scaling.factor,
                 a->rope_scaling.low_freq_factor, a->rope_scaling.high_freq_factor, a->rope_scaling.original_max_pos,
                 b->num_kv_heads, b->mlp_hidden, b->tie_embeddings, b->rope_theta, b->rope_scaling.factor,
                 b->rope_scaling.low_freq_factor, b->rope_scaling.high_freq_factor, b->rope_scaling.original_max_pos);
        return 0;
    }
    if (a->num_layers != b->num_layers || a->channels != b->channels || a->num_heads != b->num_heads ||
        a->vocab_size != b->vocab_size || a->max_seq_len != b->max_seq_len) {
        snprintf(why, whysize,
                 "written for another model (layers %d, channels %d, heads %d, vocab %d, max seq %d; this run: "
                 "layers %d, channels %d, heads %d, vocab %d, max seq %d)",
                 a->num_layers, a->channels, a->num_heads, a->vocab_size, a->max_seq_len, b->num_layers, b->channels,
                 b->num_heads, b->vocab_size, b->max_seq_len);
        return 0;
    }
    // The same shape gives the same tensors; check anyway, since resharding
    // trusts this table.
    const ParamLayout* pl = &m->layout;
    if (man->num_tensors != pl->num_tensors) {
        snprintf(why, whysize, "lists %d tensors, the model has %d", man->num_tensors, pl->num_tensors);
        return 0;
    }
    for (int i = 0; i < pl->num_tensors; i++) {
        const ParamTensor* t = &pl->tensors[i];
        const CkptTensor* c = &man->tensors[i];
        if (c->kind != t->kind || c->layer != t->layer || c->elements != (int64_t)t->count) {
            snprintf(why, whysize, "tensor %d is %s (layer %d, %lld values), the model's is %s (layer %d, %zu values)",
                     i, param_kind_name(c->kind), c->layer, (long long)c->elements, param_kind_name(t->kind), t->layer,
                     t->count);
            return 0;
        }
    }
    return 1;
}
