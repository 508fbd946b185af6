// eval_file.h: multiple-choice evaluation files in llm.c's format (its
// HellaSwag files: dev/data/hellaswag.py there), read and written.
//
//   int32 header[256]: [0] 20240522 magic, [1] 1 version, [2] example count,
//                      [3] the longest example in bytes, rest 0
//   then per example a stream of uint16:
//     65535 (start of example), its length in bytes (these 5 fields and the
//     rest of the example), its index (0, 1, ...), the label (the correct
//     completion), the completion count, the context length, the context
//     tokens, then per completion its length and its tokens.
// A model scores each completion by its loss given the context; the example
// counts as right when the label's completion has the lowest loss: summed
// over its tokens (accuracy) or averaged over them (length-normalised).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1

typedef struct {
    int label, num_completions;
    int ctx_len;
    const uint16_t* ctx;        // (ctx_len) into EvalFile.data
    int* comp_len;              // (num_completions)
    const uint16_t** comp;      // (num_completions) into EvalFile.data
} EvalExample;

typedef struct {
    char* path;
    int num_examples;
    EvalExample* ex;
    uint16_t* data;  // the file's token stream
} EvalFile;

// Reads and checks the whole file: magic, version, every example's
// delimiter, length, index, label < completion count, lengths within the
// example, tokens < vocab_size. Fatal with one line naming `flag`, the file,
// the example and the problem.
void eval_file_load(EvalFile* e, const char* path, const char* flag, int vocab_size);
void eval_file_free(EvalFile* e);

// Writes examples (tokens as int32, each < 65535) in the format above,
// atomically. ctx[i] has ctx_len[i] tokens; completion j of example i is
// comps[i][j] with comp_lens[i][j] tokens.
void eval_file_write(const char* path, int n, const int* labels, const int* num_completions,
                     int32_t* const* ctx, const int* ctx_len, int32_t** const* comps, int* const* comp_lens);

EXTERN_C_END
