// attention_wmma.cu: causal flash attention in BF16 on tensor cores, through
// the portable nvcuda::wmma API (bf16 16x16x16 fragments, FP32
// accumulators), for head sizes 32, 64 and 128. See attention.cu for the
// algorithm and the dispatch; this file holds the three kernels.
//
// Tiles are 64 queries x 64 keys; a block has 4 warps and each warp owns 16
// rows of the tile (queries in forward and dQ, keys in dK/dV). The products
// (scores, P V, ...) run on tensor cores; the softmax runs on each warp's
// 16 x 64 score tile in shared memory, two lanes per row. The running output
// accumulators are rescaled in registers: wmma does not say which element of
// an accumulator fragment a lane holds, so each warp learns it once by loading
// a tile whose every element holds its own row number.
//
// Shared memory tiles are bf16 with rows padded by 8 elements (16 bytes) so
// that fragment loads spread over the banks; wmma wants 32-byte aligned tile
// pointers and leading dimensions that are multiples of 16 bytes, which the
// padding keeps.
#include <math.h>

#include "kernels/cuda/attention.cuh"

#ifndef CUDA_SIM
#include <mma.h>
#endif

using namespace nvcuda;

#define FA_ROWS 64      // query (or key) rows per block
#define FA_COLS 64      // key (or query) columns per tile
#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * WARP_SIZE)
#define FA_LDS (FA_COLS + 4)  // float score tiles
#define FA_LDP (FA_COLS + 8)  // bf16 probability tiles

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBT;  // B = X^T of a row-major X
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

template <int HS>
struct FaTile {
    static const int LDH = HS + 8;                                  // bf16 elements per tile row
    static const size_t BYTES = (size_t)FA_ROWS * LDH * sizeof(bf16);  // one 64 x HS tile
};

// Per-warp scratch: float S (16 x FA_LDS), float dP, bf16 P (16 x FA_LDP), bf16 dS.
#define FA_WARP_S_BYTES ((size_t)16 * FA_LDS * sizeof(float))
#define FA_WARP_P_BYTES ((size_t)16 * FA_LDP * sizeof(bf16))

template <int HS>
static size_t forward_smem() {
    // Q, K, V tiles; S and P per warp; the row-number tile; per-row factors.
    return 3 * FaTile<HS>::BYTES + FA_WARPS * (FA_WARP_S_BYTES + FA_WARP_P_BYTES) + 256 * sizeof(float) +
           FA_ROWS * sizeof(float);
}

template <int HS>
static size_t backward_smem() {
    // Q, dO, K, V tiles; S, dP, P, dS per warp; lse and D per row.
    return 4 * FaTile<HS>::BYTES + FA_WARPS * (2 * FA_WARP_S_BYTES + 2 * FA_WARP_P_BYTES) + 2 * FA_COLS * sizeof(float);
}

size_t attention_wmma_smem_bytes(int HS) {
    switch (HS) {
        case 32: return forward_smem<32>() > backward_smem<32>() ? forward_smem<32>() : backward_smem<32>();
        case 64: return forward_smem<64>() > backward_smem<64>() ? forward_smem<64>() : backward_smem<64>();
        case 128: return forward_smem<128>() > backward_smem<128>() ? forward_smem<128>() : backward_smem<128>();
    }
    return 0;
}

// Rows row0 .. row0+63 (16-byte packs) of src into a tile; rows at or past T are zero.
template <int HS>
__device__ inline void load_tile(bf16* dst, const bf16* src, int row0, int T, size_t stride) {
    const int packs = HS / 8;
    for (int i = threadIdx.x; i < FA_ROWS * packs; i += blockDim.x) {
        int r = i / packs, c = (i % packs) * 8;
        Pack<bf16, 8> p;
        if (row0 + r < T) {
            p = *reinterpret_cast<const Pack<bf16, 8>*>(src + (size_t)(row0 + r) * stride + c);
        } else {
            UNROLL for (int k = 0; k < 8; k++) p.v[k] = __float2bfloat16_rn(0.0f);
        }
        *reinterpret_cast<Pack<bf16, 8>*>(dst + r * FaTile<HS>::LDH + c) = p;
    }
}

