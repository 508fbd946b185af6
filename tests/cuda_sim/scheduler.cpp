// scheduler.cpp: runs a kernel's grid on the CPU with CUDA's execution model.
//
// Blocks run on worker OS threads (CUDA_SIM_WORKERS, default 1), one block
// at a time per worker. Each thread of a block is a context with its own
// small stack (context.h). The worker's scheduler loop resumes one runnable
// thread at a time; a thread runs until it reaches a synchronisation point
// (__syncthreads, a warp collective, the end of the kernel, or, under random
// scheduling, an atomic or fence) and then switches back. So:
//   - a barrier releases when every thread of the block has reached it; one
//     that some thread can no longer reach is reported with the kernel's name;
//   - a warp collective completes when every lane named in its mask has
//     arrived (lanes that exited count, their values are poison);
//   - in order, threads run by increasing index between synchronisation
//     points; with CUDA_SIM_SCHEDULE=random they (and the blocks of the grid)
//     run in an order drawn from CUDA_SIM_SEED.
// __shared__ variables are thread_local, so they live in the worker's static
// TLS block, which is filled with 0xFF before every block (reading shared
// memory no thread of the block wrote gives NaN). The bytes just past the
// dynamic shared memory a launch asked for are checked after every block.
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/cuda_sim/context.h"
#include "tests/cuda_sim/sim_internal.h"

extern "C" const int warpSize = 32;

namespace cuda_sim {

thread_local ThreadView* tls_view = nullptr;

namespace {

// ---- options ----------------------------------------------------------------------------------------
Options read_options() {
    Options o;
    const char* s = getenv("CUDA_SIM_SCHEDULE");
    o.random_schedule = s && strcmp(s, "random") == 0;
    if (s && strcmp(s, "random") != 0 && strcmp(s, "inorder") != 0 && s[0])
        fatal("CUDA_SIM_SCHEDULE=%s: expected 'inorder' or 'random'", s);
    s = getenv("CUDA_SIM_SEED");
    o.seed = s && s[0] ? strtoull(s, nullptr, 10) : 1;
    s = getenv("CUDA_SIM_WORKERS");
    o.workers = s && s[0] ? atoi(s) : 1;
    if (o.workers < 1 || o.workers > 64) fatal("CUDA_SIM_WORKERS=%s: expected 1..64", s);
    s = getenv("CUDA_SIM_STACK_KB");
    o.stack_bytes = (s && s[0] ? (size_t)atoi(s) : 128) * 1024;
    if (o.stack_bytes < 16 * 1024) fatal("CUDA_SIM_STACK_KB=%s: at least 16", s);
    s = getenv("CUDA_SIM_MEMORY_GB");
    o.memory_bytes = (size_t)((s && s[0] ? atof(s) : 80.0) * (1 << 30));
    s = getenv("CUDA_SIM_TIMEOUT");
    o.timeout_seconds = s && s[0] ? atoi(s) : 600;
    return o;
}

void (*g_abort_hook)() = nullptr;

// ---- random numbers (splitmix64) ----------------------------------------------------------------------------
struct Rng {
    uint64_t s = 0;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    uint32_t below(uint32_t n) { return (uint32_t)(next() % n); }
};

uint64_t mix(uint64_t a, uint64_t b) {
    Rng r;
    r.s = a * 0x100000001b3ull ^ b;
    return r.next();
}

// ---- per-block state ---------------------------------------------------------------------------------------------
enum ThreadState : uint8_t { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct WarpGroup {
    bool active;
    const char* what;
    unsigned mask, arrived;
    WarpResolve resolve;
    void* data[32];
};
constexpr int kMaxGroupsPerWarp = 8;

struct WarpState {
    unsigned present;  // lanes that exist (a partial last warp has fewer)
    unsigned exited;   // lanes that do not exist or have returned
    WarpGroup groups[kMaxGroupsPerWarp];
};

struct SimThread {
    ThreadView view;
    Context ctx;
    ThreadState state;
    BarrierKind barrier_kind;
    int barrier_pred, barrier_result;
    WarpGroup* group;
    // cp.async copies issued and not yet waited for (sim_mma.h), in issue
    // order, and where each committed group ends in that list.
    struct AsyncCopy {
        void* dst;
        const void* src;
        int bytes, src_bytes;
    };
    std::vector<AsyncCopy> async_copies;
    std::vector<size_t> async_group_ends;
};

constexpr int kMaxThreads = 1024;
constexpr size_t kPage = 4096;

struct Worker;
thread_local Worker* tls_worker = nullptr;

struct Stats {
    std::atomic<uint64_t> launches{0}, blocks{0}, threads{0}, switches{0};
};
Stats g_stats;

struct Worker {
    int id = 0;
    pthread_t thread{};
    SimThread* threads = nullptr;
    unsigned char* stacks = nullptr;
    size_t stack_stride = 0;
    WarpState warps[kMaxThreads / 32];
    Context sched;
    std::vector<int> runq;
    size_t runq_head = 0;
    Rng rng;
    bool random = false;
    const LaunchSpec* launch = nullptr;
    uint3 block{};
    int nthreads = 0, done = 0, at_barrier = 0;
    SimThread* current = nullptr;
    uint64_t switches = 0;
    // This OS thread's static TLS block of the executable (where __shared__ lives).
    unsigned char* tls_base = nullptr;
    size_t tls_size = 0;
    unsigned char* dyn = nullptr;  // extern __shared__ memory, if the program has any
    const char* dyn_names = "";
    std::vector<unsigned char> altstack;

