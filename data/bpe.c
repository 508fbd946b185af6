// bpe.c: tiktoken-compatible byte-level BPE (see bpe.h): rank files, the
// built-in split patterns and special tokens, UTF-8 repair, encoding.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe.h"

#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"

#define NO_RANK INT32_MAX

// ---- the encodings' patterns and special tokens ----------------------------------------------

// tiktoken's own spellings (tiktoken_ext/openai_public.py; Meta's for Llama 3),
// compiled with PCRE2_UTF | PCRE2_UCP, and PCRE2_DOLLAR_ENDONLY because Rust's
// `$` (tiktoken's regex engine) is the end of the text, never before a final "\n".
static const char* const GPT2_PATTERN =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s";
static const char* const CL100K_PATTERN =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s";
static const char* const LLAMA3_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char* text;
    int id;
} Special;

static const Special GPT2_SPECIALS[] = {{"<|endoftext|>", 50256}};
static const Special CL100K_SPECIALS[] = {{"<|endoftext|>", 100257},
                                          {"<|fim_prefix|>", 100258},
                                          {"<|fim_middle|>", 100259},
                                          {"<|fim_suffix|>", 100260},
                                          {"<|endofprompt|>", 100276}};
// Llama 3.1's named specials from 128000; ids 128011..128255 are
// <|reserved_special_token_2|> .. <|reserved_special_token_246|> (built at load).
static const char* const LLAMA3_NAMED[] = {"<|begin_of_text|>",
                                           "<|end_of_text|>",
                                           "<|reserved_special_token_0|>",
                                           "<|reserved_special_token_1|>",
                                           "<|finetune_right_pad_id|>",
                                           "<|step_id|>",
                                           "<|start_header_id|>",
                                           "<|end_header_id|>",
                                           "<|eom_id|>",
                                           "<|eot_id|>",
                                           "<|python_tag|>"};
#define LLAMA3_FIRST_SPECIAL 128000
#define LLAMA3_NUM_SPECIALS 256

typedef struct {
    const char* name;
    const char* pattern;
    int num_ranks;  // the vocabulary that picks this encoding when no name is given
} Encoding;

static const Encoding ENCODINGS[] = {
    {"gpt2", NULL, 50256},
    {"cl100k", NULL, 100256},
    {"llama3", NULL, 128000},
};
#define NUM_ENCODINGS 3

static const char* encoding_pattern(int e) { return e == 0 ? GPT2_PATTERN : e == 1 ? CL100K_PATTERN : LLAMA3_PATTERN; }

// ---- byte-string -> rank map ------------------------------------------------------------------

struct Bpe {
    int encoding;  // index into ENCODINGS
    int vocab;     // largest id + 1
    int eot;
    uint8_t** bytes;  // bytes[id] (NULL: no token), length len[id]
    int* len;
    int32_t* slots;  // open addressing over ids of ordinary tokens, -1 empty
    size_t cap;      // power of two
    Special* specials;
    int num_specials;
    pcre2_code* re;
};

