// test_sim_graph.cu: stream capture and CUDA graphs in the harness (graph.cpp).
// A captured sequence (copy from pinned memory, kernels, a cuBLASLt matmul,
// a memset) runs nothing while capturing and, at each graph launch, exactly
// what was recorded: new contents behind the captured pointers are read, but
// host values changed after the capture (a kernel argument, cuBLASLt's
// host-mode alpha) are not. Each refusal returns CUDA's error code and
// invalidates the capture; event record/wait forks and joins a second stream.
#include <cublasLt.h>

#include <thread>
#include <vector>

#include "tests/cuda_sim/sim_test.h"

namespace {

__global__ void axpy_kernel(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

__global__ void set_kernel(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + 1.0f;
}

bool all_bytes(const void* p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char*)p)[i] != v) return false;
    return true;
}

// D (m x n, column-major) = alpha * A (m x k) * B (k x n) through cuBLASLt, FP32.
struct Gemm {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    Gemm(int m, int n, int k) {
        CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate");
        CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS, "desc");
        CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m) == CUBLAS_STATUS_SUCCESS, "layout A");
        CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k) == CUBLAS_STATUS_SUCCESS, "layout B");
        CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m) == CUBLAS_STATUS_SUCCESS, "layout D");
    }
    cublasStatus_t run(float* D, const float* A, const float* B, const float* alpha, cudaStream_t s) {
        static const float zero = 0.0f;
        return cublasLtMatmul(lt, desc, alpha, A, la, B, lb, &zero, D, ld, D, ld, nullptr, nullptr, 0, s);
    }
    ~Gemm() {
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(desc);
        cublasLtDestroy(lt);
    }
};

cudaStream_t new_stream() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    return s;
}

// Copy, kernel, matmul, memset captured; replayed after the inputs and the
// host scalars changed: the results follow the new inputs and the old scalars.
void replay_reads_pointers_and_keeps_values() {
    const int m = 7, k = 5, n = 3;  // odd shapes; x and y are the m x k matrix A
    const int len = m * k;
    cudaStream_t s = new_stream();
    float *h_in, *x = device_alloc<float>(len), *y = device_alloc<float>(len), *b = device_alloc<float>(k * n);
    float *d = device_alloc<float>(m * n), *z = device_alloc<float>(13);
    CHECK(cudaMallocHost((void**)&h_in, len * sizeof(float)) == cudaSuccess, "pinned");
    std::vector<float> hb(k * n);
    uint64_t seed = 7;
    for (float& v : hb) v = (float)(test_rand(&seed) % 2001) / 1000.0f - 1.0f;
    CHECK(cudaMemcpy(b, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "B");
    for (int i = 0; i < len; i++) h_in[i] = (float)(test_rand(&seed) % 2001) / 1000.0f - 1.0f;

    Gemm g(m, n, k);
    float a = 2.0f, alpha = 0.5f;  // host values: frozen by the capture
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive, "capturing: %d", (int)st);
    CHECK(cudaMemcpyAsync(x, h_in, len * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess, "copy");
    LAUNCH(set_kernel, dim3(2), dim3(32), 0, s, y, x, a, len);
    CHECK(cudaGetLastError() == cudaSuccess, "launch");
    CHECK(g.run(d, y, b, &alpha, s) == CUBLAS_STATUS_SUCCESS, "matmul");
    CHECK(cudaMemsetAsync(z, 0, 13 * sizeof(float), s) == cudaSuccess, "memset");
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess && graph, "end");
    CHECK(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone, "not capturing: %d", (int)st);
    // Nothing ran: every device buffer still holds cudaMalloc's 0xFF poison.
    CHECK(all_bytes(x, len * 4, 0xff) && all_bytes(y, len * 4, 0xff) && all_bytes(d, m * n * 4, 0xff) &&
              all_bytes(z, 13 * 4, 0xff),
          "a captured operation ran during the capture");
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");

    // New input contents behind the captured pointer; new host scalars.
    for (int i = 0; i < len; i++) h_in[i] = (float)(test_rand(&seed) % 2001) / 1000.0f - 1.0f;
    a = 3.0f;
    alpha = 4.0f;
    CHECK(cudaGraphLaunch(exec, s) == cudaSuccess, "launch graph");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    std::vector<float> hy(len), hd(m * n), hz(13);
    CHECK(cudaMemcpy(hy.data(), y, len * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "y");
    CHECK(cudaMemcpy(hd.data(), d, m * n * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "d");
    CHECK(cudaMemcpy(hz.data(), z, 13 * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "z");
    for (int i = 0; i < len; i++) CHECK_CLOSE(hy[i], 2.0 * h_in[i] + 1.0, 1e-6, 1e-6, "y = 2 x + 1 (the captured a)");
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int kk = 0; kk < k; kk++) acc += (2.0 * h_in[kk * m + i] + 1.0) * hb[j * k + kk];
            CHECK_CLOSE(hd[j * m + i], 0.5 * acc, 1e-5, 1e-5, "D = 0.5 A B (the captured alpha)");
        }
    CHECK(all_bytes(hz.data(), 13 * 4, 0), "memset replayed");
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess, "destroy");
    cudaFreeHost(h_in);
    cudaFree(x), cudaFree(y), cudaFree(b), cudaFree(d), cudaFree(z);
    cudaStreamDestroy(s);
}

