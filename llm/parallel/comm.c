// comm.c: MPI start-up, the node layout and rank groups, errors that stop
// every rank, host collectives, and the collectives on backend memory for the
// CPU backend (MPI on host buffers). See comm.h.
//
// The CPU path's reductions are built from point-to-point messages rather
// than MPI_Reduce_scatter, whose summation order is the library's choice:
// here the owner of each range adds the ranks' contributions one after the
// other in rank order, onto its accumulator. A sum over ranks 0..W-1 is then
// the same floating-point computation as one rank accumulating the same W
// contributions in turn, which is what makes 1 rank x 4 micro-steps and 4
// ranks x 1 micro-step give bit-identical ZeRO-2/3 gradients.
#include "llm/parallel/comm.h"

#ifdef TRAIN_GPT_NO_MPI
#include "llm/parallel/mpi_single.h"  // make NO_MPI=1: a world of one
#else
#include <mpi.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "kernels/cuda_seam.h"
#include "llm/parallel/watchdog.h"
#include "llm/platform/launcher.h"

// Seconds a failing rank other than 0 waits before printing its error: long
// enough for rank 0's MPI_Abort to arrive when every rank hits the same error.
#define FATAL_GRACE_SECONDS 3
// Host staging of the CPU reductions, per piece of a range (like NCCL's
// fixed-size buffers, it does not grow with the model).
#define REDUCE_PIECE_BYTES ((size_t)4 << 20)
// Largest single message of a gather or broadcast (MPI counts are int).
#define MESSAGE_MAX_BYTES ((size_t)1 << 30)

typedef struct {
    MPI_Comm group[COMM_NUM_GROUPS];  // world (a duplicate), shard, replica
    char* recv_piece;                 // REDUCE_PIECE_BYTES each
    char* sum_piece;
} CommMpi;

static Comm* the_comm;  // for the fatal handlers

#define MPI_CHECK(call)                                                             \
    do {                                                                            \
        int err_ = (call);                                                          \
        if (err_ != MPI_SUCCESS) {                                                  \
            char msg_[MPI_MAX_ERROR_STRING];                                        \
            int len_ = 0;                                                           \
            MPI_Error_string(err_, msg_, &len_);                                    \
            fatal("MPI error at %s:%d: %s (%s)", __FILE__, __LINE__, msg_, #call);  \
        }                                                                           \
    } while (0)

static CommMpi* mpi_of(const Comm* c) { return (CommMpi*)c->mpi; }

// ---------------------------------------------------------------------------
// errors and exit

// Rank 0 prints at once; another rank waits in case rank 0 has the same
// error and stops everyone, and if not, says which rank it is.
static const char* fatal_before_print(void) {
    if (!the_comm || the_comm->world == 1 || the_comm->rank == 0) return NULL;
    struct timespec ts = {FATAL_GRACE_SECONDS, 0};
    nanosleep(&ts, NULL);
    static char prefix[128];
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(prefix, sizeof prefix, "rank %d of %d (%s): ", the_comm->rank, the_comm->world, host);
    return prefix;
}

static void fatal_terminate(void) {
    if (the_comm && the_comm->world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
}

static void finalize_at_exit(void) {
    int init = 0, done = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&done);
    if (init && !done) MPI_Finalize();
}

// ---------------------------------------------------------------------------
// start-up

// The node layout: machines as MPI sees them, or TRAIN_GPT_RANKS_PER_NODE
// consecutive ranks per simulated node.
static void find_nodes(Comm* c) {
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(local, &c->local_world));

    const char* env = getenv("TRAIN_GPT_RANKS_PER_NODE");
    if (env && env[0]) {
        long k;
        if (!parse_long(env, &k) || k <= 0) fatal("TRAIN_GPT_RANKS_PER_NODE='%s' is not a positive integer", env);
        if (c->world % k != 0)
            fatal("TRAIN_GPT_RANKS_PER_NODE=%ld does not divide the %d ranks into whole nodes", k, c->world);
        c->node_size = (int)k;
        c->node_rank = c->rank % (int)k;
        c->node = c->rank / (int)k;
        c->num_nodes = c->world / (int)k;
    } else {
        // Node index = rank of the node's first process among all first processes.
        MPI_Comm leaders;
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->local_rank == 0 ? 0 : MPI_UNDEFINED, c->rank, &leaders));
        int info[2] = {0, 0};
        if (leaders != MPI_COMM_NULL) {
            MPI_CHECK(MPI_Comm_rank(leaders, &info[0]));
            MPI_CHECK(MPI_Comm_size(leaders, &info[1]));
            MPI_CHECK(MPI_Comm_free(&leaders));
        }
        MPI_CHECK(MPI_Bcast(info, 2, MPI_INT, 0, local));
        c->node = info[0];
        c->num_nodes = info[1];
        c->node_rank = c->local_rank;
        c->node_size = c->local_world;
    }
    MPI_CHECK(MPI_Comm_free(&local));
}

