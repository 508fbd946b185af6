// rmsnorm.cu: RMSNorm (Llama's normalisation) forward, alone and fused with
// the residual add that precedes it, and backward on the device. As the CPU
// reference (kernels/cpu/rmsnorm.c): out = x * rstd * w, rstd =
// 1 / sqrt(mean(x^2) + eps) saved in FP32; no mean, no bias.
//
// Forward: one warp per row (the row is read twice, the second time from
// L1/L2). Backward: deterministic without atomics, as layernorm.cu: each
// block owns RMS_BWD_ROWS consecutive rows, its warps update dinp row by row,
// then its threads sum dw partials over those rows in row order, and
// cuda_reduce_partials_add adds the blocks' partials in a fixed order.
#include "kernels/cuda/cuda_backend.cuh"

#define RMS_FWD_THREADS 256
#define RMS_BWD_THREADS 256
#define RMS_BWD_ROWS 64

// With FUSED, residual = a + b is written first (rounded to T) and normalised;
// residual may alias a (each element is read before the same thread writes it).
// amax (may be NULL): of out, as stored.
template <typename T, int V, bool FUSED>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, T* residual, const T* a, const T* b, const T* w,
                                       int N, int C, float eps, float* amax) {
    int lane = threadIdx.x % WARP_SIZE;
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    const T* x = a + off;
    if (FUSED) {
        for (int c = lane * V; c < C; c += WARP_SIZE * V) {
            float va[V], vb[V], r[V];
            load_pack<T, V>(va, a + off + c);
            load_pack<T, V>(vb, b + off + c);
            UNROLL for (int k = 0; k < V; k++) r[k] = va[k] + vb[k];
            store_pack<T, V>(residual + off + c, r);
        }
        x = residual + off;  // the rounded values, as backward will see them
    }
    float ss = 0.0f;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V];
        load_pack<T, V>(v, x + c);
        UNROLL for (int k = 0; k < V; k++) ss += v[k] * v[k];
    }
    float rs = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    uint32_t top = 0;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V], vw[V], o[V];
        load_pack<T, V>(v, x + c);
        load_pack<T, V>(vw, w + c);
        UNROLL for (int k = 0; k < V; k++) o[k] = v[k] * rs * vw[k];
        store_pack<T, V>(out + off + c, o);
        if (amax) top = amax_keep_pack<T, V>(top, o);
    }
    if (amax) amax_commit_warp(amax, top);  // the whole warp: rows are per warp
    if (lane == 0) rstd[row] = rs;
}

template <typename T, bool FUSED>
static void rmsnorm_forward_typed(Backend* be, T* out, float* rstd, T* residual, const T* a, const T* b, const T* w,
                                  int N, int C, float eps, float* amax) {
    const int V = Vec16<T>::N;
    int vec = C % V == 0 && aligned_to(out, 16) && aligned_to(a, 16) && aligned_to(w, 16) &&
              (!FUSED || (aligned_to(b, 16) && aligned_to(residual, 16)));
    int rows_per_block = RMS_FWD_THREADS / WARP_SIZE;
    unsigned grid = (unsigned)ceil_div((size_t)N, (size_t)rows_per_block);
    if (vec) {
        auto kernel = rmsnorm_forward_kernel<T, V, FUSED>;
        LAUNCH(kernel, grid, RMS_FWD_THREADS, 0, cuda_stream(be), out, rstd, residual, a, b, w, N, C, eps, amax);
    } else {
        auto kernel = rmsnorm_forward_kernel<T, 1, FUSED>;
        LAUNCH(kernel, grid, RMS_FWD_THREADS, 0, cuda_stream(be), out, rstd, residual, a, b, w, N, C, eps, amax);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_rmsnorm_forward(Backend* be, void* out, float* rstd, const void* inp, const void* w, int N, int C,
                          float eps, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16)
        rmsnorm_forward_typed<bf16, false>(be, (bf16*)out, rstd, NULL, (const bf16*)inp, NULL, (const bf16*)w, N, C,
                                           eps, amax);
    else
        rmsnorm_forward_typed<float, false>(be, (float*)out, rstd, NULL, (const float*)inp, NULL, (const float*)w, N,
                                            C, eps, amax);
}

void cuda_residual_rmsnorm_forward(Backend* be, void* residual, void* out, float* rstd, const void* a, const void* b,
                                   const void* w, int N, int C, float eps, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16)
        rmsnorm_forward_typed<bf16, true>(be, (bf16*)out, rstd, (bf16*)residual, (const bf16*)a, (const bf16*)b,
                                          (const bf16*)w, N, C, eps, amax);
    else
        rmsnorm_forward_typed<float, true>(be, (float*)out, rstd, (float*)residual, (const float*)a,
                                           (const float*)b, (const float*)w, N, C, eps, amax);
}

