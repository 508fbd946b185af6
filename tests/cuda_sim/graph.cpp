// graph.cpp: stream capture and CUDA graphs on the CPU (cudaStreamBeginCapture
// ... cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphLaunch).
//
// While a stream captures, the work issued on it (kernel launches, async
// copies and fills, cuBLASLt matmuls, cuDNN executions, NCCL collectives) is
// not run but appended to the capture's list, holding what a real capture
// freezes: kernel arguments by value, cuBLASLt's descriptors and host-mode
// alpha/beta as they were at the call, pointers as pointers (so the memory
// behind them is read at each replay). A graph launch runs exactly that list,
// in the order it was issued (a valid order of the real graph's
// dependencies). A captured stale pointer or host value therefore gives the
// same wrong result here as on a GPU.
//
// What CUDA refuses during a capture is refused with its error codes (CUDA
// Runtime API reference: cudaStreamBeginCapture, cudaThreadExchangeStreamCaptureMode,
// and the programming guide's "Prohibited and Unhandled Operations"):
//   - synchronizing or querying a capturing stream (cudaStreamSynchronize,
//     cudaStreamQuery), cudaDeviceSynchronize, synchronous cudaMemcpy/cudaMemset
//     and cudaMalloc/cudaFree ("potentially unsafe API calls") from any thread
//     during a global-mode capture, from the capturing thread during a
//     thread-local one: cudaErrorStreamCaptureUnsupported, and the capture is
//     invalidated;
//   - an async copy between the device and pageable (not pinned) host memory
//     on a capturing stream: cudaErrorStreamCaptureUnsupported, invalidated;
//   - later work on an invalidated capture: cudaErrorStreamCaptureInvalidated,
//     which cudaStreamEndCapture also returns (with no graph);
//   - capture on the legacy default stream: cudaErrorStreamCaptureUnsupported;
//   - querying or synchronizing an event recorded inside the capture: the same;
//   - ending with a forked stream not joined back: cudaErrorStreamCaptureUnjoined;
//   - a capturing stream waiting for an event recorded outside the capture:
//     cudaErrorStreamCaptureIsolation (only in-stream order crosses the boundary).
// Events: cudaEventRecord on a capturing stream makes the event a node of
// the capture; cudaStreamWaitEvent on such an event pulls the waiting stream
// into the capture (fork), and a wait by another member on an event recorded
// after a forked stream's last work joins that stream back.
// Not modelled: implicit synchronization with the legacy stream
// (cudaErrorStreamCaptureImplicit), graph nodes added by hand.
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/cuda_sim/sim_internal.h"

namespace cuda_sim {
namespace {

struct Op {
    std::string what;
    std::function<void()> run;
};

struct Capture {
    cudaStream_t origin;
    cudaStreamCaptureMode mode;
    std::thread::id thread;  // the thread that began it (thread-local mode restricts only that one)
    bool invalidated = false;
    std::vector<Op> ops;
    // Per member stream: how many ops it issued, and up to which of them a
    // wait by another member has joined it back.
    std::map<cudaStream_t, long> issued, joined;
};

struct CapturedEvent {
    Capture* capture;
    cudaStream_t stream;
    long seq;  // the stream's issued count when the event was recorded
};

std::recursive_mutex g_mutex;
std::map<cudaStream_t, Capture*> g_capturing;
std::map<cudaEvent_t, CapturedEvent> g_events;
std::set<Capture*> g_live;
thread_local int t_replaying = 0;

Capture* capture_of(cudaStream_t s) {
    auto it = g_capturing.find(s);
    return it == g_capturing.end() ? nullptr : it->second;
}

// Whether a capture prohibits this thread's potentially unsafe calls: a
// global-mode one from any thread, a thread-local one from its own thread.
bool restricts_this_thread(const Capture* c) {
    if (c->mode == cudaStreamCaptureModeGlobal) return true;
    return c->mode == cudaStreamCaptureModeThreadLocal && c->thread == std::this_thread::get_id();
}

cudaError_t invalidate(Capture* c, cudaError_t e, const char* api, const char* why) {
    fprintf(stderr, "cuda_sim: %s during a stream capture: %s; the capture is invalidated\n", api, why);
    c->invalidated = true;
    set_last_error(e);
    return e;
}

}  // namespace

struct GraphImpl {
    std::vector<Op> ops;
};
struct GraphExecImpl {
    std::shared_ptr<std::vector<Op>> ops;
};

CaptureResult capture_record(cudaStream_t s, const char* what, std::function<void()> run) {
    if (t_replaying) return CAPTURE_NONE;
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    Capture* c = capture_of(s);
    if (!c) return CAPTURE_NONE;
    if (c->invalidated) {
        set_last_error(cudaErrorStreamCaptureInvalidated);
        return CAPTURE_INVALIDATED;
    }
    c->ops.push_back(Op{what, std::move(run)});
    c->issued[s]++;
    return CAPTURE_RECORDED;
}

bool stream_capturing(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    return !t_replaying && capture_of(s) != nullptr;
}

cudaError_t capture_refuse_sync(cudaStream_t s, const char* api) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    Capture* c = capture_of(s);
    if (!c) return cudaSuccess;
    return invalidate(c, cudaErrorStreamCaptureUnsupported, api, "the stream is capturing, so it cannot be waited for");
}

