// ckpt_comm.c: the single-process collectives and helpers built on the table.
#include "llm/ckpt_comm.h"

#include <stdlib.h>
#include <string.h>

static void single_barrier(void* ctx) { (void)ctx; }
static void single_allreduce_max(void* ctx, int64_t* v, int n) { (void)ctx; (void)v; (void)n; }
static void single_broadcast(void* ctx, void* buf, size_t bytes) { (void)ctx; (void)buf; (void)bytes; }
static void single_gather(void* ctx, const void* send, size_t bytes, void* recv) {
    (void)ctx;
    if (recv != send) memmove(recv, send, bytes);
}

static const CkptComm SINGLE = {0, 1, 0, 1, 1, NULL, single_barrier, single_allreduce_max, single_broadcast,
                                single_gather, single_gather};

const CkptComm* ckpt_comm_single(void) { return &SINGLE; }

char* ckpt_broadcast_string(const CkptComm* comm, char* s) {
    int64_t len = comm->rank == 0 ? (int64_t)strlen(s) : 0;
    comm->broadcast(comm->ctx, &len, sizeof len);
    if (comm->rank != 0) s = (char*)xmalloc((size_t)len + 1);
    comm->broadcast(comm->ctx, s, (size_t)len);
    s[len] = 0;
    return s;
}
