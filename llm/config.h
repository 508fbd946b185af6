// config.h: every setting of a training run, and the command line that sets them.
//
// Flags live in one table (config.c) with their type, default and help text:
// the parser, `--help`, the config echo in logs and the mapping of other
// sources (e.g. a hyperparameters file) all read that same table, so a flag
// cannot exist in one place and be missing from another.
#pragma once

#include <stdint.h>

#include "llm/recompute.h"
#include "llm/util/json.h"
#include "llm/util/util.h"

EXTERN_C_BEGIN

// Enum-like flags are parsed once, here: the field holds the index of the
// value's name in the flag's list of allowed values (config.c's FLAGS table),
// so each enum below lists its values in the table's order.
typedef enum { DEVICE_AUTO = 0, DEVICE_CPU, DEVICE_CUDA } DeviceChoice;                  // --device
typedef enum { PRECISION_FP32 = 0, PRECISION_BF16, PRECISION_FP8, PRECISION_AUTO } PrecisionChoice;  // --precision
typedef enum { GRAD_DTYPE_AUTO = 0, GRAD_DTYPE_FP32, GRAD_DTYPE_BF16 } GradDtypeChoice;  // --grad-dtype
typedef enum { ON_DIVERGENCE_STOP = 0, ON_DIVERGENCE_ROLLBACK } DivergenceAction;        // --on-divergence
typedef enum { SHARD_SCOPE_WORLD = 0, SHARD_SCOPE_NODE } ShardScope;                     // --shard-scope
typedef enum { EXPORT_FP32 = 0, EXPORT_BF16 } ExportDtype;                               // --export-dtype
typedef enum { ADAM_DTYPE_FP32 = 0, ADAM_DTYPE_BF16 } AdamDtype;                          // --adam-dtype
typedef enum { MODEL_FORMAT_BOTH = 0, MODEL_FORMAT_HF, MODEL_FORMAT_LLMC } ModelFormat;  // --model-format
typedef enum { ATTENTION_AUTO = 0, ATTENTION_CUDNN, ATTENTION_NATIVE } AttentionChoice;       // --attention
// --recompute is a RecomputeMode (llm/recompute.h) and --fp8-recipe an
// Fp8Recipe (llm/fp8/fp8.h), in the same order (tests/test_config.c checks).
// --resume is a directory or a keyword:
typedef enum { RESUME_AUTO = 0, RESUME_NEVER, RESUME_DIR } ResumeMode;

typedef struct {
    // model
    char* model;          // preset: gpt2-124M|gpt2-350M|gpt2-774M|gpt2-1558M or dN
    int depth;            // llm.c's -e dD: channels 64*D, heads D, layers D
    int layers, channels, heads;
    int vocab_size;       // 0: from the tokenizer file (else GPT-2's 50257)
    int max_seq_len;      // 0: the sequence length (1024 for GPT-2 presets)
    char* init_from;      // llm.c model file, or a Hugging Face model folder
    // Llama (the architecture and its own shape flags)
    int arch;             // --arch: gpt2|llama, an Arch id (llm/arch/arch.h: the F_ENUM order is the registry's)
    int kv_heads;         // 0: the preset's (depth rule: see presets.c)
    int mlp_hidden;       // 0: the preset's
    double rope_theta;
    int rope_scaling;     // Llama 3.1's long-context frequency scaling
    int tie_embeddings;   // 1: LM head = wte; default: the preset's (untied otherwise)
    // data
    char* train_data;     // glob
    char* val_data;       // glob, "" to disable validation
    char* tokenizer;      // vocabulary file for samples ("" to print token ids)
    int shuffle;
    int llmc_compat;      // llm.c's data order and learning-rate schedule
    // batch
    int seq_len;          // T
    int micro_batch;      // B per rank
    long batch_tokens;    // tokens per optimizer step, all ranks; 0: B*T*ranks
    // optimisation
    int steps;
    double lr, lr_final_frac, weight_decay, grad_clip, beta1, beta2, eps;
    AdamDtype adam_dtype;  // storage of AdamW's moments
    int warmup;
    long seed;
    // evaluation and output
    int val_every, val_batches, sample_every, sample_tokens, log_every;
    char* eval_data;      // multiple-choice eval file (llm.c's format), "" for none
    int eval_every;       // steps between evaluations (and at the end); 0: only at the end
    int generate;         // --generate: continue --prompt from the loaded weights, then exit
    char* prompt;         // text (token ids without a tokenizer); "" starts from end-of-text
    double temperature;   // 0: greedy
    int top_k;            // sample among the k most likely tokens; 0: all
    char* export_path;    // final weights in llm.c's layout
    ExportDtype export_dtype;
    char* export_hf;      // final weights as a Hugging Face model folder
    ExportDtype export_hf_dtype;
    // checkpoints
    char* checkpoint_dir; // auto|""|DIR (see checkpoint.h)
    int checkpoint_every; // steps between checkpoints; 0: only at the end and on SIGTERM
    int keep_last;        // complete checkpoints kept; 0: all
    char* resume;         // auto|never|DIR of one checkpoint (config_resume_mode)
    int async_checkpoint; // write checkpoints from a background thread
    char* model_dir;      // final weights go here (--model-format): auto|""|DIR
    ModelFormat model_format;  // what --model-dir holds
    // runtime
    DeviceChoice device;
    AttentionChoice attention;  // CUDA attention (llm/platform/device.h)
    PrecisionChoice precision;  // auto is resolved before the backend opens (llm/precision.h)
    GradDtypeChoice grad_dtype; // gradient accumulation and reduction (trainer_grad_dtype)
    int fp8_recipe;       // an Fp8Recipe (llm/fp8/fp8.h)
    int fp8_amax_history; // delayed scaling: history length
    int fp8_margin;       // delayed scaling: scales leave 2^margin headroom
    char* fp8_skip;       // GEMMs kept in bf16 (fp8_parse_skip)
    // memory and planning
    RecomputeMode recompute;
    int recompute_layers; // full recompute for the first N layers
    int head_chunks;      // LM head row chunks; 0: the planner picks (plan_head_chunks)
    int plan;             // --plan: print the plan and exit
    int auto_plan;        // --auto: train with the plan's recommendation
    char* gpu;            // h100|h200|b200|a100 for --plan ("": the device present)
    double gpu_mem;       // GiB per device; 0: from --gpu or the device
    int world_size;       // ranks for --plan; 0: the MPI world, else 1
    int ranks_per_node;   // 0: the MPI local size, else 8
    // metrics and fault tolerance
    char* log_dir;        // metrics.jsonl goes here; "" for none
    int telemetry_every;  // NVML sample every N steps; 0: off
    double progress_every;  // seconds between progress lines; 0: off
    double peak_tflops;   // dense peak per device for MFU; 0: from the table / measured
    int max_bad_steps;    // stop after N skipped steps in a row; 0: never
    double spike_z;       // loss z-score that counts as a spike; 0: off
    int spike_window;     // steps in the spike baseline
    int skip_spikes;      // skip the update on a spike
    DivergenceAction on_divergence;  // when --max-bad-steps is reached
    int max_rollbacks;    // rollbacks to the same checkpoint before stopping
    double collective_timeout;  // seconds a collective may take; 0: no watchdog
    int threads;          // CPU threads; 0: all cores (shared by the ranks of a machine)
    int cuda_graphs;      // --cuda-graphs off|on (0|1): the training micro-step captured and replayed
    // distributed
    int zero_stage;       // 0..3
    ShardScope shard_scope;
    int shard_group;      // ranks per shard group; 0: from shard_scope
    int context_parallel; // ranks splitting each sequence (--context-parallel); 1: none
    int zero3_prefetch;   // ZeRO-3: units gathered ahead of their use (1 or 2)
    int allow_nccl_sockets;  // let NCCL use TCP sockets between nodes of an EFA instance
} TrainConfig;

