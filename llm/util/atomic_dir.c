// atomic_dir.c: whole-folder replacement (see atomic_dir.h): a sibling
// DIR.new-PID, the old folder's other files hard-linked in, one
// renameat2(RENAME_EXCHANGE), the old folder removed; in place on a mount
// point; two renames where the exchange is missing; leftovers of killed
// writes cleaned; the TRAIN_GPT_FOLDER_FAULT and _NO_EXCHANGE test hooks.
#include "llm/util/atomic_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

// ---------------------------------------------------------------------------
// the fault hook

static int fault_active;  // inside a folder write
static long fault_at = -1, fault_count;

void atomic_dir_fault_point(void) {
    if (!fault_active) return;
    if (fault_at < 0) {
        const char* s = getenv("TRAIN_GPT_FOLDER_FAULT");
        fault_at = 0;
        if (s && *s && (!parse_long(s, &fault_at) || fault_at < 1))
            fatal("TRAIN_GPT_FOLDER_FAULT='%s' is not a positive operation number", s);
    }
    if (fault_at > 0 && ++fault_count == fault_at) {
        static const char msg[] = "train_gpt: TRAIN_GPT_FOLDER_FAULT: killing the process now\n";
        if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
        raise(SIGKILL);
    }
}

// ---------------------------------------------------------------------------
// paths

static char* joinf(const char* a, const char* b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char* p = (char*)xmalloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

// dir without trailing slashes, split into its parent and its last name.
static void split(const char* dir, char** clean, char** parent, char** base) {
    char* c = xstrdup(dir);
    size_t n = strlen(c);
    while (n > 1 && c[n - 1] == '/') c[--n] = 0;
    char* slash = strrchr(c, '/');
    if (!slash) {
        *parent = xstrdup(".");
        *base = xstrdup(c);
    } else {
        *parent = slash == c ? xstrdup("/") : strndup(c, (size_t)(slash - c));
        *base = xstrdup(slash + 1);
    }
    *clean = c;
}

static int mkdirs(const char* dir) {
    char* buf = xstrdup(dir);
    int e = 0;
    for (char* p = buf + 1; *p && !e; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) e = errno;
        *p = '/';
    }
    if (!e && mkdir(buf, 0755) != 0 && errno != EEXIST) e = errno;
    if (!e && !is_dir(buf)) e = ENOTDIR;
    free(buf);
    return e;
}

static void fsync_path(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    fsync(fd);  // best effort: some file systems refuse fsync on directories
    close(fd);
}

static int rm_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st;
    (void)ftw;
    int r = flag == FTW_DP ? rmdir(path) : unlink(path);
    return r != 0 && errno != ENOENT ? errno : 0;
}

