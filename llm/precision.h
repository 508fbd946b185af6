// precision.h: --precision for a training run: fp32, bf16, fp8, or auto (the
// default), which is resolved here, before the backend opens, and says why.
//
// auto follows one rule, the planner's too (precision_for_model in
// llm/plan/planner.h): on a GPU, bf16 for models under 6.5B parameters and fp8
// from 6.5B (the "7B" class: GPT-3's 6.7B shape and our gpt-7B preset count),
// where the GPU has FP8 tensor cores (compute capability 8.9 or newer; else
// bf16); on the CPU backend fp32, since it computes in FP32 (--precision fp8
// asks it to emulate the FP8 GEMMs; there is no bf16 on the CPU).
#pragma once

#include "llm/config.h"

EXTERN_C_BEGIN

// Replaces cfg->precision auto by the choice, printing one line that says
// why; then config_check (--fp8-* flags are only for fp8 runs).
void precision_resolve(TrainConfig* cfg);

EXTERN_C_END
