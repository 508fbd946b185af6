// encoder.cu: token + position embeddings on the device, forward and a
// deterministic backward.
//
// Backward without float atomics and without the host: dwte[token] must add
// the rows of every position holding that token, in a fixed order. The
// positions are sorted by (token, position) on the device (a bitonic sort of
// 64-bit keys token << 32 | position; the keys are unique, so any correct
// sort gives the same order), and then one block walks each run of equal
// tokens in position order, starting from dwte's old value. That is the CPU
// backend's order exactly, so in FP32 the result matches it bit for bit.
// llm.c buckets the tokens on the host instead, which needs the tokens there
// and a host synchronisation every step.
#include "kernels/cuda/cuda_backend.cuh"

// ---- forward --------------------------------------------------------------------------------------

template <typename T, int V>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int N, int T_, int C) {
    int groups = C / V;
    size_t total = (size_t)N * groups, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int row = (int)(i / groups), c = (int)(i % groups) * V;
        float e[V], p[V], o[V];
        load_pack<T, V>(e, wte + (size_t)tokens[row] * C + c);
        if (wpe) {
            load_pack<T, V>(p, wpe + (size_t)(row % T_) * C + c);
            UNROLL for (int k = 0; k < V; k++) o[k] = e[k] + p[k];
        } else {
            UNROLL for (int k = 0; k < V; k++) o[k] = e[k];  // no learned positions (Llama)
        }
        store_pack<T, V>(out + (size_t)row * C + c, o);
    }
}

template <typename T>
static void encoder_forward_typed(Backend* be, T* out, const int32_t* tokens, const T* wte,
                                  const T* wpe, int B, int T_, int C) {
    const int V = Vec16<T>::N;
    int N = B * T_;
    int vec = C % V == 0 && aligned_to(out, 16) && aligned_to(wte, 16) && aligned_to(wpe, 16);
    if (vec) {
        auto kernel = encoder_forward_kernel<T, V>;
        LAUNCH(kernel, grid_for((size_t)N * C / V, 256, 1), 256, 0, cuda_stream(be), out, tokens, wte, wpe, N, T_, C);
    } else {
        auto kernel = encoder_forward_kernel<T, 1>;
        LAUNCH(kernel, grid_for((size_t)N * C, 256, 1), 256, 0, cuda_stream(be), out, tokens, wte, wpe, N, T_, C);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_encoder_forward(Backend* be, void* out, const int32_t* tokens, const void* wte,
                          const void* wpe, int B, int T, int C) {
    if ((size_t)B * T * C == 0) return;
    if (be->dtype == DTYPE_BF16)
        encoder_forward_typed(be, (bf16*)out, tokens, (const bf16*)wte, (const bf16*)wpe, B, T, C);
    else
        encoder_forward_typed(be, (float*)out, tokens, (const float*)wte, (const float*)wpe, B, T, C);
}

// ---- sorting positions by token -----------------------------------------------------------------
// Bitonic sort of M = 2^k keys (padding keys are all ones and sort last). The
// network is the textbook one: for each merge size k = 2, 4, ..., M and each
// distance j = k/2, ..., 1, element i is compared with i ^ j, ascending when
// (i & k) == 0. Distances below SORT_CHUNK run in shared memory, one block per
// chunk of SORT_CHUNK keys; larger distances are one global pass each.
#define SORT_CHUNK 2048
#define SORT_THREADS (SORT_CHUNK / 2)

__global__ void make_sort_keys_kernel(uint64_t* keys, const int32_t* tokens, int N, int M) {
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < M; i += stride) {
        keys[i] = i < N ? ((uint64_t)(uint32_t)tokens[i] << 32) | (uint32_t)i : ~(uint64_t)0;
    }
}

__device__ inline void compare_exchange(uint64_t* a, uint64_t* b, int ascending) {
    uint64_t x = *a, y = *b;
    if ((x > y) == (ascending != 0)) {
        *a = y;
        *b = x;
    }
}

// Runs the steps (k, j) for j < SORT_CHUNK in shared memory: all of them
// (k = 2 .. SORT_CHUNK) when k_merge == 0, else only the distances
// SORT_CHUNK/2 .. 1 of merge size k_merge. `chunk` is min(M, SORT_CHUNK).
__global__ void bitonic_local_kernel(uint64_t* keys, int chunk, int k_merge) {
    __shared__ uint64_t s[SORT_CHUNK];
    size_t base = (size_t)blockIdx.x * chunk;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) s[i] = keys[base + i];
    __syncthreads();
    int k_first = k_merge ? k_merge : 2, k_last = k_merge ? k_merge : chunk;
    for (int k = k_first; k <= k_last; k <<= 1) {
        for (int j = (k_merge ? chunk : k) >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < chunk / 2; t += blockDim.x) {
                // t-th pair at distance j: the lower index has bit j clear.
                int lo = ((t / j) * 2 * j) + (t % j);
                size_t global_lo = base + lo;
                compare_exchange(&s[lo], &s[lo + j], (global_lo & k) == 0);
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) keys[base + i] = s[i];
}

__global__ void bitonic_global_kernel(uint64_t* keys, int M, int k, int j) {
    int pairs = M / 2, stride = gridDim.x * blockDim.x;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < pairs; t += stride) {
        int lo = ((t / j) * 2 * j) + (t % j);
        compare_exchange(&keys[lo], &keys[lo + j], (lo & k) == 0);
    }
}

