// ckpt_files.h: the file-system side of checkpoints: step directories,
// writing a file atomically while counting and hashing its bytes, verifying
// a file against its manifest entry, and deleting old checkpoints.
//
// Functions that a background writer calls report errors by return value
// (0 or an errno value, with a message) instead of fatal().
#pragma once

#include <stdint.h>

#include "llm/checkpoint/atomic_file.h"
#include "llm/checkpoint/ckpt_manifest.h"

EXTERN_C_BEGIN

// Room for a message naming a path (paths are at most 4096 bytes here).
#define CKPT_MSG_SIZE 5120

// "<root>/step_00001000" (malloc'ed).
char* ckpt_step_dir(const char* root, int step);
// The steps of the step_NNNNNNNN directories under root, newest first
// (malloc'ed into *steps; 0 when root does not exist).
int ckpt_list_steps(const char* root, int** steps);
// The step a directory's name says (its last component is step_NNNNNNNN);
// 0 when it is named otherwise.
int ckpt_step_of_dir(const char* dir, int* step);
// Whether dir holds a manifest (the mark of a complete checkpoint).
int ckpt_has_manifest(const char* dir);
// mkdir -p; 0 or an errno value.
int ckpt_mkdirs(const char* path);

// A file being written under a temporary name, with its running size and hash.
typedef struct {
    AtomicFile af;
    void* hash;          // XXH3 state
    int step;            // for the disk-full test hook
    CkptFileEntry entry; // filled as it is written
    int err;             // first errno value; later calls do nothing
    char msg[CKPT_MSG_SIZE]; // "writing '<path>' failed: <reason>"
} CkptWriter;

int ckpt_writer_open(CkptWriter* w, const char* dir, const char* name, int shard, int step);
int ckpt_writer_write(CkptWriter* w, const void* data, size_t bytes);
// fsync, rename into place, fsync the directory; w->entry is then final.
int ckpt_writer_commit(CkptWriter* w);
// Removes the temporary file (after an error elsewhere).
void ckpt_writer_abort(CkptWriter* w);

// Checks one file of a checkpoint: present, the listed size, the listed
// XXH3. 1 if it verifies; else 0 and `why` names the file and the problem.
int ckpt_verify_file(const char* dir, const CkptFileEntry* e, char* why, size_t whysize);

// Deletes every file in dir, then dir; missing files are fine (other ranks
// may be deleting the same directory). 0 or an errno value.
int ckpt_remove_dir(const char* dir);
// Deletes dir/manifest.json and makes that durable; missing is fine.
int ckpt_remove_manifest(const char* dir);
// Deletes dir/NAME.tmp.* (what an interrupted write of NAME left).
void ckpt_remove_stale_temps(const char* dir, const char* name);

EXTERN_C_END
