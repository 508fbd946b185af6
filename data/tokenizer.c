// tokenizer.c: byte-level BPE: pre-splitting text into pieces, training merges,
// encoding by merge rank, decoding by table lookup, and the tokenizer file.
//
// Training works on the unique pieces weighted by how often they occur, and
// keeps pair counts up to date incrementally: a merge only revisits the pieces
// that contain the merged pair (found through a per-pair list of pieces) and a
// max-heap with lazy invalidation picks the next pair. Ties in count go to the
// smallest (left, right) ids, so training is deterministic.
#include "data/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe.h"
#include "llm/util/rng.h"

#define TOKENIZER_VERSION 2
#define MAX_TOKEN_BYTES 255        // the file stores lengths in one byte
#define MAX_PIECE_BYTES 65536      // longer runs are cut, bounding per-piece work
#define ENCODE_CACHE_LIMIT (1 << 20)
static const char EOT_TEXT[] = "<|endoftext|>";

// ---- pre-splitting ------------------------------------------------------------------------------

enum { C_SPACE, C_LETTER, C_DIGIT, C_OTHER };

static int byte_class(uint8_t c) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return C_SPACE;
    if (((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80) return C_LETTER;  // UTF-8 stays in words
    if (c >= '0' && c <= '9') return C_DIGIT;
    return C_OTHER;
}

// End of the piece that starts at i: a run of one class with at most one
// leading space, or a run of whitespace that leaves its last space to the
// word after it.
static size_t piece_end(const uint8_t* t, size_t n, size_t i) {
    size_t limit = n - i > MAX_PIECE_BYTES ? i + MAX_PIECE_BYTES : n;
    size_t j = i + 1;
    int c = byte_class(t[i]);
    if (t[i] == ' ' && j < limit && byte_class(t[j]) != C_SPACE) {
        c = byte_class(t[j]);
        j++;
    } else if (c == C_SPACE) {
        while (j < limit && byte_class(t[j]) == C_SPACE) j++;
        if (j < n && j - 1 > i && t[j - 1] == ' ' && byte_class(t[j]) != C_SPACE) j--;
        return j;
    }
    while (j < limit && byte_class(t[j]) == c) j++;
    return j;
}

// ---- hash maps ----------------------------------------------------------------------------------

// Open addressing, uint64 keys (UINT64_MAX marks an empty slot) to int32 values.
typedef struct {
    uint64_t* keys;
    int32_t* vals;
    size_t cap, n;
} U64Map;

static void u64map_init(U64Map* m, size_t cap) {
    size_t c = 16;
    while (c < 2 * cap) c *= 2;
    m->cap = c;
    m->n = 0;
    m->keys = (uint64_t*)xmalloc(c * sizeof *m->keys);
    m->vals = (int32_t*)xmalloc(c * sizeof *m->vals);
    memset(m->keys, 0xff, c * sizeof *m->keys);
}

static void u64map_free(U64Map* m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t u64map_slot(const U64Map* m, uint64_t key) {
    size_t i = (size_t)rng_mix64(key) & (m->cap - 1);
    while (m->keys[i] != key && m->keys[i] != UINT64_MAX) i = (i + 1) & (m->cap - 1);
    return i;
}

static int32_t u64map_get(const U64Map* m, uint64_t key) {
    size_t i = u64map_slot(m, key);
    return m->keys[i] == key ? m->vals[i] : -1;
}

static void u64map_put(U64Map* m, uint64_t key, int32_t val) {
    if (2 * (m->n + 1) > m->cap) {
        U64Map big;
        u64map_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i] != UINT64_MAX) u64map_put(&big, m->keys[i], m->vals[i]);
        u64map_free(m);
        *m = big;
    }
    size_t i = u64map_slot(m, key);
    if (m->keys[i] == UINT64_MAX) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

// Byte strings (pointing into the caller's text) to int32 values.
typedef struct {
    const uint8_t* ptr;
    uint64_t hash;
    uint32_t len;
    int32_t val;  // -1: empty slot
} StrSlot;

typedef struct {
    StrSlot* slots;
    size_t cap, n;
} StrMap;

static void strmap_init(StrMap* m, size_t cap) {
    size_t c = 16;
    while (c < 2 * cap) c *= 2;
    m->cap = c;
    m->n = 0;
    m->slots = (StrSlot*)xmalloc(c * sizeof *m->slots);
    for (size_t i = 0; i < c; i++) m->slots[i].val = -1;
}

static uint64_t hash_bytes(const uint8_t* p, size_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static StrSlot* strmap_probe(StrMap* m, const uint8_t* p, uint32_t len, uint64_t h) {
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        StrSlot* s = &m->slots[i];
        if (s->val < 0 || (s->hash == h && s->len == len && memcmp(s->ptr, p, len) == 0)) return s;
        i = (i + 1) & (m->cap - 1);
    }
}

static void strmap_grow(StrMap* m) {
    StrMap big;
    strmap_init(&big, m->cap);
    for (size_t i = 0; i < m->cap; i++) {
        StrSlot* s = &m->slots[i];
        if (s->val >= 0) *strmap_probe(&big, s->ptr, s->len, s->hash) = *s;
    }
    big.n = m->n;
    free(m->slots);
    *m = big;
}

// The slot for this string: found (val >= 0) or freshly claimed (val -1, the caller fills it).
static StrSlot* strmap_lookup(StrMap* m, const uint8_t* p, uint32_t len) {
    if (2 * (m->n + 1) > m->cap) strmap_grow(m);
    uint64_t h = hash_bytes(p, len);
    StrSlot* s = strmap_probe(m, p, len, h);
    if (s->val < 0) {
        s->ptr = p;
        s->len = len;
        s->hash = h;
        m->n++;
    }
    return s;
}

static void strmap_free(StrMap* m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// ---- training -----------------------------------------------------------------------------------

typedef struct {
    int32_t* sym;   // current symbols (a slice of one shared pool)
    int32_t len;
    int64_t count;  // occurrences of this piece in the text
} Word;

typedef struct {
    int32_t* items;
    int32_t n, cap;
} IntList;

typedef struct {
    int64_t count;
    uint64_t key;
} HeapEntry;

typedef struct {
    Word* words;
    int32_t num_words;
    int32_t* pool;
    U64Map pair_index;  // pair key -> pair number
    uint64_t* pair_keys;
    int64_t* pair_count;
    IntList* pair_words;   // pieces that contained the pair when it was counted (may be stale)
    int32_t* pair_stamp;   // last merge that touched it, to list each new pair once
    int32_t num_pairs, pairs_cap;
    HeapEntry* heap;
    size_t heap_n, heap_cap;
    int32_t* tok_len;      // bytes per token so far, to keep tokens within MAX_TOKEN_BYTES
} BpeTrainer;

static int heap_before(HeapEntry a, HeapEntry b) {
    return a.count > b.count || (a.count == b.count && a.key < b.key);
}

static void heap_push(BpeTrainer* tr, int64_t count, uint64_t key) {
    if (tr->heap_n == tr->heap_cap) {
        tr->heap_cap = tr->heap_cap ? 2 * tr->heap_cap : 1024;
        tr->heap = (HeapEntry*)xrealloc(tr->heap, tr->heap_cap * sizeof *tr->heap);
    }
    size_t i = tr->heap_n++;
    HeapEntry e = {count, key};
    while (i > 0 && heap_before(e, tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
}

static HeapEntry heap_pop(BpeTrainer* tr) {
    HeapEntry top = tr->heap[0], last = tr->heap[--tr->heap_n];
    size_t i = 0, n = tr->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(tr->heap[c + 1], tr->heap[c])) c++;
        if (!heap_before(tr->heap[c], last)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n > 0) tr->heap[i] = last;
    return top;
}

static int32_t pair_number(BpeTrainer* tr, uint64_t key) {
    int32_t p = u64map_get(&tr->pair_index, key);
    if (p >= 0) return p;
    if (tr->num_pairs == tr->pairs_cap) {
        tr->pairs_cap = tr->pairs_cap ? 2 * tr->pairs_cap : 4096;
        size_t c = (size_t)tr->pairs_cap;
        tr->pair_keys = (uint64_t*)xrealloc(tr->pair_keys, c * sizeof *tr->pair_keys);
        tr->pair_count = (int64_t*)xrealloc(tr->pair_count, c * sizeof *tr->pair_count);
        tr->pair_words = (IntList*)xrealloc(tr->pair_words, c * sizeof *tr->pair_words);
        tr->pair_stamp = (int32_t*)xrealloc(tr->pair_stamp, c * sizeof *tr->pair_stamp);
    }
    p = tr->num_pairs++;
    tr->pair_keys[p] = key;
    tr->pair_count[p] = 0;
    tr->pair_words[p] = (IntList){NULL, 0, 0};
    tr->pair_stamp[p] = -1;
    u64map_put(&tr->pair_index, key, p);
    return p;
}

static void list_add_once(IntList* l, int32_t w) {
    if (l->n > 0 && l->items[l->n - 1] == w) return;  // a piece's pairs are added together
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->items = (int32_t*)xrealloc(l->items, (size_t)l->cap * sizeof *l->items);
    }
    l->items[l->n++] = w;
}

static void split_and_count(BpeTrainer* tr, const uint8_t* text, size_t len) {
    StrMap pieces;
    strmap_init(&pieces, 1 << 16);
    int64_t* counts = NULL;
    size_t counts_cap = 0, total_bytes = 0;
    for (size_t i = 0; i < len;) {
        size_t j = piece_end(text, len, i);
        StrSlot* s = strmap_lookup(&pieces, text + i, (uint32_t)(j - i));
        if (s->val < 0) {
            if ((size_t)tr->num_words == counts_cap) {
                counts_cap = counts_cap ? 2 * counts_cap : 1 << 16;
                counts = (int64_t*)xrealloc(counts, counts_cap * sizeof *counts);
            }
            s->val = tr->num_words++;
            counts[s->val] = 0;
            total_bytes += j - i;
        }
        counts[s->val]++;
        i = j;
    }
    // Words in first-seen order, so training does not depend on hash layout.
    tr->words = (Word*)xcalloc((size_t)tr->num_words + 1, sizeof *tr->words);
    tr->pool = (int32_t*)xmalloc((total_bytes + 1) * sizeof *tr->pool);
    const uint8_t** starts = (const uint8_t**)xmalloc(((size_t)tr->num_words + 1) * sizeof *starts);
    for (size_t i = 0; i < pieces.cap; i++) {
        StrSlot* s = &pieces.slots[i];
        if (s->val < 0) continue;
        starts[s->val] = s->ptr;
        tr->words[s->val].len = (int32_t)s->len;
    }
    size_t off = 0;
    for (int32_t w = 0; w < tr->num_words; w++) {
        Word* wd = &tr->words[w];
        wd->sym = tr->pool + off;
        wd->count = counts[w];
        for (int32_t k = 0; k < wd->len; k++) wd->sym[k] = starts[w][k];
        off += (size_t)wd->len;
    }
    free(starts);
    free(counts);
    strmap_free(&pieces);
}

static void count_initial_pairs(BpeTrainer* tr) {
    u64map_init(&tr->pair_index, 1 << 14);
    for (int32_t w = 0; w < tr->num_words; w++) {
        Word* wd = &tr->words[w];
        for (int32_t k = 0; k + 1 < wd->len; k++) {
            int32_t p = pair_number(tr, pair_key(wd->sym[k], wd->sym[k + 1]));
            tr->pair_count[p] += wd->count;
            list_add_once(&tr->pair_words[p], w);
        }
    }
    for (int32_t p = 0; p < tr->num_pairs; p++) heap_push(tr, tr->pair_count[p], tr->pair_keys[p]);
}

static int word_has_pair(const Word* wd, int32_t a, int32_t b) {
    for (int32_t k = 0; k + 1 < wd->len; k++)
        if (wd->sym[k] == a && wd->sym[k + 1] == b) return 1;
    return 0;
}

// Adds delta to every pair of the word; with z >= 0, lists the word under
// each pair containing z and collects those pairs in `fresh`.
static void add_word_pairs(BpeTrainer* tr, int32_t w, int64_t delta, int32_t z, int32_t m, IntList* fresh) {
    Word* wd = &tr->words[w];
    for (int32_t k = 0; k + 1 < wd->len; k++) {
        int32_t a = wd->sym[k], b = wd->sym[k + 1];
        int32_t p = pair_number(tr, pair_key(a, b));
        tr->pair_count[p] += delta;
        if (z >= 0 && (a == z || b == z)) {
            list_add_once(&tr->pair_words[p], w);
            if (tr->pair_stamp[p] != m) {
                tr->pair_stamp[p] = m;
                list_add_once(fresh, p);
            }
        }
    }
}

// Replaces every non-overlapping (a, b), left to right, with z: what encode does too.
static void merge_in_word(Word* wd, int32_t a, int32_t b, int32_t z) {
    int32_t out = 0;
    for (int32_t k = 0; k < wd->len; k++) {
        if (k + 1 < wd->len && wd->sym[k] == a && wd->sym[k + 1] == b) {
            wd->sym[out++] = z;
            k++;
        } else {
            wd->sym[out++] = wd->sym[k];
        }
    }
    wd->len = out;
}

static void apply_merge(BpeTrainer* tr, int32_t p, int32_t z, int32_t m, IntList* fresh) {
    int32_t a = (int32_t)(tr->pair_keys[p] >> 32), b = (int32_t)(tr->pair_keys[p] & 0xffffffffu);
    // Taken out of the table: new pairs may grow (move) it, and (a, b) is gone after this merge.
    IntList where = tr->pair_words[p];
    tr->pair_words[p] = (IntList){NULL, 0, 0};
    fresh->n = 0;
    for (int32_t i = 0; i < where.n; i++) {
        int32_t w = where.items[i];
        Word* wd = &tr->words[w];
        if (!word_has_pair(wd, a, b)) continue;  // a stale entry: merged away earlier
        add_word_pairs(tr, w, -wd->count, -1, m, NULL);
        merge_in_word(wd, a, b, z);
        add_word_pairs(tr, w, wd->count, z, m, fresh);
    }
    free(where.items);
    for (int32_t i = 0; i < fresh->n; i++) {
        int32_t q = fresh->items[i];
        if (tr->pair_count[q] > 0) heap_push(tr, tr->pair_count[q], tr->pair_keys[q]);
    }
}

// Pops the most frequent pair whose merged token fits the file format; -1 when none is left.
static int32_t next_best_pair(BpeTrainer* tr) {
    while (tr->heap_n > 0) {
        HeapEntry e = heap_pop(tr);
        int32_t p = u64map_get(&tr->pair_index, e.key);
        int64_t c = tr->pair_count[p];
        if (c != e.count) {  // stale: counts only fall, so re-queue at the true count
            if (c > 0) heap_push(tr, c, e.key);
            continue;
        }
        int32_t a = (int32_t)(e.key >> 32), b = (int32_t)(e.key & 0xffffffffu);
        if (tr->tok_len[a] + tr->tok_len[b] > MAX_TOKEN_BYTES) continue;
        return p;
    }
    return -1;
}

static void bpe_trainer_free(BpeTrainer* tr) {
    for (int32_t p = 0; p < tr->num_pairs; p++) free(tr->pair_words[p].items);
    free(tr->words);
    free(tr->pool);
    u64map_free(&tr->pair_index);
    free(tr->pair_keys);
    free(tr->pair_count);
    free(tr->pair_words);
    free(tr->pair_stamp);
    free(tr->heap);
    free(tr->tok_len);
}

static void set_token_bytes(Tokenizer* tok, int id, const uint8_t* a, int na, const uint8_t* b, int nb) {
    tok->len[id] = na + nb;
    tok->bytes[id] = (uint8_t*)xmalloc((size_t)(na + nb));
    memcpy(tok->bytes[id], a, (size_t)na);
    if (nb) memcpy(tok->bytes[id] + na, b, (size_t)nb);
}

static void build_encode_index(Tokenizer* tok);

static void tokenizer_alloc(Tokenizer* tok, int vocab_size, int num_merges) {
    memset(tok, 0, sizeof *tok);
    tok->vocab_size = vocab_size;
    tok->eot = vocab_size - 1;
    tok->num_merges = num_merges;
    tok->bytes = (uint8_t**)xcalloc((size_t)vocab_size, sizeof *tok->bytes);
    tok->len = (int*)xcalloc((size_t)vocab_size, sizeof *tok->len);
    tok->merges = (int32_t*)xmalloc((size_t)(2 * num_merges + 1) * sizeof *tok->merges);
}

void tokenizer_train(Tokenizer* tok, const char* text, size_t len, int vocab_size, int verbose) {
    if (vocab_size < 257) fatal("tokenizer vocabulary size %d is too small: 256 bytes + eot need 257", vocab_size);
    double t0 = now_seconds();
    int target = vocab_size - 257;
    BpeTrainer tr;
    memset(&tr, 0, sizeof tr);
    tr.tok_len = (int32_t*)xmalloc((size_t)vocab_size * sizeof *tr.tok_len);
    for (int i = 0; i < 256; i++) tr.tok_len[i] = 1;
    split_and_count(&tr, (const uint8_t*)text, len);
    count_initial_pairs(&tr);
    if (verbose)
        fprintf(stderr, "tokenizer: %zu bytes, %d unique pieces, %d pairs, learning %d merges\n", len,
                tr.num_words, tr.num_pairs, target);

    int32_t* merges = (int32_t*)xmalloc((size_t)(2 * target + 1) * sizeof *merges);
    IntList fresh = {NULL, 0, 0};
    int m = 0;
    for (; m < target; m++) {
        int32_t p = next_best_pair(&tr);
        if (p < 0) break;
        int32_t z = 256 + m;
        merges[2 * m] = (int32_t)(tr.pair_keys[p] >> 32);
        merges[2 * m + 1] = (int32_t)(tr.pair_keys[p] & 0xffffffffu);
        tr.tok_len[z] = tr.tok_len[merges[2 * m]] + tr.tok_len[merges[2 * m + 1]];
        if (verbose && (m + 1) % 1000 == 0)
            fprintf(stderr, "tokenizer: merge %d/%d (pair count %lld), %.2fs\n", m + 1, target,
                    (long long)tr.pair_count[p], now_seconds() - t0);
        apply_merge(&tr, p, z, m, &fresh);
    }
    free(fresh.items);
    bpe_trainer_free(&tr);
    if (m < target)
        warn("tokenizer: the text supports only %d merges; the vocabulary has %d ids, not %d", m, 257 + m,
             vocab_size);

    tokenizer_alloc(tok, 257 + m, m);
    memcpy(tok->merges, merges, (size_t)(2 * m) * sizeof *merges);
    free(merges);
    for (int i = 0; i < 256; i++) {
        uint8_t b = (uint8_t)i;
        set_token_bytes(tok, i, &b, 1, NULL, 0);
    }
    for (int i = 0; i < m; i++) {
        int a = tok->merges[2 * i], b = tok->merges[2 * i + 1];
        set_token_bytes(tok, 256 + i, tok->bytes[a], tok->len[a], tok->bytes[b], tok->len[b]);
    }
    set_token_bytes(tok, tok->eot, (const uint8_t*)EOT_TEXT, (int)strlen(EOT_TEXT), NULL, 0);
    build_encode_index(tok);
    if (verbose) fprintf(stderr, "tokenizer: trained %d merges in %.2fs\n", m, now_seconds() - t0);
}

// ---- encoding -----------------------------------------------------------------------------------

// Ranks of the merges by pair; present only when ids 0..255 are the raw bytes.
static void build_encode_index(Tokenizer* tok) {
    if (tok->vocab_size < 257) return;
    for (int i = 0; i < 256; i++)
        if (tok->len[i] != 1 || tok->bytes[i][0] != (uint8_t)i) return;  // e.g. GPT-2's remapped bytes
    U64Map* ranks = (U64Map*)xmalloc(sizeof *ranks);
    u64map_init(ranks, (size_t)tok->num_merges + 1);
    for (int i = 0; i < tok->num_merges; i++)
        u64map_put(ranks, pair_key(tok->merges[2 * i], tok->merges[2 * i + 1]), i);
    tok->encode_index = ranks;
}

// Encodes one piece into sym (capacity >= n); returns the number of tokens.
static size_t encode_piece(const U64Map* ranks, const uint8_t* p, size_t n, int32_t* sym) {
    for (size_t k = 0; k < n; k++) sym[k] = p[k];
    for (;;) {
        // The merge with the lowest rank is the one training applied first.
        int32_t best = INT32_MAX;
        size_t at = 0;
        for (size_t k = 0; k + 1 < n; k++) {
            int32_t r = u64map_get(ranks, pair_key(sym[k], sym[k + 1]));
            if (r >= 0 && r < best) {
                best = r;
                at = k;
            }
        }
        if (best == INT32_MAX) return n;
        int32_t a = sym[at], b = sym[at + 1];
        size_t out = 0;
        for (size_t k = 0; k < n; k++) {
            if (k + 1 < n && sym[k] == a && sym[k + 1] == b) {
                sym[out++] = 256 + best;
                k++;
            } else {
                sym[out++] = sym[k];
            }
        }
        n = out;
    }
}

typedef struct {
    int32_t* items;
    size_t n, cap;
} TokenBuf;

static void tokbuf_append(TokenBuf* b, const int32_t* src, size_t n) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->items = (int32_t*)xrealloc(b->items, b->cap * sizeof *b->items);
    }
    memcpy(b->items + b->n, src, n * sizeof *src);
    b->n += n;
}

