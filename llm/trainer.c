// trainer.c: run setup, the optimizer step, validation and sampling.
#include "llm/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_seam.h"
#include "llm/arch/arch.h"
#include "llm/platform/efa.h"
#include "llm/checkpoint/llmc_io.h"
#include "llm/hf/hf.h"
#include "llm/checkpoint/signals.h"
#include "llm/plan/planner.h"
#include "llm/presets.h"
#include "llm/platform/launcher.h"
#include "llm/util/host_mem.h"
#include "llm/util/rng.h"

// ---------------------------------------------------------------------------
// setup

// (--seq-len, --micro-batch and --steps are range-checked by the flag table.)
static void setup_batch_geometry(Trainer* tr, const TrainConfig* cfg) {
    tr->B = cfg->micro_batch;
    tr->T = cfg->seq_len;
    long per_micro = (long)tr->B * tr->T * tr->dp_world;
    long total = cfg->batch_tokens ? cfg->batch_tokens : per_micro;
    if (total <= 0) fatal("--batch-tokens must be positive (got %ld)", total);
    if (total % per_micro != 0 && tr->cp > 1)
        fatal("--batch-tokens %ld is not a multiple of micro-batch x seq-len x data-parallel ranks (ranks / "
              "--context-parallel) = %d x %d x %d = %ld",
              total, tr->B, tr->T, tr->dp_world, per_micro);
    if (total % per_micro != 0)
        fatal("--batch-tokens %ld is not a multiple of micro-batch x seq-len x ranks = %d x %d x %d = %ld",
              total, tr->B, tr->T, tr->world, per_micro);
    if (total / per_micro > INT32_MAX)
        fatal("--batch-tokens %ld is %ld micro-batches of %ld tokens, more than 2^31 - 1", total, total / per_micro,
              per_micro);
    tr->accum = (int)(total / per_micro);
    tr->tokens_per_step = total;
}

// --context-parallel N: groups of N consecutive ranks split every sequence
// (llm/model/context.c); the data-parallel ranks are the groups. Checked
// before anything is allocated; the model is told after its creation.
static void setup_context_parallel(Trainer* tr, const TrainConfig* cfg) {
    Comm* c = tr->comm;
    int n = cfg->context_parallel > 0 ? cfg->context_parallel : 1;
    tr->cp = n;
    tr->dp_world = c->world / n;
    tr->dp_rank = c->rank / n;
    tr->T_model = cfg->seq_len;
    if (n == 1) return;
    if (cfg->eval_data[0])
        fatal("--eval-data needs whole sequences on a rank: it does not run with --context-parallel %d", n);
    if (cfg->generate) fatal("--generate needs whole sequences on a rank: it does not run with --context-parallel %d", n);
    if (cfg->sample_every > 0 && config_is_set(cfg, "sample-every"))
        fatal("--sample-every %d: samples need whole sequences on a rank; with --context-parallel %d pass "
              "--sample-every 0",
              cfg->sample_every, n);
    if (cfg->llmc_compat)
        fatal("--llmc-compat reproduces llm.c's data order over whole sequences; it does not run with "
              "--context-parallel %d",
              n);
    if (c->world % n != 0)
        fatal("--context-parallel %d does not divide the %d ranks (the world is data-parallel groups of %d ranks)", n,
              c->world, n);
    if (strcmp(tr->be->name, "cpu") != 0)
        fatal("--context-parallel %d: the %s backend runs only --context-parallel 1 for now (its NCCL path is a later "
              "piece of work); use --device cpu",
              n, tr->be->name);
    // Pad the sequence at its end to a multiple of 2N chunks.
    int Tp = (int)round_up((size_t)cfg->seq_len, (size_t)(2 * n));
    tr->T_model = Tp / n;
    comm_set_context_parallel(c, n);
}

// The all-gather and reduce-scatter of keys and values over COMM_CP.
static void cp_all_gather(void* ctx, void* buf, size_t chunk) {
    Trainer* tr = (Trainer*)ctx;
    comm_all_gather(tr->comm, COMM_CP, NULL, buf, chunk, tr->model.dtype);
}
static void cp_reduce_scatter(void* ctx, void* buf, size_t chunk) {
    Trainer* tr = (Trainer*)ctx;
    comm_reduce_scatter(tr->comm, COMM_CP, buf, chunk, tr->model.dtype, NULL);
}

