// test_sim_warp.cu: warp primitives against lanes computed by hand: every
// shuffle mode with and without a width, ballots and votes, matches, the
// __reduce_*_sync family, partial masks used side by side, and the errors for
// a collective that not every lane named in its mask reaches.
#include <vector>

#include "tests/cuda_sim/sim_test.h"

// out[lane*8 + k] for the 8 shuffles below; lane values are 100 + lane.
__global__ void shuffles(int* out, float* fout, double* dout, __nv_bfloat16* bout) {
    int lane = threadIdx.x % 32;
    int v = 100 + lane;
    int* o = out + threadIdx.x * 8;
    o[0] = __shfl_sync(0xffffffffu, v, 5);               // broadcast lane 5
    o[1] = __shfl_sync(0xffffffffu, v, 31 - lane);       // per-lane source: reverse
    o[2] = __shfl_up_sync(0xffffffffu, v, 3);            // lanes 0-2 keep their own
    o[3] = __shfl_down_sync(0xffffffffu, v, 4);          // lanes 28-31 keep their own
    o[4] = __shfl_xor_sync(0xffffffffu, v, 1);
    o[5] = __shfl_sync(0xffffffffu, v, 2, 8);            // lane 2 of each group of 8
    o[6] = __shfl_down_sync(0xffffffffu, v, 2, 16);      // within halves
    o[7] = __shfl_xor_sync(0xffffffffu, v, 8, 8);        // later group: own value
    fout[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 0.5f * lane, 16);
    dout[threadIdx.x] = __shfl_sync(0xffffffffu, 1e300 * lane, (lane + 1) % 32);
    bout[threadIdx.x] = __shfl_down_sync(0xffffffffu, __float2bfloat16(lane * 0.25f), 1);
}

static void shuffles_match_hand_computed_lanes() {
    int* d = device_alloc<int>(64 * 8);
    float* f = device_alloc<float>(64);
    double* dd = device_alloc<double>(64);
    __nv_bfloat16* b = device_alloc<__nv_bfloat16>(64);
    for (int random = 0; random < 2; random++) {
        cuda_sim::set_schedule(random, 11);
        LAUNCH(shuffles, 1, 64, 0, 0, d, f, dd, b);
        std::vector<int> h(64 * 8);
        std::vector<float> hf(64);
        std::vector<double> hd(64);
        std::vector<__nv_bfloat16> hb(64);
        cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hf.data(), f, 64 * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hd.data(), dd, 64 * 8, cudaMemcpyDeviceToHost);
        cudaMemcpy(hb.data(), b, 64 * 2, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int t = 0; t < 64; t++) {
            int l = t % 32;
            int want[8] = {105,
                           100 + 31 - l,
                           100 + (l >= 3 ? l - 3 : l),
                           100 + (l + 4 < 32 ? l + 4 : l),
                           100 + (l ^ 1),
                           100 + (l / 8) * 8 + 2,
                           100 + ((l % 16) + 2 < 16 ? l + 2 : l),
                           100 + ((l ^ 8) / 8 > l / 8 ? l : (l ^ 8))};
            for (int k = 0; k < 8; k++)
                if (h[t * 8 + k] != want[k]) {
                    if (bad < 3) fprintf(stderr, "  thread %d shuffle %d: got %d want %d\n", t, k, h[t * 8 + k], want[k]);
                    bad++;
                }
            bad += hf[t] != 0.5f * (l ^ 16);
            bad += hd[t] != 1e300 * ((l + 1) % 32);
            bad += __bfloat162float(hb[t]) != (l < 31 ? (l + 1) * 0.25f : l * 0.25f);
        }
        CHECK(bad == 0, "%d wrong shuffle results (random=%d)", bad, random);
    }
    cuda_sim::set_schedule(false, 1);
    cudaFree(d);
    cudaFree(f);
    cudaFree(dd);
    cudaFree(b);
}

__global__ void votes(unsigned* out) {
    int lane = threadIdx.x % 32;
    unsigned* o = out + threadIdx.x * 10;
    o[0] = __ballot_sync(0xffffffffu, lane % 3 == 0);
    o[1] = __any_sync(0xffffffffu, lane == 17);
    o[2] = __all_sync(0xffffffffu, lane < 31);
    o[3] = __all_sync(0xffffffffu, lane < 32);
    o[4] = __match_any_sync(0xffffffffu, lane / 4);
    int pred = -1;
    o[5] = __match_all_sync(0xffffffffu, 7, &pred);
    o[6] = (unsigned)pred;
    o[7] = __reduce_add_sync(0xffffffffu, (unsigned)lane);
    o[8] = (unsigned)__reduce_min_sync(0xffffffffu, 5 - lane);
    o[9] = __reduce_max_sync(0xffffffffu, (unsigned)(lane * 7 % 32)) | (__reduce_or_sync(0xffffffffu, 1u << lane) == 0xffffffffu ? 0x100u : 0u);
}

static void votes_matches_and_reductions() {
    unsigned* d = device_alloc<unsigned>(32 * 10);
    LAUNCH(votes, 1, 32, 0, 0, d);
    std::vector<unsigned> h(32 * 10);
    cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost);
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        unsigned* o = &h[l * 10];
        bad += o[0] != ballot;
        bad += o[1] != 1;
        bad += o[2] != 0;
        bad += o[3] != 1;
        bad += o[4] != 0xfu << (l / 4 * 4);
        bad += o[5] != 0xffffffffu || o[6] != 1;
        bad += o[7] != 496;
        bad += (int)o[8] != 5 - 31;
        bad += o[9] != (31u | 0x100u);
    }
    CHECK(bad == 0, "%d wrong vote/match/reduce results", bad);
    cudaFree(d);
}

