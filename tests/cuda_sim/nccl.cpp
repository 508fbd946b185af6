// nccl.cpp: NCCL's API (nccl.h's declarations) on the CPU, over MPI.
//
// A communicator of one rank needs nothing (programs run without mpirun);
// one of several ranks is an MPI communicator of the processes that called
// ncclCommInitRank with the same ncclUniqueId (they meet at the rank that
// created the id, which must be one of them, as in every NCCL program), or
// the result of ncclCommSplit. Collectives run when called: every buffer must
// be device memory and lie inside its allocation; reductions run in rank
// order in the element type, rounding after each addition as NCCL's ring
// does, so every rank gets identical bits. Calls between ncclGroupStart and
// ncclGroupEnd run at ncclGroupEnd, point-to-point ones paired there.
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/cuda_sim/sim_internal.h"

struct ncclComm {
    uint32_t magic;
    int rank, nranks;
    MPI_Comm mpi;  // MPI_COMM_NULL for a single rank
    std::string last_error;
};

namespace {

constexpr uint32_t kCommMagic = 0x4e43436d, kIdMagic = 0x4e434964;
constexpr int kTagBase = 0x4e00;

struct IdContent {
    uint32_t magic;
    int32_t creator;  // MPI_COMM_WORLD rank of the process that made the id (0 without MPI)
    int32_t pid;
    uint32_t serial;
};

struct PendingOp {
    enum Kind { COLLECTIVE, SEND, RECV } kind;
    std::function<ncclResult_t()> run;  // collectives
    const void* send;
    void* recv;
    size_t bytes;
    int peer;
    ncclComm_t comm;
};

int g_group_depth = 0;
std::vector<PendingOp> g_pending;
uint32_t g_serial = 0;
std::string g_last_error;

struct PreMulSum {
    bool used;
    double scalar;
};
std::vector<PreMulSum> g_premul;  // op = ncclNumOps + index

ncclResult_t fail(ncclComm_t comm, ncclResult_t r, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t fail(ncclComm_t comm, ncclResult_t r, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_sim: NCCL: %s\n", msg);
    g_last_error = msg;
    if (comm && comm->magic == kCommMagic) comm->last_error = msg;
    return r;
}

bool mpi_up() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

void abort_all() {
    if (mpi_up()) MPI_Abort(MPI_COMM_WORLD, 1);
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

// Element access as double (exact for every type here but 64-bit integers
// beyond 2^53, which reductions handle as integers below).
double get(const void* p, size_t i, ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return ((const int8_t*)p)[i];
    case ncclUint8: return ((const uint8_t*)p)[i];
    case ncclInt32: return ((const int32_t*)p)[i];
    case ncclUint32: return ((const uint32_t*)p)[i];
    case ncclFloat16: return __half2float(((const __half*)p)[i]);
    case ncclBfloat16: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    case ncclFloat32: return ((const float*)p)[i];
    case ncclFloat64: return ((const double*)p)[i];
    case ncclFloat8e4m3: return (float)((const __nv_fp8_e4m3*)p)[i];
    case ncclFloat8e5m2: return (float)((const __nv_fp8_e5m2*)p)[i];
    default: return 0;
    }
}

void put(void* p, size_t i, ncclDataType_t t, double v) {
    switch (t) {
    case ncclInt8: ((int8_t*)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t*)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    case ncclFloat16: ((__half*)p)[i] = __float2half_rn((float)v); break;
    case ncclBfloat16: ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn((float)v); break;
    case ncclFloat32: ((float*)p)[i] = (float)v; break;
    case ncclFloat64: ((double*)p)[i] = v; break;
    case ncclFloat8e4m3: ((__nv_fp8_storage_t*)p)[i] = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, __NV_E4M3); break;
    case ncclFloat8e5m2: ((__nv_fp8_storage_t*)p)[i] = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, __NV_E5M2); break;
    default: break;
    }
}

template <typename I>
I int_op(I a, I b, ncclRedOp_t op) {
    switch (op) {
    case ncclSum:
    case ncclAvg: return a + b;
    case ncclProd: return a * b;
    case ncclMax: return a < b ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return a + b;
    }
}

