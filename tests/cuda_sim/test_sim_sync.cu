// test_sim_sync.cu: the harness's block model: indices, barriers, shared
// memory (static and dynamic), random scheduling exposing a missing barrier,
// and the errors for barriers not all threads reach and bad launches.
#include <thread>
#include <vector>

#include "tests/cuda_sim/sim_test.h"

// Each thread publishes its value in shared memory and reads its left
// neighbour's. Without the barrier it only works if thread t-1 happens to
// run before thread t, which in-order scheduling guarantees and random
// scheduling does not.
template <bool BARRIER>
__global__ void left_neighbour(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    if (BARRIER) __syncthreads();
    out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0.0f;
}

template <bool BARRIER>
static int neighbour_errors(bool random, uint64_t seed) {
    const int B = 4, T = 256, N = B * T;
    static float h_in[N], h_out[N];
    for (int i = 0; i < N; i++) h_in[i] = (float)(i * 7 % 101);
    float* in = device_alloc<float>(N);
    float* out = device_alloc<float>(N);
    cudaMemcpy(in, h_in, sizeof h_in, cudaMemcpyHostToDevice);
    cuda_sim::set_schedule(random, seed);
    LAUNCH(left_neighbour<BARRIER>, B, T, 0, 0, in, out);
    cuda_sim::set_schedule(false, 1);
    cudaMemcpy(h_out, out, sizeof h_out, cudaMemcpyDeviceToHost);
    int errors = 0;
    for (int i = 0; i < N; i++) errors += h_out[i] != (i % T ? h_in[i - 1] : 0.0f);
    cudaFree(in);
    cudaFree(out);
    return errors;
}

static void missing_barrier_fails_only_under_random_schedule() {
    CHECK(neighbour_errors<false>(false, 1) == 0, "in order, the racy kernel happens to work");
    for (uint64_t seed = 1; seed <= 3; seed++) {
        int e = neighbour_errors<false>(true, seed);
        CHECK(e > 0, "random schedule, seed %llu: the missing barrier went unnoticed", (unsigned long long)seed);
    }
    for (uint64_t seed = 1; seed <= 3; seed++)
        CHECK(neighbour_errors<true>(true, seed) == 0, "with the barrier, seed %llu: %d errors",
              (unsigned long long)seed, neighbour_errors<true>(true, seed));
}

__global__ void write_indices(int* out) {
    int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int nt = blockDim.x * blockDim.y * blockDim.z;
    int* o = out + 8 * (bid * nt + tid);
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
    o[6] = warpSize;
    o[7] = (int)(gridDim.x * 1000000 + gridDim.y * 10000 + gridDim.z * 100 + blockDim.x * 10 + blockDim.y + blockDim.z);
}

static void indices_cover_grid_and_block() {
    dim3 grid(3, 2, 2), block(5, 3, 2);
    int nb = 12, nt = 30;
    int* d = device_alloc<int>(8 * nb * nt);
    for (int random = 0; random < 2; random++) {
        cuda_sim::set_schedule(random, 7);
        LAUNCH(write_indices, grid, block, 0, 0, d);
        std::vector<int> h(8 * nb * nt);
        cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int b = 0; b < nb; b++)
            for (int t = 0; t < nt; t++) {
                int* o = &h[8 * (b * nt + t)];
                bad += o[0] != t % 5 || o[1] != t / 5 % 3 || o[2] != t / 15 || o[3] != b % 3 || o[4] != b / 3 % 2 ||
                       o[5] != b / 6 || o[6] != 32 || o[7] != 3 * 1000000 + 2 * 10000 + 2 * 100 + 50 + 3 + 2;
            }
        CHECK(bad == 0, "%d threads saw wrong indices (random=%d)", bad, random);
    }
    cuda_sim::set_schedule(false, 1);
    cudaFree(d);
}