    void init();
    void run_block(const LaunchSpec* spec, uint3 b, uint64_t seed);
    void poison_shared(size_t dynamic_bytes);
    void check_dynamic_tail(size_t dynamic_bytes);
    void push(SimThread* t) { runq.push_back((int)(t - threads)); }
    SimThread* pick();
    void release_barrier();
    [[noreturn]] void report_deadlock();
    void complete(WarpState* w, WarpGroup* g);
    void thread_exit(SimThread* t);
    void yield(SimThread* t) {
        switches++;
        context_switch(&t->ctx, &sched);
    }
};

std::string lane_list(unsigned mask) {
    std::string s;
    for (int i = 0; i < 32;) {
        if (!(mask >> i & 1)) { i++; continue; }
        int j = i;
        while (j + 1 < 32 && (mask >> (j + 1) & 1)) j++;
        if (!s.empty()) s += ",";
        s += std::to_string(i);
        if (j > i) s += "-" + std::to_string(j);
        i = j + 1;
    }
    return s.empty() ? "none" : s;
}

std::string thread_list(const std::vector<int>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) j++;
        if (!s.empty()) s += ",";
        s += std::to_string(ids[i]);
        if (j > i) s += "-" + std::to_string(ids[j]);
        i = j + 1;
    }
    return s;
}

std::string block_name(const Worker* w) {
    char buf[256];
    snprintf(buf, sizeof buf, "kernel '%s' block (%u,%u,%u)", w->launch->name, w->block.x, w->block.y, w->block.z);
    return buf;
}

Worker* current_worker(const char* what) {
    Worker* w = tls_worker;
    if (!w || !w->current) fatal("%s called outside a kernel", what);
    return w;
}

// ---- the executable's TLS block on this OS thread ------------------------------------------------------------------------
struct TlsFind {
    unsigned char* base;
    size_t size;
};
int find_tls(struct dl_phdr_info* info, size_t, void* arg) {
    TlsFind* f = (TlsFind*)arg;
    if (info->dlpi_tls_modid != 1) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            f->base = (unsigned char*)info->dlpi_tls_data;
            f->size = info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

void Worker::init() {
    const Options& o = options();
    stack_stride = o.stack_bytes + kPage;
    size_t total = stack_stride * kMaxThreads;
    stacks = (unsigned char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) fatal("cannot map %zu bytes of thread stacks", total);
    for (int i = 0; i < kMaxThreads; i++) mprotect(stacks + i * stack_stride, kPage, PROT_NONE);
    threads = new SimThread[kMaxThreads];
    runq.reserve(kMaxThreads * 2);

    altstack.resize(64 * 1024);
    stack_t ss;
    ss.ss_sp = altstack.data();
    ss.ss_size = altstack.size();
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);

    TlsFind f{nullptr, 0};
    dl_iterate_phdr(find_tls, &f);
    tls_base = f.base;
    tls_size = f.size;
    if (!tls_base) fatal("cannot locate the executable's thread-local storage (needed for __shared__)");
    if (cuda_sim_dynamic_smem_array) dyn = cuda_sim_dynamic_smem_array(&dyn_names);
    if (dyn && (dyn < tls_base || dyn + kDynamicSmemCapacity > tls_base + tls_size))
        fatal("extern __shared__ memory (%s) is not in the executable's TLS block", dyn_names);
}

// Fills the TLS block with 0xFF, except the part of the dynamic shared memory
// array beyond what this launch may touch (it is large, and no one reads it).
void Worker::poison_shared(size_t dynamic_bytes) {
    if (!dyn) {
        memset(tls_base, 0xff, tls_size);
        return;
    }
    size_t keep = std::min(kDynamicSmemCapacity, dynamic_bytes + kPage);
    memset(tls_base, 0xff, (size_t)(dyn + keep - tls_base));
    unsigned char* rest = dyn + kDynamicSmemCapacity;
    memset(rest, 0xff, (size_t)(tls_base + tls_size - rest));
}

void Worker::check_dynamic_tail(size_t dynamic_bytes) {
    if (!dyn) return;
    size_t end = std::min(kDynamicSmemCapacity, dynamic_bytes + kPage);
    for (size_t k = dynamic_bytes; k < end; k++)
        if (dyn[k] != 0xff)
            fatal("%s wrote dynamic shared memory (extern __shared__ %s) at byte %zu, past the %zu bytes the launch "
                  "asked for",
                  block_name(this).c_str(), dyn_names, k, dynamic_bytes);
}

SimThread* Worker::pick() {
    size_t n = runq.size() - runq_head;
    if (random && n > 1) std::swap(runq[runq_head], runq[runq_head + rng.below((uint32_t)n)]);
    SimThread* t = &threads[runq[runq_head++]];
    if (runq_head == runq.size()) {
        runq.clear();
        runq_head = 0;
    }
    return t;
}

void thread_main(void* arg) {
    SimThread* t = (SimThread*)arg;
    Worker* w = tls_worker;
    w->launch->invoke(w->launch->closure);
    w->thread_exit(t);
}

// The first n pending copies of t land: only now are their sources read.
void complete_async_copies(SimThread* t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const SimThread::AsyncCopy& c = t->async_copies[i];
        memcpy(c.dst, c.src, (size_t)c.src_bytes);
        memset((char*)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
    }
    t->async_copies.erase(t->async_copies.begin(), t->async_copies.begin() + (long)n);
    for (size_t& e : t->async_group_ends) e = e > n ? e - n : 0;
}

void Worker::thread_exit(SimThread* t) {
    complete_async_copies(t, t->async_copies.size());  // a GPU finishes them too
    t->state = DONE;
    done++;
    WarpState* ws = &warps[t->view.warp];
    unsigned bit = 1u << t->view.lane;
    ws->exited |= bit;
    for (WarpGroup& g : ws->groups)
        if (g.active && (g.mask & bit) && ((g.arrived | ws->exited) & g.mask) == g.mask) complete(ws, &g);
    yield(t);
    __builtin_unreachable();
}

void Worker::run_block(const LaunchSpec* spec, uint3 b, uint64_t seed) {
    poison_shared(spec->dynamic_smem);
    tls_worker = this;  // after poisoning: these live in the same TLS block
    tls_view = nullptr;
    launch = spec;
    block = b;
    random = options().random_schedule;
    rng.s = seed;
    dim3 bd = spec->block;
    nthreads = (int)(bd.x * bd.y * bd.z);
    done = at_barrier = 0;
    const size_t stack_bytes = stack_stride - kPage;
    for (int i = 0; i < nthreads; i++) {
        SimThread* t = &threads[i];
        t->view.tid = make_uint3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
        t->view.bid = b;
        t->view.bdim = bd;
        t->view.gdim = spec->grid;
        t->view.lane = i % 32;
        t->view.warp = i / 32;
        t->view.linear = i;
        t->state = RUNNABLE;
        t->group = nullptr;
        t->async_copies.clear();
        t->async_group_ends.clear();
        context_init(&t->ctx, stacks + i * stack_stride + kPage, stack_bytes, thread_main, t);
    }
    int nwarps = (nthreads + 31) / 32;
    for (int w = 0; w < nwarps; w++) {
        int lanes = std::min(32, nthreads - w * 32);
        warps[w].present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        warps[w].exited = ~warps[w].present;
        for (WarpGroup& g : warps[w].groups) g.active = false;
    }
    runq.clear();
    runq_head = 0;
    for (int i = 0; i < nthreads; i++) runq.push_back(i);
    for (;;) {
        while (runq_head < runq.size()) {
            SimThread* t = pick();
            current = t;
            tls_view = &t->view;
            switches++;
            context_switch(&sched, &t->ctx);
        }
        current = nullptr;
        tls_view = nullptr;
        if (done == nthreads) break;
        if (at_barrier == nthreads) {
            release_barrier();
            continue;
        }
        report_deadlock();
    }
    check_dynamic_tail(spec->dynamic_smem);
    g_stats.threads += nthreads;
    g_stats.blocks++;
}

const char* barrier_name(BarrierKind k) {
    switch (k) {
    case BARRIER_SYNC: return "__syncthreads()";
    case BARRIER_COUNT: return "__syncthreads_count()";
    case BARRIER_AND: return "__syncthreads_and()";
    case BARRIER_OR: return "__syncthreads_or()";
    }
    return "?";
}

void Worker::release_barrier() {
    BarrierKind kind = threads[0].barrier_kind;
    int count = 0;
    for (int i = 0; i < nthreads; i++) {
        if (threads[i].barrier_kind != kind)
            fatal("%s: thread %d waits at %s while thread 0 waits at %s", block_name(this).c_str(), i,
                  barrier_name(threads[i].barrier_kind), barrier_name(kind));
        count += threads[i].barrier_pred != 0;
    }
    int result = kind == BARRIER_COUNT ? count : kind == BARRIER_AND ? count == nthreads : kind == BARRIER_OR ? count > 0 : 0;
    at_barrier = 0;
    for (int i = 0; i < nthreads; i++) {
        threads[i].barrier_result = result;
        threads[i].state = RUNNABLE;
        push(&threads[i]);
    }
}

void Worker::report_deadlock() {
    std::vector<int> exited, at_bar;
    for (int i = 0; i < nthreads; i++) {
        if (threads[i].state == DONE) exited.push_back(i);
        if (threads[i].state == AT_BARRIER) at_bar.push_back(i);
    }
    // A warp collective that waits for a lane that is somewhere else.
    for (int wi = 0; wi < (nthreads + 31) / 32; wi++)
        for (WarpGroup& g : warps[wi].groups) {
            if (!g.active) continue;
            unsigned missing = g.mask & ~g.arrived & ~warps[wi].exited;
            std::string elsewhere;
            for (int l = 0; l < 32; l++)
                if (missing >> l & 1) {
                    SimThread* t = &threads[wi * 32 + l];
                    elsewhere += " lane " + std::to_string(l) + " waits at " +
                                 (t->state == AT_BARRIER ? barrier_name(t->barrier_kind)
                                  : t->group ? t->group->what : "?") + ";";
                    break;  // the first is enough to locate the divergence
                }
            fatal("%s warp %d: %s(mask 0x%08x) is not reached by all lanes named in its mask: lanes %s arrived, "
                  "lanes %s did not;%s",
                  block_name(this).c_str(), wi, g.what, g.mask, lane_list(g.arrived).c_str(),
                  lane_list(missing).c_str(), elsewhere.c_str());
        }
    if (!at_bar.empty())
        fatal("%s: %s is not reached by all threads of the block: %zu of %d threads wait at it, threads %s exited "
              "without reaching it",
              block_name(this).c_str(), barrier_name(threads[at_bar[0]].barrier_kind), at_bar.size(), nthreads,
              thread_list(exited).c_str());
    fatal("%s: no thread can make progress", block_name(this).c_str());
}

void Worker::complete(WarpState* ws, WarpGroup* g) {
    void* data[32];
    for (int l = 0; l < 32; l++) data[l] = (g->arrived >> l & 1) ? g->data[l] : nullptr;
    if (g->resolve) g->resolve(data, g->arrived);
    int base = (int)(ws - warps) * 32;
    for (int l = 0; l < 32; l++)
        if (g->arrived >> l & 1) {
            SimThread* t = &threads[base + l];
            t->state = RUNNABLE;
            t->group = nullptr;
            push(t);
        }
    g->active = false;
}

// ---- the pool of workers --------------------------------------------------------------------------------------------------
struct Pool {
    std::mutex m;
    std::condition_variable work_cv, done_cv;
    std::vector<Worker*> workers;
    const LaunchSpec* spec = nullptr;
    std::vector<uint32_t> order;  // block visiting order (random schedule), empty = in order
    std::atomic<uint64_t> next{0};
    uint64_t total = 0, seed = 0, generation = 0;
    int busy = 0;
};
// Never destroyed: at exit the idle workers still wait on its condition variable.
Pool* g_pool_ptr = new Pool();
Pool& pool() { return *g_pool_ptr; }
std::once_flag g_signals_once;
struct sigaction g_old_actions[32];

void* worker_main(void* arg) {
    Worker* w = (Worker*)arg;
    w->init();
    uint64_t seen = 0;
    for (;;) {
        const LaunchSpec* spec;
        {
            std::unique_lock<std::mutex> lock(pool().m);
            pool().work_cv.wait(lock, [&] { return pool().generation != seen; });
            seen = pool().generation;
            spec = pool().spec;
        }
        dim3 g = spec->grid;
        for (;;) {
            uint64_t i = pool().next++;
            if (i >= pool().total) break;
            uint64_t lin = pool().order.empty() ? i : pool().order[i];
            uint3 b = make_uint3((unsigned)(lin % g.x), (unsigned)((lin / g.x) % g.y), (unsigned)(lin / ((uint64_t)g.x * g.y)));
            w->run_block(spec, b, mix(pool().seed, lin));
        }
        g_stats.switches += w->switches;
        w->switches = 0;
        tls_worker = nullptr;
        {
            std::lock_guard<std::mutex> lock(pool().m);
            if (--pool().busy == 0) pool().done_cv.notify_all();
        }
    }
    return nullptr;
}

const char* signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "segmentation fault";
    case SIGBUS: return "bus error";
    case SIGFPE: return "arithmetic exception";
    case SIGILL: return "illegal instruction";
    case SIGABRT: return "abort";
    }
    return "signal";
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
    Worker* w = tls_worker;
    if (w && w->current) {
        char msg[1024], addr[512] = "";
        if (sig == SIGSEGV || sig == SIGBUS) {
            unsigned char* a = (unsigned char*)info->si_addr;
            if (a >= w->stacks && a < w->stacks + w->stack_stride * kMaxThreads &&
                (size_t)(a - w->stacks) % w->stack_stride < kPage)
                snprintf(addr, sizeof addr, " at %p: the thread's stack overflowed (raise CUDA_SIM_STACK_KB)", (void*)a);
            else {
                char d[400];
                describe_address(a, d, sizeof d);
                snprintf(addr, sizeof addr, " at address %p (%s)", (void*)a, d);
            }
        }
        char loc[512];
        where(loc, sizeof loc);
        int n = snprintf(msg, sizeof msg, "cuda_sim: error: %s in %s%s\n", signal_name(sig), loc, addr);
        ssize_t r = write(2, msg, (size_t)std::min(n, (int)sizeof msg - 1));
        (void)r;
    }
    // Let the default action (or the previous handler) take over.
    struct sigaction* old = &g_old_actions[sig];
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) { old->sa_sigaction(sig, info, uctx); return; }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
    if (sig == SIGABRT) raise(sig);
}

