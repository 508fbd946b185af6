// tokenize.c: encodes a text file with a tiktoken-compatible tokenizer (a
// tiktoken rank file or llm.c's gpt2_tokenizer.bin; data/bpe.h), or decodes
// tokens back to bytes. Tokens are little-endian uint32, the way the tests
// compare them with tiktoken's and a shell pipe can pass them on.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe.h"
#include "llm/util/util.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: tokenize --tokenizer FILE [--pattern NAME] [--special] [--decode] [INPUT [OUTPUT]]\n"
            "  Encodes INPUT (stdin when absent or '-') as tiktoken does and writes the tokens as\n"
            "  little-endian uint32 to OUTPUT (stdout when absent). --tokenizer is a tiktoken rank\n"
            "  file or llm.c's gpt2_tokenizer.bin; --pattern picks the split pattern (%s;\n"
            "  default: from the vocabulary); --special reads special tokens' text (<|endoftext|>)\n"
            "  as those tokens (tiktoken's allowed_special=\"all\"), else as plain text.\n"
            "  --decode: INPUT holds uint32 tokens; OUTPUT gets their bytes.\n",
            BPE_PATTERN_NAMES);
}

static char* read_all(FILE* f, const char* name, size_t* n) {
    size_t cap = 1 << 20, used = 0;
    char* buf = (char*)xmalloc(cap);
    for (;;) {
        if (used == cap) buf = (char*)xrealloc(buf, cap *= 2);
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (got == 0) break;
    }
    if (ferror(f)) fatal("tokenize: cannot read '%s'", name);
    *n = used;
    return buf;
}

int main(int argc, char** argv) {
    const char *tok_path = NULL, *pattern = NULL, *in_path = NULL, *out_path = NULL;
    int special = 0, decode = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--pattern")) {
            if (i + 1 >= argc) fatal("%s needs a value", a);
            *(a[2] == 't' ? &tok_path : &pattern) = argv[++i];
        } else if (!strcmp(a, "--special")) {
            special = 1;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else if (a[0] == '-' && a[1]) {
            fatal("unknown flag '%s' (see --help)", a);
        } else if (!in_path) {
            in_path = a;
        } else if (!out_path) {
            out_path = a;
        } else {
            fatal("tokenize: unexpected argument '%s' (see --help)", a);
        }
    }
    if (!tok_path) fatal("--tokenizer is required (see --help)");
    Bpe* b = bpe_load(tok_path, pattern, "--tokenizer");
    FILE* in = !in_path || !strcmp(in_path, "-") ? stdin : xfopen(in_path, "rb");
    size_t n;
    char* text = read_all(in, in_path ? in_path : "stdin", &n);
    if (in != stdin) fclose(in);
    FILE* out = out_path ? xfopen(out_path, "wb") : stdout;
    const char* out_name = out_path ? out_path : "stdout";
    if (decode) {
        if (n % 4) fatal("tokenize --decode: '%s' has %zu bytes, not a whole number of uint32 tokens", in_path, n);
        for (size_t i = 0; i < n / 4; i++) {
            uint32_t id;
            memcpy(&id, text + 4 * i, 4);
            int len;
            const uint8_t* p = bpe_token_bytes(b, (int)id, &len);
            if (!p) fatal("tokenize --decode: token %zu is %u, not in the vocabulary of %d", i, id, bpe_vocab_size(b));
            xfwrite(p, (size_t)len, out, out_name);
        }
    } else {
        BpeWork* w = bpe_work_new(b);
        int32_t* toks = NULL;
        size_t nt = 0, cap = 0;
        bpe_encode(w, text, n, special, &toks, &nt, &cap);
        xfwrite(toks, nt * sizeof *toks, out, out_name);
        free(toks);
        bpe_work_free(w);
    }
    if (out != stdout) fclose(out);
    else fflush(stdout);
    free(text);
    bpe_free(b);
    return 0;
}
