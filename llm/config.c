// config.c: the flag table, its parser and its help text.
#include "llm/config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_INT, F_LONG, F_DOUBLE, F_STRING, F_BOOL } FlagType;

typedef struct {
    const char* name;     // without "--"
    FlagType type;
    size_t offset;        // into TrainConfig
    const char* def;      // default, as text (NULL: none)
    const char* metavar;
    const char* help;
    const char* group;    // heading in --help; a flag with a group starts a new section
} Flag;

#define OFF(field) offsetof(TrainConfig, field)

// The defaults train the bundled demo: `./train_gpt` alone trains a small
// model on the King James Bible shards that `make data` writes.
static const Flag FLAGS[] = {
    {"model", F_STRING, OFF(model), "", "NAME", "preset: gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M; gpt-1B, gpt-7B, gpt-13B, gpt-30B, gpt-64B (GPT-3 shapes, see README); or dN (same as --depth N)", "Model"},
    {"depth", F_INT, OFF(depth), "4", "D", "llm.c's -e dD: D layers, 64*D channels, D heads", NULL},
    {"layers", F_INT, OFF(layers), "0", "L", "number of layers (overrides --depth)", NULL},
    {"channels", F_INT, OFF(channels), "0", "C", "model width (overrides --depth)", NULL},
    {"heads", F_INT, OFF(heads), "0", "NH", "attention heads (overrides --depth)", NULL},
    {"vocab-size", F_INT, OFF(vocab_size), "0", "V", "vocabulary size; 0 takes it from --tokenizer (GPT-2's 50257 without one)", NULL},
    {"max-seq-len", F_INT, OFF(max_seq_len), "0", "T", "rows of the position embedding; 0 = --seq-len (1024 for GPT-2 presets)", NULL},
    {"init-from", F_STRING, OFF(init_from), "", "FILE", "start from weights in llm.c's model format (version 3 fp32 or 5 bf16); the model shape comes from the file", NULL},

    {"train-data", F_STRING, OFF(train_data), "data/kjv/kjv_train_*.bin", "GLOB", "training shards (llm.c format, .bin or .bin.zst)", "Data"},
    {"val-data", F_STRING, OFF(val_data), "data/kjv/kjv_val_*.bin", "GLOB", "validation shards; empty to skip validation", NULL},
    {"tokenizer", F_STRING, OFF(tokenizer), "data/kjv/tokenizer.bin", "FILE", "vocabulary for printing samples (llm.c tokenizer format); empty: print token ids", NULL},
    {"shuffle", F_BOOL, OFF(shuffle), "1", "0|1", "shuffle shard and window order each epoch (deterministic from --seed)", NULL},

    {"seq-len", F_INT, OFF(seq_len), "256", "T", "tokens per sequence", "Batch"},
    {"micro-batch", F_INT, OFF(micro_batch), "8", "B", "sequences per forward/backward on each rank", NULL},
    {"batch-tokens", F_LONG, OFF(batch_tokens), "0", "N", "tokens per optimizer step over all ranks (= B*T*ranks*accumulation); 0: B*T*ranks", NULL},

    {"steps", F_INT, OFF(steps), "300", "N", "optimizer steps", "Optimization"},
    {"lr", F_DOUBLE, OFF(lr), "1e-3", "X", "peak learning rate", NULL},
    {"warmup", F_INT, OFF(warmup), "30", "N", "linear warmup steps", NULL},
    {"lr-final-frac", F_DOUBLE, OFF(lr_final_frac), "0.1", "X", "cosine decay ends at lr * this", NULL},
    {"weight-decay", F_DOUBLE, OFF(weight_decay), "0.1", "X", "AdamW decoupled weight decay (2-D weights only)", NULL},
    {"grad-clip", F_DOUBLE, OFF(grad_clip), "1.0", "X", "clip the global gradient norm to this; 0 disables", NULL},
    {"beta1", F_DOUBLE, OFF(beta1), "0.9", "X", "AdamW beta1", NULL},
    {"beta2", F_DOUBLE, OFF(beta2), "0.95", "X", "AdamW beta2", NULL},
    {"eps", F_DOUBLE, OFF(eps), "1e-8", "X", "AdamW epsilon", NULL},
    {"seed", F_LONG, OFF(seed), "1337", "N", "seed for initialisation, data order and sampling", NULL},

    {"val-every", F_INT, OFF(val_every), "100", "N", "validation loss every N steps (and at the end); 0 disables", "Evaluation and output"},
    {"val-batches", F_INT, OFF(val_batches), "8", "N", "micro-batches per validation; 0: the whole validation set", NULL},
    {"sample-every", F_INT, OFF(sample_every), "150", "N", "print a generated sample every N steps (and at the end); 0 disables", NULL},
    {"sample-tokens", F_INT, OFF(sample_tokens), "96", "N", "tokens per generated sample", NULL},
    {"log-every", F_INT, OFF(log_every), "1", "N", "print a step line every N steps", NULL},
    {"export", F_STRING, OFF(export_path), "", "FILE", "write the final weights in llm.c's model format", NULL},
    {"export-dtype", F_STRING, OFF(export_dtype), "fp32", "fp32|bf16", "value type of --export", NULL},

    {"checkpoint-dir", F_STRING, OFF(checkpoint_dir), "auto", "DIR", "where checkpoints go; auto: $TRAIN_GPT_CHECKPOINT_DIR if set, else /opt/ml/checkpoints if it exists, else ./checkpoints; empty: none", "Checkpoints"},
    {"checkpoint-every", F_INT, OFF(checkpoint_every), "0", "N", "write a checkpoint every N steps; 0: only at the end and on SIGTERM/SIGINT", NULL},
    {"keep-last", F_INT, OFF(keep_last), "2", "K", "keep the K newest complete checkpoints, delete older ones; 0: keep all", NULL},
    {"resume", F_STRING, OFF(resume), "auto", "auto|never|DIR", "auto: continue from the newest complete, verified checkpoint; never: start over; DIR: from that checkpoint", NULL},
    {"async-checkpoint", F_BOOL, OFF(async_checkpoint), "0", "0|1", "copy the state to host memory and write it from a background thread while training goes on", NULL},
    {"model-dir", F_STRING, OFF(model_dir), "auto", "DIR", "final weights (llm.c format, --export-dtype) go to DIR/model.bin; auto: $SM_MODEL_DIR, else /opt/ml/model if it exists; empty: none", NULL},

    {"device", F_STRING, OFF(device), "auto", "auto|cpu|cuda", "compute backend; auto: the GPU when one is present", "Runtime"},
    {"precision", F_STRING, OFF(precision), "auto", "P", "fp32, bf16, fp8 or auto. fp8: the blocks' linear layers (qkv, attproj, fc, fcproj) run their GEMMs in FP8 (E4M3 forward, E5M2 gradients), the rest in bf16 (on the CPU: fp32 with the FP8 GEMMs emulated). auto: on GPUs bf16 under 6.5B parameters and fp8 from there (the 7B class) where the GPU has FP8; fp32 on the CPU. Master weights and optimizer state are always fp32", NULL},
    {"fp8-recipe", F_STRING, OFF(fp8_recipe), "current", "current|delayed", "FP8 scaling per tensor: from its own amax (current), or from the max of an amax history, updated after each step (delayed, as TransformerEngine's DelayedScaling)", NULL},
    {"fp8-amax-history", F_INT, OFF(fp8_amax_history), "1024", "N", "delayed scaling: steps in each tensor's amax history (1: the last step's amax)", NULL},
    {"fp8-margin", F_INT, OFF(fp8_margin), "0", "M", "delayed scaling: scales are fp8 max / 2^M / amax, leaving room for growth", NULL},
    {"fp8-skip", F_STRING, OFF(fp8_skip), "", "LIST", "GEMMs kept in bf16 with --precision fp8, comma-separated: qkv, attproj, fc, fcproj (in every layer); L, L-M, first, last (every GEMM of those layers, 0-based); GEMM@L or GEMM@L-M. E.g. first,last or fcproj@0-3", NULL},
    {"attention", F_STRING, OFF(attention), "auto", "auto|cudnn|native", "CUDA attention: cudnn = cuDNN's fused attention (loaded at run time; fails naming why when it cannot), native = our kernels, auto = cuDNN where it loads and supports the shape, else native (the choice is printed). Bit for bit run to run: native always; cudnn on the same GPU, cuDNN version and shapes (its deterministic backward, no atomics); the two differ from each other within bf16 rounding", NULL},
    {"threads", F_INT, OFF(threads), "0", "N", "CPU threads per rank; 0: the machine's cores divided by its ranks (OMP_NUM_THREADS also works)", NULL},

    {"recompute", F_STRING, OFF(recompute), "none", "MODE", "activation recompute: none; selective (recompute layernorm and GELU outputs in backward); full (keep only each layer's input, re-run its forward in backward)", "Memory and planning"},
    {"recompute-layers", F_INT, OFF(recompute_layers), "0", "N", "full recompute for the first N layers, the others as --recompute (none or selective)", NULL},
    {"plan", F_BOOL, OFF(plan), "0", "", "print the memory bill and the recommended configuration for --gpu and --world-size, then exit: 0 when it fits, 2 when nothing fits (reads no data)", NULL},
    {"auto", F_BOOL, OFF(auto_plan), "0", "", "train with the planner's recommendation (micro-batch, recompute, precision, ZeRO stage); explicitly set flags win", NULL},
    {"gpu", F_STRING, OFF(gpu), "", "NAME", "GPU for --plan: h100, h200, b200 or a100 (default: the GPU present, else this CPU)", NULL},
    {"gpu-mem", F_DOUBLE, OFF(gpu_mem), "0", "GiB", "memory per device for --plan/--auto in GiB (2^30 bytes), instead of --gpu's or the device's free memory", NULL},
    {"world-size", F_INT, OFF(world_size), "0", "N", "ranks for --plan (default: the MPI world under mpirun, else 1)", NULL},
    {"ranks-per-node", F_INT, OFF(ranks_per_node), "0", "N", "ranks per node for --plan (default: the MPI local size under mpirun, else 8)", NULL},
    {"log-dir", F_STRING, OFF(log_dir), "", "DIR", "write DIR/metrics.jsonl: the config, one JSON object per step, validation, telemetry, a summary", "Metrics and fault tolerance"},
    {"telemetry-every", F_INT, OFF(telemetry_every), "100", "N", "GPU telemetry (NVML: utilisation, memory, power, temperature, clocks, throttling) every N steps; 0 disables", NULL},
    {"progress-every", F_DOUBLE, OFF(progress_every), "60", "SECONDS", "a progress line with elapsed time and ETA at most this often; 0 disables", NULL},
    {"peak-tflops", F_DOUBLE, OFF(peak_tflops), "0", "X", "dense peak TFLOP/s of one device for MFU; 0: the GPU table, or the CPU's sgemm measured at start-up", NULL},
    {"max-bad-steps", F_INT, OFF(max_bad_steps), "5", "N", "stop (exit 1) after N skipped steps in a row; 0: never stop", NULL},
    {"spike-z", F_DOUBLE, OFF(spike_z), "5", "Z", "report a loss more than Z standard deviations above the last --spike-window losses; 0 disables", NULL},
    {"spike-window", F_INT, OFF(spike_window), "100", "N", "steps in the loss-spike baseline", NULL},
    {"skip-spikes", F_BOOL, OFF(skip_spikes), "0", "0|1", "also skip the update of a loss-spike step (non-finite steps are always skipped)", NULL},
    {"on-divergence", F_STRING, OFF(on_divergence), "stop", "stop|rollback", "after --max-bad-steps skipped steps in a row: stop (exit 1), or reload the newest checkpoint (weights, optimizer, guard) and go on with the data that follows", NULL},
    {"max-rollbacks", F_INT, OFF(max_rollbacks), "3", "N", "--on-divergence rollback: stop when the same checkpoint would be reloaded more than N times", NULL},
    {"collective-timeout", F_DOUBLE, OFF(collective_timeout), "600", "SECONDS", "a collective (MPI or NCCL) unfinished after this long aborts every rank with a message naming it; 0: wait for ever", NULL},

    {"zero", F_INT, OFF(zero_stage), "1", "0|1|2|3", "ZeRO stage: 0 replicates everything, 1 shards optimizer state, 2 also gradients, 3 also parameters", "Distributed (mpirun -np N ./train_gpt ...)"},
    {"shard-scope", F_STRING, OFF(shard_scope), "world", "world|node", "shard over all ranks, or inside each node with gradients all-reduced across nodes (hybrid; ZeRO 1-3)", NULL},
};
#define NUM_FLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