void install_signal_handlers() {
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (int s : sigs) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(s, &sa, &g_old_actions[s]);
    }
}

// A forked child (the tests run kernels in children to check the harness's
// errors) has only the forking thread: it starts workers of its own.
void forget_workers_after_fork() { g_pool_ptr = new Pool(); }

void start_workers() {
    std::call_once(g_signals_once, [] {
        install_signal_handlers();
        pthread_atfork(nullptr, nullptr, forget_workers_after_fork);
    });
    int n = options().workers;
    for (int i = 0; i < n; i++) {
        Worker* w = new Worker();
        w->id = i;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64u << 20);  // room for the static TLS (shared memory) and the scheduler
        if (pthread_create(&w->thread, &attr, worker_main, w) != 0) fatal("cannot start a worker thread");
        pthread_attr_destroy(&attr);
        pthread_detach(w->thread);
        pool().workers.push_back(w);
    }
}

void print_stats() {
    fprintf(stderr, "cuda_sim: %llu launches, %llu blocks, %llu threads, %llu context switches\n",
            (unsigned long long)g_stats.launches.load(), (unsigned long long)g_stats.blocks.load(),
            (unsigned long long)g_stats.threads.load(), (unsigned long long)g_stats.switches.load());
}

}  // namespace

// ---- public entry points -------------------------------------------------------------------------------------------------------
Options& options() {
    static Options o = read_options();
    return o;
}

