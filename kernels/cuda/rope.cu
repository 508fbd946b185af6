// rope.cu: rotary position embeddings on the device, in place on the query
// and key heads of qkv (B, T, NH + 2*NKV, HS), as the CPU reference
// (kernels/cpu/rope.c): pair i is (x[i], x[i + HS/2]), rotated by the angle
// whose cos and sin the FP32 table freqs (T, HS/2, 2) holds, with the same
// fmaf expressions, so FP32 results match the CPU's bits. One thread per
// pair; backward rotates by minus the angle.
#include "kernels/cuda/cuda_backend.cuh"

template <typename T>
__global__ void rope_kernel(T* qkv, const float* freqs, size_t pairs, int T_, int heads, int half, size_t stride,
                            float sign) {
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t p = tid; p < pairs; p += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(p % half);
        size_t rest = p / half;
        int h = (int)(rest % heads);
        size_t n = rest / heads;  // token b * T + t
        const float* f = freqs + ((n % T_) * half + i) * 2;
        float c = f[0], s = sign * f[1];
        T* x = qkv + n * stride + (size_t)h * 2 * half;
        float x0 = to_float(x[i]), x1 = to_float(x[i + half]);
        x[i] = from_float<T>(fmaf(x0, c, -(x1 * s)));
        x[i + half] = from_float<T>(fmaf(x0, s, x1 * c));
    }
}

static void rope_launch(Backend* be, void* qkv, const float* freqs, int B, int T, int NH, int NKV, int HS,
                        float sign) {
    if (HS % 2 != 0) fatal("rope: head size %d is not even", HS);
    int half = HS / 2, heads = NH + NKV;
    size_t pairs = (size_t)B * T * heads * half, stride = (size_t)(NH + 2 * NKV) * HS;
    if (pairs == 0) return;
    unsigned grid = grid_for(pairs, 256, 1);
    if (be->dtype == DTYPE_BF16) {
        LAUNCH(rope_kernel<bf16>, grid, 256, 0, cuda_stream(be), (bf16*)qkv, freqs, pairs, T, heads, half, stride,
               sign);
    } else {
        LAUNCH(rope_kernel<float>, grid, 256, 0, cuda_stream(be), (float*)qkv, freqs, pairs, T, heads, half, stride,
               sign);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_rope_forward(Backend* be, void* qkv, const float* freqs, int B, int T, int NH, int NKV, int HS) {
    rope_launch(be, qkv, freqs, B, T, NH, NKV, HS, 1.0f);
}

void cuda_rope_backward(Backend* be, void* dqkv, const float* freqs, int B, int T, int NH, int NKV, int HS) {
    rope_launch(be, dqkv, freqs, B, T, NH, NKV, HS, -1.0f);
}
