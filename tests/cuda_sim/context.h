// context.h: the lightweight execution contexts that simulated CUDA threads
// run on: a stack each, switched by saving callee-saved registers (x86-64) or
// with ucontext elsewhere. No signal masks are touched, so a switch costs a
// few nanoseconds and a block of 1024 threads is cheap.
#pragma once

#include <stddef.h>

namespace cuda_sim {

struct Context {
    void* sp = nullptr;   // x86-64: the saved stack pointer
    void* uctx = nullptr; // other architectures: a ucontext_t
};

// Makes `ctx` start entry(arg) on [stack, stack + size) at its first switch.
// entry must never return: it switches away for the last time instead.
void context_init(Context* ctx, void* stack, size_t size, void (*entry)(void*), void* arg);
// Saves the running context into `from` and resumes `to`.
void context_switch(Context* from, Context* to);
void context_free(Context* ctx);

}  // namespace cuda_sim
