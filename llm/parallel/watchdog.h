// watchdog.h: collectives cannot hang forever (--collective-timeout).
//
// A rank whose peer died, deadlocked or took a different code path waits in
// its next collective for ever: MPI and NCCL have no timeout of their own.
// The watchdog is a thread that watches two kinds of waits:
//   - blocking collectives (MPI, on the host): the communicator arms the
//     watchdog before the call and disarms it after;
//   - asynchronous collectives (NCCL, queued on a stream): the NCCL
//     communicator registers a poller that reports the oldest collective
//     still unfinished on the GPU, and an abort function (ncclCommAbort).
// When either has waited longer than the timeout, the watchdog prints one
// error line naming the rank, the collective, the step and the timeout,
// aborts the asynchronous communicators and stops every rank (fatal():
// MPI_Abort, exit 1).
//
// Testing hook: TRAIN_GPT_INJECT_HANG=RANK:STEP makes rank RANK sleep for
// ever inside its first collective of step STEP (1-based), as a rank stuck in
// a driver call or a dead peer would; RANK:STEP:TEXT, in the first one whose
// name contains TEXT (e.g. "amax").
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// Reports the oldest asynchronous collective not finished yet: returns 1
// with its description in what, when it was issued (now_seconds()) in
// *since and its step in *step; 0 when nothing is pending. Called from the
// watchdog thread.
typedef int (*WatchdogPoll)(void* ctx, char* what, size_t what_size, double* since, int* step);
// Unblocks whatever waits on a stuck collective (ncclCommAbort); from the
// watchdog thread, just before the run stops.
typedef void (*WatchdogAbort)(void* ctx);

// Reads TRAIN_GPT_INJECT_HANG (fatal on a malformed value) and, with
// timeout_s > 0, starts the thread. rank and world name this process in the
// message. Call once, before the training collectives; 0 turns it off (the
// injected hang then hangs, as the test without a watchdog would).
void watchdog_start(double timeout_s, int rank, int world);
void watchdog_stop(void);
// The step the collectives belong to (1-based), for the message and the hook.
void watchdog_set_step(int step);
// Brackets a blocking collective described by what (a string that lives as
// long as the call, e.g. "all-reduce of gradients over the world (4 ranks)").
void watchdog_arm(const char* what);
void watchdog_disarm(void);
// The collective armed now (NULL outside one), for an asynchronous
// implementation to remember what it queued.
const char* watchdog_current(void);
// Registers the asynchronous side of a communicator (at most a few).
void watchdog_add_async(WatchdogPoll poll, WatchdogAbort abort_fn, void* ctx);
void watchdog_remove_async(void* ctx);
// The step set by watchdog_set_step (0 before the first).
int watchdog_step(void);

EXTERN_C_END
