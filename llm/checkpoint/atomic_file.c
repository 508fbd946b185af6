// atomic_file.c: temporary file + fsync + rename + directory fsync.
#include "llm/checkpoint/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm/util/atomic_dir.h"

int atomic_file_try_open(AtomicFile* af, const char* path) {
    af->path = xstrdup(path);
    size_t n = strlen(path) + 32;
    af->tmp_path = (char*)xmalloc(n);
    snprintf(af->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    atomic_dir_fault_point();  // (a test hook; a no-op outside folder writes)
    af->f = fopen(af->tmp_path, "wb");
    if (af->f) return 0;
    int e = errno;
    atomic_file_abort(af);
    return e ? e : EIO;
}

void atomic_file_open(AtomicFile* af, const char* path) {
    int e = atomic_file_try_open(af, path);
    if (e) fatal("cannot create '%s.tmp.%ld': %s", path, (long)getpid(), strerror(e));
}

int atomic_file_try_write(AtomicFile* af, const void* data, size_t bytes) {
    atomic_dir_fault_point();
    if (fwrite(data, 1, bytes, af->f) == bytes) return 0;
    int e = errno ? errno : EIO;
    atomic_file_abort(af);
    return e;
}

void atomic_file_write(AtomicFile* af, const void* data, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s", af->path);
    int e = atomic_file_try_write(af, data, bytes);
    if (e) fatal("writing '%s' failed: %s (the previous file, if any, is untouched)", path, strerror(e));
}

void fsync_dir_of(const char* path) {
    char* dir = xstrdup(path);
    char* slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);  // best effort: some filesystems refuse fsync on directories
        close(fd);
    }
    free(dir);
}

int atomic_file_try_commit(AtomicFile* af) {
    int e = 0;
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) e = errno ? errno : EIO;
    if (fclose(af->f) != 0 && !e) e = errno ? errno : EIO;
    af->f = NULL;
    atomic_dir_fault_point();
    if (!e && rename(af->tmp_path, af->path) != 0) e = errno ? errno : EIO;
    if (e) {
        atomic_file_abort(af);
        return e;
    }
    fsync_dir_of(af->path);
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
    return 0;
}

void atomic_file_commit(AtomicFile* af) {
    char path[4096];
    snprintf(path, sizeof path, "%s", af->path);
    int e = atomic_file_try_commit(af);
    if (e) fatal("writing '%s' failed: %s (the previous file, if any, is untouched)", path, strerror(e));
}

void atomic_file_abort(AtomicFile* af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
}