static void sort_keys(Backend* be, uint64_t* keys, int M) {
    cudaStream_t st = cuda_stream(be);
    int chunk = M < SORT_CHUNK ? M : SORT_CHUNK;
    LAUNCH(bitonic_local_kernel, M / chunk, SORT_THREADS, 0, st, keys, chunk, 0);
    CUDA_CHECK_LAUNCH();
    for (int k = 2 * chunk; k <= M; k <<= 1) {
        for (int j = k / 2; j >= chunk; j >>= 1) {
            LAUNCH(bitonic_global_kernel, grid_for((size_t)M / 2, 256, 1), 256, 0, st, keys, M, k, j);
            CUDA_CHECK_LAUNCH();
        }
        LAUNCH(bitonic_local_kernel, M / chunk, SORT_THREADS, 0, st, keys, chunk, k);
        CUDA_CHECK_LAUNCH();
    }
}

// ---- backward ---------------------------------------------------------------------------------------

// Block x (grid-stride over sorted positions) starts work only where a run of
// equal tokens begins, then adds the run's dout rows in position order onto
// dwte[token]; its threads each own V channels (channel groups beyond one
// block go to blockIdx.y). A run is handled by exactly one block, so the grid
// size does not change any result.
template <typename T, int V>
__global__ void wte_backward_kernel(T* dwte, const T* dout, const uint64_t* sorted, int N, int C) {
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
    for (int s = blockIdx.x; s < N; s += gridDim.x) {
        uint32_t tok = (uint32_t)(sorted[s] >> 32);
        if (s > 0 && (uint32_t)(sorted[s - 1] >> 32) == tok) continue;
        if (c >= C) continue;
        // The run ends before the first key of a larger token (binary search,
        // so that the loop below has independent iterations and its loads
        // overlap instead of each waiting on the previous comparison).
        uint64_t limit = ((uint64_t)tok << 32) | 0xffffffffu;
        int lo = s + 1, hi = N;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (sorted[mid] <= limit) lo = mid + 1;
            else hi = mid;
        }
        float acc[V], g[V];
        T* dst = dwte + (size_t)tok * C + c;
        load_pack<T, V>(acc, dst);
        // Four rows in flight at a time (a frequent token can have thousands
        // of rows and one block walks them all), added in position order.
        int r = s;
        for (; r + 4 <= lo; r += 4) {
            float g4[4][V];
            UNROLL for (int u = 0; u < 4; u++) {
                uint32_t pos = (uint32_t)sorted[r + u];
                load_pack<T, V>(g4[u], dout + (size_t)pos * C + c);
            }
            UNROLL for (int u = 0; u < 4; u++) {
                UNROLL for (int k = 0; k < V; k++) acc[k] += g4[u][k];
            }
        }
        for (; r < lo; r++) {
            uint32_t pos = (uint32_t)sorted[r];
            load_pack<T, V>(g, dout + (size_t)pos * C + c);
            UNROLL for (int k = 0; k < V; k++) acc[k] += g[k];
        }
        store_pack<T, V>(dst, acc);
    }
}