int remove_tree(const char* path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : errno;
    if (!S_ISDIR(st.st_mode)) return unlink(path) != 0 ? errno : 0;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// A mount point (or ".") cannot be renamed; such a folder is written in place.
static int is_mount_point(const char* dir, const char* parent, const char* base) {
    if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/") || !base[0]) return 1;
    struct stat a, b;
    if (stat(dir, &a) != 0 || stat(parent, &b) != 0) return 0;
    return a.st_dev != b.st_dev || a.st_ino == b.st_ino;
}

// "NAME.new-PID" / "NAME.old-PID" (kind "new"/"old") or "NAME.tmp.PID": the pid, else 0.
static long suffix_pid(const char* name, const char* prefix, const char* tag) {
    size_t n = strlen(prefix), t = strlen(tag);
    if (strncmp(name, prefix, n) != 0 || strncmp(name + n, tag, t) != 0) return 0;
    long pid;
    const char* digits = name + n + t;
    for (const char* p = digits; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return parse_long(digits, &pid) && pid > 0 ? pid : 0;
}

static int pid_alive(long pid) { return pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM; }

static int matches(const char* const* ours, const char* name) {
    for (int i = 0; ours[i]; i++)
        if (fnmatch(ours[i], name, 0) == 0) return 1;
    return 0;
}

// One of the writer's temporaries (OURS.tmp.PID); *pid set.
static int our_temporary(const char* const* ours, const char* name, long* pid) {
    const char* t = strstr(name, ".tmp.");
    if (!t) return 0;
    while (strstr(t + 1, ".tmp.")) t = strstr(t + 1, ".tmp.");
    char* stem = strndup(name, (size_t)(t - name));
    int mine = matches(ours, stem);
    free(stem);
    *pid = mine ? suffix_pid(t, "", ".tmp.") : 0;
    return *pid > 0;
}

// Removes DIR.new-PID and DIR.old-PID of dead writers; a DIR.old-PID stands
// in for a missing DIR (a kill between the two renames of the fallback swap).
static void clean_siblings(const char* dir, const char* parent, const char* base) {
    DIR* d = opendir(parent);
    if (!d) return;
    char* prefix = (char*)xmalloc(strlen(base) + 2);
    snprintf(prefix, strlen(base) + 2, "%s.", base);
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        long pn = suffix_pid(de->d_name, prefix, "new-"), po = suffix_pid(de->d_name, prefix, "old-");
        long pid = pn ? pn : po;
        if (!pid || pid_alive(pid)) continue;
        char* path = joinf(parent, de->d_name);
        struct stat st;
        if (po && lstat(dir, &st) != 0 && errno == ENOENT) {
            if (rename(path, dir) == 0) warn("%s was missing (a write was killed midway): restored from %s", dir, path);
        } else {
            remove_tree(path);
        }
        free(path);
    }
    closedir(d);
    free(prefix);
}

int atomic_dir_stranded(const char* dir, char* out, size_t outsize) {
    char *clean, *parent, *base;
    split(dir, &clean, &parent, &base);
    struct stat st;
    int found = 0;
    DIR* d = lstat(clean, &st) != 0 && errno == ENOENT ? opendir(parent) : NULL;
    if (d) {
        char* prefix = (char*)xmalloc(strlen(base) + 2);
        snprintf(prefix, strlen(base) + 2, "%s.", base);
        struct dirent* de;
        while (!found && (de = readdir(d)) != NULL) {
            long pid = suffix_pid(de->d_name, prefix, "old-");
            if (!pid || pid_alive(pid)) continue;
            snprintf(out, outsize, "%s/%s", parent, de->d_name);
            found = 1;
        }
        closedir(d);
        free(prefix);
    }
    free(clean);
    free(parent);
    free(base);
    return found;
}

// Removes the writer's FILE.tmp.PID of dead processes inside dir.
static void clean_temporaries(const char* dir, const char* const* ours) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        long pid;
        if (!our_temporary(ours, de->d_name, &pid) || pid_alive(pid)) continue;
        char* path = joinf(dir, de->d_name);
        unlink(path);
        free(path);
    }
    closedir(d);
}

// In place: the writer's old files go first, in the order of its patterns.
static int remove_ours(const char* dir, const char* const* ours, char* err, size_t errsize) {
    for (int i = 0; ours[i]; i++) {
        DIR* d = opendir(dir);
        if (!d) break;
        struct dirent* de;
        int e = 0;
        while (!e && (de = readdir(d)) != NULL) {
            if (fnmatch(ours[i], de->d_name, 0) != 0) continue;
            char* path = joinf(dir, de->d_name);
            atomic_dir_fault_point();
            if (unlink(path) != 0 && errno != ENOENT) {
                e = errno;
                snprintf(err, errsize, "cannot remove the old %s: %s", path, strerror(e));
            }
            free(path);
        }
        closedir(d);
        if (e) return e;
    }
    fsync_path(dir);
    return 0;
}

// ---------------------------------------------------------------------------
// begin, commit, abort

