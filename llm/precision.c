// precision.c: resolving --precision auto (see precision.h).
#include "llm/precision.h"

#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "llm/platform/device.h"
#include "kernels/cuda_seam.h"
#include "llm/plan/planner.h"
#include "llm/presets.h"

// Parameters of the model the flags describe (the tokenizer's vocabulary when it is there).
static double model_params(const TrainConfig* cfg) {
    int vocab = tokenizer_vocab_if_present(cfg->tokenizer);
    GPTConfig c = model_config_from_flags(cfg, vocab);
    return (double)gpt_num_params(&c);
}

// The run's precision for the planner's choice (the two enums list fp32, bf16, fp8 alike).
static PrecisionChoice from_plan(Precision p) {
    return p == PREC_FP8 ? PRECISION_FP8 : p == PREC_BF16 ? PRECISION_BF16 : PRECISION_FP32;
}

void precision_resolve(TrainConfig* cfg) {
    if (cfg->precision == PRECISION_AUTO) {
        double params = model_params(cfg);
        int gpu = device_wants_cuda(cfg->device);
        int major = 0, minor = 0;
        if (gpu && cuda_current_compute_capability) cuda_current_compute_capability(&major, &minor);
        int has_fp8 = major * 10 + minor >= 89;
        Precision choice = precision_for_model(params, gpu, has_fp8);
        cfg->precision = from_plan(choice);
        if (!gpu)
            printf("precision | auto: fp32: the CPU backend computes in FP32 (--precision fp8 emulates FP8 GEMMs)\n");
        else if (choice == PREC_FP8)
            printf("precision | auto: fp8: %.2fB parameters, at least the %.1fB from which FP8 is the default\n",
                   params / 1e9, PLAN_FP8_FROM_PARAMS / 1e9);
        else if (params >= PLAN_FP8_FROM_PARAMS)
            printf("precision | auto: bf16: %.2fB parameters would take fp8, but this GPU (compute capability %d.%d) "
                   "has no FP8 tensor cores\n",
                   params / 1e9, major, minor);
        else
            printf("precision | auto: bf16: %.2fB parameters, under the %.1fB from which FP8 is the default\n",
                   params / 1e9, PLAN_FP8_FROM_PARAMS / 1e9);
    }
    config_check(cfg);  // now also the --fp8-* flags against the resolved precision
}