// --zero, --shard-scope and --shard-group: the rank groups the model is sharded over.
static void setup_sharding(Trainer* tr, const TrainConfig* cfg) {
    Comm* c = tr->comm;
    int n = cfg->shard_group;
    if (n > 0 && config_is_set(cfg, "shard-scope")) {
        int scope_n = cfg->shard_scope == SHARD_SCOPE_NODE ? c->node_size : c->world;
        if (n != scope_n)
            fatal("--shard-group %d and --shard-scope %s (%d ranks) disagree: pass one of them", n,
                  cfg->shard_scope == SHARD_SCOPE_NODE ? "node" : "world", scope_n);
    }
    if (n > 0 && n != c->world && cfg->zero_stage == 0)
        fatal("--shard-group %d needs --zero 1, 2 or 3 (ZeRO-0 shards nothing)", n);
    if (n > 0) comm_set_shard_group(c, n);
    else comm_set_shard_scope(c, cfg->shard_scope == SHARD_SCOPE_NODE);
    // NCCL starts here: on EFA instances it must not settle for its sockets.
    EfaCheck efa;
    efa_check_begin(&efa, c->num_nodes, cfg->allow_nccl_sockets || strcmp(tr->be->name, "cpu") == 0);
    comm_attach_backend(c, tr->be);
    efa_check_end(&efa);
}

// A multiple of 16 near x, for error messages.
static int multiple_of_16(int x) { return x < 16 ? 16 : x / 16 * 16; }

// --fp8-recipe, auto resolved for this device and printed; fatal, naming the
// GPU, for a recipe it cannot run.
static Fp8Recipe choose_fp8_recipe(Trainer* tr, const TrainConfig* cfg) {
    Fp8Device d = {0};
    char name[128] = "a GPU";
    d.gpu = strcmp(tr->be->name, "cpu") != 0;
    if (d.gpu && cuda_current_compute_capability) cuda_current_compute_capability(&d.major, &d.minor);
    if (d.gpu && cuda_current_device_name) cuda_current_device_name(name, (int)sizeof name);
    d.name = name;
    d.block_gemms = tr->be->fp8_block_matmul != NULL;
    d.nvfp4_gemms = tr->be->nvfp4_matmul != NULL;
    char why[512];
    Fp8Recipe r = fp8_resolve_recipe((Fp8Recipe)cfg->fp8_recipe, &d, why, sizeof why);
    if (!fp8_recipe_runs(r, &d, why, sizeof why)) fatal("%s", why);
    if (tr->rank == 0) printf("fp8       | recipe %s (%s)\n", fp8_recipe_name(r), why);
    return r;
}