// Which flags were set explicitly; parallel to FLAGS.
static unsigned char flag_was_set[sizeof FLAGS / sizeof FLAGS[0]];

static const Flag* find_flag(const char* name) {
    for (int i = 0; i < NUM_FLAGS; i++)
        if (strcmp(FLAGS[i].name, name) == 0) return &FLAGS[i];
    return NULL;
}

static int parse_bool(const char* s, int* out) {
    if (!strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "on") || !strcmp(s, "yes")) { *out = 1; return 1; }
    if (!strcmp(s, "0") || !strcmp(s, "false") || !strcmp(s, "off") || !strcmp(s, "no")) { *out = 0; return 1; }
    return 0;
}

// Stores a textual value into the field; fatal with the flag name on a bad value.
static void store(TrainConfig* cfg, const Flag* f, const char* value, const char* source) {
    char* field = (char*)cfg + f->offset;
    long l;
    double d;
    int b;
    switch (f->type) {
    case F_INT:
        if (!parse_long(value, &l) || l < -2147483647L || l > 2147483647L)
            fatal("%s--%s: '%s' is not an integer", source, f->name, value);
        *(int*)field = (int)l;
        break;
    case F_LONG:
        if (!parse_long(value, &l)) fatal("%s--%s: '%s' is not an integer", source, f->name, value);
        *(long*)field = l;
        break;
    case F_DOUBLE:
        if (!parse_double(value, &d)) fatal("%s--%s: '%s' is not a number", source, f->name, value);
        *(double*)field = d;
        break;
    case F_BOOL:
        if (!parse_bool(value, &b)) fatal("%s--%s: '%s' is not a boolean (use 1/0, true/false)", source, f->name, value);
        *(int*)field = b;
        break;
    case F_STRING:
        free(*(char**)field);
        *(char**)field = xstrdup(value);
        break;
    }
}

