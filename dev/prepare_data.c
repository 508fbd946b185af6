// prepare_data.c: text to token shards, in one of two modes.
//   --corpus: the bundled corpus (zstd-compressed KJV text, one chapter per
//     document) into our own trained tokenizer plus train/val shards.
//     tokenizer.bin is written last because it is the Makefile's target: a run
//     that stops half-way leaves no tokenizer and is redone.
//   --tokenizer FILE INPUTS...: any corpus (.txt, .jsonl, .jsonl.zst files,
//     globs, folders) encoded with a tiktoken-compatible tokenizer into
//     shards of a chosen size (dev/prepare_shards.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include <unistd.h>

#include "data/bpe.h"
#include "data/eval_file.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "dev/prepare_shards.h"
#include "llm/util/rng.h"
#include "llm/util/util.h"

typedef struct {
    const char* corpus;
    const char* out_dir;
    int vocab_size;
    int val_every;
    ShardOptions shards;  // the --tokenizer mode
} Options;

static void usage(FILE* f) {
    fprintf(f,
            "usage: prepare_data --corpus FILE.txt.zst --out-dir DIR [--vocab-size 4096] [--val-every 20]\n"
            "  Trains a byte-level BPE tokenizer on the corpus and writes DIR/kjv_train_000.bin,\n"
            "  DIR/kjv_val_000.bin (every val-every-th document) and DIR/tokenizer.bin (last).\n"
            "\n"
            "usage: prepare_data --tokenizer FILE --out-dir DIR [options] INPUT...\n"
            "  Encodes every document of the inputs as tiktoken does and writes llm.c shards\n"
            "  DIR/PREFIX_train_000000.bin, ..., DIR/PREFIX_val_000000.bin, ..., then DIR/manifest.json.\n"
            "  INPUT: .txt / .txt.zst files (a document each), .jsonl / .jsonl.zst files (a document\n"
            "  per line), glob patterns, folders (searched recursively). Each document is preceded by\n"
            "  the end-of-text token; tokens are uint16 when the vocabulary fits, else uint32.\n"
            "  --tokenizer FILE       tiktoken rank file (gpt2.tiktoken, cl100k_base.tiktoken, Llama 3's\n"
            "                         tokenizer.model) or llm.c's gpt2_tokenizer.bin\n"
            "  --pattern NAME         split pattern: %s (default: from the vocabulary)\n"
            "  --text-field NAME      the .jsonl member with the text (default text)\n"
            "  --shard-tokens N       tokens per shard (default 100000000, llm.c's)\n"
            "  --val-fraction F       share of documents in the validation split, chosen by a hash of\n"
            "                         each document's text (default 0.005)\n"
            "  --prefix NAME          shard name prefix (default data)\n"
            "  --memory-mb N          memory for batches and buffers (default 1024)\n"
            "  --threads N            encoding threads (default: all cores)\n",
            BPE_PATTERN_NAMES);
}

static const char* string_arg(const char* flag, const char* value) {
    if (!value || !value[0]) fatal("%s needs a value", flag);
    return value;
}

static double fraction_arg(const char* flag, const char* value) {
    double v;
    if (!value) fatal("%s needs a value", flag);
    if (!parse_double(value, &v) || !(v >= 0 && v <= 1)) fatal("%s: '%s' is not a number in [0, 1]", flag, value);
    return v;
}

static int int_arg(const char* flag, const char* value, int min) {
    long v;
    if (!value) fatal("%s needs a value", flag);
    if (!parse_long(value, &v) || v < min || v > (1L << 30)) fatal("%s: '%s' is not an integer >= %d", flag, value, min);
    return (int)v;
}

