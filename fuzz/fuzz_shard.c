// fuzz_shard.c: token shards (data/shard.c), plain or, built as fuzz_shard_zst,
// zstd-compressed: open, validate, read tokens from both ends, close.
#include "data/shard.h"
#include "fuzz/fuzz.h"

#ifndef FUZZ_SUFFIX
#define FUZZ_SUFFIX ".bin"
#endif

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size, FUZZ_SUFFIX);
    static Shard s;
    static int32_t tokens[512];
    FUZZ_TRY {
        shard_open(&s, path);
        size_t n = s.num_tokens < 512 ? (size_t)s.num_tokens : 512;
        if (n) {
            shard_read(&s, 0, n, tokens, 1 << 24);
            shard_read(&s, s.num_tokens - n, n, tokens, 1 << 24);
        }
        shard_close(&s);
    } else {
        fuzz_expect_clean_error(path);
    }
    return 0;
}
