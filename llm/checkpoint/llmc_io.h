// llmc_io.h: model weights in llm.c's file layout, for import and export.
//
// The file is a 256 x int32 header then every parameter in GPT-2 order (each
// per-layer tensor stacked over layers): header[0] = 20240326 (magic),
// [1] = 3 (float32) or 5 (bfloat16), [2] max_seq_len, [3] vocab_size,
// [4] num_layers, [5] num_heads, [6] channels, [7] padded_vocab_size. So
// llm.c users can bring their weights to train_gpt and take ours back.
//
// llm.c's format describes GPT-2 only. A checkpoint of a Llama still holds its
// weights in this layout (model.bin, kind-major, FP32), but under its own magic
// (LLAMA_WEIGHTS_MAGIC, with [8] num_kv_heads, [9] mlp_hidden, [10]
// tie_embeddings), so that neither llm.c nor --init-from reads it as a GPT-2;
// a Llama's weights for other tools are a Hugging Face folder (llm/hf/).
#pragma once

#include "llm/model/model.h"

EXTERN_C_BEGIN

#define LLMC_MODEL_MAGIC 20240326
#define LLMC_VERSION_F32 3
#define LLMC_VERSION_BF16 5
// train_gpt's Llama weights in llm.c's layout (checkpoints' model.bin); not llm.c's.
#define LLAMA_WEIGHTS_MAGIC 20261202

// Reads and validates the header (magic, version, shape, and that the file
// size matches exactly); fills the model configuration.
void llmc_read_config(const char* path, GPTConfig* out);
// Loads the weights into a model created with the file's configuration.
void llmc_load_weights(GPT* m, const char* path);
// Writes the weights (FP32 or BF16 values), atomically: a temporary file,
// fsync, rename.
void llmc_save_weights(const GPT* m, const char* path, DType dtype);
// The same from FP32 values in m's flat layout (e.g. gathered from every rank).
void llmc_write_weights(const GPT* m, const float* flat, const char* path, DType dtype);

// Permutes between the flat layer-major layout and llm.c's order (both FP32,
// both of size m->layout.total; llm.c's order has no padding and so uses a prefix).
void llmc_from_flat(const GPT* m, const float* flat, float* llmc);
void llmc_to_flat(const GPT* m, const float* llmc, float* flat);
// Elements in llm.c's layout (the unpadded sum of tensor sizes).
size_t llmc_num_elements(const GPTConfig* c);
// The 256-int32 header of a model file holding values of `dtype` (F32 or BF16).
void llmc_header(const GPTConfig* c, DType dtype, int32_t h[256]);
// Where each tensor of m->layout starts in llm.c's order (offsets[i] for
// tensor i of m->layout.tensors), for writers that fill the file piecewise.
void llmc_tensor_offsets(const GPT* m, size_t* offsets);

EXTERN_C_END
