// test_sim_runtime.cu: the simulated runtime: device properties and limits,
// memory accounting, copies checked against their allocations and direction,
// streams and events, and the faults it turns into messages naming the
// kernel: writes past an allocation (caught by the poisoned slack and by the
// guard pages), stack overflow, __trap.
#include <vector>

#include "tests/cuda_sim/sim_test.h"

static void device_looks_like_an_h100() {
    int n = 0, v = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == 1, "%d devices", n);
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess, "properties");
    CHECK(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132 && p.warpSize == 32 &&
              p.sharedMemPerBlockOptin == 232448 && p.maxThreadsPerBlock == 1024 && p.totalGlobalMem >= (80ull << 30),
          "sm_%d%d, %d SMs, %zu bytes optin smem", p.major, p.minor, p.multiProcessorCount, p.sharedMemPerBlockOptin);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    CHECK(v == 232448, "optin attribute %d", v);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0);
    CHECK(v == 132, "SM attribute %d", v);
    CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice, "device 1 does not exist");
    cudaGetLastError();
    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0, "error string");
}

static void memory_is_accounted() {
    size_t free0, total, free1, free2;
    cudaMemGetInfo(&free0, &total);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 100 << 20) == cudaSuccess, "100 MiB");
    cudaMemGetInfo(&free1, &total);
    cudaFree(p);
    cudaMemGetInfo(&free2, &total);
    CHECK(free0 - free1 == (100u << 20) && free2 == free0, "free %zu -> %zu -> %zu", free0, free1, free2);
    void* q = nullptr;
    CHECK(cudaMalloc(&q, total) == cudaErrorMemoryAllocation && q == nullptr, "allocating all of it fails");
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "and is the last error");
    // Fresh device memory is poisoned, like the garbage a GPU returns.
    float* f = device_alloc<float>(4);
    float h[4];
    cudaMemcpy(h, f, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(std::isnan(h[0]) && std::isnan(h[3]), "fresh memory reads %g", h[0]);
    CHECK(cudaFree((void*)((char*)f + 4)) == cudaErrorInvalidValue, "freeing an interior pointer");
    cudaGetLastError();
    cudaFree(f);
}

static void copies_are_checked() {
    float* d = device_alloc<float>(16);
    float* e = device_alloc<float>(16);
    float h[32] = {0};
    CHECK(cudaMemcpy(d, h, 64, cudaMemcpyHostToDevice) == cudaSuccess, "a good copy");
    CHECK(cudaMemcpy(d, h, 68, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "4 bytes past the end");
    CHECK(cudaMemcpy(h, d, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "source and destination swapped");
    CHECK(cudaMemcpy(d, e, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "device source for HostToDevice");
    CHECK(cudaMemcpy(e, d, 64, cudaMemcpyDeviceToDevice) == cudaSuccess, "device to device");
    CHECK(cudaMemcpy(d + 2, d, 16, cudaMemcpyDeviceToDevice) == cudaErrorInvalidValue, "overlapping copy");
    CHECK(cudaMemcpy(h, d, 64, cudaMemcpyDefault) == cudaSuccess, "inferred direction");
    CHECK(cudaMemset(d + 8, 0, 33) == cudaErrorInvalidValue, "memset past the end");
    float* pinned = nullptr;
    CHECK(cudaMallocHost((void**)&pinned, 64) == cudaSuccess, "pinned memory");
    CHECK(cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, 0) == cudaSuccess, "async copy to pinned memory");
    cudaFreeHost(pinned);
    cudaGetLastError();
    cudaFree(d);
    cudaFree(e);
}

static void streams_and_events() {
    cudaStream_t s;
    cudaEvent_t a, b, quiet;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming);
    float* d = device_alloc<float>(1 << 16);
    cudaEventRecord(a, s);
    cudaMemsetAsync(d, 0, 4 << 16, s);
    cudaEventRecord(b, s);
    cudaStreamWaitEvent(0, b, 0);
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms >= 0, "elapsed %g ms", ms);
    cudaEventRecord(quiet, s);
    CHECK(cudaEventElapsedTime(&ms, a, quiet) == cudaErrorInvalidResourceHandle, "an event without timing");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess && cudaEventQuery(b) == cudaSuccess, "synchronize");
    cudaStreamDestroy(s);
    CHECK(cudaMemsetAsync(d, 0, 4, s) == cudaErrorInvalidResourceHandle, "a destroyed stream");
    cudaGetLastError();
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaEventDestroy(quiet);
    cudaFree(d);
}

