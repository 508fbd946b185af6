// report.c: human-readable progress output on stdout (rank 0 only), and the
// same numbers as JSON lines in --log-dir/metrics.jsonl.
#include "llm/report/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm/arch/arch.h"
#include "llm/plan/planner.h"
#include "kernels/cuda_seam.h"
#include "llm/report/metrics_log.h"
#include "llm/plan/mfu.h"
#include "llm/report/telemetry.h"
#include "llm/report/version.h"

// The reporting state of the run (see report.h: one per process).
static struct {
    MetricsLog log;          // log.f is NULL without --log-dir and on ranks > 0
    Telemetry telemetry;
    int telemetry_on;        // --telemetry-every > 0
    RankReducer reduce;
    double flops_per_token;
    double peak_flops;       // per device; 0: unknown
    int peak_refuted;        // a step ran faster than the peak: MFU is n/a from then on
    char peak_source[256];   // where the peak comes from, for the summary
    double t_start, t_after_first_step, last_progress;
    int steps_done;          // steps this process has reported (fewer than the step number after a resume)
    int last_step;           // 1-based number of the latest step
    long long tokens_done;   // tokens trained on so far, resumed part and rolled-back steps included
    double steady_seconds;   // step time summed over all steps but the first
    int steady_steps;
    long long steady_tokens;
    double last_loss, last_val_loss;
    double mem, peak_mem;    // bytes, max over ranks at the latest step
} run_report;

static double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// "1h02m03s", "4m05s", "12s".
static void format_duration(char* out, size_t len, double seconds) {
    if (!(seconds >= 0) || !isfinite(seconds)) {
        snprintf(out, len, "?");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, len, "%ldh%02ldm%02lds", s / 3600, s / 60 % 60, s % 60);
    else if (s >= 60) snprintf(out, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, len, "%lds", s);
}

// 28.39 M, 1.979 T: a value with an SI prefix, four significant digits.
static void format_si(char* out, size_t len, double v) {
    static const char* PREFIX[] = {"", "k", "M", "G", "T", "P", "E"};
    int p = 0;
    while (fabs(v) >= 1000 && p < 6) {
        v /= 1000;
        p++;
    }
    snprintf(out, len, "%.4g %s", v, PREFIX[p]);
}

// "41.5%", or "n/a" when MFU is unknown (no peak to compare with).
static void format_mfu(char* out, size_t len, double mfu_value) {
    if (isfinite(mfu_value)) snprintf(out, len, "%.1f%%", 100 * mfu_value);
    else snprintf(out, len, "n/a");
}

// MFU against the peak, or NaN ("n/a") once a measurement has exceeded 100%:
// that proves the peak wrong (a CPU sgemm measured on a busy machine, a wrong
// table row or --peak-tflops), so neither that figure nor any later one
// would mean anything. Says so once, with the numbers, on rank 0.
static double honest_mfu(const Trainer* tr, int step, double tokens_per_second) {
    double v = mfu(tokens_per_second, run_report.flops_per_token, run_report.peak_flops, tr->world);
    if (run_report.peak_refuted || !(v > 1.0)) return run_report.peak_refuted ? NAN : v;
    run_report.peak_refuted = 1;
    if (tr->rank == 0) {
        char achieved[32], peak[32];
        format_si(achieved, sizeof achieved, tokens_per_second * run_report.flops_per_token / tr->world);
        format_si(peak, sizeof peak, run_report.peak_flops);
        printf("mfu       | n/a from step %d on: it reached %sFLOP/s per device, more than the peak of %sFLOP/s (%s), "
               "so that peak is too low; give the real one with --peak-tflops\n",
               step + 1, achieved, peak, run_report.peak_source);
    }
    return NAN;
}

// The rank's position among the ranks of its node, for choosing its GPU when
// the CUDA backend does not say which one it uses (Open MPI, then Slurm/PMI).
static int local_rank_from_env(void) {
    static const char* VARS[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) {
        const char* v = getenv(VARS[i]);
        long l;
        if (v && parse_long(v, &l) && l >= 0) return (int)l;
    }
    return 0;
}

static int on_cuda(const Trainer* tr) { return strcmp(tr->be->name, "cuda") == 0; }

