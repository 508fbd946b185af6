// report.c: human-readable progress output on stdout (rank 0 only).
#include "llm/report.h"

#include <stdio.h>

#include "llm/planner.h"

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

void report_run_summary(const Trainer* tr) {
    if (tr->rank != 0) return;
    const GPT* m = &tr->model;
    const GPTConfig* c = &m->config;
    printf("train_gpt | backend %s | precision %s | ranks %d\n", tr->be->name, dtype_name(m->dtype), tr->world);
    printf("model     | %zu parameters (%.2fM) | layers %d | channels %d | heads %d | vocab %d (padded %d) | max seq %d\n",
           m->num_params, (double)m->num_params / 1e6, c->num_layers, c->channels, c->num_heads, c->vocab_size,
           c->padded_vocab_size, c->max_seq_len);
    printf("batch     | micro-batch %d x seq %d x ranks %d x accumulation %d = %ld tokens per step\n", tr->B, tr->T,
           tr->world, tr->accum, tr->tokens_per_step);
    printf("data      | train %s: %llu windows/epoch (%d shards)", tr->cfg->train_data,
           (unsigned long long)tr->train.windows_per_epoch, tr->train.num_shards);
    if (tr->has_val) printf(" | val %s: %llu windows", tr->cfg->val_data, (unsigned long long)tr->val.windows_per_epoch);
    printf("\n");
    MemoryBill b = plan_bill_of_model(m);
    char pol[96];
    printf("memory    | planned peak %.1f MiB = params %.1f + grads %.1f + master %.1f + adam %.1f + activations %.1f "
           "(recompute %s) + tokens %.1f + workspace %.1f | allocated now %.1f MiB\n",
           mib(b.allocated), mib(b.state.params), mib(b.state.grads), mib(b.state.master), mib(b.state.adam),
           mib(b.activations), recompute_policy_describe(&m->acts.recompute, c->num_layers, pol, sizeof pol),
           mib(b.tokens), mib(b.workspace), mib(tr->be->allocated_bytes(tr->be)));
    printf("optimizer | AdamW lr %g (warmup %d, cosine to %g x) | betas %g %g | eps %g | wd %g | clip %g | steps %d\n",
           tr->cfg->lr, tr->cfg->warmup, tr->cfg->lr_final_frac, tr->cfg->beta1, tr->cfg->beta2, tr->cfg->eps,
           tr->cfg->weight_decay, tr->cfg->grad_clip, tr->cfg->steps);
    fflush(stdout);
}

void report_step(const Trainer* tr, int step, const StepResult* r) {
    if (tr->rank != 0) return;
    printf("step %5d/%d | loss %.4f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s\n", step + 1, tr->cfg->steps, r->loss,
           r->grad_norm, r->lr, r->seconds * 1e3, r->tokens_per_second);
    fflush(stdout);
}

void report_validation(const Trainer* tr, int step, double val_loss) {
    if (tr->rank != 0) return;
    printf("val  %5d/%d | val loss %.4f\n", step, tr->cfg->steps, val_loss);
    fflush(stdout);
}

void report_sample(const Trainer* tr, int step, const char* text) {
    if (tr->rank != 0) return;
    printf("---- sample at step %d ----\n%s\n---------------------------\n", step, text);
    fflush(stdout);
}

void report_memory_peak(const Trainer* tr) {
    if (tr->rank != 0) return;
    size_t planned = plan_bill_of_model(&tr->model).allocated, peak = tr->be->peak_allocated_bytes(tr->be);
    printf("memory    | peak allocated %zu bytes (%.1f MiB) | planned %zu bytes | %s\n", peak, mib(peak), planned,
           peak == planned ? "as planned" : peak < planned ? "below plan" : "ABOVE PLAN");
    fflush(stdout);
}