static uint64_t hash_bytes(const uint8_t* p, size_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int32_t rank_of(const Bpe* b, const uint8_t* p, size_t n) {
    for (size_t i = (size_t)hash_bytes(p, n) & (b->cap - 1);; i = (i + 1) & (b->cap - 1)) {
        int32_t id = b->slots[i];
        if (id < 0) return NO_RANK;
        if ((size_t)b->len[id] == n && memcmp(b->bytes[id], p, n) == 0) return id;
    }
}

// Adds id (its bytes already set) to the map; 0 when those bytes already have a rank.
static int rank_insert(Bpe* b, int32_t id) {
    size_t n = (size_t)b->len[id];
    for (size_t i = (size_t)hash_bytes(b->bytes[id], n) & (b->cap - 1);; i = (i + 1) & (b->cap - 1)) {
        int32_t o = b->slots[i];
        if (o < 0) {
            b->slots[i] = id;
            return 1;
        }
        if ((size_t)b->len[o] == n && memcmp(b->bytes[o], b->bytes[id], n) == 0) return 0;
    }
}

// ---- loading ----------------------------------------------------------------------------------

static int b64_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// Decodes standard base64 (with '=' padding) into out; returns the length or -1.
static int b64_decode(const char* s, size_t n, uint8_t* out, size_t cap) {
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value((unsigned char)s[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        uint8_t t[3] = {(uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w};
        if (o + 3 - (size_t)pad > cap) return -1;
        memcpy(out + o, t, 3 - (size_t)pad);
        o += 3 - (size_t)pad;
    }
    return (int)o;
}

static char* read_whole(const char* path, size_t* n) {
    int64_t size = file_size(path);
    if (size < 0) fatal("tokenizer '%s': cannot stat: %s", path, strerror(errno));
    FILE* f = xfopen(path, "rb");
    char* data = (char*)xmalloc((size_t)size + 1);
    xfread(data, (size_t)size, f, path, "tokenizer file");
    fclose(f);
    data[size] = 0;
    *n = (size_t)size;
    return data;
}

int bpe_is_rank_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    char line[512];
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    size_t i = 0;
    while (b64_value((unsigned char)line[i]) >= 0 || line[i] == '=') i++;
    if (i == 0 || line[i] != ' ') return 0;
    size_t j = ++i;
    while (line[i] >= '0' && line[i] <= '9') i++;
    return i > j && (line[i] == '\n' || line[i] == '\r' || line[i] == 0);
}

static void set_token(Bpe* b, int id, const uint8_t* p, int n) {
    b->bytes[id] = (uint8_t*)xmalloc((size_t)n + 1);
    memcpy(b->bytes[id], p, (size_t)n);
    b->len[id] = n;
}

// Reads "<base64> <rank>" lines into (ids, bytes) pairs; returns the count.
typedef struct {
    int32_t id;
    int len;
    uint8_t* bytes;
    int line;  // in a rank file
} RawToken;

static RawToken* parse_rank_file(const char* path, int* count) {
    size_t n;
    char* text = read_whole(path, &n);
    size_t cap = 1024, used = 0;
    RawToken* toks = (RawToken*)xmalloc(cap * sizeof *toks);
    uint8_t buf[1024];
    int line = 0;
    for (size_t i = 0; i < n;) {
        line++;
        size_t e = i;
        while (e < n && text[e] != '\n') e++;
        size_t end = e > i && text[e - 1] == '\r' ? e - 1 : e;
        if (end > i) {
            size_t sp = i;
            while (sp < end && text[sp] != ' ') sp++;
            char* num_end = NULL;
            long rank = sp < end ? strtol(text + sp + 1, &num_end, 10) : -1;
            int len = sp < end ? b64_decode(text + i, sp - i, buf, sizeof buf) : -1;
            if (len <= 0 || num_end == text + sp + 1 || num_end != text + end || rank < 0 || rank >= (1 << 24))
                fatal("tokenizer '%s' line %d: expected \"<base64 bytes> <rank>\" (a tiktoken rank file)", path, line);
            if (used == cap) toks = (RawToken*)xrealloc(toks, (cap *= 2) * sizeof *toks);
            toks[used].id = (int32_t)rank;
            toks[used].len = len;
            toks[used].line = line;
            toks[used].bytes = (uint8_t*)xmalloc((size_t)len);
            memcpy(toks[used].bytes, buf, (size_t)len);
            used++;
        }
        i = e + 1;
    }
    free(text);
    if (used == 0) fatal("tokenizer '%s': no ranks in the file", path);
    // N lines hold ranks 0..N-1, each once (repeats are refused on loading):
    // one rank past them would leave a gap and grow the vocabulary silently.
    for (size_t i = 0; i < used; i++)
        if ((size_t)toks[i].id >= used)
            fatal("tokenizer '%s' line %d: rank %d, but the file's %zu ranks must be 0..%zu without gaps", path,
                  toks[i].line, toks[i].id, used, used - 1);
    *count = (int)used;
    return toks;
}

// llm.c's tokenizer file: header, then per id a length byte and the bytes.
static RawToken* parse_llmc_file(const char* path, int* count, int* eot) {
    Tokenizer t;
    tokenizer_load(&t, path);
    if (t.num_merges > 0)
        fatal("tokenizer '%s' is this project's own BPE (it has merges), not a tiktoken encoding; "
              "it encodes through tokenizer_encode",
              path);
    RawToken* toks = (RawToken*)xmalloc((size_t)t.vocab_size * sizeof *toks);
    int used = 0;
    for (int id = 0; id < t.vocab_size; id++) {
        if (id == t.eot || t.len[id] == 0) continue;
        toks[used].id = id;
        toks[used].len = t.len[id];
        toks[used].bytes = (uint8_t*)xmalloc((size_t)t.len[id]);
        memcpy(toks[used].bytes, t.bytes[id], (size_t)t.len[id]);
        used++;
    }
    *eot = t.eot;
    *count = used;
    tokenizer_free(&t);
    return toks;
}

static int pick_encoding(const char* pattern, const char* what, int num_ranks, const char* path) {
    if (pattern && pattern[0]) {
        for (int e = 0; e < NUM_ENCODINGS; e++)
            if (strcmp(pattern, ENCODINGS[e].name) == 0) return e;
        fatal("--pattern '%s' is not a built-in pattern (expected one of %s)", pattern, BPE_PATTERN_NAMES);
    }
    for (int e = 0; e < NUM_ENCODINGS; e++)
        if (num_ranks == ENCODINGS[e].num_ranks) return e;
    fatal("%s '%s': %d ranks match no built-in encoding; name its pattern with --pattern (%s)", what, path, num_ranks,
          BPE_PATTERN_NAMES);
}

static void add_specials(Bpe* b) {
    if (b->encoding == 2) {
        b->num_specials = LLAMA3_NUM_SPECIALS;
        b->specials = (Special*)xmalloc(LLAMA3_NUM_SPECIALS * sizeof *b->specials);
        int named = (int)(sizeof LLAMA3_NAMED / sizeof *LLAMA3_NAMED);
        for (int i = 0; i < LLAMA3_NUM_SPECIALS; i++) {
            char name[64];
            if (i < named) snprintf(name, sizeof name, "%s", LLAMA3_NAMED[i]);
            else snprintf(name, sizeof name, "<|reserved_special_token_%d|>", i - named + 2);
            b->specials[i].text = xstrdup(name);
            b->specials[i].id = LLAMA3_FIRST_SPECIAL + i;
        }
        b->eot = LLAMA3_FIRST_SPECIAL + 1;
        return;
    }
    const Special* s = b->encoding == 0 ? GPT2_SPECIALS : CL100K_SPECIALS;
    b->num_specials = b->encoding == 0 ? 1 : 5;
    b->specials = (Special*)xmalloc((size_t)b->num_specials * sizeof *b->specials);
    for (int i = 0; i < b->num_specials; i++) {
        b->specials[i].text = xstrdup(s[i].text);
        b->specials[i].id = s[i].id;
    }
    b->eot = s[0].id;
}

static void compile_pattern(Bpe* b, const char* path) {
    int err;
    PCRE2_SIZE off;
    const char* p = encoding_pattern(b->encoding);
    b->re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err,
                          &off, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fatal("tokenizer '%s': PCRE2 cannot compile the %s pattern at %zu: %s", path, ENCODINGS[b->encoding].name,
              (size_t)off, (const char*)msg);
    }
    // Without JIT support (a PCRE2 built without it) the interpreter gives the same matches, slower.
    (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE);
}

Bpe* bpe_load(const char* path, const char* pattern, const char* what) {
    if (!file_exists(path)) fatal("%s '%s' does not exist", what, path);
    int count, eot_llmc = -1;
    RawToken* toks = bpe_is_rank_file(path) ? parse_rank_file(path, &count) : parse_llmc_file(path, &count, &eot_llmc);
    Bpe* b = (Bpe*)xcalloc(1, sizeof *b);
    b->encoding = pick_encoding(pattern, what, count, path);
    add_specials(b);
    if (eot_llmc >= 0 && eot_llmc != b->eot)
        fatal("tokenizer '%s': its eot id %d is not the %s encoding's <|endoftext|> %d", path, eot_llmc,
              ENCODINGS[b->encoding].name, b->eot);
    int vocab = 0;
    for (int i = 0; i < count; i++) vocab = toks[i].id + 1 > vocab ? toks[i].id + 1 : vocab;
    for (int i = 0; i < b->num_specials; i++) vocab = b->specials[i].id + 1 > vocab ? b->specials[i].id + 1 : vocab;
    b->vocab = vocab;
    b->bytes = (uint8_t**)xcalloc((size_t)vocab, sizeof *b->bytes);
    b->len = (int*)xcalloc((size_t)vocab, sizeof *b->len);
    for (b->cap = 16; b->cap < 2 * (size_t)count; b->cap *= 2) {
    }
    b->slots = (int32_t*)xmalloc(b->cap * sizeof *b->slots);
    memset(b->slots, 0xff, b->cap * sizeof *b->slots);
    for (int i = 0; i < count; i++) {
        int id = toks[i].id;
        if (b->bytes[id]) fatal("tokenizer '%s': rank %d appears twice", path, id);
        set_token(b, id, toks[i].bytes, toks[i].len);
        if (!rank_insert(b, id)) fatal("tokenizer '%s': the bytes of rank %d also have another rank", path, id);
        free(toks[i].bytes);
    }
    free(toks);
    for (int i = 0; i < b->num_specials; i++) {
        int id = b->specials[i].id;
        if (b->bytes[id])
            fatal("tokenizer '%s': rank %d is the %s special token %s", path, id, ENCODINGS[b->encoding].name,
                  b->specials[i].text);
        set_token(b, id, (const uint8_t*)b->specials[i].text, (int)strlen(b->specials[i].text));
    }
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        if (rank_of(b, &byte, 1) == NO_RANK)
            fatal("tokenizer '%s': byte 0x%02x has no rank, so some text cannot be encoded", path, c);
    }
    compile_pattern(b, path);
    return b;
}