// out[i] = op over ranks r = 0..n-1 of in[r][i], in rank order, rounded to the
// type after every step; then /n for ncclAvg and the scalar for PreMulSum.
void reduce(void* out, const std::vector<const void*>& in, size_t count, ncclDataType_t t, ncclRedOp_t op) {
    int n = (int)in.size();
    double premul = (int)op >= ncclNumOps ? g_premul[(int)op - ncclNumOps].scalar : 1.0;
    bool custom = (int)op >= ncclNumOps;
    for (size_t i = 0; i < count; i++) {
        if (t == ncclInt64 || t == ncclUint64) {
            if (t == ncclInt64) {
                int64_t acc = ((const int64_t*)in[0])[i];
                for (int r = 1; r < n; r++) acc = int_op(acc, ((const int64_t*)in[r])[i], op);
                if (op == ncclAvg) acc /= n;
                ((int64_t*)out)[i] = acc;
            } else {
                uint64_t acc = ((const uint64_t*)in[0])[i];
                for (int r = 1; r < n; r++) acc = int_op(acc, ((const uint64_t*)in[r])[i], op);
                if (op == ncclAvg) acc /= (uint64_t)n;
                ((uint64_t*)out)[i] = acc;
            }
            continue;
        }
        double acc = get(in[0], i, t) * premul;
        put(out, i, t, acc);
        acc = get(out, i, t);
        for (int r = 1; r < n; r++) {
            double x = get(in[r], i, t) * premul;
            switch (custom ? ncclSum : op) {
            case ncclSum:
            case ncclAvg: acc += x; break;
            case ncclProd: acc *= x; break;
            case ncclMax: acc = x > acc ? x : acc; break;
            case ncclMin: acc = x < acc ? x : acc; break;
            default: break;
            }
            put(out, i, t, acc);
            acc = get(out, i, t);
        }
        if (op == ncclAvg) put(out, i, t, (t == ncclInt8 || t == ncclUint8 || t == ncclInt32 || t == ncclUint32)
                                              ? (double)(int64_t)(acc / n) : acc / n);
    }
}

bool comm_ok(ncclComm_t c) { return c && c->magic == kCommMagic; }

ncclResult_t check_common(const char* api, ncclComm_t comm, ncclDataType_t t, cudaStream_t stream) {
    if (!comm_ok(comm)) return fail(nullptr, ncclInvalidArgument, "%s: not a communicator (destroyed?)", api);
    if (!type_size(t)) return fail(comm, ncclInvalidArgument, "%s: data type %d", api, (int)t);
    if (!cuda_sim::valid_stream(stream)) return fail(comm, ncclInvalidArgument, "%s: invalid stream", api);
    return ncclSuccess;
}

ncclResult_t check_op(const char* api, ncclComm_t comm, ncclRedOp_t op) {
    int o = (int)op;
    if (o < 0 || (o >= ncclNumOps && (o - ncclNumOps >= (int)g_premul.size() || !g_premul[o - ncclNumOps].used)))
        return fail(comm, ncclInvalidArgument, "%s: reduction op %d", api, o);
    return ncclSuccess;
}

// Buffers must be device memory, whole, as on a GPU.
void check_buffer(const char* api, const char* which, const void* p, size_t bytes) {
    if (bytes == 0) return;
    if (!p) cuda_sim::fatal("%s: %s is NULL", api, which);
    if (!cuda_sim::device_range(p, bytes))
        cuda_sim::fatal("%s: %s (%p, %zu bytes) is not inside one device allocation (host memory, or too small)", api,
                        which, p, bytes);
}

// Runs now, or at ncclGroupEnd inside a group.
// A collective: run now, at the group's end, or (on a capturing stream) at
// each launch of the graph, with the buffers read then (graph.cpp). Every
// rank captures and replays the same sequence, as real NCCL requires.
ncclResult_t submit(cudaStream_t stream, std::function<ncclResult_t()> run) {
    auto replay = [run] {
        if (run() != ncclSuccess) cuda_sim::fatal("an NCCL collective captured in a CUDA graph failed when the graph ran");
    };
    cuda_sim::CaptureResult captured = cuda_sim::capture_record(stream, "NCCL collective", replay);
    if (captured == cuda_sim::CAPTURE_RECORDED) return ncclSuccess;
    if (captured == cuda_sim::CAPTURE_INVALIDATED) return ncclInvalidUsage;
    if (g_group_depth > 0) {
        PendingOp op{PendingOp::COLLECTIVE, std::move(run), nullptr, nullptr, 0, 0, nullptr};
        g_pending.push_back(std::move(op));
        return ncclSuccess;
    }
    return run();
}

