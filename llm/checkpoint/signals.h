// signals.h: a clean stop on SIGTERM and SIGINT.
//
// SageMaker stops a job (StopTrainingJob, the runtime limit, a spot
// interruption) like `docker stop -t120`: SIGTERM, then SIGKILL 120 s later.
// The first SIGTERM or SIGINT only sets a flag; the training loop finishes
// its current step, writes a checkpoint and exits 0. A second signal means
// "now": the process exits at once with status 128 + the signal number,
// leaving at worst temporary files that no resume ever reads.
#pragma once

#include "llm/util/util.h"

EXTERN_C_BEGIN

// Installs the handlers (idempotent).
void signals_install(void);
// The signal that asked for a stop (SIGTERM or SIGINT), or 0.
int signals_stop_requested(void);
// Test helper: forget a received signal.
void signals_reset(void);

EXTERN_C_END