size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int32_t** out) {
    if (tok->bpe) {
        BpeWork* w = bpe_work_new((const Bpe*)tok->bpe);
        size_t n = 0, cap = 0;
        *out = NULL;
        bpe_encode(w, text, len, 0, out, &n, &cap);
        bpe_work_free(w);
        return n;
    }
    const U64Map* ranks = (const U64Map*)tok->encode_index;
    if (!ranks) fatal("tokenizer has no merges (a decode-only file): it cannot encode text");
    const uint8_t* t = (const uint8_t*)text;
    TokenBuf result = {NULL, 0, 0}, pool = {NULL, 0, 0};  // pool: cached encodings back to back
    result.cap = len / 3 + 16;
    result.items = (int32_t*)xmalloc(result.cap * sizeof *result.items);
    StrMap cache;  // piece -> offset in pool, where pool[off] = length, then the tokens
    strmap_init(&cache, 1 << 12);
    int32_t* sym = (int32_t*)xmalloc(MAX_PIECE_BYTES * sizeof *sym);
    for (size_t i = 0; i < len;) {
        size_t j = piece_end(t, len, i);
        StrSlot* s = strmap_lookup(&cache, t + i, (uint32_t)(j - i));
        if (s->val < 0) {
            size_t n = encode_piece(ranks, t + i, j - i, sym);
            if (pool.n + n + 1 > (size_t)INT32_MAX || cache.n > ENCODE_CACHE_LIMIT) {
                tokbuf_append(&result, sym, n);  // cache full: start it over for later pieces
                strmap_free(&cache);
                strmap_init(&cache, 1 << 12);
                pool.n = 0;
                i = j;
                continue;
            }
            s->val = (int32_t)pool.n;
            int32_t n32 = (int32_t)n;
            tokbuf_append(&pool, &n32, 1);
            tokbuf_append(&pool, sym, n);
        }
        tokbuf_append(&result, pool.items + s->val + 1, (size_t)pool.items[s->val]);
        i = j;
    }
    free(sym);
    free(pool.items);
    strmap_free(&cache);
    *out = result.items;
    return result.n;
}

