// prepare_shards.c: the corpus -> shards pipeline (see prepare_shards.h):
// read a batch of documents in order, encode it on all cores, append the
// tokens in document order to the train or val shards, report progress.
#include "dev/prepare_shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "data/bpe.h"
#include "data/docs.h"
#include "data/shard.h"
#include "data/shard_manifest.h"
#include "llm/util/strbuf.h"
#include "llm/util/util.h"

typedef unsigned long long ull;

typedef struct {
    size_t off, len;  // the record's bytes in the batch arena
    int file;
    uint64_t line;
} Record;

typedef struct {
    int32_t* tokens;  // eot, then the document's tokens
    size_t n, cap;
    size_t text_bytes;
    int val;
    char err[320];  // non-empty: the record is bad
} Encoded;

typedef struct {
    const char* name;  // "train" or "val"
    ShardWriter w;
    int open, shards;
    uint64_t docs_in_shard, tokens, docs, text_bytes;
    StrBuf manifest;  // this split's shard entries
} Split;

typedef struct {
    const ShardOptions* o;
    const Bpe* bpe;
    int version;
    BpeWork** work;  // one per thread
    DocFile* files;
    int num_files;
    uint64_t* file_docs;
    Split split[2];  // 0 train, 1 val
    // the batch
    char* arena;
    size_t arena_n, batch_bytes;
    Record* recs;
    Encoded* enc;
    int nrec, rec_cap;
    // progress
    double t0, last_report;
    uint64_t total_in, done_in, text_bytes, tokens;
} Pipeline;

// On an error, the shard being written goes (its .tmp); finished shards stay,
// and with no manifest the run is visibly incomplete.
static Pipeline* running;
static void remove_partial_shards(const char* message) {
    (void)message;
    for (int k = 0; running && k < 2; k++)
        if (running->split[k].open) unlink(running->split[k].w.tmp);
}

static void shard_path(const Pipeline* p, const Split* s, int index, char* out, size_t cap) {
    snprintf(out, cap, "%s/%s_%s_%06d.bin", p->o->out_dir, p->o->prefix, s->name, index);
}

static void close_shard(Pipeline* p, Split* s) {
    char path[4096];
    shard_path(p, s, s->shards, path, sizeof path);
    sb_printf(&s->manifest, "%s\n    {\"file\": ", s->shards ? "," : "");
    sb_json_string(&s->manifest, strrchr(path, '/') + 1);
    sb_printf(&s->manifest, ", \"split\": \"%s\", \"tokens\": %llu, \"documents_starting\": %llu", s->name,
              (ull)s->w.n, (ull)s->docs_in_shard);
    shard_writer_close(&s->w);
    // Its size and checksum, which train_gpt checks (data/shard_manifest.h).
    int64_t bytes;
    uint64_t xxh3;
    int e = shard_file_digest(path, &bytes, &xxh3);
    if (e) fatal("cannot read back the shard '%s': %s", path, strerror(e));
    sb_printf(&s->manifest, ", \"bytes\": %lld, \"xxh3\": \"%016llx\"}", (long long)bytes, (ull)xxh3);
    s->open = 0;
    s->shards++;
    s->docs_in_shard = 0;
}

// Appends one document's tokens (eot first), filling shards to shard_tokens.
static void append_document(Pipeline* p, Split* s, const int32_t* t, size_t n) {
    int first = 1;
    while (n > 0) {
        if (!s->open) {
            char path[4096];
            shard_path(p, s, s->shards, path, sizeof path);
            shard_writer_open(&s->w, path, p->version);
            s->open = 1;
        }
        if (first) s->docs_in_shard++;
        first = 0;
        uint64_t room = p->o->shard_tokens - s->w.n;
        size_t m = n < room ? n : (size_t)room;
        shard_writer_append(&s->w, t, m);
        t += m;
        n -= m;
        if (s->w.n == p->o->shard_tokens) close_shard(p, s);
    }
}

static double val_draw(const char* text, size_t len) {
    return (double)(XXH64(text, len, 0) >> 11) * (1.0 / 9007199254740992.0);  // uniform in [0, 1)
}

