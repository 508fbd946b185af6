// runtime.cpp: the CUDA runtime API on the CPU, behind cuda_runtime_api.h's
// own declarations.
//
// Every call runs synchronously, so streams and events are trivially in
// order. Device memory is host memory laid out to catch the bugs a GPU would
// punish: each cudaMalloc block sits between two inaccessible guard pages,
// starts 0xFF-filled (NaN for floats), and the slack bytes around it are
// checked after every kernel, so a write even one element out of bounds is
// reported with the kernel's name. Copies are checked against the
// allocations they name and against their direction. The simulated device is
// an H100 SXM (CUDA_SIM_MEMORY_GB of memory, default 80; CUDA_SIM_DEVICES
// devices, default 1). CUDA_SIM_MAX_GRID=N lowers the backend's grid cap
// (grid_for) so that small shapes reach grid-stride loops' later rounds;
// CUDA_SIM_CONTEXTS=1 prints at exit the devices a real runtime would have
// created a context on.
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>

#include "tests/cuda_sim/sim_internal.h"

namespace cuda_sim {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kAlign = 256;  // cudaMalloc's alignment
constexpr size_t kContextReserve = (size_t)512 << 20;

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

enum AllocKind { ALLOC_DEVICE, ALLOC_MANAGED, ALLOC_PINNED, ALLOC_REGISTERED, ALLOC_SYMBOL };

struct Allocation {
    AllocKind kind;
    unsigned char* ptr;
    size_t bytes;
    unsigned char* map;   // the mapping, guard pages included (device/managed)
    size_t map_bytes;
    unsigned char* data;  // the accessible part of the mapping
    size_t data_bytes;
};

std::mutex g_mem_mutex;
std::map<uintptr_t, Allocation> g_allocs;  // by start address
size_t g_used = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
std::map<const void*, size_t> g_dyn_smem_limit;
std::set<const void*> g_streams, g_events;
int g_device = 0;

// The devices a real runtime would have created a context on: the current
// device at each call that needs one (cudaSetDevice, memory, streams).
// CUDA_SIM_CONTEXTS=1 prints them at exit ("cuda_sim: contexts on devices 1"),
// so that tests can check that a rank never touches another rank's GPU.
unsigned g_context_mask;
void report_contexts() {
    char list[128] = "";
    for (int d = 0; d < 32; d++)
        if (g_context_mask & (1u << d)) snprintf(list + strlen(list), sizeof list - strlen(list), " %d", d);
    fprintf(stderr, "cuda_sim: contexts on devices%s\n", list[0] ? list : " none");
}
void touch_context() {
    static bool armed = [] {
        const char* v = getenv("CUDA_SIM_CONTEXTS");
        if (v && v[0] && strcmp(v, "0") != 0) atexit(report_contexts);
        return true;
    }();
    (void)armed;
    g_context_mask |= 1u << (g_device & 31);
}

struct SimStream {
    unsigned flags;
    int priority;
};
struct SimEvent {
    unsigned flags;
    bool recorded;
    double time;
};

const char* kind_name(AllocKind k) {
    switch (k) {
    case ALLOC_DEVICE: return "cudaMalloc";
    case ALLOC_MANAGED: return "cudaMallocManaged";
    case ALLOC_PINNED: return "cudaMallocHost";
    case ALLOC_REGISTERED: return "cudaHostRegister";
    case ALLOC_SYMBOL: return "device symbol";
    }
    return "?";
}

// The allocation whose [ptr, ptr + bytes] contains p (the end is included:
// a pointer one past the end is a valid kernel argument). Lock held.
const Allocation* find(const void* p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    const Allocation& al = it->second;
    return a <= (uintptr_t)al.ptr + al.bytes ? &al : nullptr;
}

int device_count() {
    static int n = [] {
        const char* s = getenv("CUDA_SIM_DEVICES");
        int v = s && s[0] ? atoi(s) : 1;
        return v < 1 ? 1 : v;
    }();
    return n;
}

cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) t_last_error = e;
    return e;
}

