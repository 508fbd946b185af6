// test_safetensors.c: llm/hf/safetensors.c: the writer's files read back
// (F32 and BF16, names, shapes, 8-aligned header, metadata), F16 and BF16
// decoding, and every kind of lying header refused with its own message
// naming the file (lengths, JSON, dtypes, shapes, offsets past the end,
// overlaps, gaps, trailing bytes, duplicates). fatal() is caught with
// set_fatal_jump, so each case checks the exact line a user would see.
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "llm/hf/safetensors.h"
#include "llm/util/utf8.h"
#include "tests/testlib.h"

// Under the sanitizers (fuzz.mk's build/asan/test_safetensors): a reader
// stopped by fatal() leaves its buffers, as the real process does when it
// exits, so leak checking is off (as for the fuzzers).
const char* __asan_default_options(void);
const char* __asan_default_options(void) { return "detect_leaks=0"; }

static char dir[128];
static jmp_buf jump_env;
static char fatal_msg[1024];

static void on_fatal(const char* message) {
    snprintf(fatal_msg, sizeof fatal_msg, "%s", message);
    longjmp(jump_env, 1);
}

// An 8-byte length, `header` (its length as given), then `data_len` bytes.
static const char* raw_file(const char* name, uint64_t len_field, const char* header, size_t data_len) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(len_field >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
    return path;
}
static const char* file_with(const char* name, const char* header, size_t data_len) {
    return raw_file(name, strlen(header), header, data_len);
}

// Opening `path` (and, with read_first, reading its first tensor) must be
// fatal with a message containing the path and `want`.
static void expect_refused(const char* path, const char* want, int read_first) {
    volatile int failed_open = 0;
    fatal_msg[0] = 0;
    StFile f;
    set_fatal_jump(on_fatal);
    if (setjmp(jump_env) == 0) {
        st_open(&f, path);
        if (read_first) {
            float buf[64];
            st_read_f32(&f, &f.tensors[0], buf);
        }
        st_close(&f);
    } else {
        failed_open = 1;
    }
    set_fatal_jump(NULL);
    CHECK(failed_open, "%s was accepted (wanted: %s)", path, want);
    CHECK(strstr(fatal_msg, path) != NULL, "message does not name the file: %s", fatal_msg);
    CHECK(strstr(fatal_msg, want) != NULL, "message '%s' lacks '%s'", fatal_msg, want);
}

static void test_round_trip_f32_bf16(void) {
    float a[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f}, b[3] = {0.1f, 0.2f, 0.3f};
    StWriteTensor ts[2] = {{"x.weight", 2, {2, 3}, a}, {"y.bias", 1, {3}, b}};
    const char* meta[] = {"format", "pt", NULL};
    for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/rt%d.safetensors", dir, k);
        StDtype dt = k ? ST_BF16 : ST_F32;
        st_write(path, ts, 2, dt, meta);
        size_t len;
        uint8_t* raw = (uint8_t*)test_read_file(path, &len);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | raw[i];
        CHECK(n % 8 == 0, "header length %llu is not a multiple of 8", (unsigned long long)n);
        CHECK(strstr((char*)raw + 8, "\"__metadata__\":{\"format\":\"pt\"}") != NULL, "no metadata in rt%d", k);
        CHECK(len == 8 + n + 9 * st_dtype_size(dt), "file is %zu bytes", len);
        free(raw);
        StFile f;
        st_open(&f, path);
        CHECK(f.num_tensors == 2, "%d tensors", f.num_tensors);
        const StTensor* x = st_find(&f, "x.weight");
        const StTensor* y = st_find(&f, "y.bias");
        CHECK(x && y && !st_find(&f, "z"), "names");
        if (x && y) {
            CHECK(x->dtype == dt && x->ndim == 2 && x->shape[0] == 2 && x->shape[1] == 3 && x->begin == 0, "x header");
            CHECK(y->ndim == 1 && y->shape[0] == 3 && y->begin == x->end, "y header");
            float got[6];
            st_read_f32(&f, x, got);
            for (int i = 0; i < 6; i++) CHECK(got[i] == (k ? bf16_to_f32(f32_to_bf16(a[i])) : a[i]), "x[%d] = %g", i, got[i]);
            st_read_f32(&f, y, got);
            for (int i = 0; i < 3; i++) CHECK(got[i] == (k ? bf16_to_f32(f32_to_bf16(b[i])) : b[i]), "y[%d] = %g", i, got[i]);
        }
        st_close(&f);
    }
}

// F16 values by hand: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal), inf.
static void test_f16_decoding(void) {
    const char* h = "{\"h\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]}}";
    char path[512];
    snprintf(path, sizeof path, "%s/f16.safetensors", dir);
    FILE* fp = fopen(path, "wb");
    uint64_t n = strlen(h);
    fwrite(&n, 8, 1, fp);
    fwrite(h, 1, n, fp);
    uint16_t v[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00};
    fwrite(v, 2, 6, fp);
    fclose(fp);
    StFile f;
    st_open(&f, path);
    float got[6];
    st_read_f32(&f, &f.tensors[0], got);
    float want[6] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f, 6.103515625e-5f, INFINITY};
    for (int i = 0; i < 6; i++) CHECK(got[i] == want[i], "f16 value %d: got %g want %g", i, got[i], want[i]);
    st_close(&f);
}

