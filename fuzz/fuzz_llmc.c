// fuzz_llmc.c: llm.c model files (llm/checkpoint/llmc_io.c): the header and
// the size it implies; for small shapes also the weights, loaded into a
// model on the CPU backend (their values checked for NaN and infinity).
#include "fuzz/fuzz.h"
#include "llm/checkpoint/llmc_io.h"
#include "llm/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size, ".bin");
    static Backend* be;
    static GPT m;
    static volatile int model_live;
    if (!be) be = cpu_backend_create(DTYPE_F32, 1);
    FUZZ_TRY {
        GPTConfig c;
        llmc_read_config(path, &c);
        if (gpt_num_params(&c) <= 20000 && c.max_seq_len <= 64) {
            int T = c.max_seq_len < 8 ? c.max_seq_len : 8;
            gpt_create(&m, &c, be, 1, T, 1, 0, 0);
            model_live = 1;
            llmc_load_weights(&m, path);
            gpt_free(&m);
            model_live = 0;
        }
    } else {
        fuzz_expect_clean_error(path);
        if (model_live) gpt_free(&m);
        model_live = 0;
    }
    return 0;
}
