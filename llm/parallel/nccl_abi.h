// nccl_abi.h: the part of NCCL's C interface that llm/parallel/comm_nccl.cu
// uses, declared here from NCCL's documented ABI (nccl.h of NCCL 2.12 and
// later: the types, the enum values, the function signatures), so that the
// CUDA build needs no nccl.h. NCCL itself is opened at run time (dlopen of
// libnccl.so.2) and only for rank groups of 2+ GPUs; the CPU harness links
// its own NCCL (tests/cuda_sim/nccl.cpp) against these declarations.
// tests/test_nccl_abi.sh checks every value and size against nccl.h where
// one is installed, and that comm_nccl.cu compiles with nccl.h hidden.
//
// Include it instead of nccl.h, never beside it (the names are NCCL's own).
#pragma once

#ifdef NCCL_H_
#error "nccl_abi.h declares NCCL's names itself: include it instead of nccl.h"
#endif

#include <stddef.h>

#include <cuda_runtime_api.h>  // cudaStream_t

#ifdef __cplusplus
extern "C" {
#endif

// An opaque communicator.
typedef struct ncclComm* ncclComm_t;

// The bootstrap id one rank creates and every rank of the group receives (128 bytes).
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

// Return codes (ncclSuccess and the failures NCCL documents).
typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4,
    ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7, ncclNumResults = 8
} ncclResult_t;

// Element types (the ones we reduce, and their neighbours, at NCCL's values).
typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;

// Reductions.
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
// recvcount elements per rank: sendbuff holds nranks x recvcount.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
// sendcount elements from each rank: recvbuff holds nranks x sendcount.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
