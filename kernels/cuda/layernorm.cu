// layernorm.cu: layernorm forward (alone, and fused with the residual add
// that precedes it) and backward on the device. As the CPU reference
// (kernels/cpu/layernorm.c): eps 1e-5, biased variance from a second pass
// over the centred values, mean and rstd saved in FP32.
//
// Forward: one warp per row; the row is read three times (sum, centred sum of
// squares, output), the second and third time from L1/L2.
// Backward: deterministic without atomics. Each block owns LN_BWD_ROWS
// consecutive rows: its warps first update dinp row by row, then all its
// threads (column packs x row slices) sum dw and db partials over those rows
// in a fixed order, and cuda_reduce_partials_add2 (reduce.cu) adds the
// blocks' partials in a fixed order into dw and db, both in one launch.
#include "kernels/cuda/cuda_backend.cuh"

#define LN_EPS 1e-5f
#define LN_FWD_THREADS 256
#define LN_BWD_THREADS 256
#define LN_BWD_ROWS 64

// ---- forward ---------------------------------------------------------------------------------------

// With FUSED, residual = a + b is written first (rounded to T) and normalised;
// residual may alias a (each element is read before the same thread writes it).
// amax (may be NULL): of out, as stored.
template <typename T, int V, bool FUSED>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, T* residual, const T* a,
                                         const T* b, const T* w, const T* bias, int N, int C, float* amax) {
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
    float sum = 0.0f;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V];
        load_pack<T, V>(v, x + c);
        UNROLL for (int k = 0; k < V; k++) sum += v[k];
    }
    float m = warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V];
        load_pack<T, V>(v, x + c);
        UNROLL for (int k = 0; k < V; k++) {
            float d = v[k] - m;
            var += d * d;
        }
    }
    float rs = 1.0f / sqrtf(warp_sum(var) / (float)C + LN_EPS);
    uint32_t top = 0;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V], vw[V], vb[V], o[V];
        load_pack<T, V>(v, x + c);
        load_pack<T, V>(vw, w + c);
        load_pack<T, V>(vb, bias + c);
        UNROLL for (int k = 0; k < V; k++) o[k] = (v[k] - m) * rs * vw[k] + vb[k];
        store_pack<T, V>(out + off + c, o);
        if (amax) top = amax_keep_pack<T, V>(top, o);
    }
    if (amax) amax_commit_warp(amax, top);  // the whole warp: rows are per warp
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

template <typename T, bool FUSED>
static void layernorm_forward_typed(Backend* be, T* out, float* mean, float* rstd, T* residual,
                                    const T* a, const T* b, const T* w, const T* bias, int N, int C,
                                    float* amax) {
    const int V = Vec16<T>::N;
    int vec = C % V == 0 && aligned_to(out, 16) && aligned_to(a, 16) && aligned_to(w, 16) &&
              aligned_to(bias, 16) && (!FUSED || (aligned_to(b, 16) && aligned_to(residual, 16)));
    int rows_per_block = LN_FWD_THREADS / WARP_SIZE;
    unsigned grid = (unsigned)ceil_div((size_t)N, (size_t)rows_per_block);
    if (vec) {
        auto kernel = layernorm_forward_kernel<T, V, FUSED>;
        LAUNCH(kernel, grid, LN_FWD_THREADS, 0, cuda_stream(be), out, mean, rstd, residual, a, b, w, bias, N, C,
               amax);
    } else {
        auto kernel = layernorm_forward_kernel<T, 1, FUSED>;
        LAUNCH(kernel, grid, LN_FWD_THREADS, 0, cuda_stream(be), out, mean, rstd, residual, a, b, w, bias, N, C,
               amax);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_layernorm_forward(Backend* be, void* out, float* mean, float* rstd, const void* inp,
                            const void* w, const void* b, int N, int C, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16)
        layernorm_forward_typed<bf16, false>(be, (bf16*)out, mean, rstd, NULL, (const bf16*)inp, NULL,
                                             (const bf16*)w, (const bf16*)b, N, C, amax);
    else
        layernorm_forward_typed<float, false>(be, (float*)out, mean, rstd, NULL, (const float*)inp, NULL,
                                              (const float*)w, (const float*)b, N, C, amax);
}

void cuda_residual_layernorm_forward(Backend* be, void* residual, void* out, float* mean,
                                     float* rstd, const void* a, const void* b, const void* w,
                                     const void* bias, int N, int C, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16)
        layernorm_forward_typed<bf16, true>(be, (bf16*)out, mean, rstd, (bf16*)residual, (const bf16*)a,
                                            (const bf16*)b, (const bf16*)w, (const bf16*)bias, N, C, amax);
    else
        layernorm_forward_typed<float, true>(be, (float*)out, mean, rstd, (float*)residual, (const float*)a,
                                             (const float*)b, (const float*)w, (const float*)bias, N, C, amax);
}

