// report.h: what a run tells the people and tools watching it: the start-up
// summary, one line per step (regex-friendly, for SageMaker's metric
// definitions), validation results, samples, GPU telemetry, progress with an
// ETA, a final summary; and the same numbers as JSON lines in
// --log-dir/metrics.jsonl (llm/report/metrics_log.h).
//
// One report stream per process, like stdout itself: the module keeps the
// run's reporting state (log file, peak FLOP/s, timers) between calls.
// Text goes to stdout on rank 0 only; every rank must still call
// report_open, report_step and report_close, because memory and telemetry
// are reduced across ranks inside them.
#pragma once

#include "llm/parallel/rank_reduce.h"
#include "llm/trainer.h"

EXTERN_C_BEGIN

// Call after trainer_setup: finds the peak for MFU (--peak-tflops, the GPU
// table, or the CPU backend's sgemm measured now), opens --log-dir's
// metrics.jsonl with the config as its first line, opens NVML telemetry.
void report_open(const Trainer* tr);
// How per-rank memory and telemetry reach rank 0 (min/max across ranks).
// Until it is called: one rank, nothing to reduce.
void report_set_reducer(const RankReducer* reduce);
void report_run_summary(const Trainer* tr);
// Every step: the JSONL record; a stdout line every --log-every steps, at the
// last step and at every step the guard skipped or flagged; telemetry every
// --telemetry-every steps; a progress line every --progress-every seconds.
// "step    5/300 | loss 7.1234 | norm 1.2345 | lr 1.67e-04 | 123.4 ms | 16597 tok/s | mfu 41.2% | mem 243/250 MiB"
void report_step(const Trainer* tr, int step, const StepResult* r);
void report_validation(const Trainer* tr, int step, double val_loss);
// A multiple-choice evaluation (llm/eval.h): examples, accuracy by summed and
// by mean completion loss, the correct completions' mean token loss.
// "eval   100/300 | acc 0.3120 | acc_norm 0.3340 | loss 3.2101 | 500 examples"
void report_eval(const Trainer* tr, int step, int examples, double acc, double acc_norm, double loss);
void report_sample(const Trainer* tr, int step, const char* text);
// --on-divergence rollback reloaded the checkpoint of to_step after step steps_done.
void report_rollback(const Trainer* tr, int steps_done, int to_step, int bad_in_row, const char* reason);
// The backend's peak allocated bytes against the planner's bill for the run.
void report_memory_peak(const Trainer* tr);
// The final summary line and JSONL record; closes the log and NVML.
void report_close(const Trainer* tr);

EXTERN_C_END
