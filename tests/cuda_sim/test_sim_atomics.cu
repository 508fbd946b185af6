// test_sim_atomics.cu: atomics under in-order and random scheduling:
// counters, histograms, min/max, CAS loops, wrapping increments, exchanges,
// float/bf16 sums, and the "last block finishes the reduction" pattern.
#include <algorithm>
#include <vector>

#include "tests/cuda_sim/sim_internal.h"
#include "tests/cuda_sim/sim_test.h"

__global__ void tickets(unsigned* counter, unsigned* ticket_of_thread) {
    unsigned t = atomicAdd(counter, 1u);
    ticket_of_thread[blockIdx.x * blockDim.x + threadIdx.x] = t;
}

// Every thread gets a distinct ticket in every schedule; random scheduling
// hands them out in a different order than in-order execution.
static void counter_tickets_are_a_permutation() {
    const int B = 8, T = 256, N = B * T;
    unsigned* counter = device_alloc<unsigned>(1);
    unsigned* tk = device_alloc<unsigned>(N);
    std::vector<unsigned> in_order;
    for (uint64_t seed = 0; seed < 3; seed++) {
        cuda_sim::set_schedule(seed > 0, seed);
        cudaMemset(counter, 0, 4);
        LAUNCH(tickets, B, T, 0, 0, counter, tk);
        std::vector<unsigned> h(N);
        unsigned c;
        cudaMemcpy(h.data(), tk, N * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&c, counter, 4, cudaMemcpyDeviceToHost);
        CHECK(c == (unsigned)N, "counter %u, want %d", c, N);
        std::vector<unsigned> sorted = h;
        std::sort(sorted.begin(), sorted.end());
        bool perm = true;
        for (int i = 0; i < N; i++) perm &= sorted[i] == (unsigned)i;
        CHECK(perm, "tickets are not a permutation of 0..%d (seed %llu)", N - 1, (unsigned long long)seed);
        if (seed == 0) {
            in_order = h;
            bool identity = true;
            for (int i = 0; i < N; i++) identity &= h[i] == (unsigned)i;
            CHECK(identity, "in order, thread i draws ticket i");
        } else {
            CHECK(h != in_order, "random schedule %llu drew the tickets in thread order", (unsigned long long)seed);
        }
    }
    cuda_sim::set_schedule(false, 1);
    cudaFree(counter);
    cudaFree(tk);
}

__global__ void histogram_and_extremes(const int* data, int n, int* bins, int* mx, unsigned* mn, float* fmax_bits) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int v = data[i];
        atomicAdd(&bins[v % 16], 1);
        atomicMax(mx, v);
        atomicMin(mn, (unsigned)v);
        // Float max by compare-and-swap on the bits.
        float f = v * 0.5f;
        int* addr = (int*)fmax_bits;
        int old = *addr, assumed;
        do {
            assumed = old;
            if (__int_as_float(assumed) >= f) break;
            old = atomicCAS(addr, assumed, __float_as_int(f));
        } while (old != assumed);
    }
}

