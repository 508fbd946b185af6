// atomic_dir.h: folders that are replaced all at once (a model folder:
// --export-hf, --model-dir).
//
// A writer begins DIR, writes its files into atomic_dir_path() (a fresh
// sibling folder DIR.new-PID), and commits: the files of the old DIR that are
// not the writer's (a tokenizer, a README) are hard-linked into the new
// folder, which then trades places with DIR in one renameat2(RENAME_EXCHANGE);
// the old folder is removed afterwards (subfolders are recreated with their
// files hard-linked). Every moment of the write therefore
// shows, under the name DIR, either the whole old folder or the whole new one.
// Where the file system cannot exchange (EINVAL) the swap is two renames, and
// a kill between them leaves DIR missing beside DIR.old-PID, which the next
// write puts back.
//
// A DIR that is a mount point cannot be renamed: it is written in place, by
// the rule "the writer's old files are removed first (config.json and
// model.bin, the files that make the folder load, before the rest), the new
// ones appear by rename, config.json last". A kill then leaves a folder that
// loads as the new model or not at all, never as a mix.
//
// Leftovers of an interrupted write (DIR.new-PID and DIR.old-PID of a dead
// process, the writer's FILE.tmp.PID inside DIR) are removed by the next
// begin.
//
// TRAIN_GPT_FOLDER_FAULT=N (a test hook) kills the process with SIGKILL at
// the N-th file operation of folder writes (atomic_dir_fault_point: the
// folder's own operations and every open, write and commit of an AtomicFile
// while a folder is being written).
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    char* dir;        // the folder as its flag names it (no trailing '/')
    char* work;       // where the files go: DIR.new-PID, or DIR itself in place
    int in_place;     // DIR is a mount point
    const char* const* ours;  // fnmatch patterns of the writer's file names
} AtomicDir;

// Begins replacing `dir` (created if missing, with its parents). `ours`, a
// NULL-terminated list of fnmatch patterns, names the files the writer owns:
// they are not carried over from the old folder. Returns 0, or an errno with
// a message naming the path in err.
int atomic_dir_begin(AtomicDir* ad, const char* dir, const char* const* ours, char* err, size_t errsize);
const char* atomic_dir_path(const AtomicDir* ad);
// Makes the new folder durable and visible as `dir`. Returns 0 or an errno
// (with a message); on failure the old folder is still in place.
int atomic_dir_commit(AtomicDir* ad, char* err, size_t errsize);
// Removes the new folder (error paths); the old one is untouched.
void atomic_dir_abort(AtomicDir* ad);

// The start-up probe of an output folder: `dir` is not a file, and the
// folder a write would create (DIR.new-PID beside it, or a file inside a
// mount point) can be created and removed. Creates missing parents.
int atomic_dir_probe(const char* dir, char* err, size_t errsize);
// The same for an output file: its folder takes a new file, and the path is
// not a directory.
int atomic_file_probe(const char* path, char* err, size_t errsize);

// For readers: when `dir` is missing but a DIR.old-PID of a dead writer lies
// beside it (a kill between the two renames of the fallback swap), its path
// in out and 1; else 0.
int atomic_dir_stranded(const char* dir, char* out, size_t outsize);

// The fault hook (TRAIN_GPT_FOLDER_FAULT); a no-op outside folder writes.
void atomic_dir_fault_point(void);

// Removes a folder and everything under it; 0 or an errno.
int remove_tree(const char* path);

EXTERN_C_END