// --precision fp8: the FP8 state (llm/fp8/fp8.h), after checking that the GPU has
// FP8 and that every FP8 GEMM's dimensions are multiples of 16.
static void setup_fp8(Trainer* tr, const TrainConfig* cfg) {
    GPT* m = &tr->model;
    if (tr->be->fp8_support == FP8_NONE) {
        int major = 0, minor = 0;
        if (cuda_current_compute_capability) cuda_current_compute_capability(&major, &minor);
        fatal("--precision fp8: this GPU (compute capability %d.%d) has no FP8 tensor cores; they need 8.9 or newer "
              "(Ada, Hopper, Blackwell): use --precision bf16",
              major, minor);
    }
    Fp8Options o;
    o.recipe = choose_fp8_recipe(tr, cfg);
    o.history = cfg->fp8_amax_history;
    o.margin = cfg->fp8_margin;
    int L = m->config.num_layers, C = m->config.channels, all_skipped = 1;
    uint8_t* skip = fp8_parse_skip(cfg->fp8_skip, L);
    for (int l = 0; l < L; l++) all_skipped &= skip[l] == (1 << FP8_NUM_GEMMS) - 1;
    // Every FP8 GEMM dimension is C, 3C or 4C, or the tokens of a pass (a
    // number of sequences times T).
    if (!all_skipped && C % 16 != 0)
        fatal("--precision fp8: the model's %d channels are not a multiple of 16, which FP8 GEMMs need (e.g. "
              "--channels %d), or keep every GEMM in bf16 with --fp8-skip 0-%d",
              C, multiple_of_16(C), L - 1);
    // Llama's GEMMs are also (NH + 2 NKV) HS wide (q, k, v) and H, 2H (the MLP).
    const GPTConfig* mc = &m->config;
    if (!all_skipped && mc->arch == ARCH_LLAMA && (gpt_qkv_width(mc) % 16 != 0 || mc->mlp_hidden % 16 != 0))
        fatal("--precision fp8: the q/k/v width %d ((heads + 2 kv heads) x head size) and --mlp-hidden %d must be "
              "multiples of 16, which FP8 GEMMs need, or keep every GEMM in bf16 with --fp8-skip 0-%d",
              gpt_qkv_width(mc), mc->mlp_hidden, L - 1);
    if (!all_skipped && tr->T % 16 != 0)
        fatal("--precision fp8: --seq-len %d is not a multiple of 16, which FP8 GEMMs need (tokens per pass are "
              "sequences x seq-len): use e.g. --seq-len %d",
              tr->T, multiple_of_16(tr->T));
    o.skip = skip;
    int kept = fp8_recipe_skip(o.recipe, NULL, L);
    if (o.recipe == FP8_NVFP4 && tr->rank == 0) {
        if (kept) printf("fp8       | nvfp4 keeps the last %d of %d layers (%d-%d) in %s: 15%% of the layers, the final "
                         "ones, as NVIDIA's NVFP4 recipe\n", kept, L, L - kept, L - 1, dtype_name(tr->be->dtype));
        else printf("fp8       | nvfp4 keeps no layer in %s: 15%% of %d layers rounds to 0\n", dtype_name(tr->be->dtype), L);
    }
    gpt_enable_fp8(m, &tr->fp8, &o);
    tr->fp8.sr_seed = (uint64_t)cfg->seed;  // nvfp4's stochastic rounding
    free(skip);
}

// On the CPU backend the model's whole state (parameters, gradients, master
// weights, moments, activations) is host memory. Its size comes from flags
// or a file (--vocab-size, --layers, --channels, an --init-from folder's
// config.json), so the planner's bill for it (the functions the allocator
// uses) is checked against the host's available memory before anything is
// allocated, for every rank on this node: a shape that cannot fit fails in
// one line naming where it came from, not after growing to the kernel's limit.
static void check_host_memory(const Trainer* tr, const TrainConfig* cfg, const GPTConfig* mc,
                              const RecomputePolicy* recompute, int head_chunks, int shard_world) {
    PlanConfig pc;
    memset(&pc, 0, sizeof pc);
    pc.model = *mc;
    pc.precision = tr->be->dtype == DTYPE_F32 ? PREC_FP32 : PREC_BF16;
    pc.B = tr->B;
    pc.T = tr->T_model;
    pc.context_parallel = tr->cp;
    pc.recompute = *recompute;
    pc.head_chunks = head_chunks;
    pc.zero_stage = cfg->zero_stage;
    pc.zero3_prefetch = cfg->zero3_prefetch;
    pc.adam_dtype = cfg->adam_dtype == ADAM_DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32;
    pc.world = shard_world;
    pc.ranks_per_node = shard_world;
    PlanDevice dev = plan_device_of_backend(tr->be);
    MemoryBill bill = plan_bill(&pc, &dev);
    LauncherInfo li = launcher_info();
    int local = li.local_world > 1 ? li.local_world : 1;
    int llama = mc->arch == ARCH_LLAMA;
    char what[768];
    int n;
    if (cfg->init_from[0] && hf_is_folder(cfg->init_from))
        n = snprintf(what, sizeof what, "--init-from %s/config.json's model (\"%s\" %d, \"%s\" %d, \"%s\" %d, \"vocab_size\" %d)",
                     cfg->init_from, llama ? "hidden_size" : "n_embd", mc->channels,
                     llama ? "intermediate_size" : "n_head", llama ? mc->mlp_hidden : mc->num_heads,
                     llama ? "num_hidden_layers" : "n_layer", mc->num_layers, mc->vocab_size);
    else if (cfg->init_from[0])
        n = snprintf(what, sizeof what, "--init-from %s's model (its header: %d layers, %d channels, vocabulary %d)",
                     cfg->init_from, mc->num_layers, mc->channels, mc->vocab_size);
    else
        n = snprintf(what, sizeof what, "the model of --layers %d --channels %d --vocab-size %d", mc->num_layers,
                     mc->channels, mc->vocab_size);
    if (n < 0 || n >= (int)sizeof what) n = (int)strlen(what);
    snprintf(what + n, sizeof what - (size_t)n, " at --micro-batch %d --seq-len %d%s", tr->B, tr->T,
             local > 1 ? " (times its ranks on this node)" : "");
    host_memory_require((double)bill.total * local, what);
}