static Options parse_args(int argc, char** argv) {
    Options o = {NULL, NULL, 4096, 20, {0}};
    ShardOptions* so = &o.shards;
    so->prefix = "data";
    so->text_field = "text";
    so->shard_tokens = 100000000;
    so->val_fraction = 0.005;
    so->memory_mb = 1024;
    so->inputs = (char**)xmalloc((size_t)argc * sizeof *so->inputs);
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--corpus")) {
            if (!v) fatal("--corpus needs a value");
            o.corpus = v;
            i++;
        } else if (!strcmp(a, "--out-dir")) {
            if (!v) fatal("--out-dir needs a value");
            o.out_dir = v;
            i++;
        } else if (!strcmp(a, "--vocab-size")) {
            o.vocab_size = int_arg(a, v, 257);
            i++;
        } else if (!strcmp(a, "--val-every")) {
            o.val_every = int_arg(a, v, 2);
            i++;
        } else if (!strcmp(a, "--tokenizer")) {
            so->tokenizer = string_arg(a, v);
            i++;
        } else if (!strcmp(a, "--pattern")) {
            so->pattern = string_arg(a, v);
            i++;
        } else if (!strcmp(a, "--text-field")) {
            so->text_field = string_arg(a, v);
            i++;
        } else if (!strcmp(a, "--prefix")) {
            so->prefix = string_arg(a, v);
            i++;
        } else if (!strcmp(a, "--shard-tokens")) {
            so->shard_tokens = (uint64_t)int_arg(a, v, 1);
            i++;
        } else if (!strcmp(a, "--val-fraction")) {
            so->val_fraction = fraction_arg(a, v);
            i++;
        } else if (!strcmp(a, "--memory-mb")) {
            so->memory_mb = (size_t)int_arg(a, v, 1);
            i++;
        } else if (!strcmp(a, "--threads")) {
            so->threads = int_arg(a, v, 1);
            i++;
        } else if (a[0] == '-' && a[1]) {
            fatal("unknown flag '%s' (see --help)", a);
        } else {
            so->inputs[so->num_inputs++] = argv[i];
        }
    }
    if (!o.out_dir) fatal("--out-dir is required (see --help)");
    if (o.corpus && so->tokenizer) fatal("--corpus and --tokenizer are different modes: give one (see --help)");
    if (!o.corpus && !so->tokenizer) fatal("--corpus or --tokenizer is required (see --help)");
    if (o.corpus && so->num_inputs) fatal("--corpus takes no inputs ('%s'; see --help)", so->inputs[0]);
    if (so->tokenizer && !so->num_inputs) fatal("--tokenizer needs input files, globs or folders (see --help)");
    so->out_dir = o.out_dir;
    so->progress = isatty(2);
    return o;
}

// The whole decompressed corpus, NUL-terminated for convenience.
static char* read_zst_text(const char* path, size_t* len) {
    int64_t csize = file_size(path);
    if (csize < 0) fatal("--corpus '%s': cannot open: %s", path, strerror(errno));
    FILE* f = xfopen(path, "rb");
    uint8_t* src = (uint8_t*)xmalloc((size_t)csize);
    xfread(src, (size_t)csize, f, path, "compressed corpus");
    fclose(f);

    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    if (!dctx) fatal("cannot create a zstd decompression context");
    ZSTD_inBuffer in = {src, (size_t)csize, 0};
    size_t cap = (size_t)csize * 4 + 1024, n = 0, ret = 1;
    char* text = (char*)xmalloc(cap);
    while (in.pos < in.size || ret != 0) {
        if (n + 1 >= cap) text = (char*)xrealloc(text, cap *= 2);
        ZSTD_outBuffer out = {text + n, cap - n - 1, 0};
        size_t in_before = in.pos;
        ret = ZSTD_decompressStream(dctx, &out, &in);
        if (ZSTD_isError(ret)) fatal("--corpus '%s': corrupt zstd stream: %s", path, ZSTD_getErrorName(ret));
        n += out.pos;
        if (in.pos == in.size && in.pos == in_before && out.pos == 0 && ret != 0)
            fatal("--corpus '%s': corrupt zstd stream: truncated (ends mid-frame)", path);
    }
    ZSTD_freeDCtx(dctx);
    free(src);
    text[n] = 0;
    *len = n;
    return text;
}

// ---- documents ----------------------------------------------------------------------------------

typedef struct {
    size_t start, len;
} Doc;

