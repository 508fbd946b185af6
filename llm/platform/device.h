// device.h: choosing the compute backend for --device and --precision.
#pragma once

#include "kernels/ops.h"

EXTERN_C_BEGIN

// "auto" picks CUDA when this build has the CUDA backend and a GPU is
// present, else the CPU. Fatal with the reason when the choice is impossible.
// local_rank / local_world: this process among the ranks on its machine; a
// GPU rank uses GPU local_rank (of those visible), and CPU ranks share the
// cores when threads is 0.
// precision: fp32, bf16 or fp8 (resolved from auto by llm/precision.h). fp8
// opens the GPU backend in bf16 and the CPU backend in fp32: the FP8 GEMMs
// are a model-level setting (llm/fp8/fp8.h) on top.
Backend* backend_open(const char* device, const char* precision, int threads, int local_rank, int local_world);
// Whether --device (auto, cpu, cuda) means the CUDA backend on this machine.
int device_wants_cuda(const char* device);
// --attention auto|cudnn|native for the backend: the CUDA backend's choice
// of cuDNN's fused attention or its own kernels. Fatal on an unknown word,
// and for cudnn when the backend is not CUDA or cuDNN cannot be loaded.
// verbose: print the choice once made (rank 0 of a run).
void backend_choose_attention(Backend* be, const char* mode, int verbose);
// Whether this build has the CUDA backend and a GPU is visible: what --device auto takes.
int device_cuda_available(void);

// Provided by kernels/cuda in CUDA builds; weak, so CPU-only builds link too.
int cuda_device_count(void) __attribute__((weak));
Backend* cuda_backend_create(DType dtype) __attribute__((weak));
// Makes GPU `index` the current device of this process (before the backend is created).
void cuda_select_device(int index) __attribute__((weak));
// kernels/cuda/attention_cudnn.cu: --attention for the CUDA backend.
void cuda_attention_select(Backend* be, const char* mode, int verbose) __attribute__((weak));

EXTERN_C_END
