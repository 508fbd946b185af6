// ckpt_state.h: moving the training state between the model and checkpoint
// files: a snapshot (host copy of what this rank writes, so training can go
// on while it is written), the writers of shard files and llm.c weight
// files, and the restore that reads any checkpoint of the same model into
// any number of ranks at any ZeRO stage.
//
// What rank r writes is shard r of the layout: chunk r of every unit, for
// the FP32 masters (the parameters themselves in FP32 runs), AdamW m and v,
// and the 16-bit parameters in 16-bit runs. That is the piece it owns at
// ZeRO stage 1 and up; at stage 0 every rank holds everything and still
// writes only chunk r, so the files, and the work, are the same at every
// stage and are spread over the ranks.
#pragma once

#include "llm/checkpoint/ckpt_comm.h"
#include "llm/checkpoint/ckpt_files.h"
#include "llm/checkpoint/ckpt_manifest.h"
#include "llm/model/model.h"

EXTERN_C_BEGIN

typedef struct {
    int step;                 // optimizer steps completed
    int adam_step;
    uint64_t data_position;
    int shard;                // the shard this rank writes (-1: none)
    int64_t elements;         // values in each section of the shard
    float* master;            // (elements) FP32 masters; the parameters in FP32 runs
    void* adam_m;             // (elements) adam_dtype
    void* adam_v;             // (elements) adam_dtype
    DType adam_dtype;         // the moments' dtype (--adam-dtype): FP32 or BF16
    void* params16;           // (elements) 16-bit parameters; NULL in FP32 runs
    DType params16_dtype;
    float* weights;           // rank 0: every parameter in llm.c's order, FP32; else NULL
    size_t weights_elements;
    GPTConfig model;
} CkptSnapshot;

// Copies this rank's shard of the state to host memory and gathers the FP32
// weights on rank 0 (collective). Buffers are allocated on first use and reused.
void ckpt_snapshot_take(CkptSnapshot* s, const GPT* m, const CkptComm* comm, int step, uint64_t data_position);
void ckpt_snapshot_free(CkptSnapshot* s);

// Writes the shard file this snapshot holds into dir, with the sections
// `layout` describes (manifest_describe of the same model). Returns 0 or an
// errno value with the problem in w->msg; *entry describes the file.
int ckpt_write_shard(const CkptSnapshot* s, const Manifest* layout, const char* dir, CkptFileEntry* entry,
                     char* msg, size_t msgsize);
// Writes the snapshot's weights (rank 0) as an llm.c model file dir/name in
// dtype F32 or BF16. Returns 0 or an errno value with the problem in msg.
int ckpt_write_weights(const CkptSnapshot* s, const char* dir, const char* name, DType dtype, int step,
                       CkptFileEntry* entry, char* msg, size_t msgsize);

// Loads a verified checkpoint into m: the full parameters, and the optimizer
// state of the pieces this rank owns, mapped through (tensor, element) from
// the checkpoint's layout to the model's. Sets m->adam_step. Moments saved
// in another dtype than m->adam_dtype are converted (BF16 to FP32 exactly,
// FP32 to BF16 rounded to nearest), with a note on stderr. Fatal (naming
// the file) if a file cannot be read.
void ckpt_restore(GPT* m, const Manifest* man, const char* dir);

EXTERN_C_END