void set_abort_hook(void (*hook)()) { g_abort_hook = hook; }

bool in_kernel() { return tls_worker && tls_worker->current; }

const char* where(char* buf, size_t n) {
    Worker* w = tls_worker;
    if (!w || !w->current) {
        snprintf(buf, n, "host code");
        return buf;
    }
    uint3 t = w->current->view.tid;
    snprintf(buf, n, "%s thread (%u,%u,%u)", block_name(w).c_str(), t.x, t.y, t.z);
    return buf;
}

void fatal(const char* fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "cuda_sim: error: %s\n", msg);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook();
    _exit(1);
}

void launch_grid(const LaunchSpec& spec) {
    if (tls_worker) fatal("kernel '%s' launched from device code (dynamic parallelism is not simulated)", spec.name);
    // Launches from several host threads take turns: the pool runs one grid at a time.
    static std::mutex launch_mutex;
    std::lock_guard<std::mutex> one_grid_at_a_time(launch_mutex);
    dim3 g = spec.grid, b = spec.block;
    uint64_t nthreads = (uint64_t)b.x * b.y * b.z;
    const char* problem = nullptr;
    cudaError_t err = cudaSuccess;
    char detail[256] = "";
    if (g.x == 0 || g.y == 0 || g.z == 0 || nthreads == 0) {
        problem = "an empty grid or block";
        err = cudaErrorInvalidConfiguration;
    } else if (b.x > 1024 || b.y > 1024 || b.z > 64 || nthreads > 1024) {
        problem = "more than 1024 threads per block (or a dimension over 1024/1024/64)";
        err = cudaErrorInvalidConfiguration;
    } else if (g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
        problem = "a grid dimension over its limit (2^31-1, 65535, 65535)";
        err = cudaErrorInvalidConfiguration;
    } else if (spec.dynamic_smem > max_dynamic_smem(spec.function)) {
        snprintf(detail, sizeof detail,
                 "%zu bytes of dynamic shared memory, over the kernel's limit of %zu (cudaFuncSetAttribute("
                 "cudaFuncAttributeMaxDynamicSharedMemorySize) raises it up to %zu)",
                 spec.dynamic_smem, max_dynamic_smem(spec.function), kSmemPerBlockOptin);
        problem = detail;
        err = cudaErrorInvalidValue;
    } else if (!valid_stream(spec.stream)) {
        problem = "a stream that does not exist (destroyed?)";
        err = cudaErrorInvalidResourceHandle;
    }
    if (problem) {
        fprintf(stderr, "cuda_sim: launch of kernel '%s' with grid (%u,%u,%u) block (%u,%u,%u) fails: %s\n", spec.name,
                g.x, g.y, g.z, b.x, b.y, b.z, problem);
        set_last_error(err);
        return;
    }
    // On a capturing stream: keep a copy of the arguments, run at each graph launch.
    if (spec.clone && stream_capturing(spec.stream)) {
        struct Held {
            LaunchSpec spec;
            ~Held() { spec.drop((void*)spec.closure); }
        };
        auto held = std::make_shared<Held>();
        held->spec = spec;
        held->spec.closure = spec.clone(spec.closure);
        held->spec.stream = nullptr;  // a graph's kernels are not tied to the capturing stream
        capture_record(spec.stream, spec.name, [held] { launch_grid(held->spec); });
        return;
    }
    {
        std::lock_guard<std::mutex> lock(pool().m);
        if (pool().workers.empty()) start_workers();
    }
    uint64_t launch_index = g_stats.launches++;
    uint64_t total = (uint64_t)g.x * g.y * g.z;
    const Options& o = options();
    {
        std::unique_lock<std::mutex> lock(pool().m);
        pool().spec = &spec;
        pool().total = total;
        pool().seed = mix(o.seed, launch_index);
        pool().order.clear();
        if (o.random_schedule && total > 1) {
            if (total > (1u << 26)) fatal("kernel '%s': grid of %llu blocks is too large to simulate", spec.name, (unsigned long long)total);
            pool().order.resize(total);
            for (uint64_t i = 0; i < total; i++) pool().order[i] = (uint32_t)i;
            Rng r;
            r.s = pool().seed;
            for (uint64_t i = total - 1; i > 0; i--) std::swap(pool().order[i], pool().order[r.next() % (i + 1)]);
        }
        pool().next = 0;
        pool().busy = (int)pool().workers.size();
        pool().generation++;
        pool().work_cv.notify_all();
        if (!pool().done_cv.wait_for(lock, std::chrono::seconds(o.timeout_seconds), [] { return pool().busy == 0; }))
            fatal("kernel '%s' did not finish within %d s (CUDA_SIM_TIMEOUT); blocks run one at a time per worker, so "
                  "a block that waits for another block never returns",
                  spec.name, o.timeout_seconds);
        pool().spec = nullptr;
    }
    check_canaries(spec.name);
    static bool stats = getenv("CUDA_SIM_STATS") != nullptr;
    static bool registered = false;
    if (stats && !registered) {
        registered = true;
        atexit(print_stats);
    }
}

