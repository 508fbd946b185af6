// eval.h: multiple-choice evaluation during training (--eval-data FILE,
// --eval-every N): every example of an llm.c eval file (data/eval_file.h,
// HellaSwag's format) is scored by the model, each completion a row of
// context + completion; the examples are dealt out over the ranks (example i
// to rank i mod world) and the counts summed.
//
// Per completion, the loss of each of its tokens given everything before it;
// accuracy takes the completion with the lowest summed loss, length-normalised
// accuracy (llm.c's figure) the lowest mean loss; ties go to the first. A row
// longer than --seq-len + 1 loses context tokens from the left. Each forward
// runs at the length of its longest row (at most --seq-len), not --seq-len.
#pragma once

#include "data/eval_file.h"
#include "llm/trainer.h"

EXTERN_C_BEGIN

typedef struct {
    int examples;
    double accuracy;       // share of examples right by summed loss
    double accuracy_norm;  // ... by mean loss per completion token
    double loss;           // mean over examples of the correct completion's mean token loss
} EvalResult;

// Loads --eval-data when it is set (NULL otherwise); fatal on a malformed
// file, or an example with more completions than --micro-batch rows.
EvalFile* eval_open(const Trainer* tr);
void eval_close(EvalFile* e);
// Collective: every rank calls it; the same result on every rank. A stop
// signal (trainer_stop_requested) ends it between batches, with
// tr->stop_requested set and the examples done so far counted.
EvalResult eval_run(Trainer* tr, const EvalFile* e);
// eval_run, then the result to the step output and metrics.jsonl (llm/report/report.h);
// nothing is reported when a stop signal cut it short.
void eval_and_report(Trainer* tr, int step, const EvalFile* e);

EXTERN_C_END
