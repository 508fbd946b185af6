// device.h: choosing the compute backend for --device and --precision.
#pragma once

#include "kernels/cuda_seam.h"
#include "kernels/ops.h"
#include "llm/config.h"

EXTERN_C_BEGIN

// "auto" picks CUDA when this build has the CUDA backend and a GPU is
// present, else the CPU. Fatal with the reason when the choice is impossible.
// local_rank / local_world: this process among the ranks on its machine; a
// GPU rank uses GPU local_rank (of those visible), and CPU ranks share the
// cores when threads is 0.
// precision: fp32, bf16 or fp8 (resolved from auto by llm/precision.h). fp8
// opens the GPU backend in bf16 and the CPU backend in fp32: the FP8 GEMMs
// are a model-level setting (llm/fp8/fp8.h) on top.
Backend* backend_open(DeviceChoice device, PrecisionChoice precision, int threads, int local_rank, int local_world);
// Whether --device (auto, cpu, cuda) means the CUDA backend on this machine.
int device_wants_cuda(DeviceChoice device);
// --attention auto|cudnn|native for the backend: the CUDA backend's choice
// of cuDNN's fused attention or its own kernels. Fatal for cudnn when the
// backend is not CUDA or cuDNN cannot be loaded.
// verbose: print the choice once made (rank 0 of a run).
void backend_choose_attention(Backend* be, AttentionChoice choice, int verbose);
// Whether this build has the CUDA backend and a GPU is visible: what --device auto takes.
int device_cuda_available(void);
// Makes this rank's GPU (its local rank, as the launcher's environment says
// or else `local_rank`, modulo the GPUs visible) the current device when
// --device means CUDA, and returns its index (-1 otherwise). Called before
// anything else touches CUDA (the planner's memory query, --precision auto's
// compute capability), so that no rank opens a context on GPU 0.
int device_select_gpu(DeviceChoice device, int local_rank);

EXTERN_C_END