int config_set(TrainConfig* cfg, const char* name, const char* value, const char* source) {
    const Flag* f = find_flag(name);
    if (!f) return 0;
    store(cfg, f, value, source);
    flag_was_set[f - FLAGS] = 1;
    return 1;
}

int config_is_set(const TrainConfig* cfg, const char* name) {
    const Flag* f = find_flag(name);
    return f ? flag_was_set[f - FLAGS] : 0;
}

int config_has_flag(const char* name) { return find_flag(name) != NULL; }

static void set_defaults(TrainConfig* cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NUM_FLAGS; i++) store(cfg, &FLAGS[i], FLAGS[i].def, "internal default: ");
    memset(flag_was_set, 0, sizeof flag_was_set);
}

void config_print_help(FILE* f) {
    fprintf(f,
            "usage: train_gpt [flags]          (mpirun -np N ./train_gpt [flags] for N ranks)\n"
            "\n"
            "Trains a GPT-2 model. With no flags it trains a small model on the bundled\n"
            "King James Bible corpus (run `make data` once first) and prints samples.\n"
            "Flags take a value as `--flag value` or `--flag=value`; a 0|1 flag given alone means 1.\n");
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* fl = &FLAGS[i];
        if (fl->group) fprintf(f, "\n%s:\n", fl->group);
        char left[64];
        snprintf(left, sizeof left, fl->metavar[0] ? "--%s %s" : "--%s", fl->name, fl->metavar);
        fprintf(f, "  %-28s %s", left, fl->help);
        if (fl->def && fl->def[0] && strcmp(fl->def, "0") != 0) fprintf(f, " [%s]", fl->def);
        fprintf(f, "\n");
    }
    fprintf(f, "\n  --help                       print this help and exit\n");
}