int atomic_dir_begin(AtomicDir* ad, const char* dir, const char* const* ours, char* err, size_t errsize) {
    memset(ad, 0, sizeof *ad);
    char *parent, *base;
    split(dir, &ad->dir, &parent, &base);
    ad->ours = ours;
    fault_active = 1;
    int e = mkdirs(parent);
    if (e) snprintf(err, errsize, "cannot create %s: %s", parent, strerror(e));
    if (!e) {
        clean_siblings(ad->dir, parent, base);
        struct stat st;
        if (stat(ad->dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
            e = ENOTDIR;
            snprintf(err, errsize, "%s exists and is not a directory", ad->dir);
        }
    }
    if (!e) {
        clean_temporaries(ad->dir, ours);
        ad->in_place = is_dir(ad->dir) && is_mount_point(ad->dir, parent, base);
        if (ad->in_place) {
            ad->work = xstrdup(ad->dir);
            e = remove_ours(ad->dir, ours, err, errsize);
        } else {
            size_t n = strlen(ad->dir) + 32;
            ad->work = (char*)xmalloc(n);
            snprintf(ad->work, n, "%s.new-%ld", ad->dir, (long)getpid());
            remove_tree(ad->work);  // (a pid reused)
            atomic_dir_fault_point();
            if (mkdir(ad->work, 0755) != 0) {
                e = errno;
                snprintf(err, errsize, "cannot create %s: %s", ad->work, strerror(e));
            }
        }
    }
    free(parent);
    free(base);
    if (e) atomic_dir_abort(ad);
    return e;
}

const char* atomic_dir_path(const AtomicDir* ad) { return ad->work; }

static int copy_file(const char* from, const char* to) {
    int in = open(from, O_RDONLY), out = -1, e = 0;
    if (in < 0) return errno;
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) e = errno;
    char buf[1 << 16];
    ssize_t n;
    while (!e && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 || write(out, buf, (size_t)n) != n) e = errno ? errno : EIO;
    }
    if (!e && fsync(out) != 0) e = errno;
    close(in);
    if (out >= 0) close(out);
    return e;
}

// One entry of the old folder into the new one: a regular file hard-linked
// (copied where links fail), a link recreated, a folder created and filled
// the same way; anything else is left out.
static int carry_entry(const char* from, const char* to) {
    struct stat st;
    if (lstat(from, &st) != 0) return 0;
    atomic_dir_fault_point();
    if (S_ISREG(st.st_mode)) return link(from, to) == 0 ? 0 : copy_file(from, to);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(from, target, sizeof target - 1);
        if (n < 0) return errno;
        target[n] = 0;
        return symlink(target, to) == 0 ? 0 : errno;
    }
    if (!S_ISDIR(st.st_mode)) return 0;
    if (mkdir(to, st.st_mode & 07777) != 0) return errno;
    DIR* d = opendir(from);
    if (!d) return errno;
    struct dirent* de;
    int e = 0;
    while (!e && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char* a = joinf(from, de->d_name);
        char* b = joinf(to, de->d_name);
        e = carry_entry(a, b);
        free(a);
        free(b);
    }
    closedir(d);
    return e;
}

// The old folder's entries that are not the writer's, into the new folder,
// before the swap (so that no moment shows the new folder without them).
static int carry_over(AtomicDir* ad, char* err, size_t errsize) {
    DIR* d = opendir(ad->dir);
    if (!d) return 0;
    struct dirent* de;
    int e = 0;
    while (!e && (de = readdir(d)) != NULL) {
        long pid;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || matches(ad->ours, de->d_name) ||
            our_temporary(ad->ours, de->d_name, &pid))
            continue;
        char* from = joinf(ad->dir, de->d_name);
        char* to = joinf(ad->work, de->d_name);
        e = carry_entry(from, to);
        if (e) snprintf(err, errsize, "cannot carry %s over into %s: %s", from, ad->work, strerror(e));
        free(from);
        free(to);
    }
    closedir(d);
    return e;
}

// TRAIN_GPT_FOLDER_NO_EXCHANGE=1 (a test hook) makes the exchange fail as on
// a file system without it, so that tests/test_model_folder.sh can sweep its
// kills over the two-rename fallback of atomic_dir_commit too.
static int exchange(const char* a, const char* b) {
    const char* off = getenv("TRAIN_GPT_FOLDER_NO_EXCHANGE");
    if (off && *off && strcmp(off, "0") != 0) return EINVAL;
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0) return 0;
    return errno;
#else
    return ENOSYS;
#endif
}

