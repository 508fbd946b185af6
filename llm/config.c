// config.c: the flag table, its parser, its help text and the checks that
// involve more than one flag (config_check).
//
// The table: one line per flag,
//   {name, type, OFF(field), default, metavar, help, group, allowed}
//   name      without "--"
//   type      F_INT, F_LONG, F_DOUBLE, F_BOOL, F_STRING, or F_ENUM
//   field     the TrainConfig member it sets
//   default   as text, parsed and checked like a value from the command line
//             (a default such as 0 meaning "from elsewhere" is in the range)
//   metavar   the value's placeholder in --help (NULL for an F_ENUM: its values)
//   help      one sentence or two; the default and the allowed values are appended
//   group     a heading in --help that starts a new section, or NULL
//   allowed   F_ENUM: its values as "a|b|c"; the field (an int-sized enum)
//             holds the index of the name, so the enum lists them in this order.
//             F_INT, F_LONG, F_DOUBLE: a range in interval notation, "[0, 1)",
//             "(0, inf)", "[1, 131072]"; a value given outside it is fatal,
//             naming the flag. NULL: any value.
// A new enum flag is one line, e.g.
//   {"attention", F_ENUM, OFF(attention), "auto", NULL, "attention kernel", NULL, "auto|cudnn|native"},
// with `typedef enum { ATTENTION_AUTO, ATTENTION_CUDNN, ATTENTION_NATIVE } AttentionChoice;`
// in config.h and the field `AttentionChoice attention;` in TrainConfig.
#include "llm/config.h"
#include "llm/platform/launcher.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_INT, F_LONG, F_DOUBLE, F_STRING, F_BOOL, F_ENUM } FlagType;

typedef struct {
    const char* name;     // without "--"
    FlagType type;
    size_t offset;        // into TrainConfig
    const char* def;      // default, as text (NULL: none)
    const char* metavar;  // NULL for F_ENUM: "a|b|c" from allowed
    const char* help;
    const char* group;    // heading in --help; a flag with a group starts a new section
    const char* allowed;  // F_ENUM: "a|b|c"; numbers: a range such as "[0, 1)"; NULL: anything
} Flag;

// Enum fields are written through an int pointer.
_Static_assert(sizeof(DeviceChoice) == sizeof(int) && sizeof(AttentionChoice) == sizeof(int) && sizeof(PrecisionChoice) == sizeof(int) &&
                   sizeof(RecomputeMode) == sizeof(int) && sizeof(DivergenceAction) == sizeof(int) &&
                   sizeof(ShardScope) == sizeof(int) && sizeof(ExportDtype) == sizeof(int) && sizeof(ModelFormat) == sizeof(int),
               "enum flags are int-sized");

#define OFF(field) offsetof(TrainConfig, field)

