// norm.cuh: the kernels layernorm.cu and rmsnorm.cu share. One template per
// direction with LN = true for layernorm (mean subtracted, bias, db) and
// LN = false for RMSNorm (mean 0, no bias, no db): the two norms differ only
// there, so they are one piece of code.
//
// Forward: one warp per row, the row read two (RMSNorm) or three (layernorm)
// times, the later passes from L1/L2.
//
// Backward: ONE launch, deterministic, every thread of the row phase busy.
//  - A row is handled by a group of G warps; thread t of the group holds the
//    16-byte packs t, t + 32G, ... (J packs at most NORM_BWD_FLOATS floats per
//    lane), so G and J are chosen (norm_bwd_shape) to give every lane of the
//    group a pack: at C = 768 in BF16, 96 packs = 3 warps x 1 pack; at C = 4096,
//    512 packs = 8 warps x 2 packs. The row's dout, x and w stay in registers
//    between the row sums and the dinp update (one read of each). Rows wider
//    than 16 warps hold (8192 columns) take a slower wide variant (below).
//  - A block holds `groups` such groups; block b's group q takes rows
//    b * groups + q, then that plus gridDim.x * groups, ...: a fixed set of
//    rows for a given grid. dw (and db) partials accumulate in registers
//    over those rows, in row order.
//  - At the end the block adds its groups' partials in group order into its
//    row of `partial` (scratch), takes a ticket (atomicInc on a counter that
//    the backend keeps zeroed; the last ticket wraps it back to 0), and the
//    block holding the last ticket adds all blocks' rows in block order into
//    dw (and db). Whichever block finishes last, the order of every addition
//    is the same: bit-identical results run to run for a given grid, which
//    depends only on N, C, the dtype and the GPU's SM count.
#pragma once

#include "kernels/cuda/cuda_backend.cuh"

#define NORM_FWD_THREADS 256
// Floats of each per-lane register array of the backward (dout, x, w, dw and
// db accumulators): 5 x 16 = 80 registers of data, room for two blocks of 256
// threads per SM.
#define NORM_BWD_FLOATS 16
// Warps of a block when a row needs fewer (groups of G warps fill it).
#define NORM_BWD_WARPS 8
// The most warps a row takes (512 threads; at most 128 registers each).
#define NORM_BWD_MAX_WARPS 16
// Blocks per SM of the backward's grid: enough bytes in flight per SM, few
// partial rows for the last block to add.
#define NORM_BWD_BLOCKS_PER_SM 2

// ---- forward ---------------------------------------------------------------------------------------

// With FUSED, residual = a + b is written first (rounded to T) and normalised;
// residual may alias a (each element is read before the same thread writes it).
// LN: mean (N) written, bias added; otherwise mean and bias are unused (NULL).
// amax (may be NULL): of out, as stored.
template <typename T, int V, bool LN, bool FUSED>
__global__ void norm_forward_kernel(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b,
                                    const T* w, const T* bias, int N, int C, float eps, float* amax) {
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
    // m = 0 for RMSNorm: v - 0 is v exactly, so the passes below are RMSNorm's.
    float m = 0.0f;
    if (LN) {
        float sum = 0.0f;
        for (int c = lane * V; c < C; c += WARP_SIZE * V) {
            float v[V];
            load_pack<T, V>(v, x + c);
            UNROLL for (int k = 0; k < V; k++) sum += v[k];
        }
        m = warp_sum(sum) / (float)C;
    }
    // Layernorm: the centred second pass avoids E[x^2] - E[x]^2's cancellation.
    float var = 0.0f;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V];
        load_pack<T, V>(v, x + c);
        UNROLL for (int k = 0; k < V; k++) {
            float d = v[k] - m;
            var += d * d;
        }
    }
    float rs = 1.0f / sqrtf(warp_sum(var) / (float)C + eps);
    uint32_t top = 0;
    for (int c = lane * V; c < C; c += WARP_SIZE * V) {
        float v[V], vw[V], vb[V], o[V];
        load_pack<T, V>(v, x + c);
        load_pack<T, V>(vw, w + c);
        if (LN) load_pack<T, V>(vb, bias + c);
        UNROLL for (int k = 0; k < V; k++) o[k] = LN ? (v[k] - m) * rs * vw[k] + vb[k] : v[k] * rs * vw[k];
        store_pack<T, V>(out + off + c, o);
        if (amax) top = amax_keep_pack<T, V>(top, o);
    }
    if (amax) amax_commit_warp(amax, top);  // the whole warp: rows are per warp
    if (lane == 0) {
        if (LN) mean[row] = m;
        rstd[row] = rs;
    }
}

