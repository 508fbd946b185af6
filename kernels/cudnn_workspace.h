// cudnn_workspace.h: how much device memory cuDNN's fused attention may take
// as workspace, in one place for the CUDA backend (kernels/cuda/
// attention_cudnn.cu, which skips an engine that asks for more) and the
// memory planner (llm/plan/planner.c, which bills the same figure without a
// GPU or cuDNN).
//
// Why a limit: cuDNN's deterministic attention backward writes dQ directly
// and may keep dP in its workspace, B * NH * T * T * 2 bytes: 0.4 GB for
// GPT-2 124M (B 16, T 1024), 4.3 GB for one Llama-8B-shaped call at T 8192,
// 34-69 GB at T 16K-32K. Our own kernels need memory linear in T, which is
// what the planner and --auto assume; the limit keeps cuDNN inside a known
// bill, and a shape that needs more runs on our kernels instead.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// The default limit: 1 GiB (GPT-2 124M at B 16 and B 32, T 1024, fit; a
// Llama-8B-shaped backward at T 8192 does not and runs natively).
#define CUDNN_WORKSPACE_DEFAULT ((size_t)1 << 30)
#define CUDNN_WORKSPACE_ENV "TRAIN_GPT_CUDNN_WORKSPACE"

// The limit in bytes: $TRAIN_GPT_CUDNN_WORKSPACE (bytes, or a number with K,
// M or G: 256M, 8G; 0 lets no engine with a workspace run), else the default.
// Fatal, naming the variable, on anything else.
size_t cudnn_workspace_limit(void);

// What cuDNN's attention engines may ask for at this shape, short of asking
// them: the larger of the deterministic backward's dP (B * NH * T * T * 2
// bytes) and an FP32 dQ accumulator with its row sums (B * NH * T * (HS + 1)
// * 4). The planner bills min(this, the limit).
size_t cudnn_attention_workspace_bound(int B, int T, int NH, int HS);

// "1.5 GiB", "384 MiB", "12.5 KiB", "100 bytes" into buf (for the notes).
const char* cudnn_bytes_text(char* buf, size_t size, size_t bytes);

EXTERN_C_END
