// convert.cu: dtype conversions on the device: FP32 <-> BF16 (round to
// nearest even into BF16, exact back), and same-type copies.
#include "kernels/cuda/cuda_backend.cuh"

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] = from_float<Dst>(to_float(src[i]));
    }
}

void cuda_convert(Backend* be, void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
    if (n == 0) return;
    cudaStream_t st = cuda_stream(be);
    if (dst_type == src_type && (dst_type == DTYPE_F32 || dst_type == DTYPE_BF16)) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_type), cudaMemcpyDeviceToDevice, st));
        return;
    }
    unsigned grid = grid_for(n, 256, 4);
    if (src_type == DTYPE_F32 && dst_type == DTYPE_BF16) {
        auto kernel = convert_kernel<bf16, float>;
        LAUNCH(kernel, grid, 256, 0, st, (bf16*)dst, (const float*)src, n);
    } else if (src_type == DTYPE_BF16 && dst_type == DTYPE_F32) {
        auto kernel = convert_kernel<float, bf16>;
        LAUNCH(kernel, grid, 256, 0, st, (float*)dst, (const bf16*)src, n);
    } else {
        fatal("cuda backend: conversion from %s to %s is not supported", dtype_name(src_type),
              dtype_name(dst_type));
    }
    CUDA_CHECK_LAUNCH();
}
