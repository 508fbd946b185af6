// fuzz_tokenizer.c: tokenizer files (data/tokenizer.c): load and check, then
// decode every token and, when the file has merges, encode a line of text.
#include "data/tokenizer.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size, ".bin");
    static Tokenizer tok;
    FUZZ_TRY {
        tokenizer_load(&tok, path);
        char buf[300];
        for (int i = -1; i <= tok.vocab_size; i++) tokenizer_decode_token(&tok, i, buf, sizeof buf);
        static const char text[] = "In the beginning God created the heaven and the earth.\n";
        int32_t* ids = NULL;
        if (tok.encode_index) {  // a decode-only file cannot encode (a documented refusal, not a finding)
            tokenizer_encode(&tok, text, sizeof text - 1, &ids);
            free(ids);
        }
        tokenizer_free(&tok);
    } else {
        fuzz_expect_clean_error(path);
    }
    return 0;
}
