// test_comm_nccl.cu: the NCCL collectives of llm/parallel/comm_nccl.cu on GPU memory,
// for a machine with GPUs (tests/gpu/test_zero_nccl.sh runs it with one rank
// per GPU). Built in CUDA builds so that CI compiles it; without a GPU it
// reports itself skipped.
//
// NCCL's summation order is its own, so sums are compared with a double
// reference to FP32 (or BF16) rounding, not bit for bit; what is checked
// exactly is the layout (which chunk lands where), the accumulation onto a
// shard, and that results are ordered before the compute stream reads them.
#include <cuda_runtime.h>

#include "kernels/bf16.h"
#include "llm/parallel/comm.h"
#include "llm/util/rng.h"
#include "tests/testlib.h"

static Comm* comm;
static cudaStream_t compute;
static int W, R;

static float value(uint64_t salt, int r, size_t i) { return rng_normal(rng_key(salt, (uint64_t)r, 3), i); }

static void* stream_of(Backend* be) { return be->impl; }

#define CUDA_OK(call) CHECK((call) == cudaSuccess, "%s failed", #call)

static void* to_gpu(const void* host, size_t bytes) {
    void* d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes));
    CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void from_gpu(void* host, const void* d, size_t bytes) {
    comm_compute_wait_all(comm);
    CUDA_OK(cudaStreamSynchronize(compute));
    CUDA_OK(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost));
}

// Reduce-scatter onto an accumulator (ZeRO-2/3) and in place (ZeRO-1).
static void nccl_reduce_scatter(void) {
    size_t chunk = 300001;
    float* h = (float*)xmalloc(W * chunk * sizeof(float));
    float* acc = (float*)xmalloc(chunk * sizeof(float));
    for (size_t i = 0; i < W * chunk; i++) h[i] = value(1, R, i);
    for (size_t i = 0; i < chunk; i++) acc[i] = value(2, R, i);
    void* dbuf = to_gpu(h, W * chunk * sizeof(float));
    void* dacc = to_gpu(acc, chunk * sizeof(float));
    comm_wait_compute(comm);
    comm_reduce_scatter(comm, COMM_WORLD, dbuf, chunk, DTYPE_F32, dacc);
    from_gpu(acc, dacc, chunk * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < chunk; i++) {
        double want = value(2, R, i);
        for (int r = 0; r < W; r++) want += value(1, r, (size_t)R * chunk + i);
        bad += fabs(acc[i] - want) > 1e-5 * (1 + fabs(want));
    }
    CHECK(bad == 0, "accumulated: %zu of %zu elements wrong", bad, chunk);
    CUDA_OK(cudaMemcpy(dbuf, h, W * chunk * sizeof(float), cudaMemcpyHostToDevice));
    comm_wait_compute(comm);
    comm_reduce_scatter(comm, COMM_WORLD, dbuf, chunk, DTYPE_F32, NULL);
    from_gpu(h, dbuf, W * chunk * sizeof(float));
    bad = 0;
    for (size_t i = 0; i < chunk; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += value(1, r, (size_t)R * chunk + i);
        bad += fabs(h[(size_t)R * chunk + i] - want) > 1e-5 * (1 + fabs(want));
    }
    CHECK(bad == 0, "in place: %zu of %zu elements wrong", bad, chunk);
    cudaFree(dbuf);
    cudaFree(dacc);
    free(h);
    free(acc);
}

static void nccl_reduce_scatter_bf16(void) {
    size_t chunk = 4096;
    uint16_t* h = (uint16_t*)xmalloc(W * chunk * 2);
    uint16_t* acc = (uint16_t*)xmalloc(chunk * 2);
    for (size_t i = 0; i < W * chunk; i++) h[i] = f32_to_bf16(value(5, R, i));
    for (size_t i = 0; i < chunk; i++) acc[i] = f32_to_bf16(value(6, R, i));
    void* dbuf = to_gpu(h, W * chunk * 2);
    void* dacc = to_gpu(acc, chunk * 2);
    comm_wait_compute(comm);
    comm_reduce_scatter(comm, COMM_WORLD, dbuf, chunk, DTYPE_BF16, dacc);
    from_gpu(acc, dacc, chunk * 2);
    size_t bad = 0;
    for (size_t i = 0; i < chunk; i++) {
        double want = bf16_to_f32(f32_to_bf16(value(6, R, i)));
        for (int r = 0; r < W; r++) want += bf16_to_f32(f32_to_bf16(value(5, r, (size_t)R * chunk + i)));
        bad += fabs(bf16_to_f32(acc[i]) - want) > 2e-2 * (1 + fabs(want)) * W;
    }
    CHECK(bad == 0, "%zu of %zu bf16 elements wrong", bad, chunk);
    cudaFree(dbuf);
    cudaFree(dacc);
    free(h);
    free(acc);
}

static void nccl_all_reduce_and_gather(void) {
    size_t n = 100003, chunk = 5000;
    float* h = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = value(7, R, i);
    void* d = to_gpu(h, n * sizeof(float));
    comm_wait_compute(comm);
    comm_all_reduce(comm, COMM_WORLD, d, n, DTYPE_F32);
    from_gpu(h, d, n * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += value(7, r, i);
        bad += fabs(h[i] - want) > 1e-5 * (1 + fabs(want));
    }
    CHECK(bad == 0, "all-reduce: %zu of %zu wrong", bad, n);
    cudaFree(d);
    // all-gather from a separate shard into a NaN-poisoned buffer
    float* mine = (float*)xmalloc(chunk * sizeof(float));
    float* all = (float*)xmalloc(W * chunk * sizeof(float));
    for (size_t i = 0; i < chunk; i++) mine[i] = value(8, R, i);
    for (size_t i = 0; i < W * chunk; i++) all[i] = NAN;
    void* dmine = to_gpu(mine, chunk * sizeof(float));
    void* dall = to_gpu(all, W * chunk * sizeof(float));
    comm_wait_compute(comm);
    comm_all_gather(comm, COMM_WORLD, dmine, dall, chunk, DTYPE_F32);
    from_gpu(all, dall, W * chunk * sizeof(float));
    bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < chunk; i++) bad += all[(size_t)r * chunk + i] != value(8, r, i);
    CHECK(bad == 0, "all-gather: %zu wrong", bad);
    cudaFree(dmine);
    cudaFree(dall);
    free(mine);
    free(all);
    free(h);
}

int main(int argc, char** argv) {
    comm = comm_init(&argc, &argv);
    W = comm->world;
    R = comm->rank;
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
        printf("skip test_comm_nccl: no GPU\n");
        comm_finalize(comm);
        return 0;
    }
    cudaSetDevice(comm->local_rank % gpus);
    cudaStreamCreate(&compute);
    // Just enough of a backend for comm_attach_backend: a name and a stream.
    Backend be;
    memset(&be, 0, sizeof be);
    be.name = "cuda";
    be.impl = compute;
    be.native_stream = stream_of;
    comm_attach_backend(comm, &be);
    RUN(nccl_reduce_scatter);
    RUN(nccl_reduce_scatter_bf16);
    RUN(nccl_all_reduce_and_gather);
    int failures = TESTS_DONE();
    comm_finalize(comm);
    return failures;
}