Comm* comm_init(int* argc, char*** argv) {
#ifdef TRAIN_GPT_NO_MPI
    LauncherInfo l = launcher_info();
    if (l.world > 1)
        fatal("this train_gpt was built without MPI (make NO_MPI=1: a world of one), but %s started it as rank %d "
              "of %d: rebuild without NO_MPI=1 to train on several ranks",
              l.source, l.rank, l.world);
#endif
    int init = 0, provided = 0;
    MPI_Initialized(&init);
    // Only the main thread calls MPI; OpenMP threads compute in between.
    if (!init && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        fatal("MPI_Init failed (is this process started by mpirun or srun with a matching MPI?)");
    atexit(finalize_at_exit);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    Comm* c = (Comm*)xcalloc(1, sizeof(Comm));
    CommMpi* p = (CommMpi*)xcalloc(1, sizeof(CommMpi));
    c->mpi = p;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
    the_comm = c;
    set_fatal_exit(fatal_before_print, fatal_terminate);
    if (c->rank != 0) {
        // Step lines, summaries and --help come from rank 0 alone.
        fflush(stdout);
        if (!freopen("/dev/null", "w", stdout)) fatal("rank %d: cannot redirect stdout to /dev/null", c->rank);
    }
    find_nodes(c);
    for (int g = 0; g < COMM_NUM_GROUPS; g++) p->group[g] = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &p->group[COMM_WORLD]));
    c->group[COMM_WORLD].rank = c->rank;
    c->group[COMM_WORLD].size = c->world;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &p->group[COMM_CP]));
    c->group[COMM_CP].rank = 0;
    c->group[COMM_CP].size = 1;
    p->recv_piece = (char*)xmalloc(REDUCE_PIECE_BYTES);
    p->sum_piece = (char*)xmalloc(REDUCE_PIECE_BYTES);
    comm_set_shard_scope(c, 0);
    return c;
}

void comm_set_shard_scope(Comm* c, int node_scope) {
    if (node_scope) {
        int sizes[2] = {-c->node_size, c->node_size}, ext[2];
        MPI_CHECK(MPI_Allreduce(sizes, ext, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        if (-ext[0] != ext[1])
            fatal("--shard-scope node: nodes have different numbers of ranks (%d to %d); use --shard-scope world",
                  -ext[0], ext[1]);
    }
    comm_set_shard_group(c, node_scope ? c->node_size : c->world);
}

const char* comm_shard_group_invalid(int n, int world, int node_size, char* why, size_t size) {
    if (n < 1 || world % n != 0) snprintf(why, size, "%d does not divide the %d ranks into whole groups", n, world);
    else if (node_size % n != 0 && n % node_size != 0)
        snprintf(why, size, "%d is neither a divisor nor a multiple of the %d ranks per node", n, node_size);
    else return NULL;
    return why;
}

void comm_set_shard_group(Comm* c, int n) {
    CommMpi* p = mpi_of(c);
    if (c->dev) fatal("internal: the shard group must be set before comm_attach_backend");
    char why[128];
    if (comm_shard_group_invalid(n, c->world, c->node_size, why, sizeof why)) fatal("--shard-group %s", why);
    if (n != c->world && n % c->node_size == 0) {
        // Groups of whole nodes: every node must have the same ranks.
        int sizes[2] = {-c->node_size, c->node_size}, ext[2];
        MPI_CHECK(MPI_Allreduce(sizes, ext, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        if (-ext[0] != ext[1])
            fatal("--shard-group %d: nodes have different numbers of ranks (%d to %d)", n, -ext[0], ext[1]);
    }
    for (int g = COMM_SHARD; g <= COMM_REPLICA; g++)
        if (p->group[g] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&p->group[g]));
    // Shard: n consecutive ranks (ranks fill a node before the next, so a
    // group is inside a node or made of whole nodes). Replica: the ranks at
    // the same place in every group.
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->rank / n, c->rank, &p->group[COMM_SHARD]));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->rank % n, c->rank, &p->group[COMM_REPLICA]));
    for (int g = COMM_SHARD; g <= COMM_REPLICA; g++) {
        MPI_Comm_set_errhandler(p->group[g], MPI_ERRORS_RETURN);
        MPI_CHECK(MPI_Comm_rank(p->group[g], &c->group[g].rank));
        MPI_CHECK(MPI_Comm_size(p->group[g], &c->group[g].size));
    }
    c->node_scope = n == c->node_size && n < c->world;
}