// Three launches of a graph that accumulates equal three eager runs, bit for bit.
void three_replays_equal_three_eager_runs() {
    const int n = 45;
    cudaStream_t s = new_stream();
    float *x = device_alloc<float>(n), *y1 = device_alloc<float>(n), *y2 = device_alloc<float>(n);
    std::vector<float> hx(n);
    uint64_t seed = 3;
    for (float& v : hx) v = (float)(test_rand(&seed) % 1000) / 997.0f;
    cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemset(y1, 0, n * 4);
    cudaMemset(y2, 0, n * 4);
    auto step = [&](float* y) {
        LAUNCH(axpy_kernel, dim3(1), dim3(64), 0, s, y, x, 0.37f, n);
        LAUNCH(axpy_kernel, dim3(3), dim3(16), 0, s, y, y, 1.5f, n);  // y *= 2.5: order matters
    };
    for (int r = 0; r < 3; r++) step(y1);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
    step(y2);
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end");
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
    for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(exec, s) == cudaSuccess, "launch %d", r);
    std::vector<float> a(n), b(n);
    cudaMemcpy(a.data(), y1, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(b.data(), y2, n * 4, cudaMemcpyDeviceToHost);
    CHECK(memcmp(a.data(), b.data(), n * 4) == 0, "3 replays differ from 3 eager runs");
    CHECK(a[5] != 0.0f, "the eager runs did nothing");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(x), cudaFree(y1), cudaFree(y2);
    cudaStreamDestroy(s);
}

// One refused call inside a capture: its error, then the capture is
// invalidated (later work and cudaStreamEndCapture say so, with no graph).
template <typename F>
void expect_refusal(const char* what, cudaStreamCaptureMode mode, F call, cudaError_t want) {
    cudaStream_t s = new_stream();
    float* y = device_alloc<float>(8);
    CHECK(cudaStreamBeginCapture(s, mode) == cudaSuccess, "%s: begin", what);
    cudaError_t got = call(s);
    CHECK(got == want, "%s: got %s, expected %s", what, cudaGetErrorName(got), cudaGetErrorName(want));
    cudaGetLastError();
    cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(s, &st);
    CHECK(st == cudaStreamCaptureStatusInvalidated, "%s: capture status %d, expected invalidated", what, (int)st);
    CHECK(cudaMemsetAsync(y, 0, 32, s) == cudaErrorStreamCaptureInvalidated, "%s: work after the refusal", what);
    cudaGraph_t graph = (cudaGraph_t)1;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated && graph == nullptr, "%s: end", what);
    cudaGetLastError();
    CHECK(all_bytes(y, 32, 0xff), "%s: the refused capture ran something", what);
    cudaFree(y);
    cudaStreamDestroy(s);
}