// The defaults train the bundled demo: `./train_gpt` alone trains a small
// model on the King James Bible shards that `make data` writes.
static const Flag FLAGS[] = {
    {"model", F_STRING, OFF(model), "", "NAME", "preset: gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M; gpt-1B, gpt-7B, gpt-13B, gpt-30B, gpt-64B (GPT-3 shapes, see README); or dN (same as --depth N)", "Model", NULL},
    {"depth", F_INT, OFF(depth), "4", "D", "llm.c's -e dD: D layers, 64*D channels, D heads", NULL, "[1, 1024]"},
    {"layers", F_INT, OFF(layers), "0", "L", "number of layers (overrides --depth)", NULL, "[0, 4096]"},
    {"channels", F_INT, OFF(channels), "0", "C", "model width (overrides --depth)", NULL, "[0, 65536]"},
    {"heads", F_INT, OFF(heads), "0", "NH", "attention heads (overrides --depth)", NULL, "[0, 4096]"},
    {"vocab-size", F_INT, OFF(vocab_size), "0", "V", "vocabulary size; 0 takes it from --tokenizer (GPT-2's 50257 without one)", NULL, "[0, 16777216]"},
    {"max-seq-len", F_INT, OFF(max_seq_len), "0", "T", "rows of the position embedding; 0 = --seq-len (1024 for GPT-2 presets)", NULL, "[0, 131072]"},
    {"init-from", F_STRING, OFF(init_from), "", "FILE|DIR", "start from weights: an llm.c model file (version 3 fp32 or 5 bf16), or a Hugging Face model folder (config.json and model.safetensors or its sharded index; GPT-2 or Llama); the model shape comes from it", NULL, NULL},
    // Llama 3 (llm/arch/llama.c): presets llama3-1B, llama3-3B, llama3-8B, llama3-70B, or --arch llama with --depth or sizes.
    {"arch", F_ENUM, OFF(arch), "gpt2", NULL, "architecture: GPT-2, or Llama 3 (RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases); llama3-* presets set llama", NULL, "gpt2|llama"},
    {"kv-heads", F_INT, OFF(kv_heads), "0", "NKV", "Llama: key/value heads (divides --heads); 0: the preset's, or heads/4 rounded down to a divisor for --depth", NULL, "[0, 4096]"},
    {"mlp-hidden", F_INT, OFF(mlp_hidden), "0", "H", "Llama: MLP width of gate, up and down; 0: the preset's, or 8C/3 rounded up to 64 for --depth", NULL, "[0, 1048576]"},
    {"rope-theta", F_DOUBLE, OFF(rope_theta), "500000", "X", "Llama: RoPE base frequency", NULL, "(0, inf)"},
    {"rope-scaling", F_BOOL, OFF(rope_scaling), "0", "0|1", "Llama: Llama 3.1's long-context RoPE frequency scaling (factor 8, low 1, high 4, original 8192 positions)", NULL, NULL},
    {"tie-embeddings", F_BOOL, OFF(tie_embeddings), "0", "0|1", "Llama: LM head tied to the token embedding; default: the preset's (1B and 3B tied), untied otherwise", NULL, NULL},

    {"train-data", F_STRING, OFF(train_data), "data/kjv/kjv_train_*.bin", "GLOB", "training shards (llm.c format, .bin or .bin.zst)", "Data", NULL},
    {"val-data", F_STRING, OFF(val_data), "data/kjv/kjv_val_*.bin", "GLOB", "validation shards; empty to skip validation", NULL, NULL},
    {"tokenizer", F_STRING, OFF(tokenizer), "data/kjv/tokenizer.bin", "FILE", "vocabulary for printing samples (llm.c tokenizer format, or a tiktoken rank file: gpt2.tiktoken, cl100k_base.tiktoken); empty: print token ids", NULL, NULL},
    {"shuffle", F_BOOL, OFF(shuffle), "1", "0|1", "shuffle shard and window order each epoch (deterministic from --seed)", NULL, NULL},
    {"llmc-compat", F_BOOL, OFF(llmc_compat), "0", "0|1", "reproduce llm.c's train_gpt2: its data order (batches of micro-batch x seq-len + 1 tokens per rank, shards and batches shuffled with its MT19937 seeded 42 + rank; --seed does not enter) and its cosine schedule (float, never reaching the floor)", NULL, NULL},

    {"seq-len", F_INT, OFF(seq_len), "256", "T", "tokens per sequence", "Batch", "[1, 131072]"},
    {"micro-batch", F_INT, OFF(micro_batch), "8", "B", "sequences per forward/backward on each rank", NULL, "[1, 65536]"},
    {"batch-tokens", F_LONG, OFF(batch_tokens), "0", "N", "tokens per optimizer step over all ranks (= B*T*ranks*accumulation); 0: B*T*ranks", NULL, "[0, inf)"},

    {"steps", F_INT, OFF(steps), "300", "N", "optimizer steps", "Optimization", "[0, inf)"},
    {"lr", F_DOUBLE, OFF(lr), "1e-3", "X", "peak learning rate", NULL, "(0, inf)"},
    {"warmup", F_INT, OFF(warmup), "30", "N", "linear warmup steps", NULL, "[0, inf)"},
    {"lr-final-frac", F_DOUBLE, OFF(lr_final_frac), "0.1", "X", "cosine decay ends at lr * this", NULL, "[0, 1]"},
    {"weight-decay", F_DOUBLE, OFF(weight_decay), "0.1", "X", "AdamW decoupled weight decay (2-D weights only)", NULL, "[0, inf)"},
    {"grad-clip", F_DOUBLE, OFF(grad_clip), "1.0", "X", "clip the global gradient norm to this; 0 disables", NULL, "[0, inf)"},
    {"beta1", F_DOUBLE, OFF(beta1), "0.9", "X", "AdamW beta1", NULL, "[0, 1)"},
    {"beta2", F_DOUBLE, OFF(beta2), "0.95", "X", "AdamW beta2", NULL, "[0, 1)"},
    {"eps", F_DOUBLE, OFF(eps), "1e-8", "X", "AdamW epsilon", NULL, "(0, inf)"},
    {"adam-dtype", F_ENUM, OFF(adam_dtype), "fp32", NULL, "storage of AdamW's moments m and v: fp32, or bf16 (half the optimizer memory; loaded and updated in fp32, stored with stochastic rounding). Checkpoints record it; resuming with the other dtype converts the moments (bf16 to fp32 exactly, fp32 to bf16 rounded to nearest)", NULL, "fp32|bf16"},
    {"seed", F_LONG, OFF(seed), "1337", "N", "seed for initialisation, data order and sampling", NULL, NULL},

    {"val-every", F_INT, OFF(val_every), "100", "N", "validation loss every N steps (and at the end); 0 disables", "Evaluation and output", "[0, inf)"},
    {"eval-data", F_STRING, OFF(eval_data), "", "FILE", "multiple-choice eval (llm.c's HellaSwag format; make data writes data/kjv/kjv_eval.bin): accuracy and length-normalised accuracy", NULL, NULL},
    {"eval-every", F_INT, OFF(eval_every), "0", "N", "run --eval-data every N steps (and at the end); 0: only at the end", NULL, "[0, inf)"},
    {"generate", F_BOOL, OFF(generate), "0", "0|1", "generate --sample-tokens tokens after --prompt from the newest checkpoint or --init-from weights, streamed to stdout, then exit", NULL, NULL},
    {"prompt", F_STRING, OFF(prompt), "", "TEXT", "--generate's prompt (space-separated token ids with --tokenizer ''); empty: end-of-text", NULL, NULL},
    {"temperature", F_DOUBLE, OFF(temperature), "1.0", "X", "--generate: sampling temperature; 0: greedy (the most likely token)", NULL, "[0, inf)"},
    {"top-k", F_INT, OFF(top_k), "0", "K", "--generate: sample among the K most likely tokens; 0: all", NULL, "[0, inf)"},
    {"val-batches", F_INT, OFF(val_batches), "8", "N", "micro-batches per validation; 0: the whole validation set", NULL, "[0, inf)"},
    {"sample-every", F_INT, OFF(sample_every), "150", "N", "print a generated sample every N steps (and at the end); 0 disables", NULL, "[0, inf)"},
    {"sample-tokens", F_INT, OFF(sample_tokens), "96", "N", "tokens per generated sample", NULL, "[0, 1000000]"},
    {"log-every", F_INT, OFF(log_every), "1", "N", "print a step line every N steps", NULL, "(0, inf)"},
    {"export", F_STRING, OFF(export_path), "", "FILE", "write the final weights in llm.c's model format", NULL, NULL},
    {"export-dtype", F_ENUM, OFF(export_dtype), "fp32", NULL, "value type of --export", NULL, "fp32|bf16"},
    {"export-hf", F_STRING, OFF(export_hf), "", "DIR", "write the final weights as a Hugging Face model folder (config.json, model.safetensors) that transformers loads as GPT2LMHeadModel or LlamaForCausalLM", NULL, NULL},
    {"export-hf-dtype", F_ENUM, OFF(export_hf_dtype), "bf16", NULL, "value type of --export-hf", NULL, "fp32|bf16"},

    {"checkpoint-dir", F_STRING, OFF(checkpoint_dir), "auto", "DIR", "where checkpoints go; auto: $TRAIN_GPT_CHECKPOINT_DIR if set, else /opt/ml/checkpoints if it exists, else ./checkpoints; empty: none", "Checkpoints", NULL},
    {"checkpoint-every", F_INT, OFF(checkpoint_every), "0", "N", "write a checkpoint every N steps; 0: only at the end and on SIGTERM/SIGINT", NULL, "[0, inf)"},
    {"keep-last", F_INT, OFF(keep_last), "2", "K", "keep the K newest complete checkpoints, delete older ones; 0: keep all", NULL, "[0, inf)"},
    {"resume", F_STRING, OFF(resume), "auto", "auto|never|DIR", "auto: continue from the newest complete, verified checkpoint; never: start over; DIR: from that checkpoint", NULL, NULL},
    {"async-checkpoint", F_BOOL, OFF(async_checkpoint), "0", "0|1", "copy the state to host memory and write it from a background thread while training goes on", NULL, NULL},
    {"model-dir", F_STRING, OFF(model_dir), "auto", "DIR", "final weights (--export-dtype, --model-format) go to DIR; auto: $SM_MODEL_DIR, else /opt/ml/model if it exists; empty: none", NULL, NULL},
    {"model-format", F_ENUM, OFF(model_format), "both", NULL, "what --model-dir holds: both: a Hugging Face folder (config.json, model.safetensors) and, for GPT-2, llm.c's model.bin; hf: the folder only (half of SageMaker's model.tar.gz); llmc: model.bin only (GPT-2)", NULL, "both|hf|llmc"},

    {"device", F_ENUM, OFF(device), "auto", NULL, "compute backend; auto: the GPU when one is present", "Runtime", "auto|cpu|cuda"},
    {"precision", F_ENUM, OFF(precision), "auto", NULL, "fp32, bf16, fp8 or auto. fp8: the blocks' linear layers (qkv, attproj, fc, fcproj) run their GEMMs in FP8 (E4M3 forward, E5M2 gradients), the rest in bf16 (on the CPU: fp32 with the FP8 GEMMs emulated). auto: on GPUs bf16 under 6.5B parameters and fp8 from there (the 7B class) where the GPU has FP8; fp32 on the CPU. Master weights are always fp32, AdamW's moments fp32 unless --adam-dtype bf16", NULL, "fp32|bf16|fp8|auto"},
    {"cuda-graphs", F_ENUM, OFF(cuda_graphs), "off", NULL, "CUDA graphs: on captures the training micro-step (forward, loss, backward and ZeRO's gradient collectives) once per host-side state after one eager warm-up and replays it (the optimizer step runs outside: its learning rate and clip factor are host values); fp32 and bf16 on the GPU (fp8 and the CPU refuse it). Off by default: no GPU has measured it yet", NULL, "off|on"},
    {"grad-dtype", F_ENUM, OFF(grad_dtype), "auto", NULL, "the dtype gradients are accumulated in across micro-steps and summed in across ranks (reduce-scatter, all-reduce), and that clipping, the grad norm and AdamW read. fp32: each micro-step's gradients are computed in the run's dtype into a scratch, then added into FP32 gradients (2 more bytes per parameter, plus a few units of scratch). bf16: in the BF16 gradients themselves (on an fp32 run, the CPU's too: an emulation that rounds every add to bf16). auto: fp32 in bf16 and fp8 runs whenever a step accumulates several micro-batches or sums over ranks, else the run's dtype", NULL, "auto|fp32|bf16"},
    {"fp8-recipe", F_ENUM, OFF(fp8_recipe), "auto", NULL, "FP8 scaling. Per tensor: from its own amax (current), or from the max of an amax history, updated after each step (delayed, as TransformerEngine's DelayedScaling). Per block, all E4M3: blockwise (DeepSeek-V3: 1x128 activation and gradient blocks, 128x128 weight blocks, FP32 scales; GPUs of compute capability 9.0) or mxfp8 (1x32 blocks, power-of-two E8M0 scales rounded up; 10.x). nvfp4 (NVIDIA's FP4 recipe; 10.x): E2M1 values, an E4M3 scale per 16 (weights 16x16) and an FP32 scale per tensor, stochastic rounding of the gradients, a 16-point random Hadamard transform in the weight-gradient GEMM, the last 15% of the layers in BF16. auto: mxfp8 on 10.x, current elsewhere and on the CPU (which emulates every recipe); the choice is printed", NULL, "current|delayed|blockwise|mxfp8|nvfp4|auto"},
    {"fp8-amax-history", F_INT, OFF(fp8_amax_history), "1024", "N", "delayed scaling: steps in each tensor's amax history (1: the last step's amax)", NULL, "[1, inf)"},
    {"fp8-margin", F_INT, OFF(fp8_margin), "0", "M", "delayed scaling: scales are fp8 max / 2^M / amax, leaving room for growth", NULL, "[0, 31]"},
    {"fp8-skip", F_STRING, OFF(fp8_skip), "", "LIST", "GEMMs kept in bf16 with --precision fp8, comma-separated: qkv, attproj, fc, fcproj (in every layer); L, L-M, first, last (every GEMM of those layers, 0-based); GEMM@L or GEMM@L-M. E.g. first,last or fcproj@0-3", NULL, NULL},
    {"attention", F_ENUM, OFF(attention), "auto", NULL, "CUDA attention: cudnn = cuDNN's fused attention (loaded at run time; fails naming why when it cannot), native = our kernels, auto = cuDNN where it loads and supports the shape, else native (the choice is printed). cuDNN runs the training step only: sampling, evaluation and generation run native; TRAIN_GPT_CUDNN_WORKSPACE caps its workspace (default 1G; over it: native). Bit for bit run to run: native always; cudnn on the same GPU, cuDNN version and shapes (its deterministic backward, no atomics: on Hopper and Ampere the heuristics' deterministic engines, on Blackwell the one deterministic engine pinned with its knobs, cuDNN 9.18+; older cuDNN there: cudnn fails, auto runs the backward natively); auto as whichever it ran; the two differ from each other within bf16 rounding", NULL, "auto|cudnn|native"},
    {"threads", F_INT, OFF(threads), "0", "N", "CPU threads per rank; 0: the machine's cores divided by its ranks (OMP_NUM_THREADS also works)", NULL, "[0, 1024]"},

    {"recompute", F_ENUM, OFF(recompute), "none", NULL, "activation recompute: none; selective (recompute layernorm and GELU outputs in backward); full (keep only each layer's input, re-run its forward in backward)", "Memory and planning", "none|selective|full"},
    {"recompute-layers", F_INT, OFF(recompute_layers), "0", "N", "full recompute for the first N layers, the others as --recompute (none or selective)", NULL, "[0, 4096]"},
    {"head-chunks", F_INT, OFF(head_chunks), "0", "N", "run the LM head (its GEMM, softmax, cross-entropy and their gradients, fused) over the B*T rows in N chunks, so that only one chunk of logits exists at a time; chunks are whole multiples of 128 rows, so fewer run when the rows are few; the results are the same bits for any N on the CPU; 0: the planner picks (at most the MLP's (B,T,4C) scratch in logits, at least 1024 rows a chunk)", NULL, "[0, 1048576]"},
    {"plan", F_BOOL, OFF(plan), "0", "", "print the memory bill, the recommended configuration for --gpu and --world-size and its estimated step time (compute, memory-bound bytes per op, communication per collective and link, the exposed part; TRAIN_GPT_PLAN_HBM_GBS, _NVLINK_GBS, _NET_GBS override the GPU's bandwidths in GB/s), then exit: 0 when it fits, 2 when nothing fits (reads no data)", NULL, NULL},
    {"auto", F_BOOL, OFF(auto_plan), "0", "", "train with the planner's recommendation (micro-batch, recompute, precision, ZeRO stage); explicitly set flags win", NULL, NULL},
    {"gpu", F_STRING, OFF(gpu), "", "NAME", "GPU for --plan: h100, h200, b200 or a100 (default: the GPU present, else this CPU)", NULL, NULL},
    {"gpu-mem", F_DOUBLE, OFF(gpu_mem), "0", "GiB", "memory per device for --plan/--auto in GiB (2^30 bytes), instead of --gpu's or the device's free memory", NULL, "[0, inf)"},
    {"world-size", F_INT, OFF(world_size), "0", "N", "ranks for --plan (default: the MPI world under mpirun, else 1)", NULL, "[0, inf)"},
    {"ranks-per-node", F_INT, OFF(ranks_per_node), "0", "N", "ranks per node for --plan (default: the MPI local size under mpirun, else 8)", NULL, "[0, inf)"},
    {"log-dir", F_STRING, OFF(log_dir), "", "DIR", "write DIR/metrics.jsonl: the config, one JSON object per step, validation, telemetry, a summary", "Metrics and fault tolerance", NULL},
    {"telemetry-every", F_INT, OFF(telemetry_every), "100", "N", "GPU telemetry (NVML: utilisation, memory, power, temperature, clocks, throttling) every N steps; 0 disables", NULL, "[0, inf)"},
    {"progress-every", F_DOUBLE, OFF(progress_every), "60", "SECONDS", "a progress line with elapsed time and ETA at most this often; 0 disables", NULL, "[0, inf)"},
    {"peak-tflops", F_DOUBLE, OFF(peak_tflops), "0", "X", "dense peak TFLOP/s of one device for MFU; 0: the GPU table, or the CPU's sgemm measured at start-up", NULL, "[0, inf)"},
    {"max-bad-steps", F_INT, OFF(max_bad_steps), "5", "N", "stop (exit 1) after N skipped steps in a row; 0: never stop", NULL, "[0, inf)"},
    {"spike-z", F_DOUBLE, OFF(spike_z), "5", "Z", "report a loss more than Z standard deviations above the last --spike-window losses; 0 disables", NULL, "[0, inf)"},
    {"spike-window", F_INT, OFF(spike_window), "100", "N", "steps in the loss-spike baseline", NULL, "[2, inf)"},
    {"skip-spikes", F_BOOL, OFF(skip_spikes), "0", "0|1", "also skip the update of a loss-spike step (non-finite steps are always skipped)", NULL, NULL},
    {"on-divergence", F_ENUM, OFF(on_divergence), "stop", NULL, "after --max-bad-steps skipped steps in a row: stop (exit 1), or reload the newest checkpoint (weights, optimizer, guard) and go on with the data that follows", NULL, "stop|rollback"},
    {"max-rollbacks", F_INT, OFF(max_rollbacks), "3", "N", "--on-divergence rollback: stop when the same checkpoint would be reloaded more than N times", NULL, "[1, inf)"},
    {"collective-timeout", F_DOUBLE, OFF(collective_timeout), "600", "SECONDS", "a collective (MPI or NCCL) unfinished after this long aborts every rank with a message naming it; 0: wait for ever", NULL, "[0, inf)"},

    {"zero", F_INT, OFF(zero_stage), "1", "0|1|2|3", "ZeRO stage: 0 replicates everything, 1 shards optimizer state, 2 also gradients, 3 also parameters", "Distributed (mpirun -np N ./train_gpt ...)", "[0, 3]"},
    {"zero3-prefetch", F_INT, OFF(zero3_prefetch), "1", "K", "ZeRO-3: gather the units of the next K uses ahead of them (2 keeps one more layer gathered)", NULL, "[1, 2]"},
    {"shard-scope", F_ENUM, OFF(shard_scope), "world", NULL, "shard over all ranks, or inside each node with gradients all-reduced across nodes (hybrid; ZeRO 1-3)", NULL, "world|node"},
    {"context-parallel", F_INT, OFF(context_parallel), "1", "N", "split every sequence over N consecutive ranks (context parallelism: the sequence in 2N chunks, rank i holding chunks i and 2N-1-i; keys and values all-gathered each layer), N dividing the ranks, the rest data parallelism; a sequence length that is not a multiple of 2N is padded at its end (pads get no loss). CPU backend only for now (the CUDA backend's NCCL path is a later piece of work); no --eval-data, --generate or samples (set --sample-every 0); validation runs split the same way", NULL, "[1, 4096]"},
    {"shard-group", F_INT, OFF(shard_group), "0", "N", "shard over groups of N consecutive ranks and replicate across groups (ZeRO 1-3; N divides the ranks and is a divisor or multiple of the ranks per node); 0: --shard-scope decides", NULL, "[0, inf)"},
    {"allow-nccl-sockets", F_BOOL, OFF(allow_nccl_sockets), "0", "0|1", "on an EFA instance (p4d, p5, p6) of a multi-node run NCCL's TCP sockets between nodes are an error (the aws-ofi-nccl plugin did not load); 1: run on them anyway", NULL, NULL},
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

// ---------------------------------------------------------------------------
// enum values: "a|b|c"

// The index of `value` among the names in "a|b|c", or -1.
static int enum_index(const char* allowed, const char* value) {
    size_t n = strlen(value);
    int index = 0;
    for (const char* p = allowed;; index++) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return index;
        if (!bar) return -1;
        p = bar + 1;
    }
}

