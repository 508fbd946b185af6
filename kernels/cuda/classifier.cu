// classifier.cu: softmax cross-entropy over the real vocabulary fused with
// its gradient, on the device. One block per row of logits: the first pass
// keeps a running (max, sum of exp) per thread (online softmax) and combines
// them over the block in a fixed order; the second pass overwrites the row
// with dloss * (softmax - onehot) and zeroes the padded columns V..Vp-1. The
// logits are read twice (the second time mostly from L2) and written once, in
// their own dtype: no FP32 copy of the B x T x Vp matrix, no probabilities.
//
// A target outside [0, V) cannot stop the run from the device; its loss is
// written as NaN (the data loader already rejects such tokens).
#include <math.h>

#include "kernels/cuda/cuda_backend.cuh"

#define CE_THREADS 512

// Merges the running state (m, s) with (m2, s2): s is a sum of exp(x - m).
__device__ inline void online_merge(float* m, float* s, float m2, float s2) {
    float mx = fmaxf(*m, m2);
    if (mx == -INFINITY) return;  // both empty
    *s = *s * expf(*m - mx) + s2 * expf(m2 - mx);
    *m = mx;
}

template <typename T, int V>
__global__ void cross_entropy_kernel(float* losses, T* logits, const int32_t* targets, int Vreal,
                                     int Vp, float dloss) {
    __shared__ float sm[CE_THREADS / WARP_SIZE], ss[CE_THREADS / WARP_SIZE];
    __shared__ float row_max, row_inv_sum;
    int row = blockIdx.x;
    T* x = logits + (size_t)row * Vp;
    int target = targets[row];
    int target_ok = target >= 0 && target < Vreal;
    float target_logit = target_ok ? to_float(x[target]) : 0.0f;

    // Pass 1: per-thread online max and sum over packs of V, then the tail.
    float m = -INFINITY, s = 0.0f;
    int packs = Vreal / V;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        float v[V];
        load_pack<T, V>(v, x + (size_t)p * V);
        float pm = v[0];
        UNROLL for (int k = 1; k < V; k++) pm = fmaxf(pm, v[k]);
        float ps = 0.0f;
        UNROLL for (int k = 0; k < V; k++) ps += expf(v[k] - pm);
        online_merge(&m, &s, pm, ps);
    }
    for (int c = packs * V + threadIdx.x; c < Vreal; c += blockDim.x) online_merge(&m, &s, to_float(x[c]), 1.0f);
    // Warp, then block in warp order. The merge is symmetric in its two
    // arguments (a sum of two products), so butterfly partners get the same bits.
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(FULL_MASK, m, o), s2 = __shfl_xor_sync(FULL_MASK, s, o);
        online_merge(&m, &s, m2, s2);
    }
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = sm[0], bs = ss[0];
        for (int w = 1; w < (int)(blockDim.x / WARP_SIZE); w++) online_merge(&bm, &bs, sm[w], ss[w]);
        row_max = bm;
        row_inv_sum = 1.0f / bs;
        // A target of -1 is a pad (context parallelism's): no loss, a zero gradient.
        losses[row] = target == -1 ? 0.0f : target_ok ? bm + logf(bs) - target_logit : NAN;
    }
    __syncthreads();  // also orders the read of x[target] before the overwrite below
    if (dloss != 0.0f && target == -1) {
        for (int c = threadIdx.x; c < Vp; c += blockDim.x) x[c] = from_float<T>(0.0f);
        return;
    }
    if (dloss == 0.0f || !target_ok) return;

    // Pass 2: the gradient, in place.
    float mx = row_max, inv = row_inv_sum;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        float v[V];
        load_pack<T, V>(v, x + (size_t)p * V);
        UNROLL for (int k = 0; k < V; k++) {
            int c = p * V + k;
            v[k] = dloss * (expf(v[k] - mx) * inv - (c == target ? 1.0f : 0.0f));
        }
        store_pack<T, V>(x + (size_t)p * V, v);
    }
    for (int c = packs * V + threadIdx.x; c < Vreal; c += blockDim.x) {
        float v = to_float(x[c]);
        x[c] = from_float<T>(dloss * (expf(v - mx) * inv - (c == target ? 1.0f : 0.0f)));
    }
    for (int c = Vreal + threadIdx.x; c < Vp; c += blockDim.x) x[c] = from_float<T>(0.0f);
}

template <typename T>
static void cross_entropy_typed(Backend* be, float* losses, T* logits, const int32_t* targets, int N,
                                int V, int Vp, float dloss) {
    const int W = Vec16<T>::N;
    // Rows start on 16-byte boundaries when Vp is a multiple of the pack.
    if (Vp % W == 0 && aligned_to(logits, 16)) {
        auto kernel = cross_entropy_kernel<T, W>;
        LAUNCH(kernel, N, CE_THREADS, 0, cuda_stream(be), losses, logits, targets, V, Vp, dloss);
    } else {
        auto kernel = cross_entropy_kernel<T, 1>;
        LAUNCH(kernel, N, CE_THREADS, 0, cuda_stream(be), losses, logits, targets, V, Vp, dloss);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_cross_entropy(Backend* be, float* losses, void* logits, const int32_t* targets, int N,
                        int V, int Vp, float dloss) {
    if (V <= 0 || V > Vp) fatal("cross_entropy: need 0 < V <= Vp, got V=%d Vp=%d", V, Vp);
    if (N <= 0) return;
    if (be->dtype == DTYPE_BF16) cross_entropy_typed(be, losses, (bf16*)logits, targets, N, V, Vp, dloss);
    else cross_entropy_typed(be, losses, (float*)logits, targets, N, V, Vp, dloss);
}
