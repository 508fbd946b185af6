// fault_inject.h: test hooks that make a checkpoint save fail on purpose, so
// the tests can prove that no failure at any stage leaves a checkpoint that
// a restart would take for complete. Off unless the environment asks:
//
//   TRAIN_GPT_CRASH_AT=STAGE[@STEP]  kill the process (SIGKILL, like a spot
//       reclaim or the end of the 120 s grace) at STAGE of the save of
//       checkpoint STEP (default: the first save). Stages, in save order:
//         mid-shard        half of this rank's shard file written
//         before-manifest  every data file renamed into place, no manifest yet
//         mid-manifest     the manifest written under its temporary name
//         after-manifest   the manifest renamed (the checkpoint is complete),
//                          older checkpoints not yet pruned
//         mid-prune        an older checkpoint's manifest deleted, its files not
//   TRAIN_GPT_DISK_FULL_AT=STEP  writes of checkpoint STEP fail with ENOSPC
//       once a file holds 4 KiB, as on a full disk.
#pragma once

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef enum {
    CRASH_MID_SHARD,
    CRASH_BEFORE_MANIFEST,
    CRASH_MID_MANIFEST,
    CRASH_AFTER_MANIFEST,
    CRASH_MID_PRUNE,
} CrashStage;

// Kills the process with SIGKILL when TRAIN_GPT_CRASH_AT names this stage
// and step (or this stage and no step, at the first save to get here).
void fault_crash_point(CrashStage stage, int step);
// Whether checkpoint writes of this step are to fail with ENOSPC.
int fault_disk_full(int step);
// Reads and checks the variables; fatal on a malformed value. Called once at
// startup so a typo fails loudly instead of silently testing nothing.
void fault_inject_init(void);

EXTERN_C_END
