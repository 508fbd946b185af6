// ckpt_comm.c: helpers built on the table of collectives.
#include "llm/checkpoint/ckpt_comm.h"

#include <stdlib.h>
#include <string.h>

char* ckpt_broadcast_string(const CkptComm* comm, char* s) {
    int64_t len = comm->rank == 0 ? (int64_t)strlen(s) : 0;
    comm->broadcast(comm->ctx, &len, sizeof len);
    if (comm->rank != 0) s = (char*)xmalloc((size_t)len + 1);
    comm->broadcast(comm->ctx, s, (size_t)len);
    s[len] = 0;
    return s;
}
