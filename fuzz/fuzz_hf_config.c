// fuzz_hf_config.c: a Hugging Face folder's config.json (llm/hf/hf_config.c):
// every key's type and value checked, and an accepted config must describe a
// model that the writer (hf_config_json) turns back into the same shape.
#include <sys/stat.h>

#include "fuzz/fuzz.h"
#include "llm/hf/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static char dir[128], path[160];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/train_gpt_fuzz_hf_%d", (int)getpid());
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/config.json", dir);
    }
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    FUZZ_TRY {
        GPTConfig c, back;
        hf_read_config(dir, &c);
        char* json = hf_config_json(&c, DTYPE_BF16, 7);
        f = fopen(path, "wb");
        if (!f || fwrite(json, 1, strlen(json), f) != strlen(json) || fclose(f) != 0) abort();
        free(json);
        hf_read_config(dir, &back);
        if (memcmp(&c, &back, sizeof c) != 0) {
            fprintf(stderr, "fuzz: config.json written from an accepted config reads back differently\n");
            abort();
        }
    } else {
        fuzz_expect_clean_error(path);
    }
    return 0;
}