void comm_set_context_parallel(Comm* c, int n) {
    CommMpi* p = mpi_of(c);
    if (n < 1 || c->world % n != 0) fatal("internal: context-parallel groups of %d in %d ranks", n, c->world);
    if (p->group[COMM_CP] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&p->group[COMM_CP]));
    // Consecutive ranks, so that a group's K/V traffic stays inside a node.
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->rank / n, c->rank, &p->group[COMM_CP]));
    MPI_Comm_set_errhandler(p->group[COMM_CP], MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Comm_rank(p->group[COMM_CP], &c->group[COMM_CP].rank));
    MPI_CHECK(MPI_Comm_size(p->group[COMM_CP], &c->group[COMM_CP].size));
}

void comm_finalize(Comm* c) {
    if (!c) return;
    watchdog_stop();
    if (c->dev) c->dev->destroy(c->dev);
    CommMpi* p = mpi_of(c);
    for (int g = 0; g < COMM_NUM_GROUPS; g++)
        if (p->group[g] != MPI_COMM_NULL) MPI_Comm_free(&p->group[g]);
    free(p->recv_piece);
    free(p->sum_piece);
    free(p);
    the_comm = NULL;
    set_fatal_exit(NULL, NULL);
    free(c);
    finalize_at_exit();
}

// ---------------------------------------------------------------------------
// point-to-point building blocks (host memory, any element size)

// Splits n elements into `ranks` contiguous ranges, the first n % ranks one longer.
static void split_ranges(size_t n, int ranks, size_t* off, size_t* cnt) {
    size_t base = n / (size_t)ranks, rem = n % (size_t)ranks, o = 0;
    for (int d = 0; d < ranks; d++) {
        cnt[d] = base + ((size_t)d < rem);
        off[d] = o;
        o += cnt[d];
    }
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// dst[i] += src[i] for n elements of type t.
static void add_into(void* dst, const void* src, size_t n, DType t) {
    if (t == DTYPE_F32) {
        float* d = (float*)dst;
        const float* s = (const float*)src;
#pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else if (t == DTYPE_BF16) {
        uint16_t* d = (uint16_t*)dst;
        const uint16_t* s = (const uint16_t*)src;
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + bf16_to_f32(s[i]));
    } else {
        fatal("internal: reductions over %s are not supported", dtype_name(t));
    }
}

