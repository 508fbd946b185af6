// comm.h: the ranks of a run and the collectives between them.
//
// MPI starts the processes (`mpirun -np N ./train_gpt`, or srun under Slurm;
// a plain `./train_gpt` is a world of one through Open MPI's singleton init)
// and says who is who: rank, world size, and the ranks sharing this machine
// (MPI_COMM_TYPE_SHARED), whose local rank picks the GPU.
//
// Three groups of ranks matter for ZeRO:
//   COMM_WORLD    every rank (the data-parallel group: loss, batch);
//   COMM_SHARD    the ranks one copy of the model is sharded over: the world,
//                 the ranks of one node (--shard-scope node), or groups of N
//                 consecutive ranks (--shard-group N);
//   COMM_REPLICA  the ranks holding the same shard (one per shard group, at
//                 the same place in it); one rank when sharding over the world.
// and for context parallelism (--context-parallel N):
//   COMM_CP       the N consecutive ranks that split one set of sequences
//                 (one rank, itself, without context parallelism).
// TRAIN_GPT_RANKS_PER_NODE=k groups consecutive ranks into nodes of k, so that
// several nodes can be simulated on one machine.
//
// Collectives on backend memory run over NCCL when the backend is CUDA
// (llm/parallel/comm_nccl.cu, on a communication stream of its own) and over MPI on
// host buffers for the CPU backend (llm/parallel/comm.c). Every reduction sums the
// ranks' contributions in rank order on the CPU path, so a sum over ranks is
// the same as the same contributions accumulated one after the other by one
// rank; results are bit-identical from run to run on both paths.
//
// Ordering (a no-op on the CPU, where everything is synchronous): collectives
// are queued on the communication stream in call order. comm_wait_compute()
// makes the collectives issued after it wait for all compute queued so far;
// comm_record(ev) marks the communication issued so far, and
// comm_compute_wait(ev) makes later compute wait for that mark;
// comm_compute_wait_all() makes later compute wait for all communication.
//
// Errors: a fatal error on any rank stops every rank (MPI_Abort) with the
// error printed once. Ranks other than 0 print nothing to stdout.
//
// Timeouts: every collective is watched (llm/parallel/watchdog.h, --collective-timeout):
// one that does not finish in time stops every rank with a message naming it.
#pragma once

#include <stddef.h>

#include "kernels/ops.h"
#include "llm/parallel/rank_reduce.h"

EXTERN_C_BEGIN

typedef enum { COMM_WORLD = 0, COMM_SHARD = 1, COMM_REPLICA = 2, COMM_CP = 3, COMM_NUM_GROUPS } CommGroup;

#define COMM_MAX_EVENTS 16

typedef struct CommDevice CommDevice;

typedef struct {
    int rank, size;
} CommGroupInfo;

typedef struct Comm {
    int rank, world;
    int local_rank, local_world;  // ranks on this machine: the GPU is local_rank
    int node, num_nodes;          // node grouping for --shard-scope node
    int node_rank, node_size;     // this rank within its node
    int node_scope;               // the shard group is the node (and not the world)
    CommGroupInfo group[COMM_NUM_GROUPS];
    CommDevice* dev;              // collectives on backend memory (comm_attach_backend)
    void* mpi;                    // private: the MPI communicators
    // While the compute stream captures a CUDA graph (comm_capture_begin):
    // whether the communication stream has joined the capture, and which
    // events were recorded inside it.
    int capturing, forked;
    unsigned char recorded_in_capture[COMM_MAX_EVENTS];
} Comm;

// Builds without MPI (make NO_MPI=1, llm/parallel/mpi_single.h) are a world
// of one; started by a launcher with several ranks they stop at comm_init.
//
// Starts MPI (a world of one without mpirun), finds the node layout, makes
// fatal() abort every rank, and silences stdout on ranks other than 0.
// Groups start as world sharding (comm_set_shard_scope changes it).
Comm* comm_init(int* argc, char*** argv);
// Sets COMM_SHARD and COMM_REPLICA: node_scope 0 shards over the world,
// 1 inside each node (every node must have the same number of ranks).
// Collective: every rank calls it with the same value.
void comm_set_shard_scope(Comm* c, int node_scope);
// The same for shard groups of n consecutive ranks (--shard-group n): n
// divides the world and is a divisor or a multiple of the ranks per node, so
// a group lies inside one node or is made of whole nodes; the replica group
// is the ranks at the same place in every group.
void comm_set_shard_group(Comm* c, int n);
// Sets COMM_CP to groups of n consecutive ranks (--context-parallel n; n
// divides the world, checked by the caller). Collective.
void comm_set_context_parallel(Comm* c, int n);
// NULL when n is a valid shard group size, else why not (for the planner too).
const char* comm_shard_group_invalid(int n, int world, int node_size, char* why, size_t size);
// Chooses how collectives on backend memory run: NCCL on be's stream for the
// CUDA backend, MPI on host buffers for the CPU backend. Collective; after
// comm_set_shard_scope (NCCL has a communicator per group).
void comm_attach_backend(Comm* c, Backend* be);
// Releases the communicators and finalizes MPI.
void comm_finalize(Comm* c);

