// mma.cuh: the tensor-core and asynchronous-copy instructions the native
// attention kernel is written in, as small device functions: inline PTX under
// nvcc, the CPU harness's versions of the same instructions under CUDA_SIM
// (tests/cuda_sim/sim_mma.h, which states the register layouts).
//
// Register layouts (PTX ISA, mma.m16n8k16 with .bf16): g = lane / 4, t = lane % 4.
//   A (16 x 16, row-major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, k x n):      b[0] = B[2t, 2t+1][g],  b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, float):   c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
// Two bf16 share a .b32 register, the lower index in the low half. So the
// accumulator of a 16 x 16 product (two n-tiles), converted to bf16 pairs, is
// exactly an A operand: that is how P = softmax(S) feeds P V without leaving
// registers.
//   ldmatrix: lane 8m + r gives the address of row r (16 bytes) of matrix m;
//   register m of lane 4r + w gets row r, elements 2w, 2w+1 (with .trans:
//   column r, elements 2w, 2w+1).
#pragma once

#include <stdint.h>
#include <string.h>

#include "kernels/cuda/device_utils.cuh"

// Two floats as a bf16 pair (x in the low half), round to nearest even.
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, 4);  // nvcc makes this a register move
    return r;
}

#ifdef CUDA_SIM

__device__ inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    cuda_sim::mma_m16n8k16_bf16(d, a, b, c);
}
__device__ inline void ldmatrix_x1(uint32_t r[1], const void* row) { cuda_sim::ldmatrix(r, 1, false, row); }
__device__ inline void ldmatrix_x2(uint32_t r[2], const void* row) { cuda_sim::ldmatrix(r, 2, false, row); }
__device__ inline void ldmatrix_x4(uint32_t r[4], const void* row) { cuda_sim::ldmatrix(r, 4, false, row); }
__device__ inline void ldmatrix_x1_trans(uint32_t r[1], const void* row) { cuda_sim::ldmatrix(r, 1, true, row); }
__device__ inline void ldmatrix_x2_trans(uint32_t r[2], const void* row) { cuda_sim::ldmatrix(r, 2, true, row); }
__device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void* row) { cuda_sim::ldmatrix(r, 4, true, row); }
// 16 bytes global -> shared; only the first src_bytes are read, the rest are zeros.
__device__ inline void cp_async_cg16(void* smem, const void* gmem, int src_bytes) {
    cuda_sim::cp_async(smem, gmem, 16, src_bytes, true);
}
__device__ inline void cp_async_ca16(void* smem, const void* gmem, int src_bytes) {
    cuda_sim::cp_async(smem, gmem, 16, src_bytes, false);
}
__device__ inline void cp_async_commit() { cuda_sim::cp_async_commit(); }
template <int N>
__device__ inline void cp_async_wait() {
    cuda_sim::cp_async_wait(N);
}

#else

__device__ inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}
__device__ inline uint32_t smem_address(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ inline void ldmatrix_x1(uint32_t r[1], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_address(row)));
}
__device__ inline void ldmatrix_x2(uint32_t r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(row)));
}
__device__ inline void ldmatrix_x4(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row)));
}
__device__ inline void ldmatrix_x1_trans(uint32_t r[1], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_address(row)));
}
__device__ inline void ldmatrix_x2_trans(uint32_t r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(row)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row)));
}
__device__ inline void cp_async_cg16(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}
__device__ inline void cp_async_ca16(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