// Name number `index` of "a|b|c" into buf; NULL when there is none.
static const char* enum_name(const char* allowed, int index, char* buf, size_t size) {
    const char* p = allowed;
    for (int i = 0; i < index && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p || index < 0) return NULL;
    const char* bar = strchr(p, '|');
    snprintf(buf, size, "%.*s", (int)(bar ? (size_t)(bar - p) : strlen(p)), p);
    return buf;
}

// "a|b|c" as "a, b, c", for messages.
static void enum_list(const char* allowed, char* buf, size_t size) {
    size_t len = 0;
    for (const char* p = allowed; *p && len + 3 < size; p++) {
        if (*p == '|') len += (size_t)snprintf(buf + len, size - len, ", ");
        else buf[len++] = *p;
    }
    buf[len < size ? len : size - 1] = 0;
}

// ---------------------------------------------------------------------------
// ranges: "[lo, hi]", "(lo, hi)", "[lo, inf)", ...

typedef struct {
    double lo, hi;
    int lo_open, hi_open;
} Range;

// A bound: a number, or inf.
static int parse_bound(const char* s, double* out) {
    if (!strcmp(s, "inf")) {
        *out = INFINITY;
        return 1;
    }
    return parse_double(s, out);
}

static Range parse_range(const Flag* f) {
    Range r;
    char open, close;
    char lo[32], hi[32];
    if (sscanf(f->allowed, " %c %31[^, ] , %31[^])] %c", &open, lo, hi, &close) != 4 || (open != '[' && open != '(') ||
        (close != ']' && close != ')') || !parse_bound(lo, &r.lo) || !parse_bound(hi, &r.hi))
        fatal("internal: flag --%s has the malformed range '%s'", f->name, f->allowed);
    r.lo_open = open == '(';
    r.hi_open = close == ')';
    return r;
}