// "Genesis 1", "1 Kings 12", "Song of Solomon 3": words, then a chapter number.
static int is_heading(const char* s, size_t n) {
    size_t k = n;
    while (k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9') k--;
    if (k == n || k < 2 || s[k - 1] != ' ') return 0;
    for (size_t i = 0; i + 1 < k; i++) {
        char c = s[i];
        if (!(c == ' ' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 0;
    }
    return (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= '1' && s[0] <= '9');
}

static size_t line_end(const char* t, size_t n, size_t i) {
    const char* nl = (const char*)memchr(t + i, '\n', n - i);
    return nl ? (size_t)(nl - t) : n;
}

// A document starts at a heading line that follows a blank line (or the start
// of the text); the blank separator line belongs to neither document.
static Doc* split_documents(const char* t, size_t n, int* count) {
    int cap = 1024, m = 0;
    Doc* docs = (Doc*)xmalloc((size_t)cap * sizeof *docs);
    size_t doc_start = 0;
    for (size_t i = 0; i < n;) {
        size_t e = line_end(t, n, i);
        size_t next = e < n ? e + 1 : n;
        if (e == i && next < n && i > doc_start) {  // blank line: does a heading follow?
            size_t he = line_end(t, n, next);
            if (is_heading(t + next, he - next)) {
                if (m == cap) docs = (Doc*)xrealloc(docs, (size_t)(cap *= 2) * sizeof *docs);
                docs[m++] = (Doc){doc_start, i - doc_start};
                doc_start = next;
            }
        }
        i = next;
    }
    if (doc_start < n) {
        if (m == cap) docs = (Doc*)xrealloc(docs, (size_t)(cap + 1) * sizeof *docs);
        docs[m++] = (Doc){doc_start, n - doc_start};
    }
    *count = m;
    return docs;
}

// ---- output -------------------------------------------------------------------------------------

typedef struct {
    int32_t* tokens;
    uint64_t n, cap;
} Tokens;

static void append_tokens(Tokens* t, const int32_t* src, size_t n) {
    if (t->n + n > t->cap) {
        while (t->n + n > t->cap) t->cap = t->cap ? 2 * t->cap : 1 << 20;
        t->tokens = (int32_t*)xrealloc(t->tokens, t->cap * sizeof *t->tokens);
    }
    memcpy(t->tokens + t->n, src, n * sizeof *src);
    t->n += n;
}

static void make_dir(const char* dir) {
    char* p = xstrdup(dir);
    for (char* s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) fatal("--out-dir '%s': cannot create '%s': %s", dir, p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) fatal("--out-dir '%s': cannot create it: %s", dir, strerror(errno));
    free(p);
}

static char* join_path(const char* dir, const char* name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char* p = (char*)xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

// ---- the multiple-choice eval ------------------------------------------------------------------

#define EVAL_EXAMPLES 400
#define EVAL_CHOICES 4
#define EVAL_MAX_COMPLETION 48  // tokens, so that --seq-len 64 runs the eval too

typedef struct {
    int32_t* ids;    // the verse's tokens, without its newline
    int n;           // how many
    int doc;         // the chapter
    const char* book;  // the chapter heading's words ("1 Kings" of "1 Kings 12"), not 0-terminated
    int book_len;
} Verse;

// The book of a chapter: its heading line without the trailing chapter number.
static void heading_book(const char* text, const Doc* d, const char** book, int* len) {
    size_t e = line_end(text, d->start + d->len, d->start), k = e;
    while (k > d->start && text[k - 1] != ' ') k--;
    *book = text + d->start;
    *len = k > d->start ? (int)(k - 1 - d->start) : (int)(e - d->start);
}

static int same_book(const Verse* a, const Verse* b) {
    return a->book_len == b->book_len && memcmp(a->book, b->book, (size_t)a->book_len) == 0;
}

static int same_words(const Verse* a, const Verse* b) {
    return a->n == b->n && memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) == 0;
}

// Built from the validation chapters only (never trained on). Each example:
//   context     one verse of a validation chapter and its newline (never the heading);
//   completions the verse after it in the same chapter (the right one), and three
//               verses of validation chapters from other books with exactly as many
//               tokens, drawn without replacement, all four different texts; the
//               right one's place drawn too.
// Equal token counts mean neither the summed loss (acc) nor the mean loss
// (acc_norm) can pick the right one by length, and the two accuracies agree;
// other books mean the right verse can be told only by following on from the
// context. Chance is 25%. Every stride-th pair is taken (stride: the pairs
// over EVAL_EXAMPLES, rounded down), from the first chapter on, until there
// are EVAL_EXAMPLES (which stops short of the last chapters); a pair is left
// out when the next verse has over EVAL_MAX_COMPLETION tokens or fewer than
// three verses match it.
// All draws come from one rng_key, so the file is the same on every run.
static int write_kjv_eval(const Tokenizer* tok, const char* text, const Doc* docs, int num_docs, int val_every,
                          const char* path) {
    int nv = 0, cap = 1024;
    Verse* v = (Verse*)xmalloc((size_t)cap * sizeof *v);
    for (int d = val_every - 1; d < num_docs; d += val_every) {
        const char* book;
        int book_len;
        heading_book(text, &docs[d], &book, &book_len);
        size_t i = docs[d].start, end = docs[d].start + docs[d].len;
        i = line_end(text, end, i) + 1;  // past the heading
        while (i < end) {
            size_t e = line_end(text, end, i);
            if (e > i) {
                if (nv == cap) v = (Verse*)xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
                Verse* w = &v[nv++];
                w->n = (int)tokenizer_encode(tok, text + i, e - i, &w->ids);
                w->doc = d, w->book = book, w->book_len = book_len;
            }
            i = e + 1;
        }
    }
    int pairs = 0;
    for (int i = 0; i + 1 < nv; i++) pairs += v[i].doc == v[i + 1].doc;
    int stride = pairs / EVAL_EXAMPLES > 1 ? pairs / EVAL_EXAMPLES : 1;
    int n = 0;
    int labels[EVAL_EXAMPLES], counts[EVAL_EXAMPLES], ctx_len[EVAL_EXAMPLES];
    int32_t* ctx[EVAL_EXAMPLES];
    int32_t** comps[EVAL_EXAMPLES];
    int* comp_lens[EVAL_EXAMPLES];
    int* pool = (int*)xmalloc((size_t)nv * sizeof *pool);
    uint64_t key = rng_key(20240522, 18, 1);
    int32_t* nl_ids;
    if (tokenizer_encode(tok, "\n", 1, &nl_ids) != 1) fatal("internal: the newline is not one token");
    int32_t nl = nl_ids[0];
    free(nl_ids);
    for (int i = 0, pair = 0; i + 1 < nv && n < EVAL_EXAMPLES; i++) {
        if (v[i].doc != v[i + 1].doc || pair++ % stride) continue;
        const Verse* right = &v[i + 1];
        if (right->n > EVAL_MAX_COMPLETION) continue;
        // Verses recur word for word (Matthew 11:6 is Luke 7:23): a text is in
        // the pool once, and never when it is the right verse's.
        int np = 0;
        for (int j = 0; j < nv; j++) {
            if (v[j].n != right->n || same_book(&v[j], right) || same_words(&v[j], right)) continue;
            int seen = 0;
            for (int k = 0; k < np && !seen; k++) seen = same_words(&v[pool[k]], &v[j]);
            if (!seen) pool[np++] = j;
        }
        if (np < EVAL_CHOICES - 1) continue;
        labels[n] = (int)rng_below(key, (uint64_t)i * 8, EVAL_CHOICES);
        counts[n] = EVAL_CHOICES;
        ctx_len[n] = v[i].n + 1;
        ctx[n] = (int32_t*)xmalloc((size_t)ctx_len[n] * sizeof *ctx[n]);
        memcpy(ctx[n], v[i].ids, (size_t)v[i].n * sizeof *ctx[n]);
        ctx[n][v[i].n] = nl;
        comps[n] = (int32_t**)xmalloc(EVAL_CHOICES * sizeof *comps[n]);
        comp_lens[n] = (int*)xmalloc(EVAL_CHOICES * sizeof *comp_lens[n]);
        for (int c = 0, draw = 1; c < EVAL_CHOICES; c++) {
            const Verse* w = right;
            if (c != labels[n]) {  // a partial Fisher-Yates shuffle of the pool: distinct verses
                int k = draw - 1 + (int)rng_below(key, (uint64_t)i * 8 + (uint64_t)draw, (uint64_t)(np - (draw - 1)));
                int t = pool[draw - 1];
                pool[draw - 1] = pool[k], pool[k] = t;
                w = &v[pool[draw - 1]];
                draw++;
            }
            comp_lens[n][c] = w->n;
            comps[n][c] = w->ids;  // borrowed: freed with the verses
        }
        n++;
    }
    eval_file_write(path, n, labels, counts, ctx, ctx_len, comps, comp_lens);
    for (int i = 0; i < n; i++) {
        free(comps[i]);
        free(comp_lens[i]);
        free(ctx[i]);
    }
    for (int i = 0; i < nv; i++) free(v[i].ids);
    free(pool);
    free(v);
    return n;
}

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    double t0 = now_seconds();
    make_dir(o.out_dir);  // before the work, so a bad directory fails at once
    if (o.shards.tokenizer) {
        prepare_shards(&o.shards);
        free(o.shards.inputs);
        return 0;
    }
    size_t len;
    char* text = read_zst_text(o.corpus, &len);
    int num_docs;
    Doc* docs = split_documents(text, len, &num_docs);
    if (num_docs == 0) fatal("--corpus '%s': the text is empty", o.corpus);

    Tokenizer tok;
    double t_train = now_seconds();
    tokenizer_train(&tok, text, len, o.vocab_size, 1);
    t_train = now_seconds() - t_train;

    double t_encode = now_seconds();
    Tokens split[2] = {{NULL, 0, 0}, {NULL, 0, 0}};  // 0: train, 1: val
    size_t split_bytes[2] = {0, 0};
    int split_docs[2] = {0, 0};
    for (int d = 0; d < num_docs; d++) {
        int32_t* ids;
        size_t n = tokenizer_encode(&tok, text + docs[d].start, docs[d].len, &ids);
        int s = d % o.val_every == o.val_every - 1;
        append_tokens(&split[s], ids, n);
        append_tokens(&split[s], &tok.eot, 1);
        split_bytes[s] += docs[d].len;
        split_docs[s]++;
        free(ids);
    }
    t_encode = now_seconds() - t_encode;

    int version = tok.vocab_size <= 65536 ? SHARD_VERSION_U16 : SHARD_VERSION_U32;
    const char* names[2] = {"kjv_train_000.bin", "kjv_val_000.bin"};
    for (int s = 0; s < 2; s++) {
        char* path = join_path(o.out_dir, names[s]);
        shard_write(path, split[s].tokens, split[s].n, version);
        free(path);
    }
    char* eval_path = join_path(o.out_dir, "kjv_eval.bin");
    int eval_examples = write_kjv_eval(&tok, text, docs, num_docs, o.val_every, eval_path);
    char* tok_path = join_path(o.out_dir, "tokenizer.bin");
    tokenizer_save(&tok, tok_path);

    uint64_t doc_tokens = split[0].n + split[1].n - (uint64_t)num_docs;  // without the eot separators
    printf("prepare_data: %s: %zu bytes, %d documents (%d train, %d val), vocabulary %d\n", o.corpus, len, num_docs,
           split_docs[0], split_docs[1], tok.vocab_size);
    printf("prepare_data: train %llu tokens, val %llu tokens (each document ends with eot %d)\n",
           (unsigned long long)split[0].n, (unsigned long long)split[1].n, tok.eot);
    printf("prepare_data: %.3f bytes/token; tokenizer trained in %.2fs, encoded in %.2fs, %.2fs in all\n",
           (double)(split_bytes[0] + split_bytes[1]) / (double)doc_tokens, t_train, t_encode, now_seconds() - t0);
    printf("prepare_data: eval: %d multiple-choice examples from the validation chapters (a verse; the next one or 3 of as many tokens from other books)\n",
           eval_examples);
    printf("prepare_data: wrote %s/{%s,%s,kjv_eval.bin,tokenizer.bin}\n", o.out_dir, names[0], names[1]);

    free(tok_path);
    free(eval_path);
    tokenizer_free(&tok);
    free(split[0].tokens);
    free(split[1].tokens);
    free(docs);
    free(text);
    return 0;
}