// An API misuse the real runtime would reject (or punish later): say what it is.
cudaError_t misuse(cudaError_t e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t misuse(cudaError_t e, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_sim: %s\n", msg);
    return record(e);
}

cudaError_t allocate(void** out, size_t bytes, AllocKind kind) {
    if (!out) return record(cudaErrorInvalidValue);
    *out = nullptr;
    if (bytes == 0) return cudaSuccess;
    size_t padded = round_up(bytes, kAlign);
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (g_used + round_up(bytes, 512) + kContextReserve > options().memory_bytes) return record(cudaErrorMemoryAllocation);
    size_t data_bytes = round_up(padded, kPage);
    size_t map_bytes = data_bytes + 2 * kPage;
    unsigned char* map = (unsigned char*)mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return record(cudaErrorMemoryAllocation);
    mprotect(map, kPage, PROT_NONE);
    mprotect(map + kPage + data_bytes, kPage, PROT_NONE);
    unsigned char* data = map + kPage;
    memset(data, 0xff, data_bytes);
    Allocation a;
    a.kind = kind;
    a.ptr = data + data_bytes - padded;
    a.bytes = bytes;
    a.map = map;
    a.map_bytes = map_bytes;
    a.data = data;
    a.data_bytes = data_bytes;
    g_allocs[(uintptr_t)a.ptr] = a;
    g_used += round_up(bytes, 512);
    *out = a.ptr;
    return cudaSuccess;
}

// First damaged byte of the poisoned slack around a guarded allocation, as an
// offset from its start (negative: before it), or 0 if intact.
long damaged_slack(const Allocation& a) {
    for (unsigned char* p = a.data; p < a.ptr; p++)
        if (*p != 0xff) return (long)(p - a.ptr);
    for (unsigned char* p = a.ptr + a.bytes; p < a.data + a.data_bytes; p++)
        if (*p != 0xff) return (long)(p - a.ptr);
    return 0;
}

bool guarded(AllocKind k) { return k == ALLOC_DEVICE || k == ALLOC_MANAGED; }

cudaError_t release(void* p, AllocKind expected, const char* api) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs.find((uintptr_t)p);
    bool ok = it != g_allocs.end() &&
              (it->second.kind == expected || (expected == ALLOC_DEVICE && it->second.kind == ALLOC_MANAGED));
    if (!ok) return misuse(cudaErrorInvalidValue, "%s(%p): not a pointer that %s returned", api, p, kind_name(expected));
    Allocation a = it->second;
    if (guarded(a.kind)) {
        long off = damaged_slack(a);
        if (off) fatal("%s: the %zu-byte allocation at %p was written at offset %ld, outside its bounds", api, a.bytes, p, off);
        munmap(a.map, a.map_bytes);
        g_used -= round_up(a.bytes, 512);
    } else if (a.kind == ALLOC_PINNED) {
        free(a.ptr);
    }
    g_allocs.erase(it);
    return cudaSuccess;
}

// Checks that [p, p+n) lies inside one device-accessible allocation.
bool range_ok(const void* p, size_t n, const Allocation** out) {
    const Allocation* a = find(p);
    if (out) *out = a;
    return a && (uintptr_t)p + n <= (uintptr_t)a->ptr + a->bytes;
}

const char* copy_kind_name(cudaMemcpyKind k) {
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
    }
    return "?";
}

// Validates one side of a copy: `device` says whether the direction puts this
// side in device memory.
cudaError_t check_side(const char* api, const char* side, const void* p, size_t n, bool device, cudaMemcpyKind kind) {
    const Allocation* a = find(p);
    bool in_device = a && guarded(a->kind);
    if (device) {
        if (!a)
            return misuse(cudaErrorInvalidValue, "%s(%s): the %s %p is not device memory", api, copy_kind_name(kind), side, p);
        if ((uintptr_t)p + n > (uintptr_t)a->ptr + a->bytes)
            return misuse(cudaErrorInvalidValue,
                          "%s(%s): %zu bytes at the %s %p run %zu bytes past the end of its %zu-byte allocation", api,
                          copy_kind_name(kind), n, side, p, (size_t)((uintptr_t)p + n - ((uintptr_t)a->ptr + a->bytes)),
                          a->bytes);
    } else if (in_device && a->kind == ALLOC_DEVICE) {
        return misuse(cudaErrorInvalidValue, "%s(%s): the %s %p is device memory, not host memory", api,
                      copy_kind_name(kind), side, p);
    }
    return cudaSuccess;
}