// Every rank holds the whole buf; rank d owns [off[d], off[d] + cnt[d]) and
// receives that range from every rank. The contributions are added in rank
// order: onto acc when given (acc += c_0 + c_1 + ...), else into buf's own
// range (c_0 + c_1 + ..., rank d's own contribution read from buf first).
static void reduce_ranges(Comm* c, CommGroup g, char* buf, const size_t* off, const size_t* cnt, DType t,
                          char* acc) {
    CommMpi* p = mpi_of(c);
    MPI_Comm comm = p->group[g];
    int W = c->group[g].size, r = c->group[g].rank;
    size_t es = dtype_size(t), piece = REDUCE_PIECE_BYTES / es;
    size_t sends = 0;
    for (int d = 0; d < W; d++)
        if (d != r) sends += ceil_div(cnt[d], piece);
    MPI_Request* req = (MPI_Request*)xmalloc((sends ? sends : 1) * sizeof(MPI_Request));
    size_t k = 0;
    for (int d = 0; d < W; d++) {
        if (d == r) continue;
        for (size_t o = 0; o < cnt[d]; o += piece)
            MPI_CHECK(MPI_Isend(buf + (off[d] + o) * es, (int)(min_size(piece, cnt[d] - o) * es), MPI_BYTE, d, 0, comm,
                                &req[k++]));
    }
    for (size_t o = 0; o < cnt[r]; o += piece) {
        size_t n = min_size(piece, cnt[r] - o);
        char* sum = acc ? acc + o * es : p->sum_piece;
        for (int s = 0; s < W; s++) {
            const char* src = buf + (off[r] + o) * es;
            if (s != r) {
                MPI_CHECK(MPI_Recv(p->recv_piece, (int)(n * es), MPI_BYTE, s, 0, comm, MPI_STATUS_IGNORE));
                src = p->recv_piece;
            }
            if (!acc && s == 0) memcpy(sum, src, n * es);
            else add_into(sum, src, n, t);
        }
        if (!acc) memcpy(buf + (off[r] + o) * es, sum, n * es);
    }
    MPI_CHECK(MPI_Waitall((int)k, req, MPI_STATUSES_IGNORE));
    free(req);
}

// Rank d's range [off[d], off[d] + cnt[d]) of buf (bytes) goes to every rank.
static void gather_ranges(Comm* c, CommGroup g, char* buf, const size_t* off, const size_t* cnt) {
    MPI_Comm comm = mpi_of(c)->group[g];
    int W = c->group[g].size, r = c->group[g].rank;
    size_t msgs = 0;
    for (int d = 0; d < W; d++) msgs += ceil_div(cnt[d], MESSAGE_MAX_BYTES);
    MPI_Request* req = (MPI_Request*)xmalloc((2 * msgs + 1) * sizeof(MPI_Request));
    size_t k = 0;
    for (int d = 0; d < W; d++) {
        if (d == r) continue;
        for (size_t o = 0; o < cnt[d]; o += MESSAGE_MAX_BYTES)
            MPI_CHECK(MPI_Irecv(buf + off[d] + o, (int)min_size(MESSAGE_MAX_BYTES, cnt[d] - o), MPI_BYTE, d, 1, comm,
                                &req[k++]));
        for (size_t o = 0; o < cnt[r]; o += MESSAGE_MAX_BYTES)
            MPI_CHECK(MPI_Isend(buf + off[r] + o, (int)min_size(MESSAGE_MAX_BYTES, cnt[r] - o), MPI_BYTE, d, 1, comm,
                                &req[k++]));
    }
    MPI_CHECK(MPI_Waitall((int)k, req, MPI_STATUSES_IGNORE));
    free(req);
}

// Equal chunks of `chunk` units, as byte ranges (scale = bytes per unit).
static void equal_ranges(int W, size_t chunk, size_t scale, size_t* off, size_t* cnt) {
    for (int d = 0; d < W; d++) {
        off[d] = (size_t)d * chunk * scale;
        cnt[d] = chunk * scale;
    }
}

// ---------------------------------------------------------------------------
// collectives on backend memory: the CPU backend's host buffers over MPI

typedef struct {
    CommDevice base;
    Comm* c;
} MpiDevice;

static Comm* comm_of(CommDevice* d) { return ((MpiDevice*)d)->c; }

static void mpi_reduce_scatter(CommDevice* d, CommGroup g, void* buf, size_t chunk, DType t, void* acc) {
    Comm* c = comm_of(d);
    int W = c->group[g].size;
    size_t* off = (size_t*)xmalloc(2 * (size_t)W * sizeof(size_t));
    equal_ranges(W, chunk, 1, off, off + W);
    reduce_ranges(c, g, (char*)buf, off, off + W, t, (char*)acc);
    free(off);
}

static void mpi_all_reduce(CommDevice* d, CommGroup g, void* buf, size_t n, DType t) {
    Comm* c = comm_of(d);
    int W = c->group[g].size;
    size_t es = dtype_size(t);
    size_t* off = (size_t*)xmalloc(2 * (size_t)W * sizeof(size_t));
    split_ranges(n, W, off, off + W);
    reduce_ranges(c, g, (char*)buf, off, off + W, t, NULL);
    for (int i = 0; i < 2 * W; i++) off[i] *= es;
    gather_ranges(c, g, (char*)buf, off, off + W);
    free(off);
}