// All ranks' copies of `bytes` bytes at p, in rank order.
std::vector<unsigned char> gather_all(ncclComm_t comm, const void* p, size_t bytes) {
    std::vector<unsigned char> all(bytes * comm->nranks);
    if (comm->nranks == 1) {
        memcpy(all.data(), p, bytes);
    } else {
        std::vector<unsigned char> mine((const unsigned char*)p, (const unsigned char*)p + bytes);
        MPI_Allgather(mine.data(), (int)bytes, MPI_BYTE, all.data(), (int)bytes, MPI_BYTE, comm->mpi);
    }
    return all;
}

ncclResult_t flush_group() {
    std::vector<PendingOp> ops;
    ops.swap(g_pending);
    ncclResult_t result = ncclSuccess;
    std::vector<MPI_Request> reqs;
    for (PendingOp& op : ops) {
        if (op.kind == PendingOp::COLLECTIVE) {
            ncclResult_t r = op.run();
            if (r != ncclSuccess && result == ncclSuccess) result = r;
            continue;
        }
        ncclComm_t c = op.comm;
        if (op.peer == c->rank) continue;  // self pairs are copied below
        MPI_Request q;
        if (op.kind == PendingOp::SEND)
            MPI_Isend(op.send, (int)op.bytes, MPI_BYTE, op.peer, kTagBase, c->mpi, &q);
        else
            MPI_Irecv(op.recv, (int)op.bytes, MPI_BYTE, op.peer, kTagBase, c->mpi, &q);
        reqs.push_back(q);
    }
    // A rank may send to itself: pair its sends and receives in order.
    for (size_t i = 0; i < ops.size(); i++) {
        if (ops[i].kind != PendingOp::SEND || ops[i].peer != ops[i].comm->rank) continue;
        for (size_t j = 0; j < ops.size(); j++)
            if (ops[j].kind == PendingOp::RECV && ops[j].comm == ops[i].comm && ops[j].peer == ops[i].peer && ops[j].bytes) {
                memcpy(ops[j].recv, ops[i].send, std::min(ops[i].bytes, ops[j].bytes));
                ops[j].bytes = 0;
                break;
            }
    }
    if (!reqs.empty()) MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE);
    return result;
}

