// attention_mma.cu: the native causal flash attention in BF16, FlashAttention-2
// style, on mma.sync m16n8k16 tensor-core instructions (kernels/cuda/mma.cuh),
// for head sizes 32, 64 and 128, with grouped-query attention.
//
// Layout (the attention contract): qkv (B, T, NH + 2 NKV, HS): the NH query
// heads, then the NKV key heads, then the NKV value heads of each token; query
// head h reads kv head h / (NH / NKV). out and dout (B, T, NH, HS); lse
// (B, NH, T) FP32, natural log; dqkv has qkv's layout.
//
// Forward: a block of 8 warps owns 128 queries of one head; each warp 16 rows.
// K/V tiles of 64 keys stream through shared memory by cp.async, double
// buffered (tile j+1 loads while tile j is used), shared by all 8 warps. A
// warp's scores S = Q K^T (16 x 64) stay in mma accumulators; the online
// softmax works on them in registers (a row lives in the 4 lanes of a quad),
// and the accumulators, rounded to bf16 pairs, are directly the A operand of
// P V (see mma.cuh). Nothing of S or P touches shared memory.
//
// Backward is deterministic without atomics: one kernel owns 64 keys of a kv
// head and loops over every query tile of every query head of its group that
// sees them (dK, dV), another owns 64 queries and loops over their keys (dQ).
// Each recomputes P from lse: 7 tile products per tile pair instead of 5, the
// price of a fixed summation order.
//
// Shared memory tiles are bf16 rows of HS + 8 elements: 16-byte aligned rows
// for cp.async and ldmatrix, and the 8 row addresses of an ldmatrix fall in
// distinct banks. Registers and shared memory per block (sm_90, nvcc -Xptxas -v
// at HS 128): see the KERNEL_BOUNDS lines; the head-128 backward kernels are
// bounded to 2 blocks of 128 threads per SM (<= 255 registers, ~70 KB shared
// memory each: 2-3 blocks fit the 228 KB of an SM).
#include <math.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/mma.cuh"

#define MMA_FWD_Q 128      // queries per forward block
#define MMA_FWD_K 64       // keys per forward tile
#define MMA_FWD_WARPS 8
#define MMA_BWD_ROWS 64    // keys (dK/dV) or queries (dQ) a backward block owns
#define MMA_BWD_COLS 32    // queries (dK/dV) or keys (dQ) per streamed tile
#define MMA_BWD_WARPS 4

template <int HS>
struct MmaTile {
    static const int LD = HS + 8;  // bf16 elements per shared-memory row
};

template <int HS>
static size_t mma_forward_smem() {
    return (size_t)(MMA_FWD_Q + 4 * MMA_FWD_K) * MmaTile<HS>::LD * sizeof(bf16);  // Q; K, V twice
}
template <int HS>
static size_t mma_backward_smem() {
    // The owned 64-row tiles (K, V or Q, dO), two streamed 32-row tiles twice; lse and D twice.
    return (size_t)(2 * MMA_BWD_ROWS + 4 * MMA_BWD_COLS) * MmaTile<HS>::LD * sizeof(bf16) +
           4 * MMA_BWD_ROWS * sizeof(float);
}

int attention_mma_head_size(int HS) { return HS == 32 || HS == 64 || HS == 128; }

size_t attention_mma_smem_bytes(int HS) {
    size_t f = 0, b = 0;
    switch (HS) {
        case 32: f = mma_forward_smem<32>(), b = mma_backward_smem<32>(); break;
        case 64: f = mma_forward_smem<64>(), b = mma_backward_smem<64>(); break;
        case 128: f = mma_forward_smem<128>(), b = mma_backward_smem<128>(); break;
        default: return 0;
    }
    return f > b ? f : b;
}

// ---- shared pieces ------------------------------------------------------------------------------------------------