// ---- backward ---------------------------------------------------------------------------------------

// partial: (gridDim.x, 2, C) floats: this block's dw and db column sums.
// amax (may be NULL): of dinp after the addition, as stored.
template <typename T, int V>
__global__ void layernorm_backward_kernel(T* dinp, float* partial, const T* dout, const T* inp,
                                          const T* w, const float* mean, const float* rstd, int N, int C,
                                          float* amax) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int warps = blockDim.x / WARP_SIZE;
    int row0 = blockIdx.x * LN_BWD_ROWS;
    int rows = dmin(LN_BWD_ROWS, N - row0);

    // dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w.
    uint32_t top = 0;
    for (int r = warp; r < rows; r += warps) {
        size_t off = (size_t)(row0 + r) * C;
        float m = mean[row0 + r], rs = rstd[row0 + r];
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (int c = lane * V; c < C; c += WARP_SIZE * V) {
            float g[V], x[V], vw[V];
            load_pack<T, V>(g, dout + off + c);
            load_pack<T, V>(x, inp + off + c);
            load_pack<T, V>(vw, w + c);
            UNROLL for (int k = 0; k < V; k++) {
                float gw = g[k] * vw[k];
                sum_g += gw;
                sum_gx += gw * ((x[k] - m) * rs);
            }
        }
        float mean_g = warp_sum(sum_g) / (float)C;
        float mean_gx = warp_sum(sum_gx) / (float)C;
        for (int c = lane * V; c < C; c += WARP_SIZE * V) {
            float g[V], x[V], vw[V], d[V];
            load_pack<T, V>(g, dout + off + c);
            load_pack<T, V>(x, inp + off + c);
            load_pack<T, V>(vw, w + c);
            load_pack<T, V>(d, dinp + off + c);
            UNROLL for (int k = 0; k < V; k++) {
                float xhat = (x[k] - m) * rs;
                d[k] += (g[k] * vw[k] - mean_g - xhat * mean_gx) * rs;
            }
            store_pack<T, V>(dinp + off + c, d);
            if (amax) top = amax_keep_pack<T, V>(top, d);
        }
    }
    if (amax) amax_commit_warp(amax, top);  // every warp of the block gets here

    // Column partials of dw = sum dout * xhat and db = sum dout over the rows.
    // Every thread takes part: the block is P column packs x S row slices
    // (blockDim = P * S, see ln_bwd_threads); slice s sums rows s, s + S, ...
    // in order, then the slices are added in order through shared memory.
    // With more packs than threads (P > blockDim, S = 1) a thread takes packs
    // p, p + blockDim, ...
    extern __shared__ float ln_slices[];  // [S][2C] when S > 1
    int P = C / V, fits = P <= (int)blockDim.x;
    int S = fits ? (int)blockDim.x / P : 1, s = fits ? (int)threadIdx.x / P : 0;
    float* pw = partial + (size_t)blockIdx.x * 2 * C;  // then db's C partials
    for (int pk = fits ? (int)threadIdx.x % P : (int)threadIdx.x; s < S && pk < P; pk += blockDim.x) {
        int c = pk * V;
        float acc_w[V], acc_b[V];
        UNROLL for (int k = 0; k < V; k++) acc_w[k] = acc_b[k] = 0.0f;
        for (int r = s; r < rows; r += S) {
            size_t off = (size_t)(row0 + r) * C;
            float m = mean[row0 + r], rs = rstd[row0 + r];
            float g[V], x[V];
            load_pack<T, V>(g, dout + off + c);
            load_pack<T, V>(x, inp + off + c);
            UNROLL for (int k = 0; k < V; k++) {
                acc_w[k] += g[k] * ((x[k] - m) * rs);
                acc_b[k] += g[k];
            }
        }
        float* dst_w = S > 1 ? ln_slices + (size_t)s * 2 * C : pw;
        float* dst_b = dst_w + C;
        UNROLL for (int k = 0; k < V; k++) {
            dst_w[c + k] = acc_w[k];
            dst_b[c + k] = acc_b[k];
        }
    }
    if (S > 1) {
        __syncthreads();
        for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) {
            float total = 0.0f;
            for (int k = 0; k < S; k++) total += ln_slices[(size_t)k * 2 * C + j];
            pw[j] = total;
        }
    }
}