static void mpi_all_reduce_max(CommDevice* d, CommGroup g, float* buf, size_t n) {
    Comm* c = comm_of(d);
    if (n > (size_t)INT32_MAX) fatal("internal: all_reduce_max of %zu elements", n);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX, mpi_of(c)->group[g]));
}

static void mpi_all_gather(CommDevice* d, CommGroup g, const void* mine, void* buf, size_t chunk, DType t) {
    Comm* c = comm_of(d);
    size_t es = dtype_size(t);
    char* own = (char*)buf + (size_t)c->group[g].rank * chunk * es;
    if (mine && mine != own) memcpy(own, mine, chunk * es);
    int W = c->group[g].size;
    size_t* off = (size_t*)xmalloc(2 * (size_t)W * sizeof(size_t));
    equal_ranges(W, chunk * es, 1, off, off + W);
    gather_ranges(c, g, (char*)buf, off, off + W);
    free(off);
}

static void mpi_no_op(CommDevice* d) {}
static void mpi_no_op_event(CommDevice* d, int event) {}
static void mpi_destroy(CommDevice* d) { free(d); }

static CommDevice* mpi_device_create(Comm* c) {
    MpiDevice* md = (MpiDevice*)xcalloc(1, sizeof(MpiDevice));
    md->c = c;
    CommDevice* d = &md->base;
    d->name = "mpi";
    d->reduce_scatter = mpi_reduce_scatter;
    d->all_reduce = mpi_all_reduce;
    d->all_reduce_max = mpi_all_reduce_max;
    d->all_gather = mpi_all_gather;
    d->wait_compute = mpi_no_op;
    d->record = mpi_no_op_event;
    d->compute_wait = mpi_no_op_event;
    d->compute_wait_all = mpi_no_op;
    d->destroy = mpi_destroy;
    return d;
}

void comm_attach_backend(Comm* c, Backend* be) {
    if (c->dev) c->dev->destroy(c->dev);
    c->dev = NULL;
    if (strcmp(be->name, "cpu") == 0) {
        c->dev = mpi_device_create(c);
        return;
    }
    if (!comm_nccl_create)
        fatal("backend %s: this build has no collectives on GPU memory (llm/parallel/comm_nccl.cu is not linked "
              "in: build it with nvcc, `make`)", be->name);
    c->dev = comm_nccl_create(c, be->native_stream(be));
}

// Dispatch. Groups of one rank need no messages: only a copy or an
// accumulation, which the implementation does.
static CommDevice* device_of(const Comm* c) {
    if (!c->dev) fatal("internal: collective on backend memory before comm_attach_backend");
    return c->dev;
}

// What the watchdog names when a collective does not finish (main thread only).
static char watch_label[256];

static const char* group_name(CommGroup g) {
    return g == COMM_WORLD   ? "the world"
           : g == COMM_SHARD ? "the shard group"
           : g == COMM_CP    ? "the context-parallel group"
                             : "the replica group";
}

static void watch(const Comm* c, CommGroup g, const char* op) {
    snprintf(watch_label, sizeof watch_label, "%s over %s (%d ranks)", op, group_name(g), c->group[g].size);
    watchdog_arm(watch_label);
}

void comm_reduce_scatter(Comm* c, CommGroup g, void* buf, size_t chunk, DType t, void* acc) {
    if (c->group[g].size == 1 && !acc) return;
    watch(c, g, "reduce-scatter of gradients");
    device_of(c)->reduce_scatter(c->dev, g, buf, chunk, t, acc);
    watchdog_disarm();
}

void comm_all_reduce(Comm* c, CommGroup g, void* buf, size_t n, DType t) {
    if (c->group[g].size == 1) return;
    watch(c, g, "all-reduce of gradients");
    device_of(c)->all_reduce(c->dev, g, buf, n, t);
    watchdog_disarm();
}

void comm_all_reduce_max(Comm* c, CommGroup g, float* buf, size_t n) {
    if (c->group[g].size == 1 || n == 0) return;
    watch(c, g, "all-reduce (max) of FP8 amaxes");
    device_of(c)->all_reduce_max(c->dev, g, buf, n);
    watchdog_disarm();
}

