// fault_inject.c: the TRAIN_GPT_CRASH_AT and TRAIN_GPT_DISK_FULL_AT hooks.
#include "llm/checkpoint/fault_inject.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* STAGE_NAMES[] = {"mid-shard", "before-manifest", "mid-manifest", "after-manifest", "mid-prune"};
#define NUM_STAGES ((int)(sizeof STAGE_NAMES / sizeof STAGE_NAMES[0]))

static int crash_stage = -1;  // -1: no crash requested
static int crash_step = -1;   // -1: any step (the first save reaching the stage)
static int disk_full_step = -1;

void fault_inject_init(void) {
    const char* crash = getenv("TRAIN_GPT_CRASH_AT");
    if (crash && *crash) {
        char stage[64];
        const char* at = strchr(crash, '@');
        size_t n = at ? (size_t)(at - crash) : strlen(crash);
        snprintf(stage, sizeof stage, "%.*s", (int)n, crash);
        for (int i = 0; i < NUM_STAGES; i++)
            if (strcmp(stage, STAGE_NAMES[i]) == 0) crash_stage = i;
        long step;
        if (crash_stage < 0 || (at && (!parse_long(at + 1, &step) || step < 0)))
            fatal("TRAIN_GPT_CRASH_AT='%s' is not STAGE[@STEP] with STAGE one of mid-shard, before-manifest, "
                  "mid-manifest, after-manifest, mid-prune",
                  crash);
        if (at) crash_step = (int)step;
    }
    const char* full = getenv("TRAIN_GPT_DISK_FULL_AT");
    if (full && *full) {
        long step;
        if (!parse_long(full, &step) || step < 0) fatal("TRAIN_GPT_DISK_FULL_AT='%s' is not a step number", full);
        disk_full_step = (int)step;
    }
}

void fault_crash_point(CrashStage stage, int step) {
    if ((int)stage != crash_stage || (crash_step >= 0 && step != crash_step)) return;
    static const char msg[] = "train_gpt: TRAIN_GPT_CRASH_AT: killing the process now\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
    raise(SIGKILL);
}

int fault_disk_full(int step) { return disk_full_step >= 0 && step == disk_full_step; }