// The host side of a copy is pinned (cudaMallocHost) or registered memory.
bool host_pinned(const void* p) {
    const Allocation* a = find(p);
    return a && (a->kind == ALLOC_PINNED || a->kind == ALLOC_REGISTERED || a->kind == ALLOC_MANAGED);
}

// A copy, on `stream` for the async calls (nullptr for the synchronous ones):
// checked now, and on a capturing stream recorded (pointers as pointers) for
// the graph's launches instead of done.
cudaError_t copy(const char* api, void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return misuse(cudaErrorInvalidValue, "%s: null pointer", api);
    bool pageable = false;
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        bool dst_dev, src_dev;
        switch (kind) {
        case cudaMemcpyHostToHost: dst_dev = src_dev = false; break;
        case cudaMemcpyHostToDevice: dst_dev = true; src_dev = false; break;
        case cudaMemcpyDeviceToHost: dst_dev = false; src_dev = true; break;
        case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
        case cudaMemcpyDefault:
            dst_dev = find(dst) != nullptr;
            src_dev = find(src) != nullptr;
            break;
        default: return misuse(cudaErrorInvalidMemcpyDirection, "%s: invalid direction %d", api, (int)kind);
        }
        if (kind != cudaMemcpyDefault || dst_dev) {
            cudaError_t e = check_side(api, "destination", dst, n, dst_dev, kind);
            if (e) return e;
        }
        if (kind != cudaMemcpyDefault || src_dev) {
            cudaError_t e = check_side(api, "source", src, n, src_dev, kind);
            if (e) return e;
        }
        pageable = (dst_dev != src_dev) && !host_pinned(dst_dev ? src : dst);
    }
    const char* d = (const char*)dst;
    const char* s = (const char*)src;
    if (d < s + n && s < d + n) return misuse(cudaErrorInvalidValue, "%s: source and destination overlap", api);
    if (stream && stream_capturing(stream)) {
        if (pageable) return capture_refuse_pageable(stream, api);
        CaptureResult r = capture_record(stream, api, [dst, src, n] { memcpy(dst, src, n); });
        return r == CAPTURE_INVALIDATED ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    }
    memcpy(dst, src, n);
    return cudaSuccess;
}

cudaError_t fill(const char* api, void* p, int value, size_t n, cudaStream_t stream = nullptr) {
    if (n == 0) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        const Allocation* a;
        if (!range_ok(p, n, &a))
            return misuse(cudaErrorInvalidValue, "%s(%p, %zu bytes): %s", api, p, n,
                          a ? "runs past the end of its allocation" : "not device memory");
    }
    if (stream) {
        CaptureResult r = capture_record(stream, api, [p, value, n] { memset(p, value, n); });
        if (r != CAPTURE_NONE) return r == CAPTURE_INVALIDATED ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    }
    memset(p, value, n);
    return cudaSuccess;
}

double now() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

bool stream_exists(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    return g_streams.count(s) != 0;
}

SimEvent* event_of(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    return g_events.count(e) ? (SimEvent*)e : nullptr;
}

}  // namespace

// ---- harness-internal interface -----------------------------------------------------------------------------------------
bool device_accessible(const void* p) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    return find(p) != nullptr;
}

bool device_range(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    return range_ok(p, bytes, nullptr);
}

// For tests/cuda_sim/cudnn's fake library, loaded with dlopen into a program
// built with the harness (exported by its link: sim.mk's SIM_EXPORTS): whether
// [p, p + bytes) lies inside one device allocation.
extern "C" __attribute__((visibility("default"))) int cuda_sim_device_range(const void* p, size_t bytes) {
    return device_range(p, bytes);
}

void register_device_range(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (find(p)) return;
    Allocation a{};
    a.kind = ALLOC_SYMBOL;
    a.ptr = (unsigned char*)p;
    a.bytes = bytes;
    g_allocs[(uintptr_t)p] = a;
}