void set_schedule(bool random, uint64_t seed) {
    options().random_schedule = random;
    options().seed = seed;
}

void device_trap(const char* what) {
    char loc[512];
    fatal("%s in %s", what, where(loc, sizeof loc));
}

std::string lanes_named(unsigned mask) { return lane_list(mask); }

void maybe_yield() {
    Worker* w = tls_worker;
    if (!w || !w->current || !w->random) return;
    if (w->rng.next() & 1) {
        SimThread* t = w->current;
        w->push(t);
        w->yield(t);
    }
}

int block_barrier(BarrierKind kind, int predicate) {
    Worker* w = current_worker(barrier_name(kind));
    SimThread* t = w->current;
    t->state = AT_BARRIER;
    t->barrier_kind = kind;
    t->barrier_pred = predicate;
    w->at_barrier++;
    w->yield(t);
    return t->barrier_result;
}

void warp_collective(const char* what, unsigned mask, void* lane_data, WarpResolve resolve) {
    Worker* w = current_worker(what);
    SimThread* t = w->current;
    unsigned lane = t->view.lane, bit = 1u << lane;
    WarpState* ws = &w->warps[t->view.warp];
    if (!(mask & bit))
        fatal("%s thread %u (warp %u lane %u) calls %s with mask 0x%08x, which does not name the lane itself",
              block_name(w).c_str(), t->view.linear, t->view.warp, lane, what, mask);
    WarpGroup* g = nullptr;
    for (WarpGroup& c : ws->groups) {
        if (!c.active) continue;
        if (c.mask == mask) {
            if (c.what != what && strcmp(c.what, what) != 0)
                fatal("%s warp %u: lanes %s wait at %s(mask 0x%08x) while lane %u calls %s with the same mask",
                      block_name(w).c_str(), t->view.warp, lane_list(c.arrived).c_str(), c.what, c.mask, lane, what);
            g = &c;
        } else if (c.mask & mask) {
            fatal("%s warp %u: lanes %s wait at %s(mask 0x%08x) while lane %u calls %s with the overlapping mask "
                  "0x%08x",
                  block_name(w).c_str(), t->view.warp, lane_list(c.arrived).c_str(), c.what, c.mask, lane, what, mask);
        }
    }
    if (!g) {
        for (WarpGroup& c : ws->groups)
            if (!c.active) { g = &c; break; }
        if (!g) fatal("%s warp %u: too many concurrent warp collectives", block_name(w).c_str(), t->view.warp);
        g->active = true;
        g->what = what;
        g->mask = mask;
        g->arrived = 0;
        g->resolve = resolve;
    }
    g->data[lane] = lane_data;
    g->arrived |= bit;
    t->state = AT_WARP;
    t->group = g;
    if (((g->arrived | ws->exited) & mask) == mask) w->complete(ws, g);
    w->yield(t);
}