// Peak FLOP/s of one device: the flag, the GPU table, or the CPU measured now.
static void find_peak(const Trainer* tr) {
    const TrainConfig* cfg = tr->cfg;
    if (cfg->peak_tflops > 0) {
        run_report.peak_flops = cfg->peak_tflops * 1e12;
        snprintf(run_report.peak_source, sizeof run_report.peak_source, "--peak-tflops %g", cfg->peak_tflops);
        return;
    }
    if (!on_cuda(tr)) {
        run_report.peak_flops = cpu_sgemm_ceiling_flops(tr->be);
        snprintf(run_report.peak_source, sizeof run_report.peak_source, "the CPU backend's sgemm, measured at start-up");
        return;
    }
    char name[128] = "";
    if (!cuda_current_device_name || !cuda_current_device_name(name, sizeof name)) snprintf(name, sizeof name, "?");
    const char* row;
    double tflops = gpu_peak_tflops(name, cfg->precision, &row);
    const char* precision = config_enum_name("precision", cfg->precision);
    run_report.peak_flops = tflops * 1e12;
    if (tflops > 0)
        snprintf(run_report.peak_source, sizeof run_report.peak_source, "%s, dense %s (table: %s)", name, precision, row);
    else
        snprintf(run_report.peak_source, sizeof run_report.peak_source, "unknown: no dense %s peak for '%s' in the table; pass --peak-tflops",
                 precision, name);
}

// The log's last line when the run dies on a fatal error.
static void log_failure(const char* message) {
    if (!run_report.log.f) return;
    JsonWriter* j = metrics_log_begin(&run_report.log, "summary");
    json_string(j, "status", "error");
    json_string(j, "error", message);
    json_int(j, "steps_done", run_report.steps_done);
    json_int(j, "last_step", run_report.last_step);
    json_number(j, "elapsed_s", now_seconds() - run_report.t_start);
    metrics_log_commit_quietly(&run_report.log);
}

static void log_config(const Trainer* tr) {
    const GPT* m = &tr->model;
    const GPTConfig* c = &m->config;
    JsonWriter* j = metrics_log_begin(&run_report.log, "config");
    json_number(j, "time", (double)time(NULL));
    json_string(j, "version", train_gpt_version());
    json_open_object(j, "flags");
    config_write_json(tr->cfg, j);
    json_close_object(j);
    json_string(j, "backend", tr->be->name);
    json_string(j, "precision", m->fp8 ? "fp8" : dtype_name(m->dtype));
    json_int(j, "world", tr->world);
    json_int(j, "zero_stage", m->zero_stage);
    json_int(j, "params", (long long)m->num_params);
    json_int(j, "layers", c->num_layers);
    json_int(j, "channels", c->channels);
    json_int(j, "heads", c->num_heads);
    json_int(j, "vocab_size", c->vocab_size);
    json_int(j, "seq_len", tr->T);
    json_int(j, "micro_batch", tr->B);
    json_int(j, "accumulation", tr->accum);
    json_int(j, "tokens_per_step", tr->tokens_per_step);
    json_number(j, "flops_per_token", run_report.flops_per_token);
    json_number(j, "peak_flops_per_device", run_report.peak_flops > 0 ? run_report.peak_flops : NAN);
    json_string(j, "peak_source", run_report.peak_source);
    metrics_log_commit(&run_report.log);
}

void report_open(const Trainer* tr) {
    const TrainConfig* cfg = tr->cfg;
    run_report.flops_per_token = flops_per_token(&tr->model.config, tr->T);
    find_peak(tr);
    run_report.last_loss = run_report.last_val_loss = NAN;
    if (tr->rank == 0 && cfg->log_dir[0]) {
        metrics_log_open(&run_report.log, cfg->log_dir, tr->first_step > 0);
        add_fatal_hook(log_failure);
        log_config(tr);
    }
    run_report.telemetry_on = cfg->telemetry_every > 0;
    if (run_report.telemetry_on) {
        // The CUDA backend's own device by PCI bus id; otherwise the GPU with
        // this rank's local index (a CPU-backend run on a GPU host).
        char bus[32] = "";
        if (on_cuda(tr) && cuda_current_pci_bus_id) cuda_current_pci_bus_id(bus, sizeof bus);
        telemetry_open(&run_report.telemetry, bus, local_rank_from_env());
    }
    run_report.t_start = run_report.last_progress = now_seconds();
}

