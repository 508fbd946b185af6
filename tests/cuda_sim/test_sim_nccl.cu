// test_sim_nccl.cu: the simulated NCCL, on one rank without MPI and on two
// ranks over MPI. Run by the test runner as one process: it checks the
// single-rank cases itself, then starts
// `mpirun -np 2 --allow-run-as-root --oversubscribe` on itself; under mpirun
// every case runs on both ranks and rank 0 prints the results.
#include <mpi.h>
#include <nccl.h>
#include <spawn.h>

#include <vector>

#include "tests/cuda_sim/sim_test.h"

extern char** environ;

static int g_rank = 0, g_world = 1;
static ncclComm_t g_comm;

#define NCCL_OK(call) CHECK((call) == ncclSuccess, "%s failed", #call)

template <typename T>
static T* upload(const std::vector<T>& h) {
    T* d = device_alloc<T>(h.size());
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
template <typename T>
static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

// Rank r's value at element i.
static float val(int r, size_t i) { return (float)((r + 1) * 0.75 + (double)(i % 17) * 0.125 - (r == 1 ? 3.0 : 0.0)); }

// ---- cases that run on any number of ranks ----------------------------------------------------------
static void all_reduce_float_ops() {
    const size_t n = 1001;
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = val(g_rank, i);
    float* send = upload(h);
    float* recv = device_alloc<float>(n);
    ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    for (ncclRedOp_t op : ops) {
        NCCL_OK(ncclAllReduce(send, recv, n, ncclFloat32, op, g_comm, 0));
        std::vector<float> got = download(recv, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = val(0, i);
            for (int r = 1; r < g_world; r++) {
                float x = val(r, i);
                want = op == ncclProd ? want * x : op == ncclMax ? fmaxf(want, x) : op == ncclMin ? fminf(want, x) : want + x;
            }
            if (op == ncclAvg) want /= g_world;
            bad += got[i] != want;
        }
        CHECK(bad == 0, "op %d: %d elements differ", (int)op, bad);
    }
    // In place, and integers.
    NCCL_OK(ncclAllReduce(send, send, n, ncclFloat32, ncclSum, g_comm, 0));
    std::vector<float> got = download(send, n);
    float want0 = 0;
    for (int r = 0; r < g_world; r++) want0 += val(r, 0);
    CHECK(got[0] == want0, "in place: %g, want %g", got[0], want0);
    std::vector<int32_t> hi(7, g_rank + 1);
    int32_t* di = upload(hi);
    NCCL_OK(ncclAllReduce(di, di, 7, ncclInt32, ncclSum, g_comm, 0));
    CHECK(download(di, 7)[6] == g_world * (g_world + 1) / 2, "int32 sum");
    cudaFree(send);
    cudaFree(recv);
    cudaFree(di);
}

// BF16 sums round after every addition, like NCCL's ring.
static void all_reduce_bf16() {
    const size_t n = 64;
    std::vector<__nv_bfloat16> h(n);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16_rn(val(g_rank, i) * 1.001f);
    __nv_bfloat16* d = upload(h);
    NCCL_OK(ncclAllReduce(d, d, n, ncclBfloat16, ncclSum, g_comm, 0));
    std::vector<__nv_bfloat16> got = download(d, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float acc = __bfloat162float(__float2bfloat16_rn(val(0, i) * 1.001f));
        for (int r = 1; r < g_world; r++)
            acc = __bfloat162float(__float2bfloat16_rn(acc + __bfloat162float(__float2bfloat16_rn(val(r, i) * 1.001f))));
        bad += __bfloat162float(got[i]) != acc;
    }
    CHECK(bad == 0, "%d bf16 sums differ", bad);
    cudaFree(d);
}

static void reduce_scatter_and_all_gather() {
    const size_t chunk = 37;
    std::vector<float> h(chunk * g_world);
    for (size_t i = 0; i < h.size(); i++) h[i] = val(g_rank, i);
    float* send = upload(h);
    float* recv = device_alloc<float>(chunk);
    NCCL_OK(ncclReduceScatter(send, recv, chunk, ncclFloat32, ncclSum, g_comm, 0));
    std::vector<float> got = download(recv, chunk);
    int bad = 0;
    for (size_t i = 0; i < chunk; i++) {
        float want = 0;
        for (int r = 0; r < g_world; r++) want += val(r, g_rank * chunk + i);
        bad += got[i] != want;
    }
    CHECK(bad == 0, "reduce-scatter: %d differ", bad);
    // All-gather, in place: rank r's chunk already sits at offset r.
    float* all = device_alloc<float>(chunk * g_world);
    std::vector<float> mine(chunk);
    for (size_t i = 0; i < chunk; i++) mine[i] = 100.0f * g_rank + i;
    cudaMemcpy(all + g_rank * chunk, mine.data(), chunk * 4, cudaMemcpyHostToDevice);
    NCCL_OK(ncclAllGather(all + g_rank * chunk, all, chunk, ncclFloat32, g_comm, 0));
    std::vector<float> g = download(all, chunk * g_world);
    bad = 0;
    for (int r = 0; r < g_world; r++)
        for (size_t i = 0; i < chunk; i++) bad += g[r * chunk + i] != 100.0f * r + i;
    CHECK(bad == 0, "all-gather: %d differ", bad);
    cudaFree(send);
    cudaFree(recv);
    cudaFree(all);
}

static void broadcast_and_group() {
    int root = g_world - 1;
    std::vector<int32_t> h(10, g_rank == root ? 42 : -1);
    int32_t* d = upload(h);
    int32_t* out = device_alloc<int32_t>(10);
    NCCL_OK(ncclBroadcast(d, out, 10, ncclInt32, root, g_comm, 0));
    CHECK(download(out, 10)[9] == 42, "broadcast from rank %d", root);
    // A group of collectives runs at ncclGroupEnd, in order.
    std::vector<float> a(5, (float)(g_rank + 1));
    float* da = upload(a);
    float* db = device_alloc<float>(5 * g_world);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(da, da, 5, ncclFloat32, ncclSum, g_comm, 0));
    NCCL_OK(ncclAllGather(da, db, 5, ncclFloat32, g_comm, 0));
    NCCL_OK(ncclGroupEnd());
    float total = g_world * (g_world + 1) / 2.0f;
    CHECK(download(db, 5 * g_world)[5 * g_world - 1] == total, "grouped all-gather after all-reduce");
    // Ring exchange with send/recv in a group.
    std::vector<int32_t> s(3, g_rank);
    int32_t* ds = upload(s);
    int32_t* dr = device_alloc<int32_t>(3);
    int next = (g_rank + 1) % g_world, prev = (g_rank + g_world - 1) % g_world;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(ds, 3, ncclInt32, next, g_comm, 0));
    NCCL_OK(ncclRecv(dr, 3, ncclInt32, prev, g_comm, 0));
    NCCL_OK(ncclGroupEnd());
    CHECK(download(dr, 3)[2] == prev, "ring send/recv");
    for (void* p : {(void*)d, (void*)out, (void*)da, (void*)db, (void*)ds, (void*)dr}) cudaFree(p);
}

