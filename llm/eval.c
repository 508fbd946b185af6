// eval.c: multiple-choice evaluation (see eval.h): pack examples into
// micro-batches of completion rows, one forward each, losses back to the host.
#include "llm/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm/report/report.h"

EvalFile* eval_open(const Trainer* tr) {
    const TrainConfig* cfg = tr->cfg;
    if (cfg->eval_every < 0) fatal("--eval-every must not be negative (got %d)", cfg->eval_every);
    if (!cfg->eval_data[0]) return NULL;
    EvalFile* e = (EvalFile*)xcalloc(1, sizeof *e);
    eval_file_load(e, cfg->eval_data, "--eval-data", tr->model.config.vocab_size);
    for (int i = 0; i < e->num_examples; i++) {
        const EvalExample* x = &e->ex[i];
        if (x->num_completions > tr->B)
            fatal("--eval-data '%s': example %d has %d completions, more than the %d rows of --micro-batch", cfg->eval_data,
                  i, x->num_completions, tr->B);
        for (int c = 0; c < x->num_completions; c++)
            if (x->comp_len[c] > tr->T)
                fatal("--eval-data '%s': example %d: completion %d has %d tokens, more than --seq-len %d",
                      cfg->eval_data, i, c, x->comp_len[c], tr->T);
    }
    return e;
}

void eval_close(EvalFile* e) {
    if (!e) return;
    eval_file_free(e);
    free(e);
}

// Row r of the batch: context + completion c, shifted by one for the targets;
// rows longer than T + 1 keep their last T + 1 tokens. Returns where the
// completion's targets start; the rest of the row is padding (target 0).
static int fill_row(const EvalExample* x, int c, int T, int32_t* in, int32_t* tg) {
    int total = x->ctx_len + x->comp_len[c];
    int skip = total - 1 > T ? total - 1 - T : 0;
    int L = total - 1 - skip;  // inputs used
    for (int t = 0; t < T; t++) {
        int k = skip + t;  // position in context ++ completion
        if (t < L) {
            in[t] = k < x->ctx_len ? x->ctx[k] : x->comp[c][k - x->ctx_len];
            int k1 = k + 1;
            tg[t] = k1 < x->ctx_len ? x->ctx[k1] : x->comp[c][k1 - x->ctx_len];
        } else {
            in[t] = 0;
            tg[t] = 0;
        }
    }
    return L - x->comp_len[c];
}

EvalResult eval_run(Trainer* tr, const EvalFile* e) {
    GPT* m = &tr->model;
    Backend* be = tr->be;
    int B = tr->B, T = tr->T;
    // This rank's examples, packed into batches of whole examples; every rank
    // runs as many forwards as the busiest one (ZeRO-3 gathers inside them).
    int rounds = 0;
    for (int r = 0; r < tr->world; r++) {
        int batches = 0, rows = B;
        for (int i = r; i < e->num_examples; i += tr->world) {
            if (rows + e->ex[i].num_completions > B) batches++, rows = 0;
            rows += e->ex[i].num_completions;
        }
        rounds = batches > rounds ? batches : rounds;
    }
    int32_t* in = (int32_t*)xmalloc((size_t)B * T * sizeof *in);
    int32_t* tg = (int32_t*)xmalloc((size_t)B * T * sizeof *tg);
    float* losses = (float*)xmalloc((size_t)B * T * sizeof *losses);
    int* row_ex = (int*)xmalloc((size_t)B * sizeof *row_ex);
    int* row_start = (int*)xmalloc((size_t)B * sizeof *row_start);
    double sums[4] = {0, 0, 0, 0};  // examples, right, right normalised, loss
    int next = tr->rank;
    for (int round = 0; round < rounds; round++) {
        // A stop signal ends the eval between batches (the ranks agree), as it
        // does validation: a HellaSwag-sized file takes longer than
        // SageMaker's 120 s between SIGTERM and SIGKILL.
        if (trainer_stop_requested(tr)) break;
        // This round's examples, and the forward's length: its longest row, not
        // --seq-len. Rows are often short (KJV's: a verse and the next, about 60
        // tokens) and a forward costs in proportion to its length; causal
        // attention makes a position's loss the same at any forward length.
        int first = next, rows = 0, Tb = 1;
        while (next < e->num_examples && rows + e->ex[next].num_completions <= B) {
            const EvalExample* x = &e->ex[next];
            for (int c = 0; c < x->num_completions; c++, rows++) {
                int L = x->ctx_len + x->comp_len[c] - 1;  // inputs of the row
                Tb = L > Tb ? L : Tb;
            }
            next += tr->world;
        }
        Tb = Tb < T ? Tb : T;
        rows = 0;
        for (int i = first; i < next; i += tr->world) {
            const EvalExample* x = &e->ex[i];
            for (int c = 0; c < x->num_completions; c++, rows++) {
                row_ex[rows] = i;
                row_start[rows] = fill_row(x, c, Tb, in + (size_t)rows * Tb, tg + (size_t)rows * Tb);
            }
        }
        int run_rows = rows > 0 ? rows : 1;  // a rank out of examples still joins the forward
        if (rows == 0) memset(in, 0, (size_t)Tb * sizeof *in), memset(tg, 0, (size_t)Tb * sizeof *tg);
        be->to_device(be, m->inputs, in, (size_t)run_rows * Tb * sizeof *in);
        be->to_device(be, m->targets, tg, (size_t)run_rows * Tb * sizeof *tg);
        gpt_forward(m, m->inputs, m->targets, run_rows, Tb, 0.0f);
        be->to_host(be, losses, (const char*)m->arena + m->acts.offset[A_LOSSES], (size_t)run_rows * Tb * sizeof *losses);
        for (int r0 = 0; r0 < rows;) {
            const EvalExample* x = &e->ex[row_ex[r0]];
            int best = 0, best_norm = 0;
            double best_sum = INFINITY, best_mean = INFINITY, label_mean = 0;
            for (int c = 0; c < x->num_completions; c++) {
                int r = r0 + c;
                double s = 0;
                for (int t = 0; t < x->comp_len[c]; t++) s += losses[(size_t)r * Tb + row_start[r] + t];
                double mean = s / x->comp_len[c];
                if (s < best_sum) best_sum = s, best = c;
                if (mean < best_mean) best_mean = mean, best_norm = c;
                if (c == x->label) label_mean = mean;
            }
            sums[0] += 1;
            sums[1] += best == x->label;
            sums[2] += best_norm == x->label;
            sums[3] += label_mean;
            r0 += x->num_completions;
        }
    }
    comm_host_sum(tr->comm, COMM_WORLD, sums, 4);
    free(in);
    free(tg);
    free(losses);
    free(row_ex);
    free(row_start);
    double n = sums[0] > 0 ? sums[0] : 1;  // (none, when stopped at once)
    EvalResult res = {(int)sums[0], sums[1] / n, sums[2] / n, sums[3] / n};
    return res;
}

void eval_and_report(Trainer* tr, int step, const EvalFile* e) {
    EvalResult r = eval_run(tr, e);
    if (tr->stop_requested) return;  // a partial eval is not reported
    report_eval(tr, step, r.examples, r.accuracy, r.accuracy_norm, r.loss);
}