DType trainer_grad_dtype(GradDtypeChoice choice, DType dtype, int accum, int ranks) {
    if (choice == GRAD_DTYPE_FP32) return DTYPE_F32;
    if (choice == GRAD_DTYPE_BF16) return DTYPE_BF16;
    // auto: BF16 loses the small contributions of many micro-batches or ranks.
    return dtype != DTYPE_F32 && (accum > 1 || ranks > 1) ? DTYPE_F32 : dtype;
}

void trainer_setup(Trainer* tr, const TrainConfig* cfg, Backend* be, Comm* comm) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    tr->be = be;
    tr->comm = comm;
    tr->rank = comm->rank;
    tr->world = comm->world;
    setup_context_parallel(tr, cfg);
    setup_sharding(tr, cfg);
    setup_batch_geometry(tr, cfg);

    if (cfg->tokenizer[0]) {
        if (!file_exists(cfg->tokenizer))
            fatal("--tokenizer '%s' does not exist (run `make data` for the bundled corpus, or pass --tokenizer '')",
                  cfg->tokenizer);
        tokenizer_load(&tr->tok, cfg->tokenizer);
        tr->has_tok = 1;
    }
    GPTConfig mc = model_config_from_flags(cfg, tr->has_tok ? tr->tok.vocab_size : 0);
    if (tr->T > mc.max_seq_len)
        fatal("--seq-len %d exceeds the model's maximum sequence length %d%s%s", tr->T, mc.max_seq_len,
              cfg->init_from[0] ? " from --init-from " : "", cfg->init_from);
    if (tr->has_tok && tr->tok.vocab_size > mc.vocab_size)
        fatal("--tokenizer %s has %d tokens but the model's vocabulary is %d", cfg->tokenizer, tr->tok.vocab_size,
              mc.vocab_size);

    if (mc.arch == ARCH_LLAMA && cfg->export_path[0])
        fatal("--export writes llm.c's model format, which holds GPT-2 models only (got --arch llama; --export-hf DIR writes a Hugging Face folder)");
    if (mc.arch == ARCH_LLAMA && cfg->model_format == MODEL_FORMAT_LLMC)
        fatal("--model-format llmc: llm.c's model format holds GPT-2 models only (got --arch llama; hf or both write a Hugging Face folder)");

    dataloader_init(&tr->train, cfg->train_data, "--train-data", tr->T, mc.vocab_size, cfg->shuffle, (uint64_t)cfg->seed);
    if (cfg->val_data[0] && cfg->val_every > 0) {
        dataloader_init(&tr->val, cfg->val_data, "--val-data", tr->T, mc.vocab_size, 0, (uint64_t)cfg->seed);
        tr->has_val = 1;
    }
    if (cfg->llmc_compat) {
        dataloader_use_llmc_order(&tr->train, tr->B, tr->dp_world, tr->dp_rank, "--train-data");
        if (tr->has_val) dataloader_use_llmc_order(&tr->val, tr->B, tr->dp_world, tr->dp_rank, "--val-data");
    }

    RecomputePolicy recompute = recompute_policy_from_flags(cfg->recompute, cfg->recompute_layers, mc.num_layers);
    const CommGroupInfo* shard = &comm->group[COMM_SHARD];
    // The LM head in chunks of rows: --head-chunks, else the planner's choice.
    int head_chunks = cfg->head_chunks > 0 ? cfg->head_chunks : plan_head_chunks(&mc, tr->B, tr->T_model);
    if (!strcmp(be->name, "cpu")) check_host_memory(tr, cfg, &mc, &recompute, head_chunks, shard->size);
    gpt_create_full(&tr->model, &mc, be, tr->B, tr->T_model, shard->size, shard->rank, cfg->zero_stage, &recompute,
                    cfg->zero3_prefetch + 1, head_chunks, cfg->adam_dtype == ADAM_DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32);
    // The ops' temporary device memory, once, so that no step allocates (the
    // MLP's 4C is the widest linear layer with a bias).
    if (tr->cp > 1) {
        GPTContextParallel cp = {tr->cp, comm->group[COMM_CP].rank, tr->T_model * tr->cp, tr->T, tr, cp_all_gather,
                                 cp_reduce_scatter};
        gpt_set_context_parallel(&tr->model, &cp);
        tr->host_local = (int32_t*)xmalloc((size_t)2 * tr->B * tr->T_model * sizeof(int32_t));
    }
    if (be->reserve_scratch) be->reserve_scratch(be, tr->B, tr->T_model, mc.channels, 4 * mc.channels, mc.num_heads,
                                               tr->model.config.num_kv_heads);
    DType grad_dtype = trainer_grad_dtype(cfg->grad_dtype, tr->model.dtype, tr->accum, tr->world);
    gpt_set_grad_dtype(&tr->model, grad_dtype);
    if (tr->rank == 0 && (grad_dtype != tr->model.dtype || cfg->grad_dtype != GRAD_DTYPE_AUTO))
        printf("gradients | accumulated and reduced in %s%s (--grad-dtype %s)\n", dtype_name(grad_dtype),
               tr->model.grad_round_bf16 ? ", emulated in fp32 storage" : "",
               config_enum_name("grad-dtype", cfg->grad_dtype));
    zero_init(&tr->zero, &tr->model, comm);
    if (cfg->precision == PRECISION_FP8) setup_fp8(tr, cfg);
    if (cfg->cuda_graphs) {
        const char* why = step_graphs_refusal(be, &tr->model, cfg->precision == PRECISION_FP8);
        if (why) fatal("--cuda-graphs on: %s", why);
    }
    step_graphs_init(&tr->graphs, cfg->cuda_graphs);
    if (cfg->init_from[0] && hf_is_folder(cfg->init_from)) hf_load_weights(&tr->model, cfg->init_from);
    else if (cfg->init_from[0]) llmc_load_weights(&tr->model, cfg->init_from);
    else gpt_init_random(&tr->model, (uint64_t)cfg->seed);

    tr->sched.peak = cfg->lr;
    tr->sched.final_frac = cfg->lr_final_frac;
    tr->sched.warmup = cfg->warmup;
    tr->sched.total = cfg->steps;
    tr->sched.llmc = cfg->llmc_compat;
    tr->host_inputs = (int32_t*)xmalloc((size_t)tr->B * tr->T * sizeof(int32_t));
    tr->host_targets = (int32_t*)xmalloc((size_t)tr->B * tr->T * sizeof(int32_t));
    guard_init(&tr->guard, cfg);
}