static void bad_arguments() {
    float* d = device_alloc<float>(4);
    CHECK(ncclAllReduce(d, d, 4, (ncclDataType_t)99, ncclSum, g_comm, 0) == ncclInvalidArgument, "bad type");
    CHECK(ncclAllReduce(d, d, 4, ncclFloat32, (ncclRedOp_t)77, g_comm, 0) == ncclInvalidArgument, "bad op");
    CHECK(ncclBroadcast(d, d, 4, ncclFloat32, g_world, g_comm, 0) == ncclInvalidArgument, "root out of range");
    CHECK(strcmp(ncclGetErrorString(ncclInvalidArgument), "no error") != 0, "error strings");
    int n = 0, r = -1;
    NCCL_OK(ncclCommCount(g_comm, &n));
    NCCL_OK(ncclCommUserRank(g_comm, &r));
    CHECK(n == g_world && r == g_rank, "count %d rank %d", n, r);
    cudaFree(d);
}

// ---- two ranks only ---------------------------------------------------------------------------------------
static void split_and_second_communicator() {
    // Each rank alone (color = rank), then a second world communicator from a new id.
    ncclComm_t alone;
    NCCL_OK(ncclCommSplit(g_comm, g_rank, 0, &alone, nullptr));
    int n = 0;
    NCCL_OK(ncclCommCount(alone, &n));
    CHECK(n == 1, "split by rank gives %d ranks", n);
    ncclUniqueId id;
    if (g_rank == 1) ncclGetUniqueId(&id);  // any rank may create the id
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 1, MPI_COMM_WORLD);
    ncclComm_t second;
    int reversed = g_world - 1 - g_rank;
    NCCL_OK(ncclCommInitRank(&second, g_world, id, reversed));
    std::vector<int32_t> h(1, g_rank);
    int32_t* d = upload(h);
    int32_t* all = device_alloc<int32_t>(g_world);
    NCCL_OK(ncclAllGather(d, all, 1, ncclInt32, second, 0));
    std::vector<int32_t> got = download(all, g_world);
    CHECK(got[0] == g_world - 1 && got[g_world - 1] == 0, "ranks of the second communicator are its own");
    NCCL_OK(ncclCommDestroy(second));
    NCCL_OK(ncclCommDestroy(alone));
    cudaFree(d);
    cudaFree(all);
}