void bpe_free(Bpe* b) {
    if (!b) return;
    for (int i = 0; i < b->vocab; i++) free(b->bytes[i]);
    for (int i = 0; i < b->num_specials; i++) free((char*)b->specials[i].text);
    free(b->specials);
    free(b->bytes);
    free(b->len);
    free(b->slots);
    pcre2_code_free(b->re);
    free(b);
}

int bpe_vocab_size(const Bpe* b) { return b->vocab; }
int bpe_eot(const Bpe* b) { return b->eot; }
const char* bpe_pattern(const Bpe* b) { return ENCODINGS[b->encoding].name; }

const uint8_t* bpe_token_bytes(const Bpe* b, int id, int* len) {
    if (id < 0 || id >= b->vocab || !b->bytes[id]) return NULL;
    *len = b->len[id];
    return b->bytes[id];
}

int bpe_special_id(const Bpe* b, const char* text) {
    for (int i = 0; i < b->num_specials; i++)
        if (strcmp(b->specials[i].text, text) == 0) return b->specials[i].id;
    return -1;
}

// ---- one thread's encoder state ---------------------------------------------------------------

// Encoded pieces are cached (most pieces repeat); the cache starts over past these sizes.
#define CACHE_MAX_ENTRIES (1u << 20)
#define CACHE_MAX_BYTES ((size_t)64 << 20)

