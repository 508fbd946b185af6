// metrics_log.c: DIR/metrics.jsonl.
#include "llm/report/metrics_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

// mkdir -p: each prefix of the path in turn.
static void make_dirs(const char* dir) {
    char* p = xstrdup(dir);
    for (char* s = p + 1;; s++) {
        char c = *s;
        if (c == '/' || c == 0) {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) fatal("--log-dir '%s': cannot create '%s': %s", dir, p, strerror(errno));
            *s = c;
        }
        if (c == 0) break;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("--log-dir '%s' exists and is not a directory", dir);
}

void metrics_log_open(MetricsLog* log, const char* dir, int append) {
    memset(log, 0, sizeof *log);
    make_dirs(dir);
    size_t n = strlen(dir) + sizeof "/metrics.jsonl";
    log->path = (char*)xmalloc(n);
    snprintf(log->path, n, "%s/metrics.jsonl", dir);
    log->f = fopen(log->path, append ? "a" : "w");
    if (!log->f) fatal("--log-dir: cannot open '%s' for writing: %s", log->path, strerror(errno));
}

JsonWriter* metrics_log_begin(MetricsLog* log, const char* type) {
    json_begin(&log->json);
    json_string(&log->json, "type", type);
    return &log->json;
}

int metrics_log_commit_quietly(MetricsLog* log) {
    if (!log->f) return 0;
    const char* line = json_end(&log->json);
    return fprintf(log->f, "%s\n", line) >= 0 && fflush(log->f) == 0;
}

void metrics_log_commit(MetricsLog* log) {
    if (!log->f) return;
    if (!metrics_log_commit_quietly(log)) fatal("cannot write to '%s': %s", log->path, strerror(errno));
}

void metrics_log_close(MetricsLog* log) {
    if (log->f && fclose(log->f) != 0) fatal("cannot write to '%s': %s", log->path, strerror(errno));
    json_free(&log->json);
    free(log->path);
    memset(log, 0, sizeof *log);
}
