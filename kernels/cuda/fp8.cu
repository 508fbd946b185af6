// fp8.cu: FP8 on the device: amax, the cast to E4M3/E5M2 (plain and, for
// Hopper's TN-only GEMMs, transposed in the same pass), and the
// delayed-scaling update. The FP8 GEMMs are in matmul.cu.
//
// Every rule comes from kernels/fp8_format.h, shared with the CPU backend: the
// cast is cvt.rn.satfinite (CUDA's __nv_cvt_float_to_fp8, which the CPU's
// fp8_encode matches on all 2^32 inputs) of the FP32 product x * scale, and
// the scales are computed with the same IEEE divisions, so the codes and
// scales are the CPU's bits.
#include <float.h>

#include "kernels/cuda/cuda_backend.cuh"

Fp8Support cuda_fp8_support_for(int major, int minor) {
    int cc = major * 10 + minor;
    if (cc < 89) return FP8_NONE;
    if ((major >= 10 && major <= 11) || major >= 13) return FP8_ANY_LAYOUT;
    return FP8_TN_ONLY;
}

// ---- amax ---------------------------------------------------------------------------------------------

template <typename T>
__global__ void amax_kernel(float* amax, const T* x, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t top = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        top = amax_keep(top, fp8_abs_bits(to_float(x[i])));
    }
    amax_commit_warp(amax, top);
}

void cuda_amax(Backend* be, float* amax, const void* x, size_t n) {
    if (n == 0) return;
    unsigned grid = grid_for(n, 256, 8);
    if (be->dtype == DTYPE_BF16) LAUNCH(amax_kernel<bf16>, grid, 256, 0, cuda_stream(be), amax, (const bf16*)x, n);
    else LAUNCH(amax_kernel<float>, grid, 256, 0, cuda_stream(be), amax, (const float*)x, n);
    CUDA_CHECK_LAUNCH();
}

__global__ void amax_fold_kernel(float* acc, const float* amax, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && fp8_abs_bits(amax[i]) > fp8_abs_bits(acc[i])) acc[i] = amax[i];
}

void cuda_fp8_amax_fold(Backend* be, float* acc, const float* amax, size_t n) {
    if (n == 0) return;
    LAUNCH(amax_fold_kernel, (unsigned)ceil_div(n, 256), 256, 0, cuda_stream(be), acc, amax, n);
    CUDA_CHECK_LAUNCH();
}

// ---- the cast -----------------------------------------------------------------------------------------

__device__ inline uint8_t fp8_cast(float x, float s, bool e4m3) {
    return (uint8_t)__nv_cvt_float_to_fp8(__fmul_rn(x, s), __NV_SATFINITE, e4m3 ? __NV_E4M3 : __NV_E5M2);
}

// The scale every thread uses: *scale, or (current scaling) the one for
// *amax, which block 0's thread 0 also stores with its inverse.
__device__ inline float cast_scale(const float* amax, float* scale, float* scale_inv, bool e4m3) {
    if (!amax) return *scale;
    float s = fp8_scale_from_amax(*amax, fp8_max_value(e4m3));
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
        *scale = s;
        *scale_inv = 1.0f / s;
    }
    return s;
}

// Plain layout: n elements, V per thread and step.
template <typename T, int V>
__global__ void fp8_cast_kernel(uint8_t* q, const T* x, size_t n, const float* amax, float* scale, float* scale_inv,
                                bool e4m3) {
    float s = cast_scale(amax, scale, scale_inv, e4m3);
    size_t packs = n / V, stride = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t p = tid; p < packs; p += stride) {
        float v[V];
        load_pack<T, V>(v, x + p * V);
        UNROLL for (int i = 0; i < V; i++) q[p * V + i] = fp8_cast(v[i], s, e4m3);
    }
    size_t i = packs * V + tid;
    if (i < n) q[i] = fp8_cast(to_float(x[i]), s, e4m3);
}

