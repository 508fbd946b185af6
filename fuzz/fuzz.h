// fuzz.h: what every libFuzzer target in fuzz/ shares. Readers report bad
// input through fatal(), which normally exits; here it jumps back into the
// target (set_fatal_jump), so one process tries input after input. Every
// rejection must still be what a user would see: one line, naming the file
// (fuzz_expect_clean_error aborts otherwise, which libFuzzer reports as a
// finding). Readers that take a path get the input written to a file whose
// name ends as the reader expects (".bin", ".bin.zst", ".json").
#pragma once

#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm/util/util.h"

static jmp_buf fuzz_env;
static char fuzz_message[2048];
static char fuzz_path[256];

static void fuzz_jump(const char* message) {
    snprintf(fuzz_message, sizeof fuzz_message, "%s", message);
    longjmp(fuzz_env, 1);
}

// Writes the input to this process's file ending in `suffix`; returns its path.
static const char* fuzz_write_input(const uint8_t* data, size_t size, const char* suffix) {
    snprintf(fuzz_path, sizeof fuzz_path, "/tmp/train_gpt_fuzz_%d%s", (int)getpid(), suffix);
    FILE* f = fopen(fuzz_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s\n", fuzz_path);
        abort();
    }
    return fuzz_path;
}

// A reader that fails closes nothing it opened (the process would exit):
// close the descriptors still open on the input file, so that a long run
// does not run out of them.
static void fuzz_close_input_fds(void) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return;
    int mine = dirfd(d);
    struct dirent* e;
    int fds[64], n = 0;
    while ((e = readdir(d)) != NULL && n < 64) {
        int fd = atoi(e->d_name);
        char link[64], target[PATH_MAX];
        if (fd <= 2 || fd == mine) continue;
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = 0;
        if (strncmp(target, "/tmp/train_gpt_fuzz_", 20) == 0) fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++) close(fds[i]);
}

// After a rejection: one line, and the file named (when there is a file).
static void fuzz_expect_clean_error(const char* path) {
    if (strchr(fuzz_message, '\n')) {
        fprintf(stderr, "fuzz: an error message spans lines: %s\n", fuzz_message);
        abort();
    }
    if (path && !strstr(fuzz_message, path)) {
        fprintf(stderr, "fuzz: an error message does not name the file %s: %s\n", path, fuzz_message);
        abort();
    }
    fuzz_close_input_fds();
}

// FUZZ_TRY { reader calls } else { fuzz_expect_clean_error(path); }
#define FUZZ_TRY                   \
    set_fatal_jump(fuzz_jump);     \
    if (setjmp(fuzz_env) == 0)
