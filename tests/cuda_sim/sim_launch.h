// sim_launch.h: LAUNCH(kernel, grid, block, smem, stream, args...) for CPU runs.
//
// Under nvcc, kernels/cuda/common.cuh defines LAUNCH as
// kernel<<<grid, block, smem, stream>>>(args...). Here it converts the
// arguments to the kernel's parameter types once (as a launch does), checks
// that every pointer argument is device-accessible memory (cudaMalloc,
// cudaMallocHost, registered host memory or a symbol address), and runs the
// grid through the scheduler (scheduler.cpp). Errors in the launch
// configuration are reported through cudaGetLastError(), as on a GPU. On a
// capturing stream the launch is recorded with a copy of its arguments
// (graph.cpp) and runs only when the graph is launched.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

namespace cuda_sim {

struct LaunchSpec {
    const char* name;        // the kernel expression as written at the LAUNCH site
    const void* function;    // identity for cudaFuncSetAttribute
    dim3 grid, block;
    size_t dynamic_smem;
    cudaStream_t stream;
    void (*invoke)(const void* closure);  // calls the kernel with a copy of the arguments
    const void* closure;
    // A heap copy of the closure and its release: a stream capture (graph.cpp)
    // keeps the arguments by value, as cudaStreamBeginCapture's graph does.
    void* (*clone)(const void* closure);
    void (*drop)(void* closure);
};
void launch_grid(const LaunchSpec& spec);

// For the harness's own tests: switch between in-order and random scheduling
// (CUDA_SIM_SCHEDULE / CUDA_SIM_SEED set the initial choice).
void set_schedule(bool random, uint64_t seed);

// Stops with an error naming the kernel and argument if p (non-null) does not
// point into device-accessible memory.
void check_pointer_argument(const char* kernel, int index, const void* p);

template <typename T>
inline void check_argument(const char* kernel, int index, const T& value) {
    if constexpr (std::is_pointer<T>::value) check_pointer_argument(kernel, index, (const void*)value);
}

template <typename Tuple, size_t... I>
inline void check_arguments(const char* kernel, const Tuple& args, std::index_sequence<I...>) {
    (check_argument(kernel, (int)I, std::get<I>(args)), ...);
}

template <typename... P, typename... A>
inline void launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "LAUNCH: wrong number of kernel arguments");
    struct Closure {
        void (*kernel)(P...);
        std::tuple<typename std::decay<P>::type...> args;
    };
    Closure closure{kernel, std::tuple<typename std::decay<P>::type...>(std::forward<A>(args)...)};
    check_arguments(name, closure.args, std::index_sequence_for<P...>{});
    LaunchSpec spec;
    spec.name = name;
    spec.function = (const void*)kernel;
    spec.grid = grid;
    spec.block = block;
    spec.dynamic_smem = smem;
    spec.stream = stream;
    spec.invoke = [](const void* c) {
        const Closure* cl = static_cast<const Closure*>(c);
        std::apply(cl->kernel, cl->args);
    };
    spec.closure = &closure;
    spec.clone = [](const void* c) -> void* { return new Closure(*static_cast<const Closure*>(c)); };
    spec.drop = [](void* c) { delete static_cast<Closure*>(c); };
    launch_grid(spec);
}

}  // namespace cuda_sim

// The C++ overloads that cuda_runtime.h declares only for nvcc.
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T* func, enum cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void*)func, attr, value);
}
template <class T>
static inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, T* func) {
    return ::cudaFuncGetAttributes(attr, (const void*)func);
}

#define LAUNCH(kernel, grid, block, smem, stream, ...) \
    ::cuda_sim::launch(#kernel, kernel, (grid), (block), (smem), (stream), ##__VA_ARGS__)
