// attention.cuh: what attention.cu (dispatch, the CUDA-core kernels) and
// attention_mma.cu (the BF16 mma.sync tensor-core kernels) share.
#pragma once

#include <math.h>

#include "kernels/cuda/cuda_backend.cuh"

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

// The backward's per-query statistics of queries q0 .. q0+n-1 into shared
// memory: lse (times lse_scale: 1, or log2(e) for base-2 kernels) and D, both
// (B, NH, T) at row bh. Queries at or past T get lse = inf (probability 0), D = 0.
__device__ inline void load_query_stats(float* lse_s, float* D_s, const float* lse, const float* D, int bh, int q0,
                                        int n, int T, float lse_scale) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int q = q0 + i;
        lse_s[i] = q < T ? lse[(size_t)bh * T + q] * lse_scale : INFINITY;
        D_s[i] = q < T ? D[(size_t)bh * T + q] : 0.0f;
    }
}

// Where the heads live in a token's qkv row of (NH + 2*NKV) * HS elements
// (kernels/ops.h): query head h, and the key and value of the kv head that
// query head h reads. out and dout rows hold the NH query heads (NH * HS).
struct AttnLayout {
    int NH, NKV, HS;
    __host__ __device__ int group() const { return NH / NKV; }
    __host__ __device__ size_t stride() const { return (size_t)(NH + 2 * NKV) * HS; }
    __host__ __device__ size_t out_stride() const { return (size_t)NH * HS; }
    __host__ __device__ size_t q(int h) const { return (size_t)h * HS; }
    __host__ __device__ size_t k(int h) const { return (size_t)(NH + h / group()) * HS; }
    __host__ __device__ size_t v(int h) const { return (size_t)(NH + NKV + h / group()) * HS; }
};

// BF16 flash attention on mma.sync (attention_mma.cu), with grouped-query
// attention: qkv (B, T, NH + 2 NKV, HS), out (B, T, NH, HS), lse (B, NH, T),
// dqkv like qkv. Needs attention_mma_head_size(HS), NH % NKV == 0, 16-byte
// aligned buffers and attention_mma_smem_bytes(HS) of shared memory.
int attention_mma_head_size(int HS);
size_t attention_mma_smem_bytes(int HS);
void attention_forward_mma(Backend* be, bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV,
                           int HS);
void attention_backward_mma(Backend* be, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                            const float* lse, int B, int T, int NH, int NKV, int HS);

// Raises a kernel's dynamic shared memory limit when it needs more than the
// default 48 KiB; fatal if the device cannot give that much.
void attention_set_smem(Backend* be, const void* kernel, size_t bytes, const char* name);
