// attention.cu: causal multi-head self-attention on the device, flash style:
// tiled over queries and keys with an online softmax, O(T) memory. Forward
// keeps only out and lse (B, NH, T); backward recomputes the probabilities
// from lse. No T x T matrix ever exists, so memory grows linearly with T.
//
// cuDNN's fused attention (attention_cudnn.cu) takes the call first where
// --attention chooses it; otherwise two implementations behind one dispatch:
// - attention_mma.cu: BF16 on tensor cores (mma.sync m16n8k16, FP32
//   accumulators, FlashAttention-2 style) for head sizes 32, 64, 128: the fast path.
// - this file: CUDA-core kernels in FP32 arithmetic for any head size up to
//   256, templated on the storage type: the FP32 path (which must match the
//   CPU to ~1e-5, so no TF32) and the fallback for other BF16 head sizes.
//
// Backward is deterministic without atomics: one kernel owns a block of keys
// and loops over the query blocks that see it (dK, dV), another owns a block
// of queries and loops over its keys (dQ). Each recomputes the scores it
// needs; that costs 7 instead of 5 tile products per tile pair, the price of
// not accumulating dQ with float atomics in a scheduling-dependent order.
//
// Grouped-query attention: NH query heads read NKV key/value heads (query
// head h reads kv head h / (NH/NKV); GPT-2 has NKV = NH). The dK/dV kernels
// own a block of keys of one kv head and loop over its query heads in order,
// so a kv head's gradient sums its group's terms without atomics.
//
// Layout (as kernels/ops.h): qkv (B, T, NH + 2*NKV, HS): token (b, t) has a
// row of NH query heads, then NKV key heads, then NKV value heads (AttnLayout
// in attention.cuh has the offsets); out and dout (B, T, NH, HS); lse
// (B, NH, T) natural-log log-sum-exp of the scaled scores.
#include <math.h>
#include <stdio.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_cudnn.cuh"

#define SIMT_THREADS 256

void attention_set_smem(Backend* be, const void* kernel, size_t bytes, const char* name) {
    CudaState* s = cuda_state(be);
    if (bytes > s->smem_optin) {
        fatal("attention: %s needs %zu bytes of shared memory per block, the GPU allows %zu", name, bytes,
              s->smem_optin);
    }
    if (bytes > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    }
}

// ---- tiles in shared memory (CUDA-core kernels) --------------------------------------------------------
// Tiles are R rows x HS floats with row stride HS + 1 (conflict-free columns).

// Rows row0.. of a tile from src (rows `stride` apart); rows at or past T are zero.
template <typename T>
__device__ inline void load_rows(float* dst, const T* src, int row0, int rows, int T_, size_t stride, int HS) {
    for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        dst[r * (HS + 1) + d] = row0 + r < T_ ? to_float(src[(size_t)(row0 + r) * stride + d]) : 0.0f;
    }
}

template <typename T>
__device__ inline void store_rows(T* dst, const float* src, int row0, int rows, int T_, size_t stride, int HS) {
    for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        if (row0 + r < T_) dst[(size_t)(row0 + r) * stride + d] = from_float<T>(src[r * (HS + 1) + d]);
    }
}

__device__ inline float dot_rows(const float* a, const float* b, int HS) {
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s = fmaf(a[d], b[d], s);
    return s;
}

// ---- forward (CUDA cores) --------------------------------------------------------------------------------