void config_print(const TrainConfig* cfg, FILE* f, const char* prefix) {
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* fl = &FLAGS[i];
        const char* field = (const char*)cfg + fl->offset;
        fprintf(f, "%s%-16s ", prefix, fl->name);
        switch (fl->type) {
        case F_INT: case F_BOOL: fprintf(f, "%d\n", *(const int*)field); break;
        case F_LONG: fprintf(f, "%ld\n", *(const long*)field); break;
        case F_DOUBLE: fprintf(f, "%g\n", *(const double*)field); break;
        case F_STRING: fprintf(f, "%s\n", *(char* const*)field); break;
        }
    }
}

int config_num_flags(void) { return NUM_FLAGS; }
const char* config_flag_name(int i) { return FLAGS[i].name; }
int config_flag_is_string(int i) { return FLAGS[i].type == F_STRING; }

void config_flag_value(const TrainConfig* cfg, int i, char* buf, size_t size) {
    const Flag* fl = &FLAGS[i];
    const char* field = (const char*)cfg + fl->offset;
    switch (fl->type) {
    case F_INT: case F_BOOL: snprintf(buf, size, "%d", *(const int*)field); break;
    case F_LONG: snprintf(buf, size, "%ld", *(const long*)field); break;
    case F_DOUBLE: snprintf(buf, size, "%.17g", *(const double*)field); break;
    case F_STRING: snprintf(buf, size, "%s", *(char* const*)field); break;
    }
}