// Fills defaults, parses argv (`--flag value` or `--flag=value`), prints help
// and exits 0 on --help; any unknown flag or bad value is fatal, naming it:
// not a number, not one of an enum's values, or outside the flag's range.
void config_parse(TrainConfig* cfg, int argc, char** argv);
// The checks that involve more than one flag (e.g. --shard-scope node needs
// --zero 1..3), fatal naming the flags. Run after every source of flags
// (command line, SageMaker) and again once --precision auto is resolved.
void config_check(const TrainConfig* cfg);
// The name of an enum flag's value ("bf16" for --precision PRECISION_BF16);
// NULL for a flag that is not an enum or a value out of its range.
const char* config_enum_name(const char* flag, int value);
// --resume's keyword, or RESUME_DIR for a checkpoint directory.
ResumeMode config_resume_mode(const TrainConfig* cfg);
// Whether a directory flag (--checkpoint-dir, --model-dir) says "auto".
int config_dir_is_auto(const char* value);
// Sets one flag by name (without the leading dashes) from a string value;
// `source` prefixes error messages (e.g. "hyperparameters.json: ", or "" for
// the command line). Returns 0 if the flag is unknown.
int config_set(TrainConfig* cfg, const char* name, const char* value, const char* source);
// Whether a flag was given explicitly (not left at its default).
int config_is_set(const TrainConfig* cfg, const char* name);
// Whether the flag table has a flag of this name (without the leading dashes).
int config_has_flag(const char* name);
// Prints every flag and its value, one per line with a prefix.
void config_print(const TrainConfig* cfg, FILE* f, const char* prefix);
void config_print_help(FILE* f);
// Every flag as a member of the open JSON object, with its type (number,
// boolean or string), for the metrics log.
void config_write_json(const TrainConfig* cfg, JsonWriter* j);

// The flag table by index, for writers of the whole config (checkpoint
// manifests): the flag's name, whether its value is text, and its value
// written exactly (numbers with every digit, so they read back the same).
int config_num_flags(void);
const char* config_flag_name(int i);
int config_flag_is_string(int i);
// The values the flag accepts, as the table and --help write them: "a|b|c"
// for an enum, a range such as "[0, 1)" for a number; NULL: any value.
const char* config_flag_allowed(int i);
void config_flag_value(const TrainConfig* cfg, int i, char* buf, size_t size);
// Frees the text values (for programs that parse more than one config).
void config_free(TrainConfig* cfg);

EXTERN_C_END
