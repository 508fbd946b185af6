// ckpt_lock.h: what a run checks about its checkpoint directory before it
// trains: that it can write there (a read-only directory would otherwise
// lose the whole run at its first save), and that no other run uses it
// (two runs in one directory delete each other's files).
//
// The lock is <dir>/train_gpt.lock, held with flock() for the life of the
// process and holding "host pid" for the message a second run prints. The
// kernel drops an flock() when its holder dies, however it dies, so a lock
// file left by a killed run (or restored from S3 onto a new host) is simply
// taken over. Where the file system has no flock(), the file's contents
// decide: a lock of a live process on this host is held, anything else is
// stale.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

#define CKPT_LOCK_NAME "train_gpt.lock"

typedef struct {
    int fd;      // -1: not held
    char* path;
} CkptLock;

// Creates dir if needed and writes, fsyncs and deletes a small file in it.
// 0, or an errno value with the reason in msg.
int ckpt_probe_writable(const char* dir, char* msg, size_t size);

// Takes dir's lock. 0; or EWOULDBLOCK with the holder ("host H, pid P") in
// holder; or another errno value with the reason in holder.
int ckpt_lock_take(CkptLock* l, const char* dir, char* holder, size_t size);
// Deletes the lock file and releases the lock (idempotent).
void ckpt_lock_release(CkptLock* l);

EXTERN_C_END
