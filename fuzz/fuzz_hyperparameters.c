// fuzz_hyperparameters.c: SageMaker's hyperparameters.json onto the flag table
// (llm/platform/sagemaker.c, llm/config.c): types, unknown keys, every
// flag's parser and range; their errors name "hyperparameters.json". Then
// the checks across flags (config_check), whose errors name the flags.
#include "fuzz/fuzz.h"
#include "llm/config.h"
#include "llm/platform/sagemaker.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size, "_hyperparameters.json");
    static TrainConfig cfg;
    static char* argv[] = {"train_gpt", NULL};
    FUZZ_TRY {
        config_parse(&cfg, 1, argv);
        sagemaker_apply_hyperparameters(&cfg, path);
    } else {
        fuzz_expect_clean_error("hyperparameters.json");
        return 0;
    }
    FUZZ_TRY {
        config_check(&cfg);
    } else {
        fuzz_expect_clean_error(NULL);
    }
    config_free(&cfg);
    return 0;
}