// Rows r0 .. r0+ROWS-1 of a matrix with rows `stride` elements apart into a
// shared tile, by cp.async (16 bytes per copy); rows at or past T are zero-filled
// (their source address is clamped to row 0, from which nothing is read).
template <int ROWS, int HS>
__device__ inline void async_tile(bf16* dst, const bf16* src, int r0, int T, size_t stride) {
    const int chunks = HS / 8;
    for (int i = threadIdx.x; i < ROWS * chunks; i += blockDim.x) {
        int r = i / chunks, c = (i % chunks) * 8, row = r0 + r;
        bool in = row < T;
        cp_async_cg16(dst + r * MmaTile<HS>::LD + c, src + (size_t)(in ? row : 0) * stride + c, in ? 16 : 0);
    }
}

// The A operand (16 x 16) of rows row0.. and columns col0.. of a shared tile.
template <int HS>
__device__ inline void load_a(uint32_t a[4], const bf16* tile, int row0, int col0) {
    int lane = threadIdx.x % WARP_SIZE, m = lane / 8, r = lane % 8;
    ldmatrix_x4(a, tile + (row0 + (m & 1) * 8 + r) * MmaTile<HS>::LD + col0 + (m >> 1) * 8);
}

// B operands of two n-tiles (b[0..1]: n row0..row0+7, b[2..3]: n row0+8..) over
// k = col0..col0+15, from a tile whose rows are n (B = tile^T: K in Q K^T).
template <int HS>
__device__ inline void load_b_rows_n(uint32_t b[4], const bf16* tile, int row0, int col0) {
    int lane = threadIdx.x % WARP_SIZE, m = lane / 8, r = lane % 8;
    ldmatrix_x4(b, tile + (row0 + (m >> 1) * 8 + r) * MmaTile<HS>::LD + col0 + (m & 1) * 8);
}

// B operands of two n-tiles (n = col0..col0+7 and col0+8..) over k =
// row0..row0+15, from a tile whose rows are k (B = tile: V in P V).
template <int HS>
__device__ inline void load_b_rows_k(uint32_t b[4], const bf16* tile, int row0, int col0) {
    int lane = threadIdx.x % WARP_SIZE, m = lane / 8, r = lane % 8;
    ldmatrix_x4_trans(b, tile + (row0 + (m & 1) * 8 + r) * MmaTile<HS>::LD + col0 + (m >> 1) * 8);
}

// Accumulators of n-tiles 2c and 2c+1 (16 x 16, float) as the A operand of the next product.
__device__ inline void acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
    a[0] = pack_bf16x2(lo[0], lo[1]);
    a[1] = pack_bf16x2(lo[2], lo[3]);
    a[2] = pack_bf16x2(hi[0], hi[1]);
    a[3] = pack_bf16x2(hi[2], hi[3]);
}

// C[16 x 8N] (+)= A_tile[row0.., 0..HS) B^T, B's rows being n (S = Q K^T and relatives).
template <int HS, int N>
__device__ inline void scores(float acc[N][4], const bf16* a_tile, int a_row0, const bf16* b_tile, int b_row0) {
    UNROLL for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[4];
        load_a<HS>(a, a_tile, a_row0, kk * 16);
        UNROLL for (int np = 0; np < N / 2; np++) {
            uint32_t b[4];
            load_b_rows_n<HS>(b, b_tile, b_row0 + np * 16, kk * 16);
            mma_bf16_16816(acc[2 * np], a, b, acc[2 * np]);
            mma_bf16_16816(acc[2 * np + 1], a, b + 2, acc[2 * np + 1]);
        }
    }
}

// O[16 x HS] += P[16 x 16K] V, P given as accumulators (n-tiles of 8 columns)
// and V as a tile whose rows v_row0.. are P's columns.
template <int HS, int K8>
__device__ inline void product_pv(float o[HS / 8][4], const float p[K8][4], const bf16* v_tile, int v_row0) {
    UNROLL for (int kc = 0; kc < K8 / 2; kc++) {
        uint32_t a[4];
        acc_to_a(a, p[2 * kc], p[2 * kc + 1]);
        UNROLL for (int dp = 0; dp < HS / 16; dp++) {
            uint32_t b[4];
            load_b_rows_k<HS>(b, v_tile, v_row0 + kc * 16, dp * 16);
            mma_bf16_16816(o[2 * dp], a, b, o[2 * dp]);
            mma_bf16_16816(o[2 * dp + 1], a, b + 2, o[2 * dp + 1]);
        }
    }
}

