// util.h: the small things every module needs: fatal errors with one clear
// line, checked allocation and file I/O, timing, and the C/C++ linkage guard.
//
// Every user-facing failure goes through fatal(): one line on stderr that
// starts with "train_gpt: error: ", then exit(1). Modules that need to react
// to a fatal error (abort the other MPI ranks, write SageMaker's failure file)
// register a hook instead of wrapping every call site.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
#define EXTERN_C_BEGIN extern "C" {
#define EXTERN_C_END }
#else
#define EXTERN_C_BEGIN
#define EXTERN_C_END
#endif

EXTERN_C_BEGIN

#if defined(__GNUC__)
#define NORETURN __attribute__((noreturn))
#define PRINTF_LIKE(a, b) __attribute__((format(printf, a, b)))
#else
#define NORETURN
#define PRINTF_LIKE(a, b)
#endif

// Prints "train_gpt: error: <message>" to stderr, runs the fatal hooks, exits 1.
NORETURN void fatal(const char* fmt, ...) PRINTF_LIKE(1, 2);

// A hook runs once, in registration order, with the formatted message, before
// the process exits. Hooks must not call fatal() themselves.
typedef void (*FatalHook)(const char* message);
void add_fatal_hook(FatalHook hook);

// Makes fatal() work across ranks (installed by llm/parallel/comm.c): `before_print`
// runs before the error line is printed and returns text to put before the
// message, or NULL (ranks other than 0 wait there briefly, so that an error
// every rank hits is printed once, by rank 0, whose abort stops the others
// first; a rank that prints names itself), and `terminate` replaces exit(1)
// after the hooks have run (MPI_Abort, so that no rank is left waiting in a
// collective). NULL: none.
void set_fatal_exit(const char* (*before_print)(void), void (*terminate)(void));

// For the fuzzers (fuzz/), which feed a reader one bad input after another in
// one process: while set, fatal() hands its message to `jump`, which must not
// return (it longjmps back into the fuzzer), instead of printing it, running
// the hooks and exiting. NULL restores the normal path.
void set_fatal_jump(void (*jump)(const char* message));

// Prints "train_gpt: warning: <message>" to stderr.
void warn(const char* fmt, ...) PRINTF_LIKE(1, 2);

void* xmalloc(size_t bytes);
void* xcalloc(size_t count, size_t size);
void* xrealloc(void* p, size_t bytes);
char* xstrdup(const char* s);

// fopen that names the file and the OS reason on failure.
FILE* xfopen(const char* path, const char* mode);
// Reads exactly `bytes` or fails with "<path>: truncated (<what>)".
void xfread(void* dst, size_t bytes, FILE* f, const char* path, const char* what);
void xfwrite(const void* src, size_t bytes, FILE* f, const char* path);
void xfclose(FILE* f, const char* path);
// Size of a file in bytes, or -1 if it cannot be stat'ed.
int64_t file_size(const char* path);
int file_exists(const char* path);
int is_dir(const char* path);  // an existing directory (following links)

// Wall-clock seconds from a monotonic clock.
double now_seconds(void);

// Parses a whole string as a number; returns 0 if it is not one (no partial parses).
int parse_long(const char* s, long* out);
int parse_double(const char* s, double* out);

// Integer ceiling division and rounding up to a multiple.
static inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static inline size_t round_up(size_t a, size_t m) { return ceil_div(a, m) * m; }

EXTERN_C_END