size_t tokenizer_decode_token(const Tokenizer* tok, int id, char* buf, size_t cap) {
    if (id < 0 || id >= tok->vocab_size || !tok->bytes[id]) return 0;
    size_t n = (size_t)tok->len[id] < cap ? (size_t)tok->len[id] : cap;
    memcpy(buf, tok->bytes[id], n);
    return n;
}

// ---- file ---------------------------------------------------------------------------------------

static void put_u32(FILE* f, const char* path, uint32_t v) { xfwrite(&v, 4, f, path); }

void tokenizer_save(const Tokenizer* tok, const char* path) {
    // Written to a temporary name and renamed: the Makefile treats the file as done.
    size_t tmp_len = strlen(path) + 5;
    char* tmp = (char*)xmalloc(tmp_len);
    snprintf(tmp, tmp_len, "%s.tmp", path);
    FILE* f = xfopen(tmp, "wb");
    uint32_t h[256] = {0};
    h[0] = TOKENIZER_MAGIC;
    h[1] = TOKENIZER_VERSION;
    h[2] = (uint32_t)tok->vocab_size;
    h[3] = (uint32_t)tok->eot;
    h[4] = (uint32_t)tok->num_merges;
    xfwrite(h, sizeof h, f, tmp);
    for (int i = 0; i < tok->vocab_size; i++) {
        if (tok->len[i] < 1 || tok->len[i] > MAX_TOKEN_BYTES)
            fatal("tokenizer '%s': token %d has %d bytes, the format allows 1..%d", path, i, tok->len[i],
                  MAX_TOKEN_BYTES);
        uint8_t n = (uint8_t)tok->len[i];
        xfwrite(&n, 1, f, tmp);
        xfwrite(tok->bytes[i], n, f, tmp);
    }
    for (int i = 0; i < tok->num_merges; i++) {
        put_u32(f, tmp, (uint32_t)tok->merges[2 * i]);
        put_u32(f, tmp, (uint32_t)tok->merges[2 * i + 1]);
    }
    if (fflush(f) != 0) fatal("tokenizer '%s': write failed: %s", tmp, strerror(errno));
    xfclose(f, tmp);
    if (rename(tmp, path) != 0) fatal("tokenizer '%s': cannot rename '%s' into place: %s", path, tmp, strerror(errno));
    free(tmp);
}

