// metrics_log.h: the run's machine-readable log, DIR/metrics.jsonl: one JSON
// object per line, each with a "type": the run's config first, then "step",
// "val" and "telemetry" records as they happen, and a "summary" last (also
// when the run stops on an error). Every line is flushed as it is written,
// so a crashed or killed run leaves a log that parses up to its last step.
#pragma once

#include <stdio.h>

#include "llm/util/json.h"

EXTERN_C_BEGIN

typedef struct {
    FILE* f;          // NULL: no log
    char* path;
    JsonWriter json;
} MetricsLog;

// Creates `dir` (and its parents) and opens dir/metrics.jsonl, truncated for
// a new run or appended to for a resumed one. Fatal, naming --log-dir.
void metrics_log_open(MetricsLog* log, const char* dir, int append);
// Starts a record {"type": type, ...}; add members to the returned writer.
JsonWriter* metrics_log_begin(MetricsLog* log, const char* type);
// Ends the record and writes it as one line. Fatal if the write fails.
void metrics_log_commit(MetricsLog* log);
// The same without fatal() (for fatal hooks): returns 0 if the write failed.
int metrics_log_commit_quietly(MetricsLog* log);
void metrics_log_close(MetricsLog* log);

EXTERN_C_END