static void histogram_min_max_cas() {
    const int n = 5000;
    std::vector<int> h(n);
    uint64_t s = 9;
    for (int i = 0; i < n; i++) h[i] = (int)(test_rand(&s) % 100000);
    int* d = device_alloc<int>(n);
    int* bins = device_alloc<int>(16);
    int* mx = device_alloc<int>(1);
    unsigned* mn = device_alloc<unsigned>(1);
    float* fm = device_alloc<float>(1);
    cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice);
    for (uint64_t seed = 0; seed < 2; seed++) {
        cuda_sim::set_schedule(seed > 0, seed + 5);
        cudaMemset(bins, 0, 64);
        int init_max = -1;
        unsigned init_min = 0xffffffffu;
        float init_f = -1.0f;
        cudaMemcpy(mx, &init_max, 4, cudaMemcpyHostToDevice);
        cudaMemcpy(mn, &init_min, 4, cudaMemcpyHostToDevice);
        cudaMemcpy(fm, &init_f, 4, cudaMemcpyHostToDevice);
        LAUNCH(histogram_and_extremes, 3, 128, 0, 0, d, n, bins, mx, mn, fm);
        int hb[16], want[16] = {0}, gmx, wmx = -1;
        unsigned gmn, wmn = 0xffffffffu;
        float gf;
        cudaMemcpy(hb, bins, 64, cudaMemcpyDeviceToHost);
        cudaMemcpy(&gmx, mx, 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&gmn, mn, 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&gf, fm, 4, cudaMemcpyDeviceToHost);
        for (int v : h) {
            want[v % 16]++;
            wmx = std::max(wmx, v);
            wmn = std::min(wmn, (unsigned)v);
        }
        CHECK(memcmp(hb, want, sizeof want) == 0, "histogram differs (seed %llu)", (unsigned long long)seed);
        CHECK(gmx == wmx && gmn == wmn && gf == wmx * 0.5f, "max %d/%d min %u/%u fmax %g", gmx, wmx, gmn, wmn, gf);
    }
    cuda_sim::set_schedule(false, 1);
    for (void* p : {(void*)d, (void*)bins, (void*)mx, (void*)mn, (void*)fm}) cudaFree(p);
}

__global__ void inc_exch(unsigned* ctr, unsigned* olds, int* slot, int* swapped) {
    olds[threadIdx.x] = atomicInc(ctr, 9u);  // counts 0..9 and wraps
    swapped[threadIdx.x] = atomicExch(slot, (int)threadIdx.x);
}

static void wrapping_increment_and_exchange() {
    const int T = 100;
    unsigned* ctr = device_alloc<unsigned>(1);
    unsigned* olds = device_alloc<unsigned>(T);
    int* slot = device_alloc<int>(1);
    int* sw = device_alloc<int>(T);
    cuda_sim::set_schedule(true, 3);
    cudaMemset(ctr, 0, 4);
    int init = -7;
    cudaMemcpy(slot, &init, 4, cudaMemcpyHostToDevice);
    LAUNCH(inc_exch, 1, T, 0, 0, ctr, olds, slot, sw);
    cuda_sim::set_schedule(false, 1);
    std::vector<unsigned> ho(T);
    std::vector<int> hs(T);
    unsigned c;
    int last;
    cudaMemcpy(ho.data(), olds, T * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hs.data(), sw, T * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&c, ctr, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&last, slot, 4, cudaMemcpyDeviceToHost);
    int count[10] = {0};
    for (unsigned v : ho) count[v < 10 ? v : 0] += v < 10 ? 1 : 1000;
    bool even = true;
    for (int k : count) even &= k == 10;
    CHECK(c == 0 && even, "atomicInc(9) from 100 threads: final %u, each of 0..9 returned 10 times: %d", c, (int)even);
    // The exchanged-out values plus the final one are the initial value and every thread id, once each.
    hs.push_back(last);
    std::sort(hs.begin(), hs.end());
    bool perm = hs[0] == -7;
    for (int i = 0; i < T; i++) perm &= hs[i + 1] == i;
    CHECK(perm, "atomicExch lost or duplicated a value");
    cudaFree(ctr);
    cudaFree(olds);
    cudaFree(slot);
    cudaFree(sw);
}

// Block partial sums; the last block to finish (counted with atomicInc after
// a fence) adds them up: the classic single-pass reduction.
__global__ void last_block_sum(const float* in, int n, float* partial, unsigned* done, float* total,
                               __nv_bfloat16* bf_total) {
    __shared__ float s[128];
    __shared__ bool last;
    float v = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st /= 2) {
        if ((int)threadIdx.x < st) s[threadIdx.x] += s[threadIdx.x + st];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = s[0];
        atomicAdd(bf_total, __float2bfloat16(1.0f));
        __threadfence();
        last = atomicInc(done, gridDim.x - 1) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        float t = 0;
        for (unsigned b = 0; b < gridDim.x; b++) t += partial[b];
        *total = t;
    }
    atomicAdd(total + 1, v);  // and the same sum with float atomics from every thread
}

