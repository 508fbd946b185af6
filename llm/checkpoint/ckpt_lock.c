// ckpt_lock.c: the writability probe and the lock of a checkpoint directory.
#include "llm/checkpoint/ckpt_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm/checkpoint/ckpt_files.h"

static void this_host(char* host, size_t size) {
    if (gethostname(host, size - 1) != 0) snprintf(host, size, "?");
    host[size - 1] = 0;
}

int ckpt_probe_writable(const char* dir, char* msg, size_t size) {
    int e = ckpt_mkdirs(dir);
    if (e) {
        snprintf(msg, size, "cannot create it: %s", strerror(e));
        return e;
    }
    char host[256], path[4400];
    this_host(host, sizeof host);
    snprintf(path, sizeof path, "%s/.write_probe.%s.%ld", dir, host, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    e = fd < 0 ? errno : 0;
    if (!e && (write(fd, "probe\n", 6) != 6 || fsync(fd) != 0)) e = errno ? errno : EIO;
    if (fd >= 0) close(fd);
    if (fd >= 0 && unlink(path) != 0 && !e) e = errno;
    if (e) snprintf(msg, size, "cannot write a file there: %s", strerror(e));
    return e;
}

// The holder named in a lock file: 1 with host and pid, else 0.
static int read_holder(int fd, char* host, size_t hsize, long* pid) {
    char text[512];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return 0;
    text[n] = 0;
    char fmt[32];
    snprintf(fmt, sizeof fmt, "%%%zus %%ld", hsize - 1);
    return sscanf(text, fmt, host, pid) == 2;
}

// Without flock(): whether the holder written in the file still runs here.
static int holder_alive(int fd) {
    char host[256], me[256];
    long pid;
    if (!read_holder(fd, host, sizeof host, &pid)) return 0;
    this_host(me, sizeof me);
    if (strcmp(host, me) != 0 || pid == (long)getpid()) return 0;  // another host's lock is a restored copy
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

// Whether fd is still the file at path (a holder that ends deletes the file
// before it unlocks it; a lock taken on the deleted file locks nothing).
static int still_linked(int fd, const char* path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

int ckpt_lock_take(CkptLock* l, const char* dir, char* holder, size_t size) {
    l->fd = -1;
    size_t n = strlen(dir) + sizeof CKPT_LOCK_NAME + 2;
    l->path = (char*)xmalloc(n);
    snprintf(l->path, n, "%s/%s", dir, CKPT_LOCK_NAME);
    int fd = -1, held = 0;
    for (int attempt = 0; attempt < 10; attempt++) {
        fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            int e = errno;
            snprintf(holder, size, "%s: %s", l->path, strerror(e));
            return e;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK) held = 1;
            else held = holder_alive(fd);  // ENOLCK, EOPNOTSUPP, ...: no flock() on this file system
            break;
        }
        if (still_linked(fd, l->path)) break;
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        snprintf(holder, size, "%s: it keeps being deleted and created again", l->path);
        return EAGAIN;
    }
    if (held) {
        char host[256] = "?";
        long pid = -1;
        if (read_holder(fd, host, sizeof host, &pid)) snprintf(holder, size, "host %s, pid %ld", host, pid);
        else snprintf(holder, size, "a process that has not written its name yet");
        close(fd);
        return EWOULDBLOCK;
    }
    char me[256], text[320];
    this_host(me, sizeof me);
    int len = snprintf(text, sizeof text, "%s %ld\n", me, (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        int e = errno ? errno : EIO;
        snprintf(holder, size, "%s: %s", l->path, strerror(e));
        close(fd);
        return e;
    }
    l->fd = fd;
    return 0;
}

void ckpt_lock_release(CkptLock* l) {
    if (l->fd >= 0) {
        unlink(l->path);  // before the unlock, so that no one takes a file about to vanish
        close(l->fd);
        l->fd = -1;
    }
    free(l->path);
    l->path = NULL;
}
