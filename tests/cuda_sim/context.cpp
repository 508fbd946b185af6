// context.cpp: context switching for the simulated threads (see context.h).
#include "tests/cuda_sim/context.h"

#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__)

// cuda_sim_switch(void** save_sp, void* new_sp): pushes the callee-saved
// registers and the SSE/x87 control words, stores the stack pointer, loads
// the other one and pops the same. A new context's stack holds a frame whose
// return address is cuda_sim_start, which calls r13(r12).
asm(R"(
    .text
    .globl cuda_sim_switch
    .type cuda_sim_switch, @function
cuda_sim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_sim_switch, .-cuda_sim_switch

    .globl cuda_sim_start
    .type cuda_sim_start, @function
cuda_sim_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size cuda_sim_start, .-cuda_sim_start
)");

extern "C" void cuda_sim_switch(void** save_sp, void* new_sp);
extern "C" void cuda_sim_start(void);

namespace cuda_sim {

void context_init(Context* ctx, void* stack, size_t size, void (*entry)(void*), void* arg) {
    uintptr_t top = ((uintptr_t)stack + size - 128) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)(top - 64);  // 8 words; `top` stays 16-byte aligned for the call
    uint32_t mxcsr;
    uint16_t fpcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpcw));
    sp[0] = (uint64_t)mxcsr | ((uint64_t)fpcw << 32);
    sp[1] = 0;                    // r15
    sp[2] = 0;                    // r14
    sp[3] = (uint64_t)entry;      // r13
    sp[4] = (uint64_t)arg;        // r12
    sp[5] = 0;                    // rbx
    sp[6] = 0;                    // rbp
    sp[7] = (uint64_t)&cuda_sim_start;
    ctx->sp = sp;
}

void context_switch(Context* from, Context* to) { cuda_sim_switch(&from->sp, to->sp); }

void context_free(Context*) {}

}  // namespace cuda_sim

#else  // portable fallback

#include <ucontext.h>

namespace cuda_sim {

void context_init(Context* ctx, void* stack, size_t size, void (*entry)(void*), void* arg) {
    if (!ctx->uctx) ctx->uctx = calloc(1, sizeof(ucontext_t));
    ucontext_t* u = (ucontext_t*)ctx->uctx;
    getcontext(u);
    u->uc_stack.ss_sp = stack;
    u->uc_stack.ss_size = size;
    u->uc_link = nullptr;
    // makecontext passes int arguments: split the pointers.
    uintptr_t e = (uintptr_t)entry, a = (uintptr_t)arg;
    makecontext(u, (void (*)())+[](unsigned e_lo, unsigned e_hi, unsigned a_lo, unsigned a_hi) {
        void (*fn)(void*) = (void (*)(void*))(((uintptr_t)e_hi << 32) | e_lo);
        fn((void*)(((uintptr_t)a_hi << 32) | a_lo));
    }, 4, (unsigned)e, (unsigned)(e >> 32), (unsigned)a, (unsigned)(a >> 32));
}

void context_switch(Context* from, Context* to) {
    if (!from->uctx) from->uctx = calloc(1, sizeof(ucontext_t));
    swapcontext((ucontext_t*)from->uctx, (ucontext_t*)to->uctx);
}

void context_free(Context* ctx) {
    free(ctx->uctx);
    ctx->uctx = nullptr;
}

}  // namespace cuda_sim

#endif
