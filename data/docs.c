// docs.c: corpus inputs (files, globs, folders) and streaming record readers
// for .txt and .jsonl, plain or zstd-compressed (see docs.h).
#include "data/docs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "data/shard.h"
#include "llm/util/json_read.h"

typedef unsigned long long ull;  // for printf of uint64_t

static int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

// 1 and the kind for a corpus file name, 0 for anything else.
static int file_kind(const char* path, int* jsonl, int* zst) {
    *zst = ends_with(path, ".zst");
    *jsonl = ends_with(path, *zst ? ".jsonl.zst" : ".jsonl");
    return *jsonl || ends_with(path, *zst ? ".txt.zst" : ".txt");
}

typedef struct {
    DocFile* items;
    int n, cap;
} FileList;

static void add_file(FileList* l, const char* path, int jsonl, int zst) {
    if (l->n == l->cap) l->items = (DocFile*)xrealloc(l->items, (size_t)(l->cap = l->cap ? 2 * l->cap : 16) * sizeof *l->items);
    l->items[l->n++] = (DocFile){xstrdup(path), jsonl, zst, file_size(path)};
}

static char* join(const char* dir, const char* name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char* p = (char*)xmalloc(n);
    snprintf(p, n, "%s%s%s", dir, ends_with(dir, "/") ? "" : "/", name);
    return p;
}

static int compare_strings(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// Every corpus file under dir, in byte order of their paths (names sorted at each level).
static void walk_folder(FileList* l, const char* dir) {
    DIR* d = opendir(dir);
    if (!d) fatal("corpus folder '%s': cannot open: %s", dir, strerror(errno));
    int n = 0, cap = 16;
    char** names = (char**)xmalloc((size_t)cap * sizeof *names);
    for (struct dirent* e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;  // ., .. and hidden files
        if (n == cap) names = (char**)xrealloc(names, (size_t)(cap *= 2) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, compare_strings);
    for (int i = 0; i < n; i++) {
        char* p = join(dir, names[i]);
        int jsonl, zst;
        if (is_dir(p)) walk_folder(l, p);
        else if (file_kind(p, &jsonl, &zst)) add_file(l, p, jsonl, zst);
        free(p);
        free(names[i]);
    }
    free(names);
}

static void add_input(FileList* l, const char* input, const char* flag) {
    int jsonl, zst;
    if (is_dir(input)) {
        int before = l->n;
        walk_folder(l, input);
        if (l->n == before) fatal("%s: folder '%s' has no .txt, .jsonl or .jsonl.zst files", flag, input);
    } else if (file_exists(input)) {
        if (!file_kind(input, &jsonl, &zst))
            fatal("%s: '%s' is not a .txt, .txt.zst, .jsonl or .jsonl.zst file", flag, input);
        add_file(l, input, jsonl, zst);
    } else if (strpbrk(input, "*?[{")) {
        int m;
        char** paths = glob_paths(input, flag, &m);
        for (int i = 0; i < m; i++) {
            if (is_dir(paths[i])) walk_folder(l, paths[i]);
            else if (file_kind(paths[i], &jsonl, &zst)) add_file(l, paths[i], jsonl, zst);
        }
        free_paths(paths, m);
    } else {
        fatal("%s: '%s' does not exist", flag, input);
    }
}

DocFile* docs_expand(char** inputs, int n, const char* flag, int* count) {
    FileList l = {NULL, 0, 0};
    for (int i = 0; i < n; i++) add_input(&l, inputs[i], flag);
    if (l.n == 0) fatal("%s: no corpus files (.txt, .jsonl, .jsonl.zst) in the inputs", flag);
    *count = l.n;
    return l.items;
}

void docs_free(DocFile* files, int count) {
    for (int i = 0; i < count; i++) free(files[i].path);
    free(files);
}

// ---- reading ----------------------------------------------------------------------------------

struct DocReader {
    const DocFile* file;
    FILE* f;
    size_t max_record;
    ZSTD_DCtx* dctx;     // .zst only
    uint8_t* zin;        // compressed input window
    size_t zin_cap, zin_pos, zin_len;
    size_t zret;         // ZSTD_decompressStream's last hint: 0 at a frame's end
    int at_eof;          // no more bytes will come into buf
    char* buf;           // decoded bytes [start, end)
    size_t start, end, cap;
    uint64_t line;       // of the next record
    uint64_t consumed;
    int done;
};

DocReader* doc_reader_open(const DocFile* f, size_t max_record) {
    DocReader* r = (DocReader*)xcalloc(1, sizeof *r);
    r->file = f;
    r->f = xfopen(f->path, "rb");
    r->max_record = max_record;
    r->cap = max_record < (1 << 20) ? max_record : 1 << 20;
    r->buf = (char*)xmalloc(r->cap + 1);
    r->line = 1;
    if (f->zst) {
        r->dctx = ZSTD_createDCtx();
        if (!r->dctx) fatal("'%s': cannot create a zstd decompression context", f->path);
        r->zin_cap = ZSTD_DStreamInSize();
        r->zin = (uint8_t*)xmalloc(r->zin_cap);
    }
    return r;
}

void doc_reader_close(DocReader* r) {
    if (!r) return;
    fclose(r->f);
    ZSTD_freeDCtx(r->dctx);
    free(r->zin);
    free(r->buf);
    free(r);
}

uint64_t doc_reader_consumed(const DocReader* r) { return r->consumed; }

static size_t read_raw(DocReader* r, void* dst, size_t cap) {
    size_t got = fread(dst, 1, cap, r->f);
    if (got < cap && ferror(r->f)) fatal("'%s': read error near line %llu: %s", r->file->path, (ull)r->line, strerror(errno));
    r->consumed += got;
    return got;
}

// Appends decoded bytes to buf[end..cap); sets at_eof when the file is done.
static void fill(DocReader* r) {
    if (!r->dctx) {
        size_t got = read_raw(r, r->buf + r->end, r->cap - r->end);
        r->end += got;
        if (got == 0) r->at_eof = 1;
        return;
    }
    for (;;) {
        if (r->zin_pos == r->zin_len) {
            r->zin_len = read_raw(r, r->zin, r->zin_cap);
            r->zin_pos = 0;
            if (r->zin_len == 0) {
                if (r->zret != 0)
                    fatal("'%s' line %llu: truncated zstd stream (the file ends inside a frame)", r->file->path,
                          (ull)r->line);
                r->at_eof = 1;
                return;
            }
        }
        ZSTD_inBuffer in = {r->zin, r->zin_len, r->zin_pos};
        ZSTD_outBuffer out = {r->buf + r->end, r->cap - r->end, 0};
        r->zret = ZSTD_decompressStream(r->dctx, &out, &in);
        if (ZSTD_isError(r->zret))
            fatal("'%s' line %llu: corrupt zstd stream: %s", r->file->path, (ull)r->line, ZSTD_getErrorName(r->zret));
        r->zin_pos = in.pos;
        r->end += out.pos;
        if (out.pos > 0) return;
    }
}

// Makes room after end: moves the unread bytes to the front, then grows the buffer.
static void make_room(DocReader* r) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end == r->cap) {
        if (r->cap >= r->max_record)
            fatal("'%s' line %llu: a record of more than %zu bytes does not fit the memory limit (raise --memory-mb)",
                  r->file->path, (ull)r->line, r->max_record);
        r->cap = 2 * r->cap < r->max_record ? 2 * r->cap : r->max_record;
        r->buf = (char*)xrealloc(r->buf, r->cap + 1);
    }
}