static int in_range(const Range* r, double v) {
    return (r->lo_open ? v > r->lo : v >= r->lo) && (r->hi_open ? v < r->hi : v <= r->hi);
}

// Fatal, in the words the common ranges read best in, when v is outside f's range.
static void check_range(const Flag* f, double v, const char* value, const char* source) {
    Range r = parse_range(f);
    if (in_range(&r, v)) return;
    int integer = f->type != F_DOUBLE;
    if (isinf(r.hi) && r.lo == 0 && !r.lo_open) fatal("%s--%s must not be negative (got %s)", source, f->name, value);
    if (isinf(r.hi) && r.lo == 0) fatal("%s--%s must be positive (got %s)", source, f->name, value);
    if (isinf(r.hi) && !r.lo_open) fatal("%s--%s must be at least %.17g (got %s)", source, f->name, r.lo, value);
    if (integer && !r.lo_open && !r.hi_open && r.hi - r.lo <= 3) {
        char list[64] = "";
        for (long i = (long)r.lo; i <= (long)r.hi; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%ld", i > (long)r.lo ? ", " : "", i);
        fatal("%s--%s %s is not one of %s", source, f->name, value, list);
    }
    if (integer && !r.lo_open && !r.hi_open)
        fatal("%s--%s %s is outside %ld..%ld", source, f->name, value, (long)r.lo, (long)r.hi);
    fatal("%s--%s must be in %s (got %s)", source, f->name, f->allowed, value);
}

// ---------------------------------------------------------------------------
// storing and printing values

// Stores a textual value into the field; fatal with the flag name on a bad value.
static void store(TrainConfig* cfg, const Flag* f, const char* value, const char* source) {
    char* field = (char*)cfg + f->offset;
    long l;
    double d;
    int b;
    int ranged = f->allowed && f->type != F_ENUM;
    switch (f->type) {
    case F_INT:
        if (!parse_long(value, &l) || l < -2147483647L || l > 2147483647L)
            fatal("%s--%s: '%s' is not an integer", source, f->name, value);
        if (ranged) check_range(f, (double)l, value, source);
        *(int*)field = (int)l;
        break;
    case F_LONG:
        if (!parse_long(value, &l)) fatal("%s--%s: '%s' is not an integer", source, f->name, value);
        if (ranged) check_range(f, (double)l, value, source);
        *(long*)field = l;
        break;
    case F_DOUBLE:
        if (!parse_double(value, &d)) fatal("%s--%s: '%s' is not a number", source, f->name, value);
        if (ranged) check_range(f, d, value, source);
        *(double*)field = d;
        break;
    case F_BOOL:
        if (!parse_bool(value, &b)) fatal("%s--%s: '%s' is not a boolean (use 1/0, true/false)", source, f->name, value);
        *(int*)field = b;
        break;
    case F_ENUM: {
        int index = enum_index(f->allowed, value);
        if (index < 0) {
            char list[256];
            enum_list(f->allowed, list, sizeof list);
            fatal("%s--%s '%s' is not one of %s", source, f->name, value, list);
        }
        *(int*)field = index;
        break;
    }
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

const char* config_enum_name(const char* flag, int value) {
    static char bufs[4][64];  // a few at a time, for one message naming several values
    static int next;
    const Flag* f = find_flag(flag);
    if (!f || f->type != F_ENUM) return NULL;
    next = (next + 1) % 4;
    return enum_name(f->allowed, value, bufs[next], sizeof bufs[next]);
}

ResumeMode config_resume_mode(const TrainConfig* cfg) {
    if (!strcmp(cfg->resume, "auto")) return RESUME_AUTO;
    if (!strcmp(cfg->resume, "never")) return RESUME_NEVER;
    return RESUME_DIR;
}

int config_dir_is_auto(const char* value) { return strcmp(value, "auto") == 0; }

static void set_defaults(TrainConfig* cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NUM_FLAGS; i++) store(cfg, &FLAGS[i], FLAGS[i].def, "internal default: ");
    memset(flag_was_set, 0, sizeof flag_was_set);
}

// A field's value as text: enums by name, numbers with every digit.
static void format_value(const TrainConfig* cfg, const Flag* fl, char* buf, size_t size) {
    const char* field = (const char*)cfg + fl->offset;
    switch (fl->type) {
    case F_INT: case F_BOOL: snprintf(buf, size, "%d", *(const int*)field); break;
    case F_LONG: snprintf(buf, size, "%ld", *(const long*)field); break;
    case F_DOUBLE: snprintf(buf, size, "%.17g", *(const double*)field); break;
    case F_STRING: snprintf(buf, size, "%s", *(char* const*)field); break;
    case F_ENUM: {
        char name[64];
        const char* n = enum_name(fl->allowed, *(const int*)field, name, sizeof name);
        snprintf(buf, size, "%s", n ? n : "?");
        break;
    }
    }
}

void config_print_help(FILE* f) {
    fprintf(f,
            "usage: train_gpt [flags]          (mpirun -np N ./train_gpt [flags] for N ranks)\n"
            "\n"
            "Trains a GPT-2 or Llama 3 model. With no flags it trains a small model on the bundled\n"
            "King James Bible corpus (run `make data` once first) and prints samples.\n"
            "Flags take a value as `--flag value` or `--flag=value`; a 0|1 flag given alone means 1.\n"
            "A flag given twice takes its last value, with a warning (from rank 0).\n"
            "[x] is the default; {range} the values a flag accepts.\n");
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* fl = &FLAGS[i];
        if (fl->group) fprintf(f, "\n%s:\n", fl->group);
        const char* metavar = fl->type == F_ENUM ? fl->allowed : fl->metavar;
        char left[64];
        snprintf(left, sizeof left, metavar[0] ? "--%s %s" : "--%s", fl->name, metavar);
        fprintf(f, "  %-28s %s", left, fl->help);
        if (fl->def && fl->def[0] && strcmp(fl->def, "0") != 0) fprintf(f, " [%s]", fl->def);
        if (fl->allowed && fl->type != F_ENUM) fprintf(f, " {%s}", fl->allowed);
        fprintf(f, "\n");
    }
    fprintf(f, "\n  --help                       print this help and exit\n");
}

void config_print(const TrainConfig* cfg, FILE* f, const char* prefix) {
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* fl = &FLAGS[i];
        char value[4096];
        format_value(cfg, fl, value, sizeof value);
        if (fl->type == F_DOUBLE) snprintf(value, sizeof value, "%g", *(const double*)((const char*)cfg + fl->offset));
        fprintf(f, "%s%-16s %s\n", prefix, fl->name, value);
    }
}