void trainer_free(Trainer* tr) {
    if (tr->graphs.enabled && tr->rank == 0)
        printf("graphs    | --cuda-graphs on: %ld micro-steps captured, %ld replayed, %ld run eagerly (warm-ups, "
               "ZeRO-3's first steps)\n", tr->graphs.captured, tr->graphs.replayed, tr->graphs.eager);
    step_graphs_free(&tr->graphs, tr->be);
    zero_free(&tr->zero);
    gpt_free(&tr->model);
    dataloader_free(&tr->train);
    if (tr->has_val) dataloader_free(&tr->val);
    if (tr->has_tok) tokenizer_free(&tr->tok);
    free(tr->host_inputs);
    free(tr->host_targets);
    free(tr->host_local);
    guard_free(&tr->guard);
}

// ---------------------------------------------------------------------------
// the optimizer step

double grad_clip_scale(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0;
    double s = max_norm / (norm + 1e-6);
    return s < 1.0 ? s : 1.0;
}

// Copies `count` (<= B) windows starting at global window `first` to the backend.
static void load_micro_batch(Trainer* tr, DataLoader* dl, uint64_t first, int count) {
    dataloader_read(dl, first, count, tr->host_inputs, tr->host_targets);
    const int32_t *in = tr->host_inputs, *tg = tr->host_targets;
    if (tr->cp > 1) {
        // Every rank of a context-parallel group read the same windows; it keeps its two chunks of each.
        int32_t* lin = tr->host_local;
        int32_t* ltg = lin + (size_t)tr->B * tr->T_model;
        gpt_cp_slice(&tr->model, lin, in, count, 0);
        gpt_cp_slice(&tr->model, ltg, tg, count, 1);
        in = lin;
        tg = ltg;
    }
    size_t bytes = (size_t)count * tr->T_model * sizeof(int32_t);
    tr->be->to_device(tr->be, tr->model.inputs, in, bytes);
    tr->be->to_device(tr->be, tr->model.targets, tg, bytes);
}