static void host_buffers_are_errors() {
    float host[4] = {0};
    check_child_error([&] { ncclAllReduce(host, host, 4, ncclFloat32, ncclSum, g_comm, 0); },
                      {"ncclAllReduce: sendbuff", "not inside one device allocation"});
    float* d = device_alloc<float>(4);
    float* short_recv = device_alloc<float>(4 * g_world - 1);
    check_child_error([&] { ncclAllGather(d, short_recv, 4, ncclFloat32, g_comm, 0); },
                      {"ncclAllGather: recvbuff", "not inside one device allocation"});
    cudaFree(d);
    cudaFree(short_recv);
}

// ---- driver ----------------------------------------------------------------------------------------------------
// Under MPI, a case fails if it failed on any rank; rank 0 prints.
#define RUN_ALL(fn)                                                                                      \
    do {                                                                                                 \
        testlib_case_failed = 0;                                                                         \
        testlib_first[0] = 0;                                                                            \
        fn();                                                                                            \
        int failed_ = testlib_case_failed, any_ = failed_;                                               \
        char msg_[512];                                                                                  \
        snprintf(msg_, sizeof msg_, "rank %d: %s", g_rank, testlib_first);                             \
        if (g_world > 1) {                                                                               \
            MPI_Allreduce(&failed_, &any_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);                         \
            if (g_rank == 0 && any_ && !failed_) MPI_Recv(msg_, sizeof msg_, MPI_CHAR, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); \
            if (g_rank != 0 && failed_ && g_rank == g_world - 1) MPI_Send(msg_, sizeof msg_, MPI_CHAR, 0, 7, MPI_COMM_WORLD); \
        }                                                                                                \
        testlib_cases++;                                                                                 \
        if (any_) testlib_failures++;                                                                    \
        if (g_rank == 0) {                                                                               \
            if (any_) printf("FAIL %s_%dranks: %s\n", #fn, g_world, msg_);                              \
            else printf("ok %s_%dranks\n", #fn, g_world);                                               \
            fflush(stdout);                                                                              \
        }                                                                                                \
    } while (0)

static void run_cases() {
    RUN_ALL(all_reduce_float_ops);
    RUN_ALL(all_reduce_bf16);
    RUN_ALL(reduce_scatter_and_all_gather);
    RUN_ALL(broadcast_and_group);
    RUN_ALL(bad_arguments);
}

int main(int argc, char** argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &g_world);
        ncclUniqueId id;
        if (g_rank == 0) ncclGetUniqueId(&id);
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (ncclCommInitRank(&g_comm, g_world, id, g_rank) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
        run_cases();
        // Only rank 1 tries the erroneous calls (in a child): rank 0 must not wait for it.
        if (g_world == 2) {
            RUN_ALL(split_and_second_communicator);
        }
        ncclCommDestroy(g_comm);
        MPI_Finalize();
        return TESTS_DONE();
    }
    // One rank, no MPI.
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    if (ncclCommInitRank(&g_comm, 1, id, 0) != ncclSuccess) {
        printf("FAIL nccl_single_rank_init: ncclCommInitRank failed\n");
        return 1;
    }
    run_cases();
    RUN_ALL(host_buffers_are_errors);
    ncclCommAbort(g_comm);
    // Two ranks: this program again, under mpirun; its rank 0 prints the cases.
    fflush(stdout);
    const char* args[] = {"mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", argv[0], nullptr};
    pid_t pid;
    int status = -1;
    if (posix_spawnp(&pid, "mpirun", nullptr, nullptr, (char* const*)args, environ) != 0 || waitpid(pid, &status, 0) < 0) {
        printf("FAIL nccl_two_ranks: cannot start mpirun\n");
        return 1;
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc != 0) printf("FAIL nccl_two_ranks: mpirun -np 2 exited with status %d\n", rc);
    return TESTS_DONE() + (rc != 0);
}