// dwpe[t] += dout[0, t] + dout[1, t] + ... in batch order.
template <typename T, int V>
__global__ void wpe_backward_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
    int groups = C / V;
    size_t total = (size_t)T_ * groups, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int t = (int)(i / groups), c = (int)(i % groups) * V;
        float acc[V], g[V];
        T* dst = dwpe + (size_t)t * C + c;
        load_pack<T, V>(acc, dst);
        for (int b = 0; b < B; b++) {
            load_pack<T, V>(g, dout + ((size_t)b * T_ + t) * C + c);
            UNROLL for (int k = 0; k < V; k++) acc[k] += g[k];
        }
        store_pack<T, V>(dst, acc);
    }
}

template <typename T, int V>
static void encoder_backward_launch(Backend* be, T* dwte, T* dwpe, const T* dout, const uint64_t* sorted,
                                    int B, int T_, int C) {
    cudaStream_t st = cuda_stream(be);
    int N = B * T_;
    int groups = C / V;
    int threads = groups < 128 ? (groups + 31) / 32 * 32 : 128;
    dim3 grid((unsigned)(N < 4096 ? N : 4096), (unsigned)ceil_div(groups, threads));
    auto wte_kernel = wte_backward_kernel<T, V>;
    LAUNCH(wte_kernel, grid, threads, 0, st, dwte, dout, sorted, N, C);
    CUDA_CHECK_LAUNCH();
    if (!dwpe) return;  // no learned positions (Llama)
    auto wpe_kernel = wpe_backward_kernel<T, V>;
    LAUNCH(wpe_kernel, grid_for((size_t)T_ * groups, 256, 1), 256, 0, st, dwpe, dout, B, T_, C);
    CUDA_CHECK_LAUNCH();
}

// The sort keys: N rounded up to a power of two (the bitonic sort's size).
size_t cuda_encoder_scratch_bytes(int N) {
    size_t M = 1;
    while (M < (size_t)N) M <<= 1;
    return M * sizeof(uint64_t);
}

template <typename T>
static void encoder_backward_typed(Backend* be, T* dwte, T* dwpe, const T* dout, const int32_t* tokens,
                                   int B, int T_, int C) {
    int N = B * T_;
    int M = 1;
    while (M < N) M <<= 1;
    uint64_t* keys = (uint64_t*)cuda_scratch(be, cuda_encoder_scratch_bytes(N));
    LAUNCH(make_sort_keys_kernel, grid_for((size_t)M, 256, 1), 256, 0, cuda_stream(be), keys, tokens, N, M);
    CUDA_CHECK_LAUNCH();
    sort_keys(be, keys, M);
    const int V = Vec16<T>::N;
    if (C % V == 0 && aligned_to(dwte, 16) && aligned_to(dwpe, 16) && aligned_to(dout, 16))
        encoder_backward_launch<T, V>(be, dwte, dwpe, dout, keys, B, T_, C);
    else
        encoder_backward_launch<T, 1>(be, dwte, dwpe, dout, keys, B, T_, C);
}

void cuda_encoder_backward(Backend* be, void* dwte, void* dwpe, const void* dout,
                           const int32_t* tokens, int B, int T, int C) {
    if ((size_t)B * T * C == 0) return;
    if ((size_t)B * T > (size_t)1 << 30) fatal("encoder backward: %d x %d positions exceed 2^30", B, T);
    if (be->dtype == DTYPE_BF16)
        encoder_backward_typed(be, (bf16*)dwte, (bf16*)dwpe, (const bf16*)dout, tokens, B, T, C);
    else
        encoder_backward_typed(be, (float*)dwte, (float*)dwpe, (const float*)dout, tokens, B, T, C);
}