#define ENTRY(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_lying_headers(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    FILE* fp = fopen(path, "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    expect_refused(path, "too short for a safetensors file", 0);
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    expect_refused(path, "no such safetensors file", 0);
    expect_refused(raw_file("huge.st", 1ull << 40, "{}", 0), "header length 1099511627776 is not in 2..", 0);
    expect_refused(raw_file("pastend.st", 4096, "{}", 0), "header length 4096 runs past the end", 0);
    expect_refused(file_with("notjson.st", "{\"a\": ", 0), "header is not valid JSON", 0);
    expect_refused(file_with("array.st", "[1, 2]  ", 0), "does not start with '{'", 0);
    expect_refused(file_with("dtype.st", "{" ENTRY("w", "F33", "[2]", 0, 8) "}", 8), "tensor 'w' has unknown dtype \"F33\"", 0);
    expect_refused(file_with("bytes.st", "{" ENTRY("w", "F32", "[3]", 0, 8) "}", 8),
                   "tensor 'w' spans 8 bytes but dtype F32 and shape of 3 elements need 12", 0);
    expect_refused(file_with("shape.st", "{" ENTRY("w", "F32", "[2, -1]", 0, 8) "}", 8), "tensor 'w' has a bad shape entry 1", 0);
    expect_refused(file_with("noshape.st", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), "tensor 'w' has no \"shape\"", 0);
    expect_refused(file_with("nooffs.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "tensor 'w' has no \"data_offsets\"", 0);
    expect_refused(file_with("past.st", "{" ENTRY("w", "F32", "[4]", 0, 16) "}", 8),
                   "tensor 'w' has data_offsets [0, 16] past the end of the data (8 bytes)", 0);
    expect_refused(file_with("backwards.st", "{" ENTRY("w", "F32", "[0]", 8, 4) "}", 8), "end before they begin", 0);
    expect_refused(file_with("overlap.st", "{" ENTRY("a", "F32", "[2]", 0, 8) "," ENTRY("b", "F32", "[2]", 4, 12) "}", 12),
                   "tensor 'b' (bytes 4..12) overlaps tensor 'a', which ends at 8", 0);
    expect_refused(file_with("gap.st", "{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("b", "F32", "[1]", 8, 12) "}", 12),
                   "gap of 4 bytes before tensor 'b'", 0);
    expect_refused(file_with("trailing.st", "{" ENTRY("a", "F32", "[1]", 0, 4) "}", 12), "cover 4 bytes of data but the file holds 12", 0);
    expect_refused(file_with("dup.st", "{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("a", "F32", "[1]", 4, 8) "}", 8),
                   "names 'a' twice", 0);
    expect_refused(file_with("meta.st", "{\"__metadata__\":{\"format\":1}}", 0), "\"__metadata__\" value 'format' is not a string", 0);
    expect_refused(file_with("entry.st", "{\"w\":[0, 4]}", 0), "header entry 'w' is not an object", 0);
    // Invalid UTF-8 in a __metadata__ key: the safetensors library rejects the header (a Rust str).
    expect_refused(file_with("utf8.st", "{\"__metadata__\":{\"f\xffo\":\"pt\"}}  ", 0),
                   "header is not valid UTF-8 (byte 19 of the header)", 0);
    // A well-formed header with a dtype the model cannot take as weights.
    expect_refused(file_with("int.st", "{" ENTRY("w", "I64", "[1]", 0, 8) "}", 8), "tensor 'w' has dtype I64; weights must be F32, F16 or BF16", 1);
    // And the same shapes told truthfully are accepted (the cases above fail for their lie alone).
    StFile f;
    st_open(&f, file_with("fine.st", "{\"__metadata__\":{\"format\":\"pt\"}," ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("b", "BF16", "[2, 2]", 4, 12) "," ENTRY("e", "F32", "[0]", 12, 12) "}", 12));
    CHECK(f.num_tensors == 3 && st_numel(&f.tensors[1]) == 4 && st_numel(&f.tensors[2]) == 0, "the truthful file");
    st_close(&f);
}

// Strict UTF-8 as Rust's str::from_utf8 and Python's bytes.decode("utf-8"):
// overlong forms, surrogates, code points above U+10FFFF, stray continuation
// bytes and truncated sequences are refused at their first byte.
static void test_utf8(void) {
    static const struct { const char* s; int ok; size_t at; } cases[] = {
        {"plain ascii", 1, 0},         {"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", 1, 0},
        {"\xf4\x8f\xbf\xbf", 1, 0},  // U+10FFFF
        {"ab\xc0\x80", 0, 2},          // overlong NUL
        {"\xe0\x80\xaf", 0, 0},        // overlong '/'
        {"x\xed\xa0\x80", 0, 1},       // a surrogate
        {"\xf4\x90\x80\x80", 0, 0},    // above U+10FFFF
        {"\x80", 0, 0},                // a stray continuation byte
        {"ok\xe2\x82", 0, 2},          // truncated
        {"\xf5\x80\x80\x80", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t at = 999;
        int ok = utf8_valid(cases[i].s, strlen(cases[i].s), &at);
        CHECK(ok == cases[i].ok && (ok || at == cases[i].at), "utf8 case %zu: %d at %zu", i, ok, at);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_safetensors.XXXXXX");
    if (!mkdtemp(dir)) return 2;
    RUN(test_utf8);
    RUN(test_round_trip_f32_bf16);
    RUN(test_f16_decoding);
    RUN(test_lying_headers);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 2;
    return TESTS_DONE();
}
