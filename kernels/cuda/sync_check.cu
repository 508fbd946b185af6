// sync_check.cu: TRAIN_GPT_SYNC_CHECK=1. Every op of the CUDA backend's table
// is wrapped so that the stream is synchronized after it and a fault is
// reported with the op's name and its integer arguments (the shapes), instead
// of surfacing at the next copy, in whichever op happens to read back. Slow:
// for finding which kernel faulted, never for timing. Installed by
// cuda_backend_create; an op added to kernels/ops.h gets a SYNC_WRAP line here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/cuda_backend.cuh"

namespace {

// " 8192 768 2304": the integer arguments in order (pointers, floats and structs skipped).
template <typename T>
void put_integer(char*& p, char* end, const T& v) {
    if constexpr (std::is_integral<T>::value) {
        if (p < end) p += snprintf(p, (size_t)(end - p), " %lld", (long long)v);
    }
}

void check_after(Backend* be, const char* op, const char* names, const char* values) {
    cudaError_t err = cudaStreamSynchronize(cuda_stream(be));
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess)
        fatal("TRAIN_GPT_SYNC_CHECK: op %s (%s =%s) failed on the GPU: %s (%s)", op, names, values,
              cudaGetErrorName(err), cudaGetErrorString(err));
}

// The backend's table as it was before wrapping.
const Backend* inner(Backend* be) { return cuda_state(be)->unwrapped; }

template <typename F, F Backend::*M>
struct Wrap;
template <typename... A, void (*Backend::*M)(Backend*, A...)>
struct Wrap<void (*)(Backend*, A...), M> {
    static const char* name;
    static const char* names;
    static void call(Backend* be, A... a) {
        (inner(be)->*M)(be, a...);
        char values[256] = "", *p = values;
        (put_integer(p, values + sizeof values, a), ...);
        check_after(be, name, names, values);
    }
};
template <typename... A, void (*Backend::*M)(Backend*, A...)>
const char* Wrap<void (*)(Backend*, A...), M>::name;
template <typename... A, void (*Backend::*M)(Backend*, A...)>
const char* Wrap<void (*)(Backend*, A...), M>::names;

}  // namespace

// SYNC_WRAP(op, "names of its integer arguments, in order")
#define SYNC_WRAP(op, arg_names)                                          \
    do {                                                                  \
        typedef Wrap<decltype(Backend::op), &Backend::op> W;              \
        W::name = #op;                                                    \
        W::names = arg_names;                                             \
        if (be->op) be->op = W::call;                                     \
    } while (0)

void cuda_sync_check_install(Backend* be) {
    const char* v = getenv("TRAIN_GPT_SYNC_CHECK");
    if (!v || !v[0] || !strcmp(v, "0")) return;
    if (strcmp(v, "1")) fatal("TRAIN_GPT_SYNC_CHECK='%s': expected 1 (or 0 / unset for off)", v);
    CudaState* s = cuda_state(be);
    s->unwrapped = (Backend*)xmalloc(sizeof(Backend));
    *s->unwrapped = *be;
    SYNC_WRAP(convert, "dst_type src_type n");
    SYNC_WRAP(encoder_forward, "B T C");
    SYNC_WRAP(encoder_backward, "B T C");
    SYNC_WRAP(layernorm_forward, "N C");
    SYNC_WRAP(residual_layernorm_forward, "N C");
    SYNC_WRAP(layernorm_backward, "N C");
    SYNC_WRAP(matmul_forward, "N C OC");
    SYNC_WRAP(matmul_backward, "N C OC");
    SYNC_WRAP(gelu_forward, "n");
    SYNC_WRAP(gelu_backward, "n");
    SYNC_WRAP(attention_forward, "B T C NH");
    SYNC_WRAP(attention_backward, "B T C NH");
    SYNC_WRAP(cross_entropy, "N V Vp");
    SYNC_WRAP(sum, "n accumulate");
    SYNC_WRAP(sum_squares, "n accumulate");
    SYNC_WRAP(adamw, "n");
    SYNC_WRAP(amax, "n");
    SYNC_WRAP(fp8_amax_fold, "n");
    SYNC_WRAP(fp8_quantize, "fmt rows cols");
    SYNC_WRAP(fp8_update_scales, "len ld pos n fmt margin");
    SYNC_WRAP(fp8_matmul_forward, "N C OC");
    SYNC_WRAP(fp8_matmul_backward, "N C OC");
    fprintf(stderr, "train_gpt: TRAIN_GPT_SYNC_CHECK=1: the GPU is synchronized after every op (slow; for finding "
                    "a faulting kernel)\n");
}
