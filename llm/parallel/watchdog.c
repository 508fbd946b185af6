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
} watchdog = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .hang_rank = -1};

static void parse_inject_hang(void) {
    const char* spec = getenv("TRAIN_GPT_INJECT_HANG");
    watchdog.hang_rank = -1;
    if (!spec || !spec[0]) return;
    char rank_text[32], step_text[32];
    const char* colon = strchr(spec, ':');
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof rank_text)
        fatal("TRAIN_GPT_INJECT_HANG='%s': expected RANK:STEP", spec);
    snprintf(rank_text, sizeof rank_text, "%.*s", (int)(colon - spec), spec);
    const char* step_begin = colon + 1;
    const char* second = strchr(step_begin, ':');  // RANK:STEP:TEXT
    size_t step_len = second ? (size_t)(second - step_begin) : strlen(step_begin);
    watchdog.hang_what[0] = 0;
    if (second) {
        if (!second[1] || strlen(second + 1) >= sizeof watchdog.hang_what)
            fatal("TRAIN_GPT_INJECT_HANG='%s': TEXT after RANK:STEP: must be 1 to %zu characters", spec,
                  sizeof watchdog.hang_what - 1);
        snprintf(watchdog.hang_what, sizeof watchdog.hang_what, "%s", second + 1);
    }
    long rank, step = 0;
    if (step_len < sizeof step_text) {
        snprintf(step_text, sizeof step_text, "%.*s", (int)step_len, step_begin);
        if (!parse_long(step_text, &step)) step = 0;
    }
    if (!parse_long(rank_text, &rank) || rank < 0 || step < 1 || step > 2147483647L)
        fatal("TRAIN_GPT_INJECT_HANG='%s': expected RANK:STEP with RANK >= 0 and STEP >= 1", spec);
    watchdog.hang_rank = (int)rank;
    watchdog.hang_step = (int)step;
}

// A fatal hook: runs after the message is out, before MPI_Abort, so that a
// main thread woken by the abort cannot get in the message's way.
static void abort_async(const char* message) {
    (void)message;
    for (int i = 0; i < watchdog.num_async; i++)
        if (watchdog.async[i].abort_fn) watchdog.async[i].abort_fn(watchdog.async[i].ctx);
}

// Stops the run: the message, the stuck communicators aborted, then every
// rank stopped (fatal(): MPI_Abort). Runs on the watchdog thread; never returns.
static void fire(const char* what, int step, double waited) {
    add_fatal_hook(abort_async);
    char who[64] = "";
    // fatal() itself prefixes the message with the rank on ranks other than 0.
    if (watchdog.world > 1 && watchdog.rank == 0) snprintf(who, sizeof who, "rank 0 of %d: ", watchdog.world);
    fatal("%scollective timeout: %s at step %d did not finish within --collective-timeout %g s (waited %.1f s); "
          "another rank is stuck, dead or far behind; aborting every rank",
          who, what, step, watchdog.timeout, waited);
}

static void* watchdog_main(void* arg) {
    (void)arg;
    // Check often enough that a timeout is noticed within ~10% of it.
    double interval = watchdog.timeout / 10 < 1.0 ? watchdog.timeout / 10 : 1.0;
    if (interval < 0.01) interval = 0.01;
    pthread_mutex_lock(&watchdog.lock);
    while (!watchdog.stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = ts.tv_sec + ts.tv_nsec * 1e-9 + interval;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - floor(t)) * 1e9);
        pthread_cond_timedwait(&watchdog.wake, &watchdog.lock, &ts);
        if (watchdog.stopping) break;
        double now = now_seconds();
        char what[512];
        double since = 0;
        int stuck = 0, step = 0;
        if (watchdog.armed_what && now - watchdog.armed_since > watchdog.timeout) {
            snprintf(what, sizeof what, "%s", watchdog.armed_what);
            since = watchdog.armed_since;
            step = watchdog.armed_step;
            stuck = 1;
        }
        for (int i = 0; i < watchdog.num_async && !stuck; i++) {
            double s;
            int st;
            if (watchdog.async[i].poll(watchdog.async[i].ctx, what, sizeof what, &s, &st) && now - s > watchdog.timeout) {
                since = s;
                step = st;
                stuck = 1;
            }
        }
        if (stuck) {
            pthread_mutex_unlock(&watchdog.lock);
            fire(what, step, now - since);
        }
    }
    pthread_mutex_unlock(&watchdog.lock);
    return NULL;
}

void watchdog_start(double timeout_s, int rank, int world) {
    if (!(timeout_s >= 0)) fatal("--collective-timeout must not be negative (got %g)", timeout_s);
    parse_inject_hang();
    watchdog.timeout = timeout_s;
    watchdog.rank = rank;
    watchdog.world = world;
    // A world of one has no collectives that could wait on anyone.
    if (timeout_s == 0 || world == 1 || watchdog.running) return;
    watchdog.stopping = 0;
    int e = pthread_create(&watchdog.thread, NULL, watchdog_main, NULL);
    if (e) fatal("cannot start the collective watchdog thread: %s", strerror(e));
    watchdog.running = 1;
}

void watchdog_stop(void) {
    if (!watchdog.running) return;
    pthread_mutex_lock(&watchdog.lock);
    watchdog.stopping = 1;
    pthread_cond_signal(&watchdog.wake);
    pthread_mutex_unlock(&watchdog.lock);
    pthread_join(watchdog.thread, NULL);
    watchdog.running = 0;
}

void watchdog_set_step(int step) { watchdog.step = step; }
int watchdog_step(void) { return watchdog.step; }

void watchdog_arm(const char* what) {
    pthread_mutex_lock(&watchdog.lock);
    watchdog.armed_what = what;
    watchdog.armed_since = now_seconds();
    watchdog.armed_step = watchdog.step;
    pthread_mutex_unlock(&watchdog.lock);
    if (watchdog.hang_rank == watchdog.rank && watchdog.hang_step == watchdog.step && !watchdog.hang_done && strstr(what, watchdog.hang_what)) {
        watchdog.hang_done = 1;
        char line[640];
        int n = snprintf(line, sizeof line, "train_gpt: TRAIN_GPT_INJECT_HANG: rank %d sleeps for ever in %s at step %d\n",
                         watchdog.rank, what, watchdog.step);
        if (write(STDERR_FILENO, line, (size_t)n) < 0) { /* nothing to do */ }
        for (;;) sleep(1);
    }
}

void watchdog_disarm(void) {
    pthread_mutex_lock(&watchdog.lock);
    watchdog.armed_what = NULL;
    pthread_mutex_unlock(&watchdog.lock);
}

const char* watchdog_current(void) { return watchdog.armed_what; }

void watchdog_add_async(WatchdogPoll poll, WatchdogAbort abort_fn, void* ctx) {
    pthread_mutex_lock(&watchdog.lock);
    if (watchdog.num_async == MAX_ASYNC) fatal("internal: too many asynchronous communicators for the watchdog");
    watchdog.async[watchdog.num_async++] = (AsyncSide){poll, abort_fn, ctx};
    pthread_mutex_unlock(&watchdog.lock);
}

void watchdog_remove_async(void* ctx) {
    pthread_mutex_lock(&watchdog.lock);
    for (int i = 0; i < watchdog.num_async; i++)
        if (watchdog.async[i].ctx == ctx) {
            watchdog.async[i] = watchdog.async[--watchdog.num_async];
            break;
        }
    pthread_mutex_unlock(&watchdog.lock);
}