void check_pointer_argument(const char* kernel, int index, const void* p) {
    if (!p || device_accessible(p)) return;
    fatal("kernel '%s': argument %d is %p, which is not device memory (cudaMalloc), pinned or registered host "
          "memory, or a symbol address: a GPU would fault on it",
          kernel, index, p);
}

void describe_address(const void* p, char* buf, size_t n) {
    std::unique_lock<std::mutex> lock(g_mem_mutex, std::try_to_lock);
    if (!lock.owns_lock()) {
        snprintf(buf, n, "allocations busy");
        return;
    }
    uintptr_t a = (uintptr_t)p;
    for (auto& kv : g_allocs) {
        const Allocation& al = kv.second;
        if (!guarded(al.kind) || a < (uintptr_t)al.map || a >= (uintptr_t)al.map + al.map_bytes) continue;
        if (a < (uintptr_t)al.ptr)
            snprintf(buf, n, "%zu bytes before a %zu-byte %s allocation", (size_t)((uintptr_t)al.ptr - a), al.bytes,
                     kind_name(al.kind));
        else
            snprintf(buf, n, "%zu bytes past the end of a %zu-byte %s allocation",
                     (size_t)(a - ((uintptr_t)al.ptr + al.bytes)), al.bytes, kind_name(al.kind));
        return;
    }
    snprintf(buf, n, "not near any device allocation");
}

void check_canaries(const char* after) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    for (auto& kv : g_allocs) {
        const Allocation& a = kv.second;
        if (!guarded(a.kind)) continue;
        long off = damaged_slack(a);
        if (off)
            fatal("kernel '%s' wrote outside the %zu-byte allocation at %p: byte offset %ld (%s)", after, a.bytes,
                  (void*)a.ptr, off, off < 0 ? "before its start" : "past its end");
    }
}

void set_last_error(cudaError_t e) { record(e); }
bool valid_stream(cudaStream_t s) { return stream_exists(s); }

size_t max_dynamic_smem(const void* function) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_dyn_smem_limit.find(function);
    return it == g_dyn_smem_limit.end() ? kSmemPerBlockDefault : it->second;
}

}  // namespace cuda_sim

using namespace cuda_sim;

// ---- the runtime API ------------------------------------------------------------------------------------------------------------
extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return record(cudaErrorInvalidValue);
    *count = device_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
    g_device = device;
    touch_context();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    if (!device) return record(cudaErrorInvalidValue);
    *device = g_device;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int) { return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return capture_refuse_unsafe("cudaDeviceSynchronize"); }
cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaDeviceSetLimit(enum cudaLimit, size_t) { return cudaSuccess; }
cudaError_t cudaDeviceGetLimit(size_t* value, enum cudaLimit limit) {
    *value = limit == cudaLimitStackSize ? 1024 : limit == cudaLimitMallocHeapSize ? (8u << 20) : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache) { return cudaSuccess; }
cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) { *can = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
    snprintf(id, (size_t)len, "0000:%02x:00.0", 0x18 + device);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int device) {
    if (!p) return record(cudaErrorInvalidValue);
    if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (cuda_sim)");
    p->totalGlobalMem = options().memory_bytes;
    p->sharedMemPerBlock = kSmemPerBlockDefault;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = compute_capability() / 10;
    p->minor = compute_capability() % 10;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = kSmCount;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->pciBusID = 0x18 + device;
    p->asyncEngineCount = 3;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->persistingL2CacheMaxSize = 32 * 1024 * 1024;
    p->maxThreadsPerMultiProcessor = 2048;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = kSmemPerSm;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->concurrentManagedAccess = 1;
    p->computePreemptionSupported = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = kSmemPerBlockOptin;
    p->maxBlocksPerMultiProcessor = 32;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = 1024;
    p->hostRegisterSupported = 1;
    p->memoryPoolsSupported = 1;
    p->clusterLaunch = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (!value) return record(cudaErrorInvalidValue);
    if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
    int v;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
    case cudaDevAttrMaxBlockDimX: v = 1024; break;
    case cudaDevAttrMaxBlockDimY: v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: v = 64; break;
    case cudaDevAttrMaxGridDimX: v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: v = 65535; break;
    case cudaDevAttrMaxGridDimZ: v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: v = (int)kSmemPerBlockDefault; break;
    case cudaDevAttrTotalConstantMemory: v = 65536; break;
    case cudaDevAttrWarpSize: v = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: v = 65536; break;
    case cudaDevAttrClockRate: v = 1980000; break;
    case cudaDevAttrMultiProcessorCount: v = kSmCount; break;
    case cudaDevAttrIntegrated: v = 0; break;
    case cudaDevAttrCanMapHostMemory: v = 1; break;
    case cudaDevAttrConcurrentKernels: v = 1; break;
    case cudaDevAttrEccEnabled: v = 1; break;
    case cudaDevAttrPciBusId: v = 0x18 + device; break;
    case cudaDevAttrPciDeviceId: v = 0; break;
    case cudaDevAttrMemoryClockRate: v = 2619000; break;
    case cudaDevAttrGlobalMemoryBusWidth: v = 5120; break;
    case cudaDevAttrL2CacheSize: v = 50 * 1024 * 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: v = 2048; break;
    case cudaDevAttrAsyncEngineCount: v = 3; break;
    case cudaDevAttrUnifiedAddressing: v = 1; break;
    case cudaDevAttrComputeCapabilityMajor: v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: v = 0; break;
    case cudaDevAttrStreamPrioritiesSupported: v = 1; break;
    case cudaDevAttrGlobalL1CacheSupported: v = 1; break;
    case cudaDevAttrLocalL1CacheSupported: v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: v = (int)kSmemPerSm; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: v = 65536; break;
    case cudaDevAttrManagedMemory: v = 1; break;
    case cudaDevAttrConcurrentManagedAccess: v = 1; break;
    case cudaDevAttrCooperativeLaunch: v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = (int)kSmemPerBlockOptin; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: v = 32; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: v = 1024; break;
    case cudaDevAttrMemoryPoolsSupported: v = 1; break;
    case cudaDevAttrClusterLaunch: v = 1; break;
    case cudaDevAttrHostRegisterSupported: v = 1; break;
    default: v = 0; break;
    }
    *value = v;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    touch_context();
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    size_t t = options().memory_bytes;
    if (total) *total = t;
    if (free_bytes) *free_bytes = t > g_used + kContextReserve ? t - g_used - kContextReserve : 0;
    return cudaSuccess;
}

