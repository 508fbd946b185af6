// atomic_file.c: temporary file + fsync + rename + directory fsync.
#include "llm/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void atomic_file_open(AtomicFile* af, const char* path) {
    af->path = xstrdup(path);
    size_t n = strlen(path) + 32;
    af->tmp_path = (char*)xmalloc(n);
    snprintf(af->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) fatal("cannot create '%s': %s", af->tmp_path, strerror(errno));
}

void atomic_file_write(AtomicFile* af, const void* data, size_t bytes) {
    if (fwrite(data, 1, bytes, af->f) != bytes) {
        int e = errno;
        char path[4096];
        snprintf(path, sizeof path, "%s", af->path);
        atomic_file_abort(af);
        fatal("writing '%s' failed: %s (the previous file, if any, is untouched)", path, strerror(e));
    }
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

void atomic_file_commit(AtomicFile* af) {
    int e = 0;
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) e = errno;
    if (fclose(af->f) != 0 && !e) e = errno;
    af->f = NULL;
    if (e) {
        unlink(af->tmp_path);
        fatal("writing '%s' failed: %s (the previous file, if any, is untouched)", af->path, strerror(e));
    }
    if (rename(af->tmp_path, af->path) != 0) {
        e = errno;
        unlink(af->tmp_path);
        fatal("cannot rename '%s' to '%s': %s", af->tmp_path, af->path, strerror(e));
    }
    fsync_dir_of(af->path);
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
}

void atomic_file_abort(AtomicFile* af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
}