// a*b+c where fusing changes the bits: the _rn intrinsics must round the
// product first (as nvcc guarantees); fmaf must not.
__global__ void rounding(const float* in, float* out) {
    float a = in[0], b = in[1], c = in[2];
    out[0] = __fadd_rn(__fmul_rn(a, b), c);
    out[1] = __fadd_rn(a * b, c);
    out[2] = fmaf(a, b, c);
}

static void rounded_intrinsics_are_not_fused() {
    float h[3] = {1.0f + 1.0f / 4096, 1.0f + 1.0f / 4096, -1.0f}, r[3];
    float* in = device_alloc<float>(3);
    float* out = device_alloc<float>(3);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    LAUNCH(rounding, 1, 1, 0, 0, in, out);
    cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost);
    volatile float prod = h[0] * h[1];
    float unfused = prod + h[2], fused = (float)((double)h[0] * h[1] + h[2]);
    CHECK(unfused != fused, "the inputs must tell fused from unfused");
    CHECK(r[0] == unfused && r[1] == unfused && r[2] == fused, "got %a %a %a, unfused %a fused %a", r[0], r[1], r[2],
          unfused, fused);
    cudaFree(in);
    cudaFree(out);
}

__global__ void write_at(float* p, int index) { p[index] = 1.0f; }

__global__ void deep_stack(float* out) {
    volatile float big[100000];  // 400 KB of locals, over the default 128 KiB stack
    for (int i = 0; i < 100000; i += 1000) big[i] = (float)i;
    out[threadIdx.x] = big[99000];
}

__global__ void traps(int) { __trap(); }

// Runs fn in a child that must die from a signal, with `fragment` on stderr.
template <typename F>
static void check_child_fault(F fn, std::initializer_list<const char*> fragments) {
    std::string err;
    int status = run_in_child(fn, &err);
    CHECK(status > 128, "child exit status %d, expected death by a signal; stderr: %s", status, err.c_str());
    for (const char* f : fragments) CHECK(err.find(f) != std::string::npos, "'%s' missing from: %s", f, err.c_str());
}

static void faults_name_the_kernel() {
    float* d = device_alloc<float>(10);  // 40 bytes: slack up to 256, then a guard page
    check_child_error([&] { LAUNCH(write_at, 1, 1, 0, 0, d, 10); },
                      {"kernel 'write_at' wrote outside the 40-byte allocation", "byte offset 40", "past its end"});
    check_child_error([&] { LAUNCH(write_at, 1, 1, 0, 0, d, -1); },
                      {"kernel 'write_at' wrote outside the 40-byte allocation", "byte offset -4", "before its start"});
    check_child_fault([&] { LAUNCH(write_at, 1, 1, 0, 0, d, 100); },
                      {"segmentation fault in kernel 'write_at' block (0,0,0) thread (0,0,0)",
                       "360 bytes past the end of a 40-byte cudaMalloc allocation"});
    check_child_fault([&] { LAUNCH(deep_stack, 1, 2, 0, 0, d); }, {"kernel 'deep_stack'", "stack overflowed"});
    check_child_error([&] { LAUNCH(traps, 2, 1, 0, 0, 0); }, {"__trap() in kernel 'traps' block (0,0,0) thread (0,0,0)"});
    cudaFree(d);
}

int main() {
    RUN(device_looks_like_an_h100);
    RUN(memory_is_accounted);
    RUN(copies_are_checked);
    RUN(streams_and_events);
    RUN(rounded_intrinsics_are_not_fused);
    RUN(faults_name_the_kernel);
    return TESTS_DONE();
}
