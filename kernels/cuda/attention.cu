// attention.cu: causal multi-head self-attention on the device, flash style:
// tiled over queries and keys with an online softmax, O(T) memory. Forward
// keeps only out and lse (B, NH, T); backward recomputes the probabilities
// from lse. No T x T matrix ever exists, so memory grows linearly with T.
//
// cuDNN's fused attention (attention_cudnn.cu) takes the call first where
// --attention chooses it; otherwise two implementations behind one dispatch:
// - attention_wmma.cu: BF16 on tensor cores (nvcuda::wmma 16x16x16, FP32
//   accumulators) for head sizes 32, 64, 128: the fast path.
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
// Layout (as kernels/ops.h): qkv (B, T, 3, NH, HS): token (b, t) has a 3C row,
// q of head h at h*HS, k at C + h*HS, v at 2C + h*HS; out and dout (B, T, C);
// lse (B, NH, T) natural-log log-sum-exp of the scaled scores.
#include <math.h>

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
__global__ void attention_forward_simt(T* out, float* lse, const T* qkv, int T_, int C, int NH, int HS, int R,
                                       float scale) {
    extern __shared__ float smem_f[];
    int ld = HS + 1;
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
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t stride = 3 * (size_t)C;
    const T* base = qkv + (size_t)b * T_ * stride + h * HS;
    int q0 = qb * R;
    load_rows(Qs, base, q0, R, T_, stride, HS);
    for (int i = threadIdx.x; i < R * ld; i += blockDim.x) Os[i] = 0.0f;
    for (int i = threadIdx.x; i < R; i += blockDim.x) {
        m_s[i] = -INFINITY;
        l_s[i] = 0.0f;
    }
    int tpr = blockDim.x / R;  // threads per row in the softmax step (8 or 16, inside one warp)

    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * R;
        __syncthreads();
        load_rows(Ks, base + C, k0, R, T_, stride, HS);
        load_rows(Vs, base + 2 * C, k0, R, T_, stride, HS);
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
    store_rows(out + (size_t)b * T_ * C + h * HS, Os, q0, R, T_, (size_t)C, HS);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        if (q0 + r < T_) lse[(size_t)bh * T_ + q0 + r] = m_s[r] + logf(l_s[r]);
    }
}

// ---- backward (CUDA cores) ---------------------------------------------------------------------------------

