// config.h: every setting of a training run, and the command line that sets them.
//
// Flags live in one table (config.c) with their type, default and help text:
// the parser, `--help`, the config echo in logs and the mapping of other
// sources (e.g. a hyperparameters file) all read that same table, so a flag
// cannot exist in one place and be missing from another.
#pragma once

#include <stdint.h>

#include "llm/util/json.h"
#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    // model
    char* model;          // preset: gpt2-124M|gpt2-350M|gpt2-774M|gpt2-1558M or dN
    int depth;            // llm.c's -e dD: channels 64*D, heads D, layers D
    int layers, channels, heads;
    int vocab_size;       // 0: from the tokenizer file (else GPT-2's 50257)
    int max_seq_len;      // 0: the sequence length (1024 for GPT-2 presets)
    char* init_from;      // llm.c model file
    // data
    char* train_data;     // glob
    char* val_data;       // glob, "" to disable validation
    char* tokenizer;      // vocabulary file for samples ("" to print token ids)
    int shuffle;
    // batch
    int seq_len;          // T
    int micro_batch;      // B per rank
    long batch_tokens;    // tokens per optimizer step, all ranks; 0: B*T*ranks
    // optimisation
    int steps;
    double lr, lr_final_frac, weight_decay, grad_clip, beta1, beta2, eps;
    int warmup;
    long seed;
    // evaluation and output
    int val_every, val_batches, sample_every, sample_tokens, log_every;
    char* export_path;    // final weights in llm.c's layout
    char* export_dtype;   // fp32|bf16
    // checkpoints
    char* checkpoint_dir; // auto|""|DIR (see checkpoint.h)
    int checkpoint_every; // steps between checkpoints; 0: only at the end and on SIGTERM
    int keep_last;        // complete checkpoints kept; 0: all
    char* resume;         // auto|never|DIR of one checkpoint
    int async_checkpoint; // write checkpoints from a background thread
    char* model_dir;      // final weights (llm.c layout) go here: auto|""|DIR
    // runtime
    char* device;         // auto|cpu|cuda
    char* attention;      // auto|cudnn|native (CUDA attention, llm/platform/device.h)
    char* precision;      // fp32|bf16|fp8|auto (auto is resolved before the backend opens: llm/precision.h)
    char* fp8_recipe;     // current|delayed (llm/fp8/fp8.h)
    int fp8_amax_history; // delayed scaling: history length
    int fp8_margin;       // delayed scaling: scales leave 2^margin headroom
    char* fp8_skip;       // GEMMs kept in bf16 (fp8_parse_skip)
    // memory and planning
    char* recompute;      // none|selective|full
    int recompute_layers; // full recompute for the first N layers
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
    char* on_divergence;  // stop|rollback when --max-bad-steps is reached
    int max_rollbacks;    // rollbacks to the same checkpoint before stopping
    double collective_timeout;  // seconds a collective may take; 0: no watchdog
    int threads;          // CPU threads; 0: all cores (shared by the ranks of a machine)
    // distributed
    int zero_stage;       // 0..3
    char* shard_scope;    // world|node
} TrainConfig;

// Fills defaults, parses argv (`--flag value` or `--flag=value`), prints help
// and exits 0 on --help; any unknown flag or bad value is fatal, naming it.
void config_parse(TrainConfig* cfg, int argc, char** argv);
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
void config_flag_value(const TrainConfig* cfg, int i, char* buf, size_t size);
// Frees the text values (for programs that parse more than one config).
void config_free(TrainConfig* cfg);

EXTERN_C_END
