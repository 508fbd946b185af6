// signals.c: SIGTERM/SIGINT handlers. The handler only does what is
// async-signal-safe: store to a sig_atomic_t, write(2), _exit(2).
#include "llm/checkpoint/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void say(const char* s) {
    if (write(STDERR_FILENO, s, strlen(s)) < 0) { /* nothing to do in a handler */ }
}

static void on_stop_signal(int sig) {
    if (stop_signal) {
        say("train_gpt: second stop signal: exiting now, without a checkpoint\n");
        _exit(128 + sig);
    }
    stop_signal = sig;
    say(sig == SIGTERM ? "train_gpt: SIGTERM: finishing this step, then writing a checkpoint and exiting "
                         "(send it again to exit at once)\n"
                       : "train_gpt: SIGINT: finishing this step, then writing a checkpoint and exiting "
                         "(press Ctrl-C again to exit at once)\n");
}

void signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    // Restart interrupted system calls (file reads and writes) rather than
    // failing them with EINTR in the middle of a step.
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int signals_stop_requested(void) { return (int)stop_signal; }

void signals_reset(void) { stop_signal = 0; }
