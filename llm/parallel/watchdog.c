// watchdog.c: the collective-timeout thread and the TRAIN_GPT_INJECT_HANG hook.
#include "llm/parallel/watchdog.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ASYNC 4

typedef struct {
    WatchdogPoll poll;
    WatchdogAbort abort_fn;
    void* ctx;
} AsyncSide;

// One watchdog per process (collectives come from the main thread only).
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int running, stopping;
    double timeout;
    int rank, world;
    int step;
    const char* armed_what;  // the blocking collective in progress, or NULL
    double armed_since;
    int armed_step;
    AsyncSide async[MAX_ASYNC];
    int num_async;
    int hang_rank, hang_step, hang_done;  // TRAIN_GPT_INJECT_HANG; hang_rank -1: off
    char hang_what[64];                   // ... only in a collective whose name contains this
} W = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .hang_rank = -1};

static void parse_inject_hang(void) {
    const char* spec = getenv("TRAIN_GPT_INJECT_HANG");
    W.hang_rank = -1;
    if (!spec || !spec[0]) return;
    char rank_text[32], step_text[32];
    const char* colon = strchr(spec, ':');
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof rank_text)
        fatal("TRAIN_GPT_INJECT_HANG='%s': expected RANK:STEP", spec);
    snprintf(rank_text, sizeof rank_text, "%.*s", (int)(colon - spec), spec);
    const char* step_begin = colon + 1;
    const char* second = strchr(step_begin, ':');  // RANK:STEP:TEXT
    size_t step_len = second ? (size_t)(second - step_begin) : strlen(step_begin);
    W.hang_what[0] = 0;
    if (second) {
        if (!second[1] || strlen(second + 1) >= sizeof W.hang_what)
            fatal("TRAIN_GPT_INJECT_HANG='%s': TEXT after RANK:STEP: must be 1 to %zu characters", spec,
                  sizeof W.hang_what - 1);
        snprintf(W.hang_what, sizeof W.hang_what, "%s", second + 1);
    }
    long rank, step = 0;
    if (step_len < sizeof step_text) {
        snprintf(step_text, sizeof step_text, "%.*s", (int)step_len, step_begin);
        if (!parse_long(step_text, &step)) step = 0;
    }
    if (!parse_long(rank_text, &rank) || rank < 0 || step < 1 || step > 2147483647L)
        fatal("TRAIN_GPT_INJECT_HANG='%s': expected RANK:STEP with RANK >= 0 and STEP >= 1", spec);
    W.hang_rank = (int)rank;
    W.hang_step = (int)step;
}

// A fatal hook: runs after the message is out, before MPI_Abort, so that a
// main thread woken by the abort cannot get in the message's way.
static void abort_async(const char* message) {
    (void)message;
    for (int i = 0; i < W.num_async; i++)
        if (W.async[i].abort_fn) W.async[i].abort_fn(W.async[i].ctx);
}

// Stops the run: the message, the stuck communicators aborted, then every
// rank stopped (fatal(): MPI_Abort). Runs on the watchdog thread; never returns.
static void fire(const char* what, int step, double waited) {
    add_fatal_hook(abort_async);
    char who[64] = "";
    // fatal() itself prefixes the message with the rank on ranks other than 0.
    if (W.world > 1 && W.rank == 0) snprintf(who, sizeof who, "rank 0 of %d: ", W.world);
    fatal("%scollective timeout: %s at step %d did not finish within --collective-timeout %g s (waited %.1f s); "
          "another rank is stuck, dead or far behind; aborting every rank",
          who, what, step, W.timeout, waited);
}

static void* watchdog_main(void* arg) {
    (void)arg;
    // Check often enough that a timeout is noticed within ~10% of it.
    double interval = W.timeout / 10 < 1.0 ? W.timeout / 10 : 1.0;
    if (interval < 0.01) interval = 0.01;
    pthread_mutex_lock(&W.lock);
    while (!W.stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = ts.tv_sec + ts.tv_nsec * 1e-9 + interval;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - floor(t)) * 1e9);
        pthread_cond_timedwait(&W.wake, &W.lock, &ts);
        if (W.stopping) break;
        double now = now_seconds();
        char what[512];
        double since = 0;
        int stuck = 0, step = 0;
        if (W.armed_what && now - W.armed_since > W.timeout) {
            snprintf(what, sizeof what, "%s", W.armed_what);
            since = W.armed_since;
            step = W.armed_step;
            stuck = 1;
        }
        for (int i = 0; i < W.num_async && !stuck; i++) {
            double s;
            int st;
            if (W.async[i].poll(W.async[i].ctx, what, sizeof what, &s, &st) && now - s > W.timeout) {
                since = s;
                step = st;
                stuck = 1;
            }
        }
        if (stuck) {
            pthread_mutex_unlock(&W.lock);
            fire(what, step, now - since);
        }
    }
    pthread_mutex_unlock(&W.lock);
    return NULL;
}

void watchdog_start(double timeout_s, int rank, int world) {
    if (!(timeout_s >= 0)) fatal("--collective-timeout must not be negative (got %g)", timeout_s);
    parse_inject_hang();
    W.timeout = timeout_s;
    W.rank = rank;
    W.world = world;
    // A world of one has no collectives that could wait on anyone.
    if (timeout_s == 0 || world == 1 || W.running) return;
    W.stopping = 0;
    int e = pthread_create(&W.thread, NULL, watchdog_main, NULL);
    if (e) fatal("cannot start the collective watchdog thread: %s", strerror(e));
    W.running = 1;
}

void watchdog_stop(void) {
    if (!W.running) return;
    pthread_mutex_lock(&W.lock);
    W.stopping = 1;
    pthread_cond_signal(&W.wake);
    pthread_mutex_unlock(&W.lock);
    pthread_join(W.thread, NULL);
    W.running = 0;
}

void watchdog_set_step(int step) { W.step = step; }
int watchdog_step(void) { return W.step; }

void watchdog_arm(const char* what) {
    pthread_mutex_lock(&W.lock);
    W.armed_what = what;
    W.armed_since = now_seconds();
    W.armed_step = W.step;
    pthread_mutex_unlock(&W.lock);
    if (W.hang_rank == W.rank && W.hang_step == W.step && !W.hang_done && strstr(what, W.hang_what)) {
        W.hang_done = 1;
        char line[640];
        int n = snprintf(line, sizeof line, "train_gpt: TRAIN_GPT_INJECT_HANG: rank %d sleeps for ever in %s at step %d\n",
                         W.rank, what, W.step);
        if (write(STDERR_FILENO, line, (size_t)n) < 0) { /* nothing to do */ }
        for (;;) sleep(1);
    }
}

void watchdog_disarm(void) {
    pthread_mutex_lock(&W.lock);
    W.armed_what = NULL;
    pthread_mutex_unlock(&W.lock);
}

const char* watchdog_current(void) { return W.armed_what; }

void watchdog_add_async(WatchdogPoll poll, WatchdogAbort abort_fn, void* ctx) {
    pthread_mutex_lock(&W.lock);
    if (W.num_async == MAX_ASYNC) fatal("internal: too many asynchronous communicators for the watchdog");
    W.async[W.num_async++] = (AsyncSide){poll, abort_fn, ctx};
    pthread_mutex_unlock(&W.lock);
}

void watchdog_remove_async(void* ctx) {
    pthread_mutex_lock(&W.lock);
    for (int i = 0; i < W.num_async; i++)
        if (W.async[i].ctx == ctx) {
            W.async[i] = W.async[--W.num_async];
            break;
        }
    pthread_mutex_unlock(&W.lock);
}