void refusals_return_cuda_errors() {
    float* d = device_alloc<float>(16);
    std::vector<float> pageable(16, 1.0f);
    expect_refusal("cudaStreamSynchronize", cudaStreamCaptureModeGlobal,
                   [](cudaStream_t s) { return cudaStreamSynchronize(s); }, cudaErrorStreamCaptureUnsupported);
    expect_refusal("cudaStreamQuery", cudaStreamCaptureModeGlobal,
                   [](cudaStream_t s) { return cudaStreamQuery(s); }, cudaErrorStreamCaptureUnsupported);
    expect_refusal("cudaDeviceSynchronize", cudaStreamCaptureModeGlobal,
                   [](cudaStream_t) { return cudaDeviceSynchronize(); }, cudaErrorStreamCaptureUnsupported);
    expect_refusal("cudaMalloc (global mode)", cudaStreamCaptureModeGlobal, [](cudaStream_t) {
        void* p;
        return cudaMalloc(&p, 64);
    }, cudaErrorStreamCaptureUnsupported);
    expect_refusal("synchronous cudaMemcpy", cudaStreamCaptureModeGlobal, [&](cudaStream_t) {
        return cudaMemcpy(d, pageable.data(), 64, cudaMemcpyHostToDevice);
    }, cudaErrorStreamCaptureUnsupported);
    expect_refusal("cudaMemcpyAsync from pageable memory", cudaStreamCaptureModeGlobal, [&](cudaStream_t s) {
        return cudaMemcpyAsync(d, pageable.data(), 64, cudaMemcpyHostToDevice, s);
    }, cudaErrorStreamCaptureUnsupported);
    cudaEvent_t outside;
    cudaEventCreateWithFlags(&outside, cudaEventDisableTiming);
    cudaStream_t other = new_stream();
    cudaEventRecord(outside, other);
    expect_refusal("cudaStreamWaitEvent on an event recorded outside the capture", cudaStreamCaptureModeGlobal,
                   [&](cudaStream_t s) { return cudaStreamWaitEvent(s, outside, 0); }, cudaErrorStreamCaptureIsolation);
    cudaEventDestroy(outside);
    cudaStreamDestroy(other);
    cudaEvent_t inside;
    cudaEventCreateWithFlags(&inside, cudaEventDisableTiming);
    expect_refusal("cudaEventQuery on an event recorded inside the capture", cudaStreamCaptureModeRelaxed,
                   [&](cudaStream_t s) {
                       cudaEventRecord(inside, s);
                       return cudaEventQuery(inside);
                   }, cudaErrorStreamCaptureUnsupported);
    cudaEventDestroy(inside);
    expect_refusal("cudaMemcpyAsync to pageable memory", cudaStreamCaptureModeGlobal, [&](cudaStream_t s) {
        return cudaMemcpyAsync(pageable.data(), d, 64, cudaMemcpyDeviceToHost, s);
    }, cudaErrorStreamCaptureUnsupported);

    // Thread-local mode: the capturing thread's cudaMalloc is refused, another thread's is not.
    expect_refusal("cudaMalloc (thread-local mode)", cudaStreamCaptureModeThreadLocal, [](cudaStream_t) {
        void* p;
        return cudaMalloc(&p, 64);
    }, cudaErrorStreamCaptureUnsupported);
    {
        cudaStream_t t = new_stream();
        CHECK(cudaStreamBeginCapture(t, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "thread-local begin");
        cudaError_t other = cudaErrorUnknown;
        void* q = nullptr;
        std::thread([&] { other = cudaMalloc(&q, 64); }).join();
        CHECK(other == cudaSuccess, "another thread's cudaMalloc during a thread-local capture: %s", cudaGetErrorName(other));
        cudaGraph_t tg;
        CHECK(cudaStreamEndCapture(t, &tg) == cudaSuccess, "thread-local capture still valid");
        cudaGraphDestroy(tg);
        cudaFree(q);
        cudaStreamDestroy(t);
    }
    // ... and a global-mode capture refuses another thread's.
    {
        cudaStream_t t = new_stream();
        CHECK(cudaStreamBeginCapture(t, cudaStreamCaptureModeGlobal) == cudaSuccess, "global begin");
        cudaError_t other = cudaSuccess;
        void* q = nullptr;
        std::thread([&] { other = cudaMalloc(&q, 64); }).join();
        CHECK(other == cudaErrorStreamCaptureUnsupported, "another thread's cudaMalloc during a global capture: %s",
              cudaGetErrorName(other));
        cudaGraph_t tg;
        CHECK(cudaStreamEndCapture(t, &tg) == cudaErrorStreamCaptureInvalidated, "global capture invalidated");
        cudaGetLastError();
        cudaStreamDestroy(t);
    }
    // Relaxed mode allows cudaMalloc (not captured: it happens now).
    cudaStream_t s = new_stream();
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess, "relaxed begin");
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 64) == cudaSuccess && p, "cudaMalloc in relaxed mode");
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess && graph, "relaxed end");
    cudaGraphDestroy(graph);
    cudaFree(p);
    // Outside a capture the same calls work.
    CHECK(cudaStreamSynchronize(s) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess, "sync outside");
    // The legacy stream cannot capture; a second begin on a capturing stream fails.
    CHECK(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported, "legacy stream");
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess, "begin twice");
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end");
    cudaGraphDestroy(graph);
    cudaGetLastError();
    cudaStreamDestroy(s);
    cudaFree(d);
}