// Block: R queries of one (b, h). Shared: Q, K, V, O tiles; S (R x R+1); m, l, alpha (R).
template <typename T>
__global__ void attention_forward_simt(T* out, float* lse, const T* qkv, int T_, AttnLayout L, int R, float scale) {
    extern __shared__ float smem_f[];
    int HS = L.HS, ld = HS + 1;
    float* Qs = smem_f;
    float* Ks = Qs + R * ld;
    float* Vs = Ks + R * ld;
    float* Os = Vs + R * ld;
    float* S = Os + R * ld;
    float* m_s = S + R * (R + 1);
    float* l_s = m_s + R;
    float* a_s = l_s + R;

    int blocks = gridDim.x;
    int qb = blocks - 1 - blockIdx.x;  // the longest (last) query blocks start first
    int bh = blockIdx.y, b = bh / L.NH, h = bh % L.NH;
    size_t stride = L.stride();
    const T* base = qkv + (size_t)b * T_ * stride;
    int q0 = qb * R;
    load_rows(Qs, base + L.q(h), q0, R, T_, stride, HS);
    for (int i = threadIdx.x; i < R * ld; i += blockDim.x) Os[i] = 0.0f;
    for (int i = threadIdx.x; i < R; i += blockDim.x) {
        m_s[i] = -INFINITY;
        l_s[i] = 0.0f;
    }
    int tpr = blockDim.x / R;  // threads per row in the softmax step (8 or 16, inside one warp)

    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * R;
        __syncthreads();
        load_rows(Ks, base + L.k(h), k0, R, T_, stride, HS);
        load_rows(Vs, base + L.v(h), k0, R, T_, stride, HS);
        __syncthreads();
        for (int e = threadIdx.x; e < R * R; e += blockDim.x) {
            int r = e / R, j = e % R;
            int key = k0 + j, q = q0 + r;
            S[r * (R + 1) + j] = key <= q && key < T_ ? dot_rows(Qs + r * ld, Ks + j * ld, HS) * scale : -INFINITY;
        }
        __syncthreads();
        {
            int r = threadIdx.x / tpr, sub = threadIdx.x % tpr;
            float* srow = S + r * (R + 1);
            float mx = -INFINITY;
            for (int j = sub; j < R; j += tpr) mx = fmaxf(mx, srow[j]);
            for (int o = tpr / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
            float m_old = m_s[r], m_new = fmaxf(m_old, mx);
            float m_use = m_new == -INFINITY ? 0.0f : m_new;
            float sum = 0.0f;
            for (int j = sub; j < R; j += tpr) {
                float p = expf(srow[j] - m_use);
                srow[j] = p;
                sum += p;
            }
            for (int o = tpr / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
            __syncwarp();
            if (sub == 0) {
                float alpha = expf(m_old - m_use);
                a_s[r] = alpha;
                l_s[r] = l_s[r] * alpha + sum;
                m_s[r] = m_new;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < R * HS; e += blockDim.x) {
            int r = e / HS, d = e % HS;
            const float* p = S + r * (R + 1);
            float o = Os[r * ld + d] * a_s[r];
            for (int j = 0; j < R; j++) o = fmaf(p[j], Vs[j * ld + d], o);
            Os[r * ld + d] = o;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < R * HS; e += blockDim.x) {
        int r = e / HS, d = e % HS;
        Os[r * ld + d] /= l_s[r];
    }
    __syncthreads();
    store_rows(out + (size_t)b * T_ * L.out_stride() + L.q(h), Os, q0, R, T_, L.out_stride(), HS);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        if (q0 + r < T_) lse[(size_t)bh * T_ + q0 + r] = m_s[r] + logf(l_s[r]);
    }
}

// ---- backward (CUDA cores) ---------------------------------------------------------------------------------

// D[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]: one warp per (b, t, h).
template <typename T>
__global__ void attention_backward_dot_kernel(float* D, const T* dout, const T* out, int B, int T_, int NH, int HS) {
    size_t C = (size_t)NH * HS;
    size_t rows = (size_t)B * T_ * NH;
    size_t warps = (size_t)gridDim.x * blockDim.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    // Grid-stride over rows: grid_for caps the grid, so one pass may not cover them all.
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; w < rows; w += warps) {
        int h = (int)(w % NH);
        size_t bt = w / NH;
        int b = (int)(bt / T_), t = (int)(bt % T_);
        const T* g = dout + bt * C + h * HS;
        const T* o = out + bt * C + h * HS;
        float s = 0.0f;
        for (int d = lane; d < HS; d += WARP_SIZE) s += to_float(g[d]) * to_float(o[d]);
        s = warp_sum(s);
        if (lane == 0) D[((size_t)b * NH + h) * T_ + t] = s;
    }
}

// Block: R keys of one (b, h); loops over the query blocks at or after it.
// Shared: K, V, dK, dV, Q, dO tiles; P and dS (R keys x R+1 queries); lse, D (R).
template <typename T>
__global__ void attention_backward_dkdv_simt(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                                             int T_, AttnLayout L, int R, float scale) {
    extern __shared__ float smem_f[];
    int HS = L.HS, ld = HS + 1;
    float* Ks = smem_f;
    float* Vs = Ks + R * ld;
    float* dKs = Vs + R * ld;
    float* dVs = dKs + R * ld;
    float* Qs = dVs + R * ld;
    float* dOs = Qs + R * ld;
    float* P = dOs + R * ld;
    float* dS = P + R * (R + 1);
    float* lse_s = dS + R * (R + 1);
    float* D_s = lse_s + R;

    int nb = gridDim.x;
    int kb = blockIdx.x;  // the first key blocks have the most queries: they start first
    int bkv = blockIdx.y, b = bkv / L.NKV, kv = bkv % L.NKV;
    size_t stride = L.stride(), ostride = L.out_stride();
    const T* base = qkv + (size_t)b * T_ * stride;
    const T* gbase = dout + (size_t)b * T_ * ostride;
    int k0 = kb * R;
    int h0 = kv * L.group();
    load_rows(Ks, base + L.k(h0), k0, R, T_, stride, HS);
    load_rows(Vs, base + L.v(h0), k0, R, T_, stride, HS);
    for (int i = threadIdx.x; i < 2 * R * ld; i += blockDim.x) dKs[i] = 0.0f;  // dKs and dVs

    // The query heads of this kv head in order, each over its query blocks.
    for (int step = 0; step < L.group() * (nb - kb); step++) {
        int h = h0 + step / (nb - kb), qb = kb + step % (nb - kb);
        int bh = b * L.NH + h;
        int q0 = qb * R;
        __syncthreads();
        load_rows(Qs, base + L.q(h), q0, R, T_, stride, HS);
        load_rows(dOs, gbase + L.q(h), q0, R, T_, ostride, HS);
        load_query_stats(lse_s, D_s, lse, D, bh, q0, R, T_, 1.0f);
        __syncthreads();
        for (int e = threadIdx.x; e < R * R; e += blockDim.x) {
            int j = e / R, i = e % R;  // key j, query i
            int key = k0 + j, q = q0 + i;
            float p = 0.0f, ds = 0.0f;
            if (q >= key && q < T_) {
                p = expf(dot_rows(Qs + i * ld, Ks + j * ld, HS) * scale - lse_s[i]);
                float dp = dot_rows(dOs + i * ld, Vs + j * ld, HS);
                ds = p * (dp - D_s[i]) * scale;
            }
            P[j * (R + 1) + i] = p;
            dS[j * (R + 1) + i] = ds;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < R * HS; e += blockDim.x) {
            int j = e / HS, d = e % HS;
            const float* pj = P + j * (R + 1);
            const float* sj = dS + j * (R + 1);
            float dv = dVs[j * ld + d], dk = dKs[j * ld + d];
            for (int i = 0; i < R; i++) {
                dv = fmaf(pj[i], dOs[i * ld + d], dv);
                dk = fmaf(sj[i], Qs[i * ld + d], dk);
            }
            dVs[j * ld + d] = dv;
            dKs[j * ld + d] = dk;
        }
    }
    __syncthreads();
    T* dbase = dqkv + (size_t)b * T_ * stride;
    store_rows(dbase + L.k(h0), dKs, k0, R, T_, stride, HS);
    store_rows(dbase + L.v(h0), dVs, k0, R, T_, stride, HS);
}

// Block: R queries of one (b, h); loops over the key blocks up to it.
// Shared: Q, dO, dQ, K, V tiles; dS (R x R+1); lse, D (R).
template <typename T>
__global__ void attention_backward_dq_simt(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                                           int T_, AttnLayout L, int R, float scale) {
    extern __shared__ float smem_f[];
    int HS = L.HS, ld = HS + 1;
    float* Qs = smem_f;
    float* dOs = Qs + R * ld;
    float* dQs = dOs + R * ld;
    float* Ks = dQs + R * ld;
    float* Vs = Ks + R * ld;
    float* dS = Vs + R * ld;
    float* lse_s = dS + R * (R + 1);
    float* D_s = lse_s + R;

    int qb = gridDim.x - 1 - blockIdx.x;
    int bh = blockIdx.y, b = bh / L.NH, h = bh % L.NH;
    size_t stride = L.stride();
    const T* base = qkv + (size_t)b * T_ * stride;
    int q0 = qb * R;
    load_rows(Qs, base + L.q(h), q0, R, T_, stride, HS);
    load_rows(dOs, dout + (size_t)b * T_ * L.out_stride() + L.q(h), q0, R, T_, L.out_stride(), HS);
    for (int i = threadIdx.x; i < R * ld; i += blockDim.x) dQs[i] = 0.0f;
    load_query_stats(lse_s, D_s, lse, D, bh, q0, R, T_, 1.0f);
    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * R;
        __syncthreads();
        load_rows(Ks, base + L.k(h), k0, R, T_, stride, HS);
        load_rows(Vs, base + L.v(h), k0, R, T_, stride, HS);
        __syncthreads();
        for (int e = threadIdx.x; e < R * R; e += blockDim.x) {
            int i = e / R, j = e % R;  // query i, key j
            int key = k0 + j, q = q0 + i;
            float ds = 0.0f;
            if (key <= q && q < T_) {
                float p = expf(dot_rows(Qs + i * ld, Ks + j * ld, HS) * scale - lse_s[i]);
                float dp = dot_rows(dOs + i * ld, Vs + j * ld, HS);
                ds = p * (dp - D_s[i]) * scale;
            }
            dS[i * (R + 1) + j] = ds;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < R * HS; e += blockDim.x) {
            int i = e / HS, d = e % HS;
            const float* si = dS + i * (R + 1);
            float dq = dQs[i * ld + d];
            for (int j = 0; j < R; j++) dq = fmaf(si[j], Ks[j * ld + d], dq);
            dQs[i * ld + d] = dq;
        }
    }
    __syncthreads();
    store_rows(dqkv + (size_t)b * T_ * stride + L.q(h), dQs, q0, R, T_, stride, HS);
}

