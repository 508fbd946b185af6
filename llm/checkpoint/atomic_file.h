// atomic_file.h: files that appear complete or not at all.
//
// A writer opens "<path>.tmp.<pid>", writes, and commits: fflush, fsync,
// rename onto the final name, fsync of the directory. A reader therefore
// never sees a half-written file under the final name, even after a crash or
// a SIGKILL in the middle of the write.
#pragma once

#include <stdio.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    FILE* f;
    char* path;      // final name
    char* tmp_path;  // where the bytes go until commit
} AtomicFile;

void atomic_file_open(AtomicFile* af, const char* path);
void atomic_file_write(AtomicFile* af, const void* data, size_t bytes);
// Makes the file durable and visible under its final name.
void atomic_file_commit(AtomicFile* af);
// Removes the temporary file (error paths).
void atomic_file_abort(AtomicFile* af);
// fsyncs a directory so that renames inside it are durable.
void fsync_dir_of(const char* path);

// The same without fatal(), for writers that report errors their own way
// (checkpoints written from a background thread): each returns 0 or an errno
// value; after a failure the temporary file is gone and af is released.
int atomic_file_try_open(AtomicFile* af, const char* path);
int atomic_file_try_write(AtomicFile* af, const void* data, size_t bytes);
int atomic_file_try_commit(AtomicFile* af);

EXTERN_C_END
