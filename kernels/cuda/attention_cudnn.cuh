// attention_cudnn.cuh: causal attention through cuDNN's fused flash attention
// (its backend graph API, loaded at run time with dlopen), and the choice
// between it and the native kernels (--attention auto|cudnn|native).
//
// Shapes follow the attention contract: qkv (B, T, NH + 2*NKV, HS) holds the
// NH query heads, then the NKV key heads, then the NKV value heads of each
// token; query head h reads kv head h / (NH / NKV). out (B, T, NH, HS); lse
// (B, NH, T) FP32, natural log of the sum of exp of the scaled scores (scale
// 1/sqrt(HS)); dqkv has qkv's layout.
#pragma once

#include "kernels/cuda/cuda_backend.cuh"

typedef enum { ATTN_AUTO = 0, ATTN_CUDNN, ATTN_NATIVE } AttentionMode;  // cuda_attention_select's choice

// --attention: fatal on an unknown word. With cudnn, loads cuDNN now and is
// fatal with the reason (library not found, version) when it cannot.
// verbose: print the choice when it is made (rank 0 of a run).
extern "C" void cuda_attention_select(Backend* be, int choice, int verbose);  // 0 auto, 1 cudnn, 2 native

// Whether this forward (backward = 0) or backward call goes to cuDNN: auto
// takes it when cuDNN loads and builds a plan for the shape (and prints the
// choice once, and again if it changes); cudnn is fatal when it cannot,
// naming why; native never. p0..p3: the call's tensors (alignment).
int attention_cudnn_use(Backend* be, int backward, int B, int T, int NH, int NKV, int HS, const void* p0,
                        const void* p1, const void* p2, const void* p3);

// The cuDNN forward and backward (BF16 tensors, FP32 lse). Plans are built
// once per shape and cached; the workspace comes from the backend's scratch
// buffer, reserved at start-up through attention_cudnn_scratch_bytes.
void attention_cudnn_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                             int HS);
void attention_cudnn_backward(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, int B, int T, int NH, int NKV, int HS);

// The scratch the cuDNN path takes at these shapes: the larger of the forward
// plan's workspace and the backward's D (B, NH, T) plus its plan's workspace;
// 0 where the cuDNN path will not run them (--attention native, unsupported
// shape, no library). Builds and caches both plans now, so that the first
// step builds none; called by reserve_scratch after --attention is chosen.
size_t attention_cudnn_scratch_bytes(Backend* be, int B, int T, int NH, int NKV, int HS);

// The loaded library's version (e.g. 91900), 0 if none; why it is absent.
extern "C" size_t attention_cudnn_version(const char** why);
// Whether the last attention call went to cuDNN (for benchmarks' labels).
extern "C" int attention_cudnn_last_used(void);