static void encode_batch(Pipeline* p) {
    const ShardOptions* o = p->o;
    int eot = bpe_eot(p->bpe);
#pragma omp parallel for schedule(dynamic, 8)
    for (int i = 0; i < p->nrec; i++) {
        const Record* r = &p->recs[i];
        Encoded* e = &p->enc[i];
        e->n = 0;
        e->err[0] = 0;
        const char* text = p->arena + r->off;
        size_t len = r->len;
        char* owned = NULL;
        if (p->files[r->file].jsonl) {
            owned = doc_json_text(text, len, o->text_field, &len, e->err, sizeof e->err);
            if (!owned) continue;
            text = owned;
        }
        if (e->cap == 0) {
            e->cap = 1024;
            e->tokens = (int32_t*)xmalloc(e->cap * sizeof *e->tokens);
        }
        e->tokens[e->n++] = eot;
        bpe_encode(p->work[omp_get_thread_num()], text, len, 0, &e->tokens, &e->n, &e->cap);
        e->text_bytes = len;
        e->val = val_draw(text, len) < o->val_fraction;
        free(owned);
    }
    for (int i = 0; i < p->nrec; i++) {
        const Record* r = &p->recs[i];
        Encoded* e = &p->enc[i];
        if (e->err[0]) fatal("'%s' line %llu: %s", p->files[r->file].path, (ull)r->line, e->err);
        Split* s = &p->split[e->val];
        append_document(p, s, e->tokens, e->n);
        s->tokens += e->n;
        s->docs++;
        s->text_bytes += e->text_bytes;
        p->file_docs[r->file]++;
        p->text_bytes += e->text_bytes;
        p->tokens += e->n;
        if (e->cap > (1u << 20)) {  // do not keep a huge document's buffer for the next batch
            free(e->tokens);
            e->tokens = NULL;
            e->cap = 0;
        }
    }
    p->nrec = 0;
    p->arena_n = 0;
}

static void format_eta(double s, char* out, size_t cap) {
    if (!(s >= 0) || s > 1e7) snprintf(out, cap, "n/a");
    else snprintf(out, cap, "%d:%02d:%02d", (int)(s / 3600), (int)(s / 60) % 60, (int)s % 60);
}

static void report(Pipeline* p, uint64_t in_now, int final) {
    double t = now_seconds();
    if (!final && !p->o->progress && t - p->last_report < 10) return;
    p->last_report = t;
    double el = t - p->t0;
    double mbs = el > 0 ? (double)p->text_bytes / 1e6 / el : 0, tps = el > 0 ? (double)p->tokens / el : 0;
    double frac = p->total_in ? (double)in_now / (double)p->total_in : 1;
    char eta[32], rate[32], toks[32];
    format_eta(frac > 0 && el > 0 ? el * (1 - frac) / frac : -1, eta, sizeof eta);
    if (el > 0) {
        snprintf(rate, sizeof rate, "%.1f MB/s", mbs);
        snprintf(toks, sizeof toks, "%.2fM tokens/s", tps / 1e6);
    } else {
        snprintf(rate, sizeof rate, "n/a MB/s");
        snprintf(toks, sizeof toks, "n/a tokens/s");
    }
    if (p->o->progress) {
        int width = 30, filled = (int)(frac * width + 0.5);
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\rprepare_data [%s] %3.0f%% | %.1f MB text | %s | %s | ETA %s   %s", bar, 100 * frac,
                (double)p->text_bytes / 1e6, rate, toks, eta, final ? "\n" : "");
    } else {
        fprintf(stderr, "prepare_data | %3.0f%% of the input | %.1f MB text | %s | %s | ETA %s\n", 100 * frac,
                (double)p->text_bytes / 1e6, rate, toks, eta);
    }
    fflush(stderr);
}