// The two halves of a warp shuffle among themselves at the same time, and a
// tree reduction over a partial last warp (48 threads: warp 1 has 16 lanes).
__global__ void halves_and_partial_warp(int* out) {
    int lane = threadIdx.x % 32;
    int v = lane;
    if (lane < 16)
        v = __shfl_xor_sync(0x0000ffffu, v, 1);
    else
        v = __shfl_down_sync(0xffff0000u, v, 1, 16);
    out[threadIdx.x] = v;
    unsigned mask = __ballot_sync(__activemask(), 1);
    int s = 1;
    for (int off = 8; off > 0; off /= 2) s += __shfl_down_sync(mask, s, off, 16);
    out[64 + threadIdx.x] = s;
}

static void partial_masks_side_by_side() {
    int* d = device_alloc<int>(128);
    LAUNCH(halves_and_partial_warp, 1, 48, 0, 0, d);
    int h[128];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int t = 0; t < 48; t++) {
        int l = t % 32;
        int want = l < 16 ? (l ^ 1) : (l % 16 < 15 ? l + 1 : l);
        bad += h[t] != want;
    }
    bad += h[64] != 16 || h[64 + 16] != 16 || h[64 + 32] != 16;
    CHECK(bad == 0, "%d wrong (halves: %d %d %d, sums %d %d %d)", bad, h[0], h[15], h[16], h[64], h[80], h[96]);
    cudaFree(d);
}

// A full-warp reduction per warp, summed per block through shared memory.
__global__ void block_reduce(const float* in, float* out, int n) {
    __shared__ float partial[32];
    float v = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}

static void warp_and_block_reduction() {
    const int n = 10007, blocks = 5, threads = 256;
    std::vector<float> h(n);
    double want = 0;
    for (int i = 0; i < n; i++) {
        h[i] = (float)((i * 37) % 101) * 0.01f;
        want += h[i];
    }
    float* in = device_alloc<float>(n);
    float* out = device_alloc<float>(blocks);
    cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice);
    for (uint64_t seed = 0; seed < 3; seed++) {
        cuda_sim::set_schedule(seed > 0, seed);
        LAUNCH(block_reduce, blocks, threads, 0, 0, in, out, n);
        float r[blocks];
        cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
        double got = 0;
        for (float x : r) got += x;
        CHECK_CLOSE(got, want, 1e-2, 1e-5, "block reduction");
    }
    cuda_sim::set_schedule(false, 1);
    cudaFree(in);
    cudaFree(out);
}

// Reading a lane that exited returns poison (NaN), not a plausible value.
__global__ void read_exited_lane(float* out) {
    if (threadIdx.x >= 20) return;
    float v = __shfl_down_sync(0xffffffffu, 1.0f, 16);
    out[threadIdx.x] = v;
}

static void exited_lanes_read_as_poison() {
    float* d = device_alloc<float>(32);
    LAUNCH(read_exited_lane, 1, 32, 0, 0, d);
    float h[32];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int ones = 0, nans = 0;
    for (int i = 0; i < 20; i++) {
        ones += h[i] == 1.0f;
        nans += std::isnan(h[i]);
    }
    CHECK(ones == 8 && nans == 12, "lanes 0-3 read lanes 16-19 (1.0), 4-15 read exited lanes (NaN), 16-19 keep "
          "their own (1.0): got %d ones, %d NaNs", ones, nans);
    cudaFree(d);
}

__global__ void shuffle_in_branch(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

__global__ void different_collectives(unsigned* out) {
    if (threadIdx.x % 2 == 0)
        out[threadIdx.x] = __ballot_sync(0xffffffffu, 1);
    else
        out[threadIdx.x] = __shfl_sync(0xffffffffu, 1u, 0);
}

__global__ void mask_without_self(int* out) { out[threadIdx.x] = __shfl_sync(0x1u, (int)threadIdx.x, 0); }

static void divergent_collectives_are_reported() {
    float* f = device_alloc<float>(64);
    unsigned* u = device_alloc<unsigned>(64);
    int* i = device_alloc<int>(64);
    check_child_error([&] { LAUNCH(shuffle_in_branch, 1, 64, 0, 0, f); },
                      {"kernel 'shuffle_in_branch' block (0,0,0) warp 0", "__shfl_xor_sync(mask 0xffffffff)",
                       "lanes 0-15 arrived", "lanes 16-31 did not", "waits at __syncthreads()"});
    check_child_error([&] { LAUNCH(different_collectives, 1, 32, 0, 0, u); },
                      {"kernel 'different_collectives'", "__ballot_sync", "__shfl_sync", "with the same mask"});
    check_child_error([&] { LAUNCH(mask_without_self, 1, 2, 0, 0, i); },
                      {"kernel 'mask_without_self'", "lane 1", "mask 0x00000001", "does not name the lane itself"});
    cudaFree(f);
    cudaFree(u);
    cudaFree(i);
}

int main() {
    RUN(shuffles_match_hand_computed_lanes);
    RUN(votes_matches_and_reductions);
    RUN(partial_masks_side_by_side);
    RUN(warp_and_block_reduction);
    RUN(exited_lanes_read_as_poison);
    RUN(divergent_collectives_are_reported);
    return TESTS_DONE();
}