// ---- dispatch ------------------------------------------------------------------------------------------------

// Rows per tile of the CUDA-core kernels: 32, or 16 for head sizes over 128
// (shared memory). Must divide SIMT_THREADS and give at most 32 threads per row.
static int simt_rows(int HS) { return HS <= 128 ? 32 : 16; }

static AttnLayout check_shape(int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
        fatal("attention: NH=%d query heads are not a multiple of NKV=%d key/value heads", NH, NKV);
    if (HS <= 0 || HS > 256) fatal("attention: head size %d is not supported by the CUDA backend (1 to 256)", HS);
    AttnLayout L = {NH, NKV, HS};
    return L;
}

// Whether the tensor-core kernels take this call. In BF16 a call they cannot
// take falls back to the CUDA-core kernels (FP32 math, several times slower),
// and the first such call says so on stderr, with the reason.
static int use_mma(Backend* be, int HS, const void* a, const void* b, const void* c, const void* d) {
    if (be->dtype != DTYPE_BF16) return 0;
    char why[160] = "";
    if (!attention_mma_head_size(HS))
        snprintf(why, sizeof why, "head size %d has no tensor-core kernel (32, 64 and 128 have)", HS);
    else if (!(aligned_to(a, 16) && aligned_to(b, 16) && aligned_to(c, 16) && aligned_to(d, 16)))
        snprintf(why, sizeof why, "a buffer is not 16-byte aligned");
    else if (attention_mma_smem_bytes(HS) > cuda_state(be)->smem_optin)
        snprintf(why, sizeof why, "head size %d needs %zu bytes of shared memory, the GPU allows %zu", HS,
                 attention_mma_smem_bytes(HS), cuda_state(be)->smem_optin);
    if (!why[0]) return 1;
    static int said;
    if (!said) {
        said = 1;
        fprintf(stderr, "train_gpt: note: attention runs on the CUDA-core kernels (FP32 math, slower): %s\n", why);
    }
    return 0;
}

