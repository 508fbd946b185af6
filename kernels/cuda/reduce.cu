// reduce.cu: deterministic reductions on the device: whole-buffer sums (the
// loss sum, the squared gradient norm) and column sums (bias gradients).
//
// Every reduction has a fixed shape that depends only on the sizes: a first
// kernel with a grid computed from n writes per-block partials, a second adds
// them in a fixed tree. No float atomics, so the bits never depend on timing.
// Whole-buffer sums accumulate in double, as the CPU reference does.
#include "kernels/cuda/cuda_backend.cuh"

#define SUM_THREADS 256
#define SUM_MAX_BLOCKS 1024
#define COLSUM_ROWS 128
#define COLSUM_THREADS 256

// ---- whole-buffer sums -------------------------------------------------------------------------------

// Tree sum of one double per thread in shared memory (blockDim.x a power of
// two, at most 1024); thread 0 gets the total.
__device__ inline double block_sum_double(double v, double* s) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    return s[0];
}

template <typename T, int V, bool SQUARES>
__global__ void sum_partial_kernel(double* partial, const T* x, size_t n) {
    __shared__ double s[SUM_THREADS];
    size_t packs = n / V, stride = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    double acc = 0.0;
    for (size_t p = tid; p < packs; p += stride) {
        float v[V];
        load_pack<T, V>(v, x + p * V);
        UNROLL for (int k = 0; k < V; k++) acc += SQUARES ? (double)v[k] * (double)v[k] : (double)v[k];
    }
    size_t i = packs * V + tid;
    if (i < n) {
        double v = (double)to_float(x[i]);
        acc += SQUARES ? v * v : v;
    }
    double total = block_sum_double(acc, s);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void sum_finish_kernel(float* out, const double* partial, int blocks, int accumulate) {
    __shared__ double s[SUM_MAX_BLOCKS];
    double v = (int)threadIdx.x < blocks ? partial[threadIdx.x] : 0.0;
    double total = block_sum_double(v, s);
    if (threadIdx.x == 0) *out = accumulate ? (float)((double)*out + total) : (float)total;
}

// The sums' per-block partials, or a column sum's over (N, C).
size_t cuda_reduce_scratch_bytes(int N, int C) {
    size_t sums = SUM_MAX_BLOCKS * sizeof(double), columns = ceil_div((size_t)N, COLSUM_ROWS) * C * sizeof(float);
    return sums > columns ? sums : columns;
}

template <typename T, bool SQUARES>
static void sum_typed(Backend* be, float* out, const T* x, size_t n, int accumulate) {
    cudaStream_t st = cuda_stream(be);
    const int V = Vec16<T>::N;
    int vec = aligned_to(x, 16);
    size_t per_block = (size_t)SUM_THREADS * (vec ? V : 1) * 4;
    int blocks = (int)ceil_div(n ? n : 1, per_block);
    if (blocks > SUM_MAX_BLOCKS) blocks = SUM_MAX_BLOCKS;
    double* partial = (double*)cuda_scratch(be, cuda_reduce_scratch_bytes(0, 0));
    if (vec) {
        auto kernel = sum_partial_kernel<T, V, SQUARES>;
        LAUNCH(kernel, blocks, SUM_THREADS, 0, st, partial, x, n);
    } else {
        auto kernel = sum_partial_kernel<T, 1, SQUARES>;
        LAUNCH(kernel, blocks, SUM_THREADS, 0, st, partial, x, n);
    }
    CUDA_CHECK_LAUNCH();
    LAUNCH(sum_finish_kernel, 1, SUM_MAX_BLOCKS, 0, st, out, (const double*)partial, blocks, accumulate);
    CUDA_CHECK_LAUNCH();
}

void cuda_sum(Backend* be, float* out, const float* x, size_t n, int accumulate) {
    sum_typed<float, false>(be, out, x, n, accumulate);
}

void cuda_sum_squares(Backend* be, float* out, const void* x, size_t n, int accumulate) {
    if (be->dtype == DTYPE_BF16) sum_typed<bf16, true>(be, out, (const bf16*)x, n, accumulate);
    else sum_typed<float, true>(be, out, (const float*)x, n, accumulate);
}

void cuda_sum_squares_f32(Backend* be, float* out, const float* x, size_t n, int accumulate) {
    sum_typed<float, true>(be, out, x, n, accumulate);
}

// acc[i] += x[i] (--grad-dtype fp32), or the BF16 accumulator emulated in
// FP32 storage: acc[i] = bf16(acc[i] + bf16(x[i])), round to nearest even.
template <typename T>
__global__ void accumulate_f32_kernel(float* acc, const T* x, size_t n, int round) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = to_float(x[i]);
        acc[i] = round ? __bfloat162float(__float2bfloat16(acc[i] + __bfloat162float(__float2bfloat16(v))))
                       : acc[i] + v;
    }
}