template <typename T, bool LN, bool FUSED>
static void norm_forward(Backend* be, T* out, float* mean, float* rstd, T* residual, const T* a, const T* b,
                         const T* w, const T* bias, int N, int C, float eps, float* amax) {
    if (N <= 0 || C <= 0) return;
    const int V = Vec16<T>::N;
    int vec = C % V == 0 && aligned_to(out, 16) && aligned_to(a, 16) && aligned_to(w, 16) &&
              (!LN || aligned_to(bias, 16)) && (!FUSED || (aligned_to(b, 16) && aligned_to(residual, 16)));
    unsigned grid = (unsigned)ceil_div((size_t)N, (size_t)(NORM_FWD_THREADS / WARP_SIZE));
    if (vec) {
        auto kernel = norm_forward_kernel<T, V, LN, FUSED>;
        LAUNCH(kernel, grid, NORM_FWD_THREADS, 0, cuda_stream(be), out, mean, rstd, residual, a, b, w, bias, N, C,
               eps, amax);
    } else {
        auto kernel = norm_forward_kernel<T, 1, LN, FUSED>;
        LAUNCH(kernel, grid, NORM_FWD_THREADS, 0, cuda_stream(be), out, mean, rstd, residual, a, b, w, bias, N, C,
               eps, amax);
    }
    CUDA_CHECK_LAUNCH();
}

// ---- backward ---------------------------------------------------------------------------------------

// The backward's most blocks (the harness lowers it with CUDA_SIM_MAX_GRID so
// that its tests reach many rounds of rows and few-block grids at small N).
static inline size_t norm_bwd_max_blocks(int sm_count, int threads) {
    int per_sm = threads <= 256 ? NORM_BWD_BLOCKS_PER_SM : 1;  // 512 threads x 128 registers fill an SM
    return cuda_sim_max_grid((unsigned)(sm_count * per_sm));
}

// The backward's launch shape for P packs of V elements per row (see the top).
struct NormBwdShape {
    int G;       // warps per row
    int J;       // packs per lane, <= NORM_BWD_FLOATS / V (wide: any)
    int wide;    // the row does not fit the registers of NORM_BWD_MAX_WARPS warps
    int groups;  // row groups per block
    int threads, blocks;
};

// G from the fewest warps whose lanes can hold the row up to twice that,
// keeping the one whose lanes are the most fully used (the first on ties):
// P = 96 -> G 3, J 1 (G 2, J 2 would leave a quarter of the lanes idle).
// Rows wider than NORM_BWD_MAX_WARPS warps hold (8192 columns in BF16 and
// FP32) take the wide variant on that many warps.
static inline NormBwdShape norm_bwd_shape(int P, int V, int N, int sm_count) {
    int jmax = NORM_BWD_FLOATS / V;
    int gmin = (int)ceil_div((size_t)P, (size_t)WARP_SIZE * jmax);
    NormBwdShape s = {gmin, 0, 0, 0, 0, 0};
    if (gmin > NORM_BWD_MAX_WARPS) {
        s.G = NORM_BWD_MAX_WARPS;
        s.J = (int)ceil_div((size_t)P, (size_t)WARP_SIZE * s.G);
        s.wide = 1;
    } else {
        double best = 0.0;
        for (int G = gmin; G <= 2 * gmin && G <= NORM_BWD_MAX_WARPS; G++) {
            int J = (int)ceil_div((size_t)P, (size_t)WARP_SIZE * G);
            double used = (double)P / ((double)WARP_SIZE * G * J);
            if (used > best) {
                best = used;
                s.G = G;
                s.J = J;
            }
        }
    }
    s.groups = s.G < NORM_BWD_WARPS ? NORM_BWD_WARPS / s.G : 1;
    s.threads = s.groups * s.G * WARP_SIZE;
    size_t want = ceil_div((size_t)N, (size_t)s.groups), cap = norm_bwd_max_blocks(sm_count, s.threads);
    s.blocks = (int)(want < cap ? want : cap);
    return s;
}