// A warp's 16 x HS accumulator fragments, through its float staging area
// (16 x (HS+4)), to rows row0.. of dst (stride apart) that are below T.
template <int HS>
__device__ inline void store_warp_rows(bf16* dst, FragC* acc, float* stage, int row0, int T, size_t stride) {
    const int lds = HS + 4;
    UNROLL for (int f = 0; f < HS / 16; f++) wmma::store_matrix_sync(stage + f * 16, acc[f], lds, wmma::mem_row_major);
    __syncwarp();
    int lane = threadIdx.x % WARP_SIZE;
    const int packs = HS / 8;
    for (int i = lane; i < 16 * packs; i += WARP_SIZE) {
        int r = i / packs, c = (i % packs) * 8;
        if (row0 + r >= T) continue;
        float v[8];
        UNROLL for (int k = 0; k < 8; k++) v[k] = stage[r * lds + c + k];
        store_pack<bf16, 8>(dst + (size_t)(row0 + r) * stride + c, v);
    }
    __syncwarp();
}

// The warp's two 16 x 64 float tiles of the backward: S = A_w B^T and
// dP = A2_w B2^T, A_w being the warp's 16 rows of the 64-row tile A.
template <int HS>
__device__ inline void warp_scores_and_dp(float* S, float* dP, const bf16* A, const bf16* B, const bf16* A2,
                                          const bf16* B2, int warp) {
    const int LDH = FaTile<HS>::LDH, F = HS / 16;
    UNROLL for (int n = 0; n < FA_COLS / 16; n++) {
        FragC s, dp;
        wmma::fill_fragment(s, 0.0f);
        wmma::fill_fragment(dp, 0.0f);
        UNROLL for (int kk = 0; kk < F; kk++) {
            FragA a;
            FragBT bt;
            wmma::load_matrix_sync(a, A + warp * 16 * LDH + kk * 16, LDH);
            wmma::load_matrix_sync(bt, B + n * 16 * LDH + kk * 16, LDH);
            wmma::mma_sync(s, a, bt, s);
            wmma::load_matrix_sync(a, A2 + warp * 16 * LDH + kk * 16, LDH);
            wmma::load_matrix_sync(bt, B2 + n * 16 * LDH + kk * 16, LDH);
            wmma::mma_sync(dp, a, bt, dp);
        }
        wmma::store_matrix_sync(S + n * 16, s, FA_LDS, wmma::mem_row_major);
        wmma::store_matrix_sync(dP + n * 16, dp, FA_LDS, wmma::mem_row_major);
    }
}

// ---- forward ------------------------------------------------------------------------------------------------