typedef struct {
    const uint8_t* p;
    size_t n, pos;
    const char* path;
} Reader;

static const uint8_t* take(Reader* r, size_t bytes, const char* what, int index) {
    if (r->n - r->pos < bytes)
        fatal("tokenizer '%s': truncated in %s %d (file has %zu bytes)", r->path, what, index, r->n);
    const uint8_t* p = r->p + r->pos;
    r->pos += bytes;
    return p;
}

static uint32_t take_u32(Reader* r, const char* what, int index) {
    uint32_t v;
    memcpy(&v, take(r, 4, what, index), 4);
    return v;
}

static void check_merges(const Tokenizer* tok, const char* path) {
    for (int i = 0; i < tok->num_merges; i++) {
        int a = tok->merges[2 * i], b = tok->merges[2 * i + 1], id = 256 + i;
        if (a < 0 || b < 0 || a >= id || b >= id)
            fatal("tokenizer '%s': merge %d (%d, %d) refers to a token not defined before it", path, i, a, b);
        if (tok->len[id] != tok->len[a] + tok->len[b] || memcmp(tok->bytes[id], tok->bytes[a], (size_t)tok->len[a]) ||
            memcmp(tok->bytes[id] + tok->len[a], tok->bytes[b], (size_t)tok->len[b]))
            fatal("tokenizer '%s': token %d is not the concatenation of merge %d's tokens %d and %d", path, id, i, a, b);
    }
}

