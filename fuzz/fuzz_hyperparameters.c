// fuzz_hyperparameters.c: SageMaker's hyperparameters.json onto the flag table
// (llm/platform/sagemaker.c, llm/config.c): types, unknown keys, every
// flag's parser and range. Its errors name "hyperparameters.json".
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
        config_check(&cfg);
        config_free(&cfg);
    } else {
        fuzz_expect_clean_error("hyperparameters.json");
    }
    return 0;
}
