// safetensors.h: Hugging Face's safetensors files, read strictly and written.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON (padded
// with spaces to a multiple of 8), then the data region. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte
// offsets into the data region), plus an optional "__metadata__" object of
// string values. The reader trusts nothing: the header length must fit the
// file, the JSON must be one object of such entries, every dtype known, every
// byte length equal to the dtype's size times the shape's product, and the
// tensors must tile the data region exactly (no gap, no overlap, nothing past
// the end). Each problem is one fatal() line naming the file and the tensor.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_NUM_DTYPES } StDtype;
const char* st_dtype_name(StDtype d);  // "F32", "BF16", ...
size_t st_dtype_size(StDtype d);

#define ST_MAX_DIMS 8
// The largest header the reader accepts (the safetensors library's limit).
#define ST_MAX_HEADER (100u << 20)

typedef struct {
    char* name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;  // byte offsets into the data region
} StTensor;

typedef struct {
    char* path;
    int fd;
    uint64_t data_start;  // 8 + header length
    uint64_t file_size;
    StTensor* tensors;    // in header order
    int num_tensors;
} StFile;

// Opens and validates `path`; fatal naming the file and the problem.
void st_open(StFile* f, const char* path);
void st_close(StFile* f);
// The tensor called `name`, or NULL.
const StTensor* st_find(const StFile* f, const char* name);
// Elements of t (the product of its shape; 1 for a scalar).
size_t st_numel(const StTensor* t);
// Reads t's values as float32 into out (st_numel(t) values). F32, F16 and
// BF16 only; any other dtype is fatal naming the file and the tensor.
void st_read_f32(const StFile* f, const StTensor* t, float* out);

// One tensor to write: FP32 values, stored as `dtype` (ST_F32 or ST_BF16).
typedef struct {
    const char* name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const float* data;
} StWriteTensor;

// Writes the tensors (in the given order, contiguous) as one file, atomically
// (a temporary name, fsync, rename). `metadata` is NULL or pairs of strings
// ending with NULL: {"format", "pt", NULL}.
void st_write(const char* path, const StWriteTensor* ts, int n, StDtype dtype, const char* const* metadata);

EXTERN_C_END