cudaError_t capture_refuse_unsafe(const char* api) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    if (t_replaying) return cudaSuccess;
    cudaError_t e = cudaSuccess;
    for (Capture* c : g_live)
        if (restricts_this_thread(c))
            e = invalidate(c, cudaErrorStreamCaptureUnsupported, api,
                           "a potentially unsafe call while a capture that prohibits them is active");
    return e;
}

cudaError_t capture_refuse_pageable(cudaStream_t s, const char* api) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    Capture* c = capture_of(s);
    if (!c || t_replaying) return cudaSuccess;
    return invalidate(c, cudaErrorStreamCaptureUnsupported, api,
                      "a copy with pageable host memory (cudaMallocHost or cudaHostRegister it)");
}

// cudaEventQuery / cudaEventSynchronize of an event last recorded inside an
// active capture: prohibited even in relaxed mode (cudaThreadExchangeStreamCaptureMode's
// documentation), cudaErrorStreamCaptureUnsupported, the capture invalidated.
cudaError_t capture_refuse_event_wait(cudaEvent_t e, const char* api) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    auto it = g_events.find(e);
    if (it == g_events.end() || t_replaying) return cudaSuccess;
    return invalidate(it->second.capture, cudaErrorStreamCaptureUnsupported, api,
                      "the event was recorded inside the capture, so it has no state to query");
}

// An event recorded on a capturing stream; false if s is not capturing.
bool capture_event_record(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    Capture* c = t_replaying ? nullptr : capture_of(s);
    if (!c) {
        g_events.erase(e);  // recorded outside: no longer a node of any capture
        return false;
    }
    g_events[e] = CapturedEvent{c, s, c->issued[s]};
    return true;
}

// A wait on an event recorded inside a capture: fork (s joins the capture) or
// join (the recording stream's work up to the event is waited for).
cudaError_t capture_stream_wait(cudaStream_t s, cudaEvent_t e, bool recorded) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    if (t_replaying) return cudaSuccess;
    auto it = g_events.find(e);
    Capture* mine = capture_of(s);
    if (it == g_events.end()) {
        // "A dependency would have been created which crosses the capture
        // sequence boundary" (cudaErrorStreamCaptureIsolation): only in-stream
        // order may cross it.
        if (mine && recorded)
            return invalidate(mine, cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent",
                              "the event was recorded outside the capture");
        return cudaSuccess;  // an ordinary wait, or an event never recorded (no dependency)
    }
    Capture* c = it->second.capture;
    if (mine && mine != c) {
        fprintf(stderr, "cuda_sim: cudaStreamWaitEvent: the stream and the event belong to different captures\n");
        set_last_error(cudaErrorStreamCaptureIsolation);
        return cudaErrorStreamCaptureIsolation;
    }
    if (!mine) {
        g_capturing[s] = c;  // fork
        c->issued[s] = 0;
        c->joined[s] = 0;
    }
    long& j = c->joined[it->second.stream];
    if (it->second.stream != s && it->second.seq > j) j = it->second.seq;
    return cudaSuccess;
}

int capture_status(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    Capture* c = capture_of(s);
    if (!c || t_replaying) return cudaStreamCaptureStatusNone;
    return c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
}

}  // namespace cuda_sim

