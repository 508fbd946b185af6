// precision.c: resolving --precision auto (see precision.h).
#include "llm/precision.h"

#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "llm/platform/device.h"
#include "llm/platform/gpu_info.h"
#include "llm/plan/planner.h"
#include "llm/presets.h"

// Parameters of the model the flags describe (the tokenizer's vocabulary when it is there).
static double model_params(const TrainConfig* cfg) {
    int vocab = tokenizer_vocab_if_present(cfg->tokenizer);
    GPTConfig c = model_config_from_flags(cfg, vocab);
    return (double)gpt_num_params(&c);
}

static void set_precision(TrainConfig* cfg, const char* value) {
    free(cfg->precision);
    cfg->precision = xstrdup(value);
}

void precision_resolve(TrainConfig* cfg) {
    const char* p = cfg->precision;
    if (strcmp(p, "fp32") && strcmp(p, "bf16") && strcmp(p, "fp8") && strcmp(p, "auto"))
        fatal("--precision '%s' is not one of fp32, bf16, fp8, auto", p);
    if (!strcmp(p, "auto")) {
        double params = model_params(cfg);
        int gpu = device_wants_cuda(cfg->device);
        int major = 0, minor = 0;
        if (gpu && cuda_current_compute_capability) cuda_current_compute_capability(&major, &minor);
        int has_fp8 = major * 10 + minor >= 89;
        Precision choice = precision_for_model(params, gpu, has_fp8);
        set_precision(cfg, precision_name(choice));
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
    if (strcmp(cfg->precision, "fp8") != 0) {
        const char* fp8_flags[] = {"fp8-recipe", "fp8-amax-history", "fp8-margin", "fp8-skip"};
        for (int i = 0; i < 4; i++)
            if (config_is_set(cfg, fp8_flags[i]))
                fatal("--%s is for FP8 training, but this run trains in %s%s", fp8_flags[i], cfg->precision,
                      config_is_set(cfg, "precision") ? "" : " (chosen by --precision auto; give --precision fp8)");
    }
}
