// ckpt_files.c: step directories, hashed atomic writes, verification, deletion.
#include "llm/checkpoint/ckpt_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "llm/checkpoint/fault_inject.h"

char* ckpt_step_dir(const char* root, int step) {
    size_t n = strlen(root) + 32;
    char* d = (char*)xmalloc(n);
    snprintf(d, n, "%s/step_%08d", root, step);
    return d;
}

static int parse_step_name(const char* name, int* step) {
    if (strncmp(name, "step_", 5) != 0 || strlen(name) < 13) return 0;
    long v;
    for (const char* p = name + 5; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    if (!parse_long(name + 5, &v) || v < 0 || v > 2147483647L) return 0;
    *step = (int)v;
    return 1;
}

int ckpt_step_of_dir(const char* dir, int* step) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;  // "step_00000010/" names the same directory
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    char name[64];
    if (n - b >= sizeof name) return 0;
    memcpy(name, dir + b, n - b);
    name[n - b] = 0;
    return parse_step_name(name, step);
}

static int by_step_descending(const void* a, const void* b) {
    int x = *(const int*)a, y = *(const int*)b;
    return (x < y) - (x > y);
}

int ckpt_list_steps(const char* root, int** steps) {
    *steps = NULL;
    DIR* d = opendir(root);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        int step;
        if (!parse_step_name(de->d_name, &step)) continue;
        size_t plen = strlen(root) + strlen(de->d_name) + 2;
        char* path = (char*)xmalloc(plen);
        snprintf(path, plen, "%s/%s", root, de->d_name);
        int dir = is_dir(path);
        free(path);
        if (!dir) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *steps = (int*)xrealloc(*steps, (size_t)cap * sizeof(int));
        }
        (*steps)[n++] = step;
    }
    closedir(d);
    if (n > 1) qsort(*steps, (size_t)n, sizeof(int), by_step_descending);
    return n;
}

int ckpt_has_manifest(const char* dir) {
    size_t n = strlen(dir) + sizeof(CKPT_MANIFEST_NAME) + 2;
    char* p = (char*)xmalloc(n);
    snprintf(p, n, "%s/%s", dir, CKPT_MANIFEST_NAME);
    int yes = file_exists(p);
    free(p);
    return yes;
}

int ckpt_mkdirs(const char* path) {
    char* p = xstrdup(path);
    int e = 0;
    for (char* s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            e = errno;
            break;
        }
        *s = c;
        if (c == 0) break;
    }
    free(p);
    if (e) return e;
    struct stat st;
    if (stat(path, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// ---------------------------------------------------------------------------
// writing

static int writer_fail(CkptWriter* w, int e, const char* path) {
    if (w->err) return w->err;
    w->err = e;
    snprintf(w->msg, sizeof w->msg, "writing '%s' failed: %s", path, strerror(e));
    return e;
}

int ckpt_writer_open(CkptWriter* w, const char* dir, const char* name, int shard, int step) {
    memset(w, 0, sizeof *w);
    w->step = step;
    snprintf(w->entry.name, sizeof w->entry.name, "%s", name);
    w->entry.shard = shard;
    size_t n = strlen(dir) + strlen(name) + 2;
    char* path = (char*)xmalloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    int e = atomic_file_try_open(&w->af, path);
    if (e) writer_fail(w, e, path);
    free(path);
    if (e) return e;
    XXH3_state_t* st = XXH3_createState();
    if (!st) fatal("out of host memory for a checksum state");
    XXH3_64bits_reset(st);
    w->hash = st;
    return 0;
}

int ckpt_writer_write(CkptWriter* w, const void* data, size_t bytes) {
    if (w->err) return w->err;
    char path[4096];
    snprintf(path, sizeof path, "%s", w->af.path);
    // The disk-full test hook: the write that would take the file past 4 KiB fails.
    if (fault_disk_full(w->step) && w->entry.bytes + (int64_t)bytes > 4096) {
        atomic_file_abort(&w->af);
        return writer_fail(w, ENOSPC, path);
    }
    int e = atomic_file_try_write(&w->af, data, bytes);
    if (e) return writer_fail(w, e, path);
    XXH3_64bits_update((XXH3_state_t*)w->hash, data, bytes);
    w->entry.bytes += (int64_t)bytes;
    return 0;
}

static void free_hash(CkptWriter* w) {
    if (w->hash) XXH3_freeState((XXH3_state_t*)w->hash);
    w->hash = NULL;
}

int ckpt_writer_commit(CkptWriter* w) {
    if (w->err) {
        free_hash(w);
        return w->err;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s", w->af.path);
    w->entry.xxh3 = (uint64_t)XXH3_64bits_digest((XXH3_state_t*)w->hash);
    free_hash(w);
    int e = atomic_file_try_commit(&w->af);
    if (e) return writer_fail(w, e, path);
    return 0;
}

void ckpt_writer_abort(CkptWriter* w) {
    if (w->af.path) atomic_file_abort(&w->af);
    free_hash(w);
}

// ---------------------------------------------------------------------------
// verification and deletion

int ckpt_verify_file(const char* dir, const CkptFileEntry* e, char* why, size_t whysize) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(why, whysize, "%s: %s", path, errno == ENOENT ? "missing" : strerror(errno));
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != e->bytes) {
        snprintf(why, whysize, "%s: %lld bytes, the manifest lists %lld (%s)", path, (long long)st.st_size,
                 (long long)e->bytes, st.st_size < e->bytes ? "truncated" : "too long");
        close(fd);
        return 0;
    }
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    size_t cap = 8u << 20;
    char* buf = (char*)xmalloc(cap);
    int64_t total = 0;
    int ok = 1;
    for (;;) {
        ssize_t got = read(fd, buf, cap);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(why, whysize, "%s: read error: %s", path, strerror(errno));
            ok = 0;
            break;
        }
        if (got == 0) break;
        XXH3_64bits_update(h, buf, (size_t)got);
        total += got;
    }
    close(fd);
    free(buf);
    uint64_t digest = (uint64_t)XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (ok && total != e->bytes) {
        snprintf(why, whysize, "%s: read %lld bytes, the manifest lists %lld", path, (long long)total, (long long)e->bytes);
        ok = 0;
    }
    if (ok && digest != e->xxh3) {
        snprintf(why, whysize, "%s: checksum mismatch (xxh3 %016llx, the manifest lists %016llx): the file is corrupt",
                 path, (unsigned long long)digest, (unsigned long long)e->xxh3);
        ok = 0;
    }
    return ok;
}

int ckpt_remove_manifest(const char* dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MANIFEST_NAME);
    if (unlink(path) != 0 && errno != ENOENT) return errno;
    fsync_dir_of(path);
    return 0;
}

void ckpt_remove_stale_temps(const char* dir, const char* name) {
    DIR* d = opendir(dir);
    if (!d) return;
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.tmp.", name);
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
}

int ckpt_remove_dir(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : errno;
    int e = 0;
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) != 0 && errno != ENOENT && !e) e = errno;
    }
    closedir(d);
    if (rmdir(dir) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST && !e) e = errno;
    fsync_dir_of(dir);
    return e;
}