// A warp's 16 x HS accumulator rows row0 + g, row0 + g + 8 to dst (row `stride`
// apart) times `scale[half]`, where below T.
template <int HS>
__device__ inline void store_rows(bf16* dst, const float acc[HS / 8][4], int row0, int T, size_t stride,
                                  const float scale[2]) {
    int lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    UNROLL for (int half = 0; half < 2; half++) {
        int row = row0 + g + 8 * half;
        if (row >= T) continue;
        bf16* p = dst + (size_t)row * stride + 2 * t;
        UNROLL for (int j = 0; j < HS / 8; j++) {
            uint32_t v = pack_bf16x2(acc[j][2 * half] * scale[half], acc[j][2 * half + 1] * scale[half]);
            *reinterpret_cast<uint32_t*>(p + j * 8) = v;
        }
    }
}

// ---- forward ------------------------------------------------------------------------------------------------

// grid (B * NH, query blocks); the longest query blocks (the last) start first.
template <int HS>
__global__ void KERNEL_BOUNDS(MMA_FWD_WARPS * WARP_SIZE, 1)
    attention_forward_mma_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int NKV, float scale_log2) {
    const int LD = MmaTile<HS>::LD, NT = MMA_FWD_K / 8;
    extern __shared__ __align__(128) unsigned char attn_mma_smem[];
    bf16* Qs = (bf16*)attn_mma_smem;       // [128][LD]
    bf16* Ks = Qs + MMA_FWD_Q * LD;        // [2][64][LD]
    bf16* Vs = Ks + 2 * MMA_FWD_K * LD;    // [2][64][LD]

    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * MMA_FWD_Q;
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    const bf16* tok = qkv + (size_t)b * T * stride;
    const bf16* ksrc = tok + (size_t)(NH + kvh) * HS;
    const bf16* vsrc = tok + (size_t)(NH + NKV + kvh) * HS;
    int last = min(q0 + MMA_FWD_Q, T) - 1;  // the block's last query: keys 0..last are seen
    int nkb = last / MMA_FWD_K + 1;

    async_tile<MMA_FWD_Q, HS>(Qs, tok + (size_t)h * HS, q0, T, stride);
    async_tile<MMA_FWD_K, HS>(Ks, ksrc, 0, T, stride);
    async_tile<MMA_FWD_K, HS>(Vs, vsrc, 0, T, stride);
    cp_async_commit();

    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    int wq = q0 + warp * 16;  // the warp's first query; its rows are wq + g and wq + g + 8
    uint32_t qa[HS / 16][4];
    float o[HS / 8][4];
    UNROLL for (int j = 0; j < HS / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // l: this lane's part of the row sum

    for (int kb = 0; kb < nkb; kb++) {
        int buf = kb & 1, k0 = kb * MMA_FWD_K;
        if (kb + 1 < nkb) {  // the next tile streams in while this one is used
            async_tile<MMA_FWD_K, HS>(Ks + (buf ^ 1) * MMA_FWD_K * LD, ksrc, k0 + MMA_FWD_K, T, stride);
            async_tile<MMA_FWD_K, HS>(Vs + (buf ^ 1) * MMA_FWD_K * LD, vsrc, k0 + MMA_FWD_K, T, stride);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the tile just issued has landed (this thread's copies)
        __syncthreads();     // ... and every thread's
        if (kb == 0) UNROLL for (int kk = 0; kk < HS / 16; kk++) load_a<HS>(qa[kk], Qs, warp * 16, kk * 16);
        const bf16* Kt = Ks + buf * MMA_FWD_K * LD;
        const bf16* Vt = Vs + buf * MMA_FWD_K * LD;

        if (k0 <= wq + 15) {  // some key of the tile is visible to some row of the warp
            float s[NT][4];
            UNROLL for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
            UNROLL for (int kk = 0; kk < HS / 16; kk++) {
                UNROLL for (int np = 0; np < NT / 2; np++) {
                    uint32_t kf[4];
                    load_b_rows_n<HS>(kf, Kt, np * 16, kk * 16);
                    mma_bf16_16816(s[2 * np], qa[kk], kf, s[2 * np]);
                    mma_bf16_16816(s[2 * np + 1], qa[kk], kf + 2, s[2 * np + 1]);
                }
            }
            // Causal mask and base-2 scaling; element i of n-tile j is row g + 8(i/2), key 8j + 2t + i%2.
            float mx[2] = {-INFINITY, -INFINITY};
            UNROLL for (int j = 0; j < NT; j++) {
                UNROLL for (int i = 0; i < 4; i++) {
                    int key = k0 + 8 * j + 2 * t + (i & 1), q = wq + g + 8 * (i >> 1);
                    s[j][i] = key <= q ? s[j][i] * scale_log2 : -INFINITY;
                    mx[i >> 1] = fmaxf(mx[i >> 1], s[j][i]);
                }
            }
            float alpha[2], m_use[2];
            UNROLL for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 2));
                float m_new = fmaxf(m_run[r], mx[r]);
                m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet
                alpha[r] = exp2f(m_run[r] - m_use[r]);
                m_run[r] = m_new;
                l_run[r] *= alpha[r];
            }
            UNROLL for (int j = 0; j < NT; j++) {
                UNROLL for (int i = 0; i < 4; i++) {
                    s[j][i] = exp2f(s[j][i] - m_use[i >> 1]);
                    l_run[i >> 1] += s[j][i];
                }
            }
            UNROLL for (int j = 0; j < HS / 8; j++) {
                o[j][0] *= alpha[0];
                o[j][1] *= alpha[0];
                o[j][2] *= alpha[1];
                o[j][3] *= alpha[1];
            }
            product_pv<HS, NT>(o, s, Vt, 0);
        }
        __syncthreads();  // every warp is done with buffer `buf` before it is refilled
    }

    // The row sums over the quad, O / l, and lse = (m + log2 l) ln 2.
    float inv[2];
    UNROLL for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(FULL_MASK, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(FULL_MASK, l_run[r], 2);
        inv[r] = 1.0f / l_run[r];
        int q = wq + g + 8 * r;
        if (t == 0 && q < T) lse[(size_t)bh * T + q] = (m_run[r] + log2f(l_run[r])) * ATTN_LN2;
    }
    store_rows<HS>(out + (size_t)b * T * NH * HS + (size_t)h * HS, o, wq, T, (size_t)NH * HS, inv);
}