// ---- memory -------------------------------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t bytes) {
    touch_context();
    if (cudaError_t e = capture_refuse_unsafe("cudaMalloc")) return e;
    return allocate(p, bytes, ALLOC_DEVICE);
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    return allocate(p, bytes, ALLOC_DEVICE);
}
cudaError_t cudaMallocManaged(void** p, size_t bytes, unsigned int) { return allocate(p, bytes, ALLOC_MANAGED); }
cudaError_t cudaFree(void* p) {
    if (cudaError_t e = capture_refuse_unsafe("cudaFree")) return e;
    return release(p, ALLOC_DEVICE, "cudaFree");
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    return release(p, ALLOC_DEVICE, "cudaFreeAsync");
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
    if (!p) return record(cudaErrorInvalidValue);
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    void* m = aligned_alloc(kPage, round_up(bytes, kPage));
    if (!m) return record(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    Allocation a{};
    a.kind = ALLOC_PINNED;
    a.ptr = (unsigned char*)m;
    a.bytes = bytes;
    g_allocs[(uintptr_t)m] = a;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void* p) { return release(p, ALLOC_PINNED, "cudaFreeHost"); }
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned int) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (!p || bytes == 0) return record(cudaErrorInvalidValue);
    if (find(p)) return record(cudaErrorHostMemoryAlreadyRegistered);
    Allocation a{};
    a.kind = ALLOC_REGISTERED;
    a.ptr = (unsigned char*)p;
    a.bytes = bytes;
    g_allocs[(uintptr_t)p] = a;
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.kind != ALLOC_REGISTERED) return record(cudaErrorHostMemoryNotRegistered);
    g_allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned int) {
    *dev = host;
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attr, const void* p) {
    if (!attr) return record(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    const Allocation* a = find(p);
    memset(attr, 0, sizeof *attr);
    attr->device = g_device;
    if (!a) {
        attr->type = cudaMemoryTypeUnregistered;
        attr->hostPointer = (void*)p;
    } else if (a->kind == ALLOC_PINNED || a->kind == ALLOC_REGISTERED) {
        attr->type = cudaMemoryTypeHost;
        attr->hostPointer = attr->devicePointer = (void*)p;
    } else {
        attr->type = a->kind == ALLOC_MANAGED ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
        attr->devicePointer = (void*)p;
        if (a->kind == ALLOC_MANAGED) attr->hostPointer = (void*)p;
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
    if (cudaError_t e = capture_refuse_unsafe("cudaMemcpy")) return e;
    return copy("cudaMemcpy", dst, src, n, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!stream_exists(s)) return misuse(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: invalid stream");
    return copy("cudaMemcpyAsync", dst, src, n, kind, s);
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return misuse(cudaErrorInvalidPitchValue, "cudaMemcpy2D: width exceeds a pitch");
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = copy("cudaMemcpy2D", (char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind);
        if (e) return e;
    }
    return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
    if (cudaError_t e = capture_refuse_unsafe("cudaMemset")) return e;
    return fill("cudaMemset", p, value, n);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
    if (!stream_exists(s)) return misuse(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: invalid stream");
    return fill("cudaMemsetAsync", p, value, n, s);
}
cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t n) {
    return copy("cudaMemcpyPeer", dst, src, n, cudaMemcpyDeviceToDevice);
}
cudaError_t cudaMemPrefetchAsync(const void*, size_t, struct cudaMemLocation, unsigned int, cudaStream_t) {
    return cudaSuccess;
}

// __device__ / __constant__ variables are host globals here.
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t n, size_t offset, enum cudaMemcpyKind) {
    memcpy((char*)symbol + offset, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t n, size_t offset, enum cudaMemcpyKind) {
    memcpy(dst, (const char*)symbol + offset, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t n, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t n, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpyFromSymbol(dst, symbol, n, offset, kind);
}
cudaError_t cudaGetSymbolAddress(void** dev, const void* symbol) {
    register_device_range(symbol, 1);
    *dev = (void*)symbol;
    return cudaSuccess;
}

// ---- streams and events ---------------------------------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
    touch_context();
    if (!s) return record(cudaErrorInvalidValue);
    SimStream* st = new SimStream{flags, priority};
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_streams.insert(st);
    *s = (cudaStream_t)st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) { return cudaStreamCreateWithPriority(s, flags, 0); }
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, 0, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (!g_streams.erase(s)) return record(cudaErrorInvalidResourceHandle);
    delete (SimStream*)s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    return capture_refuse_sync(s, "cudaStreamSynchronize");
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    return capture_refuse_sync(s, "cudaStreamQuery");
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    if (!stream_exists(s) || !event_of(e)) return record(cudaErrorInvalidResourceHandle);
    return capture_stream_wait(s, e, ((SimEvent*)e)->recorded);
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    *priority = s && s != cudaStreamLegacy && s != cudaStreamPerThread ? ((SimStream*)s)->priority : 0;
    return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
    if (!stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    CaptureResult r = capture_record(s, "cudaLaunchHostFunc", [fn, data] { fn(data); });
    if (r != CAPTURE_NONE) return r == CAPTURE_INVALIDATED ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    fn(data);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    if (!e) return record(cudaErrorInvalidValue);
    SimEvent* ev = new SimEvent{flags, false, 0.0};
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_events.insert(ev);
    *e = (cudaEvent_t)ev;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (!g_events.erase(e)) return record(cudaErrorInvalidResourceHandle);
    delete (SimEvent*)e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    SimEvent* ev = event_of(e);
    if (!ev || !stream_exists(s)) return record(cudaErrorInvalidResourceHandle);
    if (capture_event_record(e, s)) return cudaSuccess;  // a node of the capture (graph.cpp)
    ev->recorded = true;
    ev->time = now();
    return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int) { return cudaEventRecord(e, s); }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!event_of(e)) return record(cudaErrorInvalidResourceHandle);
    return capture_refuse_event_wait(e, "cudaEventSynchronize");
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!event_of(e)) return record(cudaErrorInvalidResourceHandle);
    return capture_refuse_event_wait(e, "cudaEventQuery");
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    SimEvent* a = event_of(start);
    SimEvent* b = event_of(end);
    if (!ms || !a || !b) return record(cudaErrorInvalidResourceHandle);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return record(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded) return record(cudaErrorInvalidResourceHandle);
    *ms = (float)((b->time - a->time) * 1e3);
    return cudaSuccess;
}