// Threads of a backward block: P = C / V column packs times S = 256 / P row
// slices when P <= 256 (every thread has a pack in the column phase), else P
// up to 1024, else 1024; rounded up to whole warps (the row phase's warp sums
// need full warps; the few extra threads idle in the column phase).
static int ln_bwd_threads(int P) {
    int t = P <= LN_BWD_THREADS ? P * (LN_BWD_THREADS / P) : P <= 1024 ? P : 1024;
    return (t + WARP_SIZE - 1) / WARP_SIZE * WARP_SIZE;
}

// The backward's per-block dw and db column sums.
size_t cuda_layernorm_scratch_bytes(int N, int C) { return ceil_div((size_t)N, LN_BWD_ROWS) * 2 * C * sizeof(float); }

template <typename T>
static void layernorm_backward_typed(Backend* be, T* dinp, T* dw, T* db, const T* dout, const T* inp,
                                     const T* w, const float* mean, const float* rstd, int N, int C,
                                     float* amax) {
    const int V = Vec16<T>::N;
    cudaStream_t st = cuda_stream(be);
    int blocks = (int)ceil_div((size_t)N, LN_BWD_ROWS);
    float* partial = (float*)cuda_scratch(be, cuda_layernorm_scratch_bytes(N, C));
    int vec = C % V == 0 && aligned_to(dinp, 16) && aligned_to(dout, 16) && aligned_to(inp, 16) &&
              aligned_to(w, 16);
    int P = vec ? C / V : C, threads = ln_bwd_threads(P);
    int S = P <= threads ? threads / P : 1;
    size_t smem = S > 1 ? (size_t)S * 2 * C * sizeof(float) : 0;
    if (vec) {
        auto kernel = layernorm_backward_kernel<T, V>;
        LAUNCH(kernel, blocks, threads, smem, st, dinp, partial, dout, inp, w, mean, rstd, N, C, amax);
    } else {
        auto kernel = layernorm_backward_kernel<T, 1>;
        LAUNCH(kernel, blocks, threads, smem, st, dinp, partial, dout, inp, w, mean, rstd, N, C, amax);
    }
    CUDA_CHECK_LAUNCH();
    cuda_reduce_partials_add2(be, dw, db, partial, blocks, 2 * (size_t)C, C);
}

void cuda_layernorm_backward(Backend* be, void* dinp, void* dw, void* db, const void* dout,
                             const void* inp, const void* w, const float* mean, const float* rstd,
                             int N, int C, float* amax) {
    if (N <= 0 || C <= 0) return;
    if (be->dtype == DTYPE_BF16)
        layernorm_backward_typed(be, (bf16*)dinp, (bf16*)dw, (bf16*)db, (const bf16*)dout, (const bf16*)inp,
                                 (const bf16*)w, mean, rstd, N, C, amax);
    else
        layernorm_backward_typed(be, (float*)dinp, (float*)dw, (float*)db, (const float*)dout, (const float*)inp,
                                 (const float*)w, mean, rstd, N, C, amax);
}
