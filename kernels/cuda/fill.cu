// fill.cu: random device buffers made on the device, for benchmarks
// (dev/bench_gpu): a GPT-2 124M-sized buffer filled by one host thread and
// uploaded takes seconds of the GPU check's minutes; here it takes
// microseconds. Values come from a counter-based hash of (seed, index), so
// a buffer is the same on every run and every GPU, whatever the grid.
#include "kernels/cuda/cuda_backend.cuh"

// splitmix64's finalizer: a well-mixed 64-bit value from a counter.
__device__ inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* dst, size_t n, float lo, float hi, uint64_t seed) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float u = (float)(mix64(seed ^ mix64(i)) >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
        dst[i] = from_float<T>(lo + (hi - lo) * u);
    }
}

__global__ void fill_tokens_kernel(int32_t* dst, size_t n, int lo, int hi, uint64_t seed) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = lo + (int32_t)(mix64(seed ^ mix64(i)) % (uint64_t)(hi - lo));
}

// dst[0..n) uniform in [lo, hi): BF16 or FP32 values, or I32 integers.
extern "C" void cuda_fill_uniform(Backend* be, void* dst, size_t n, DType dtype, float lo, float hi, uint64_t seed) {
    if (n == 0) return;
    cudaStream_t st = cuda_stream(be);
    unsigned grid = grid_for(n, 256, 4);
    if (dtype == DTYPE_BF16) {
        auto kernel = fill_uniform_kernel<bf16>;
        LAUNCH(kernel, grid, 256, 0, st, (bf16*)dst, n, lo, hi, seed);
    } else if (dtype == DTYPE_F32) {
        auto kernel = fill_uniform_kernel<float>;
        LAUNCH(kernel, grid, 256, 0, st, (float*)dst, n, lo, hi, seed);
    } else if (dtype == DTYPE_I32 && hi > lo) {
        LAUNCH(fill_tokens_kernel, grid, 256, 0, st, (int32_t*)dst, n, (int)lo, (int)hi, seed);
    } else {
        fatal("cuda_fill_uniform: dtype %s (or an empty range) is not supported", dtype_name(dtype));
    }
    CUDA_CHECK_LAUNCH();
}