static void last_block_reduction_and_float_atomics() {
    const int n = 3000, B = 7, T = 128;
    std::vector<float> h(n);
    double want = 0;
    for (int i = 0; i < n; i++) want += h[i] = (float)((i % 23) - 11) * 0.125f;
    float* in = device_alloc<float>(n);
    float* part = device_alloc<float>(B);
    unsigned* done = device_alloc<unsigned>(1);
    float* total = device_alloc<float>(2);
    __nv_bfloat16* bt = device_alloc<__nv_bfloat16>(1);
    cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice);
    for (uint64_t seed = 0; seed < 3; seed++) {
        cuda_sim::set_schedule(seed > 0, seed);
        cudaMemset(done, 0, 4);
        cudaMemset(total, 0, 8);
        cudaMemset(bt, 0, 2);
        LAUNCH(last_block_sum, B, T, 0, 0, in, n, part, done, total, bt);
        float r[2];
        __nv_bfloat16 b;
        cudaMemcpy(r, total, 8, cudaMemcpyDeviceToHost);
        cudaMemcpy(&b, bt, 2, cudaMemcpyDeviceToHost);
        CHECK_CLOSE(r[0], want, 1e-3, 1e-5, "last block's total");
        CHECK_CLOSE(r[1], want, 1e-3, 1e-5, "float atomicAdd total");
        CHECK(__bfloat162float(b) == (float)B, "bf16 atomicAdd counted %g blocks", __bfloat162float(b));
    }
    cuda_sim::set_schedule(false, 1);
    for (void* p : {(void*)in, (void*)part, (void*)done, (void*)total, (void*)bt}) cudaFree(p);
}

// CUDA_SIM_WORKERS=2: blocks run on two OS threads at once, each with its own
// shared memory; atomics and block-local results stay right.
static void two_workers() {
    std::string err;
    int status = run_in_child([] {
        cuda_sim::options().workers = 2;  // the child starts its own workers
        const int B = 64, T = 128, N = B * T;
        unsigned* counter = device_alloc<unsigned>(1);
        unsigned* tk = device_alloc<unsigned>(N);
        cudaMemset(counter, 0, 4);
        LAUNCH(tickets, B, T, 0, 0, counter, tk);
        std::vector<unsigned> h(N);
        cudaMemcpy(h.data(), tk, N * 4, cudaMemcpyDeviceToHost);
        std::sort(h.begin(), h.end());
        for (int i = 0; i < N; i++)
            if (h[i] != (unsigned)i) _exit(3);
        const int n = 3000;
        std::vector<float> x(n);
        double want = 0;
        for (int i = 0; i < n; i++) want += x[i] = (float)(i % 7);
        float* in = device_alloc<float>(n);
        float* part = device_alloc<float>(7);
        unsigned* done = device_alloc<unsigned>(1);
        float* total = device_alloc<float>(2);
        __nv_bfloat16* bt = device_alloc<__nv_bfloat16>(1);
        cudaMemcpy(in, x.data(), n * 4, cudaMemcpyHostToDevice);
        cudaMemset(done, 0, 4);
        cudaMemset(total, 0, 8);
        cudaMemset(bt, 0, 2);
        LAUNCH(last_block_sum, 7, 128, 0, 0, in, n, part, done, total, bt);
        float r[2];
        cudaMemcpy(r, total, 8, cudaMemcpyDeviceToHost);
        _exit(r[0] == want && r[1] == want ? 0 : 4);
    }, &err);
    CHECK(status == 0, "with 2 workers: status %d (3: tickets, 4: reduction); %s", status, err.c_str());
}

int main() {
    RUN(counter_tickets_are_a_permutation);
    RUN(histogram_min_max_cas);
    RUN(wrapping_increment_and_exchange);
    RUN(last_block_reduction_and_float_atomics);
    RUN(two_workers);
    return TESTS_DONE();
}
