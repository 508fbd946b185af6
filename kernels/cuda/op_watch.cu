// op_watch.cu: every op of the CUDA backend's table wrapped, on request.
//   TRAIN_GPT_SYNC_CHECK=1: the stream is synchronized after each op and a
//     fault is reported with the op's name and its integer arguments (the
//     shapes), instead of surfacing at the next copy, in whichever op happens
//     to read back. Slow: for finding which kernel faulted.
//   TRAIN_GPT_OP_PROFILE=1: CUDA events around each op; at exit a table of
//     GPU time per op and its share of all ops' time goes to stderr (the op
//     shares of a training step; the host waits after each op, so the step
//     itself runs slower than usual).
// Installed by cuda_backend_create; an op added to kernels/ops.h gets a WATCH line here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/cuda_backend.cuh"

namespace {

// " 8192 768 2304": the integer arguments in order (pointers, floats and structs skipped).
template <typename T>
void put_integer(char*& p, char* end, const T& v) {
    if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
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

int sync_check, profile;

// TRAIN_GPT_OP_PROFILE: GPU milliseconds and calls per op (one row per op name).
struct OpTime {
    const char* name;
    double ms;
    long calls;
};
OpTime op_times[64];
int op_count;
cudaEvent_t ev_start, ev_end;

void print_profile() {
    if (op_count == 0) return;  // nothing timed, or all of it taken by cuda_op_profile_take
    double total = 0;
    for (int i = 0; i < op_count; i++) total += op_times[i].ms;
    fprintf(stderr, "op profile | %-28s %8s %12s %7s\n", "op (TRAIN_GPT_OP_PROFILE=1)", "calls", "GPU ms", "share");
    for (int i = 0; i < op_count; i++)
        fprintf(stderr, "op profile | %-28s %8ld %12.3f %6.1f%%\n", op_times[i].name, op_times[i].calls, op_times[i].ms,
                total > 0 ? 100 * op_times[i].ms / total : 0.0);
    fprintf(stderr, "op profile | %-28s %8s %12.3f %6.1f%%\n", "all ops", "", total, 100.0);
}

void add_time(const char* name, float ms) {
    int i = 0;
    while (i < op_count && op_times[i].name != name) i++;
    if (i == op_count) {
        if (op_count == (int)(sizeof op_times / sizeof op_times[0])) return;
        op_times[op_count++] = OpTime{name, 0, 0};
    }
    op_times[i].ms += ms;
    op_times[i].calls++;
}

template <typename F, F Backend::*M>
struct Wrap;
template <typename... A, void (*Backend::*M)(Backend*, A...)>
struct Wrap<void (*)(Backend*, A...), M> {
    static inline const char* name = nullptr;
    static inline const char* names = nullptr;
    static void call(Backend* be, A... a) {
        if (profile) CUDA_CHECK(cudaEventRecord(ev_start, cuda_stream(be)));
        (inner(be)->*M)(be, a...);
        if (profile) {
            float ms = 0;
            CUDA_CHECK(cudaEventRecord(ev_end, cuda_stream(be)));
            CUDA_CHECK(cudaEventSynchronize(ev_end));
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev_start, ev_end));
            add_time(name, ms);
        }
        if (sync_check) {
            char values[256] = "", *p = values;
            (put_integer(p, values + sizeof values, a), ...);
            check_after(be, name, names, values);
        }
    }
};

}  // namespace

extern "C" int cuda_op_profile_take(CudaOpTime* out, int max) {
    int n = op_count < max ? op_count : max;
    for (int i = 0; i < n; i++) out[i] = CudaOpTime{op_times[i].name, op_times[i].ms, op_times[i].calls};
    op_count = 0;
    return n;
}

// Whether the environment variable is on (1), off (unset, empty, 0); fatal otherwise.
static int env_switch(const char* name) {
    const char* v = getenv(name);
    if (!v || !v[0] || !strcmp(v, "0")) return 0;
    if (strcmp(v, "1")) fatal("%s='%s': expected 1 (or 0 / unset for off)", name, v);
    return 1;
}

// WATCH(op, "names of its integer arguments, in order")
#define WATCH(op, arg_names)                                          \
    do {                                                                  \
        typedef Wrap<decltype(Backend::op), &Backend::op> W;              \
        W::name = #op;                                                    \
        W::names = arg_names;                                             \
        if (be->op) be->op = W::call;                                     \
    } while (0)

void cuda_op_watch_install(Backend* be) {
    sync_check = env_switch("TRAIN_GPT_SYNC_CHECK");
    int want_profile = env_switch("TRAIN_GPT_OP_PROFILE");
    if (!sync_check && !want_profile) return;
    // Watched ops wait for the GPU after each call, which a CUDA graph capture refuses.
    be->graph_begin = NULL;
    if (want_profile && !profile) {
        profile = 1;
        CUDA_CHECK(cudaEventCreate(&ev_start));
        CUDA_CHECK(cudaEventCreate(&ev_end));
        atexit(print_profile);
    }
    CudaState* s = cuda_state(be);
    s->unwrapped = (Backend*)xmalloc(sizeof(Backend));
    *s->unwrapped = *be;
    WATCH(convert, "dst_type src_type n");
    WATCH(encoder_forward, "B T C");
    WATCH(encoder_backward, "B T C");
    WATCH(layernorm_forward, "N C");
    WATCH(residual_layernorm_forward, "N C");
    WATCH(layernorm_backward, "N C");
    WATCH(matmul_forward, "N C OC");
    WATCH(matmul_backward, "N C OC");
    WATCH(matmul_backward_dgelu, "N C OC");
    WATCH(gelu_forward, "n");
    WATCH(gelu_backward, "n");
    WATCH(attention_forward, "B T NH NKV HS");
    WATCH(attention_backward, "B T NH NKV HS");
    WATCH(rmsnorm_forward, "N C");
    WATCH(residual_rmsnorm_forward, "N C");
    WATCH(rmsnorm_backward, "N C");
    WATCH(rope_forward, "B T NH NKV HS");
    WATCH(rope_backward, "B T NH NKV HS");
    WATCH(swiglu_forward, "N H");
    WATCH(swiglu_backward, "N H");
    WATCH(cross_entropy, "N V Vp");
    WATCH(sum, "n accumulate");
    WATCH(sum_squares, "n accumulate");
    WATCH(sum_squares_f32, "n accumulate");
    WATCH(accumulate_f32, "n round_bf16");
    WATCH(adamw, "n");
    WATCH(adamw_tensors, "n");
    WATCH(amax, "n");
    WATCH(fp8_amax_fold, "n");
    WATCH(fp8_quantize, "fmt rows cols");
    WATCH(fp8_update_scales, "len ld pos n fmt margin");
    WATCH(fp8_matmul_forward, "N C OC");
    WATCH(fp8_matmul_backward, "N C OC");
    if (sync_check)
        fprintf(stderr, "train_gpt: TRAIN_GPT_SYNC_CHECK=1: the GPU is synchronized after every op (slow; for finding "
                        "a faulting kernel)\n");
}