typedef struct {
    uint64_t hash;
    uint32_t off, len;  // the piece's bytes in arena
    uint32_t tok, ntok;  // its tokens in pool
} CacheSlot;

struct BpeWork {
    const Bpe* b;
    pcre2_match_data* md;
    pcre2_match_context* mctx;
    pcre2_jit_stack* jit_stack;
    uint8_t* clean;  // the text with invalid UTF-8 replaced
    size_t clean_cap;
    size_t* pos;  // merge state for one piece: part starts, pair ranks
    int32_t* pair;
    size_t piece_cap;
    size_t* next;  // long pieces: the part after the one starting at i (n: none), or 0 when i starts none
    struct PairEntry* heap;
    size_t heap_n, heap_cap, long_cap;
    CacheSlot* slots;
    size_t cap, n;
    uint8_t* arena;
    size_t arena_n, arena_cap;
    int32_t* pool;
    size_t pool_n, pool_cap;
};

static void cache_reset(BpeWork* w) {
    for (size_t i = 0; i < w->cap; i++) w->slots[i].ntok = 0;
    w->n = w->arena_n = w->pool_n = 0;
}

BpeWork* bpe_work_new(const Bpe* b) {
    BpeWork* w = (BpeWork*)xcalloc(1, sizeof *w);
    w->b = b;
    w->md = pcre2_match_data_create_from_pattern(b->re, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    w->jit_stack = pcre2_jit_stack_create(32 << 10, 64 << 20, NULL);
    if (!w->md || !w->mctx || !w->jit_stack) fatal("out of memory for the tokenizer's match state");
    pcre2_jit_stack_assign(w->mctx, NULL, w->jit_stack);
    w->cap = 1 << 16;
    w->slots = (CacheSlot*)xcalloc(w->cap, sizeof *w->slots);
    return w;
}

void bpe_work_free(BpeWork* w) {
    if (!w) return;
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit_stack);
    free(w->clean);
    free(w->pos);
    free(w->pair);
    free(w->next);
    free(w->heap);
    free(w->slots);
    free(w->arena);
    free(w->pool);
    free(w);
}

