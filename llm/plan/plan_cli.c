// plan_cli.c: --plan and --auto: from flags to a plan request, the printed
// plan, and the recommendation applied to a run.
#include "llm/plan/plan_cli.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "kernels/cuda_seam.h"
#include "llm/arch/arch.h"
#include "llm/platform/device.h"
#include "llm/plan/cost.h"
#include "llm/plan/mfu.h"
#include "llm/fp8/fp8.h"
#include "llm/parallel/comm.h"
#include "llm/presets.h"
#include "llm/util/host_mem.h"

static const double GIB = 1073741824.0;

typedef struct {
    PlanDevice dev;
    char memory_note[160];  // where dev.memory comes from
    PlanConfig request;
    PlanFixed fixed;
    char model_name[64];
    char vocab_note[160];   // where the vocabulary size comes from
} PlanRequest;

// ---------------------------------------------------------------------------
// the environment

static int env_positive(const char* name) {
    const char* v = getenv(name);
    long x;
    return v && parse_long(v, &x) && x > 0 && x < 1000000 ? (int)x : 0;
}

void plan_mpi_world(int* world, int* local) {
    *world = env_positive("OMPI_COMM_WORLD_SIZE");
    if (!*world) *world = env_positive("PMI_SIZE");
    *local = env_positive("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!*local) *local = env_positive("MPI_LOCALNRANKS");
}

// The GPU of this process: its name, peaks and free memory.
static int real_gpu(PlanDevice* d, char* note, size_t note_len) {
    size_t free_bytes = 0, total_bytes = 0;
    char name[128] = "GPU";
    if (!cuda_device_memory || !cuda_device_memory(&free_bytes, &total_bytes, name, (int)sizeof name)) return 0;
    memset(d, 0, sizeof *d);
    d->is_gpu = 1;
    snprintf(d->name, sizeof d->name, "GPU");
    d->fp8_support = FP8_TN_ONLY;  // unless the name says otherwise: bill the transposed copies
    plan_device_set_peaks_from_name(d, name);
    d->memory = (double)free_bytes;
    snprintf(note, note_len, "free memory of this %s (cudaMemGetInfo; total %.2f GiB)", name,
             (double)total_bytes / GIB);
    return 1;
}

static PlanDevice cpu_device(const TrainConfig* cfg, char* note, size_t note_len) {
    int threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    snprintf(note, note_len, "available host memory (%s), %d threads", host_memory_source(), threads);
    return plan_device_cpu(host_memory_available(), threads);
}

// The device --plan plans for: --gpu, else --device cpu, else the GPU
// present, else a GPU of --gpu-mem GiB, else this machine's CPU backend.
static PlanDevice plan_target(const TrainConfig* cfg, char* note, size_t note_len) {
    PlanDevice d;
    if (cfg->gpu[0]) {
        if (!plan_device_gpu(&d, cfg->gpu))
            fatal("--gpu '%s' is not one of h100, h200, b200, a100 (or give --gpu-mem GiB)", cfg->gpu);
        snprintf(note, note_len, "%.0f MiB, the total nvidia-smi reports for the %s", d.memory / 1048576.0, d.name);
        return d;
    }
    if (cfg->device == DEVICE_CPU) return cpu_device(cfg, note, note_len);
    if (device_cuda_available() && real_gpu(&d, note, note_len)) return d;
    if (cfg->gpu_mem > 0) {
        memset(&d, 0, sizeof d);
        d.is_gpu = 1;
        d.fp8_support = FP8_TN_ONLY;
        snprintf(d.name, sizeof d.name, "GPU");
        return d;
    }
    return cpu_device(cfg, note, note_len);
}

// The device --auto plans for: the one backend_open will choose.
static PlanDevice auto_target(const TrainConfig* cfg, char* note, size_t note_len) {
    if (!device_wants_cuda(cfg->device)) return cpu_device(cfg, note, note_len);
    PlanDevice d;
    if (device_cuda_available() && real_gpu(&d, note, note_len)) return d;
    fatal("--auto: no CUDA GPU is visible to this process to plan for (use --device cpu)");
}

// ---------------------------------------------------------------------------
// flags -> request

// --precision fp32, bf16 or fp8 as the planner's Precision, if the device has it.
static Precision plan_precision(PrecisionChoice choice, const PlanDevice* dev) {
    Precision p = choice == PRECISION_FP8 ? PREC_FP8 : choice == PRECISION_BF16 ? PREC_BF16 : PREC_FP32;
    if (!dev->is_gpu && p == PREC_BF16)
        fatal("--precision %s: the CPU backend computes in fp32 (plan for a GPU with --gpu)", precision_name(p));
    if (p == PREC_FP8 && dev->peak_bf16 > 0 && dev->peak_fp8 == 0) fatal("--precision fp8: the %s has no FP8", dev->name);
    return p;
}

static void build_request(const TrainConfig* cfg, int for_auto, PlanRequest* rq) {
    memset(rq, 0, sizeof *rq);

    // The vocabulary: --vocab-size; else for --plan of a preset the
    // preset's own (the default --tokenizer is the bundled demo's, which
    // says nothing about a 7B run); else the tokenizer's when it is there.
    // No data files.
    const char* preset_vocab = NULL;
    int vocab = 0;
    if (config_is_set(cfg, "vocab-size")) {
        // (checked against the tokenizer's when there is one to check with)
        if (for_auto || config_is_set(cfg, "tokenizer")) vocab = tokenizer_vocab_if_present(cfg->tokenizer);
        snprintf(rq->vocab_note, sizeof rq->vocab_note, "--vocab-size");
    } else if (!for_auto && !config_is_set(cfg, "tokenizer") && preset_vocab_size(cfg->model, &preset_vocab)) {
        snprintf(rq->vocab_note, sizeof rq->vocab_note, "%s, the preset's; --vocab-size or --tokenizer to change",
                 preset_vocab);
    } else if ((vocab = tokenizer_vocab_if_present(cfg->tokenizer)) > 0) {
        snprintf(rq->vocab_note, sizeof rq->vocab_note, "from --tokenizer %s", cfg->tokenizer);
    } else if (!cfg->init_from[0]) {
        snprintf(rq->vocab_note, sizeof rq->vocab_note, "GPT-2's, without a tokenizer");
    } else {
        snprintf(rq->vocab_note, sizeof rq->vocab_note, "from --init-from");
    }
    PlanConfig* pc = &rq->request;
    pc->model = model_config_from_flags(cfg, vocab);
    if (cfg->model[0]) snprintf(rq->model_name, sizeof rq->model_name, "%s", cfg->model);
    else if (cfg->init_from[0]) snprintf(rq->model_name, sizeof rq->model_name, "from --init-from");
    else if (!cfg->layers && !cfg->channels && !cfg->heads) snprintf(rq->model_name, sizeof rq->model_name, "d%d", cfg->depth);
    else snprintf(rq->model_name, sizeof rq->model_name, "custom");

    rq->dev = for_auto ? auto_target(cfg, rq->memory_note, sizeof rq->memory_note)
                       : plan_target(cfg, rq->memory_note, sizeof rq->memory_note);
    if (cfg->gpu_mem > 0) {
        rq->dev.memory = cfg->gpu_mem * GIB;
        snprintf(rq->memory_note, sizeof rq->memory_note, "--gpu-mem %g", cfg->gpu_mem);
    }

    int mpi_world, mpi_local;
    plan_mpi_world(&mpi_world, &mpi_local);
    pc->world = cfg->world_size > 0 ? cfg->world_size : mpi_world ? mpi_world : 1;
    pc->ranks_per_node = cfg->ranks_per_node > 0 ? cfg->ranks_per_node : mpi_local ? mpi_local : 8;

    pc->T = cfg->seq_len;
    pc->B = cfg->micro_batch;
    // --precision auto (the default) is the planner's own choice.
    int precision_given = config_is_set(cfg, "precision") && cfg->precision != PRECISION_AUTO;
    pc->precision = precision_given ? plan_precision(cfg->precision, &rq->dev)
                                    : plan_default_precision(&pc->model, &rq->dev);
    pc->fp8_history = (Fp8Recipe)cfg->fp8_recipe == FP8_DELAYED ? cfg->fp8_amax_history : 0;
    // auto plans per-tensor scaling: what this build's CUDA backend runs (fp8_resolve_recipe).
    pc->fp8_recipe = fp8_recipe_is_block((Fp8Recipe)cfg->fp8_recipe) ? cfg->fp8_recipe : FP8_CURRENT;
    pc->fp8_skip = fp8_parse_skip(cfg->fp8_skip, pc->model.num_layers);  // lives as long as the process
    pc->recompute = recompute_policy_from_flags(cfg->recompute, cfg->recompute_layers, pc->model.num_layers);
    pc->head_chunks = cfg->head_chunks;
    pc->adam_dtype = cfg->adam_dtype == ADAM_DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32;
    pc->zero_stage = cfg->zero_stage;
    pc->zero3_prefetch = cfg->zero3_prefetch;
    pc->grad_bf16 = cfg->grad_dtype == GRAD_DTYPE_BF16 ? 2 : 0;
    pc->hybrid = cfg->shard_scope == SHARD_SCOPE_NODE;
    pc->shard_group = cfg->shard_group;
    if (pc->shard_group > 0) {
        char why[128];
        if (comm_shard_group_invalid(pc->shard_group, pc->world, pc->ranks_per_node < pc->world ? pc->ranks_per_node : pc->world,
                                     why, sizeof why))
            fatal("--shard-group %s", why);
    }

    rq->fixed.precision = precision_given;
    rq->fixed.micro_batch = config_is_set(cfg, "micro-batch");
    rq->fixed.recompute = config_is_set(cfg, "recompute") || config_is_set(cfg, "recompute-layers");
    rq->fixed.zero_stage = config_is_set(cfg, "zero");
    rq->fixed.grad_dtype = config_is_set(cfg, "grad-dtype") && cfg->grad_dtype != GRAD_DTYPE_AUTO;
    rq->fixed.hybrid = config_is_set(cfg, "shard-scope") || cfg->shard_group > 0;
    (void)plan_links_of(&rq->dev);  // a bad TRAIN_GPT_PLAN_*_GBS fails here, before any output
    if (config_is_set(cfg, "batch-tokens") && cfg->batch_tokens > 0) {
        long unit = (long)pc->T * pc->world * (rq->fixed.micro_batch ? pc->B : 1);
        if (cfg->batch_tokens % unit != 0)
            fatal("--batch-tokens %ld is not a multiple of %sseq-len x ranks = %ld", cfg->batch_tokens,
                  rq->fixed.micro_batch ? "micro-batch x " : "", unit);
        rq->fixed.batch_tokens = cfg->batch_tokens;
    }
}

// ---------------------------------------------------------------------------
// printing

static double unit_bytes(const PlanDevice* dev) { return dev->memory >= 4 * GIB ? GIB : 1048576.0; }
static const char* unit_name(const PlanDevice* dev) { return dev->memory >= 4 * GIB ? "GiB" : "MiB"; }

static const char* describe_policy(const PlanConfig* pc, char* buf, size_t n) {
    return recompute_policy_describe(&pc->recompute, pc->model.num_layers, buf, n);
}

static void line(FILE* f, const char* what, const char* how, double bytes, double unit) {
    fprintf(f, "  %-17s %-54s %10.3f\n", what, how, bytes / unit);
}

void plan_print_bill(FILE* f, const PlanConfig* pc, const MemoryBill* b, const PlanDevice* dev) {
    double u = unit_bytes(dev);
    int sw = plan_shard_world(pc), z = pc->zero_stage;
    int fp32 = pc->precision == PREC_FP32 || (pc->precision == PREC_FP8 && !dev->is_gpu);
    const char* es = fp32 ? "fp32" : "bf16";
    char how[128], shard[48];
    snprintf(shard, sizeof shard, "1/%d shard%s", sw,
             pc->shard_group > 0 && sw < pc->world ? " (in the group)" : pc->hybrid ? " (in the node)" : "");
    fprintf(f, "memory per %s, %s (%s):\n", dev->is_gpu ? "GPU" : "process", unit_name(dev),
            u == GIB ? "2^30 bytes" : "2^20 bytes");
    if (z == 3) snprintf(how, sizeof how, "%s, shard + embeddings, final unit, %d layers", es, plan_param_layer_slots(pc));
    else snprintf(how, sizeof how, "%s, replicated", es);
    line(f, "parameters", how, (double)b->state.params, u);
    // 16-bit runs accumulate in FP32 behind a scratch of one micro-step's units unless --grad-dtype bf16.
    int grad_scratch = !fp32 && pc->grad_bf16 == 0;
    snprintf(how, sizeof how, "%s, %s%s", grad_scratch ? "fp32" : es,
             z >= 2 ? "shard + embeddings, final unit, 2 layers" : "replicated",
             grad_scratch ? ", + bf16 scratch of those units" : "");
    line(f, "gradients", how, (double)b->state.grads, u);
    if (fp32) snprintf(how, sizeof how, "none: the fp32 parameters are the master");
    else snprintf(how, sizeof how, "fp32, %s", z == 0 ? "replicated" : shard);
    line(f, "master weights", how, (double)b->state.master, u);
    snprintf(how, sizeof how, "%s m and v, %s", dtype_name(pc->adam_dtype), z == 0 ? "replicated" : shard);
    line(f, "AdamW moments", how, (double)b->state.adam, u);
    if (pc->precision == PREC_FP8) {
        int tn = dev->is_gpu && dev->fp8_support == FP8_TN_ONLY;
        snprintf(how, sizeof how, "%s of 4 GEMMs x %s", tn ? "copy + transpose" : "copy",
                 z == 3 ? "2 layers in flight" : "every layer");
        if (fp8_recipe_is_block((Fp8Recipe)pc->fp8_recipe))
            snprintf(how, sizeof how, "none: %s's GEMMs quantise their operands", fp8_recipe_name((Fp8Recipe)pc->fp8_recipe));
        if (pc->fp8_recipe == FP8_NVFP4 && dev->is_gpu)
            snprintf(how, sizeof how, "E2M1 W and W^T + E4M3 scales per 16 x %s", z == 3 ? "2 layers in flight" : "every layer");
        line(f, "fp8 weights", how, (double)b->fp8_weights, u);
        if (fp8_recipe_is_block((Fp8Recipe)pc->fp8_recipe))
            snprintf(how, sizeof how, "block scales: in the GEMMs' scratch");
        else if (pc->fp8_history) snprintf(how, sizeof how, "12 per layer: scales, amax histories (%d)", pc->fp8_history);
        else snprintf(how, sizeof how, "12 per layer: scales, amaxes (current scaling)");
        line(f, "fp8 scaling", how, (double)b->fp8_scaling, u);
    }
    // The arena, by role.
    const ActLayout* al = &b->acts;
    double kept = 0, working = 0, scratch = 0, logits = (double)act_kind_bytes(al, A_LOGITS);
    for (int k = 0; k < NUM_ACT_KINDS; k++) {
        if (!act_kind_is_per_layer((ActKind)k) || al->slices[k] == 0) continue;
        double per_slice = (double)(al->count[k] / (size_t)al->slices[k]) * (double)dtype_size(al->dtype[k]);
        kept += per_slice * al->stored[k];
        working += per_slice * (al->slices[k] - al->stored[k]);
    }
    ActKind scratch_kinds[] = {A_DRESIDUAL, A_SCRATCH_BTC, A_SCRATCH_BT4C, A_PROJ_OUT};
    for (int i = 0; i < 4; i++) scratch += (double)act_kind_bytes(al, scratch_kinds[i]);
    char pol[96];
    snprintf(how, sizeof how, "arena, B x T = %d x %d, recompute %s", pc->B, pc->T,
             pc->recompute.mode == RECOMPUTE_FULL || pc->recompute.full_layers == 0
                 ? describe_policy(pc, pol, sizeof pol)
                 : "mixed");
    line(f, "activations", how, (double)b->activations, u);
    snprintf(how, sizeof how, "kept for backward by the %d layers", pc->model.num_layers);
    line(f, "  layers", how, kept, u);
    if (working > 0) line(f, "  working set", "one fully recomputed layer at a time", working, u);
    line(f, "  backward scratch", "(B,T,C) x 3 and (B,T,4C), shared by the layers", scratch, u);
    int hc = (int)ceil_div((size_t)pc->B * pc->T, (size_t)al->head_rows);
    snprintf(how, sizeof how, "(%d,%d): 1 of %d head chunk%s, then its gradient", al->head_rows,
             pc->model.padded_vocab_size, hc, hc == 1 ? "" : "s");
    line(f, "  logits", how, logits, u);
    line(f, "  other", "embeddings output, final norm, losses, alignment",
         (double)al->bytes - kept - working - scratch - logits, u);
    if (pc->precision == PREC_FP8)
        line(f, "  fp8 casts",
             pc->fp8_recipe == FP8_NVFP4 && dev->is_gpu ? "one GEMM's 4 operands in nvfp4 (X, X^T, dY, dY^T)"
                                                        : "one GEMM's operands in fp8 (kept inputs stay 16-bit)",
             (double)b->activations - (double)al->bytes, u);
    line(f, "tokens", pc->model.arch == ARCH_LLAMA ? "inputs, targets (int32), scalars, RoPE table"
                                                    : "inputs, targets (int32), scalars",
         (double)b->tokens, u);
    if (dev->is_gpu) line(f, "workspace", "cuBLASLt + op scratch (cuDNN attention's, norms' partials)", (double)b->workspace, u);
    else {
        snprintf(how, sizeof how, "attention scratch, %d threads%s", dev->cpu_threads,
                 pc->precision == PREC_FP8 ? ", or an FP8 GEMM's decoded operands" : "");
        line(f, "workspace", how, (double)b->workspace, u);
    }
    line(f, "= allocated", "the backend's peak", (double)b->allocated, u);
    if (dev->is_gpu) line(f, "reserve", "1 GiB CUDA context/NCCL + 5% fragmentation", (double)b->reserve, u);
    fprintf(f, "  %-17s %-54s %10.3f of %.3f (%.0f%%)\n", "= total", "", (double)b->total / u, dev->memory / u,
            100.0 * (double)b->total / dev->memory);
    if (dev->is_gpu) {
        snprintf(how, sizeof how, "left unplanned: plans use at most %d%% of memory", 100 - PLAN_GPU_HEADROOM_PERCENT);
        line(f, "headroom", how, dev->memory - plan_usable_memory(dev), u);
    }
}

static void print_header(FILE* f, const PlanRequest* rq) {
    const PlanConfig* pc = &rq->request;
    const GPTConfig* c = &pc->model;
    double n = (double)gpt_num_params(c);
    fprintf(f, "plan      | model %s: %.3g%s parameters | %d layers, %d channels, %d heads | vocab %d (%s; padded %d) | max seq %d\n",
            rq->model_name, n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "B" : "M", c->num_layers, c->channels, c->num_heads, c->vocab_size,
            rq->vocab_note, c->padded_vocab_size, c->max_seq_len);
    if (c->arch == ARCH_LLAMA)
        fprintf(f, "plan      | llama: %d kv heads (K and V %d of the %d qkv channels) | MLP %d (SwiGLU) | LM head %s\n",
                c->num_kv_heads, 2 * c->num_kv_heads * gpt_head_size(c), gpt_qkv_width(c), c->mlp_hidden,
                c->tie_embeddings ? "tied" : "untied");
    const PlanDevice* d = &rq->dev;
    double u = unit_bytes(d);
    fprintf(f, "plan      | device %d x %s, %d per node | %.2f %s each (%s)", pc->world, d->name,
            pc->ranks_per_node < pc->world ? pc->ranks_per_node : pc->world,
            d->memory / u, unit_name(d), rq->memory_note);
    if (d->peak_bf16 > 0) {
        fprintf(f, " | dense peak %.0f TFLOP/s bf16", d->peak_bf16 / 1e12);
        if (d->peak_fp8 > 0) fprintf(f, ", %.0f fp8", d->peak_fp8 / 1e12);
    }
    fprintf(f, "\n");
}

static void print_choice(FILE* f, const char* prefix, const PlanResult* r, const PlanRequest* rq) {
    const PlanConfig* pc = &r->config;
    char pol[96];
    double u = unit_bytes(&rq->dev);
    fprintf(f, "%s %s | ZeRO-%d%s | recompute %s | micro-batch %d x seq %d | %.2f of %.2f %s per %s (%.0f%%)\n", prefix,
            precision_name(pc->precision), pc->zero_stage,
            pc->shard_group > 0 && plan_shard_world(pc) < pc->world ? " inside groups of ranks (--shard-group)"
            : pc->hybrid && plan_shard_world(pc) < pc->world        ? " inside each node (hybrid)"
            : pc->zero_stage && pc->world > 1                        ? " over all ranks"
                                                                     : "",
            describe_policy(pc, pol, sizeof pol), pc->B, pc->T, (double)r->bill.total / u, rq->dev.memory / u,
            unit_name(&rq->dev), rq->dev.is_gpu ? "GPU" : "process", 100.0 * (double)r->bill.total / rq->dev.memory);
}

static void print_speed(FILE* f, const PlanResult* r, const PlanDevice* d) {
    const PlanSpeed* s = &r->speed;
    const PlanConfig* pc = &r->config;
    if (s->peak <= 0) {
        fprintf(f, "throughput | no estimate: %s\n",
                d->is_gpu ? "the peak FLOP/s of this GPU is not known (--gpu names one)" : "the CPU backend is a reference, not a target");
        return;
    }
    fprintf(f,
            "throughput | estimate: 6N + 12*L*h*s = %.1f GFLOP/token; assumed: %.0f%% of the %.0f TFLOP/s %s dense peak "
            "does model + recompute FLOPs -> %.0f tok/s per GPU, %.0f tok/s on %d; 1B tokens: %.2f h, %.1f GPU-hours\n",
            s->model_flops / 1e9, PLAN_ASSUMED_MFU * 100, s->peak / 1e12, precision_name(pc->precision),
            s->tokens_per_s_gpu, s->tokens_per_s, pc->world, s->hours_per_billion, s->gpu_hours_per_billion);
    if (s->recompute_flops > 0)
        fprintf(f, "throughput | full recompute adds %.1f GFLOP/token (%.0f%%): the model FLOPs utilization is %.0f%%\n",
                s->recompute_flops / 1e9, 100.0 * s->recompute_flops / s->model_flops,
                100.0 * PLAN_ASSUMED_MFU * s->model_flops / (s->model_flops + s->recompute_flops));
}

// The step-time model (llm/plan/cost.h): compute by precision, the
// memory-bound kernels' bytes op by op (issue 28's byte count per step), the
// collectives per kind and link, and what the schedule leaves exposed.
static void print_cost(FILE* f, const PlanResult* r, const PlanRequest* rq, const PlanCost* cost) {
    const PlanConfig* pc = &r->config;
    const PlanCost k = *cost;
    if (k.step <= 0) {
        fprintf(f, "step time  | no estimate: %s\n",
                rq->dev.is_gpu ? "this GPU's peaks and bandwidths are not known (--gpu names one)"
                               : "the CPU backend is a reference, not a target");
        return;
    }
    double ms = 1e3;
    fprintf(f, "step time  | estimate (llm/plan/README.md, \"The step-time model\"): %d micro-step%s of %d x %d per step%s; "
               "HBM %.0f GB/s, NVLink %.0f GB/s, network %.1f GB/s per GPU\n",
            k.accum, k.accum == 1 ? "" : "s", pc->B, pc->T, rq->fixed.batch_tokens > 0 ? "" : " (--batch-tokens sets more)",
            k.links.hbm / 1e9, k.links.nvlink / 1e9, k.links.network / 1e9);
    fprintf(f, "step time  | per micro-step: GEMMs %.2f ms (%.1f TFLOP bf16 at %.0f%% of peak + %.1f TFLOP fp8 at %.0f%%), "
               "attention %.2f ms (%.1f TFLOP causal, bf16 at %.0f%%), memory-bound %.2f ms\n",
            k.t_gemm * ms, k.gemm_flops_bf16 / 1e12, PLAN_GEMM_EFF * 100, k.gemm_flops_fp8 / 1e12, PLAN_GEMM_EFF_FP8 * 100, k.t_attn * ms,
            k.attn_flops / 1e12, PLAN_ATTN_EFF * 100, (k.t_micro - k.t_gemm - k.t_attn) * ms);
    fprintf(f, "memory-bound bytes per step (op, GB, ms at %.0f%% of HBM):\n", PLAN_HBM_EFF * 100);
    plan_cost_print_bytes(f, &k);
    fprintf(f, "communication per step and GPU (collective, link, GB sent, busy ms at %.0f%% of the link):\n",
            PLAN_LINK_EFF * 100);
    int any = 0;
    for (int c = 0; c < NUM_COLL; c++)
        for (int l = 0; l < NUM_LINKS; l++) {
            if (k.comm_bytes[c][l] <= 0) continue;
            any = 1;
            fprintf(f, "  %-15s %-8s %12.3f %10.3f\n", coll_name((CollKind)c), link_name((LinkKind)l),
                    k.comm_bytes[c][l] / 1e9, k.comm_time[c][l] * ms);
        }
    if (!any) fprintf(f, "  none: one rank\n");
    fprintf(f, "step time  | %.1f ms = %d x %.2f ms compute + %.2f ms optimizer + %.2f ms exposed communication -> "
               "%.0f tok/s per GPU, %.0f model TFLOP/s per GPU (%.0f%% MFU)\n",
            k.step * ms, k.accum, k.t_micro * ms, k.t_optimizer * ms, k.exposed * ms, k.tokens_per_s_gpu,
            k.tokens_per_s_gpu * flops_per_token(&pc->model, pc->T) / 1e12, k.mfu * 100);
}

// Largest micro-batch per policy at the recommendation's other settings.
static void print_alternatives(FILE* f, const PlanResult* r, const PlanRequest* rq) {
    PlanConfig pc = r->config;
    int L = pc.model.num_layers;
    RecomputePolicy ps[3] = {recompute_policy(RECOMPUTE_NONE, 0, L), recompute_policy(RECOMPUTE_SELECTIVE, 0, L),
                             recompute_policy(RECOMPUTE_FULL, 0, L)};
    fprintf(f, "largest micro-batch at %s, ZeRO-%d, recompute:", precision_name(pc.precision), pc.zero_stage);
    for (int i = 0; i < 3; i++) {
        pc.recompute = ps[i];
        int b = plan_max_micro_batch(&pc, &rq->fixed, &rq->dev);
        if (b > 0) fprintf(f, " %s %d", recompute_mode_name(ps[i].mode), b);
        else fprintf(f, " %s -", recompute_mode_name(ps[i].mode));
        fprintf(f, "%s", i < 2 ? " |" : "\n");
    }
}

static void print_summary(FILE* f, const PlanResult* r, const PlanRequest* rq, const PlanCost* cost) {
    const PlanConfig* pc = &r->config;
    const PlanCost k = *cost;
    fprintf(f,
            "summary   | fits=%d model=%s params=%.4g seq=%d device=%s world=%d precision=%s zero=%d hybrid=%d "
            "recompute=%s full_layers=%d micro_batch=%d planned_gib=%.2f memory_gib=%.2f tok_s_gpu=%.0f "
            "hours_per_btok=%.3f gpu_hours_per_btok=%.2f step_ms=%.1f est_tok_s_gpu=%.0f exposed_ms=%.2f fits_with_world=%d fits_with_seq=%d shard_ranks=%d\n",
            r->fits, rq->model_name, (double)gpt_num_params(&pc->model), pc->T, rq->dev.name, pc->world,
            precision_name(pc->precision), pc->zero_stage, pc->hybrid, recompute_mode_name(pc->recompute.mode),
            pc->recompute.full_layers, pc->B, (double)r->bill.total / GIB, rq->dev.memory / GIB, r->speed.tokens_per_s_gpu,
            r->speed.hours_per_billion, r->speed.gpu_hours_per_billion, k.step * 1e3, k.tokens_per_s_gpu, k.exposed * 1e3, r->fits_with_world, r->fits_with_seq_len,
            plan_shard_world(pc));
}

static int any_fixed(const PlanFixed* fx) {
    return fx->precision || fx->micro_batch || fx->recompute || fx->zero_stage || fx->batch_tokens;
}

static void print_nothing_fits(FILE* f, const PlanResult* r, const PlanRequest* rq) {
    const PlanConfig* pc = &r->config;
    char pol[96];
    double u = unit_bytes(&rq->dev);
    fprintf(f, "plan      | nothing fits: the least memory%s is %s, ZeRO-%d, recompute %s, micro-batch %d: %.2f %s per %s; %.2f available\n",
            any_fixed(&rq->fixed) ? " the explicit flags allow" : "", precision_name(pc->precision), pc->zero_stage,
            describe_policy(pc, pol, sizeof pol), pc->B,
            (double)r->bill.total / u, unit_name(&rq->dev), rq->dev.is_gpu ? "GPU" : "process", rq->dev.memory / u);
    fprintf(f, "what would fit:\n");
    int any = 0;
    if (r->fits_with_world) {
        fprintf(f, "  - %d ranks (%d nodes of %d) with ZeRO-3, full recompute, micro-batch 1\n", r->fits_with_world,
                (r->fits_with_world + pc->ranks_per_node - 1) / pc->ranks_per_node, pc->ranks_per_node);
        any = 1;
    } else {
        fprintf(f, "  - more ranks do not help: what stays per rank (activations, layers in flight) does not fit\n");
    }
    if (r->fits_with_seq_len) {
        fprintf(f, "  - --seq-len %d on %d ranks (full recompute, micro-batch 1)\n", r->fits_with_seq_len, pc->world);
        any = 1;
    }
    if (r->fits_with_context_parallel) {
        fprintf(f, "  - --context-parallel %d on %d ranks: each sequence split over %d ranks (full recompute, "
                "micro-batch 1; the CPU backend only for now)\n",
                r->fits_with_context_parallel, pc->world, r->fits_with_context_parallel);
        any = 1;
    }
    if (r->fits_when_unfixed) {
        const PlanConfig* q = &r->unfixed;
        fprintf(f, "  - without the explicit choices: %s, ZeRO-%d, recompute %s, micro-batch %d\n",
                precision_name(q->precision), q->zero_stage, describe_policy(q, pol, sizeof pol), q->B);
        any = 1;
    }
    if (!any) fprintf(f, "  - a smaller model, or a device with more memory\n");
}

int plan_command(const TrainConfig* cfg) {
    PlanRequest rq;
    build_request(cfg, 0, &rq);
    PlanResult r = plan_recommend(&rq.request, &rq.fixed, &rq.dev);
    FILE* f = stdout;
    print_header(f, &rq);
    if (!rq.dev.is_gpu)
        fprintf(f, "plan      | no GPU here: planning for the CPU backend (--gpu h100|h200|b200|a100 plans for a GPU)\n");
    if (r.fits) print_choice(f, "plan      | recommended:", &r, &rq);
    else print_nothing_fits(f, &r, &rq);
    plan_print_bill(f, &r.config, &r.bill, &rq.dev);
    if (r.fits) print_alternatives(f, &r, &rq);
    print_speed(f, &r, &rq.dev);
    // The step-time estimate of the recommendation, printed in full and in the summary.
    PlanCost cost = plan_cost(&r.config, &rq.dev, plan_accum(&r.config, rq.fixed.batch_tokens));
    print_cost(f, &r, &rq, &cost);
    print_summary(f, &r, &rq, &cost);
    fflush(f);
    return r.fits ? 0 : PLAN_EXIT_NOTHING_FITS;
}

void plan_auto(TrainConfig* cfg) {
    PlanRequest rq;
    build_request(cfg, 1, &rq);
    PlanResult r = plan_recommend(&rq.request, &rq.fixed, &rq.dev);
    if (!r.fits) {
        print_header(stdout, &rq);
        print_nothing_fits(stdout, &r, &rq);
        plan_print_bill(stdout, &r.config, &r.bill, &rq.dev);
        fatal("--auto: no configuration fits in %.3g GiB per device (the plan above says what would)", rq.dev.memory / GIB);
    }
    const PlanConfig* pc = &r.config;
    cfg->micro_batch = pc->B;
    cfg->zero_stage = pc->zero_stage;
    if (pc->hybrid) cfg->shard_scope = SHARD_SCOPE_NODE;
    if (pc->shard_group > 0) cfg->shard_group = pc->shard_group;
    cfg->recompute_layers = pc->recompute.mode == RECOMPUTE_FULL ? 0 : pc->recompute.full_layers;
    cfg->recompute = pc->recompute.mode;
    cfg->precision = pc->precision == PREC_FP8 ? PRECISION_FP8 : pc->precision == PREC_BF16 ? PRECISION_BF16 : PRECISION_FP32;
    // FP32 gradients fit no plan: bf16 ones (--grad-dtype auto).
    if (pc->grad_bf16 == 1 && pc->precision != PREC_FP32) cfg->grad_dtype = GRAD_DTYPE_BF16;
    print_choice(stdout, "auto      | planned:", &r, &rq);
    fflush(stdout);
}
