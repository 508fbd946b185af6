// mpi_single.h: the part of MPI that comm.c uses, for a world of one rank, in
// builds without MPI (make NO_MPI=1, TRAIN_GPT_NO_MPI). comm.c includes it in
// place of <mpi.h> and runs unchanged: every communicator has one rank, a
// collective over one rank is a copy (or nothing), and point-to-point messages,
// which one rank never sends, stop the run. comm_init checks the launcher's
// environment first, so a run started by mpirun or srun with several ranks
// stops with a message instead of training N unrelated copies.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
typedef int MPI_Info;
typedef int MPI_Errhandler;
typedef int MPI_Request;
typedef struct { int unused; } MPI_Status;

#define MPI_SUCCESS 0
#define MPI_MAX_ERROR_STRING 64
#define MPI_COMM_NULL 0
#define MPI_COMM_WORLD 1
#define MPI_COMM_SELF 1  // a world of one: itself
#define MPI_UNDEFINED (-32766)
#define MPI_COMM_TYPE_SHARED 1
#define MPI_INFO_NULL 0
#define MPI_ERRORS_RETURN 0
#define MPI_THREAD_FUNNELED 1
#define MPI_STATUS_IGNORE ((MPI_Status*)0)
#define MPI_STATUSES_IGNORE ((MPI_Status*)0)
#define MPI_IN_PLACE ((void*)1)
// Datatypes are their sizes in bytes.
#define MPI_BYTE 1
#define MPI_INT ((int)sizeof(int))
#define MPI_FLOAT ((int)sizeof(float))
#define MPI_DOUBLE ((int)sizeof(double))
#define MPI_MAX 1
#define MPI_MIN 2

static int mpi_single_state;  // 0 before init, 1 running, 2 finalized

static inline int MPI_Initialized(int* flag) { *flag = mpi_single_state >= 1; return MPI_SUCCESS; }
static inline int MPI_Finalized(int* flag) { *flag = mpi_single_state == 2; return MPI_SUCCESS; }
static inline int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    (void)argc, (void)argv;
    *provided = required;
    mpi_single_state = 1;
    return MPI_SUCCESS;
}
static inline int MPI_Finalize(void) { mpi_single_state = 2; return MPI_SUCCESS; }
static inline int MPI_Abort(MPI_Comm comm, int code) { (void)comm; exit(code); }
static inline int MPI_Error_string(int err, char* msg, int* len) {
    *len = snprintf(msg, MPI_MAX_ERROR_STRING, "MPI error %d", err);
    return MPI_SUCCESS;
}
static inline int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h) { (void)comm, (void)h; return MPI_SUCCESS; }
static inline int MPI_Comm_rank(MPI_Comm comm, int* rank) { (void)comm; *rank = 0; return MPI_SUCCESS; }
static inline int MPI_Comm_size(MPI_Comm comm, int* size) { (void)comm; *size = 1; return MPI_SUCCESS; }
static inline int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) { (void)comm; *out = MPI_COMM_WORLD; return MPI_SUCCESS; }
static inline int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
    (void)comm, (void)key;
    *out = color == MPI_UNDEFINED ? MPI_COMM_NULL : MPI_COMM_WORLD;
    return MPI_SUCCESS;
}
static inline int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm* out) {
    (void)comm, (void)type, (void)key, (void)info;
    *out = MPI_COMM_WORLD;
    return MPI_SUCCESS;
}
static inline int MPI_Comm_free(MPI_Comm* comm) { *comm = MPI_COMM_NULL; return MPI_SUCCESS; }

// One rank: the result of a reduction or gather is its own contribution.
static inline int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    (void)op, (void)comm;
    if (send != MPI_IN_PLACE) memcpy(recv, send, (size_t)count * t);
    return MPI_SUCCESS;
}
static inline int MPI_Allgather(const void* send, int count, MPI_Datatype t, void* recv, int rcount, MPI_Datatype rt,
                                MPI_Comm comm) {
    (void)rcount, (void)rt, (void)comm;
    if (send != MPI_IN_PLACE) memcpy(recv, send, (size_t)count * t);
    return MPI_SUCCESS;
}
static inline int MPI_Bcast(void* buf, int count, MPI_Datatype t, int root, MPI_Comm comm) {
    (void)buf, (void)count, (void)t, (void)root, (void)comm;
    return MPI_SUCCESS;
}

// A rank never messages itself (comm.c skips its own rank), so these are unreachable.
static inline int mpi_single_p2p(const char* what) {
    fprintf(stderr, "train_gpt: internal: %s in a build without MPI (a world of one sends no messages)\n", what);
    exit(1);
}
static inline int MPI_Isend(const void* b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c, MPI_Request* r) {
    (void)b, (void)n, (void)t, (void)to, (void)tag, (void)c, (void)r;
    return mpi_single_p2p("MPI_Isend");
}
static inline int MPI_Irecv(void* b, int n, MPI_Datatype t, int from, int tag, MPI_Comm c, MPI_Request* r) {
    (void)b, (void)n, (void)t, (void)from, (void)tag, (void)c, (void)r;
    return mpi_single_p2p("MPI_Irecv");
}
static inline int MPI_Recv(void* b, int n, MPI_Datatype t, int from, int tag, MPI_Comm c, MPI_Status* s) {
    (void)b, (void)n, (void)t, (void)from, (void)tag, (void)c, (void)s;
    return mpi_single_p2p("MPI_Recv");
}
static inline int MPI_Waitall(int n, MPI_Request* r, MPI_Status* s) {
    (void)r, (void)s;
    return n == 0 ? MPI_SUCCESS : mpi_single_p2p("MPI_Waitall");
}
