// ckpt_comm_mpi.c: the checkpoint collectives (llm/checkpoint/ckpt_comm.h) over the
// run's communicator (llm/parallel/comm.h): small host collectives over the world,
// and the weights gathered inside the first copy's shard group.
#include <stdlib.h>
#include <string.h>

#include "llm/checkpoint/ckpt_comm.h"
#include "llm/parallel/comm.h"

static Comm* as_comm(void* ctx) { return (Comm*)ctx; }

static void mpi_barrier(void* ctx) {
    double x = 0;
    comm_host_sum(as_comm(ctx), COMM_WORLD, &x, 1);
}

static void mpi_allreduce_max(void* ctx, int64_t* v, int n) {
    Comm* c = as_comm(ctx);
    int64_t* all = (int64_t*)xcalloc((size_t)c->world * (size_t)n, sizeof(int64_t));
    memcpy(all + (size_t)c->rank * n, v, (size_t)n * sizeof(int64_t));
    comm_host_all_gather(c, COMM_WORLD, all, (size_t)n * sizeof(int64_t));
    for (int i = 0; i < n; i++)
        for (int r = 0; r < c->world; r++) v[i] = all[(size_t)r * n + i] > v[i] ? all[(size_t)r * n + i] : v[i];
    free(all);
}

static void mpi_broadcast(void* ctx, void* buf, size_t bytes) {
    if (bytes) comm_host_broadcast(as_comm(ctx), COMM_WORLD, buf, bytes, 0);
}

// Small things only (file entries, messages): an all-gather, kept by rank 0.
static void mpi_gather(void* ctx, const void* send, size_t bytes, void* recv) {
    Comm* c = as_comm(ctx);
    char* all = (char*)xcalloc((size_t)c->world, bytes);
    memcpy(all + (size_t)c->rank * bytes, send, bytes);
    comm_host_all_gather(c, COMM_WORLD, all, bytes);
    if (c->rank == 0) memcpy(recv, all, (size_t)c->world * bytes);
    free(all);
}

// One unit of the FP32 weights: gathered inside the first copy's shard
// group, the one rank 0 belongs to; the other copies' groups (separate
// communicators) skip it.
static void mpi_gather_shards(void* ctx, const void* send, size_t bytes, void* recv) {
    Comm* c = as_comm(ctx);
    if (c->group[COMM_REPLICA].rank != 0) return;
    const CommGroupInfo* g = &c->group[COMM_SHARD];
    char* all = c->rank == 0 ? (char*)recv : (char*)xmalloc((size_t)g->size * bytes);
    memcpy(all + (size_t)g->rank * bytes, send, bytes);
    comm_host_all_gather(c, COMM_SHARD, all, bytes);
    if (c->rank != 0) free(all);
}

CkptComm ckpt_comm_mpi(Comm* c) {
    CkptComm t;
    memset(&t, 0, sizeof t);
    t.rank = c->rank;
    t.world = c->world;
    t.shard = c->group[COMM_SHARD].rank;
    t.shards = c->group[COMM_SHARD].size;
    t.writes = c->group[COMM_REPLICA].rank == 0;
    t.ctx = c;
    t.barrier = mpi_barrier;
    t.allreduce_max = mpi_allreduce_max;
    t.broadcast = mpi_broadcast;
    t.gather = mpi_gather;
    t.gather_shards = mpi_gather_shards;
    return t;
}
