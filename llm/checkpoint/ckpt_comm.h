// ckpt_comm.h: the few collectives checkpointing needs, as a small table so
// that the checkpoint code does not depend on how ranks talk to each other.
//
// train_gpt fills the table from the communication module (ckpt_comm_mpi;
// a single process is a world of one), the tests from threads standing in
// for ranks. Every call is collective over all ranks of
// the run, in the same order, from the main thread (background checkpoint
// writers never communicate).
//
// The ranks one copy of the model is sharded over form the shard group
// (the world, or with hybrid sharding one node); the first copy's ranks are
// the writers: writer s writes shard s. Other copies hold the same state and
// write nothing.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    int rank, world;     // this rank in the run
    int shard, shards;   // its place in its shard group (shards = the layout's world)
    int writes;          // whether it writes its shard (it belongs to the first copy)
    void* ctx;
    void (*barrier)(void* ctx);
    // v[i] = max over ranks of v[i], for n values.
    void (*allreduce_max)(void* ctx, int64_t* v, int n);
    // Rank 0's `bytes` bytes at buf are copied to buf on every rank.
    void (*broadcast)(void* ctx, void* buf, size_t bytes);
    // Rank 0 receives every rank's `bytes` bytes, in rank order, at recv
    // (world * bytes); recv is ignored on other ranks.
    void (*gather)(void* ctx, const void* send, size_t bytes, void* recv);
    // Rank 0 receives each writer's `bytes` bytes at recv + shard * bytes
    // (shards * bytes); what other ranks pass is ignored.
    void (*gather_shards)(void* ctx, const void* send, size_t bytes, void* recv);
} CkptComm;

// The run's ranks (llm/parallel/comm.h), in llm/checkpoint/ckpt_comm_mpi.c.
struct Comm;
CkptComm ckpt_comm_mpi(struct Comm* c);

// Broadcasts a malloc'ed string from rank 0 (its length first); other ranks
// get a new malloc'ed copy. Returns the string on every rank.
char* ckpt_broadcast_string(const CkptComm* comm, char* s);

EXTERN_C_END
