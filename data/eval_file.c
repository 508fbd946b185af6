// eval_file.c: llm.c's multiple-choice eval files (see eval_file.h).
#include "data/eval_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/util/host_mem.h"

#define EVAL_HEADER_INTS 256
#define EXAMPLE_START 65535

void eval_file_load(EvalFile* e, const char* path, const char* flag, int vocab_size) {
    memset(e, 0, sizeof *e);
    if (!file_exists(path)) fatal("%s '%s' does not exist", flag, path);
    int64_t size = file_size(path);
    if (size < EVAL_HEADER_INTS * 4)
        fatal("%s '%s': truncated header (%lld bytes, the header needs %d)", flag, path, (long long)size,
              EVAL_HEADER_INTS * 4);
    FILE* f = xfopen(path, "rb");
    int32_t h[EVAL_HEADER_INTS];
    xfread(h, sizeof h, f, path, "eval header");
    if (h[0] != EVAL_MAGIC)
        fatal("%s '%s': bad magic %d (expected %d): not an eval file", flag, path, h[0], EVAL_MAGIC);
    if (h[1] != EVAL_VERSION) fatal("%s '%s': unsupported version %d (expected %d)", flag, path, h[1], EVAL_VERSION);
    if (h[2] <= 0) fatal("%s '%s': %d examples (expected at least one)", flag, path, h[2]);
    size_t body = (size_t)(size - (int64_t)sizeof h);
    if (body % 2) fatal("%s '%s': the body has %zu bytes, not a whole number of uint16 tokens", flag, path, body);
    size_t n = body / 2;
    // Every example takes at least 6 tokens (delimiter, length, index, label,
    // completion count, context length): a count the body cannot hold is a
    // lie, refused before anything is allocated for it.
    if ((uint64_t)h[2] * 6 > n)
        fatal("%s '%s': the header's example count %d needs at least %llu tokens, but the body holds %zu", flag, path,
              h[2], (unsigned long long)h[2] * 6, n);
    // The examples' table and the tokens, before either is allocated: one
    // line naming the file and its count rather than the allocator's failure.
    char what[4200];
    snprintf(what, sizeof what, "%s '%s' (its header's example count %d, %zu bytes of tokens)", flag, path, h[2], body);
    host_memory_require((double)body + (double)h[2] * sizeof(EvalExample), what);
    e->data = (uint16_t*)xmalloc(body ? body : 2);
    xfread(e->data, body, f, path, "eval examples");
    fclose(f);
    e->path = xstrdup(path);
    e->num_examples = h[2];
    e->ex = (EvalExample*)xcalloc((size_t)h[2], sizeof *e->ex);
    size_t pos = 0;
    for (int i = 0; i < e->num_examples; i++) {
        if (pos + 6 > n) fatal("%s '%s': truncated: example %d of %d is missing", flag, path, i, e->num_examples);
        const uint16_t* s = e->data + pos;
        if (s[0] != EXAMPLE_START)
            fatal("%s '%s': example %d does not start with the 65535 delimiter (found %u)", flag, path, i, s[0]);
        size_t len = s[1] / 2;
        if (s[1] % 2 || len < 6) fatal("%s '%s': example %d has a bad length of %u bytes", flag, path, i, s[1]);
        if (pos + len > n) fatal("%s '%s': truncated: example %d needs %zu tokens, the file has %zu left", flag, path, i, len, n - pos);
        if (s[2] != (uint16_t)i) fatal("%s '%s': example %d carries index %u", flag, path, i, s[2]);
        EvalExample* x = &e->ex[i];
        x->label = s[3];
        x->num_completions = s[4];
        if (x->num_completions < 2) fatal("%s '%s': example %d has %d completions (expected at least 2)", flag, path, i, x->num_completions);
        if (x->label >= x->num_completions)
            fatal("%s '%s': example %d: label %d is not below its completion count %d", flag, path, i, x->label,
                  x->num_completions);
        size_t at = 5;
        x->ctx_len = s[at++];
        x->ctx = s + at;
        at += (size_t)x->ctx_len;
        x->comp_len = (int*)xmalloc((size_t)x->num_completions * sizeof *x->comp_len);
        x->comp = (const uint16_t**)xmalloc((size_t)x->num_completions * sizeof *x->comp);
        for (int c = 0; c < x->num_completions; c++) {
            if (at >= len) fatal("%s '%s': example %d ends inside completion %d", flag, path, i, c);
            x->comp_len[c] = s[at++];
            x->comp[c] = s + at;
            at += (size_t)x->comp_len[c];
            if (x->comp_len[c] == 0) fatal("%s '%s': example %d: completion %d is empty", flag, path, i, c);
        }
        if (at != len)
            fatal("%s '%s': example %d: its length says %zu tokens but its fields take %zu", flag, path, i, len, at);
        if (x->ctx_len == 0) fatal("%s '%s': example %d has an empty context", flag, path, i);
        for (int t = 0; t < x->ctx_len; t++)
            if (x->ctx[t] >= vocab_size)
                fatal("%s '%s': example %d: context token %u is not below the vocabulary size %d", flag, path, i,
                      x->ctx[t], vocab_size);
        for (int c = 0; c < x->num_completions; c++)
            for (int t = 0; t < x->comp_len[c]; t++)
                if (x->comp[c][t] >= vocab_size)
                    fatal("%s '%s': example %d: completion %d token %u is not below the vocabulary size %d", flag,
                          path, i, c, x->comp[c][t], vocab_size);
        pos += len;
    }
    if (pos != n) fatal("%s '%s': %zu bytes after the last of the %d examples", flag, path, 2 * (n - pos), e->num_examples);
}