// A tiktoken rank file: the bytes of every id (specials: their text) for
// decoding, and the tiktoken-compatible encoder for encoding.
static void load_rank_file(Tokenizer* tok, const char* path) {
    Bpe* b = bpe_load(path, NULL, "--tokenizer");
    memset(tok, 0, sizeof *tok);
    tok->vocab_size = bpe_vocab_size(b);
    tok->eot = bpe_eot(b);
    tok->bytes = (uint8_t**)xcalloc((size_t)tok->vocab_size, sizeof *tok->bytes);
    tok->len = (int*)xcalloc((size_t)tok->vocab_size, sizeof *tok->len);
    for (int id = 0; id < tok->vocab_size; id++) {
        int n;
        const uint8_t* p = bpe_token_bytes(b, id, &n);
        if (!p) continue;
        tok->bytes[id] = (uint8_t*)xmalloc((size_t)n);
        memcpy(tok->bytes[id], p, (size_t)n);
        tok->len[id] = n;
    }
    tok->bpe = b;
}

void tokenizer_load(Tokenizer* tok, const char* path) {
    if (bpe_is_rank_file(path)) {
        load_rank_file(tok, path);
        return;
    }
    FILE* f = xfopen(path, "rb");
    int64_t size = file_size(path);
    if (size < 0) fatal("tokenizer '%s': cannot stat: %s", path, strerror(errno));
    uint8_t* data = (uint8_t*)xmalloc((size_t)size);
    xfread(data, (size_t)size, f, path, "tokenizer file");
    fclose(f);
    Reader r = {data, (size_t)size, 0, path};

    uint32_t h[256];
    if (r.n < sizeof h)
        fatal("tokenizer '%s': truncated header: file has %zu bytes, the header needs %zu", path, r.n, sizeof h);
    memcpy(h, take(&r, sizeof h, "header", 0), sizeof h);
    if (h[0] != TOKENIZER_MAGIC)
        fatal("tokenizer '%s': bad magic %u (expected %d): not a tokenizer file", path, h[0], TOKENIZER_MAGIC);
    if (h[1] != 1 && h[1] != 2)
        fatal("tokenizer '%s': unsupported version %u (expected 1 or 2)", path, h[1]);
    if (h[2] < 1 || h[2] > (1u << 24)) fatal("tokenizer '%s': implausible vocabulary size %u", path, h[2]);
    int vocab = (int)h[2];
    int eot = h[1] == 2 ? (int)h[3] : vocab - 1;  // version 1 (GPT-2's) has eot last
    uint32_t merges_in_header = h[1] == 2 ? h[4] : 0;
    if (eot < 0 || eot >= vocab) fatal("tokenizer '%s': eot id %d is outside the vocabulary of %d", path, eot, vocab);
    // In 64 bits: 256 + a header's merge count can pass INT_MAX.
    if (merges_in_header > 0 && 256 + (int64_t)merges_in_header > vocab - 1)
        fatal("tokenizer '%s': %u merges do not fit a vocabulary of %d (256 bytes + merges + eot)", path,
              merges_in_header, vocab);
    int merges = (int)merges_in_header;  // < 2^24 now

    tokenizer_alloc(tok, vocab, merges);
    tok->eot = eot;
    for (int i = 0; i < vocab; i++) {
        int n = *take(&r, 1, "length of token", i);
        tok->len[i] = n;
        tok->bytes[i] = (uint8_t*)xmalloc((size_t)n);
        memcpy(tok->bytes[i], take(&r, (size_t)n, "bytes of token", i), (size_t)n);
    }
    for (int i = 0; i < merges; i++) {
        tok->merges[2 * i] = (int32_t)take_u32(&r, "merge", i);
        tok->merges[2 * i + 1] = (int32_t)take_u32(&r, "merge", i);
    }
    if (r.pos != r.n)
        fatal("tokenizer '%s': %zu unexpected bytes after the %s", path, r.n - r.pos, merges ? "merges" : "tokens");
    free(data);
    check_merges(tok, path);
    build_encode_index(tok);
}

void tokenizer_free(Tokenizer* tok) {
    if (tok->bytes)
        for (int i = 0; i < tok->vocab_size; i++) free(tok->bytes[i]);
    free(tok->bytes);
    free(tok->len);
    free(tok->merges);
    if (tok->encode_index) {
        u64map_free((U64Map*)tok->encode_index);
        free(tok->encode_index);
    }
    bpe_free((Bpe*)tok->bpe);
    memset(tok, 0, sizeof *tok);
}

int tokenizer_vocab_if_present(const char* path) {
    if (!path[0] || !file_exists(path)) return 0;
    Tokenizer tok;
    tokenizer_load(&tok, path);
    int vocab = tok.vocab_size;
    tokenizer_free(&tok);
    return vocab;
}