// partial: (gridDim.x, C) floats: this block's dw column sums.
// amax (may be NULL): of dinp after the addition, as stored.
template <typename T, int V>
__global__ void rmsnorm_backward_kernel(T* dinp, float* partial, const T* dout, const T* inp, const T* w,
                                        const float* rstd, int N, int C, float* amax) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int warps = blockDim.x / WARP_SIZE;
    int row0 = blockIdx.x * RMS_BWD_ROWS;
    int rows = dmin(RMS_BWD_ROWS, N - row0);

    // dinp += rstd * (g - xhat * mean(g * xhat)), g = dout * w, xhat = x * rstd.
    uint32_t top = 0;
    for (int r = warp; r < rows; r += warps) {
        size_t off = (size_t)(row0 + r) * C;
        float rs = rstd[row0 + r];
        float sum_gx = 0.0f;
        for (int c = lane * V; c < C; c += WARP_SIZE * V) {
            float g[V], x[V], vw[V];
            load_pack<T, V>(g, dout + off + c);
            load_pack<T, V>(x, inp + off + c);
            load_pack<T, V>(vw, w + c);
            UNROLL for (int k = 0; k < V; k++) sum_gx += g[k] * vw[k] * (x[k] * rs);
        }
        float mean_gx = warp_sum(sum_gx) / (float)C;
        for (int c = lane * V; c < C; c += WARP_SIZE * V) {
            float g[V], x[V], vw[V], d[V];
            load_pack<T, V>(g, dout + off + c);
            load_pack<T, V>(x, inp + off + c);
            load_pack<T, V>(vw, w + c);
            load_pack<T, V>(d, dinp + off + c);
            UNROLL for (int k = 0; k < V; k++) d[k] += (g[k] * vw[k] - (x[k] * rs) * mean_gx) * rs;
            store_pack<T, V>(dinp + off + c, d);
            if (amax) top = amax_keep_pack<T, V>(top, d);
        }
    }
    if (amax) amax_commit_warp(amax, top);  // every warp of the block gets here

    // Column partials of dw = sum dout * xhat over the rows, in row order.
    float* pw = partial + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
        float acc[V];
        UNROLL for (int k = 0; k < V; k++) acc[k] = 0.0f;
        for (int r = 0; r < rows; r++) {
            size_t off = (size_t)(row0 + r) * C;
            float rs = rstd[row0 + r];
            float g[V], x[V];
            load_pack<T, V>(g, dout + off + c);
            load_pack<T, V>(x, inp + off + c);
            UNROLL for (int k = 0; k < V; k++) acc[k] += g[k] * (x[k] * rs);
        }
        UNROLL for (int k = 0; k < V; k++) pw[c + k] = acc[k];
    }
}

template <typename T>
static void rmsnorm_backward_typed(Backend* be, T* dinp, T* dw, const T* dout, const T* inp, const T* w,
                                   const float* rstd, int N, int C, float* amax) {
    const int V = Vec16<T>::N;
    cudaStream_t st = cuda_stream(be);
    int blocks = (int)ceil_div((size_t)N, RMS_BWD_ROWS);
    float* partial = (float*)cuda_scratch(be, (size_t)blocks * C * sizeof(float));
    int vec = C % V == 0 && aligned_to(dinp, 16) && aligned_to(dout, 16) && aligned_to(inp, 16) &&
              aligned_to(w, 16);
    if (vec) {
        auto kernel = rmsnorm_backward_kernel<T, V>;
        LAUNCH(kernel, blocks, RMS_BWD_THREADS, 0, st, dinp, partial, dout, inp, w, rstd, N, C, amax);
    } else {
        auto kernel = rmsnorm_backward_kernel<T, 1>;
        LAUNCH(kernel, blocks, RMS_BWD_THREADS, 0, st, dinp, partial, dout, inp, w, rstd, N, C, amax);
    }
    CUDA_CHECK_LAUNCH();
    cuda_reduce_partials_add(be, dw, partial, blocks, (size_t)C, C);
}

void cuda_rmsnorm_backward(Backend* be, void* dinp, void* dw, const void* dout, const void* inp, const void* w,
                           const float* rstd, int N, int C, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16)
        rmsnorm_backward_typed(be, (bf16*)dinp, (bf16*)dw, (const bf16*)dout, (const bf16*)inp, (const bf16*)w,
                               rstd, N, C, amax);
    else
        rmsnorm_backward_typed(be, (float*)dinp, (float*)dw, (const float*)dout, (const float*)inp,
                               (const float*)w, rstd, N, C, amax);
}