// ---- backward ---------------------------------------------------------------------------------------------------

// D[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d] (B, NH, T): HS/8 lanes per
// row, 16-byte loads, a grid-stride loop (any grid size is correct).
template <int HS>
__global__ void attention_mma_dot_kernel(float* D, const bf16* dout, const bf16* out, int B, int T, int NH) {
    const int lanes = HS / 8, per_warp = WARP_SIZE / lanes;
    size_t rows = (size_t)B * T * NH;
    int lane = threadIdx.x % WARP_SIZE, sub = lane % lanes;
    size_t warps = (size_t)gridDim.x * blockDim.x / WARP_SIZE;
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; w * per_warp < rows; w += warps) {
        size_t row = w * per_warp + lane / lanes;  // (b, t, h)
        float s = 0.0f;
        if (row < rows) {
            float a[8], c[8];
            load_pack<bf16, 8>(a, dout + row * HS + sub * 8);
            load_pack<bf16, 8>(c, out + row * HS + sub * 8);
            UNROLL for (int k = 0; k < 8; k++) s += a[k] * c[k];
        }
        for (int off = lanes / 2; off > 0; off >>= 1) s += __shfl_xor_sync(FULL_MASK, s, off);
        if (row < rows && sub == 0) {
            int h = (int)(row % NH);
            size_t bt = row / NH;
            D[(bt / T * NH + h) * T + bt % T] = s;
        }
    }
}

// The shared memory of both backward kernels (mma_backward_smem), carved the
// same way: the block's two resident tiles of MMA_BWD_ROWS rows, the two
// streamed inputs double-buffered ([2][MMA_BWD_COLS] rows each), and two
// arrays of MMA_BWD_ROWS floats of query statistics (lse, D).
template <int HS>
struct BwdSmem {
    bf16 *res0, *res1, *str0, *str1;
    float *lse, *D;
};
static_assert(2 * MMA_BWD_COLS == MMA_BWD_ROWS, "the statistics arrays hold 2 streamed tiles or 1 resident one");

