// convert.c: dtype conversions on the CPU backend. The backend computes in
// FP32, but BF16 <-> FP32 is still needed here (checkpoint export in llm.c's
// bf16 layout, and as the reference for the CUDA backend's casts).
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/bf16.h"

static void f32_to_bf16_array(uint16_t* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

static void bf16_to_f32_array(float* dst, const uint16_t* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void cpu_convert(Backend* be, void* dst, DType dst_type, const void* src, DType src_type,
                 size_t n) {
    if (n == 0) return;
    if (dst_type == src_type && (dst_type == DTYPE_F32 || dst_type == DTYPE_BF16)) {
        memmove(dst, src, n * dtype_size(dst_type));
    } else if (src_type == DTYPE_F32 && dst_type == DTYPE_BF16) {
        f32_to_bf16_array((uint16_t*)dst, (const float*)src, n);
    } else if (src_type == DTYPE_BF16 && dst_type == DTYPE_F32) {
        bf16_to_f32_array((float*)dst, (const uint16_t*)src, n);
    } else {
        fatal("cpu backend: conversion from %s to %s is not supported", dtype_name(src_type),
              dtype_name(dst_type));
    }
}
