// comm_nccl.cu: the collectives on GPU memory over NCCL (see llm/parallel/comm.h),
// compiled in CUDA builds; CPU-only builds leave comm_nccl_create undefined
// (a weak symbol, kernels/cuda_seam.h) and use MPI on host buffers instead.
//
// NCCL is opened at run time (dlopen of libnccl.so.2, or TRAIN_GPT_NCCL_LIB)
// and only when a rank group has two or more ranks: one GPU trains without
// NCCL installed, and a binary built elsewhere finds it wherever it lives
// (the toolkit, /usr, a Python wheel's nvidia/nccl/lib on LD_LIBRARY_PATH).
// The build needs no NCCL at all: nccl_abi.h declares what this file uses.
//
// One NCCL communicator per rank group, bootstrapped by broadcasting an
// ncclUniqueId over MPI from the group's first rank. Every collective runs on
// a communication stream of its own, so that ZeRO's per-unit reductions and
// gathers overlap the backward and forward kernels on the backend's compute
// stream; events order the two streams where a buffer changes hands.
//
// Timeouts: NCCL collectives are queued, so a hang shows up later, in some
// stream synchronisation. Each collective therefore records an event behind
// it; the watchdog (llm/parallel/watchdog.h) polls the oldest unfinished one and, past
// --collective-timeout, aborts the communicators (ncclCommAbort) so that the
// stuck kernels return, then stops the run.
#include <dlfcn.h>
#include <pthread.h>

#include "kernels/cuda/common.cuh"
#include "llm/parallel/comm.h"
#include "llm/parallel/nccl_abi.h"
#include "llm/parallel/watchdog.h"

// Collectives tracked for the watchdog at a time; when all are in flight the
// host waits for the oldest before queueing another.
#define TRACKED 64

typedef struct {
    cudaEvent_t done;
    double since;
    int step;
    char what[192];
} Tracked;

// ---- NCCL, loaded on first use --------------------------------------------------------------------
// The functions this file calls, with NCCL's own types (nccl_abi.h).
typedef struct {
    decltype(&ncclGetErrorString) GetErrorString;
    decltype(&ncclGetUniqueId) GetUniqueId;
    decltype(&ncclCommInitRank) CommInitRank;
    decltype(&ncclCommDestroy) CommDestroy;
    decltype(&ncclCommAbort) CommAbort;
    decltype(&ncclReduceScatter) ReduceScatter;
    decltype(&ncclAllReduce) AllReduce;
    decltype(&ncclAllGather) AllGather;
} NcclApi;

static NcclApi nccl_api;

#ifdef CUDA_SIM
// The CPU harness links its NCCL (tests/cuda_sim/nccl.cpp) into the program.
static const char* nccl_open(NcclApi* a) {
    *a = NcclApi{ncclGetErrorString, ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy,
                 ncclCommAbort,      ncclReduceScatter, ncclAllReduce,  ncclAllGather};
    return NULL;
}
#else
// NULL, or why NCCL could not be opened.
static const char* nccl_open(NcclApi* a) {
    static char why[512];
    const char* own = getenv("TRAIN_GPT_NCCL_LIB");
    const char* names[] = {own && own[0] ? own : "libnccl.so.2", "libnccl.so"};
    void* h = NULL;
    for (int i = 0; i < 2 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(why, sizeof why, "%s could not be loaded (%s)", names[0], dlerror());
        return why;
    }
#define NCCL_SYM(field, name)                                                                         \
    if (!(*(void**)&a->field = dlsym(h, name))) {                                                     \
        snprintf(why, sizeof why, "%s lacks %s (NCCL 2.12 or newer is needed)", names[0], name);     \
        return why;                                                                                   \
    }
    NCCL_SYM(GetErrorString, "ncclGetErrorString");
    NCCL_SYM(GetUniqueId, "ncclGetUniqueId");
    NCCL_SYM(CommInitRank, "ncclCommInitRank");
    NCCL_SYM(CommDestroy, "ncclCommDestroy");
    NCCL_SYM(CommAbort, "ncclCommAbort");
    NCCL_SYM(ReduceScatter, "ncclReduceScatter");
    NCCL_SYM(AllReduce, "ncclAllReduce");
    NCCL_SYM(AllGather, "ncclAllGather");
#undef NCCL_SYM
    return NULL;
}
#endif