StepResult trainer_step(Trainer* tr, int step) {
    const TrainConfig* cfg = tr->cfg;
    GPT* m = &tr->model;
    Backend* be = tr->be;
    double t0 = now_seconds();
    // The global batch is the windows [base, base + accum*world*B); micro-step
    // a of rank r reads B of them, so the batch does not depend on the ranks.
    uint64_t base = dataloader_position(&tr->train);
    long windows_per_step = (long)tr->accum * tr->dp_world * tr->B;
    float dloss = 1.0f / (float)((double)tr->tokens_per_step);

    zero_begin_step(&tr->zero);
    fp8_begin_step(m->fp8, step);
    for (int a = 0; a < tr->accum; a++) {
        load_micro_batch(tr, &tr->train, base + ((uint64_t)a * tr->dp_world + tr->dp_rank) * tr->B, tr->B);
        zero_begin_micro_step(&tr->zero, a, tr->accum);
        fp8_set_micro_batch(m->fp8, a * tr->dp_world + tr->dp_rank);  // nvfp4's random bits, whatever the ranks
        // forward, loss, backward (the hooks reduce gradients unit by unit):
        // eagerly, or captured and replayed (--cuda-graphs on)
        step_graphs_micro_step(&tr->graphs, &tr->zero, tr->B, tr->T_model, a == 0, dloss);
    }
    dataloader_set_position(&tr->train, base + (uint64_t)windows_per_step);
    if (guard_inject_nan_at(&tr->guard, step + 1)) guard_poison_gradient(m);

    // One read of (loss sum, grad norm^2), summed over the ranks: the only
    // host synchronisation of the step.
    double loss_sum, norm_sq;
    zero_step_totals(&tr->zero, &loss_sum, &norm_sq);
    double norm = sqrt(norm_sq);
    double clip = grad_clip_scale(norm, cfg->grad_clip);
    double lr = lr_at(&tr->sched, step);
    double loss = loss_sum / (double)tr->tokens_per_step;
    // A non-finite (or spiking) step leaves the model and optimizer untouched.
    GuardVerdict verdict = guard_check(&tr->guard, step + 1, loss, norm);
    if (verdict.action == GUARD_UPDATE) {
        zero_update(&tr->zero, (float)lr, (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps,
                    (float)cfg->weight_decay, (float)clip, rng_key((uint64_t)cfg->seed, 0xADA3, (uint64_t)step));
        fp8_end_step(m->fp8, tr->comm);  // FP8 amaxes over the ranks; delayed scaling's new scales
    }
    be->synchronize(be);

    StepResult r;
    r.loss = loss;
    r.grad_norm = norm;
    r.action = verdict.action;
    r.spike = verdict.spike;
    r.loss_z = verdict.loss_z;
    r.lr = lr;
    r.seconds = now_seconds() - t0;
    r.tokens_per_second = (double)tr->tokens_per_step / r.seconds;
    return r;
}

// ---------------------------------------------------------------------------
// validation

// SageMaker kills 120 s after its SIGTERM; a whole-set validation or a long
// sample at a large model takes longer, so both look for the signal between
// batches and tokens. The ranks agree, since every rank runs the forwards.
int trainer_stop_requested(Trainer* tr) {
    if (tr->stop_requested) return 1;
    double s = signals_stop_requested() != 0;
    comm_host_sum(tr->comm, COMM_WORLD, &s, 1);
    tr->stop_requested = s > 0;
    return tr->stop_requested;
}

double trainer_validate(Trainer* tr) {
    GPT* m = &tr->model;
    Backend* be = tr->be;
    // The first `total` windows of the validation set, whatever the number of
    // ranks: round i gives rank r the windows [(i*world + r)*B, ... + B)
    // clipped to total, so a rank can get fewer than B, or none.
    uint64_t total = (uint64_t)tr->cfg->val_batches * tr->B;
    if (total == 0 || total > tr->val.windows_per_epoch) total = tr->val.windows_per_epoch;
    uint64_t per_round = (uint64_t)tr->B * tr->dp_world;
    uint64_t rounds = ceil_div(total, per_round);
    int counted = 0;
    for (uint64_t i = 0; i < rounds; i++) {
        if (trainer_stop_requested(tr)) return NAN;
        uint64_t first = i * per_round + (uint64_t)tr->dp_rank * tr->B;
        int count = first < total ? (int)(total - first < (uint64_t)tr->B ? total - first : (uint64_t)tr->B) : 0;
        // A rank without windows still runs the forward (ZeRO-3 gathers
        // parameters in it, with every rank), on window 0, uncounted.
        int rows = count > 0 ? count : 1;
        load_micro_batch(tr, &tr->val, count > 0 ? first : 0, rows);
        gpt_forward(m, m->inputs, m->targets, rows, tr->T_model, 0.0f);
        if (count > 0) gpt_accumulate_loss(m, count, tr->T_model, counted++ > 0);
    }
    float local = 0.0f;
    if (counted) be->to_host(be, &local, m->scalars, sizeof local);
    double sum = local;
    comm_host_sum(tr->comm, COMM_WORLD, &sum, 1);
    return sum / ((double)total * tr->T);
}

void trainer_export(Trainer* tr, const char* path, DType dtype) {
    float* flat = (float*)xmalloc(tr->model.layout.total * sizeof(float));
    zero_gather_params_f32(&tr->zero, flat);
    if (tr->rank == 0) llmc_write_weights(&tr->model, flat, path, dtype);
    free(flat);
}

void trainer_export_hf(Trainer* tr, const char* dir, DType dtype) {
    float* flat = (float*)xmalloc(tr->model.layout.total * sizeof(float));
    zero_gather_params_f32(&tr->zero, flat);
    if (tr->rank == 0) hf_write_folder(&tr->model, flat, dir, dtype, tr->has_tok ? tr->tok.eot : -1, "--export-hf");
    free(flat);
}

// ---------------------------------------------------------------------------
// sampling

// Draws from softmax(logits[:V]) with one uniform number.
static int sample_token(const float* logits, int V, float u) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double total = 0;
    for (int i = 0; i < V; i++) total += exp((double)logits[i] - mx);
    double target = u * total, cum = 0;
    for (int i = 0; i < V; i++) {
        cum += exp((double)logits[i] - mx);
        if (cum > target) return i;
    }
    return V - 1;
}