static void read_file(Pipeline* p, int fi) {
    DocReader* r = doc_reader_open(&p->files[fi], p->batch_bytes);
    const char* text;
    size_t len;
    uint64_t line;
    while (doc_reader_next(r, &text, &len, &line)) {
        if (p->arena_n + len > p->batch_bytes && p->nrec > 0) {
            encode_batch(p);
            report(p, p->done_in + doc_reader_consumed(r), 0);
        }
        if (p->nrec == p->rec_cap) {
            int old = p->rec_cap;
            p->rec_cap = p->rec_cap ? 2 * p->rec_cap : 4096;
            p->recs = (Record*)xrealloc(p->recs, (size_t)p->rec_cap * sizeof *p->recs);
            p->enc = (Encoded*)xrealloc(p->enc, (size_t)p->rec_cap * sizeof *p->enc);
            memset(p->enc + old, 0, (size_t)(p->rec_cap - old) * sizeof *p->enc);
        }
        memcpy(p->arena + p->arena_n, text, len);
        p->recs[p->nrec++] = (Record){p->arena_n, len, fi, line};
        p->arena_n += len;
    }
    p->done_in += doc_reader_consumed(r);
    doc_reader_close(r);
}

// Shards of this prefix and split numbered from `from` up, left by an earlier run: removed.
static int remove_stale(const Pipeline* p, const Split* s, int from) {
    int removed = 0;
    for (int i = from;; i++) {
        char path[4096];
        shard_path(p, s, i, path, sizeof path);
        if (!file_exists(path)) break;
        if (unlink(path) != 0) fatal("cannot remove the stale shard '%s': %s", path, strerror(errno));
        removed++;
    }
    return removed;
}

static void write_manifest(Pipeline* p) {
    const ShardOptions* o = p->o;
    StrBuf m = {NULL, 0, 0};
    sb_printf(&m, "{\n  \"format\": \"llm.c token shards (magic 20240520)\",\n  \"tokenizer\": ");
    sb_json_string(&m, o->tokenizer);
    sb_printf(&m, ",\n  \"pattern\": \"%s\",\n  \"vocab_size\": %d,\n  \"eot\": %d,\n", bpe_pattern(p->bpe),
              bpe_vocab_size(p->bpe), bpe_eot(p->bpe));
    sb_printf(&m, "  \"eot_placement\": \"before every document\",\n");
    sb_printf(&m, "  \"shard_version\": %d,\n  \"token_dtype\": \"%s\",\n  \"shard_tokens\": %llu,\n", p->version,
              p->version == SHARD_VERSION_U16 ? "uint16" : "uint32", (ull)o->shard_tokens);
    sb_printf(&m, "  \"val_fraction\": %.9g,\n  \"text_field\": ", o->val_fraction);
    sb_json_string(&m, o->text_field);
    sb_printf(&m, ",\n  \"inputs\": [");
    for (int i = 0; i < p->num_files; i++) {
        sb_printf(&m, "%s\n    {\"path\": ", i ? "," : "");
        sb_json_string(&m, p->files[i].path);
        sb_printf(&m, ", \"bytes\": %lld, \"documents\": %llu}", (long long)p->files[i].size, (ull)p->file_docs[i]);
    }
    sb_printf(&m, "\n  ],\n  \"splits\": {");
    for (int k = 0; k < 2; k++) {
        const Split* s = &p->split[k];
        sb_printf(&m, "%s\n    \"%s\": {\"documents\": %llu, \"tokens\": %llu, \"text_bytes\": %llu, \"shards\": %d}",
                  k ? "," : "", s->name, (ull)s->docs, (ull)s->tokens, (ull)s->text_bytes, s->shards);
    }
    sb_printf(&m, "\n  },\n  \"shards\": [%s%s%s\n  ]\n}\n", p->split[0].manifest.data ? p->split[0].manifest.data : "",
              p->split[0].shards && p->split[1].shards ? "," : "",
              p->split[1].manifest.data ? p->split[1].manifest.data : "");
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = xfopen(tmp, "wb");
    xfwrite(m.data, m.len, f, tmp);
    xfclose(f, tmp);
    if (rename(tmp, path) != 0) fatal("cannot rename '%s' into place: %s", path, strerror(errno));
    sb_free(&m);
}