// Carves smem and issues the cp.async copies (not yet committed) of the two
// resident tiles: rows r0 .. r0 + MMA_BWD_ROWS - 1 of src0 and src1, whose
// rows are stride0 and stride1 elements apart.
template <int HS>
__device__ inline BwdSmem<HS> bwd_smem_load(unsigned char* smem, const bf16* src0, size_t stride0, const bf16* src1,
                                            size_t stride1, int r0, int T) {
    const int LD = MmaTile<HS>::LD;
    BwdSmem<HS> s;
    s.res0 = (bf16*)smem;
    s.res1 = s.res0 + MMA_BWD_ROWS * LD;
    s.str0 = s.res1 + MMA_BWD_ROWS * LD;
    s.str1 = s.str0 + 2 * MMA_BWD_COLS * LD;
    s.lse = (float*)(s.str1 + 2 * MMA_BWD_COLS * LD);
    s.D = s.lse + MMA_BWD_ROWS;
    async_tile<MMA_BWD_ROWS, HS>(s.res0, src0, r0, T, stride0);
    async_tile<MMA_BWD_ROWS, HS>(s.res1, src1, r0, T, stride1);
    return s;
}

// A backward tile pair's two products, from zero: s = A_w B^T and dp = C_w D^T,
// 16 x (8 NT) each (A, C: the block's resident tiles from the warp's row
// `row`; B, D: the streamed tiles). dK/dV: S^T = K Q^T, dP^T = V dO^T; dQ:
// S = Q K^T, dP = dO V^T.
template <int HS, int NT>
__device__ inline void bwd_tile_products(float s[NT][4], float dp[NT][4], const bf16* A, const bf16* B, const bf16* C,
                                         const bf16* D, int row) {
    UNROLL for (int j = 0; j < NT; j++) {
        UNROLL for (int i = 0; i < 4; i++) s[j][i] = dp[j][i] = 0.0f;
    }
    scores<HS, NT>(s, A, row, B, 0);
    scores<HS, NT>(dp, C, row, D, 0);
}

