// cuda_sim.h: what a kernels/cuda source sees when it is compiled for the CPU
// with `g++ -std=c++17 -DCUDA_SIM` (kernels/cuda/common.cuh includes it).
//
// The CUDA sources of the backend then build with the host compiler and run
// on the CPU with CUDA's execution model, so CI (which has no GPU) exercises
// their logic against the CPU reference backend:
//   - LAUNCH(kernel, grid, block, smem, stream, args...) runs every block of
//     the grid; every thread of a block is its own lightweight context with a
//     small stack, so __syncthreads() is a real barrier, __shared__ memory is
//     shared by exactly the threads of one block and poisoned (0xFF bytes, NaN
//     for floats) before each block starts;
//   - warp primitives exchange values among the lanes of a warp when every
//     lane named in the mask has arrived; wmma fragments are warp-collective;
//     so are mma.sync m16n8k16 and ldmatrix, with the PTX register layouts,
//     and cp.async lands only when its group is waited for (sim_mma.h);
//   - atomics, math intrinsics, bf16/fp8 types (the CUDA headers' host code);
//   - the runtime, cuBLASLt and NCCL calls are implemented on the CPU
//     (tests/cuda_sim/*.cpp) behind the real headers' declarations.
// Scheduling: CUDA_SIM_SCHEDULE=random runs the threads of a block in a random
// (CUDA_SIM_SEED-seeded) order between synchronisation points, so a missing
// barrier shows up as a wrong result; a barrier or warp collective that not
// all threads reach is reported as an error naming the kernel.
//
// Never linked into ./train_gpt: only the programs under build/sim/ use it
// (the tests, and build/sim/train_gpt, the trainer on the simulated GPU).
// What this proves and what it does not: tests/cuda_sim/README.md.
#pragma once

#ifndef CUDA_SIM
#error "tests/cuda_sim/cuda_sim.h is only for builds with -DCUDA_SIM"
#endif

// Standard headers first: the device qualifiers defined below (__noinline__,
// __shared__) must not reach them.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// The real CUDA headers, in host mode: types, enums and the runtime API's
// declarations (implemented in tests/cuda_sim/runtime.cpp), the bf16/fp16/fp8
// types with their host-side conversions and arithmetic.
#include <cuda_runtime.h>
#include <device_launch_parameters.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "tests/cuda_sim/sim_device.h"
#include "tests/cuda_sim/sim_atomic.h"
#include "tests/cuda_sim/sim_wmma.h"
#include "tests/cuda_sim/sim_mma.h"
#include "tests/cuda_sim/sim_launch.h"
