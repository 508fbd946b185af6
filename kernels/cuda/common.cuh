// common.cuh: what every CUDA source of the backend includes: the runtime
// headers, the single kernel-launch macro, and error checks.
//
// Every kernel in kernels/cuda is launched through LAUNCH(...), never with
// <<<...>>> directly. Under nvcc it is exactly <<<grid, block, smem, stream>>>;
// when the sources are compiled for the CPU execution harness (CUDA_SIM,
// tests/cuda_sim/), the harness defines it to run the kernel's threads on the
// CPU with CUDA's semantics, so the kernels' logic is tested in CI.
#pragma once

#ifdef CUDA_SIM
#include "tests/cuda_sim/cuda_sim.h"
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#define LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

#include "llm/util/util.h"

// Any failed CUDA runtime call is fatal, naming the call site.
#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess)                                                             \
            fatal("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__, cudaGetErrorString(err_), #call); \
    } while (0)