void report_set_reducer(const RankReducer* reduce) {
    if (reduce) run_report.reduce = *reduce;
    else memset(&run_report.reduce, 0, sizeof run_report.reduce);
}

void report_run_summary(const Trainer* tr) {
    if (tr->rank != 0) return;
    const TrainConfig* cfg = tr->cfg;
    const GPT* m = &tr->model;
    const GPTConfig* c = &m->config;
    char groups[64] = "";
    int replicas = tr->comm->group[COMM_REPLICA].size;
    if (tr->comm->node_scope) snprintf(groups, sizeof groups, " per node");
    else if (replicas > 1) snprintf(groups, sizeof groups, " per group, %d groups", replicas);
    printf("train_gpt | backend %s | precision %s | ranks %d | zero %d, sharded over %d rank%s%s | version %s\n",
           tr->be->name, m->fp8 ? "fp8" : dtype_name(m->dtype), tr->world, m->zero_stage, m->world,
           m->world == 1 ? "" : "s", groups, train_gpt_version());
    if (m->fp8) {
        const Fp8State* f = m->fp8;
        int skipped = 0;
        for (int l = 0; l < f->L; l++)
            for (int g = 0; g < FP8_NUM_GEMMS; g++) skipped += (f->skip[l] >> g) & 1;
        char recipe[128];
        if (f->history)
            snprintf(recipe, sizeof recipe, "delayed scaling (amax history %d, margin %d)", f->opt.history, f->opt.margin);
        else if (f->opt.recipe == FP8_BLOCKWISE)
            snprintf(recipe, sizeof recipe, "blockwise scaling (1x128 activations and gradients, 128x128 weights, FP32 scales)");
        else if (f->opt.recipe == FP8_MXFP8)
            snprintf(recipe, sizeof recipe, "mxfp8 scaling (1x32 blocks, E8M0 scales)");
        else if (f->opt.recipe == FP8_NVFP4)
            snprintf(recipe, sizeof recipe, "nvfp4 (E2M1, 1x16 and 16x16 blocks, E4M3 and FP32 scales, stochastic dY, Hadamard wgrad)");
        else
            snprintf(recipe, sizeof recipe, "current scaling");
        printf("fp8       | %d of %d linear layers in FP8 (%s), %s; %s%s | FP8 GEMM layout %s\n", 4 * f->L - skipped,
               4 * f->L,
               f->opt.recipe == FP8_NVFP4 ? "FP4 E2M1 everywhere"
               : f->block                 ? "E4M3 everywhere"
                                          : "E4M3 x E4M3 forward, E5M2 gradients",
               recipe,
               dtype_name(m->dtype), strcmp(tr->be->name, "cpu") ? " elsewhere" : " storage, FP8 GEMMs emulated",
               f->block ? "row- and column-wise copies from the source" : f->tn_only ? "TN with transposed copies (Hopper)" : "any");
    }
    printf("model     | %zu parameters (%.2fM) | layers %d | channels %d | heads %d | vocab %d (padded %d) | max seq %d\n",
           m->num_params, (double)m->num_params / 1e6, c->num_layers, c->channels, c->num_heads, c->vocab_size,
           c->padded_vocab_size, c->max_seq_len);
    if (c->arch == ARCH_LLAMA)
        printf("llama     | kv heads %d | MLP %d (SwiGLU) | RoPE theta %g%s | LM head %s\n", c->num_kv_heads,
               c->mlp_hidden, c->rope_theta, c->rope_scaling.factor > 0 ? " (Llama 3.1 scaling)" : "",
               c->tie_embeddings ? "tied to wte" : "untied");
    if (tr->cp > 1)
        printf("batch     | micro-batch %d x seq %d x data-parallel ranks %d x accumulation %d = %ld tokens per step; "
               "context parallelism: each sequence over %d ranks, %d rows each (2 chunks of %d; padded to %d)\n",
               tr->B, tr->T, tr->dp_world, tr->accum, tr->tokens_per_step, tr->cp, tr->T_model, tr->T_model / 2,
               tr->T_model * tr->cp);
    else
        printf("batch     | micro-batch %d x seq %d x ranks %d x accumulation %d = %ld tokens per step\n", tr->B,
               tr->T, tr->world, tr->accum, tr->tokens_per_step);
    printf("data      | train %s: %llu windows/epoch (%d shards)", cfg->train_data,
           (unsigned long long)tr->train.windows_per_epoch, tr->train.num_shards);
    if (tr->has_val) printf(" | val %s: %llu windows", cfg->val_data, (unsigned long long)tr->val.windows_per_epoch);
    printf("\n");
    MemoryBill b = plan_bill_of_model(m);
    char pol[96];
    char fp8_bill[96] = "";
    if (m->fp8) snprintf(fp8_bill, sizeof fp8_bill, " + fp8 weights %.1f + fp8 scaling %.1f", mib(b.fp8_weights), mib(b.fp8_scaling));
    char cp_bill[64] = "";
    if (b.context_kv) snprintf(cp_bill, sizeof cp_bill, " + context-parallel K/V %.1f", mib(b.context_kv));
    printf("memory    | planned peak %.1f MiB = params %.1f + grads %.1f + master %.1f + adam %.1f%s + activations %.1f "
           "(recompute %s) + tokens %.1f + workspace %.1f%s | allocated now %.1f MiB\n",
           mib(b.allocated), mib(b.state.params), mib(b.state.grads), mib(b.state.master), mib(b.state.adam), fp8_bill,
           mib(b.activations), recompute_policy_describe(&m->acts.recompute, c->num_layers, pol, sizeof pol),
           mib(b.tokens), mib(b.workspace), cp_bill, mib(tr->be->allocated_bytes(tr->be)));
    printf("optimizer | AdamW lr %g (warmup %d, cosine to %g x) | betas %g %g | eps %g | wd %g | clip %g | steps %d"
           " | moments %s\n",
           cfg->lr, cfg->warmup, cfg->lr_final_frac, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay,
           cfg->grad_clip, cfg->steps, dtype_name(m->adam_dtype));
    char fpt[32], peak[32];
    format_si(fpt, sizeof fpt, run_report.flops_per_token);
    format_si(peak, sizeof peak, run_report.peak_flops);
    if (run_report.peak_flops > 0)
        printf("mfu       | %sFLOP per token (6N + 12*L*h*s, PaLM's convention) | peak %sFLOP/s per device: %s\n", fpt,
               peak, run_report.peak_source);
    else
        printf("mfu       | %sFLOP per token (6N + 12*L*h*s, PaLM's convention) | peak %s\n", fpt, run_report.peak_source);
    if (!cfg->max_bad_steps)
        printf("guard     | non-finite loss or grad norm: skip the update (never stop: --max-bad-steps 0)");
    else if (cfg->on_divergence == ON_DIVERGENCE_ROLLBACK)
        printf("guard     | non-finite loss or grad norm: skip the update; after %d in a row roll back to the newest "
               "checkpoint (at most %d times to the same one)", cfg->max_bad_steps, cfg->max_rollbacks);
    else
        printf("guard     | non-finite loss or grad norm: skip the update, stop after %d in a row", cfg->max_bad_steps);
    if (cfg->spike_z > 0)
        printf(" | loss spikes (z > %g over the last %d steps): %s\n", cfg->spike_z, cfg->spike_window,
               cfg->skip_spikes ? "skipped" : "reported");
    else
        printf(" | loss spikes: not checked (--spike-z 0)\n");
    if (tr->world > 1) {
        if (cfg->collective_timeout > 0)
            printf("watchdog  | a collective unfinished after %g s stops every rank (--collective-timeout)\n",
                   cfg->collective_timeout);
        else
            printf("watchdog  | off: collectives may wait for ever (--collective-timeout 0)\n");
    }
    if (tr->guard.num_inject > 0) {
        printf("guard     | testing hook TRAIN_GPT_INJECT_NAN: a NaN gradient at step");
        for (int i = 0; i < tr->guard.num_inject; i++) printf("%s%d", i ? "," : " ", tr->guard.inject[i]);
        printf("\n");
    }
    if (!run_report.telemetry_on) printf("telemetry | off (--telemetry-every 0)\n");
    else if (run_report.telemetry.active) printf("telemetry | %s, every %d steps (NVML)\n", run_report.telemetry.device_name, cfg->telemetry_every);
    else printf("telemetry | off: %s\n", run_report.telemetry.notice);
    if (run_report.log.f) printf("log       | %s\n", run_report.log.path);
    fflush(stdout);
}

