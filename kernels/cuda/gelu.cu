// gelu.cu: GELU with the tanh approximation, forward and backward, on the device.
//
// As on the CPU (kernels/cpu/gelu.c): 0.5 (1 + tanh(u)) = sigmoid(2u) =
// 1 / (1 + exp(-2u)) with u = sqrt(2/pi) (x + 0.044715 x^3), which needs one
// exp and does not cancel for very negative x. The exponent is clamped at 88
// (exp(88) is finite) so that 1 - s = e * s stays a number. The matmul's
// GELU runs in cuBLASLt's epilogue where it can and this kernel where it
// cannot; a layer that recomputes the GELU output in backward runs this
// kernel in its forward too, so both give the same bits (see matmul.cu).
#include "kernels/cuda/cuda_backend.cuh"

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

// s = sigmoid(2u) and e = exp(-2u).
__device__ inline float gelu_sigmoid(float x, float* e_out) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float e = expf(fminf(-2.0f * u, 88.0f));
    *e_out = e;
    return 1.0f / (1.0f + e);
}

__device__ inline float gelu_value(float x) {
    float e;
    return x * gelu_sigmoid(x, &e);
}

__device__ inline float gelu_grad(float x) {
    float e;
    float s = gelu_sigmoid(x, &e);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return s + x * (2.0f * s * (e * s)) * du;
}

// Elementwise kernels walk n / V packs of V elements (grid-stride), and the
// first threads take the n % V leftover elements one by one. amax (may be
// NULL): of what they write, as stored.
template <typename T, int V>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n, float* amax) {
    size_t packs = n / V, stride = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t top = 0;
    for (size_t p = tid; p < packs; p += stride) {
        float x[V], y[V];
        load_pack<T, V>(x, inp + p * V);
        UNROLL for (int i = 0; i < V; i++) y[i] = gelu_value(x[i]);
        store_pack<T, V>(out + p * V, y);
        if (amax) top = amax_keep_pack<T, V>(top, y);
    }
    size_t i = packs * V + tid;
    if (i < n) {
        float y = gelu_value(to_float(inp[i]));
        out[i] = from_float<T>(y);
        top = amax_keep(top, stored_abs_bits<T>(y));
    }
    if (amax) amax_commit_warp(amax, top);
}

// dinp may alias dout: each element is read before the same thread writes it.
template <typename T, int V>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n, float* amax) {
    size_t packs = n / V, stride = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t top = 0;
    for (size_t p = tid; p < packs; p += stride) {
        float x[V], g[V], y[V];
        load_pack<T, V>(x, inp + p * V);
        load_pack<T, V>(g, dout + p * V);
        UNROLL for (int i = 0; i < V; i++) y[i] = g[i] * gelu_grad(x[i]);
        store_pack<T, V>(dinp + p * V, y);
        if (amax) top = amax_keep_pack<T, V>(top, y);
    }
    size_t i = packs * V + tid;
    if (i < n) {
        float y = to_float(dout[i]) * gelu_grad(to_float(inp[i]));
        dinp[i] = from_float<T>(y);
        top = amax_keep(top, stored_abs_bits<T>(y));
    }
    if (amax) amax_commit_warp(amax, top);
}

template <typename T>
static void gelu_forward_typed(Backend* be, T* out, const T* inp, size_t n, float* amax) {
    const int V = Vec16<T>::N;
    unsigned grid = grid_for(n, 256, V);
    if (aligned_to(out, 16) && aligned_to(inp, 16)) {
        auto kernel = gelu_forward_kernel<T, V>;
        LAUNCH(kernel, grid, 256, 0, cuda_stream(be), out, inp, n, amax);
    } else {
        auto kernel = gelu_forward_kernel<T, 1>;
        LAUNCH(kernel, grid_for(n, 256, 1), 256, 0, cuda_stream(be), out, inp, n, amax);
    }
    CUDA_CHECK_LAUNCH();
}

template <typename T>
static void gelu_backward_typed(Backend* be, T* dinp, const T* inp, const T* dout, size_t n, float* amax) {
    const int V = Vec16<T>::N;
    if (aligned_to(dinp, 16) && aligned_to(inp, 16) && aligned_to(dout, 16)) {
        auto kernel = gelu_backward_kernel<T, V>;
        LAUNCH(kernel, grid_for(n, 256, V), 256, 0, cuda_stream(be), dinp, inp, dout, n, amax);
    } else {
        auto kernel = gelu_backward_kernel<T, 1>;
        LAUNCH(kernel, grid_for(n, 256, 1), 256, 0, cuda_stream(be), dinp, inp, dout, n, amax);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_gelu_forward(Backend* be, void* out, const void* inp, size_t n, float* amax) {
    if (n == 0) return;
    if (be->dtype == DTYPE_BF16) gelu_forward_typed(be, (bf16*)out, (const bf16*)inp, n, amax);
    else gelu_forward_typed(be, (float*)out, (const float*)inp, n, amax);
}

void cuda_gelu_backward(Backend* be, void* dinp, const void* inp, const void* dout, size_t n, float* amax) {
    if (n == 0) return;
    if (be->dtype == DTYPE_BF16) gelu_backward_typed(be, (bf16*)dinp, (const bf16*)inp, (const bf16*)dout, n, amax);
    else gelu_backward_typed(be, (float*)dinp, (const float*)inp, (const float*)dout, n, amax);
}