char* trainer_sample(Trainer* tr, int step) {
    GPT* m = &tr->model;
    int V = m->config.vocab_size, T = tr->T, n = tr->cfg->sample_tokens;
    int eot = tr->has_tok ? tr->tok.eot : V - 1;
    int32_t* tokens = (int32_t*)xmalloc((size_t)(n + 1) * sizeof(int32_t));
    float* logits = (float*)xmalloc((size_t)m->config.padded_vocab_size * sizeof(float));
    size_t cap = (size_t)n * 16 + 512, len = 0;
    char* text = (char*)xmalloc(cap);
    text[0] = 0;
    uint64_t key = rng_key((uint64_t)tr->cfg->seed, 0x5A3F1E, (uint64_t)step);
    tokens[0] = eot;
    for (int i = 1; i <= n && !trainer_stop_requested(tr); i++) {
        // No KV cache: rerun the forward over the last min(i, T) tokens.
        int ctx = i < T ? i : T;
        tr->be->to_device(tr->be, m->inputs, tokens + (i - ctx), (size_t)ctx * sizeof(int32_t));
        gpt_forward(m, m->inputs, NULL, 1, ctx, 0.0f);
        gpt_logits_row(m, ctx - 1, logits);
        int next = sample_token(logits, V, rng_uniform(key, (uint64_t)i));
        tokens[i] = next;
        if (cap - len < 512) {  // room for the longest token (255 bytes) or an id
            cap *= 2;
            text = (char*)xrealloc(text, cap);
        }
        if (tr->has_tok) {
            len += tokenizer_decode_token(&tr->tok, next, text + len, cap - len);
        } else {
            len += (size_t)snprintf(text + len, cap - len, "%d ", next);
        }
        text[len] = 0;
    }
    free(tokens);
    free(logits);
    return text;
}
