// ckpt_manifest.h: the manifest of a training checkpoint: what was saved,
// by whom, in which layout, and the size and checksum of every file.
//
// A checkpoint is a directory step_NNNNNNNN/ holding
//   shard_RRRRR_of_WWWWW.bin  one per rank of the shard group (W = the world
//                             the parameter layout is padded for): chunk R
//                             of every unit of the flat parameter space, as
//                             sections of FP32 master weights (the parameters
//                             themselves in FP32 runs), AdamW m and v, and the
//                             16-bit parameters in 16-bit runs
//   model.bin                 every parameter in llm.c's model format (FP32),
//                             usable by other tools on its own
//   manifest.json             written last; its rename is the commit point
//
// The manifest records the layout the shards were cut from (unit
// boundaries, and each tensor's unit and offset inside it), so a checkpoint
// written by N ranks loads on M ranks at any ZeRO stage: every element is
// mapped through (tensor, index within the tensor), never through a flat
// offset whose padding depends on the world size.
//
// FP8 training's scaling state (llm/fp8/fp8.h, Fp8Snapshot) is in the
// manifest's "fp8" object (null in runs without FP8): the recipe and its
// settings, and for delayed scaling the per-tensor scales and amax
// histories. They are the same on every rank and small next to the shards
// (12 floats per layer per history step); non-finite amaxes, which a
// history may hold, are written as the strings "nan", "inf", "-inf".
// Anything per rank would be another named section of the shard files,
// which readers find by name.
#pragma once

#include <stdint.h>

#include "kernels/ops.h"
#include "llm/config.h"
#include "llm/fp8/fp8.h"
#include "llm/model/model.h"
#include "llm/guard.h"

EXTERN_C_BEGIN

#define CKPT_FORMAT "train_gpt checkpoint"
// Version 2: the manifest is sealed (manifest_seal) and its data object
// repeats the position as epoch and window_in_epoch. Version 1 manifests
// (unsealed) are still read.
#define CKPT_VERSION 2
#define CKPT_MANIFEST_NAME "manifest.json"
#define CKPT_WEIGHTS_NAME "model.bin"
#define CKPT_MAX_SECTIONS 8

// A shard file starts with a 4096-byte header (so sections start on a page):
// the 8 bytes "TGSHARD1", then int32 version, shard, shards, units, int64
// values per section, int32 sections; the rest is zero. The manifest gives
// each section's offset.
#define CKPT_SHARD_MAGIC "TGSHARD1"
#define CKPT_SHARD_HEADER_BYTES 4096

// One file of a checkpoint. Fixed size, so ranks can gather them.
typedef struct {
    char name[64];
    int64_t bytes;
    uint64_t xxh3;   // XXH3_64bits of the whole file
    int32_t shard;   // the shard index, or -1 for model.bin
    int32_t unused;
} CkptFileEntry;

// A section of every shard file: `elements` values of one array.
typedef struct {
    char name[16];   // master, adam_m, adam_v, params
    DType dtype;
    int64_t offset;  // bytes from the start of the file
} CkptSection;

// A tensor's place in the saved layout.
typedef struct {
    ParamKind kind;
    int layer;       // -1 for tensors that are not per layer
    int unit;
    int64_t offset;  // elements from the start of its unit
    int64_t elements;
} CkptTensor;

// The training guard's state (llm/guard.h): with --skip-spikes its loss
// window decides which later updates happen, so a resume restores it.
typedef struct {
    int present;
    int window, filled, next;  // the ring of the last losses of updated steps
    double* history;           // (window)
    int bad_in_row, last_skipped_step, last_action;
    long skipped, nonfinite, spikes;
} CkptGuard;

typedef struct {
    int version;
    int step;              // optimizer steps completed; training resumes at this step
    int adam_step;         // AdamW's step counter (bias correction)
    int world;             // ranks of the run that wrote it
    int layout_world;      // ranks the layout is padded for: the number of shards
    int zero_stage;
    char precision[16];    // fp32|bf16 (FP8: see fp8 below)
    uint64_t seed;         // every random draw is a function of (seed, step or position)
    uint64_t data_position;     // the training loader's global window counter
    uint64_t windows_per_epoch; // for information: the data the position refers to
    int64_t tokens_per_step;
    GPTConfig model;
    int num_units;
    int64_t* unit_begin;   // (num_units + 1) in elements, for layout_world
    int num_tensors;
    CkptTensor* tensors;
    int64_t shard_elements;  // values per section in each shard file
    int num_sections;
    CkptSection sections[CKPT_MAX_SECTIONS];
    int num_files;
    CkptFileEntry* files;
    CkptGuard guard;
    int fp8_present;         // the run trained in FP8
    Fp8Snapshot fp8;
    int num_flags;           // the whole config, as text
    char** flag_names;
    char** flag_values;
    int* flag_is_string;
} Manifest;

// Describes the model's current layout: model shape, units, tensors, the
// shard sections (with 16-bit parameters when the model's dtype is not FP32),
// for layout_world = m->layout.world. Files, steps and config are left empty.
void manifest_describe(Manifest* man, const GPT* m);
// Records the whole config (every flag, exact text).
void manifest_set_config(Manifest* man, const TrainConfig* cfg);
void manifest_add_file(Manifest* man, const CkptFileEntry* e);
// Records the guard's state; restores it into a guard set up from this
// run's flags (exactly when the window size is unchanged, else its newest
// losses). Restoring from a manifest without guard state leaves g as it is.
// The _window variant restores the loss window only, and leaves the counters
// as they are (a rollback keeps counting this run's skipped steps).
void manifest_set_guard(Manifest* man, const Guard* g);
void manifest_restore_guard(const Manifest* man, Guard* g);
void manifest_restore_guard_window(const Manifest* man, Guard* g);
// Records the FP8 scaling state (s NULL: a run without FP8); restores it
// into s when the checkpoint has one with the same settings. Returns 1 when
// restored, else 0 with the reason in `why` (no FP8 state in the
// checkpoint, or other settings: s is left as it is, to start afresh).
void manifest_set_fp8(Manifest* man, const Fp8State* s);
int manifest_restore_fp8(const Manifest* man, Fp8State* s, char* why, size_t whysize);
void manifest_free(Manifest* man);

// The manifest as JSON (malloc'ed).
char* manifest_to_json(const Manifest* man);
// Parses and checks a manifest: its seal, types and ranges, and every fact
// it states twice or that follows from others (adam_step against step and
// the guard's skipped steps, the data position against epoch and window,
// units, tensors and sections against the layout rebuilt from its model and
// layout_world, files against the shards); 0 with the problem in `why`.
int manifest_parse(const char* text, size_t len, Manifest* man, char* why, size_t whysize);

// The seal: body (JSON up to its last member, "...},\n") followed by the
// line  "manifest_xxh3": "<XXH3 of body>"  and the closing brace (malloc'ed).
char* manifest_seal(const char* body, size_t len);
// Where the seal line of text starts, or len when it has none.
size_t manifest_seal_offset(const char* text, size_t len);

// Whether a checkpoint with this manifest can be loaded into model m (same
// shape, the same tensors with the same sizes); 0 with the reason otherwise.
int manifest_matches_model(const Manifest* man, const GPT* m, char* why, size_t whysize);

// Index of a section by name, or -1.
int manifest_section(const Manifest* man, const char* name);
// Bytes of a shard file: header plus every section.
int64_t manifest_shard_bytes(const Manifest* man);

// Shard file names: shard_00003_of_00008.bin
void ckpt_shard_name(char* buf, size_t size, int shard, int shards);

EXTERN_C_END