template <int HS>
__global__ void KERNEL_BOUNDS(FA_THREADS, 1)
    attention_forward_wmma_kernel(bf16* out, float* lse, const bf16* qkv, int T, AttnLayout L, float scale_log2) {
    const int LDH = FaTile<HS>::LDH, F = HS / 16;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    unsigned char* smem = fa_smem;
    bf16* Qs = (bf16*)smem;
    bf16* Ks = (bf16*)(smem + FaTile<HS>::BYTES);
    bf16* Vs = (bf16*)(smem + 2 * FaTile<HS>::BYTES);
    unsigned char* warp_area = smem + 3 * FaTile<HS>::BYTES;
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    float* Sw = (float*)(warp_area + warp * FA_WARP_S_BYTES);
    bf16* Pw = (bf16*)(warp_area + FA_WARPS * FA_WARP_S_BYTES + warp * FA_WARP_P_BYTES);
    float* rowid = (float*)(warp_area + FA_WARPS * (FA_WARP_S_BYTES + FA_WARP_P_BYTES));
    float* factor = rowid + 256;  // per block row: rescale factors

    int qb = gridDim.x - 1 - blockIdx.x;  // the longest query blocks start first
    int bh = blockIdx.y, b = bh / L.NH, h = bh % L.NH;
    size_t stride = L.stride();
    const bf16* base = qkv + (size_t)b * T * stride;
    int q0 = qb * FA_ROWS;
    load_tile<HS>(Qs, base + L.q(h), q0, T, stride);
    for (int i = threadIdx.x; i < 256; i += blockDim.x) rowid[i] = (float)(i / 16);
    __syncthreads();

    // Which row of the 16 x 16 accumulator tile each element of this lane is.
    FragC rows;
    wmma::load_matrix_sync(rows, rowid, 16, wmma::mem_row_major);
    int my_row[FragC::num_elements];
    UNROLL for (int i = 0; i < FragC::num_elements; i++) my_row[i] = warp * 16 + (int)rows.x[i];

    FragA qf[F];
    UNROLL for (int kk = 0; kk < F; kk++) wmma::load_matrix_sync(qf[kk], Qs + warp * 16 * LDH + kk * 16, LDH);
    FragC of[F];
    UNROLL for (int f = 0; f < F; f++) wmma::fill_fragment(of[f], 0.0f);

    // Lanes 2r and 2r+1 own row r of the warp's 16, the even and the odd
    // columns (rows are 4 banks apart, so 16 rows share 8 banks: 2-way conflicts).
    int r = lane / 2, half = lane % 2;
    int q = q0 + warp * 16 + r;
    float m_run = -INFINITY, l_run = 0.0f;

    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * FA_COLS;
        __syncthreads();
        load_tile<HS>(Ks, base + L.k(h), k0, T, stride);
        load_tile<HS>(Vs, base + L.v(h), k0, T, stride);
        __syncthreads();

        // S (16 x 64) = Q_w K^T
        UNROLL for (int n = 0; n < FA_COLS / 16; n++) {
            FragC s;
            wmma::fill_fragment(s, 0.0f);
            UNROLL for (int kk = 0; kk < F; kk++) {
                FragBT kf;
                wmma::load_matrix_sync(kf, Ks + n * 16 * LDH + kk * 16, LDH);
                wmma::mma_sync(s, qf[kk], kf, s);
            }
            wmma::store_matrix_sync(Sw + n * 16, s, FA_LDS, wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax of row r in base-2 units: p = 2^(s*scale*log2e - m).
        float* srow = Sw + r * FA_LDS;
        bf16* prow = Pw + r * FA_LDP;
        float mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            int c = 2 * j + half, key = k0 + c;
            float s = key <= q && key < T ? srow[c] * scale_log2 : -INFINITY;
            srow[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        float m_new = fmaxf(m_run, mx);
        float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float sum = 0.0f;
        for (int j = 0; j < 32; j++) {
            int c = 2 * j + half;
            float p = exp2f(srow[c] - m_use);
            sum += p;
            prow[c] = __float2bfloat16_rn(p);
        }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        float alpha = exp2f(m_run - m_use);
        l_run = l_run * alpha + sum;
        m_run = m_new;
        if (half == 0) factor[warp * 16 + r] = alpha;
        __syncwarp();

        // O = O * alpha + P V
        UNROLL for (int f = 0; f < F; f++) {
            UNROLL for (int i = 0; i < FragC::num_elements; i++) of[f].x[i] *= factor[my_row[i]];
        }
        UNROLL for (int kk = 0; kk < FA_COLS / 16; kk++) {
            FragA pf;
            wmma::load_matrix_sync(pf, Pw + kk * 16, FA_LDP);
            UNROLL for (int f = 0; f < F; f++) {
                FragB vf;
                wmma::load_matrix_sync(vf, Vs + kk * 16 * LDH + f * 16, LDH);
                wmma::mma_sync(of[f], pf, vf, of[f]);
            }
        }
        __syncwarp();
    }

    // O / l, written as bf16 through a float staging area in the K and V tiles.
    if (half == 0) factor[warp * 16 + r] = 1.0f / l_run;
    __syncwarp();
    UNROLL for (int f = 0; f < F; f++) {
        UNROLL for (int i = 0; i < FragC::num_elements; i++) of[f].x[i] *= factor[my_row[i]];
    }
    __syncthreads();  // every warp is done with K and V
    float* stage = (float*)Ks + warp * 16 * (HS + 4);
    store_warp_rows<HS>(out + (size_t)b * T * L.out_stride() + L.q(h), of, stage, q0 + warp * 16, T, L.out_stride());
    if (half == 0 && q < T) lse[(size_t)bh * T + q] = (m_run + log2f(l_run)) * ATTN_LN2;
}

// ---- backward: dK and dV ---------------------------------------------------------------------------------------

// Block: 64 keys of one (b, kv head), over the query heads that read it in
// order; warp w owns keys 16w..16w+15 and works in the
// transposed frame: S^T = K_w Q^T, dP^T = V_w dO^T (16 keys x 64 queries),
// dV_w += P^T dO, dK_w += dS^T Q.
template <int HS>
__global__ void KERNEL_BOUNDS(FA_THREADS, 1)
    attention_backward_dkdv_wmma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                        const float* D, int T, AttnLayout L, float scale, float scale_log2) {
    const int LDH = FaTile<HS>::LDH, F = HS / 16;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    unsigned char* smem = fa_smem;
    bf16* Qs = (bf16*)smem;
    bf16* dOs = (bf16*)(smem + FaTile<HS>::BYTES);
    bf16* Ks = (bf16*)(smem + 2 * FaTile<HS>::BYTES);
    bf16* Vs = (bf16*)(smem + 3 * FaTile<HS>::BYTES);
    unsigned char* warp_area = smem + 4 * FaTile<HS>::BYTES;
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    float* St = (float*)(warp_area + warp * 2 * FA_WARP_S_BYTES);
    float* dPt = St + 16 * FA_LDS;
    bf16* Pt = (bf16*)(warp_area + FA_WARPS * 2 * FA_WARP_S_BYTES + warp * 2 * FA_WARP_P_BYTES);
    bf16* dSt = Pt + 16 * FA_LDP;
    float* lse2 = (float*)(warp_area + FA_WARPS * 2 * (FA_WARP_S_BYTES + FA_WARP_P_BYTES));
    float* Ds = lse2 + FA_COLS;

    int nqb = (T + FA_COLS - 1) / FA_COLS;
    int kb = blockIdx.x;  // the first key blocks have the most queries: they start first
    int bkv = blockIdx.y, b = bkv / L.NKV, h0 = (bkv % L.NKV) * L.group();
    size_t stride = L.stride(), ostride = L.out_stride();
    const bf16* base = qkv + (size_t)b * T * stride;
    const bf16* gbase = dout + (size_t)b * T * ostride;
    int k0 = kb * FA_ROWS;
    load_tile<HS>(Ks, base + L.k(h0), k0, T, stride);
    load_tile<HS>(Vs, base + L.v(h0), k0, T, stride);

    FragC dk[F], dv[F];
    UNROLL for (int f = 0; f < F; f++) {
        wmma::fill_fragment(dk[f], 0.0f);
        wmma::fill_fragment(dv[f], 0.0f);
    }
    int r = lane / 2, half = lane % 2;
    int key = k0 + warp * 16 + r;

    int qb0 = k0 / FA_COLS, blocks = nqb - qb0;
    for (int step = 0; step < L.group() * blocks; step++) {
        int h = h0 + step / blocks, qb = qb0 + step % blocks;
        int bh = b * L.NH + h;
        int q0 = qb * FA_COLS;
        __syncthreads();
        load_tile<HS>(Qs, base + L.q(h), q0, T, stride);
        load_tile<HS>(dOs, gbase + L.q(h), q0, T, ostride);
        load_query_stats(lse2, Ds, lse, D, bh, q0, FA_COLS, T, ATTN_LOG2E);
        __syncthreads();

        warp_scores_and_dp<HS>(St, dPt, Ks, Qs, Vs, dOs, warp);
        __syncwarp();

        // Row r of the transposed tiles is key `key`; column c is query q0 + c
        // (lanes 2r and 2r+1 take the even and odd columns, as in forward).
        for (int j = 0; j < 32; j++) {
            int c = 2 * j + half, q = q0 + c;
            float p = q >= key && q < T ? exp2f(St[r * FA_LDS + c] * scale_log2 - lse2[c]) : 0.0f;
            float ds = p * (dPt[r * FA_LDS + c] - Ds[c]) * scale;
            Pt[r * FA_LDP + c] = __float2bfloat16_rn(p);
            dSt[r * FA_LDP + c] = __float2bfloat16_rn(ds);
        }
        __syncwarp();

        UNROLL for (int kk = 0; kk < FA_COLS / 16; kk++) {
            FragA pa, sa;
            wmma::load_matrix_sync(pa, Pt + kk * 16, FA_LDP);
            wmma::load_matrix_sync(sa, dSt + kk * 16, FA_LDP);
            UNROLL for (int f = 0; f < F; f++) {
                FragB bf;
                wmma::load_matrix_sync(bf, dOs + kk * 16 * LDH + f * 16, LDH);
                wmma::mma_sync(dv[f], pa, bf, dv[f]);
                wmma::load_matrix_sync(bf, Qs + kk * 16 * LDH + f * 16, LDH);
                wmma::mma_sync(dk[f], sa, bf, dk[f]);
            }
        }
    }

    __syncthreads();  // every warp is done with the Q and dO tiles: they become staging
    float* stage = (float*)smem + warp * 16 * (HS + 4);
    bf16* dbase = dqkv + (size_t)b * T * stride;
    store_warp_rows<HS>(dbase + L.k(h0), dk, stage, k0 + warp * 16, T, stride);
    store_warp_rows<HS>(dbase + L.v(h0), dv, stage, k0 + warp * 16, T, stride);
}

// ---- backward: dQ ---------------------------------------------------------------------------------------------

// Block: 64 queries of one (b, h); warp w owns queries 16w..16w+15:
// S = Q_w K^T, dP = dO_w V^T, dQ_w += dS K.
template <int HS>
__global__ void KERNEL_BOUNDS(FA_THREADS, 1)
    attention_backward_dq_wmma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                      const float* D, int T, AttnLayout L, float scale, float scale_log2) {
    const int LDH = FaTile<HS>::LDH, F = HS / 16;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    unsigned char* smem = fa_smem;
    bf16* Qs = (bf16*)smem;
    bf16* dOs = (bf16*)(smem + FaTile<HS>::BYTES);
    bf16* Ks = (bf16*)(smem + 2 * FaTile<HS>::BYTES);
    bf16* Vs = (bf16*)(smem + 3 * FaTile<HS>::BYTES);
    unsigned char* warp_area = smem + 4 * FaTile<HS>::BYTES;
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    float* S = (float*)(warp_area + warp * 2 * FA_WARP_S_BYTES);
    float* dP = S + 16 * FA_LDS;
    bf16* dS = (bf16*)(warp_area + FA_WARPS * 2 * FA_WARP_S_BYTES + warp * 2 * FA_WARP_P_BYTES);
    float* lse2 = (float*)(warp_area + FA_WARPS * 2 * (FA_WARP_S_BYTES + FA_WARP_P_BYTES));
    float* Ds = lse2 + FA_ROWS;

    int qb = gridDim.x - 1 - blockIdx.x;
    int bh = blockIdx.y, b = bh / L.NH, h = bh % L.NH;
    size_t stride = L.stride();
    const bf16* base = qkv + (size_t)b * T * stride;
    int q0 = qb * FA_ROWS;
    load_tile<HS>(Qs, base + L.q(h), q0, T, stride);
    load_tile<HS>(dOs, dout + (size_t)b * T * L.out_stride() + L.q(h), q0, T, L.out_stride());
    load_query_stats(lse2, Ds, lse, D, bh, q0, FA_ROWS, T, ATTN_LOG2E);
    FragC dq[F];
    UNROLL for (int f = 0; f < F; f++) wmma::fill_fragment(dq[f], 0.0f);
    int r = lane / 2, half = lane % 2;
    int row = warp * 16 + r, q = q0 + row;

    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * FA_COLS;
        __syncthreads();
        load_tile<HS>(Ks, base + L.k(h), k0, T, stride);
        load_tile<HS>(Vs, base + L.v(h), k0, T, stride);
        __syncthreads();

        warp_scores_and_dp<HS>(S, dP, Qs, Ks, dOs, Vs, warp);
        __syncwarp();

        for (int j = 0; j < 32; j++) {
            int c = 2 * j + half, key = k0 + c;
            float p = key <= q && q < T ? exp2f(S[r * FA_LDS + c] * scale_log2 - lse2[row]) : 0.0f;
            dS[r * FA_LDP + c] = __float2bfloat16_rn(p * (dP[r * FA_LDS + c] - Ds[row]) * scale);
        }
        __syncwarp();

        UNROLL for (int kk = 0; kk < FA_COLS / 16; kk++) {
            FragA sa;
            wmma::load_matrix_sync(sa, dS + kk * 16, FA_LDP);
            UNROLL for (int f = 0; f < F; f++) {
                FragB kf;
                wmma::load_matrix_sync(kf, Ks + kk * 16 * LDH + f * 16, LDH);
                wmma::mma_sync(dq[f], sa, kf, dq[f]);
            }
        }
    }

    __syncthreads();  // every warp is done with K and V: they become staging
    float* stage = (float*)Ks + warp * 16 * (HS + 4);
    store_warp_rows<HS>(dqkv + (size_t)b * T * stride + L.q(h), dq, stage, q0 + warp * 16, T, stride);
}