// Block-wide tree reduction: barriers inside a loop, odd block size.
__global__ void block_sum(const float* in, float* out, int n) {
    __shared__ float s[512];
    int t = threadIdx.x;
    float v = 0;
    for (int i = t; i < n; i += blockDim.x) v += in[blockIdx.x * n + i];
    s[t] = v;
    __syncthreads();
    int p = 1;
    while (p < (int)blockDim.x) p <<= 1;
    for (int stride = p / 2; stride > 0; stride /= 2) {
        if (t < stride && t + stride < (int)blockDim.x) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
    int c = __syncthreads_count(v > 10.0f);
    int a = __syncthreads_and(v >= 0.0f);
    int o = __syncthreads_or(t == 5);
    if (t == 0) out[gridDim.x + blockIdx.x] = (float)(c * 100 + a * 10 + o);
}

static void barrier_reductions() {
    const int B = 3, n = 1000, T = 300;
    std::vector<float> h(B * n);
    for (int i = 0; i < B * n; i++) h[i] = (float)(i % 13);
    float* in = device_alloc<float>(B * n);
    float* out = device_alloc<float>(2 * B);
    cudaMemcpy(in, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    for (int random = 0; random < 2; random++) {
        cuda_sim::set_schedule(random, 3);
        LAUNCH(block_sum, B, T, 0, 0, in, out, n);
        float r[2 * B];
        cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
        for (int b = 0; b < B; b++) {
            double want = 0;
            int count = 0;
            for (int t = 0; t < T; t++) {
                double v = 0;
                for (int i = t; i < n; i += T) v += h[b * n + i];
                want += v;
                count += v > 10.0;
            }
            CHECK_CLOSE(r[b], want, 1e-3, 1e-6, "block sum");
            CHECK(r[B + b] == count * 100 + 10 + 1, "syncthreads_count/and/or gave %g, want %d", r[B + b], count * 100 + 11);
        }
    }
    cuda_sim::set_schedule(false, 1);
    cudaFree(in);
    cudaFree(out);
}

// Shared memory starts poisoned in every block: block 1 never writes s[0].
__global__ void read_unwritten_shared(float* out) {
    __shared__ float s[32];
    if (blockIdx.x == 0) s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
}

static void shared_memory_is_fresh_in_every_block() {
    float* d = device_alloc<float>(64);
    LAUNCH(read_unwritten_shared, 2, 32, 0, 0, d);
    float h[64];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int ones = 0, nans = 0;
    for (int i = 0; i < 32; i++) ones += h[i] == 1.0f;
    for (int i = 32; i < 64; i++) nans += std::isnan(h[i]);
    CHECK(ones == 32 && nans == 32, "block 0 read %d ones (want 32), block 1 read %d NaNs (want 32)", ones, nans);
    cudaFree(d);
}

// Dynamic shared memory: every byte of the requested size is usable and
// shared by the block; two names alias the same memory.
__global__ void dynamic_shared_roundtrip(const int* in, int* out, int n) {
    extern __shared__ int dyn[];
    extern __shared__ __align__(16) unsigned char dyn_bytes[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = in[blockIdx.x * n + i];
    __syncthreads();
    const int* alias = (const int*)dyn_bytes;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = alias[n - 1 - i] + 1;
}

static bool roundtrip(int n, int blocks) {
    std::vector<int> h(n * blocks), r(n * blocks);
    for (int i = 0; i < n * blocks; i++) h[i] = i * 3;
    int* in = device_alloc<int>(n * blocks);
    int* out = device_alloc<int>(n * blocks);
    cudaMemcpy(in, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    LAUNCH(dynamic_shared_roundtrip, blocks, 128, n * sizeof(int), 0, in, out, n);
    cudaError_t e = cudaGetLastError();
    cudaMemcpy(r.data(), out, r.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(in);
    cudaFree(out);
    if (e != cudaSuccess) return false;
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < n; i++)
            if (r[b * n + i] != h[b * n + n - 1 - i] + 1) return false;
    return true;
}

static void dynamic_shared_memory_sizes() {
    CHECK(roundtrip(1, 2), "4 bytes");
    CHECK(roundtrip(1000, 3), "4000 bytes");
    CHECK(roundtrip(12 * 1024, 2), "48 KiB, the default limit");
    // Over 48 KiB needs the attribute, like on a GPU.
    CHECK(!roundtrip(12 * 1024 + 1, 1), "over 48 KiB without cudaFuncSetAttribute must fail");
    CHECK(cudaFuncSetAttribute(dynamic_shared_roundtrip, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024) == cudaSuccess,
          "raise the limit");
    CHECK(roundtrip(50 * 1024, 2), "200 KiB after raising the limit");
    CHECK(cudaFuncSetAttribute(dynamic_shared_roundtrip, cudaFuncAttributeMaxDynamicSharedMemorySize, 240 * 1024) ==
              cudaErrorInvalidValue,
          "240 KiB is over the device's 227 KiB");
    cudaGetLastError();
}

__global__ void overrun_dynamic_shared(int n) {
    extern __shared__ float dyn_overrun[];
    dyn_overrun[n + threadIdx.x] = 1.0f;  // one past the end for thread 0
}

__global__ void barrier_in_branch(float* out) {
    if (threadIdx.x < 48) __syncthreads();
    out[threadIdx.x] = 1.0f;
}

__global__ void early_return_then_barrier(float* out, int n) {
    if ((int)threadIdx.x >= n) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static void errors_name_the_kernel() {
    float* d = device_alloc<float>(128);
    check_child_error([&] { LAUNCH(barrier_in_branch, 1, 64, 0, 0, d); },
                      {"kernel 'barrier_in_branch' block (0,0,0)", "__syncthreads() is not reached by all threads",
                       "48 of 64", "threads 48-63 exited"});
    check_child_error([&] { LAUNCH(early_return_then_barrier, 1, 128, 0, 0, d, 100); },
                      {"kernel 'early_return_then_barrier'", "100 of 128", "threads 100-127"});
    check_child_error([&] { LAUNCH(overrun_dynamic_shared, 1, 4, 64 * sizeof(float), 0, 64); },
                      {"kernel 'overrun_dynamic_shared'", "dyn_overrun", "at byte 256, past the 256 bytes the launch asked for"});
    float host[4];
    check_child_error([&] { LAUNCH(barrier_in_branch, 1, 64, 0, 0, host); },
                      {"kernel 'barrier_in_branch': argument 0", "not device memory"});
    cudaFree(d);
}

static void bad_launch_configurations() {
    float* d = device_alloc<float>(2048);
    cudaGetLastError();
    LAUNCH(barrier_in_branch, 1, 1025, 0, 0, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "1025 threads per block");
    LAUNCH(barrier_in_branch, 0, 32, 0, 0, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid");
    LAUNCH(barrier_in_branch, dim3(1, 70000), 32, 0, 0, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y over 65535");
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaStreamDestroy(s);
    LAUNCH(barrier_in_branch, 1, 32, 0, s, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle, "a destroyed stream");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets the error");
    cudaFree(d);
}

__global__ void add_one(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// Two host threads launching at once: the launches take turns.
static void launches_from_two_host_threads() {
    const int n = 1000, rounds = 20;
    int* a = device_alloc<int>(n);
    int* b = device_alloc<int>(n);
    cudaMemset(a, 0, n * 4);
    cudaMemset(b, 0, n * 4);
    auto work = [&](int* p) {
        for (int r = 0; r < rounds; r++) LAUNCH(add_one, (n + 127) / 128, 128, 0, 0, p, n);
    };
    std::thread t1(work, a), t2(work, b);
    t1.join();
    t2.join();
    std::vector<int> ha(n), hb(n);
    cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += ha[i] != rounds || hb[i] != rounds;
    CHECK(bad == 0, "%d elements missed an increment", bad);
    cudaFree(a);
    cudaFree(b);
}

int main() {
    RUN(missing_barrier_fails_only_under_random_schedule);
    RUN(indices_cover_grid_and_block);
    RUN(barrier_reductions);
    RUN(shared_memory_is_fresh_in_every_block);
    RUN(dynamic_shared_memory_sizes);
    RUN(errors_name_the_kernel);
    RUN(bad_launch_configurations);
    RUN(launches_from_two_host_threads);
    return TESTS_DONE();
}