void prepare_shards(const ShardOptions* o) {
    Pipeline p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.files = docs_expand(o->inputs, o->num_inputs, "inputs", &p.num_files);
    p.bpe = bpe_load(o->tokenizer, o->pattern, "--tokenizer");
    p.version = bpe_vocab_size(p.bpe) <= 65536 ? SHARD_VERSION_U16 : SHARD_VERSION_U32;
    if (o->threads > 0) omp_set_num_threads(o->threads);
    int threads = omp_get_max_threads();
    p.work = (BpeWork**)xmalloc((size_t)threads * sizeof *p.work);
    for (int i = 0; i < threads; i++) p.work[i] = bpe_work_new(p.bpe);
    p.file_docs = (uint64_t*)xcalloc((size_t)p.num_files, sizeof *p.file_docs);
    p.split[0].name = "train";
    p.split[1].name = "val";
    // The text of a batch, its JSON-decoded copy, its tokens (4 bytes each, at
    // most one per byte) and the reader's buffer share the memory limit.
    p.batch_bytes = (o->memory_mb << 20) / 8;
    p.arena = (char*)xmalloc(p.batch_bytes);
    for (int i = 0; i < p.num_files; i++) p.total_in += (uint64_t)(p.files[i].size > 0 ? p.files[i].size : 0);
    p.t0 = p.last_report = now_seconds();
    running = &p;
    add_fatal_hook(remove_partial_shards);
    // The old manifest goes before the first shard is touched: a folder with a
    // manifest is a finished run (data/shard_manifest.h), and until this run
    // finishes, this one is not.
    char manifest[4096];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", o->out_dir);
    if (unlink(manifest) != 0 && errno != ENOENT) fatal("cannot remove the old '%s': %s", manifest, strerror(errno));
    int dfd = open(o->out_dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);  // best effort: the removal is durable before a shard changes
        close(dfd);
    }

    for (int i = 0; i < p.num_files; i++) read_file(&p, i);
    if (p.nrec) encode_batch(&p);
    for (int k = 0; k < 2; k++)
        if (p.split[k].open) close_shard(&p, &p.split[k]);
    if (o->progress) report(&p, p.total_in, 1);  // (without a terminal the summary line says it)
    int stale = remove_stale(&p, &p.split[0], p.split[0].shards) + remove_stale(&p, &p.split[1], p.split[1].shards);
    write_manifest(&p);
    running = NULL;

    double el = now_seconds() - p.t0;
    char rate[64];
    if (el > 0) snprintf(rate, sizeof rate, "%.1f MB/s, %.2fM tokens/s", (double)p.text_bytes / 1e6 / el, (double)p.tokens / el / 1e6);
    else snprintf(rate, sizeof rate, "n/a MB/s");
    printf("prepare_data | %d files, %llu documents (train %llu, val %llu) | %llu tokens (train %llu, val %llu) | "
           "%d + %d shards of %s (version %d) in %s | %.1f MB of text in %.2fs: %s on %d threads%s\n",
           p.num_files, (ull)(p.split[0].docs + p.split[1].docs), (ull)p.split[0].docs, (ull)p.split[1].docs,
           (ull)p.tokens, (ull)p.split[0].tokens, (ull)p.split[1].tokens, p.split[0].shards, p.split[1].shards,
           p.version == SHARD_VERSION_U16 ? "uint16" : "uint32", p.version, o->out_dir, (double)p.text_bytes / 1e6, el,
           rate, threads, stale ? " (stale shards of an earlier run removed)" : "");

    for (int i = 0; i < threads; i++) bpe_work_free(p.work[i]);
    free(p.work);
    for (int i = 0; i < p.rec_cap; i++) free(p.enc[i].tokens);
    free(p.enc);
    free(p.recs);
    free(p.arena);
    free(p.file_docs);
    sb_free(&p.split[0].manifest);
    sb_free(&p.split[1].manifest);
    docs_free(p.files, p.num_files);
    bpe_free((Bpe*)p.bpe);
}
