// shard.h: token shards in llm.c's format, plain or zstd-compressed.
//
// A shard is a 256 x int32 header followed by its tokens:
//   header[0] = 20240520 (magic)
//   header[1] = 1 (uint16 tokens, llm.c's version) or 2 (uint32 tokens, this
//               project's extension for vocabularies over 65535)
//   header[2] = token count when it fits in int32; header[3..4] = the token
//               count as a little-endian uint64 (low word first) when version
//               is 2 or the count exceeds 2^31-1 (header[2] is then -1)
// A path ending in ".zst" holds the same bytes compressed with zstd; it is
// decompressed into memory, never to a temporary file. Plain shards are read
// with 64-bit offsets, so shards over 2 GiB work.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

#define SHARD_MAGIC 20240520
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_VERSION_U16 1
#define SHARD_VERSION_U32 2

typedef struct {
    char* path;
    int version;           // 1: uint16 tokens, 2: uint32 tokens
    uint64_t num_tokens;
    int compressed;        // .zst: the whole shard lives in `data`
    uint8_t* data;         // decompressed token bytes (compressed shards only)
    int fd;                // plain shards: read on demand with pread
} Shard;

// Opens and validates a shard: the file exists, the magic and version are
// right, and the file size matches the header's token count exactly. Any
// problem is fatal, naming the path and what is wrong.
void shard_open(Shard* s, const char* path);
void shard_close(Shard* s);
// Copies tokens [start, start+count) as int32 into out; fatal if out of range.
// Every token is checked against vocab_size (fatal with the file, position and
// id when one is >= vocab_size).
void shard_read(const Shard* s, uint64_t start, size_t count, int32_t* out, int vocab_size);

// Writes a shard (used by `make data` and by tests). version 1 requires every
// token < 65536. A path ending in ".zst" is written compressed (level 19).
// Written atomically: to "<path>.tmp", then renamed.
void shard_write(const char* path, const int32_t* tokens, uint64_t n, int version);

// A plain shard written as tokens come (dev/prepare_data): to "<path>.tmp",
// the header filled in and the file renamed into place by shard_writer_close.
typedef struct {
    char* path;
    char* tmp;
    FILE* f;
    int version;
    uint64_t n;  // tokens appended so far
} ShardWriter;

void shard_writer_open(ShardWriter* w, const char* path, int version);
// Appends tokens; fatal if one does not fit the version (uint16: < 65536).
void shard_writer_append(ShardWriter* w, const int32_t* tokens, size_t n);
void shard_writer_close(ShardWriter* w);

// Expands a glob pattern into a sorted list of paths; fatal (naming the
// pattern and the flag it came from) if nothing matches.
char** glob_paths(const char* pattern, const char* flag, int* count);
void free_paths(char** paths, int count);

EXTERN_C_END