// Both layouts from one read: a 32 x 32 tile of x goes through shared memory
// so that the transposed writes are as contiguous as the reads. Block (32, 8).
#define CAST_TILE 32
template <typename T>
__global__ void fp8_cast_transpose_kernel(uint8_t* q, uint8_t* qt, const T* x, int rows, int cols, const float* amax,
                                          float* scale, float* scale_inv, bool e4m3) {
    __shared__ uint8_t tile[CAST_TILE][CAST_TILE + 4];
    float s = cast_scale(amax, scale, scale_inv, e4m3);
    int r0 = blockIdx.y * CAST_TILE, c0 = blockIdx.x * CAST_TILE;
    int tx = threadIdx.x, ty = threadIdx.y;
    for (int r = ty; r < CAST_TILE; r += blockDim.y) {
        int gr = r0 + r, gc = c0 + tx;
        if (gr < rows && gc < cols) {
            uint8_t code = fp8_cast(to_float(x[(size_t)gr * cols + gc]), s, e4m3);
            tile[r][tx] = code;
            if (q) q[(size_t)gr * cols + gc] = code;
        }
    }
    __syncthreads();
    // qt (cols, rows): row c0 + r of qt holds column c0 + r of x.
    for (int r = ty; r < CAST_TILE; r += blockDim.y) {
        int gc = c0 + r, gr = r0 + tx;
        if (gc < cols && gr < rows) qt[(size_t)gc * rows + gr] = tile[tx][r];
    }
}

template <typename T>
static void fp8_quantize_typed(Backend* be, uint8_t* q, uint8_t* qt, const T* x, int rows, int cols,
                               const float* amax, float* scale, float* scale_inv, bool e4m3) {
    cudaStream_t st = cuda_stream(be);
    if (qt) {
        dim3 grid((unsigned)ceil_div((size_t)cols, CAST_TILE), grid_y(ceil_div((size_t)rows, CAST_TILE), "fp8 cast+transpose"));
        dim3 block(CAST_TILE, 8);
        LAUNCH(fp8_cast_transpose_kernel<T>, grid, block, 0, st, q, qt, x, rows, cols, amax, scale, scale_inv, e4m3);
    } else {
        size_t n = (size_t)rows * cols;
        const int V = Vec16<T>::N;
        if (aligned_to(x, 16)) {
            auto kernel = fp8_cast_kernel<T, V>;
            LAUNCH(kernel, grid_for(n, 256, V), 256, 0, st, q, x, n, amax, scale, scale_inv, e4m3);
        } else {
            auto kernel = fp8_cast_kernel<T, 1>;
            LAUNCH(kernel, grid_for(n, 256, 1), 256, 0, st, q, x, n, amax, scale, scale_inv, e4m3);
        }
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_fp8_quantize(Backend* be, void* q, void* qt, DType fmt, const void* x, int rows, int cols,
                       const float* amax, float* scale, float* scale_inv) {
    bool e4m3 = dtype_fp8_is_e4m3(fmt, "cuda");
    if (rows <= 0 || cols <= 0 || (!q && !qt)) return;
    if (be->dtype == DTYPE_BF16)
        fp8_quantize_typed(be, (uint8_t*)q, (uint8_t*)qt, (const bf16*)x, rows, cols, amax, scale, scale_inv, e4m3);
    else
        fp8_quantize_typed(be, (uint8_t*)q, (uint8_t*)qt, (const float*)x, rows, cols, amax, scale, scale_inv, e4m3);
}

// ---- delayed scaling ----------------------------------------------------------------------------------

__global__ void fp8_update_scales_kernel(float* scale, float* scale_inv, float* history, int len, size_t ld, int pos,
                                         size_t n, float max_value, int margin) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float* now = &history[(size_t)pos * ld + i];
    if (!(*now <= FLT_MAX)) *now = 0.0f;  // NaN or inf: no information
    float window = 0.0f;
    for (int j = 0; j < len; j++) {
        float a = history[(size_t)j * ld + i];
        window = a > window ? a : window;
    }
    float s = scale[i];
    if (fp8_delayed_scale(window, max_value, margin, &s)) {
        scale[i] = s;
        scale_inv[i] = 1.0f / s;
    }
}

void cuda_fp8_update_scales(Backend* be, float* scale, float* scale_inv, float* history, int len, size_t ld, int pos,
                            size_t n, DType fmt, int margin) {
    if (n == 0) return;
    float max_value = fp8_max_value(dtype_fp8_is_e4m3(fmt, "cuda"));
    LAUNCH(fp8_update_scales_kernel, (unsigned)ceil_div(n, 128), 128, 0, cuda_stream(be), scale, scale_inv, history,
           len, ld, pos, n, max_value, margin);
    CUDA_CHECK_LAUNCH();
}