void config_free(TrainConfig* cfg) {
    for (int i = 0; i < NUM_FLAGS; i++)
        if (FLAGS[i].type == F_STRING) {
            char** field = (char**)((char*)cfg + FLAGS[i].offset);
            free(*field);
            *field = NULL;
        }
}

void config_write_json(const TrainConfig* cfg, JsonWriter* j) {
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* fl = &FLAGS[i];
        const char* field = (const char*)cfg + fl->offset;
        switch (fl->type) {
        case F_INT: json_int(j, fl->name, *(const int*)field); break;
        case F_BOOL: json_bool(j, fl->name, *(const int*)field); break;
        case F_LONG: json_int(j, fl->name, *(const long*)field); break;
        case F_DOUBLE: json_number(j, fl->name, *(const double*)field); break;
        case F_STRING: json_string(j, fl->name, *(char* const*)field); break;
        }
    }
}

void config_parse(TrainConfig* cfg, int argc, char** argv) {
    set_defaults(cfg);
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            config_print_help(stdout);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) fatal("unexpected argument '%s' (flags start with --; see --help)", arg);
        char name[128];
        const char* value;
        const char* eq = strchr(arg, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - arg - 2), arg + 2);
            value = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg + 2);
            const Flag* f = find_flag(name);
            if (!f) fatal("unknown flag '%s' (see --help)", arg);
            int b;
            if (f->type == F_BOOL && (i + 1 >= argc || !parse_bool(argv[i + 1], &b))) {
                value = "1";  // a switch: `--plan` alone means on
            } else {
                if (i + 1 >= argc) fatal("flag --%s needs a value", name);
                value = argv[++i];
            }
        }
        if (!config_set(cfg, name, value, "")) fatal("unknown flag '--%s' (see --help)", name);
    }
}