// ---- errors -------------------------------------------------------------------------------------------------------------------------
cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define NAME(x) case x: return #x;
    NAME(cudaSuccess)
    NAME(cudaErrorInvalidValue)
    NAME(cudaErrorMemoryAllocation)
    NAME(cudaErrorInitializationError)
    NAME(cudaErrorInvalidConfiguration)
    NAME(cudaErrorInvalidPitchValue)
    NAME(cudaErrorInvalidMemcpyDirection)
    NAME(cudaErrorInvalidDevice)
    NAME(cudaErrorNoDevice)
    NAME(cudaErrorInvalidResourceHandle)
    NAME(cudaErrorNotReady)
    NAME(cudaErrorIllegalAddress)
    NAME(cudaErrorLaunchFailure)
    NAME(cudaErrorLaunchOutOfResources)
    NAME(cudaErrorHostMemoryAlreadyRegistered)
    NAME(cudaErrorHostMemoryNotRegistered)
    NAME(cudaErrorNotSupported)
    NAME(cudaErrorIllegalState)
    NAME(cudaErrorStreamCaptureUnsupported)
    NAME(cudaErrorStreamCaptureInvalidated)
    NAME(cudaErrorStreamCaptureUnmatched)
    NAME(cudaErrorStreamCaptureUnjoined)
    NAME(cudaErrorStreamCaptureIsolation)
    NAME(cudaErrorStreamCaptureImplicit)
#undef NAME
    default: return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorIllegalState: return "the operation is not permitted in this state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return "unrecognized error code";
    }
}

// ---- functions and occupancy -----------------------------------------------------------------------------------------------------
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
    if (!func) return record(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > kSmemPerBlockOptin)
            return misuse(cudaErrorInvalidValue,
                          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): over the device's %zu bytes", value,
                          kSmemPerBlockOptin);
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        g_dyn_smem_limit[func] = (size_t)value;
    } else if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
        if (value < -1 || value > 100) return record(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaFuncSetCacheConfig(const void*, enum cudaFuncCache) { return cudaSuccess; }

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
    if (!attr || !func) return record(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = (int)max_dynamic_smem(func);
    attr->preferredShmemCarveout = -1;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* func, int block_size,
                                                                   size_t dyn_smem, unsigned int) {
    if (!n || !func || block_size <= 0 || block_size > 1024) return record(cudaErrorInvalidValue);
    int warps = (block_size + 31) / 32;
    int by_threads = 64 / warps;
    int by_smem = (int)(kSmemPerSm / (dyn_smem + 1024));
    *n = std::min(std::min(by_threads, 32), by_smem);
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* func, int block_size, size_t dyn_smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block_size, dyn_smem, 0);
}

}  // extern "C"

namespace cuda_sim {
int compute_capability() {
    const char* v = getenv("CUDA_SIM_CC");
    if (!v || !v[0]) return 90;
    char* end;
    long cc = strtol(v, &end, 10);
    if (*end || cc < 75 || cc > 130) fatal("CUDA_SIM_CC='%s' is not a compute capability like 90 or 100", v);
    return (int)cc;
}
}  // namespace cuda_sim

// grid_for's cap (kernels/cuda/cuda_backend.cuh), lowered by CUDA_SIM_MAX_GRID
// so that small shapes reach a grid-stride loop's later rounds. Read on every
// call: a test may change it between launches.
unsigned cuda_sim_max_grid(unsigned cap) {
    const char* v = getenv("CUDA_SIM_MAX_GRID");
    if (!v || !v[0]) return cap;
    char* end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1) cuda_sim::fatal("CUDA_SIM_MAX_GRID='%s' is not a positive number of blocks", v);
    return n < (long)cap ? (unsigned)n : cap;
}