ncclResult_t new_comm(ncclComm_t* out, int rank, int nranks, MPI_Comm mpi) {
    ncclComm* c = new ncclComm();
    c->magic = kCommMagic;
    c->rank = rank;
    c->nranks = nranks;
    c->mpi = mpi;
    *out = c;
    return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t comm) {
    return comm_ok(comm) ? comm->last_error.c_str() : g_last_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    IdContent c;
    c.magic = kIdMagic;
    c.creator = 0;
    if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &c.creator);
    c.pid = (int32_t)getpid();
    c.serial = ++g_serial;
    memcpy(id->internal, &c, sizeof c);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (!comm) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *comm = nullptr;
    IdContent c;
    memcpy(&c, id.internal, sizeof c);
    if (c.magic != kIdMagic) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: the id did not come from ncclGetUniqueId");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    if (nranks == 1) return new_comm(comm, 0, 1, MPI_COMM_NULL);
    if (!mpi_up())
        return fail(nullptr, ncclInvalidUsage,
                    "ncclCommInitRank with %d ranks: the simulated NCCL runs over MPI; call MPI_Init (run under mpirun)",
                    nranks);
    cuda_sim::set_abort_hook(abort_all);
    int me, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (nranks > world)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: %d ranks but MPI has %d processes", nranks, world);
    // Rendezvous at the id's creator: it learns each member's world rank and
    // sends the list (indexed by NCCL rank) back.
    int tag = kTagBase + 1 + (int)(c.serial % 1000);
    std::vector<int> members(nranks, -1);
    if (me == c.creator) {
        members[rank] = me;
        for (int i = 1; i < nranks; i++) {
            int msg[2];
            MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] < 0 || msg[0] >= nranks || members[msg[0]] != -1)
                cuda_sim::fatal("ncclCommInitRank: two processes claim rank %d of one communicator", msg[0]);
            members[msg[0]] = msg[1];
        }
        for (int i = 0; i < nranks; i++)
            if (members[i] != me) MPI_Send(members.data(), nranks, MPI_INT, members[i], tag, MPI_COMM_WORLD);
    } else {
        int msg[2] = {rank, me};
        MPI_Send(msg, 2, MPI_INT, c.creator, tag, MPI_COMM_WORLD);
        MPI_Recv(members.data(), nranks, MPI_INT, c.creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    MPI_Comm mpi;
    MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    return new_comm(comm, rank, nranks, mpi);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
    return ncclCommInitRank(comm, nranks, id, rank);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
    if (!comm_ok(comm) || !newcomm) return fail(comm, ncclInvalidArgument, "ncclCommSplit: not a communicator");
    *newcomm = nullptr;
    if (comm->nranks == 1) return color == NCCL_SPLIT_NOCOLOR ? ncclSuccess : new_comm(newcomm, 0, 1, MPI_COMM_NULL);
    MPI_Comm mpi;
    MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
    if (mpi == MPI_COMM_NULL) return ncclSuccess;
    int r, n;
    MPI_Comm_rank(mpi, &r);
    MPI_Comm_size(mpi, &n);
    return new_comm(newcomm, r, n, mpi);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    return comm_ok(comm) ? ncclSuccess : fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: not a communicator");
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (!comm_ok(comm)) return fail(nullptr, ncclInvalidArgument, "ncclCommDestroy: not a communicator (destroyed twice?)");
    if (comm->mpi != MPI_COMM_NULL && mpi_up()) MPI_Comm_free(&comm->mpi);
    comm->magic = 0;
    delete comm;
    return ncclSuccess;
}

// Abort must not wait for the other ranks: the MPI communicator is left alone.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (!comm_ok(comm)) return fail(nullptr, ncclInvalidArgument, "ncclCommAbort: not a communicator");
    comm->magic = 0;
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
    if (!comm_ok(comm) || !err) return ncclInvalidArgument;
    *err = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (!comm_ok(comm) || !count) return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    if (!comm_ok(comm) || !device) return ncclInvalidArgument;
    return cudaGetDevice(device) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (!comm_ok(comm) || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}
ncclResult_t ncclMemAlloc(void** ptr, size_t size) { return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError; }
ncclResult_t ncclMemFree(void* ptr) { return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError; }

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t t, ncclScalarResidence_t residence,
                                      ncclComm_t comm) {
    if (!op || !scalar || !type_size(t)) return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: arguments");
    if (residence == ncclScalarDevice) check_buffer("ncclRedOpCreatePreMulSum", "scalar", scalar, type_size(t));
    g_premul.push_back({true, get(scalar, 0, t)});
    *op = (ncclRedOp_t)(ncclNumOps + (int)g_premul.size() - 1);
    return ncclSuccess;
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
    int i = (int)op - ncclNumOps;
    if (i < 0 || i >= (int)g_premul.size() || !g_premul[i].used) return fail(comm, ncclInvalidArgument, "ncclRedOpDestroy: op %d", (int)op);
    g_premul[i].used = false;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    g_group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
    if (g_group_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_group_depth > 0) return ncclSuccess;
    return flush_group();
}

