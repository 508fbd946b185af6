// bpe.h: byte-level BPE exactly as tiktoken encodes: the text is split into
// pieces by the encoding's regular expression (PCRE2, JIT-compiled), each
// piece that is not itself a token is merged pair by pair, lowest rank first
// (leftmost on ties), and the ranks of the final parts are the tokens.
//
// Ranks come from either
//   - a tiktoken rank file: one "<base64 token bytes> <rank>" per line
//     (gpt2.tiktoken, cl100k_base.tiktoken, Llama 3's tokenizer.model), or
//   - llm.c's gpt2_tokenizer.bin (magic 20240328, no merge section): the byte
//     string of id i has rank i, and the eot id is <|endoftext|>.
// Patterns built in: "gpt2" (r50k/p50k/GPT-2), "cl100k", "llama3". Without a
// pattern name the vocabulary decides: 50256 ranks -> gpt2, 100256 ->
// cl100k, 128000 -> llama3; any other size needs the name.
// Special tokens follow the encoding: gpt2 <|endoftext|> = 50256; cl100k
// <|endoftext|> 100257, <|fim_prefix|> 100258, <|fim_middle|> 100259,
// <|fim_suffix|> 100260, <|endofprompt|> 100276; llama3 Llama 3.1's 256
// (<|begin_of_text|> 128000, <|end_of_text|> 128001, ...).
//
// Text that is not valid UTF-8 is encoded as if each maximal invalid subpart
// had been replaced by U+FFFD, which is what Python's
// bytes.decode("utf-8", "replace") hands tiktoken.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct Bpe Bpe;          // ranks, specials, compiled pattern; read-only once loaded
typedef struct BpeWork BpeWork;  // one thread's match state and piece cache

// The names of the built-in patterns, for --help and error messages.
#define BPE_PATTERN_NAMES "gpt2, cl100k, llama3"

// 1 when the file at path looks like a tiktoken rank file (its first line is
// base64, a space and a number).
int bpe_is_rank_file(const char* path);
// Loads ranks from a tiktoken rank file or llm.c's tokenizer file; pattern is
// a built-in name (from a --pattern flag) or NULL/"" (decided by the
// vocabulary); `what` is the flag that named the file. Fatal, naming the
// file and line (or --pattern), on any problem.
Bpe* bpe_load(const char* path, const char* pattern, const char* what);
void bpe_free(Bpe* b);

int bpe_vocab_size(const Bpe* b);      // largest id + 1, specials included
int bpe_eot(const Bpe* b);             // <|endoftext|> (<|end_of_text|> for llama3)
const char* bpe_pattern(const Bpe* b);  // "gpt2", "cl100k" or "llama3"
// The bytes of token id (specials: their text); NULL for an id with no token.
const uint8_t* bpe_token_bytes(const Bpe* b, int id, int* len);
// The id of a special token's text, or -1.
int bpe_special_id(const Bpe* b, const char* text);

BpeWork* bpe_work_new(const Bpe* b);
void bpe_work_free(BpeWork* w);
// Encodes text as tiktoken's encode_ordinary (special tokens' text is plain
// text) or, with specials = 1, as encode(text, allowed_special="all").
// Appends to *out (realloc'ed; *n tokens used, *cap allocated).
void bpe_encode(BpeWork* w, const char* text, size_t len, int specials, int32_t** out, size_t* n, size_t* cap);

EXTERN_C_END
