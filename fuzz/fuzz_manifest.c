// fuzz_manifest.c: the JSON reader (llm/util/json_read.c) and checkpoint
// manifests (llm/checkpoint/ckpt_manifest.c) from text. A manifest the reader
// accepts must write back to JSON that it accepts again.
#include "fuzz/fuzz.h"
#include "llm/checkpoint/ckpt_manifest.h"
#include "llm/util/json_read.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char err[512];
    JsonValue* v = json_parse((const char*)data, size, err, sizeof err);
    json_value_free(v);
    static Manifest man, again;
    FUZZ_TRY {
        if (manifest_parse((const char*)data, size, &man, err, sizeof err)) {
            char* text = manifest_to_json(&man);
            if (!manifest_parse(text, strlen(text), &again, err, sizeof err)) {
                fprintf(stderr, "fuzz: a manifest written from an accepted one is refused: %s\n", err);
                abort();
            }
            manifest_free(&again);
            free(text);
            manifest_free(&man);
        }
    } else {
        fuzz_expect_clean_error(NULL);
    }
    return 0;
}
