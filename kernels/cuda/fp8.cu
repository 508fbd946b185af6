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

// V elements per load (16 bytes, or 1 where x is not 16-byte aligned), the
// last n % V one by one.
template <typename T, int V>
__global__ void amax_kernel(float* amax, const T* x, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t packs = n / V;
    uint32_t top = 0;
    for (size_t p = tid; p < packs; p += stride) {
        float v[V];
        load_pack<T, V>(v, x + p * V);
        UNROLL for (int i = 0; i < V; i++) top = amax_keep(top, fp8_abs_bits(v[i]));
    }
    for (size_t i = packs * V + tid; i < n; i += stride) top = amax_keep(top, fp8_abs_bits(to_float(x[i])));
    amax_commit_warp(amax, top);
}

template <typename T>
static void amax_typed(Backend* be, float* amax, const T* x, size_t n) {
    const int V = Vec16<T>::N;
    auto wide = amax_kernel<T, V>;
    auto narrow = amax_kernel<T, 1>;
    if (aligned_to(x, 16)) LAUNCH(wide, grid_for(n, 256, 4 * V), 256, 0, cuda_stream(be), amax, x, n);
    else LAUNCH(narrow, grid_for(n, 256, 8), 256, 0, cuda_stream(be), amax, x, n);
}

void cuda_amax(Backend* be, float* amax, const void* x, size_t n) {
    if (n == 0) return;
    if (be->dtype == DTYPE_BF16) amax_typed(be, amax, (const bf16*)x, n);
    else amax_typed(be, amax, (const float*)x, n);
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

// 16 consecutive elements of x as floats (16 / Vec16 aligned 16-byte loads).
template <typename T>
__device__ inline void load16(float v[16], const T* x) {
    const int V = Vec16<T>::N;
    UNROLL for (int i = 0; i < 16; i += V) load_pack<T, V>(v + i, x + i);
}

// The codes of 16 values, as one 16-byte pack.
__device__ inline Pack<uint8_t, 16> cast16(const float v[16], float s, bool e4m3) {
    Pack<uint8_t, 16> c;
    UNROLL for (int i = 0; i < 16; i++) c.v[i] = fp8_cast(v[i], s, e4m3);
    return c;
}

// Plain layout, x and q 16-byte aligned: 16 elements per thread and step (one
// 16-byte store of codes), the last n % 16 one by one.
template <typename T>
__global__ void fp8_cast16_kernel(uint8_t* q, const T* x, size_t n, const float* amax, float* scale, float* scale_inv,
                                  bool e4m3) {
    float s = cast_scale(amax, scale, scale_inv, e4m3);
    size_t packs = n / 16, stride = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t p = tid; p < packs; p += stride) {
        float v[16];
        load16<T>(v, x + p * 16);
        *reinterpret_cast<Pack<uint8_t, 16>*>(q + p * 16) = cast16(v, s, e4m3);
    }
    for (size_t i = packs * 16 + tid; i < n; i += stride) q[i] = fp8_cast(to_float(x[i]), s, e4m3);
}

// Plain layout, any alignment: one element per thread and step.
template <typename T>
__global__ void fp8_cast_kernel(uint8_t* q, const T* x, size_t n, const float* amax, float* scale, float* scale_inv,
                                bool e4m3) {
    float s = cast_scale(amax, scale, scale_inv, e4m3);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        q[i] = fp8_cast(to_float(x[i]), s, e4m3);
}

// Both layouts, 16-byte loads and stores: rows and cols multiples of 16, every
// buffer 16-byte aligned. Block 256 threads, a 64 x 64 tile: thread t casts 16
// elements of tile row t / 4 (its 16 codes go to q and the tile in one store
// each), then gathers 16 codes of tile column t / 4 for one 16-byte store into
// qt. Tile rows are a grid-stride loop (gridDim.y may be capped).
#define CAST_TILE16 64
template <typename T>
__global__ void fp8_cast_transpose16_kernel(uint8_t* q, uint8_t* qt, const T* x, int rows, int cols,
                                            const float* amax, float* scale, float* scale_inv, bool e4m3) {
    __shared__ __align__(16) uint8_t tile[CAST_TILE16][CAST_TILE16 + 16];
    float s = cast_scale(amax, scale, scale_inv, e4m3);
    int c0 = blockIdx.x * CAST_TILE16, t = threadIdx.x;
    for (int r0 = blockIdx.y * CAST_TILE16; r0 < rows; r0 += gridDim.y * CAST_TILE16) {
        int r = t / 4, c = (t % 4) * 16, gr = r0 + r, gc = c0 + c;
        __syncthreads();  // the previous tile's gathers are done
        if (gr < rows && gc < cols) {  // cols % 16 == 0: a chunk is all in or all out
            float v[16];
            load16<T>(v, x + (size_t)gr * cols + gc);
            Pack<uint8_t, 16> code = cast16(v, s, e4m3);
            *reinterpret_cast<Pack<uint8_t, 16>*>(&tile[r][c]) = code;
            if (q) *reinterpret_cast<Pack<uint8_t, 16>*>(q + (size_t)gr * cols + gc) = code;
        }
        __syncthreads();
        // qt (cols, rows): row c0 + cc holds column c0 + cc of x; this thread's
        // 16 bytes are rows r0 + rr .. r0 + rr + 15 of it.
        int cc = t / 4, rr = (t % 4) * 16, qr = c0 + cc, qc = r0 + rr;
        if (qr < cols && qc < rows) {
            Pack<uint8_t, 16> p;
            UNROLL for (int i = 0; i < 16; i++) p.v[i] = tile[rr + i][cc];
            *reinterpret_cast<Pack<uint8_t, 16>*>(qt + (size_t)qr * rows + qc) = p;
        }
    }
}

// Both layouts from one read, any shape and alignment: a 32 x 32 tile of x goes
// through shared memory so that the transposed writes are as contiguous as the
// reads (byte stores). Block (32, 8).
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
    size_t n = (size_t)rows * cols;
    bool aligned = aligned_to(x, 16) && (!q || aligned_to(q, 16)) && (!qt || aligned_to(qt, 16));
    if (qt && aligned && rows % 16 == 0 && cols % 16 == 0) {
        size_t tiles_y = ceil_div((size_t)rows, CAST_TILE16);
        dim3 grid((unsigned)ceil_div((size_t)cols, CAST_TILE16), (unsigned)(tiles_y < 65535 ? tiles_y : 65535));
        LAUNCH(fp8_cast_transpose16_kernel<T>, grid, 256, 0, st, q, qt, x, rows, cols, amax, scale, scale_inv, e4m3);
    } else if (qt) {
        dim3 grid((unsigned)ceil_div((size_t)cols, CAST_TILE), grid_y(ceil_div((size_t)rows, CAST_TILE), "fp8 cast+transpose"));
        dim3 block(CAST_TILE, 8);
        LAUNCH(fp8_cast_transpose_kernel<T>, grid, block, 0, st, q, qt, x, rows, cols, amax, scale, scale_inv, e4m3);
    } else if (aligned) {
        LAUNCH(fp8_cast16_kernel<T>, grid_for(n, 256, 16), 256, 0, st, q, x, n, amax, scale, scale_inv, e4m3);
    } else {
        LAUNCH(fp8_cast_kernel<T>, grid_for(n, 256, 1), 256, 0, st, q, x, n, amax, scale, scale_inv, e4m3);
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