// Event record/wait: a second stream forks from the capture and joins back;
// ending with it unjoined fails.
void events_fork_and_join() {
    const int n = 20;
    cudaStream_t s = new_stream(), s2 = new_stream();
    cudaEvent_t fork, join;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    float *x = device_alloc<float>(n), *y = device_alloc<float>(n);
    std::vector<float> hx(n, 2.0f);
    cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemset(y, 0, n * 4);

    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
    CHECK(cudaEventRecord(fork, s) == cudaSuccess && cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess, "fork");
    cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(s2, &st);
    CHECK(st == cudaStreamCaptureStatusActive, "the waiting stream joined the capture");
    LAUNCH(axpy_kernel, dim3(1), dim3(32), 0, s2, y, x, 1.0f, n);  // y += x, on the forked stream
    CHECK(cudaEventRecord(join, s2) == cudaSuccess && cudaStreamWaitEvent(s, join, 0) == cudaSuccess, "join");
    LAUNCH(axpy_kernel, dim3(1), dim3(32), 0, s, y, y, 1.0f, n);  // y *= 2, after the join
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end after the join");
    cudaStreamIsCapturing(s2, &st);
    CHECK(st == cudaStreamCaptureStatusNone, "the forked stream left the capture with it");
    CHECK(all_bytes(y, n * 4, 0), "nothing ran during the capture");
    cudaGraphExec_t exec;
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, s);
    cudaGraphLaunch(exec, s);
    std::vector<float> hy(n);
    cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) CHECK(hy[i] == 12.0f, "y[%d] = %g, expected ((0 + 2) * 2 + 2) * 2 = 12", i, hy[i]);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);

    // Forked work never joined back: cudaErrorStreamCaptureUnjoined.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(s2, fork, 0);
    LAUNCH(axpy_kernel, dim3(1), dim3(32), 0, s2, y, x, 1.0f, n);
    graph = (cudaGraph_t)1;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureUnjoined && graph == nullptr, "unjoined");
    cudaGetLastError();
    cudaStreamIsCapturing(s2, &st);
    CHECK(st == cudaStreamCaptureStatusNone, "the unjoined stream is released");
    cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost);
    CHECK(hy[0] == 12.0f, "the unjoined capture ran something");
    cudaEventDestroy(fork), cudaEventDestroy(join);
    cudaFree(x), cudaFree(y);
    cudaStreamDestroy(s), cudaStreamDestroy(s2);
}

}  // namespace

int main() {
    RUN(replay_reads_pointers_and_keeps_values);
    RUN(three_replays_equal_three_eager_runs);
    RUN(refusals_return_cuda_errors);
    RUN(events_fork_and_join);
    return TESTS_DONE();
}
