// testlib.h: the tiny test framework every C test program uses.
//
// A test program runs its cases with RUN(fn); each case calls CHECK/CHECK_CLOSE.
// Every case prints exactly one line, "ok <name>" or "FAIL <name>: <first
// failure>", which tests/run_tests.sh counts. The program's exit status is the
// number of failed cases (capped), so a crash or a nonzero exit is also seen.
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int testlib_case_failed;
static int testlib_failures;
static int testlib_cases;
static char testlib_first[512];

#define CHECK(cond, ...)                                                           \
    do {                                                                           \
        if (!(cond)) {                                                             \
            if (!testlib_case_failed) {                                            \
                int n_ = snprintf(testlib_first, sizeof testlib_first, "%s:%d: ",  \
                                  __FILE__, __LINE__);                             \
                snprintf(testlib_first + n_, sizeof testlib_first - n_, __VA_ARGS__); \
            }                                                                      \
            testlib_case_failed = 1;                                               \
        }                                                                          \
    } while (0)

// |got - want| <= atol + rtol * |want|, and both finite.
#define CHECK_CLOSE(got, want, atol, rtol, what)                                   \
    do {                                                                           \
        double g_ = (double)(got), w_ = (double)(want);                            \
        CHECK(isfinite(g_) && isfinite(w_) && fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_), \
              "%s: got %.9g want %.9g", what, g_, w_);                             \
    } while (0)

// RUN_SUFFIXED: the case's name is fn's name followed by suffix (a string
// chosen at run time, e.g. "_bf16" when a case runs once per dtype).
#define RUN_SUFFIXED(fn, suffix)                                                   \
    do {                                                                           \
        const char* suffix_ = (suffix);                                            \
        testlib_case_failed = 0;                                                   \
        testlib_first[0] = 0;                                                      \
        fn();                                                                      \
        testlib_cases++;                                                           \
        if (testlib_case_failed) {                                                 \
            testlib_failures++;                                                    \
            printf("FAIL %s%s: %s\n", #fn, suffix_, testlib_first);                \
        } else {                                                                   \
            printf("ok %s%s\n", #fn, suffix_);                                     \
        }                                                                          \
        fflush(stdout);                                                            \
    } while (0)

#define RUN(fn) RUN_SUFFIXED(fn, "")

// The whole file at path, NUL-terminated (so text can be searched as a
// string), its size in *len; NULL when it cannot be opened. Free it.
static inline void* test_read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)malloc((size_t)n + 1);
    if (!buf) {
        fprintf(stderr, "test setup: out of memory reading %s\n", path);
        exit(2);
    }
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

#define TESTS_DONE() (testlib_failures > 100 ? 100 : testlib_failures)