// Memory of the fullest rank: current and peak bytes through the backend's allocator.
static void gather_memory(const Trainer* tr) {
    double lo[2], hi[2];
    hi[0] = lo[0] = (double)tr->be->allocated_bytes(tr->be);
    hi[1] = lo[1] = (double)tr->be->peak_allocated_bytes(tr->be);
    rank_minmax(&run_report.reduce, lo, hi, 2);
    run_report.mem = hi[0];
    run_report.peak_mem = hi[1];
}

static void log_step(const Trainer* tr, int step, const StepResult* r, double mfu_now, double elapsed, double eta) {
    JsonWriter* j = metrics_log_begin(&run_report.log, "step");
    json_int(j, "step", step + 1);
    json_int(j, "steps", tr->cfg->steps);
    json_number(j, "loss", r->loss);
    json_number(j, "grad_norm", r->grad_norm);
    json_number(j, "lr", r->lr);
    json_number(j, "step_time_s", r->seconds);
    json_number(j, "tokens_per_second", r->tokens_per_second);
    json_number(j, "tokens_per_second_per_rank", r->tokens_per_second / tr->world);
    json_number(j, "model_flops_per_second", r->tokens_per_second * run_report.flops_per_token);
    json_number(j, "mfu", mfu_now);
    json_int(j, "memory_bytes", (long long)run_report.mem);
    json_int(j, "peak_memory_bytes", (long long)run_report.peak_mem);
    json_int(j, "tokens", run_report.tokens_done);
    json_number(j, "elapsed_s", elapsed);
    json_number(j, "eta_s", eta);
    json_bool(j, "skipped", r->action != GUARD_UPDATE);
    json_string(j, "skip_reason", r->action != GUARD_UPDATE ? guard_action_name(r->action) : NULL);
    json_bool(j, "loss_spike", r->spike);
    json_number(j, "loss_z", r->loss_z);
    json_int(j, "skipped_total", tr->guard.skipped);
    json_int(j, "rollbacks", tr->guard.rollbacks);
    metrics_log_commit(&run_report.log);
}