int doc_reader_next(DocReader* r, const char** text, size_t* len, uint64_t* line) {
    if (r->done) return 0;
    if (!r->file->jsonl) {  // the whole file
        while (!r->at_eof) {
            make_room(r);
            fill(r);
        }
        r->done = 1;
        if (r->end == 0) return 0;  // an empty file holds no document
        *text = r->buf;
        *len = r->end;
        *line = 1;
        return 1;
    }
    for (;;) {
        size_t scan = r->start;
        for (;;) {
            char* nl = (char*)memchr(r->buf + scan, '\n', r->end - scan);
            if (nl) {
                size_t e = (size_t)(nl - r->buf);
                *text = r->buf + r->start;
                *len = e - r->start;
                *line = r->line++;
                r->start = e + 1;
                break;
            }
            if (r->at_eof) {
                if (r->end == r->start) {
                    r->done = 1;
                    return 0;
                }
                *text = r->buf + r->start;
                *len = r->end - r->start;
                *line = r->line++;
                r->start = r->end;
                break;
            }
            size_t seen = r->end - r->start;
            make_room(r);
            fill(r);
            scan = r->start + seen;
        }
        // Blank lines (only whitespace) hold no document.
        size_t i = 0;
        while (i < *len && ((*text)[i] == ' ' || (*text)[i] == '\t' || (*text)[i] == '\r')) i++;
        if (i < *len) return 1;
    }
}

char* doc_json_text(const char* line, size_t n, const char* field, size_t* len, char* err, size_t errsize) {
    char perr[256];
    JsonValue* v = json_parse(line, n, perr, sizeof perr);
    if (!v) {
        const char* why = strncmp(perr, "line 1: ", 8) == 0 ? perr + 8 : perr;  // one line: the caller names it
        snprintf(err, errsize, "invalid JSON: %s", why);
        return NULL;
    }
    char* out = NULL;
    const JsonValue* f = json_get(v, field);
    if (v->type != JSON_OBJECT) {
        snprintf(err, errsize, "not a JSON object");
    } else if (!f) {
        snprintf(err, errsize, "no \"%s\" member (see --text-field)", field);
    } else if (f->type != JSON_STRING) {
        snprintf(err, errsize, "member \"%s\" is not a string (see --text-field)", field);
    } else {
        *len = strlen(f->text);
        out = xstrdup(f->text);
    }
    json_value_free(v);
    return out;
}
