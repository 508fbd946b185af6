// tokenizer.h: a byte-level BPE tokenizer: train a vocabulary, encode, decode.
//
// Tokens 0..255 are the raw bytes; each later token is the merge of two
// earlier ones, learned by train in order of pair frequency; the last id is
// the end-of-text token (eot), which separates documents and is never merged.
// Text is first split into pieces (a run of letters, a run of digits, a run of
// other non-space characters, each taking one leading space along; runs of
// whitespace on their own), and merges never cross piece boundaries, as in GPT-2.
//
// File format (readable by llm.c's decoder, which reads only the first part):
//   uint32 header[256]: [0] 20240328 magic, [1] 2 version, [2] vocab size,
//                       [3] eot id, [4] number of merges, rest 0
//   for each token id: uint8 length (1..255), then that many bytes
//   then for each merge i (token 256 + i): uint32 left id, uint32 right id
// A file without the merge section (llm.c's GPT-2 tokenizer) decodes but
// cannot encode here (data/bpe.h encodes it as tiktoken does).
// tokenizer_load also reads a tiktoken rank file ("<base64 bytes> <rank>"
// lines: gpt2.tiktoken, cl100k_base.tiktoken, Llama 3's tokenizer.model);
// such a tokenizer encodes through data/bpe.h (tiktoken's encode_ordinary).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

#define TOKENIZER_MAGIC 20240328

typedef struct {
    int vocab_size;
    int eot;
    int num_merges;     // 0 when loaded from a decode-only file
    uint8_t** bytes;    // bytes[id], length len[id]
    int* len;
    int32_t* merges;    // (num_merges, 2): token 256+i = merges[2i] ++ merges[2i+1]
    void* encode_index; // private lookup for encode
    void* bpe;          // the data/bpe.h encoder of a tiktoken rank file, else NULL
} Tokenizer;

// Learns merges from text until the vocabulary (bytes + merges + eot) has
// vocab_size ids. Prints progress to stderr when verbose.
void tokenizer_train(Tokenizer* tok, const char* text, size_t len, int vocab_size, int verbose);
void tokenizer_save(const Tokenizer* tok, const char* path);
// Fatal with the path and the problem on a missing, truncated or wrong file.
void tokenizer_load(Tokenizer* tok, const char* path);
void tokenizer_free(Tokenizer* tok);
// The vocabulary size of the tokenizer file at path; 0 when path is empty or
// no file is there (callers then fall back to their default vocabulary).
int tokenizer_vocab_if_present(const char* path);

// Encodes text; returns the number of tokens written to *out (malloc'ed).
size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int32_t** out);
// Appends the bytes of token id to buf (id out of range decodes as nothing);
// returns the number of bytes appended.
size_t tokenizer_decode_token(const Tokenizer* tok, int id, char* buf, size_t cap);

EXTERN_C_END