static void print_step(const Trainer* tr, int step, const StepResult* r, double mfu_now) {
    char mfu_text[32];
    format_mfu(mfu_text, sizeof mfu_text, mfu_now);
    printf("step %5d/%d | loss %.4f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s | mfu %s | mem %.0f/%.0f MiB",
           step + 1, tr->cfg->steps, r->loss, r->grad_norm, r->lr, r->seconds * 1e3, r->tokens_per_second, mfu_text,
           mib(run_report.mem), mib(run_report.peak_mem));
    if (r->action == GUARD_SKIP_NONFINITE)
        printf(" | skipped: non-finite loss or grad norm (%d in a row)", tr->guard.bad_in_row);
    else if (r->action == GUARD_SKIP_SPIKE)
        printf(" | skipped: loss spike z %.1f (%d in a row)", r->loss_z, tr->guard.bad_in_row);
    else if (r->spike)
        printf(" | loss spike z %.1f", r->loss_z);
    printf("\n");
}

static void report_telemetry(const Trainer* tr, int step) {
    TelemetryRange range;
    telemetry_gather(&run_report.telemetry, &run_report.reduce, &range);
    if (run_report.telemetry.notice_pending) {
        // A call failed on this rank during the run: say so once, from that rank.
        run_report.telemetry.notice_pending = 0;
        fflush(stdout);
        if (tr->world > 1) printf("telemetry | rank %d: off from step %d: %s\n", tr->rank, step + 1, run_report.telemetry.notice);
        else printf("telemetry | off from step %d: %s\n", step + 1, run_report.telemetry.notice);
    }
    if (tr->rank != 0 || !telemetry_range_any(&range)) return;
    char line[512];
    telemetry_format(&range, line, sizeof line);
    printf("gpu  %5d/%d | %s\n", step + 1, tr->cfg->steps, line);
    if (run_report.log.f) {
        JsonWriter* j = metrics_log_begin(&run_report.log, "telemetry");
        json_int(j, "step", step + 1);
        json_int(j, "ranks", tr->world);
        for (int f = 0; f < TEL_NUM_FIELDS; f++) {
            char key[64];
            snprintf(key, sizeof key, "%s_min", telemetry_field_key((TelemetryField)f));
            json_number(j, key, range.lo[f]);
            snprintf(key, sizeof key, "%s_max", telemetry_field_key((TelemetryField)f));
            json_number(j, key, range.hi[f]);
        }
        metrics_log_commit(&run_report.log);
    }
}