// ---- collectives ------------------------------------------------------------------------------------------------------
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclAllReduce", comm, t, stream)) || (r = check_op("ncclAllReduce", comm, op))) return r;
    size_t bytes = count * type_size(t);
    check_buffer("ncclAllReduce", "sendbuff", send, bytes);
    check_buffer("ncclAllReduce", "recvbuff", recv, bytes);
    return submit(stream, [=] {
        std::vector<unsigned char> all = gather_all(comm, send, bytes);
        std::vector<const void*> in;
        for (int i = 0; i < comm->nranks; i++) in.push_back(all.data() + i * bytes);
        reduce(recv, in, count, t, op);
        return ncclSuccess;
    });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclReduce", comm, t, stream)) || (r = check_op("ncclReduce", comm, op))) return r;
    if (root < 0 || root >= comm->nranks) return fail(comm, ncclInvalidArgument, "ncclReduce: root %d", root);
    size_t bytes = count * type_size(t);
    check_buffer("ncclReduce", "sendbuff", send, bytes);
    if (comm->rank == root) check_buffer("ncclReduce", "recvbuff", recv, bytes);
    return submit(stream, [=] {
        std::vector<unsigned char> all = gather_all(comm, send, bytes);
        if (comm->rank != root) return ncclSuccess;
        std::vector<const void*> in;
        for (int i = 0; i < comm->nranks; i++) in.push_back(all.data() + i * bytes);
        reduce(recv, in, count, t, op);
        return ncclSuccess;
    });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclReduceScatter", comm, t, stream)) || (r = check_op("ncclReduceScatter", comm, op))) return r;
    size_t bytes = recvcount * type_size(t);
    check_buffer("ncclReduceScatter", "sendbuff", send, bytes * comm->nranks);
    check_buffer("ncclReduceScatter", "recvbuff", recv, bytes);
    return submit(stream, [=] {
        // Chunk r of every rank's send buffer goes to rank r.
        int n = comm->nranks;
        std::vector<unsigned char> mine((const unsigned char*)send, (const unsigned char*)send + bytes * n), chunks(bytes * n);
        if (n == 1)
            chunks = mine;
        else
            MPI_Alltoall(mine.data(), (int)bytes, MPI_BYTE, chunks.data(), (int)bytes, MPI_BYTE, comm->mpi);
        std::vector<const void*> in;
        for (int i = 0; i < n; i++) in.push_back(chunks.data() + i * bytes);
        reduce(recv, in, recvcount, t, op);
        return ncclSuccess;
    });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclAllGather", comm, t, stream))) return r;
    size_t bytes = sendcount * type_size(t);
    check_buffer("ncclAllGather", "sendbuff", send, bytes);
    check_buffer("ncclAllGather", "recvbuff", recv, bytes * comm->nranks);
    return submit(stream, [=] {
        std::vector<unsigned char> all = gather_all(comm, send, bytes);
        memcpy(recv, all.data(), all.size());
        return ncclSuccess;
    });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclBroadcast", comm, t, stream))) return r;
    if (root < 0 || root >= comm->nranks) return fail(comm, ncclInvalidArgument, "ncclBroadcast: root %d", root);
    size_t bytes = count * type_size(t);
    if (comm->rank == root) check_buffer("ncclBroadcast", "sendbuff", send, bytes);
    check_buffer("ncclBroadcast", "recvbuff", recv, bytes);
    return submit(stream, [=] {
        std::vector<unsigned char> buf(bytes);
        if (comm->rank == root) memcpy(buf.data(), send, bytes);
        if (comm->nranks > 1) MPI_Bcast(buf.data(), (int)bytes, MPI_BYTE, root, comm->mpi);
        memcpy(recv, buf.data(), bytes);
        return ncclSuccess;
    });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, t, root, comm, stream);
}

ncclResult_t ncclAllToAll(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                          cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclAllToAll", comm, t, stream))) return r;
    size_t bytes = count * type_size(t);
    check_buffer("ncclAllToAll", "sendbuff", send, bytes * comm->nranks);
    check_buffer("ncclAllToAll", "recvbuff", recv, bytes * comm->nranks);
    return submit(stream, [=] {
        std::vector<unsigned char> mine((const unsigned char*)send, (const unsigned char*)send + bytes * comm->nranks);
        if (comm->nranks == 1)
            memcpy(recv, mine.data(), bytes);
        else
            MPI_Alltoall(mine.data(), (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->mpi);
        return ncclSuccess;
    });
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclSend", comm, t, stream))) return r;
    if (peer < 0 || peer >= comm->nranks) return fail(comm, ncclInvalidArgument, "ncclSend: peer %d", peer);
    size_t bytes = count * type_size(t);
    check_buffer("ncclSend", "sendbuff", send, bytes);
    g_pending.push_back({PendingOp::SEND, nullptr, send, nullptr, bytes, peer, comm});
    return g_group_depth > 0 ? ncclSuccess : flush_group();
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r;
    if ((r = check_common("ncclRecv", comm, t, stream))) return r;
    if (peer < 0 || peer >= comm->nranks) return fail(comm, ncclInvalidArgument, "ncclRecv: peer %d", peer);
    size_t bytes = count * type_size(t);
    check_buffer("ncclRecv", "recvbuff", recv, bytes);
    g_pending.push_back({PendingOp::RECV, nullptr, nullptr, recv, bytes, peer, comm});
    return g_group_depth > 0 ? ncclSuccess : flush_group();
}

}  // extern "C"
