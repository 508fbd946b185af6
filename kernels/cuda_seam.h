// cuda_seam.h: the seam between the program and its CUDA parts. Every symbol
// that only a CUDA build defines is declared here, and only here, weak: a
// CPU-only build (NO_CUDA=1, or no nvcc) links without them and sees each as
// NULL, so callers test the pointer before calling (`if (cuda_x) cuda_x(...)`).
// The rest of the program (train.cu included) is plain C compiled the same
// way in every build; nothing outside kernels/cuda/ and llm/parallel/comm_nccl.cu
// includes a CUDA header.
//
// Defined in: kernels/cuda/device.cu (count, select), device_memory.cu
// (memory), gpu_info.cu (current device), backend.cu (the backend),
// matmul.cu (epilogue counts), op_watch.cu (op profile),
// attention_cudnn.cu (--attention),
// llm/parallel/comm_nccl.cu (collectives on GPU memory).
#pragma once

#include <stddef.h>

#include "kernels/ops.h"

EXTERN_C_BEGIN

#define CUDA_SEAM __attribute__((weak))

// ---- devices (safe without a GPU or a driver) ----------------------------------------------------
// GPUs visible to this process (0 without a driver).
int cuda_device_count(void) CUDA_SEAM;
// Makes GPU `index` the current device of this process; fatal if it cannot.
void cuda_select_device(int index) CUDA_SEAM;
// The current GPU's free and total memory and name; 0 without a GPU.
int cuda_device_memory(size_t* free_bytes, size_t* total_bytes, char* name, int name_len) CUDA_SEAM;
// Each writes a NUL-terminated string and returns 1, or returns 0 when there
// is no current CUDA device.
int cuda_current_device_name(char* out, int len) CUDA_SEAM;
// "0000:53:00.0" style, as nvmlDeviceGetHandleByPciBusId expects; unlike a
// device index it does not depend on CUDA_VISIBLE_DEVICES.
int cuda_current_pci_bus_id(char* out, int len) CUDA_SEAM;
// The compute capability (e.g. 9, 0 for Hopper).
int cuda_current_compute_capability(int* major, int* minor) CUDA_SEAM;

// ---- the backend (kernels/ops.h's table on the current GPU) --------------------------------------
Backend* cuda_backend_create(DType dtype) CUDA_SEAM;
// --attention for the CUDA backend (kernels/cuda/attention_cudnn.cu): choice 0
// auto (cuDNN where it loads and takes the shape), 1 cudnn (fatal when it
// cannot), 2 native; verbose: print the choice once made.
void cuda_attention_select(Backend* be, int choice, int verbose) CUDA_SEAM;

// The GEMMs that took a cuBLASLt epilogue (fused) and those that ran our
// kernels instead (fallback: no algorithm, an aux leading dimension that is
// not a multiple of 8, unaligned pointers) since the backend was created,
// by kind: [0] GELU_AUX(_BIAS) in matmul_forward, [1] DGELU(_BGRAD) in
// matmul_backward_dgelu, [2] BGRADB in matmul_backward (kernels/cuda/matmul.cu).
typedef struct {
    long fused[3], fallback[3];
} CudaEpilogueCounts;
void cuda_epilogue_counts(Backend* be, CudaEpilogueCounts* out) CUDA_SEAM;

// TRAIN_GPT_OP_PROFILE=1 (kernels/cuda/op_watch.cu): the GPU milliseconds
// and calls per op name since the last take, which starts them again from
// zero; returns the number of rows written (at most max). What a caller has
// taken is not printed again at exit.
typedef struct {
    const char* op;  // the Backend member's name: "layernorm_backward"
    double ms;
    long calls;
} CudaOpTime;
int cuda_op_profile_take(CudaOpTime* out, int max) CUDA_SEAM;

// ---- collectives on GPU memory (llm/parallel/comm.h) ----------------------------------------------
// Groups of one rank need no NCCL; NCCL is loaded when a group has two or more.
struct Comm;
struct CommDevice;
struct CommDevice* comm_nccl_create(struct Comm* c, void* cuda_stream) CUDA_SEAM;

EXTERN_C_END