void cuda_accumulate_f32(Backend* be, float* acc, const void* x, size_t n, int round_bf16) {
    if (n == 0) return;
    unsigned grid = grid_for(n, 256, 1);
    if (be->dtype == DTYPE_BF16)
        LAUNCH(accumulate_f32_kernel<bf16>, grid, 256, 0, cuda_stream(be), acc, (const bf16*)x, n, round_bf16);
    else
        LAUNCH(accumulate_f32_kernel<float>, grid, 256, 0, cuda_stream(be), acc, (const float*)x, n, round_bf16);
    CUDA_CHECK_LAUNCH();
}

// ---- column sums -----------------------------------------------------------------------------------------

// Block (32, 32): threadIdx.x picks one of 32 columns, threadIdx.y one of 32
// slices of the partial rows (b = y, y + 32, ...); the slices are then added
// in order. Coalesced: a warp reads 32 consecutive columns of one row.
template <typename T>
__global__ void reduce_partials_kernel(T* out, const float* partial, int blocks, size_t stride, int C) {
    __shared__ float s[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C) {
        for (int b = threadIdx.y; b < blocks; b += 32) acc += partial[(size_t)b * stride + c];
    }
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float total = 0.0f;
        for (int k = 0; k < 32; k++) total += s[k][threadIdx.x];
        out[c] = from_float<T>(to_float(out[c]) + total);
    }
}

void cuda_reduce_partials_add(Backend* be, void* out, const float* partial, int blocks, size_t stride, int C) {
    dim3 block(32, 32);
    unsigned grid = (unsigned)ceil_div((size_t)C, 32);
    if (be->dtype == DTYPE_BF16) {
        auto kernel = reduce_partials_kernel<bf16>;
        LAUNCH(kernel, grid, block, 0, cuda_stream(be), (bf16*)out, partial, blocks, stride, C);
    } else {
        auto kernel = reduce_partials_kernel<float>;
        LAUNCH(kernel, grid, block, 0, cuda_stream(be), (float*)out, partial, blocks, stride, C);
    }
    CUDA_CHECK_LAUNCH();
}

// partial[blockIdx.x][c] = sum of x[r][c] over this block's COLSUM_ROWS rows, in row order.
template <typename T, int V>
__global__ void column_sum_partial_kernel(float* partial, const T* x, int N, int C) {
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c >= C) return;
    int row0 = blockIdx.x * COLSUM_ROWS, rows = dmin(COLSUM_ROWS, N - row0);
    float acc[V];
    UNROLL for (int k = 0; k < V; k++) acc[k] = 0.0f;
    for (int r = 0; r < rows; r++) {
        float v[V];
        load_pack<T, V>(v, x + (size_t)(row0 + r) * C + c);
        UNROLL for (int k = 0; k < V; k++) acc[k] += v[k];
    }
    UNROLL for (int k = 0; k < V; k++) partial[(size_t)blockIdx.x * C + c + k] = acc[k];
}

template <typename T>
static void column_sum_typed(Backend* be, void* out, const T* x, int N, int C) {
    const int V = Vec16<T>::N;
    int blocks = (int)ceil_div((size_t)N, COLSUM_ROWS);
    float* partial = (float*)cuda_scratch(be, cuda_reduce_scratch_bytes(N, C));
    if (C % V == 0 && aligned_to(x, 16)) {
        dim3 grid(blocks, (unsigned)ceil_div((size_t)C / V, COLSUM_THREADS));
        auto kernel = column_sum_partial_kernel<T, V>;
        LAUNCH(kernel, grid, COLSUM_THREADS, 0, cuda_stream(be), partial, x, N, C);
    } else {
        dim3 grid(blocks, (unsigned)ceil_div((size_t)C, COLSUM_THREADS));
        auto kernel = column_sum_partial_kernel<T, 1>;
        LAUNCH(kernel, grid, COLSUM_THREADS, 0, cuda_stream(be), partial, x, N, C);
    }
    CUDA_CHECK_LAUNCH();
    cuda_reduce_partials_add(be, out, partial, blocks, (size_t)C, C);
}

void cuda_column_sum_add(Backend* be, void* out, const void* x, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16) column_sum_typed(be, out, (const bf16*)x, N, C);
    else column_sum_typed(be, out, (const float*)x, N, C);
}