// dK, dV: grid (B * NKV, key blocks). A block owns 64 keys of kv head kvh (warp w:
// keys 16w..16w+15) and streams 32-query tiles of Q and dO (with their lse, D)
// of each query head of the group, in a fixed order. In the transposed frame:
// S^T = K_w Q^T, dP^T = V_w dO^T (16 keys x 32 queries), dV_w += P^T dO,
// dK_w += dS^T Q. Registers at HS 128: dK, dV 128 floats, S^T, dP^T 32.
template <int HS>
__global__ void KERNEL_BOUNDS(MMA_BWD_WARPS * WARP_SIZE, 2)
    attention_backward_dkdv_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                       const float* D, int T, int NH, int NKV, float scale, float scale_log2) {
    const int LD = MmaTile<HS>::LD, NT = MMA_BWD_COLS / 8;
    extern __shared__ __align__(128) unsigned char attn_mma_smem[];
    int bg = blockIdx.x, b = bg / NKV, kvh = bg % NKV, group = NH / NKV;
    int k0 = blockIdx.y * MMA_BWD_ROWS;
    size_t stride = (size_t)(NH + 2 * NKV) * HS, ostride = (size_t)NH * HS;
    const bf16* tok = qkv + (size_t)b * T * stride;
    const bf16* gtok = dout + (size_t)b * T * ostride;
    // Resident: K, V [64][LD]; streamed: Q, dO [2][32][LD]; lse, D [2][32] (per buffer).
    BwdSmem<HS> sm = bwd_smem_load<HS>(attn_mma_smem, tok + (size_t)(NH + kvh) * HS, stride,
                                       tok + (size_t)(NH + NKV + kvh) * HS, stride, k0, T);
    bf16 *Ks = sm.res0, *Vs = sm.res1, *Qs = sm.str0, *dOs = sm.str1;
    float *lse_s = sm.lse, *D_s = sm.D;

    // The streamed tiles: for each query head of the group, the 32-query tiles from the one holding k0 on.
    int qt0 = k0 / MMA_BWD_COLS, nqt = (T + MMA_BWD_COLS - 1) / MMA_BWD_COLS - qt0, steps = group * nqt;
    auto issue = [&](int step, int buf) {
        int h = kvh * group + step / nqt, q0 = (qt0 + step % nqt) * MMA_BWD_COLS;
        async_tile<MMA_BWD_COLS, HS>(Qs + buf * MMA_BWD_COLS * LD, tok + (size_t)h * HS, q0, T, stride);
        async_tile<MMA_BWD_COLS, HS>(dOs + buf * MMA_BWD_COLS * LD, gtok + (size_t)h * HS, q0, T, ostride);
        load_query_stats(lse_s + buf * MMA_BWD_COLS, D_s + buf * MMA_BWD_COLS, lse, D, b * NH + h, q0, MMA_BWD_COLS,
                         T, ATTN_LOG2E);
    };
    issue(0, 0);
    cp_async_commit();

    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    int wk = k0 + warp * 16;  // the warp's first key; its rows are wk + g and wk + g + 8
    float dk[HS / 8][4], dv[HS / 8][4];
    UNROLL for (int j = 0; j < HS / 8; j++) {
        UNROLL for (int i = 0; i < 4; i++) dk[j][i] = dv[j][i] = 0.0f;
    }

    for (int step = 0; step < steps; step++) {
        int buf = step & 1, q0 = (qt0 + step % nqt) * MMA_BWD_COLS;
        if (step + 1 < steps) issue(step + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* Qt = Qs + buf * MMA_BWD_COLS * LD;
        const bf16* dOt = dOs + buf * MMA_BWD_COLS * LD;
        const float* ls = lse_s + buf * MMA_BWD_COLS;
        const float* Ds = D_s + buf * MMA_BWD_COLS;

        if (q0 + MMA_BWD_COLS - 1 >= wk) {  // some query of the tile sees some key of the warp
            float st[NT][4], dpt[NT][4];
            bwd_tile_products<HS, NT>(st, dpt, Ks, Qt, Vs, dOt, warp * 16);
            // Element i of n-tile j: key wk + g + 8(i/2), query q0 + 8j + 2t + i%2.
            UNROLL for (int j = 0; j < NT; j++) {
                UNROLL for (int i = 0; i < 4; i++) {
                    int c = 8 * j + 2 * t + (i & 1), key = wk + g + 8 * (i >> 1);
                    float p = q0 + c >= key ? exp2f(st[j][i] * scale_log2 - ls[c]) : 0.0f;
                    st[j][i] = p;
                    dpt[j][i] = p * (dpt[j][i] - Ds[c]) * scale;
                }
            }
            product_pv<HS, NT>(dv, st, dOt, 0);
            product_pv<HS, NT>(dk, dpt, Qt, 0);
        }
        __syncthreads();
    }

    const float one[2] = {1.0f, 1.0f};
    bf16* dtok = dqkv + (size_t)b * T * stride;
    store_rows<HS>(dtok + (size_t)(NH + kvh) * HS, dk, wk, T, stride, one);
    store_rows<HS>(dtok + (size_t)(NH + NKV + kvh) * HS, dv, wk, T, stride, one);
}

// dQ: grid (B * NH, query blocks), the longest first. A block owns 64 queries of
// head h (warp w: queries 16w..16w+15) and streams 32-key tiles of K and V:
// S = Q_w K^T, dP = dO_w V^T (16 x 32), dQ_w += dS K.
template <int HS>
__global__ void KERNEL_BOUNDS(MMA_BWD_WARPS * WARP_SIZE, 2)
    attention_backward_dq_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                     const float* D, int T, int NH, int NKV, float scale, float scale_log2) {
    const int LD = MmaTile<HS>::LD, NT = MMA_BWD_COLS / 8;
    extern __shared__ __align__(128) unsigned char attn_mma_smem[];
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * MMA_BWD_ROWS;
    size_t stride = (size_t)(NH + 2 * NKV) * HS, ostride = (size_t)NH * HS;
    const bf16* tok = qkv + (size_t)b * T * stride;
    const bf16* ksrc = tok + (size_t)(NH + kvh) * HS;
    const bf16* vsrc = tok + (size_t)(NH + NKV + kvh) * HS;
    // Resident: Q, dO [64][LD]; streamed: K, V [2][32][LD]; lse, D [64] (per query).
    BwdSmem<HS> sm = bwd_smem_load<HS>(attn_mma_smem, tok + (size_t)h * HS, stride,
                                       dout + (size_t)b * T * ostride + (size_t)h * HS, ostride, q0, T);
    bf16 *Qs = sm.res0, *dOs = sm.res1, *Ks = sm.str0, *Vs = sm.str1;
    float *lse_s = sm.lse, *D_s = sm.D;
    async_tile<MMA_BWD_COLS, HS>(Ks, ksrc, 0, T, stride);
    async_tile<MMA_BWD_COLS, HS>(Vs, vsrc, 0, T, stride);
    cp_async_commit();
    load_query_stats(lse_s, D_s, lse, D, bh, q0, MMA_BWD_ROWS, T, ATTN_LOG2E);

    int last = min(q0 + MMA_BWD_ROWS, T) - 1;
    int nkt = last / MMA_BWD_COLS + 1;
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    int wq = q0 + warp * 16;
    float dq[HS / 8][4];
    UNROLL for (int j = 0; j < HS / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

    for (int kt = 0; kt < nkt; kt++) {
        int buf = kt & 1, k0 = kt * MMA_BWD_COLS;
        if (kt + 1 < nkt) {
            async_tile<MMA_BWD_COLS, HS>(Ks + (buf ^ 1) * MMA_BWD_COLS * LD, ksrc, k0 + MMA_BWD_COLS, T, stride);
            async_tile<MMA_BWD_COLS, HS>(Vs + (buf ^ 1) * MMA_BWD_COLS * LD, vsrc, k0 + MMA_BWD_COLS, T, stride);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* Kt = Ks + buf * MMA_BWD_COLS * LD;
        const bf16* Vt = Vs + buf * MMA_BWD_COLS * LD;

        if (k0 <= wq + 15) {
            float s[NT][4], dp[NT][4];
            bwd_tile_products<HS, NT>(s, dp, Qs, Kt, dOs, Vt, warp * 16);
            UNROLL for (int j = 0; j < NT; j++) {
                UNROLL for (int i = 0; i < 4; i++) {
                    int row = warp * 16 + g + 8 * (i >> 1), key = k0 + 8 * j + 2 * t + (i & 1);
                    float p = key <= q0 + row ? exp2f(s[j][i] * scale_log2 - lse_s[row]) : 0.0f;
                    dp[j][i] = p * (dp[j][i] - D_s[row]) * scale;
                }
            }
            product_pv<HS, NT>(dq, dp, Kt, 0);
        }
        __syncthreads();
    }

    const float one[2] = {1.0f, 1.0f};
    store_rows<HS>(dqkv + (size_t)b * T * stride + (size_t)h * HS, dq, wq, T, stride, one);
}

// ---- launchers ---------------------------------------------------------------------------------------------------

// The query or key blocks go in gridDim.y (at most 65535).
static void check_grid(int rows, int per_block, const char* what) {
    if ((rows + per_block - 1) / per_block > 65535)
        fatal("attention (%s): T=%d needs more than 65535 blocks of %d rows", what, rows, per_block);
}

template <int HS>
static void forward_launch(Backend* be, bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV) {
    size_t smem = mma_forward_smem<HS>();
    auto kernel = attention_forward_mma_kernel<HS>;
    attention_set_smem(be, (const void*)kernel, smem, "attention forward (mma)");
    check_grid(T, MMA_FWD_Q, "forward");
    dim3 grid((unsigned)(B * NH), (unsigned)ceil_div((size_t)T, MMA_FWD_Q));
    float scale_log2 = ATTN_LOG2E / sqrtf((float)HS);
    LAUNCH(kernel, grid, MMA_FWD_WARPS * WARP_SIZE, smem, cuda_stream(be), out, lse, qkv, T, NH, NKV, scale_log2);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static void backward_launch(Backend* be, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                            const float* lse, int B, int T, int NH, int NKV) {
    size_t rows = (size_t)B * T * NH;
    float* D = (float*)cuda_scratch(be, rows * sizeof(float));
    auto dot = attention_mma_dot_kernel<HS>;
    LAUNCH(dot, grid_for(rows * (HS / 8), 256, 1), 256, 0, cuda_stream(be), D, dout, out, B, T, NH);
    CUDA_CHECK_LAUNCH();

    size_t smem = mma_backward_smem<HS>();
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * ATTN_LOG2E;
    check_grid(T, MMA_BWD_ROWS, "backward");
    auto kv = attention_backward_dkdv_mma_kernel<HS>;
    attention_set_smem(be, (const void*)kv, smem, "attention backward dK/dV (mma)");
    dim3 kv_grid((unsigned)(B * NKV), (unsigned)ceil_div((size_t)T, MMA_BWD_ROWS));
    LAUNCH(kv, kv_grid, MMA_BWD_WARPS * WARP_SIZE, smem, cuda_stream(be), dqkv, dout, qkv, lse, D, T, NH, NKV, scale,
           scale_log2);
    CUDA_CHECK_LAUNCH();
    auto q = attention_backward_dq_mma_kernel<HS>;
    attention_set_smem(be, (const void*)q, smem, "attention backward dQ (mma)");
    dim3 q_grid((unsigned)(B * NH), (unsigned)ceil_div((size_t)T, MMA_BWD_ROWS));
    LAUNCH(q, q_grid, MMA_BWD_WARPS * WARP_SIZE, smem, cuda_stream(be), dqkv, dout, qkv, lse, D, T, NH, NKV, scale,
           scale_log2);
    CUDA_CHECK_LAUNCH();
}

static void check_heads(int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
        fatal("attention: %d query heads are not a multiple of %d key/value heads", NH, NKV);
    if (!attention_mma_head_size(HS)) fatal("internal: no mma attention for head size %d", HS);
}

void attention_forward_mma(Backend* be, bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV,
                           int HS) {
    check_heads(NH, NKV, HS);
    if ((size_t)B * T == 0) return;
    switch (HS) {
        case 32: forward_launch<32>(be, out, lse, qkv, B, T, NH, NKV); return;
        case 64: forward_launch<64>(be, out, lse, qkv, B, T, NH, NKV); return;
        case 128: forward_launch<128>(be, out, lse, qkv, B, T, NH, NKV); return;
    }
}

void attention_backward_mma(Backend* be, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                            const float* lse, int B, int T, int NH, int NKV, int HS) {
    check_heads(NH, NKV, HS);
    if ((size_t)B * T == 0) return;
    switch (HS) {
        case 32: backward_launch<32>(be, dqkv, dout, qkv, out, lse, B, T, NH, NKV); return;
        case 64: backward_launch<64>(be, dqkv, dout, qkv, out, lse, B, T, NH, NKV); return;
        case 128: backward_launch<128>(be, dqkv, dout, qkv, out, lse, B, T, NH, NKV); return;
    }
}

// The C entry points the tests call: the contract's parameters, BF16 buffers.
extern "C" void cuda_attention_forward_native(Backend* be, void* out, float* lse, const void* qkv, int B, int T,
                                              int NH, int NKV, int HS) {
    if (be->dtype != DTYPE_BF16) fatal("attention (native mma): needs the BF16 backend");
    attention_forward_mma(be, (bf16*)out, lse, (const bf16*)qkv, B, T, NH, NKV, HS);
}
extern "C" void cuda_attention_backward_native(Backend* be, void* dqkv, const void* dout, const void* qkv,
                                               const void* out, const float* lse, int B, int T, int NH, int NKV,
                                               int HS) {
    if (be->dtype != DTYPE_BF16) fatal("attention (native mma): needs the BF16 backend");
    attention_backward_mma(be, (bf16*)dqkv, (const bf16*)dout, (const bf16*)qkv, (const bf16*)out, lse, B, T, NH,
                           NKV, HS);
}