using namespace cuda_sim;

// For tests/cuda_sim/cudnn's fake library (dlopen'ed; exported by sim.mk's
// SIM_EXPORTS): records run(ctx) on a capturing stream (drop(ctx) frees it
// with the graph) and returns 1, or returns 0 when the stream is not
// capturing (the caller runs the work now), or -1 if the capture is invalidated.
extern "C" __attribute__((visibility("default"))) int cuda_sim_capture(cudaStream_t s, const char* what,
                                                                      void (*run)(void*), void* ctx,
                                                                      void (*drop)(void*)) {
    std::shared_ptr<void> holder(ctx, drop);
    CaptureResult r = capture_record(s, what, [run, holder] { run(holder.get()); });
    return r == CAPTURE_RECORDED ? 1 : r == CAPTURE_NONE ? 0 : -1;
}

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    if (s == nullptr || s == cudaStreamLegacy) {
        fprintf(stderr, "cuda_sim: cudaStreamBeginCapture: the legacy default stream cannot capture\n");
        set_last_error(cudaErrorStreamCaptureUnsupported);
        return cudaErrorStreamCaptureUnsupported;
    }
    if (!valid_stream(s)) {
        set_last_error(cudaErrorInvalidResourceHandle);
        return cudaErrorInvalidResourceHandle;
    }
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    if (capture_of(s)) {
        set_last_error(cudaErrorIllegalState);
        return cudaErrorIllegalState;
    }
    Capture* c = new Capture();
    c->origin = s;
    c->mode = mode;
    c->thread = std::this_thread::get_id();
    c->issued[s] = 0;
    g_capturing[s] = c;
    g_live.insert(c);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    if (!graph) return cudaErrorInvalidValue;
    *graph = nullptr;
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    Capture* c = capture_of(s);
    if (!c) {
        set_last_error(cudaErrorIllegalState);
        return cudaErrorIllegalState;
    }
    if (c->origin != s) {
        set_last_error(cudaErrorStreamCaptureUnmatched);
        return cudaErrorStreamCaptureUnmatched;
    }
    cudaError_t e = c->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    if (!e)
        for (auto& kv : c->issued)
            if (kv.first != s && kv.second > c->joined[kv.first]) {
                fprintf(stderr, "cuda_sim: cudaStreamEndCapture: a forked stream has %ld operations not joined back into "
                        "the origin stream\n", kv.second - c->joined[kv.first]);
                e = cudaErrorStreamCaptureUnjoined;
            }
    for (auto it = g_capturing.begin(); it != g_capturing.end();) it = it->second == c ? g_capturing.erase(it) : ++it;
    for (auto it = g_events.begin(); it != g_events.end();) it = it->second.capture == c ? g_events.erase(it) : ++it;
    g_live.erase(c);
    if (!e) {
        GraphImpl* g = new GraphImpl();
        g->ops = std::move(c->ops);
        *graph = (cudaGraph_t)g;
    }
    delete c;
    if (e) set_last_error(e);
    return e;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
    if (!status) return cudaErrorInvalidValue;
    *status = (cudaStreamCaptureStatus)capture_status(s);
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
    // One mode per process here; the call is accepted and changes nothing.
    return mode ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!exec || !graph) return cudaErrorInvalidValue;
    GraphExecImpl* x = new GraphExecImpl();
    x->ops = std::make_shared<std::vector<Op>>(((GraphImpl*)graph)->ops);
    *exec = (cudaGraphExec_t)x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return cudaErrorInvalidValue;
    if (!valid_stream(s)) return cudaErrorInvalidResourceHandle;
    std::shared_ptr<std::vector<Op>> ops = ((GraphExecImpl*)exec)->ops;
    auto run = [ops] {
        t_replaying++;
        for (const Op& op : *ops) op.run();
        t_replaying--;
    };
    CaptureResult r = capture_record(s, "cudaGraphLaunch", run);
    if (r == CAPTURE_INVALIDATED) return cudaErrorStreamCaptureInvalidated;
    if (r == CAPTURE_NONE) run();
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete (GraphExecImpl*)exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete (GraphImpl*)graph;
    return cudaSuccess;
}

}  // extern "C"