void report_step(const Trainer* tr, int step, const StepResult* r) {
    const TrainConfig* cfg = tr->cfg;
    double now = now_seconds();
    run_report.steps_done++;
    run_report.last_step = step + 1;
    // Tokens read by the run: after a rollback more than the step count says.
    if (run_report.steps_done == 1) run_report.tokens_done = (long long)step * tr->tokens_per_step;
    run_report.tokens_done += tr->tokens_per_step;
    if (run_report.steps_done == 1) {
        run_report.t_after_first_step = now;
    } else {  // the first step warms caches and allocators: not steady state
        run_report.steady_seconds += r->seconds;
        run_report.steady_steps++;
        run_report.steady_tokens += tr->tokens_per_step;
    }
    if (isfinite(r->loss)) run_report.last_loss = r->loss;
    gather_memory(tr);
    int telemetry_due = run_report.telemetry_on && (step + 1) % cfg->telemetry_every == 0;
    if (tr->rank != 0) {
        if (telemetry_due) report_telemetry(tr, step);
        return;
    }

    double mfu_now = honest_mfu(tr, step, r->tokens_per_second);
    double elapsed = now - run_report.t_start;
    // ETA from the mean wall time per step since the first (validation and samples included).
    double per_step = run_report.steps_done > 1 ? (now - run_report.t_after_first_step) / (run_report.steps_done - 1) : r->seconds;
    double eta = (cfg->steps - (step + 1)) * per_step;
    if (run_report.log.f) log_step(tr, step, r, mfu_now, elapsed, eta);
    int last = step + 1 == cfg->steps;
    if (step % cfg->log_every == 0 || last || r->action != GUARD_UPDATE || r->spike) print_step(tr, step, r, mfu_now);
    if (telemetry_due) report_telemetry(tr, step);
    if (cfg->progress_every > 0 && now - run_report.last_progress >= cfg->progress_every && !last) {
        char e[32], left[32];
        format_duration(e, sizeof e, elapsed);
        format_duration(left, sizeof left, eta);
        printf("progress  | %d/%d steps (%.1f%%) | elapsed %s | eta %s | %.4g tokens trained\n", step + 1, cfg->steps,
               100.0 * (step + 1) / cfg->steps, e, left, (double)run_report.tokens_done);
        run_report.last_progress = now;
    }
    fflush(stdout);
}

void report_validation(const Trainer* tr, int step, double val_loss) {
    run_report.last_val_loss = val_loss;
    if (tr->rank != 0) return;
    printf("val  %5d/%d | val loss %.4f\n", step, tr->cfg->steps, val_loss);
    fflush(stdout);
    if (run_report.log.f) {
        JsonWriter* j = metrics_log_begin(&run_report.log, "val");
        json_int(j, "step", step);
        json_number(j, "val_loss", val_loss);
        metrics_log_commit(&run_report.log);
    }
}

void report_eval(const Trainer* tr, int step, int examples, double acc, double acc_norm, double loss) {
    if (tr->rank != 0) return;
    printf("eval %5d/%d | acc %.4f | acc_norm %.4f | loss %.4f | %d examples\n", step, tr->cfg->steps, acc, acc_norm,
           loss, examples);
    fflush(stdout);
    if (run_report.log.f) {
        JsonWriter* j = metrics_log_begin(&run_report.log, "eval");
        json_int(j, "step", step);
        json_number(j, "acc", acc);
        json_number(j, "acc_norm", acc_norm);
        json_number(j, "loss", loss);
        json_int(j, "examples", examples);
        metrics_log_commit(&run_report.log);
    }
}

