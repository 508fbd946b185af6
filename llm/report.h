// report.h: what a run prints: the start-up summary, one line per step,
// validation results and samples.
#pragma once

#include "llm/trainer.h"

EXTERN_C_BEGIN

void report_run_summary(const Trainer* tr);
// "step    5/300 | loss 7.1234 | norm 1.2345 | lr 1.67e-04 | 123.4 ms | 16597 tok/s"
void report_step(const Trainer* tr, int step, const StepResult* r);
void report_validation(const Trainer* tr, int step, double val_loss);
void report_sample(const Trainer* tr, int step, const char* text);
// The backend's peak allocated bytes against the planner's bill for the run.
void report_memory_peak(const Trainer* tr);

EXTERN_C_END