int atomic_dir_commit(AtomicDir* ad, char* err, size_t errsize) {
    int e = 0;
    if (ad->in_place) {
        fsync_path(ad->dir);
        atomic_dir_abort(ad);
        return 0;
    }
    int existed = is_dir(ad->dir);
    if (existed) e = carry_over(ad, err, errsize);
    if (e) {
        atomic_dir_abort(ad);
        return e;
    }
    atomic_dir_fault_point();
    fsync_path(ad->work);
    char* parent_of = joinf(ad->dir, "..");
    char* old = NULL;
    atomic_dir_fault_point();
    if (!existed) {
        if (rename(ad->work, ad->dir) != 0) e = errno;
    } else if ((e = exchange(ad->work, ad->dir)) == 0) {
        old = xstrdup(ad->work);  // the exchange left the old folder under the new one's name
    } else if (e == EINVAL || e == ENOSYS) {
        // No exchange on this file system: two renames, which the next
        // begin repairs if a kill lands between them.
        size_t n = strlen(ad->dir) + 32;
        old = (char*)xmalloc(n);
        snprintf(old, n, "%s.old-%ld", ad->dir, (long)getpid());
        e = rename(ad->dir, old) != 0 ? errno : 0;
        atomic_dir_fault_point();
        if (!e && rename(ad->work, ad->dir) != 0) {
            e = errno;
            if (rename(old, ad->dir) != 0) { /* the next begin restores it */ }
        }
    }
    if (e) {
        snprintf(err, errsize, "cannot move %s into place as %s: %s (the previous folder, if any, is untouched)",
                 ad->work, ad->dir, strerror(e));
        free(old);
        free(parent_of);
        atomic_dir_abort(ad);
        return e;
    }
    fsync_path(parent_of);
    free(parent_of);
    if (old) {
        atomic_dir_fault_point();
        int r = remove_tree(old);
        if (r) warn("cannot remove the previous %s (now %s): %s", ad->dir, old, strerror(r));
        free(old);
    }
    free(ad->work);
    ad->work = NULL;
    atomic_dir_abort(ad);
    return 0;
}

void atomic_dir_abort(AtomicDir* ad) {
    if (ad->work && !ad->in_place) remove_tree(ad->work);
    free(ad->work);
    free(ad->dir);
    ad->work = ad->dir = NULL;
    fault_active = 0;
}

// ---------------------------------------------------------------------------
// start-up probes

int atomic_dir_probe(const char* dir, char* err, size_t errsize) {
    char *clean, *parent, *base;
    split(dir, &clean, &parent, &base);
    int e = 0;
    struct stat st;
    if (stat(clean, &st) == 0 && !S_ISDIR(st.st_mode)) {
        e = ENOTDIR;
        snprintf(err, errsize, "%s exists and is not a directory", clean);
    } else if ((e = mkdirs(parent)) != 0) {
        snprintf(err, errsize, "cannot create %s: %s", parent, strerror(e));
    } else {
        int in_place = is_dir(clean) && is_mount_point(clean, parent, base);
        size_t n = strlen(clean) + 40;
        char* probe = (char*)xmalloc(n);
        if (in_place) snprintf(probe, n, "%s/.probe.tmp.%ld", clean, (long)getpid());
        else snprintf(probe, n, "%s.new-%ld", clean, (long)getpid());
        int fd = in_place ? open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644) : mkdir(probe, 0755);
        if (fd < 0) {
            e = errno;
            snprintf(err, errsize, "cannot create %s: %s", probe, strerror(e));
        } else if (in_place) {
            close(fd);
            unlink(probe);
        } else {
            rmdir(probe);
        }
        free(probe);
    }
    free(clean);
    free(parent);
    free(base);
    return e;
}

int atomic_file_probe(const char* path, char* err, size_t errsize) {
    char *clean, *parent, *base;
    split(path, &clean, &parent, &base);
    int e = 0;
    if (is_dir(clean)) {
        e = EISDIR;
        snprintf(err, errsize, "%s is a directory", clean);
    } else if ((e = mkdirs(parent)) != 0) {
        snprintf(err, errsize, "cannot create %s: %s", parent, strerror(e));
    } else {
        size_t n = strlen(clean) + 32;
        char* probe = (char*)xmalloc(n);
        snprintf(probe, n, "%s.tmp.%ld", clean, (long)getpid());
        int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) {
            e = errno;
            snprintf(err, errsize, "cannot create %s: %s", probe, strerror(e));
        } else {
            close(fd);
            unlink(probe);
        }
        free(probe);
    }
    free(clean);
    free(parent);
    free(base);
    return e;
}