// ---- cp.async (sim_mma.h) --------------------------------------------------------------------------------------------------------
void cp_async(void* dst, const void* src, int bytes, int src_bytes, bool cg) {
    const char* what = cg ? "cp.async.cg" : "cp.async.ca";
    Worker* w = current_worker(what);
    if (cg ? bytes != 16 : !(bytes == 4 || bytes == 8 || bytes == 16))
        fatal("%s: copy size %d is not allowed (%s)", what, bytes, cg ? "cg copies 16 bytes" : "ca copies 4, 8 or 16");
    if (src_bytes < 0 || src_bytes > bytes) fatal("%s: source size %d is outside 0..%d", what, src_bytes, bytes);
    if ((uintptr_t)dst % (unsigned)bytes || (uintptr_t)src % (unsigned)bytes)
        fatal("%s: %d-byte copy from %p to %p: both addresses must be %d-byte aligned", what, bytes, src, dst, bytes);
    if (src_bytes > 0 && !device_range(src, (size_t)src_bytes)) {
        char buf[256];
        describe_address(src, buf, sizeof buf);
        fatal("%s: source %p (%d bytes) is not device memory: %s", what, src, src_bytes, buf);
    }
    w->current->async_copies.push_back({dst, src, bytes, src_bytes});
    // A copy may land at any time between its issue and the wait for its group.
    // In order it lands at the wait (the latest: a missing wait reads stale
    // bytes); under random scheduling each copy lands at the issue or at the
    // wait by a coin flip, so a tile refilled while other threads still read
    // it (a missing barrier before the refill) is caught too.
    if (w->random && (w->rng.next() & 1)) {
        SimThread* t = w->current;
        SimThread::AsyncCopy c = t->async_copies.back();
        t->async_copies.pop_back();
        memcpy(c.dst, c.src, (size_t)c.src_bytes);
        memset((char*)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
    }
    maybe_yield();
}

void cp_async_commit() {
    SimThread* t = current_worker("cp.async.commit_group")->current;
    t->async_group_ends.push_back(t->async_copies.size());  // an empty group is allowed
}

void cp_async_wait(int n) {
    SimThread* t = current_worker("cp.async.wait_group")->current;
    if (n < 0) fatal("cp.async.wait_group %d: the count must be at least 0", n);
    size_t groups = t->async_group_ends.size();
    if (groups <= (size_t)n) return;
    size_t done = groups - (size_t)n;  // the oldest groups, all of whose copies land
    complete_async_copies(t, t->async_group_ends[done - 1]);
    t->async_group_ends.erase(t->async_group_ends.begin(), t->async_group_ends.begin() + (long)done);
    maybe_yield();
}

unsigned active_mask() {
    Worker* w = current_worker("__activemask");
    WarpState* ws = &w->warps[w->current->view.warp];
    return ws->present & ~ws->exited;
}

// ---- shuffles, votes, reductions, matches -----------------------------------------------------------------------------------------
namespace {
struct ShflData {
    ShflMode mode;
    uint64_t value;
    unsigned bytes;
    int arg, width;
    uint64_t result;
    const char* what;
};

void resolve_shfl(void* const* data, unsigned arrived) {
    for (int l = 0; l < 32; l++) {
        ShflData* d = (ShflData*)data[l];
        if (!d) continue;
        int wd = d->width;
        if (wd < 1 || wd > 32 || (wd & (wd - 1)))
            fatal("%s: width %d is not a power of 2 between 1 and 32", d->what, wd);
        int seg = l & ~(wd - 1), src = l;
        switch (d->mode) {
        case SHFL_IDX: src = seg + (d->arg & (wd - 1)); break;
        case SHFL_UP: src = l - d->arg >= seg ? l - d->arg : l; break;
        case SHFL_DOWN: src = l + d->arg < seg + wd ? l + d->arg : l; break;
        case SHFL_XOR: src = l ^ d->arg; if (src >= seg + wd || src < 0 || src > 31) src = l; break;
        }
        uint64_t poison = d->bytes >= 8 ? ~0ull : ((1ull << (8 * d->bytes)) - 1);
        d->result = (arrived >> src & 1) ? ((ShflData*)data[src])->value : poison;
    }
}

struct VoteData {
    VoteMode mode;
    int pred;
    unsigned result;
};
void resolve_vote(void* const* data, unsigned arrived) {
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if (data[l] && ((VoteData*)data[l])->pred) ballot |= 1u << l;
    for (int l = 0; l < 32; l++) {
        VoteData* d = (VoteData*)data[l];
        if (!d) continue;
        switch (d->mode) {
        case VOTE_BALLOT: d->result = ballot; break;
        case VOTE_ANY: d->result = ballot != 0; break;
        case VOTE_ALL: d->result = ballot == arrived; break;
        case VOTE_UNI: d->result = ballot == arrived || ballot == 0; break;
        }
    }
}

struct ReduceData {
    ReduceMode mode;
    bool is_signed;
    unsigned value, result;
};
void resolve_reduce(void* const* data, unsigned) {
    ReduceData* first = nullptr;
    uint64_t acc = 0;
    for (int l = 0; l < 32; l++) {
        ReduceData* d = (ReduceData*)data[l];
        if (!d) continue;
        if (!first) {
            first = d;
            acc = d->value;
            continue;
        }
        unsigned a = (unsigned)acc, v = d->value;
        switch (d->mode) {
        case REDUCE_ADD: acc = a + v; break;
        case REDUCE_MIN: acc = d->is_signed ? (unsigned)std::min((int)a, (int)v) : std::min(a, v); break;
        case REDUCE_MAX: acc = d->is_signed ? (unsigned)std::max((int)a, (int)v) : std::max(a, v); break;
        case REDUCE_AND: acc = a & v; break;
        case REDUCE_OR: acc = a | v; break;
        case REDUCE_XOR: acc = a ^ v; break;
        }
    }
    for (int l = 0; l < 32; l++)
        if (data[l]) ((ReduceData*)data[l])->result = (unsigned)acc;
}

struct MatchData {
    bool all;
    uint64_t value;
    unsigned result;
    int pred;
};
void resolve_match(void* const* data, unsigned arrived) {
    for (int l = 0; l < 32; l++) {
        MatchData* d = (MatchData*)data[l];
        if (!d) continue;
        unsigned same = 0;
        for (int k = 0; k < 32; k++)
            if (data[k] && ((MatchData*)data[k])->value == d->value) same |= 1u << k;
        if (d->all) {
            d->pred = same == arrived;
            d->result = d->pred ? arrived : 0;
        } else {
            d->result = same;
        }
    }
}
}  // namespace

uint64_t warp_shfl(const char* what, ShflMode mode, unsigned mask, uint64_t value, unsigned bytes, int arg, int width) {
    ShflData d{mode, value, bytes, arg, width, 0, what};
    warp_collective(what, mask, &d, resolve_shfl);
    return d.result;
}

unsigned warp_vote(const char* what, VoteMode mode, unsigned mask, int predicate) {
    VoteData d{mode, predicate, 0};
    warp_collective(what, mask, &d, resolve_vote);
    return d.result;
}

unsigned warp_reduce(const char* what, ReduceMode mode, bool is_signed, unsigned mask, unsigned value) {
    ReduceData d{mode, is_signed, value, 0};
    warp_collective(what, mask, &d, resolve_reduce);
    return d.result;
}

unsigned warp_match(const char* what, bool all, unsigned mask, uint64_t value, int* pred) {
    MatchData d{all, value, 0, 0};
    warp_collective(what, mask, &d, resolve_match);
    if (pred) *pred = d.pred;
    return d.result;
}

}  // namespace cuda_sim