// ---- launchers ---------------------------------------------------------------------------------------------------

template <int HS>
static void forward_launch(Backend* be, bf16* out, float* lse, const bf16* qkv, int B, int T, AttnLayout L) {
    size_t smem = forward_smem<HS>();
    auto kernel = attention_forward_wmma_kernel<HS>;
    attention_set_smem(be, (const void*)kernel, smem, "attention forward (tensor cores)");
    dim3 grid((unsigned)ceil_div((size_t)T, FA_ROWS), grid_y((size_t)B * L.NH, "attention"));
    float scale_log2 = ATTN_LOG2E / sqrtf((float)HS);
    LAUNCH(kernel, grid, FA_THREADS, smem, cuda_stream(be), out, lse, qkv, T, L, scale_log2);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static void backward_launch(Backend* be, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                            const float* D, int B, int T, AttnLayout L) {
    size_t smem = backward_smem<HS>();
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * ATTN_LOG2E;
    auto kv = attention_backward_dkdv_wmma_kernel<HS>;
    attention_set_smem(be, (const void*)kv, smem, "attention backward dK/dV (tensor cores)");
    dim3 grid_kv((unsigned)ceil_div((size_t)T, FA_ROWS), grid_y((size_t)B * L.NKV, "attention"));
    LAUNCH(kv, grid_kv, FA_THREADS, smem, cuda_stream(be), dqkv, dout, qkv, lse, D, T, L, scale, scale_log2);
    CUDA_CHECK_LAUNCH();
    auto q = attention_backward_dq_wmma_kernel<HS>;
    attention_set_smem(be, (const void*)q, smem, "attention backward dQ (tensor cores)");
    dim3 grid_q((unsigned)ceil_div((size_t)T, FA_ROWS), grid_y((size_t)B * L.NH, "attention"));
    LAUNCH(q, grid_q, FA_THREADS, smem, cuda_stream(be), dqkv, dout, qkv, lse, D, T, L, scale, scale_log2);
    CUDA_CHECK_LAUNCH();
}

void attention_forward_wmma(Backend* be, bf16* out, float* lse, const bf16* qkv, int B, int T, AttnLayout L) {
    switch (L.HS) {
        case 32: forward_launch<32>(be, out, lse, qkv, B, T, L); return;
        case 64: forward_launch<64>(be, out, lse, qkv, B, T, L); return;
        case 128: forward_launch<128>(be, out, lse, qkv, B, T, L); return;
    }
    fatal("internal: no tensor-core attention for head size %d", L.HS);
}

void attention_backward_wmma(Backend* be, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                             const float* D, int B, int T, AttnLayout L) {
    switch (L.HS) {
        case 32: backward_launch<32>(be, dqkv, dout, qkv, lse, D, B, T, L); return;
        case 64: backward_launch<64>(be, dqkv, dout, qkv, lse, D, B, T, L); return;
        case 128: backward_launch<128>(be, dqkv, dout, qkv, lse, D, B, T, L); return;
    }
    fatal("internal: no tensor-core attention for head size %d", L.HS);
}