// The NCCL functions; fatal, naming what is missing, when NCCL cannot be opened.
// `ranks`: the size of the group that needs it (for the message).
static const NcclApi* nccl(int ranks) {
    static int opened;
    if (!opened) {
        const char* why = nccl_open(&nccl_api);
        if (why)
            fatal("%d GPUs in one rank group need NCCL for their collectives, and %s: install NCCL "
                  "(the toolkit's, Debian's libnccl2, or `pip install nvidia-nccl-cu13` with its "
                  "site-packages/nvidia/nccl/lib on LD_LIBRARY_PATH), or set TRAIN_GPT_NCCL_LIB to "
                  "libnccl.so.2's path; one GPU needs none",
                  ranks, why);
        opened = 1;
    }
    return &nccl_api;
}

#define NCCL_CHECK(call)                                                                                   \
    do {                                                                                                   \
        ncclResult_t r_ = (call);                                                                          \
        if (r_ != ncclSuccess)                                                                             \
            fatal("NCCL error at %s:%d: %s (%s)", __FILE__, __LINE__, nccl_api.GetErrorString(r_), #call); \
    } while (0)

typedef struct {
    CommDevice base;
    Comm* c;
    ncclComm_t nccl[COMM_NUM_GROUPS];  // NULL for groups of one rank
    int owns[COMM_NUM_GROUPS];         // whether nccl[g] is destroyed with g
    cudaStream_t compute;              // the backend's stream
    cudaStream_t stream;               // collectives
    cudaEvent_t events[COMM_MAX_EVENTS];
    cudaEvent_t compute_mark, comm_mark;
    // Watchdog ring: entries [head, head + count) are queued, maybe unfinished.
    pthread_mutex_t lock;
    Tracked tracked[TRACKED];
    int head, count;
    int device;  // the watchdog thread queries the events on this rank's GPU
} NcclDevice;

static NcclDevice* nccl_of(CommDevice* d) { return (NcclDevice*)d; }

// Drops finished collectives from the front of the ring (lock held).
static void retire_finished(NcclDevice* d) {
    while (d->count > 0 && cudaEventQuery(d->tracked[d->head].done) == cudaSuccess) {
        d->head = (d->head + 1) % TRACKED;
        d->count--;
    }
}

// Records the collective just queued on the communication stream.
static void track(NcclDevice* d) {
    // Inside a CUDA graph capture (--cuda-graphs on) the event would be a node
    // of the graph, which no thread may query (CUDA refuses it and invalidates
    // the capture), and which never completes outside the graph: the
    // collectives of a captured micro-step are not tracked one by one.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(d->stream, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return;
    pthread_mutex_lock(&d->lock);
    retire_finished(d);
    if (d->count == TRACKED) {
        // Wait (watched) for the oldest outside the lock, so the watchdog can still poll.
        cudaEvent_t oldest = d->tracked[d->head].done;
        pthread_mutex_unlock(&d->lock);
        CUDA_CHECK(cudaEventSynchronize(oldest));
        pthread_mutex_lock(&d->lock);
        retire_finished(d);
    }
    Tracked* t = &d->tracked[(d->head + d->count) % TRACKED];
    const char* what = watchdog_current();
    snprintf(t->what, sizeof t->what, "%s (NCCL)", what ? what : "a collective");
    t->since = now_seconds();
    t->step = watchdog_step();
    CUDA_CHECK(cudaEventRecord(t->done, d->stream));
    d->count++;
    pthread_mutex_unlock(&d->lock);
}

static int poll_oldest(void* ctx, char* what, size_t what_size, double* since, int* step) {
    NcclDevice* d = (NcclDevice*)ctx;
    // The watchdog thread's current device: without this its first CUDA call
    // would create a context on GPU 0, on every rank.
    cudaSetDevice(d->device);
    pthread_mutex_lock(&d->lock);
    retire_finished(d);
    int pending = d->count > 0;
    if (pending) {
        const Tracked* t = &d->tracked[d->head];
        snprintf(what, what_size, "%s", t->what);
        *since = t->since;
        *step = t->step;
    }
    pthread_mutex_unlock(&d->lock);
    return pending;
}

// From the watchdog thread: the stuck kernels return, the run then stops.
static void abort_all(void* ctx) {
    NcclDevice* d = (NcclDevice*)ctx;
    for (int g = 0; g < COMM_NUM_GROUPS; g++)
        if (d->nccl[g] && d->owns[g]) nccl_api.CommAbort(d->nccl[g]);
}

static ncclDataType_t nccl_type(DType t) {
    if (t == DTYPE_F32) return ncclFloat32;
    if (t == DTYPE_BF16) return ncclBfloat16;
    fatal("internal: NCCL collectives over %s are not supported", dtype_name(t));
}

// acc[i] += x[i]: a reduce-scatter's result added to a gradient shard.
__global__ void accumulate_f32(float* acc, const float* x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc[i] += x[i];
}

__global__ void accumulate_bf16(__nv_bfloat16* acc, const __nv_bfloat16* x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc[i] = __float2bfloat16(__bfloat162float(acc[i]) + __bfloat162float(x[i]));
}

static void accumulate(NcclDevice* d, void* acc, const void* x, size_t n, DType t) {
    if (n == 0) return;
    const int block = 256;
    size_t want = (n + block - 1) / block;
    int grid = (int)(want < 4096 ? want : 4096);
    if (t == DTYPE_F32) {
        LAUNCH(accumulate_f32, grid, block, 0, d->stream, (float*)acc, (const float*)x, n);
    } else {
        LAUNCH(accumulate_bf16, grid, block, 0, d->stream, (__nv_bfloat16*)acc, (const __nv_bfloat16*)x, n);
    }
    CUDA_CHECK(cudaGetLastError());
}

static void nccl_reduce_scatter(CommDevice* dev, CommGroup g, void* buf, size_t chunk, DType t, void* acc) {
    NcclDevice* d = nccl_of(dev);
    size_t es = dtype_size(t);
    char* own = (char*)buf + (size_t)d->c->group[g].rank * chunk * es;
    if (d->nccl[g]) {
        NCCL_CHECK(nccl_api.ReduceScatter(buf, own, chunk, nccl_type(t), ncclSum, d->nccl[g], d->stream));
        track(d);
    }
    if (acc) accumulate(d, acc, own, chunk, t);
}

static void nccl_all_reduce(CommDevice* dev, CommGroup g, void* buf, size_t n, DType t) {
    NcclDevice* d = nccl_of(dev);
    if (d->nccl[g]) {
        NCCL_CHECK(nccl_api.AllReduce(buf, buf, n, nccl_type(t), ncclSum, d->nccl[g], d->stream));
        track(d);
    }
}

static void nccl_all_reduce_max(CommDevice* dev, CommGroup g, float* buf, size_t n) {
    NcclDevice* d = nccl_of(dev);
    if (d->nccl[g]) {
        NCCL_CHECK(nccl_api.AllReduce(buf, buf, n, ncclFloat32, ncclMax, d->nccl[g], d->stream));
        track(d);
    }
}

static void nccl_all_gather(CommDevice* dev, CommGroup g, const void* mine, void* buf, size_t chunk, DType t) {
    NcclDevice* d = nccl_of(dev);
    size_t es = dtype_size(t);
    char* own = (char*)buf + (size_t)d->c->group[g].rank * chunk * es;
    const void* send = mine ? mine : own;
    if (d->nccl[g]) {
        NCCL_CHECK(nccl_api.AllGather(send, buf, chunk, nccl_type(t), d->nccl[g], d->stream));
        track(d);
    } else if (send != own) {
        CUDA_CHECK(cudaMemcpyAsync(own, send, chunk * es, cudaMemcpyDeviceToDevice, d->stream));
    }
}

static void nccl_wait_compute(CommDevice* dev) {
    NcclDevice* d = nccl_of(dev);
    CUDA_CHECK(cudaEventRecord(d->compute_mark, d->compute));
    CUDA_CHECK(cudaStreamWaitEvent(d->stream, d->compute_mark, 0));
}

static void nccl_record(CommDevice* dev, int event) {
    NcclDevice* d = nccl_of(dev);
    CUDA_CHECK(cudaEventRecord(d->events[event], d->stream));
}

static void nccl_compute_wait(CommDevice* dev, int event) {
    NcclDevice* d = nccl_of(dev);
    CUDA_CHECK(cudaStreamWaitEvent(d->compute, d->events[event], 0));
}

static void nccl_compute_wait_all(CommDevice* dev) {
    NcclDevice* d = nccl_of(dev);
    CUDA_CHECK(cudaEventRecord(d->comm_mark, d->stream));
    CUDA_CHECK(cudaStreamWaitEvent(d->compute, d->comm_mark, 0));
}

static void nccl_destroy(CommDevice* dev) {
    NcclDevice* d = nccl_of(dev);
    watchdog_remove_async(d);
    cudaStreamSynchronize(d->stream);
    for (int i = 0; i < TRACKED; i++) cudaEventDestroy(d->tracked[i].done);
    pthread_mutex_destroy(&d->lock);
    for (int g = 0; g < COMM_NUM_GROUPS; g++)
        if (d->nccl[g] && d->owns[g]) nccl_api.CommDestroy(d->nccl[g]);
    for (int i = 0; i < COMM_MAX_EVENTS; i++) cudaEventDestroy(d->events[i]);
    cudaEventDestroy(d->compute_mark);
    cudaEventDestroy(d->comm_mark);
    cudaStreamDestroy(d->stream);
    free(d);
}

// One communicator over group g's ranks: its first rank makes the unique id,
// MPI carries it to the others.
static ncclComm_t create_group(Comm* c, CommGroup g) {
    const NcclApi* api = nccl(c->group[g].size);  // every rank of the group stops here if it has none
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->group[g].rank == 0) NCCL_CHECK(api->GetUniqueId(&id));
    comm_host_broadcast(c, g, &id, sizeof id, 0);
    ncclComm_t comm;
    NCCL_CHECK(api->CommInitRank(&comm, c->group[g].size, id, c->group[g].rank));
    return comm;
}

