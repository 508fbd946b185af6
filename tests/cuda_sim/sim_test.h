// sim_test.h: helpers for the harness's own tests (tests/cuda_sim/test_*.cu):
// the testlib.h cases plus running a piece of code in a child process to
// check that the harness reports an error (message and exit status).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/cuda_sim/cuda_sim.h"
#include "tests/testlib.h"

// Runs fn() in a forked child with stderr captured; returns the exit status
// (or 128 + signal) and stores what the child wrote to stderr.
template <typename F>
inline int run_in_child(F fn, std::string* err) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        fn();
        fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    err->clear();
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) err->append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A child that must stop with "cuda_sim: error:", status 1, and a message
// containing every one of the given fragments.
template <typename F>
inline void check_child_error(F fn, std::initializer_list<const char*> fragments) {
    std::string err;
    int status = run_in_child(fn, &err);
    CHECK(status == 1, "child exit status %d, expected 1; stderr: %s", status, err.c_str());
    CHECK(err.find("cuda_sim: error:") != std::string::npos, "no harness error in: %s", err.c_str());
    for (const char* f : fragments) CHECK(err.find(f) != std::string::npos, "'%s' missing from: %s", f, err.c_str());
}

template <typename T>
inline T* device_alloc(size_t n) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess, "cudaMalloc(%zu)", n * sizeof(T));
    return (T*)p;
}

inline uint32_t test_rand(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}
