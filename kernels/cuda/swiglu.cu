// swiglu.cu: the SwiGLU gate of Llama's MLP on the device, as the CPU
// reference (kernels/cpu/swiglu.c): inp (N, 2H) = [gate | up] per row,
// out (N, H) = silu(gate) * up. sigmoid(x) = 1 / (1 + e), e = exp(-x)
// clamped at 88 (finite), and 1 - sigmoid = e * sigmoid in backward (no
// cancellation). One thread per output element, grid-stride.
#include "kernels/cuda/cuda_backend.cuh"

__device__ inline float swiglu_sigmoid(float x, float* e_out) {
    float e = expf(fminf(-x, 88.0f));
    *e_out = e;
    return 1.0f / (1.0f + e);
}

// amax (may be NULL): of out, as stored.
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, size_t n, int H, float* amax) {
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t top = 0;
    for (size_t k = tid; k < n; k += (size_t)gridDim.x * blockDim.x) {
        size_t row = k / H;
        int i = (int)(k % H);
        const T* g = inp + row * 2 * H;
        float x = to_float(g[i]), e;
        float y = x * swiglu_sigmoid(x, &e) * to_float(g[H + i]);
        out[k] = from_float<T>(y);
        top = amax_keep(top, stored_abs_bits<T>(y));
    }
    if (amax) amax_commit_warp(amax, top);
}

// amax (may be NULL): of dinp (gate and up halves), as stored.
template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n, int H, float* amax) {
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t top = 0;
    for (size_t k = tid; k < n; k += (size_t)gridDim.x * blockDim.x) {
        size_t row = k / H;
        int i = (int)(k % H);
        const T* g = inp + row * 2 * H;
        float x = to_float(g[i]), u = to_float(g[H + i]), d = to_float(dout[k]), e;
        float s = swiglu_sigmoid(x, &e);
        float dg = d * u * (s + x * (s * (e * s)));
        float du = d * (x * s);
        dinp[row * 2 * H + i] = from_float<T>(dg);
        dinp[row * 2 * H + H + i] = from_float<T>(du);
        top = amax_keep(top, stored_abs_bits<T>(dg));
        top = amax_keep(top, stored_abs_bits<T>(du));
    }
    if (amax) amax_commit_warp(amax, top);
}

void cuda_swiglu_forward(Backend* be, void* out, const void* inp, int N, int H, float* amax) {
    size_t n = (size_t)N * H;
    if (n == 0) return;
    unsigned grid = grid_for(n, 256, 1);
    if (be->dtype == DTYPE_BF16)
        LAUNCH(swiglu_forward_kernel<bf16>, grid, 256, 0, cuda_stream(be), (bf16*)out, (const bf16*)inp, n, H, amax);
    else
        LAUNCH(swiglu_forward_kernel<float>, grid, 256, 0, cuda_stream(be), (float*)out, (const float*)inp, n, H,
               amax);
    CUDA_CHECK_LAUNCH();
}

void cuda_swiglu_backward(Backend* be, void* dinp, const void* inp, const void* dout, int N, int H, float* amax) {
    size_t n = (size_t)N * H;
    if (n == 0) return;
    unsigned grid = grid_for(n, 256, 1);
    if (be->dtype == DTYPE_BF16)
        LAUNCH(swiglu_backward_kernel<bf16>, grid, 256, 0, cuda_stream(be), (bf16*)dinp, (const bf16*)inp,
               (const bf16*)dout, n, H, amax);
    else
        LAUNCH(swiglu_backward_kernel<float>, grid, 256, 0, cuda_stream(be), (float*)dinp, (const float*)inp,
               (const float*)dout, n, H, amax);
    CUDA_CHECK_LAUNCH();
}
