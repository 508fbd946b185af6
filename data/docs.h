// docs.h: the documents of a text corpus, read as a stream (dev/prepare_data).
//
// Inputs are files, glob patterns and folders (searched recursively); they
// expand to one list of files, each folder's and pattern's files in byte
// order. By suffix:
//   .txt, .txt.zst           the whole file is one document
//   .jsonl, .jsonl.zst       each non-blank line is one document: a JSON
//                            object whose string member (--text-field) is the text
// A reader holds at most one record (a line or a .txt file) plus its buffers
// in memory; a record longer than max_record is an error naming the file.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    char* path;
    int jsonl;    // 1: one document per line; 0: the whole file
    int zst;      // zstd-compressed
    int64_t size; // bytes on disk
} DocFile;

// Expands inputs into files; fatal (naming the input) when one matches no
// file, or names a file of an unknown kind. `flag` names where inputs came from.
DocFile* docs_expand(char** inputs, int n, const char* flag, int* count);
void docs_free(DocFile* files, int count);

typedef struct DocReader DocReader;
DocReader* doc_reader_open(const DocFile* f, size_t max_record);
// The next record: 1 with its bytes (valid until the next call) and its line
// number (1 for a .txt file), or 0 at the end. Fatal on a read error, a
// corrupt or truncated zstd stream, or a record over max_record, naming the
// file and line.
int doc_reader_next(DocReader* r, const char** text, size_t* len, uint64_t* line);
uint64_t doc_reader_consumed(const DocReader* r);  // bytes of the file read so far (compressed for .zst)
void doc_reader_close(DocReader* r);

// The text of a JSON-lines record: member `field` of the object, decoded
// (malloc'ed, *len bytes). NULL with a message in err when the line is not
// valid JSON, not an object, or has no such string member.
char* doc_json_text(const char* line, size_t n, const char* field, size_t* len, char* err, size_t errsize);

EXTERN_C_END