extern "C" CommDevice* comm_nccl_create(Comm* c, void* cuda_stream) {
    NcclDevice* d = (NcclDevice*)xcalloc(1, sizeof(NcclDevice));
    d->c = c;
    d->compute = (cudaStream_t)cuda_stream;
    // Collectives get the highest priority, so their small kernels are not
    // queued behind long GEMMs they were meant to overlap.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&d->stream, cudaStreamNonBlocking, greatest));
    for (int i = 0; i < COMM_MAX_EVENTS; i++) CUDA_CHECK(cudaEventCreateWithFlags(&d->events[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&d->compute_mark, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&d->comm_mark, cudaEventDisableTiming));
    for (int i = 0; i < TRACKED; i++) CUDA_CHECK(cudaEventCreateWithFlags(&d->tracked[i].done, cudaEventDisableTiming));
    pthread_mutex_init(&d->lock, NULL);
    CUDA_CHECK(cudaGetDevice(&d->device));
    // Every rank creates the groups in the same order (world, shard, replica);
    // a shard group that is the whole world shares the world's communicator.
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->group[g].size == 1) continue;
        if (g == COMM_SHARD && c->group[g].size == c->world) {
            d->nccl[g] = d->nccl[COMM_WORLD];
            continue;
        }
        d->nccl[g] = create_group(c, (CommGroup)g);
        d->owns[g] = 1;
    }
    CommDevice* b = &d->base;
    b->name = "nccl";
    b->reduce_scatter = nccl_reduce_scatter;
    b->all_reduce = nccl_all_reduce;
    b->all_reduce_max = nccl_all_reduce_max;
    b->all_gather = nccl_all_gather;
    b->wait_compute = nccl_wait_compute;
    b->record = nccl_record;
    b->compute_wait = nccl_compute_wait;
    b->compute_wait_all = nccl_compute_wait_all;
    b->destroy = nccl_destroy;
    watchdog_add_async(poll_oldest, abort_all, d);
    return b;
}