int config_num_flags(void) { return NUM_FLAGS; }
const char* config_flag_name(int i) { return FLAGS[i].name; }
int config_flag_is_string(int i) { return FLAGS[i].type == F_STRING || FLAGS[i].type == F_ENUM; }
const char* config_flag_allowed(int i) { return FLAGS[i].allowed; }

void config_flag_value(const TrainConfig* cfg, int i, char* buf, size_t size) { format_value(cfg, &FLAGS[i], buf, size); }

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
        char name[64];
        switch (fl->type) {
        case F_INT: json_int(j, fl->name, *(const int*)field); break;
        case F_BOOL: json_bool(j, fl->name, *(const int*)field); break;
        case F_LONG: json_int(j, fl->name, *(const long*)field); break;
        case F_DOUBLE: json_number(j, fl->name, *(const double*)field); break;
        case F_STRING: json_string(j, fl->name, *(char* const*)field); break;
        case F_ENUM: json_string(j, fl->name, enum_name(fl->allowed, *(const int*)field, name, sizeof name)); break;
        }
    }
}

// ---------------------------------------------------------------------------
// checks across flags

void config_check(const TrainConfig* cfg) {
    // The model's passes count the B x T tokens of a micro-batch in an int.
    if ((int64_t)cfg->micro_batch * cfg->seq_len > INT32_MAX)
        fatal("--micro-batch %d x --seq-len %d = %lld tokens per pass, more than 2^31 - 1", cfg->micro_batch,
              cfg->seq_len, (long long)cfg->micro_batch * cfg->seq_len);
    if (cfg->shard_scope == SHARD_SCOPE_NODE && cfg->zero_stage == 0)
        fatal("--shard-scope node needs --zero 1, 2 or 3 (ZeRO-0 shards nothing)");
    if (cfg->on_divergence == ON_DIVERGENCE_ROLLBACK && !cfg->checkpoint_dir[0])
        fatal("--on-divergence rollback needs checkpoints to go back to, and --checkpoint-dir is empty");
    if (cfg->on_divergence == ON_DIVERGENCE_ROLLBACK && cfg->checkpoint_every <= 0)
        fatal("--on-divergence rollback needs --checkpoint-every above 0 (checkpoints during the run to go back to)");
    if (cfg->on_divergence == ON_DIVERGENCE_ROLLBACK && cfg->max_bad_steps <= 0)
        fatal("--on-divergence rollback needs --max-bad-steps above 0 (with 0 the run never gives up on a step)");
    if (cfg->skip_spikes && cfg->spike_z == 0) fatal("--skip-spikes needs spike detection: set --spike-z above 0");
    if (!cfg->resume[0]) fatal("--resume must be auto, never, or a checkpoint directory");
    if (config_resume_mode(cfg) == RESUME_DIR && !is_dir(cfg->resume))
        fatal("--resume '%s' is not auto, never, or an existing checkpoint directory", cfg->resume);
    if (cfg->auto_plan && !cfg->plan && cfg->gpu[0])
        fatal("--gpu names a GPU for --plan; --auto plans for the device this run trains on (--gpu-mem sets its "
              "memory)");
    // 0, the default, means "from elsewhere"; given, these must be positive.
    if (cfg->context_parallel > 1 && cfg->device == DEVICE_CUDA)
        fatal("--context-parallel %d: the CUDA backend runs only --context-parallel 1 for now (its NCCL path is a "
              "later piece of work); use --device cpu",
              cfg->context_parallel);
    if (config_is_set(cfg, "gpu-mem") && !(cfg->gpu_mem > 0)) fatal("--gpu-mem must be a positive number of GiB");
    if (config_is_set(cfg, "world-size") && cfg->world_size <= 0)
        fatal("--world-size must be positive (got %d)", cfg->world_size);
    if (config_is_set(cfg, "ranks-per-node") && cfg->ranks_per_node <= 0)
        fatal("--ranks-per-node must be positive (got %d)", cfg->ranks_per_node);
    if (cfg->auto_plan && !cfg->plan && config_is_set(cfg, "world-size"))
        fatal("--world-size is for --plan; a training run's world is the number of MPI ranks");
    // --fp8-* only for FP8 runs; under --precision auto once it is resolved (precision_resolve).
    if (cfg->precision != PRECISION_FP8 && cfg->precision != PRECISION_AUTO) {
        const char* fp8_flags[] = {"fp8-recipe", "fp8-amax-history", "fp8-margin", "fp8-skip"};
        for (int i = 0; i < 4; i++)
            if (config_is_set(cfg, fp8_flags[i]))
                fatal("--%s is for FP8 training, but this run trains in %s%s", fp8_flags[i],
                      config_enum_name("precision", cfg->precision),
                      config_is_set(cfg, "precision") ? "" : " (chosen by --precision auto; give --precision fp8)");
    }
}

void config_parse(TrainConfig* cfg, int argc, char** argv) {
    set_defaults(cfg);
    const char* given[NUM_FLAGS] = {0};  // each flag's value on the command line so far
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
        const Flag* f = find_flag(name);
        // Every rank parses the same command line: rank 0 alone says so.
        if (f && given[f - FLAGS] && launcher_info().rank == 0)
            warn("--%s is given twice ('%s', then '%s'): the last wins", name, given[f - FLAGS], value);
        if (f) given[f - FLAGS] = value;
        if (!config_set(cfg, name, value, "")) fatal("unknown flag '--%s' (see --help)", name);
    }
}