template <typename T>
static void forward_simt(Backend* be, T* out, float* lse, const T* qkv, int B, int T_, AttnLayout L) {
    int HS = L.HS, R = simt_rows(HS);
    size_t smem = (size_t)(4 * R * (HS + 1) + R * (R + 1) + 3 * R) * sizeof(float);
    auto kernel = attention_forward_simt<T>;
    attention_set_smem(be, (const void*)kernel, smem, "attention forward");
    dim3 grid((unsigned)ceil_div((size_t)T_, R), grid_y((size_t)B * L.NH, "attention"));
    LAUNCH(kernel, grid, SIMT_THREADS, smem, cuda_stream(be), out, lse, qkv, T_, L, R, 1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
}

template <typename T>
static void backward_simt(Backend* be, T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int B,
                          int T_, AttnLayout L) {
    int HS = L.HS, R = simt_rows(HS);
    float scale = 1.0f / sqrtf((float)HS);
    size_t smem_kv = (size_t)(6 * R * (HS + 1) + 2 * R * (R + 1) + 2 * R) * sizeof(float);
    auto kv = attention_backward_dkdv_simt<T>;
    attention_set_smem(be, (const void*)kv, smem_kv, "attention backward (dK, dV)");
    dim3 grid_kv((unsigned)ceil_div((size_t)T_, R), grid_y((size_t)B * L.NKV, "attention"));
    LAUNCH(kv, grid_kv, SIMT_THREADS, smem_kv, cuda_stream(be), dqkv, dout, qkv, lse, D, T_, L, R, scale);
    CUDA_CHECK_LAUNCH();
    size_t smem_q = (size_t)(5 * R * (HS + 1) + R * (R + 1) + 2 * R) * sizeof(float);
    auto q = attention_backward_dq_simt<T>;
    attention_set_smem(be, (const void*)q, smem_q, "attention backward (dQ)");
    dim3 grid_q((unsigned)ceil_div((size_t)T_, R), grid_y((size_t)B * L.NH, "attention"));
    LAUNCH(q, grid_q, SIMT_THREADS, smem_q, cuda_stream(be), dqkv, dout, qkv, lse, D, T_, L, R, scale);
    CUDA_CHECK_LAUNCH();
}

void cuda_attention_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                            int HS) {
    AttnLayout L = check_shape(NH, NKV, HS);
    if ((size_t)B * T == 0) return;
    // --attention: cuDNN's fused attention where chosen and possible (attention_cudnn.cu).
    if (attention_cudnn_use(be, 0, B, T, NH, NKV, HS, out, lse, qkv, qkv)) {
        attention_cudnn_forward(be, out, lse, qkv, B, T, NH, NKV, HS);
        return;
    }
    if (use_mma(be, HS, out, qkv, out, qkv)) {
        attention_forward_mma(be, (bf16*)out, lse, (const bf16*)qkv, B, T, NH, NKV, HS);
    } else if (be->dtype == DTYPE_BF16) {
        forward_simt(be, (bf16*)out, lse, (const bf16*)qkv, B, T, L);
    } else {
        forward_simt(be, (float*)out, lse, (const float*)qkv, B, T, L);
    }
}

