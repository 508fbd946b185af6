// hf.h: Hugging Face model folders, both ways, for GPT-2 and Llama.
//
// A folder holds config.json and model.safetensors, or shards listed in
// model.safetensors.index.json. `--init-from DIR` reads one into our layout
// (hf_read_config: the model shape; hf_load_weights: the values), and
// `--export-hf DIR` writes one (hf_write_folder) that transformers loads as
// GPT2LMHeadModel or LlamaForCausalLM. hf_config.c reads and writes
// config.json, hf_names.c maps our tensors to Hugging Face's names and
// orientations, hf_io.c moves the values. Every problem is one fatal() line
// naming the file (and the key or the tensor).
#pragma once

#include <stddef.h>

#include "llm/model/model.h"

EXTERN_C_BEGIN

// Whether `path` is to be read as a Hugging Face folder (a directory).
int hf_is_folder(const char* path);

// Fatal when `path` names one of a folder's files (*.safetensors,
// config.json, *index.json) rather than the folder: --init-from takes the folder.
void hf_refuse_folder_file(const char* path);

// config.json of `dir` -> the model shape (gpt_config_finish applied).
// Rejects what the model cannot represent, naming the file and the key.
void hf_read_config(const char* dir, GPTConfig* out);
// config.json for c, as text (malloc'd); `dtype` is torch_dtype's value type;
// eot_id >= 0 (the tokenizer's end-of-text) is written as bos_token_id and
// eos_token_id, as GPT-2's own config does; -1 leaves them out.
char* hf_config_json(const GPTConfig* c, DType dtype, int eot_id);

// One Hugging Face tensor and where it lives in our layout: rows
// [row0, row0 + rows) of our tensor (kind, layer), whose row length is `cols`.
// transpose: Hugging Face stores it (cols, rows) (GPT-2's Conv1D weights).
// A vector (a bias, a norm weight) has rows = 1 and is 1-D in the file.
typedef struct {
    char name[96];
    ParamKind kind;
    int layer;
    int row0, rows, cols;
    int transpose;
    int is_vector;
} HfTensor;

// Every Hugging Face tensor of model c in the order the export writes them;
// *n receives the count. The caller frees the array.
HfTensor* hf_tensor_map(const GPTConfig* c, int* n);
// Whether a tensor in a file may be ignored on import (GPT-2's attn.bias
// masks, a tied lm_head, rotary inv_freq buffers).
int hf_tensor_ignorable(const GPTConfig* c, const char* name);

// Loads the folder's weights into m (created with hf_read_config's shape);
// every rank reads the files, as with llm.c's (gpt_set_params_f32 takes the
// pieces this rank owns).
void hf_load_weights(GPT* m, const char* dir);
// The model files of a folder, as fnmatch patterns in the order an in-place
// write removes them (the files that make a folder load first): config.json,
// llm.c's model.bin, model.safetensors and its shards and index. A new
// --export-hf or --model-dir folder replaces all of these and keeps the rest.
extern const char* const HF_MODEL_FILES[];
// Writes model.safetensors (F32 or BF16 values from m's flat layout) then
// config.json into `dir`, a folder being written (atomic_dir_path).
void hf_write_files(const GPT* m, const float* flat, const char* dir, DType dtype, int eot_id);
// Replaces the folder `dir` with one holding these weights, all at once
// (llm/util/atomic_dir.h): a kill at any moment leaves the old folder or the
// new one. `flag` names the flag in errors.
void hf_write_folder(const GPT* m, const float* flat, const char* dir, DType dtype, int eot_id, const char* flag);

EXTERN_C_END