void eval_file_free(EvalFile* e) {
    for (int i = 0; e->ex && i < e->num_examples; i++) {
        free(e->ex[i].comp_len);
        free(e->ex[i].comp);
    }
    free(e->ex);
    free(e->data);
    free(e->path);
    memset(e, 0, sizeof *e);
}

void eval_file_write(const char* path, int n, const int* labels, const int* num_completions,
                     int32_t* const* ctx, const int* ctx_len, int32_t** const* comps, int* const* comp_lens) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = xfopen(tmp, "wb");
    int32_t h[EVAL_HEADER_INTS] = {0};
    h[0] = EVAL_MAGIC;
    h[1] = EVAL_VERSION;
    h[2] = n;
    uint16_t* s = NULL;
    size_t cap = 0;
    for (int pass = 0; pass < 2; pass++) {  // pass 0 finds the longest example for the header
        if (pass == 1) xfwrite(h, sizeof h, f, tmp);
        for (int i = 0; i < n; i++) {
            size_t len = 6 + (size_t)ctx_len[i];
            for (int c = 0; c < num_completions[i]; c++) len += 1 + (size_t)comp_lens[i][c];
            if (2 * len > 65535 || i > 65535) fatal("eval file '%s': example %d is too long for the format", path, i);
            if (pass == 0) {
                if ((int32_t)(2 * len) > h[3]) h[3] = (int32_t)(2 * len);
                continue;
            }
            if (len > cap) s = (uint16_t*)xrealloc(s, (cap = 2 * len) * sizeof *s);
            size_t at = 0;
            s[at++] = EXAMPLE_START;
            s[at++] = (uint16_t)(2 * len);
            s[at++] = (uint16_t)i;
            s[at++] = (uint16_t)labels[i];
            s[at++] = (uint16_t)num_completions[i];
            s[at++] = (uint16_t)ctx_len[i];
            for (int t = 0; t < ctx_len[i]; t++) s[at++] = (uint16_t)ctx[i][t];
            for (int c = 0; c < num_completions[i]; c++) {
                s[at++] = (uint16_t)comp_lens[i][c];
                for (int t = 0; t < comp_lens[i][c]; t++) s[at++] = (uint16_t)comps[i][c][t];
            }
            xfwrite(s, at * sizeof *s, f, tmp);
        }
    }
    free(s);
    xfclose(f, tmp);
    if (rename(tmp, path) != 0) fatal("eval file '%s': cannot rename '%s' into place: %s", path, tmp, strerror(errno));
}