// ---- wmma collectives (sim_wmma.h) ------------------------------------------------------------------------------------------------------
namespace nvcuda {
namespace wmma {
namespace detail {

void resolve_memory_op(void* const* data, unsigned arrived) {
    char loc[512];
    if (arrived != 0xffffffffu)
        cuda_sim::fatal("%s: %s needs all 32 lanes of the warp, lanes %s exited", cuda_sim::where(loc, sizeof loc),
                        ((MemoryOp*)data[__builtin_ctz(arrived)])->what, cuda_sim::lane_list(~arrived).c_str());
    const MemoryOp* first = (const MemoryOp*)data[0];
    for (int l = 1; l < 32; l++) {
        const MemoryOp* op = (const MemoryOp*)data[l];
        if (op->ptr != first->ptr || op->ldm != first->ldm || op->layout != first->layout)
            cuda_sim::fatal("%s: %s: lane %d passes (ptr %p, ldm %u, layout %d) but lane 0 passes (ptr %p, ldm %u, "
                            "layout %d); they must agree across the warp",
                            cuda_sim::where(loc, sizeof loc), first->what, l, op->ptr, op->ldm, op->layout, first->ptr,
                            first->ldm, first->layout);
    }
    if ((uintptr_t)first->ptr % 32 != 0)
        cuda_sim::fatal("%s: %s: pointer %p is not 256-bit aligned", cuda_sim::where(loc, sizeof loc), first->what,
                        first->ptr);
    if ((first->ldm * first->elem_bytes) % 16 != 0)
        cuda_sim::fatal("%s: %s: ldm %u is not a multiple of 16 bytes (%u-byte elements)",
                        cuda_sim::where(loc, sizeof loc), first->what, first->ldm, first->elem_bytes);
    unsigned min_ld = (unsigned)(first->layout == mem_row_major ? first->cols : first->rows);
    if (first->ldm < min_ld)
        cuda_sim::fatal("%s: %s: ldm %u is smaller than the tile's %s (%u)", cuda_sim::where(loc, sizeof loc),
                        first->what, first->ldm, first->layout == mem_row_major ? "row length" : "column length",
                        min_ld);
    for (int l = 0; l < 32; l++) {
        MemoryOp* op = (MemoryOp*)data[l];
        op->move(op, (unsigned)l);
    }
}

void resolve_mma(void* const* data, unsigned arrived) {
    char loc[512];
    if (arrived != 0xffffffffu)
        cuda_sim::fatal("%s: wmma::mma_sync needs all 32 lanes of the warp, lanes %s exited",
                        cuda_sim::where(loc, sizeof loc), cuda_sim::lane_list(~arrived).c_str());
    ((const MmaOp*)data[0])->compute(data, arrived);
}

}  // namespace detail
}  // namespace wmma
}  // namespace nvcuda

long long clock64() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
