// safetensors.c: the strict safetensors reader and the writer (see safetensors.h).
#include "llm/hf/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "llm/checkpoint/atomic_file.h"
#include "llm/util/json_read.h"
#include "llm/util/utf8.h"
#include "llm/util/strbuf.h"

static const char* const DTYPE_NAMES[ST_NUM_DTYPES] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"};
static const size_t DTYPE_SIZES[ST_NUM_DTYPES] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};

const char* st_dtype_name(StDtype d) { return d < ST_NUM_DTYPES ? DTYPE_NAMES[d] : "?"; }
size_t st_dtype_size(StDtype d) { return d < ST_NUM_DTYPES ? DTYPE_SIZES[d] : 0; }

size_t st_numel(const StTensor* t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

// IEEE half to float, subnormals and specials included.
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        u = sign;
    } else {  // subnormal: normalise
        int e = -1;
        do { e++; mant <<= 1; } while (!(mant & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int cmp_begin(const void* a, const void* b) {
    const StTensor* x = *(const StTensor* const*)a;
    const StTensor* y = *(const StTensor* const*)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

// One header entry: dtype, shape and offsets, each checked.
static void parse_entry(StTensor* t, const JsonValue* e, const char* path, uint64_t data_size) {
    if (e->type != JSON_OBJECT) fatal("%s: safetensors header entry '%s' is not an object", path, t->name);
    const char* dt = json_get_string(e, "dtype");
    if (!dt) fatal("%s: tensor '%s' has no \"dtype\" string in the safetensors header", path, t->name);
    t->dtype = ST_NUM_DTYPES;
    for (int d = 0; d < ST_NUM_DTYPES; d++)
        if (!strcmp(dt, DTYPE_NAMES[d])) t->dtype = (StDtype)d;
    if (t->dtype == ST_NUM_DTYPES) fatal("%s: tensor '%s' has unknown dtype \"%s\"", path, t->name, dt);
    const JsonValue* sh = json_get(e, "shape");
    if (!sh || sh->type != JSON_ARRAY) fatal("%s: tensor '%s' has no \"shape\" array in the safetensors header", path, t->name);
    if (sh->count > ST_MAX_DIMS) fatal("%s: tensor '%s' has %d dimensions (at most %d)", path, t->name, sh->count, ST_MAX_DIMS);
    t->ndim = sh->count;
    uint64_t numel = 1;
    for (int i = 0; i < sh->count; i++) {
        int64_t d;
        if (!json_as_i64(&sh->items[i], &d) || d < 0 || d > ((int64_t)1 << 40))
            fatal("%s: tensor '%s' has a bad shape entry %d (not an integer in 0..2^40)", path, t->name, i);
        t->shape[i] = d;
        if (d && numel > UINT64_MAX / 16 / (uint64_t)d) fatal("%s: tensor '%s': shape overflows", path, t->name);
        numel *= (uint64_t)d;
    }
    const JsonValue* off = json_get(e, "data_offsets");
    if (!off || off->type != JSON_ARRAY || off->count != 2 || !json_as_u64(&off->items[0], &t->begin) ||
        !json_as_u64(&off->items[1], &t->end))
        fatal("%s: tensor '%s' has no \"data_offsets\" [begin, end] of two unsigned integers", path, t->name);
    if (t->end < t->begin) fatal("%s: tensor '%s' has data_offsets [%llu, %llu] that end before they begin", path, t->name,
                                 (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        fatal("%s: tensor '%s' has data_offsets [%llu, %llu] past the end of the data (%llu bytes)", path, t->name,
              (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_size);
    uint64_t want = numel * DTYPE_SIZES[t->dtype];
    if (t->end - t->begin != want)
        fatal("%s: tensor '%s' spans %llu bytes but dtype %s and shape of %llu elements need %llu", path, t->name,
              (unsigned long long)(t->end - t->begin), DTYPE_NAMES[t->dtype], (unsigned long long)numel,
              (unsigned long long)want);
}

void st_open(StFile* f, const char* path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int64_t size = file_size(path);
    if (size < 0) fatal("%s: no such safetensors file", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) fatal("%s: cannot open: %s", path, strerror(errno));
    f->path = xstrdup(path);
    f->fd = fd;
    f->file_size = (uint64_t)size;
    uint8_t lenb[8];
    if (size < 8 || pread(fd, lenb, 8, 0) != 8)
        fatal("%s: %lld bytes, too short for a safetensors file (8-byte header length first)", path, (long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | lenb[i];
    if (n < 2 || n > ST_MAX_HEADER)
        fatal("%s: safetensors header length %llu is not in 2..%u bytes", path, (unsigned long long)n, ST_MAX_HEADER);
    if (8 + n > f->file_size)
        fatal("%s: safetensors header length %llu runs past the end of the %llu-byte file", path, (unsigned long long)n,
              (unsigned long long)f->file_size);
    f->data_start = 8 + n;
    uint64_t data_size = f->file_size - f->data_start;
    char* text = (char*)xmalloc(n + 1);
    if (pread(fd, text, n, 8) != (ssize_t)n) fatal("%s: cannot read the %llu-byte safetensors header", path, (unsigned long long)n);
    text[n] = 0;
    if (text[0] != '{') fatal("%s: safetensors header does not start with '{' (not a safetensors file)", path);
    size_t bad;
    if (!utf8_valid(text, n, &bad))  // the safetensors library reads the header as a Rust str
        fatal("%s: safetensors header is not valid UTF-8 (byte %zu of the header)", path, bad);
    char err[160];
    JsonValue* root = json_parse(text, n, err, sizeof err);
    free(text);
    if (!root) fatal("%s: safetensors header is not valid JSON: %s", path, err);
    if (root->type != JSON_OBJECT) fatal("%s: safetensors header is not a JSON object", path);
    f->tensors = (StTensor*)xcalloc(root->count > 0 ? (size_t)root->count : 1, sizeof(StTensor));
    for (int i = 0; i < root->count; i++) {
        const char* key = root->keys[i];
        for (int j = 0; j < i; j++)
            if (!strcmp(root->keys[j], key)) fatal("%s: safetensors header names '%s' twice", path, key);
        if (!strcmp(key, "__metadata__")) {
            const JsonValue* md = &root->items[i];
            if (md->type != JSON_OBJECT) fatal("%s: safetensors \"__metadata__\" is not an object", path);
            for (int k = 0; k < md->count; k++)
                if (md->items[k].type != JSON_STRING)
                    fatal("%s: safetensors \"__metadata__\" value '%s' is not a string", path, md->keys[k]);
            continue;
        }
        StTensor* t = &f->tensors[f->num_tensors++];
        t->name = xstrdup(key);
        parse_entry(t, &root->items[i], path, data_size);
    }
    json_value_free(root);

    // The tensors must tile the data region: sorted by offset, each begins
    // where the previous one ended, and the last ends at the end of the file.
    StTensor** order = (StTensor**)xmalloc((f->num_tensors > 0 ? (size_t)f->num_tensors : 1) * sizeof(StTensor*));
    for (int i = 0; i < f->num_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->num_tensors, sizeof(StTensor*), cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->num_tensors; i++) {
        const StTensor* t = order[i];
        if (t->begin < at)
            fatal("%s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s', which ends at %llu", path, t->name,
                  (unsigned long long)t->begin, (unsigned long long)t->end, order[i - 1]->name, (unsigned long long)at);
        if (t->begin > at)
            fatal("%s: the data region has a gap of %llu bytes before tensor '%s' (bytes %llu..%llu)", path,
                  (unsigned long long)(t->begin - at), t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
        at = t->end;
    }
    free(order);
    if (at != data_size)
        fatal("%s: the tensors cover %llu bytes of data but the file holds %llu after the header (%s)", path,
              (unsigned long long)at, (unsigned long long)data_size,
              at < data_size ? "trailing bytes" : "truncated");
}

void st_close(StFile* f) {
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->num_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const StTensor* st_find(const StFile* f, const char* name) {
    for (int i = 0; i < f->num_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

void st_read_f32(const StFile* f, const StTensor* t, float* out) {
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        fatal("%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16", f->path, t->name, DTYPE_NAMES[t->dtype]);
    size_t n = st_numel(t), bytes = (size_t)(t->end - t->begin);
    void* raw = t->dtype == ST_F32 ? (void*)out : xmalloc(bytes ? bytes : 1);
    size_t done = 0;
    while (done < bytes) {
        ssize_t r = pread(f->fd, (char*)raw + done, bytes - done, (off_t)(f->data_start + t->begin + done));
        if (r <= 0) fatal("%s: cannot read tensor '%s': %s", f->path, t->name, r < 0 ? strerror(errno) : "end of file");
        done += (size_t)r;
    }
    // safetensors is little-endian, as every machine this builds for.
    if (t->dtype == ST_F16) {
        const uint16_t* h = (const uint16_t*)raw;
        for (size_t i = 0; i < n; i++) out[i] = f16_to_f32(h[i]);
    } else if (t->dtype == ST_BF16) {
        const uint16_t* h = (const uint16_t*)raw;
        for (size_t i = 0; i < n; i++) out[i] = bf16_to_f32(h[i]);
    }
    if (raw != (void*)out) free(raw);
}

void st_write(const char* path, const StWriteTensor* ts, int n, StDtype dtype, const char* const* metadata) {
    if (dtype != ST_F32 && dtype != ST_BF16) fatal("safetensors writer: dtype %s is not F32 or BF16", st_dtype_name(dtype));
    size_t esz = DTYPE_SIZES[dtype];
    StrBuf sb = {0};
    sb_printf(&sb, "{");
    if (metadata && metadata[0]) {
        sb_printf(&sb, "\"__metadata__\":{");
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2) {
            if (i) sb_printf(&sb, ",");
            sb_json_string(&sb, metadata[i]);
            sb_printf(&sb, ":");
            sb_json_string(&sb, metadata[i + 1]);
        }
        sb_printf(&sb, "}");
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        if (i || (metadata && metadata[0])) sb_printf(&sb, ",");
        sb_json_string(&sb, ts[i].name);
        sb_printf(&sb, ":{\"dtype\":\"%s\",\"shape\":[", DTYPE_NAMES[dtype]);
        for (int d = 0; d < ts[i].ndim; d++) sb_printf(&sb, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        sb_printf(&sb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + numel * esz));
        at += numel * esz;
    }
    sb_printf(&sb, "}");
    while (sb.len % 8) sb_printf(&sb, " ");  // the data region starts 8-aligned
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)sb.len >> (8 * i));

    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, lenb, 8);
    atomic_file_write(&af, sb.data, sb.len);
    sb_free(&sb);
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= (size_t)ts[i].shape[d];
        if (dtype == ST_F32) {
            atomic_file_write(&af, ts[i].data, numel * 4);
        } else {
            const size_t chunk = 1 << 16;
            uint16_t* buf = (uint16_t*)xmalloc(chunk * 2);
            for (size_t j = 0; j < numel; j += chunk) {
                size_t m = numel - j < chunk ? numel - j : chunk;
                for (size_t k = 0; k < m; k++) buf[k] = f32_to_bf16(ts[i].data[j + k]);
                atomic_file_write(&af, buf, m * 2);
            }
            free(buf);
        }
    }
    atomic_file_commit(&af);
}