static void push(int32_t** out, size_t* n, size_t* cap, int32_t t) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        *out = (int32_t*)xrealloc(*out, *cap * sizeof **out);
    }
    (*out)[(*n)++] = t;
}

// Length of the valid UTF-8 sequence at p (1..4), or 0 with *bad set to the
// length of its maximal invalid subpart (Unicode's "substitution of maximal
// subparts", as Python's "replace" decoder does).
static int utf8_seq(const uint8_t* p, size_t n, int* bad) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c == 0xe0) need = 2, lo = 0xa0;
    else if (c == 0xed) need = 2, hi = 0x9f;
    else if (c >= 0xe1 && c <= 0xef) need = 2;
    else if (c == 0xf0) need = 3, lo = 0x90;
    else if (c == 0xf4) need = 3, hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3) need = 3;
    else {
        *bad = 1;
        return 0;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n || p[k] < lo || p[k] > hi) {
            *bad = k;
            return 0;
        }
        lo = 0x80, hi = 0xbf;
    }
    return need + 1;
}

// The text as valid UTF-8: itself when it is, else a repaired copy in w->clean.
static const uint8_t* valid_utf8(BpeWork* w, const uint8_t* t, size_t n, size_t* out_n) {
    size_t i = 0;
    int bad = 0;
    while (i < n) {
        if (t[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_seq(t + i, n - i, &bad);
        if (!k) break;
        i += (size_t)k;
    }
    *out_n = n;
    if (i == n) return t;
    if (w->clean_cap < 3 * n) {
        w->clean_cap = 3 * n;
        w->clean = (uint8_t*)xrealloc(w->clean, w->clean_cap);
    }
    memcpy(w->clean, t, i);
    size_t o = i;
    while (i < n) {
        int k = utf8_seq(t + i, n - i, &bad);
        if (k) {
            memcpy(w->clean + o, t + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(w->clean + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += (size_t)bad;
        }
    }
    *out_n = o;
    return w->clean;
}

// tiktoken's byte_pair_merge: parts start as single bytes; the adjacent pair
// whose joined bytes have the lowest rank merges (the leftmost of equals),
// until no joined pair is a token. Appends the parts' ranks.
static void merge_short(BpeWork* w, const uint8_t* p, size_t n, int32_t** out, size_t* on, size_t* ocap) {
    const Bpe* b = w->b;
    size_t* pos = w->pos;    // (m + 1): part i is bytes [pos[i], pos[i+1])
    int32_t* pair = w->pair;  // (m - 1): rank of parts i and i+1 joined
    size_t m = n;
    for (size_t i = 0; i <= n; i++) pos[i] = i;
    for (size_t i = 0; i + 1 < m; i++) pair[i] = rank_of(b, p + i, 2);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (pair[i] < pair[best]) best = i;
        if (pair[best] == NO_RANK) break;
        memmove(pos + best + 1, pos + best + 2, (m - best - 1) * sizeof *pos);
        memmove(pair + best, pair + best + 1, (m - best - 2) * sizeof *pair);
        m--;
        if (best + 1 < m) pair[best] = rank_of(b, p + pos[best], pos[best + 2] - pos[best]);
        if (best > 0) pair[best - 1] = rank_of(b, p + pos[best - 1], pos[best + 1] - pos[best - 1]);
    }
    for (size_t i = 0; i < m; i++) push(out, on, ocap, rank_of(b, p + pos[i], pos[i + 1] - pos[i]));
}

// Pieces longer than this merge through a heap (O(n log n)); shorter ones by
// scanning for the lowest pair (faster when n is small). Both give tiktoken's result.
#define LONG_PIECE 128

typedef struct PairEntry {
    int32_t rank;
    size_t left, mid, end;  // the parts [left, mid) and [mid, end) when pushed
} PairEntry;

static int entry_before(const PairEntry* a, const PairEntry* b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);  // lowest rank, then leftmost
}

static void heap_push(BpeWork* w, PairEntry e) {
    if (w->heap_n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256;
        w->heap = (PairEntry*)xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    size_t i = w->heap_n++;
    while (i > 0 && entry_before(&e, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = e;
}

static PairEntry heap_pop(BpeWork* w) {
    PairEntry top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->heap_n) break;
        if (c + 1 < w->heap_n && entry_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!entry_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

static void push_pair(BpeWork* w, const uint8_t* p, size_t left, size_t mid, size_t end) {
    int32_t r = rank_of(w->b, p + left, end - left);
    if (r != NO_RANK) heap_push(w, (PairEntry){r, left, mid, end});
}

// The same merges as merge_short, in the same order: a popped pair is used
// only when both its parts are still as they were when it was pushed.
static void merge_long(BpeWork* w, const uint8_t* p, size_t n, int32_t** out, size_t* on, size_t* ocap) {
    if (n + 1 > w->long_cap) {
        w->long_cap = 2 * (n + 1);
        w->next = (size_t*)xrealloc(w->next, w->long_cap * sizeof *w->next);
    }
    size_t* next = w->next;  // next[i]: end of the part starting at i; 0: no part starts at i
    w->heap_n = 0;
    for (size_t i = 0; i < n; i++) next[i] = i + 1;
    for (size_t i = 0; i + 1 < n; i++) push_pair(w, p, i, i + 1, i + 2);
    size_t* prev = w->pos;  // prev[i]: start of the part before the one at i
    for (size_t i = 0; i < n; i++) prev[i] = i ? i - 1 : SIZE_MAX;
    while (w->heap_n) {
        PairEntry e = heap_pop(w);
        if (!next[e.left] || next[e.left] != e.mid || !next[e.mid] || next[e.mid] != e.end) continue;  // stale
        next[e.left] = e.end;
        next[e.mid] = 0;
        if (e.end < n) prev[e.end] = e.left;
        if (prev[e.left] != SIZE_MAX) push_pair(w, p, prev[e.left], e.left, e.end);
        if (e.end < n) push_pair(w, p, e.left, e.end, next[e.end]);
    }
    for (size_t i = 0; i < n; i = next[i]) push(out, on, ocap, rank_of(w->b, p + i, next[i] - i));
}

static void merge_piece(BpeWork* w, const uint8_t* p, size_t n, int32_t** out, size_t* on, size_t* ocap) {
    if (n + 1 > w->piece_cap) {
        w->piece_cap = 2 * (n + 1);
        w->pos = (size_t*)xrealloc(w->pos, w->piece_cap * sizeof *w->pos);
        w->pair = (int32_t*)xrealloc(w->pair, w->piece_cap * sizeof *w->pair);
    }
    if (n > LONG_PIECE) merge_long(w, p, n, out, on, ocap);
    else merge_short(w, p, n, out, on, ocap);
}

static void encode_piece(BpeWork* w, const uint8_t* p, size_t n, int32_t** out, size_t* on, size_t* ocap) {
    int32_t r = rank_of(w->b, p, n);
    if (r != NO_RANK) {
        push(out, on, ocap, r);
        return;
    }
    uint64_t h = hash_bytes(p, n);
    size_t i = (size_t)h & (w->cap - 1);
    for (; w->slots[i].ntok; i = (i + 1) & (w->cap - 1)) {
        CacheSlot* s = &w->slots[i];
        if (s->hash == h && s->len == n && memcmp(w->arena + s->off, p, n) == 0) {
            for (uint32_t k = 0; k < s->ntok; k++) push(out, on, ocap, w->pool[s->tok + k]);
            return;
        }
    }
    size_t start = *on;
    merge_piece(w, p, n, out, on, ocap);
    size_t ntok = *on - start;
    if (w->n + 1 > CACHE_MAX_ENTRIES || w->arena_n + n > CACHE_MAX_BYTES || n > (1u << 16)) return;
    if (2 * (w->n + 1) > w->cap) {  // grow: rehash every slot
        CacheSlot* old = w->slots;
        size_t old_cap = w->cap;
        w->cap *= 2;
        w->slots = (CacheSlot*)xcalloc(w->cap, sizeof *w->slots);
        for (size_t k = 0; k < old_cap; k++) {
            if (!old[k].ntok) continue;
            size_t j = (size_t)old[k].hash & (w->cap - 1);
            while (w->slots[j].ntok) j = (j + 1) & (w->cap - 1);
            w->slots[j] = old[k];
        }
        free(old);
        for (i = (size_t)h & (w->cap - 1); w->slots[i].ntok; i = (i + 1) & (w->cap - 1)) {
        }
    }
    if (w->arena_n + n > w->arena_cap) {
        w->arena_cap = 2 * (w->arena_n + n) + 4096;
        w->arena = (uint8_t*)xrealloc(w->arena, w->arena_cap);
    }
    if (w->pool_n + ntok > w->pool_cap) {
        w->pool_cap = 2 * (w->pool_n + ntok) + 1024;
        w->pool = (int32_t*)xrealloc(w->pool, w->pool_cap * sizeof *w->pool);
    }
    memcpy(w->arena + w->arena_n, p, n);
    memcpy(w->pool + w->pool_n, *out + start, ntok * sizeof **out);
    w->slots[i] = (CacheSlot){h, (uint32_t)w->arena_n, (uint32_t)n, (uint32_t)w->pool_n, (uint32_t)ntok};
    w->arena_n += n;
    w->pool_n += ntok;
    w->n++;
}

// encode_ordinary of valid UTF-8: each match of the pattern is a piece.
static void encode_ordinary(BpeWork* w, const uint8_t* t, size_t n, int32_t** out, size_t* on, size_t* ocap) {
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(w->b->re, t, n, at, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fatal("tokenizer: splitting text at byte %zu failed: %s", at, (const char*)msg);
        }
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(w->md);
        if (ov[1] == ov[0]) {  // an empty match (no built-in pattern has one): step over a character
            at = ov[1] + 1;
            while (at < n && (t[at] & 0xc0) == 0x80) at++;
            continue;
        }
        encode_piece(w, t + ov[0], ov[1] - ov[0], out, on, ocap);
        at = ov[1];
    }
    if (w->n >= CACHE_MAX_ENTRIES || w->arena_n >= CACHE_MAX_BYTES / 2) cache_reset(w);
}

// The first special token in t[from, n): its start (n when none) and index.
static size_t next_special(const Bpe* b, const uint8_t* t, size_t n, size_t from, int* which) {
    for (size_t i = from; i + 1 < n; i++) {
        const uint8_t* q = (const uint8_t*)memchr(t + i, '<', n - i);
        if (!q) break;
        i = (size_t)(q - t);
        if (i + 1 >= n || t[i + 1] != '|') continue;
        int best = -1;
        for (int s = 0; s < b->num_specials; s++) {
            size_t L = strlen(b->specials[s].text);
            if (L <= n - i && memcmp(t + i, b->specials[s].text, L) == 0 &&
                (best < 0 || L > strlen(b->specials[best].text)))
                best = s;
        }
        if (best >= 0) {
            *which = best;
            return i;
        }
    }
    return n;
}

void bpe_encode(BpeWork* w, const char* text, size_t len, int specials, int32_t** out, size_t* n, size_t* cap) {
    size_t m;
    const uint8_t* t = valid_utf8(w, (const uint8_t*)text, len, &m);
    if (!specials) {
        encode_ordinary(w, t, m, out, n, cap);
        return;
    }
    for (size_t at = 0; at < m;) {
        int s = -1;
        size_t next = next_special(w->b, t, m, at, &s);
        encode_ordinary(w, t + at, next - at, out, n, cap);
        if (s < 0) break;
        push(out, n, cap, w->b->specials[s].id);
        at = next + strlen(w->b->specials[s].text);
    }
}