// partial: (gridDim.x, K) floats, K = 2C (dw then db) for layernorm, C for
// RMSNorm. ticket: a zeroed counter, zero again when the kernel ends.
// dinp, dw, db accumulate (+=). mean: layernorm only. amax (may be NULL): of
// dinp after the addition, as stored.
// WIDE (rows of more than 8192 columns, one group per block): nothing is kept
// in registers; the row is read twice and each thread adds its columns'
// dw/db terms row by row into the block's partial row (L2-resident), in row
// order. Slower, for widths no preset has.
template <typename T, int V, bool LN, bool WIDE>
__global__ void KERNEL_BOUNDS(NORM_BWD_MAX_WARPS* WARP_SIZE, 1)
    norm_backward_kernel(T* dinp, T* dw, T* db, float* partial, unsigned* ticket, const T* dout, const T* inp,
                         const T* w, const float* mean, const float* rstd, int N, int C, int G, int J, float* amax) {
    const int JM = WIDE ? 1 : NORM_BWD_FLOATS / V;  // the register arrays' packs
    __shared__ float red[2][NORM_BWD_MAX_WARPS][2];  // [round parity][warp][sum_g, sum_gx]
    __shared__ unsigned last;
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int group = warp / G, groups = blockDim.x / (WARP_SIZE * G);
    int t = (warp % G) * WARP_SIZE + lane;  // thread of the group: packs t, t + 32G, ...
    int P = C / V, stride = WARP_SIZE * G;
    int K = LN ? 2 * C : C;
    float* row_out = partial + (size_t)blockIdx.x * K;  // this block's partial row (K)

    // w: (C), the lane's packs, read once.
    float vw[JM][V], acc_w[JM][V], acc_b[JM][V];
    UNROLL for (int j = 0; j < JM; j++) {
        int p = t + j * stride;
        UNROLL for (int k = 0; k < V; k++) acc_w[j][k] = acc_b[j][k] = 0.0f;
        if (!WIDE && j < J && p < P) load_pack<T, V>(vw[j], w + (size_t)p * V);
    }

    // dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w,
    // xhat = (x - mean) * rstd; RMSNorm: mean = 0 and no mean(g) term.
    uint32_t top = 0;
    int parity = 0;
    for (int base = blockIdx.x * groups; base < N; base += gridDim.x * groups, parity ^= 1) {
        int row = base + group;
        int active = row < N;  // the same for every warp of the group
        size_t off = (size_t)row * C;
        float m = 0.0f, rs = 0.0f, sum_g = 0.0f, sum_gx = 0.0f;
        float g[JM][V], xh[JM][V];  // dout and xhat of the lane's packs of this row
        if (active) {
            if (LN) m = mean[row];
            rs = rstd[row];
            if (WIDE) {
                for (int p = t; p < P; p += stride) {
                    float x[V], gg[V], ww[V];
                    load_pack<T, V>(gg, dout + off + (size_t)p * V);
                    load_pack<T, V>(x, inp + off + (size_t)p * V);
                    load_pack<T, V>(ww, w + (size_t)p * V);
                    UNROLL for (int k = 0; k < V; k++) {
                        float gw = gg[k] * ww[k];
                        if (LN) sum_g += gw;
                        sum_gx += gw * ((x[k] - m) * rs);
                    }
                }
            } else {
                UNROLL for (int j = 0; j < JM; j++) {
                    int p = t + j * stride;
                    if (j < J && p < P) {
                        float x[V];
                        load_pack<T, V>(g[j], dout + off + (size_t)p * V);
                        load_pack<T, V>(x, inp + off + (size_t)p * V);
                        UNROLL for (int k = 0; k < V; k++) {
                            float gw = g[j][k] * vw[j][k];
                            xh[j][k] = (x[k] - m) * rs;
                            if (LN) sum_g += gw;
                            sum_gx += gw * xh[j][k];
                        }
                    }
                }
            }
        }
        if (LN) sum_g = warp_sum(sum_g);
        sum_gx = warp_sum(sum_gx);
        if (G > 1) {
            // The group's warps add their sums in warp order. Two buffers by
            // round parity: a warp writing round k + 2's sums has passed round
            // k + 1's barrier, so every warp has read round k's.
            if (lane == 0) {
                red[parity][warp][0] = sum_g;
                red[parity][warp][1] = sum_gx;
            }
            __syncthreads();  // every warp of the block reaches it: the round count is the block's
            sum_g = sum_gx = 0.0f;
            for (int q = 0; q < G; q++) {
                sum_g += red[parity][group * G + q][0];
                sum_gx += red[parity][group * G + q][1];
            }
        }
        if (!active) continue;
        float mean_g = sum_g / (float)C, mean_gx = sum_gx / (float)C;
        if (WIDE) {
            int first = base == (int)blockIdx.x * groups;  // the block's first row: write, then add
            for (int p = t; p < P; p += stride) {
                float x[V], gg[V], ww[V], d[V];
                load_pack<T, V>(gg, dout + off + (size_t)p * V);
                load_pack<T, V>(x, inp + off + (size_t)p * V);
                load_pack<T, V>(ww, w + (size_t)p * V);
                load_pack<T, V>(d, dinp + off + (size_t)p * V);
                UNROLL for (int k = 0; k < V; k++) {
                    float xhat = (x[k] - m) * rs, gw = gg[k] * ww[k];
                    int c = p * V + k;
                    d[k] += (LN ? gw - mean_g - xhat * mean_gx : gw - xhat * mean_gx) * rs;
                    row_out[c] = first ? gg[k] * xhat : row_out[c] + gg[k] * xhat;
                    if (LN) row_out[C + c] = first ? gg[k] : row_out[C + c] + gg[k];
                }
                store_pack<T, V>(dinp + off + (size_t)p * V, d);
                if (amax) top = amax_keep_pack<T, V>(top, d);
            }
        } else {
            UNROLL for (int j = 0; j < JM; j++) {
                int p = t + j * stride;
                if (j < J && p < P) {
                    float d[V];
                    load_pack<T, V>(d, dinp + off + (size_t)p * V);
                    UNROLL for (int k = 0; k < V; k++) {
                        float gw = g[j][k] * vw[j][k];
                        d[k] += (LN ? gw - mean_g - xh[j][k] * mean_gx : gw - xh[j][k] * mean_gx) * rs;
                        acc_w[j][k] += g[j][k] * xh[j][k];
                        if (LN) acc_b[j][k] += g[j][k];
                    }
                    store_pack<T, V>(dinp + off + (size_t)p * V, d);
                    if (amax) top = amax_keep_pack<T, V>(top, d);
                }
            }
        }
    }
    if (amax) amax_commit_warp(amax, top);  // every warp of the block gets here

    // The block's partial row (wide: already there): its groups'
    // accumulators added in group order (group 0 writes, then each adds after
    // a barrier). A barrier makes a block's global writes visible to the block.
    for (int q = 0; !WIDE && q < groups; q++) {
        if (group == q) {
            UNROLL for (int j = 0; j < JM; j++) {
                int p = t + j * stride;
                if (j < J && p < P) {
                    UNROLL for (int k = 0; k < V; k++) {
                        int c = p * V + k;
                        row_out[c] = q ? row_out[c] + acc_w[j][k] : acc_w[j][k];
                        if (LN) row_out[C + c] = q ? row_out[C + c] + acc_b[j][k] : acc_b[j][k];
                    }
                }
            }
        }
        __syncthreads();
    }

    // Ticket: the partial row is visible device-wide before the ticket is
    // taken (each writer fences; thread 0 takes it after the barrier).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1;  // the last wraps it to 0
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The last block: column j of every block's row, added in block order
    // (L2 loads: this block's L1 never held the other blocks' rows, but not
    // relying on that).
    for (int j = threadIdx.x; j < K; j += blockDim.x) {
        float total = 0.0f;
        for (int b = 0; b < (int)gridDim.x; b++) total += __ldcg(partial + (size_t)b * K + j);
        T* o = j < C ? dw + j : db + (j - C);
        *o = from_float<T>(to_float(*o) + total);
    }
}