// D[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]: one warp per (b, t, h).
template <typename T>
__global__ void attention_backward_dot_kernel(float* D, const T* dout, const T* out, int B, int T_, int C, int NH) {
    int HS = C / NH;
    size_t rows = (size_t)B * T_ * NH;
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (w >= rows) return;
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

// Block: R keys of one (b, h); loops over the query blocks at or after it.
// Shared: K, V, dK, dV, Q, dO tiles; P and dS (R keys x R+1 queries); lse, D (R).
template <typename T>
__global__ void attention_backward_dkdv_simt(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                                             int T_, int C, int NH, int HS, int R, float scale) {
    extern __shared__ float smem_f[];
    int ld = HS + 1;
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
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t stride = 3 * (size_t)C;
    const T* base = qkv + (size_t)b * T_ * stride + h * HS;
    const T* gbase = dout + (size_t)b * T_ * C + h * HS;
    int k0 = kb * R;
    load_rows(Ks, base + C, k0, R, T_, stride, HS);
    load_rows(Vs, base + 2 * C, k0, R, T_, stride, HS);
    for (int i = threadIdx.x; i < 2 * R * ld; i += blockDim.x) dKs[i] = 0.0f;  // dKs and dVs

    for (int qb = kb; qb < nb; qb++) {
        int q0 = qb * R;
        __syncthreads();
        load_rows(Qs, base, q0, R, T_, stride, HS);
        load_rows(dOs, gbase, q0, R, T_, (size_t)C, HS);
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
    T* dbase = dqkv + (size_t)b * T_ * stride + h * HS;
    store_rows(dbase + C, dKs, k0, R, T_, stride, HS);
    store_rows(dbase + 2 * C, dVs, k0, R, T_, stride, HS);
}

// Block: R queries of one (b, h); loops over the key blocks up to it.
// Shared: Q, dO, dQ, K, V tiles; dS (R x R+1); lse, D (R).
template <typename T>
__global__ void attention_backward_dq_simt(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                                           int T_, int C, int NH, int HS, int R, float scale) {
    extern __shared__ float smem_f[];
    int ld = HS + 1;
    float* Qs = smem_f;
    float* dOs = Qs + R * ld;
    float* dQs = dOs + R * ld;
    float* Ks = dQs + R * ld;
    float* Vs = Ks + R * ld;
    float* dS = Vs + R * ld;
    float* lse_s = dS + R * (R + 1);
    float* D_s = lse_s + R;

    int qb = gridDim.x - 1 - blockIdx.x;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t stride = 3 * (size_t)C;
    const T* base = qkv + (size_t)b * T_ * stride + h * HS;
    int q0 = qb * R;
    load_rows(Qs, base, q0, R, T_, stride, HS);
    load_rows(dOs, dout + (size_t)b * T_ * C + h * HS, q0, R, T_, (size_t)C, HS);
    for (int i = threadIdx.x; i < R * ld; i += blockDim.x) dQs[i] = 0.0f;
    load_query_stats(lse_s, D_s, lse, D, bh, q0, R, T_, 1.0f);
    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * R;
        __syncthreads();
        load_rows(Ks, base + C, k0, R, T_, stride, HS);
        load_rows(Vs, base + 2 * C, k0, R, T_, stride, HS);
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
    store_rows(dqkv + (size_t)b * T_ * stride + h * HS, dQs, q0, R, T_, stride, HS);
}

// ---- dispatch ------------------------------------------------------------------------------------------------

// Rows per tile of the CUDA-core kernels: 32, or 16 for head sizes over 128
// (shared memory). Must divide SIMT_THREADS and give at most 32 threads per row.
static int simt_rows(int HS) { return HS <= 128 ? 32 : 16; }

static int check_shape(int B, int T, int C, int NH) {
    if (NH <= 0 || C % NH != 0) fatal("attention: C=%d is not a multiple of NH=%d", C, NH);
    int HS = C / NH;
    if (HS > 256) fatal("attention: head size %d is not supported by the CUDA backend (at most 256)", HS);
    return HS;
}

static int use_wmma(Backend* be, int HS, const void* a, const void* b, const void* c, const void* d) {
    return be->dtype == DTYPE_BF16 && attention_wmma_head_size(HS) && aligned_to(a, 16) && aligned_to(b, 16) &&
           aligned_to(c, 16) && aligned_to(d, 16) && attention_wmma_smem_bytes(HS) <= cuda_state(be)->smem_optin;
}

template <typename T>
static void forward_simt(Backend* be, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH) {
    int HS = C / NH, R = simt_rows(HS);
    size_t smem = (size_t)(4 * R * (HS + 1) + R * (R + 1) + 3 * R) * sizeof(float);
    auto kernel = attention_forward_simt<T>;
    attention_set_smem(be, (const void*)kernel, smem, "attention forward");
    dim3 grid((unsigned)ceil_div((size_t)T_, R), (unsigned)(B * NH));
    LAUNCH(kernel, grid, SIMT_THREADS, smem, cuda_stream(be), out, lse, qkv, T_, C, NH, HS, R, 1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
}

template <typename T>
static void backward_simt(Backend* be, T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int B,
                          int T_, int C, int NH) {
    int HS = C / NH, R = simt_rows(HS);
    float scale = 1.0f / sqrtf((float)HS);
    dim3 grid((unsigned)ceil_div((size_t)T_, R), (unsigned)(B * NH));
    size_t smem_kv = (size_t)(6 * R * (HS + 1) + 2 * R * (R + 1) + 2 * R) * sizeof(float);
    auto kv = attention_backward_dkdv_simt<T>;
    attention_set_smem(be, (const void*)kv, smem_kv, "attention backward (dK, dV)");
    LAUNCH(kv, grid, SIMT_THREADS, smem_kv, cuda_stream(be), dqkv, dout, qkv, lse, D, T_, C, NH, HS, R, scale);
    CUDA_CHECK_LAUNCH();
    size_t smem_q = (size_t)(5 * R * (HS + 1) + R * (R + 1) + 2 * R) * sizeof(float);
    auto q = attention_backward_dq_simt<T>;
    attention_set_smem(be, (const void*)q, smem_q, "attention backward (dQ)");
    LAUNCH(q, grid, SIMT_THREADS, smem_q, cuda_stream(be), dqkv, dout, qkv, lse, D, T_, C, NH, HS, R, scale);
    CUDA_CHECK_LAUNCH();
}

void cuda_attention_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
    int HS = check_shape(B, T, C, NH);
    if ((size_t)B * T * C == 0) return;
    // --attention: cuDNN's fused attention where chosen and possible (attention_cudnn.cu).
    if (attention_cudnn_use(be, 0, B, T, NH, NH, HS, out, lse, qkv, qkv)) {
        attention_cudnn_forward(be, out, lse, qkv, B, T, NH, NH, HS);
        return;
    }
    if (use_wmma(be, HS, out, qkv, out, qkv)) {
        attention_forward_wmma(be, (bf16*)out, lse, (const bf16*)qkv, B, T, C, NH);
    } else if (be->dtype == DTYPE_BF16) {
        forward_simt(be, (bf16*)out, lse, (const bf16*)qkv, B, T, C, NH);
    } else {
        forward_simt(be, (float*)out, lse, (const float*)qkv, B, T, C, NH);
    }
}

template <typename T>
static float* backward_dot(Backend* be, const T* dout, const T* out, int B, int T_, int C, int NH) {
    size_t rows = (size_t)B * T_ * NH;
    float* D = (float*)cuda_scratch(be, rows * sizeof(float));
    auto kernel = attention_backward_dot_kernel<T>;
    LAUNCH(kernel, grid_for(rows * WARP_SIZE, 256, 1), 256, 0, cuda_stream(be), D, dout, out, B, T_, C, NH);
    CUDA_CHECK_LAUNCH();
    return D;
}

void cuda_attention_backward(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                             const float* lse, int B, int T, int C, int NH) {
    int HS = check_shape(B, T, C, NH);
    if ((size_t)B * T * C == 0) return;
    if (attention_cudnn_use(be, 1, B, T, NH, NH, HS, dqkv, dout, qkv, out)) {
        attention_cudnn_backward(be, dqkv, dout, qkv, out, lse, B, T, NH, NH, HS);
        return;
    }
    if (be->dtype == DTYPE_BF16) {
        const float* D = backward_dot(be, (const bf16*)dout, (const bf16*)out, B, T, C, NH);
        if (use_wmma(be, HS, dqkv, dout, qkv, out))
            attention_backward_wmma(be, (bf16*)dqkv, (const bf16*)dout, (const bf16*)qkv, lse, D, B, T, C, NH);
        else
            backward_simt(be, (bf16*)dqkv, (const bf16*)dout, (const bf16*)qkv, lse, D, B, T, C, NH);
    } else {
        const float* D = backward_dot(be, (const float*)dout, (const float*)out, B, T, C, NH);
        backward_simt(be, (float*)dqkv, (const float*)dout, (const float*)qkv, lse, D, B, T, C, NH);
    }
}