void comm_all_gather(Comm* c, CommGroup g, const void* mine, void* buf, size_t chunk, DType t) {
    if (c->group[g].size == 1 && (!mine || mine == buf)) return;
    watch(c, g, "all-gather of parameters");
    device_of(c)->all_gather(c->dev, g, mine, buf, chunk, t);
    watchdog_disarm();
}

void comm_wait_compute(Comm* c) {
    device_of(c)->wait_compute(c->dev);
    if (c->capturing) c->forked = 1;  // the communication stream joins the capture
}
void comm_record(Comm* c, int event) {
    if (event < 0 || event >= COMM_MAX_EVENTS) fatal("internal: communication event %d out of range", event);
    device_of(c)->record(c->dev, event);
    if (c->capturing) c->recorded_in_capture[event] = 1;
}
void comm_compute_wait(Comm* c, int event) {
    if (event < 0 || event >= COMM_MAX_EVENTS) fatal("internal: communication event %d out of range", event);
    if (c->capturing && !c->recorded_in_capture[event]) return;  // before the capture: waited for already
    device_of(c)->compute_wait(c->dev, event);
}
void comm_compute_wait_all(Comm* c) {
    if (c->capturing && !c->forked) return;  // nothing of the capture on the communication stream
    device_of(c)->compute_wait_all(c->dev);
}
void comm_capture_begin(Comm* c) {
    c->capturing = 1;
    c->forked = 0;
    memset(c->recorded_in_capture, 0, sizeof c->recorded_in_capture);
}
void comm_capture_end(Comm* c) { c->capturing = 0; }

// ---------------------------------------------------------------------------
// collectives on host memory

void comm_host_sum(Comm* c, CommGroup g, double* x, int n) {
    int W = c->group[g].size;
    if (W == 1 || n == 0) return;
    double* all = (double*)xmalloc((size_t)W * n * sizeof(double));
    watch(c, g, "sum of host values (loss, gradient norm, validation, checkpoint agreement)");
    MPI_CHECK(MPI_Allgather(x, n, MPI_DOUBLE, all, n, MPI_DOUBLE, mpi_of(c)->group[g]));
    watchdog_disarm();
    for (int j = 0; j < n; j++) {
        double s = all[j];
        for (int r = 1; r < W; r++) s += all[(size_t)r * n + j];
        x[j] = s;
    }
    free(all);
}

void comm_host_all_gather(Comm* c, CommGroup g, void* buf, size_t chunk_bytes) {
    int W = c->group[g].size;
    if (W == 1) return;
    size_t* off = (size_t*)xmalloc(2 * (size_t)W * sizeof(size_t));
    equal_ranges(W, chunk_bytes, 1, off, off + W);
    watch(c, g, "all-gather of host data");
    gather_ranges(c, g, (char*)buf, off, off + W);
    watchdog_disarm();
    free(off);
}

void comm_host_broadcast(Comm* c, CommGroup g, void* buf, size_t bytes, int root) {
    if (c->group[g].size == 1) return;
    watch(c, g, "broadcast of host data");
    for (size_t o = 0; o < bytes; o += MESSAGE_MAX_BYTES)
        MPI_CHECK(MPI_Bcast((char*)buf + o, (int)min_size(MESSAGE_MAX_BYTES, bytes - o), MPI_BYTE, root,
                            mpi_of(c)->group[g]));
    watchdog_disarm();
}

void comm_host_minmax(Comm* c, CommGroup g, double* lo, double* hi, int n) {
    if (c->group[g].size == 1 || n == 0) return;
    watch(c, g, "min/max of memory and GPU telemetry");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, lo, n, MPI_DOUBLE, MPI_MIN, mpi_of(c)->group[g]));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, hi, n, MPI_DOUBLE, MPI_MAX, mpi_of(c)->group[g]));
    watchdog_disarm();
}

static void reducer_minmax(void* ctx, double* lo, double* hi, int n) {
    comm_host_minmax((Comm*)ctx, COMM_WORLD, lo, hi, n);
}

RankReducer comm_rank_reducer(Comm* c) {
    RankReducer r;
    r.ctx = c;
    r.minmax = c->world > 1 ? reducer_minmax : NULL;
    return r;
}
