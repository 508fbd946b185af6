// util.c: fatal errors, checked allocation and file I/O, clocks, number parsing.
#include "llm/util/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_FATAL_HOOKS 8
static FatalHook fatal_hooks[MAX_FATAL_HOOKS];
static int num_fatal_hooks;
static int in_fatal;
static const char* (*fatal_before_print)(void);
static void (*fatal_terminate)(void);

void set_fatal_exit(const char* (*before_print)(void), void (*terminate)(void)) {
    fatal_before_print = before_print;
    fatal_terminate = terminate;
}

static void (*fatal_jump)(const char* message);

void set_fatal_jump(void (*jump)(const char* message)) { fatal_jump = jump; }

void add_fatal_hook(FatalHook hook) {
    if (num_fatal_hooks < MAX_FATAL_HOOKS) fatal_hooks[num_fatal_hooks++] = hook;
}

// An error is one line: control characters that came in with the input (a
// newline inside a config.json string, say) are written as escapes.
static void escape_controls(char* dst, size_t size, const char* src) {
    size_t n = 0;
    for (const unsigned char* p = (const unsigned char*)src; *p && n + 5 < size; p++) {
        if (*p == '\n') n += (size_t)snprintf(dst + n, size - n, "\\n");
        else if (*p == '\t') n += (size_t)snprintf(dst + n, size - n, "\\t");
        else if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(dst + n, size - n, "\\x%02x", *p);
        else dst[n++] = (char)*p;
    }
    dst[n] = 0;
}

void fatal(const char* fmt, ...) {
    char raw[2048], msg[4 * 2048 + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    escape_controls(msg, sizeof msg, raw);
    if (fatal_jump) fatal_jump(msg);
    fflush(stdout);
    // A hook that itself fails must not recurse back into the hooks.
    int first = !in_fatal;
    in_fatal = 1;
    const char* prefix = first && fatal_before_print ? fatal_before_print() : NULL;
    fprintf(stderr, "train_gpt: error: %s%s\n", prefix ? prefix : "", msg);
    fflush(stderr);
    if (first) {
        for (int i = 0; i < num_fatal_hooks; i++) fatal_hooks[i](msg);
        if (fatal_terminate) fatal_terminate();
    }
    exit(1);
}

void warn(const char* fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    // One write: under mpirun, stdout and stderr travel separately and a line
    // written in pieces can come out with other lines inside it.
    fprintf(stderr, "train_gpt: warning: %s\n", msg);
}

void* xmalloc(size_t bytes) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) fatal("out of host memory allocating %zu bytes", bytes);
    return p;
}

void* xcalloc(size_t count, size_t size) {
    void* p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

void* xrealloc(void* p, size_t bytes) {
    void* q = realloc(p, bytes ? bytes : 1);
    if (!q) fatal("out of host memory reallocating %zu bytes", bytes);
    return q;
}

char* xstrdup(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = (char*)xmalloc(n);
    memcpy(d, s, n);
    return d;
}

FILE* xfopen(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (!f) fatal("cannot open '%s': %s", path, strerror(errno));
    return f;
}

void xfread(void* dst, size_t bytes, FILE* f, const char* path, const char* what) {
    size_t got = fread(dst, 1, bytes, f);
    if (got != bytes) {
        if (ferror(f)) fatal("%s: read error in %s: %s", path, what, strerror(errno));
        fatal("%s: truncated: %s needs %zu bytes, only %zu present", path, what, bytes, got);
    }
}

void xfwrite(const void* src, size_t bytes, FILE* f, const char* path) {
    if (fwrite(src, 1, bytes, f) != bytes) fatal("%s: write failed: %s", path, strerror(errno));
}

void xfclose(FILE* f, const char* path) {
    if (fclose(f) != 0) fatal("%s: close failed: %s", path, strerror(errno));
}

int64_t file_size(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int is_dir(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int parse_long(const char* s, long* out) {
    if (!s || !*s) return 0;
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}

int parse_double(const char* s, double* out) {
    if (!s || !*s) return 0;
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}