// The scratch of a backward over (N, C): at most blocks x 2C partials (the
// grid is capped by the SM count), whatever the dtype and load width.
static inline size_t norm_backward_scratch_bytes(int sm_count, int N, int C) {
    size_t cap = norm_bwd_max_blocks(sm_count, 1), rows = (size_t)N < cap ? (size_t)N : cap;
    return rows * 2 * (size_t)C * sizeof(float);
}

template <typename T, bool LN>
static void norm_backward(Backend* be, T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                          const float* mean, const float* rstd, int N, int C, float* amax) {
    if (N <= 0 || C <= 0) return;
    const int V = Vec16<T>::N;
    CudaState* s = cuda_state(be);
    float* partial = (float*)cuda_scratch(be, cuda_norm_scratch_bytes(be, N, C));
    int vec = C % V == 0 && aligned_to(dinp, 16) && aligned_to(dout, 16) && aligned_to(inp, 16) &&
              aligned_to(w, 16);
    NormBwdShape sh = norm_bwd_shape(vec ? C / V : C, vec ? V : 1, N, s->sm_count);
    auto kernel = vec ? (sh.wide ? norm_backward_kernel<T, V, LN, true> : norm_backward_kernel<T, V, LN, false>)
                      : (sh.wide ? norm_backward_kernel<T, 1, LN, true> : norm_backward_kernel<T, 1, LN, false>);
    LAUNCH(kernel, sh.blocks, sh.threads, 0, s->stream, dinp, dw, db, partial, s->norm_ticket, dout, inp, w, mean,
           rstd, N, C, sh.G, sh.J, amax);
    CUDA_CHECK_LAUNCH();
}
