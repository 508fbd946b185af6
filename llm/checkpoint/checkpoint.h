// checkpoint.h: training checkpoints on a disk that may be synced to S3
// (SageMaker's /opt/ml/checkpoints): when to save, how a save becomes
// complete, which checkpoint a run resumes from, which old ones are deleted,
// and the clean stop on SIGTERM.
//
// A save of step S writes step_S/ in three moves: every rank writes its
// shard file (model.bin too on rank 0) under a temporary name, fsyncs and
// renames it; the ranks agree that all files are in place (a barrier, and
// rank 0 gathers their sizes and checksums); rank 0 writes manifest.json the
// same way. The manifest's rename is the commit point: a directory without
// a manifest is an interrupted save, whatever else it holds, and nothing
// else marks a checkpoint "latest". Old checkpoints are deleted only after
// a newer one is complete, manifest first.
//
// Resuming (--resume auto) takes the newest checkpoint whose manifest
// exists, describes this model, and whose every file has the listed size
// and XXH3 checksum; a damaged one is reported in one warning line and the
// one before it is tried. The state restored (parameters, masters, AdamW
// moments and step, the data position, the step counter) is everything a
// step depends on (the LR schedule and every random draw derive from the
// seed and the step), so a resumed run continues bit for bit.
//
// Defaults: --checkpoint-dir auto is $TRAIN_GPT_CHECKPOINT_DIR when set,
// else /opt/ml/checkpoints when it exists, else ./checkpoints; an empty
// value turns checkpoints off. --model-dir auto is $SM_MODEL_DIR when set,
// else /opt/ml/model when it exists, else none.
#pragma once

#include "llm/trainer.h"

EXTERN_C_BEGIN

typedef struct Checkpointer Checkpointer;

// Resolves the directories, checks the checkpoint flags, and installs the
// SIGTERM/SIGINT handlers.
Checkpointer* checkpointer_create(const TrainConfig* cfg, Trainer* tr);
// Restores the trainer from a checkpoint as --resume asks (sets
// tr->first_step); does nothing for a fresh start.
void checkpoint_resume(Checkpointer* ck);
// Call after each optimizer step with the number of steps completed. Saves
// on schedule (--checkpoint-every), finishes background saves, and returns
// 1 when a stop signal arrived: the checkpoint of this step is then written
// and the run should end (exit status 0); rank 0 then writes "step N DIR" to
// $TRAIN_GPT_STOP_FILE when it is set, for the launcher.
int checkpoint_after_step(Checkpointer* ck, int steps_done);
// Writes the checkpoint of the last step if it has none yet, and waits for
// background writes. Call once after the loop.
void checkpoint_end(Checkpointer* ck);
// Writes the final weights (--export-dtype) to --model-dir, if there is one:
// a Hugging Face folder (config.json, model.safetensors) and, for GPT-2, also
// llm.c's model.bin, or one of the two (--model-format).
void checkpoint_export_model_dir(Checkpointer* ck);
void checkpointer_free(Checkpointer* ck);

// Reloads the newest complete, verified checkpoint of at most steps_done
// steps: parameters, optimizer state and the guard's loss window, not the
// data position. Returns its step, or -1 when there is none (or checkpoints
// are off). Collective.
int checkpoint_rollback(Checkpointer* ck, int steps_done);
// The resolved --checkpoint-dir, or NULL when checkpoints are off.
const char* checkpoint_dir(const Checkpointer* ck);

EXTERN_C_END