size_t cuda_attention_scratch_bytes(int B, int T, int NH) { return (size_t)B * T * NH * sizeof(float); }

template <typename T>
static float* backward_dot(Backend* be, const T* dout, const T* out, int B, int T_, AttnLayout L) {
    size_t rows = (size_t)B * T_ * L.NH;
    float* D = (float*)cuda_scratch(be, cuda_attention_scratch_bytes(B, T_, L.NH));
    auto kernel = attention_backward_dot_kernel<T>;
    LAUNCH(kernel, grid_for(rows * WARP_SIZE, 256, 1), 256, 0, cuda_stream(be), D, dout, out, B, T_, L.NH, L.HS);
    CUDA_CHECK_LAUNCH();
    return D;
}

void cuda_attention_backward(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                             const float* lse, int B, int T, int NH, int NKV, int HS) {
    AttnLayout L = check_shape(NH, NKV, HS);
    if ((size_t)B * T == 0) return;
    if (attention_cudnn_use(be, 1, B, T, NH, NKV, HS, dqkv, dout, qkv, out)) {
        attention_cudnn_backward(be, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS);
        return;
    }
    if (use_mma(be, HS, dqkv, dout, qkv, out)) {
        attention_backward_mma(be, (bf16*)dqkv, (const bf16*)dout, (const bf16*)qkv, (const bf16*)out, lse, B, T, NH,
                               NKV, HS);
    } else if (be->dtype == DTYPE_BF16) {
        const float* D = backward_dot(be, (const bf16*)dout, (const bf16*)out, B, T, L);
        backward_simt(be, (bf16*)dqkv, (const bf16*)dout, (const bf16*)qkv, lse, D, B, T, L);
    } else {
        const float* D = backward_dot(be, (const float*)dout, (const float*)out, B, T, L);
        backward_simt(be, (float*)dqkv, (const float*)dout, (const float*)qkv, lse, D, B, T, L);
    }
}