void report_rollback(const Trainer* tr, int steps_done, int to_step, int bad_in_row, const char* reason) {
    if (tr->rank != 0) return;
    printf("rollback  | step %d: %d steps in a row skipped (the last for %s), reaching --max-bad-steps %d: reloaded the "
           "checkpoint of step %d (rollback %ld); training goes on from step %d with the data after step %d (the "
           "batches in between are not replayed)\n",
           steps_done, bad_in_row, reason, tr->cfg->max_bad_steps, to_step, tr->guard.rollbacks, to_step + 1,
           steps_done);
    fflush(stdout);
    if (run_report.log.f) {
        JsonWriter* j = metrics_log_begin(&run_report.log, "rollback");
        json_int(j, "step", steps_done);
        json_int(j, "to_step", to_step);
        json_int(j, "bad_in_row", bad_in_row);
        json_int(j, "rollbacks", tr->guard.rollbacks);
        metrics_log_commit(&run_report.log);
    }
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

void report_close(const Trainer* tr) {
    if (run_report.telemetry_on) telemetry_close(&run_report.telemetry);
    if (run_report.steps_done == 0) gather_memory(tr);  // no step measured it (every rank is here: a collective)
    if (tr->rank != 0) return;
    const Guard* g = &tr->guard;
    double elapsed = now_seconds() - run_report.t_start;
    double tok_s = run_report.steady_steps > 0 ? (double)run_report.steady_tokens / run_report.steady_seconds : NAN;
    double mean_mfu = honest_mfu(tr, run_report.last_step - 1, tok_s);
    char e[32], mfu_text[32];
    format_duration(e, sizeof e, elapsed);
    format_mfu(mfu_text, sizeof mfu_text, mean_mfu);
    // Worded unlike the step line ("mean ... tokens/s", "final loss") so that
    // the step line's metric regexes do not match it.
    // With fewer than two steps there is no steady-state throughput, and with
    // none no loss: "n/a", never "nan".
    char val_text[32], tok_text[32], loss_text[32];
    if (isfinite(run_report.last_val_loss)) snprintf(val_text, sizeof val_text, "%.4f", run_report.last_val_loss);
    else snprintf(val_text, sizeof val_text, "n/a");
    if (isfinite(tok_s)) snprintf(tok_text, sizeof tok_text, "%.0f", tok_s);
    else snprintf(tok_text, sizeof tok_text, "n/a");
    if (isfinite(run_report.last_loss)) snprintf(loss_text, sizeof loss_text, "%.4f", run_report.last_loss);
    else snprintf(loss_text, sizeof loss_text, "n/a");
    printf("summary   | %d steps in %s | %ld skipped (%ld non-finite, %ld loss spikes) | %ld rollback%s | mean %s tokens/s | "
           "mean mfu %s | peak mem %.0f MiB | final loss %s | final val loss %s\n",
           run_report.steps_done, e, g->skipped, g->nonfinite, g->spikes, g->rollbacks, g->rollbacks == 1 ? "" : "s", tok_text,
           mfu_text, mib(run_report.peak_mem), loss_text, val_text);
    fflush(stdout);
    if (!run_report.log.f) return;
    JsonWriter* j = metrics_log_begin(&run_report.log, "summary");
    json_string(j, "status", "ok");
    json_null(j, "error");
    json_int(j, "steps_done", run_report.steps_done);
    json_int(j, "last_step", run_report.last_step);
    json_int(j, "skipped_steps", g->skipped);
    json_int(j, "nonfinite_steps", g->nonfinite);
    json_int(j, "loss_spikes", g->spikes);
    json_int(j, "rollbacks", g->rollbacks);
    json_int(j, "tokens", run_report.tokens_done);
    json_number(j, "elapsed_s", elapsed);
    json_number(j, "tokens_per_second", tok_s);
    json_number(j, "mfu", mean_mfu);
    json_int(j, "peak_memory_bytes", (long long)run_report.peak_mem);
    json_number(j, "final_loss", run_report.last_loss);
    json_number(j, "final_val_loss", run_report.last_val_loss);
    metrics_log_commit(&run_report.log);
    metrics_log_close(&run_report.log);
}