// ---- collectives on backend memory (dtype F32 or BF16) ----------------------
// buf holds size(g) chunks of `chunk` elements; rank i's result is the sum
// over ranks of their chunk i. With acc == NULL it lands in place (buf's
// chunk i); otherwise it is added to acc (chunk elements). The rest of buf
// may be used as scratch.
void comm_reduce_scatter(Comm* c, CommGroup g, void* buf, size_t chunk, DType t, void* acc);
// buf (n elements) becomes the sum over ranks of buf, the same on every rank.
void comm_all_reduce(Comm* c, CommGroup g, void* buf, size_t n, DType t);
// buf (n FP32 elements) becomes the element-wise maximum over ranks (FP8
// amaxes; a maximum needs no order, so it is exact and deterministic).
void comm_all_reduce_max(Comm* c, CommGroup g, float* buf, size_t n);
// buf holds size(g) chunks; every rank's chunk i becomes rank i's `mine`
// (chunk elements; NULL: already in place in buf's chunk i).
void comm_all_gather(Comm* c, CommGroup g, const void* mine, void* buf, size_t chunk, DType t);

void comm_wait_compute(Comm* c);
void comm_record(Comm* c, int event);
void comm_compute_wait(Comm* c, int event);
void comm_compute_wait_all(Comm* c);
// Around a CUDA graph capture of the compute stream (llm/step_graph.c), with
// comm_compute_wait_all before it: a capture may not wait for an event
// recorded outside it (cudaErrorStreamCaptureIsolation), so inside the capture
// waits for communication issued before it are left out (the compute stream
// waited for all of it before the capture, and waits again before each
// launch of the graph), and comm_compute_wait_all joins the communication
// stream back only if it forked into the capture.
void comm_capture_begin(Comm* c);
void comm_capture_end(Comm* c);

// ---- collectives on host memory (MPI) ---------------------------------------
// x[0..n) becomes the sum over the group's ranks, added in rank order.
void comm_host_sum(Comm* c, CommGroup g, double* x, int n);
// buf holds size(g) chunks of chunk_bytes; chunk i comes from rank i.
void comm_host_all_gather(Comm* c, CommGroup g, void* buf, size_t chunk_bytes);
void comm_host_broadcast(Comm* c, CommGroup g, void* buf, size_t bytes, int root);
// lo[i] becomes the minimum over the group's ranks of lo[i], hi[i] the maximum.
void comm_host_minmax(Comm* c, CommGroup g, double* lo, double* hi, int n);
// The min/max over the world that reports gather per-rank memory and GPU
// telemetry with (llm/report/report.h); empty for a world of one.
RankReducer comm_rank_reducer(Comm* c);

// The CUDA implementation of CommDevice (llm/parallel/comm_nccl.cu) is
// comm_nccl_create, declared in kernels/cuda_seam.h.

// What an implementation of the collectives on backend memory provides
// (comm.c for MPI, comm_nccl.cu for NCCL). Groups of one rank never reach
// these except reduce_scatter with an accumulator.
struct CommDevice {
    const char* name;
    void (*reduce_scatter)(CommDevice* d, CommGroup g, void* buf, size_t chunk, DType t, void* acc);
    void (*all_reduce)(CommDevice* d, CommGroup g, void* buf, size_t n, DType t);
    void (*all_reduce_max)(CommDevice* d, CommGroup g, float* buf, size_t n);
    void (*all_gather)(CommDevice* d, CommGroup g, const void* mine, void* buf, size_t chunk, DType t);
    void (*wait_compute)(CommDevice* d);
    void (*record)(CommDevice* d, int event);
    void (*compute_wait)(CommDevice* d, int event);
    void (*compute_wait_all)(CommDevice* d);
    void (*destroy)(CommDevice* d);
};

EXTERN_C_END
