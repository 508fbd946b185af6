// test_data.c: tests of the data layer: shards (round trips, 64-bit offsets,
// every rejected input), the dataloader (coverage, determinism, epochs,
// resume, disjoint reads) and the BPE tokenizer (round trips, a hand-worked
// training example, the file format). Fatal errors are tested in forked
// children whose stderr and exit status the parent inspects.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "data/dataloader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "llm/util/rng.h"
#include "llm/util/util.h"
#include "tests/testlib.h"

#ifdef UNDER_ASAN
#include <sanitizer/lsan_interface.h>
#endif

// ---- helpers ------------------------------------------------------------------------------------

static char tmp_dir[256];

static const char* tpath(const char* name) {
    static char bufs[8][512];
    static int next;
    char* b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tmp_dir, name);
    return b;
}

static void write_bytes(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "test setup: cannot write %s\n", path);
        exit(2);
    }
}

// Random non-zero tokens in [1, limit).
static int32_t* random_tokens(uint64_t seed, size_t n, int64_t limit) {
    int32_t* t = (int32_t*)malloc(n * sizeof *t + 1);
    uint64_t key = rng_key(seed, 7, 7);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(1 + rng_below(key, i, (uint64_t)(limit - 1)));
    return t;
}

static char fatal_msg[4096];

// Runs fn(arg) in a child; true when it exited with status 1 after printing a
// "train_gpt: error:" line containing every needle (NULL-terminated list).
// The child's stderr is left in fatal_msg for the failure report.
static int dies_with(void (*fn)(void*), void* arg, ...) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
#ifdef UNDER_ASAN
        __lsan_disable();  // fatal() exits with live buffers on purpose
#endif
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);  // returned: the error was not caught
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while ((got = read(fds[0], fatal_msg + n, sizeof fatal_msg - 1 - n)) > 0) n += (size_t)got;
    fatal_msg[n] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    char* nl = strchr(fatal_msg, '\n');
    if (nl && nl[1] == 0) *nl = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1) return 0;
    if (strncmp(fatal_msg, "train_gpt: error: ", 18) != 0 || strchr(fatal_msg, '\n')) return 0;
    va_list ap;
    va_start(ap, arg);
    const char* needle;
    int ok = 1;
    while ((needle = va_arg(ap, const char*)) != NULL)
        if (!strstr(fatal_msg, needle)) ok = 0;
    va_end(ap);
    return ok;
}

static void open_shard_fn(void* path) {
    Shard s;
    shard_open(&s, (const char*)path);
    shard_close(&s);
}

static void make_header(int32_t* h, int version, uint64_t n) {
    memset(h, 0, SHARD_HEADER_BYTES);
    h[0] = SHARD_MAGIC;
    h[1] = version;
    h[2] = n <= INT32_MAX ? (int32_t)n : -1;
    h[3] = (int32_t)(uint32_t)n;
    h[4] = (int32_t)(uint32_t)(n >> 32);
}

// ---- shards -------------------------------------------------------------------------------------

static void check_roundtrip(const char* name, int version, int64_t limit, size_t n) {
    int32_t* tok = random_tokens((uint64_t)version * 100 + n, n, limit);
    const char* path = tpath(name);
    shard_write(path, tok, n, version);
    Shard s;
    shard_open(&s, path);
    CHECK(s.version == version, "%s: version %d", name, s.version);
    CHECK(s.num_tokens == n, "%s: %llu tokens", name, (unsigned long long)s.num_tokens);
    int32_t* back = (int32_t*)malloc(n * sizeof *back);
    shard_read(&s, 0, n, back, (int)limit);
    CHECK(memcmp(back, tok, n * sizeof *tok) == 0, "%s: tokens differ after round trip", name);
    // An interior slice, to test the start offset.
    shard_read(&s, 1234, 777, back, (int)limit);
    CHECK(memcmp(back, tok + 1234, 777 * sizeof *tok) == 0, "%s: slice at 1234 differs", name);
    shard_close(&s);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!file_exists(tmp), "%s: temporary file left behind", name);
    free(back);
    free(tok);
}

static void test_shard_roundtrip_plain(void) {
    check_roundtrip("v1.bin", SHARD_VERSION_U16, 65536, 10007);
    check_roundtrip("v2.bin", SHARD_VERSION_U32, INT32_MAX, 10007);
    // The files are llm.c's layout byte for byte.
    size_t n;
    uint8_t* d = test_read_file(tpath("v1.bin"), &n);
    int32_t h[5];
    memcpy(h, d, sizeof h);
    CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == 10007, "v1 header %d %d %d", h[0], h[1], h[2]);
    CHECK(n == 1024 + 2 * 10007, "v1 size %zu", n);
    free(d);
    d = test_read_file(tpath("v2.bin"), &n);
    memcpy(h, d, sizeof h);
    CHECK(h[1] == 2 && h[2] == 10007 && h[3] == 10007 && h[4] == 0, "v2 header %d %d %d %d", h[1], h[2], h[3], h[4]);
    CHECK(n == 1024 + 4 * 10007, "v2 size %zu", n);
    int32_t* tok = random_tokens(2 * 100 + 10007, 10007, INT32_MAX);
    int big = 0;
    for (int i = 0; i < 10007; i++) big += tok[i] > 65535;
    CHECK(big > 10000, "v2 test data should use ids above 65535 (%d do)", big);
    free(tok);
    free(d);
}

static void test_shard_roundtrip_zst(void) {
    check_roundtrip("v1.bin.zst", SHARD_VERSION_U16, 65536, 10007);
    check_roundtrip("v2.bin.zst", SHARD_VERSION_U32, INT32_MAX, 10007);
    // Really compressed, and the same bytes as the plain file once decompressed.
    size_t nz, np;
    uint8_t* z = test_read_file(tpath("v1.bin.zst"), &nz);
    uint8_t* p = test_read_file(tpath("v1.bin"), &np);
    CHECK(nz > 4 && z[0] == 0x28 && z[1] == 0xb5 && z[2] == 0x2f && z[3] == 0xfd, "not a zstd frame");
    uint8_t* out = (uint8_t*)malloc(np + 16);
    size_t got = ZSTD_decompress(out, np + 16, z, nz);
    CHECK(!ZSTD_isError(got) && got == np && memcmp(out, p, np) == 0, "zst content differs from the plain shard");
    free(out);
    free(z);
    free(p);
    // An empty shard is valid too.
    shard_write(tpath("empty.bin.zst"), NULL, 0, SHARD_VERSION_U16);
    Shard s;
    shard_open(&s, tpath("empty.bin.zst"));
    CHECK(s.num_tokens == 0, "empty zst shard has %llu tokens", (unsigned long long)s.num_tokens);
    shard_close(&s);
}

// zstd frames without a content size, and several frames back to back (pzstd
// writes those), must decode through the streaming path.
static void test_shard_zst_streaming_variants(void) {
    size_t n = 5000;
    int32_t* tok = random_tokens(42, n, 65536);
    shard_write(tpath("ref.bin"), tok, n, SHARD_VERSION_U16);
    size_t np;
    uint8_t* plain = test_read_file(tpath("ref.bin"), &np);
    ZSTD_CCtx* c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
    size_t cap = ZSTD_compressBound(np) * 2 + 64;
    uint8_t* z = (uint8_t*)malloc(cap);
    size_t nz = ZSTD_compress2(c, z, cap, plain, np);
    CHECK(!ZSTD_isError(nz), "compress failed");
    CHECK(ZSTD_getFrameContentSize(z, nz) == ZSTD_CONTENTSIZE_UNKNOWN, "content size should be absent");
    write_bytes(tpath("nosize.bin.zst"), z, nz);
    ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    size_t half = np / 2 + 1;  // the split lands mid-token
    size_t n1 = ZSTD_compress2(c, z, cap, plain, half);
    size_t n2 = ZSTD_compress2(c, z + n1, cap - n1, plain + half, np - half);
    write_bytes(tpath("frames.bin.zst"), z, n1 + n2);
    const char* names[2] = {"nosize.bin.zst", "frames.bin.zst"};
    int32_t* back = (int32_t*)malloc(n * sizeof *back);
    for (int k = 0; k < 2; k++) {
        Shard s;
        shard_open(&s, tpath(names[k]));
        CHECK(s.num_tokens == n, "%s: %llu tokens", names[k], (unsigned long long)s.num_tokens);
        shard_read(&s, 0, n, back, 65536);
        CHECK(memcmp(back, tok, n * sizeof *tok) == 0, "%s: tokens differ", names[k]);
        shard_close(&s);
    }
    ZSTD_freeCCtx(c);
    free(back);
    free(z);
    free(plain);
    free(tok);
}

typedef struct {
    const char* path;
    uint64_t start;
    size_t count;
    int vocab;
} ReadArgs;

static void read_fn(void* p) {
    ReadArgs* a = (ReadArgs*)p;
    Shard s;
    shard_open(&s, a->path);
    int32_t* out = (int32_t*)malloc((a->count + 1) * sizeof *out);
    shard_read(&s, a->start, a->count, out, a->vocab);
    free(out);
    shard_close(&s);
}

// Positions above 2^31 tokens and 2^32 bytes, through sparse files that cost
// no disk: a valid header, a huge body of zeros, a few known tokens.
static void put_token(int fd, int version, uint64_t index, uint32_t value) {
    uint64_t w = version == 1 ? 2 : 4;
    if (pwrite(fd, &value, (size_t)w, (off_t)(SHARD_HEADER_BYTES + index * w)) != (ssize_t)w) {
        fprintf(stderr, "test setup: pwrite failed: %s\n", strerror(errno));
        exit(2);
    }
}

static int make_sparse_shard(const char* path, int version, uint64_t n) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    int32_t h[SHARD_HEADER_INTS];
    make_header(h, version, n);
    if (fd < 0 || pwrite(fd, h, sizeof h, 0) != (ssize_t)sizeof h ||
        ftruncate(fd, (off_t)(SHARD_HEADER_BYTES + n * (version == 1 ? 2 : 4))) != 0) {
        fprintf(stderr, "test setup: cannot make sparse file %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return fd;
}

static void test_shard_64bit_offsets(void) {
    // uint16, 2^32 + 100 tokens (8 GiB + header): token indices and byte offsets above 2^32.
    uint64_t n = (1ull << 32) + 100;
    const char* path = tpath("huge_v1.bin");
    int fd = make_sparse_shard(path, 1, n);
    uint64_t around[4] = {(1ull << 31) - 1, 1ull << 31, (1ull << 32) + 3, n - 1};
    for (int i = 0; i < 4; i++) put_token(fd, 1, around[i], (uint32_t)(1000 + i));
    close(fd);
    Shard s;
    shard_open(&s, path);
    CHECK(s.num_tokens == n, "huge v1 count %llu", (unsigned long long)s.num_tokens);
    int32_t out[8];
    for (int i = 0; i < 4; i++) {
        shard_read(&s, around[i], 1, out, 4096);
        CHECK(out[0] == 1000 + i, "token %llu: got %d want %d", (unsigned long long)around[i], out[0], 1000 + i);
    }
    shard_read(&s, n - 8, 8, out, 4096);
    CHECK(out[7] == 1003 && out[6] == 0, "tail of the huge shard: %d %d", out[6], out[7]);
    shard_close(&s);
    // A token id check far past 2^32 names the exact position.
    char pos[64];
    snprintf(pos, sizeof pos, "token %llu has id 1003", (unsigned long long)(n - 1));
    ReadArgs ra = {path, n - 4, 4, 1000};
    CHECK(dies_with(read_fn, &ra, path, pos, NULL), "vocab error at the end: %.300s", fatal_msg);

    // Dataloader windows past 2^32 tokens: T = 2^20, the last window starts at (W-1)*T.
    DataLoader dl;
    int T = 1 << 20;
    dataloader_init(&dl, path, "--train-data", T, 4096, 0, 1);
    uint64_t W = (n - 1) / (uint64_t)T;
    CHECK(dl.windows_per_epoch == W, "W %llu want %llu", (unsigned long long)dl.windows_per_epoch, (unsigned long long)W);
    int32_t* in = (int32_t*)malloc((size_t)T * sizeof *in);
    int32_t* tg = (int32_t*)malloc((size_t)T * sizeof *tg);
    fd = open(path, O_RDWR);
    put_token(fd, 1, (W - 1) * (uint64_t)T, 77);
    put_token(fd, 1, (W - 1) * (uint64_t)T + 1, 78);
    put_token(fd, 1, W * (uint64_t)T, 79);
    close(fd);
    dataloader_window(&dl, W - 1, in, tg);
    CHECK(in[0] == 77 && in[1] == 78 && tg[0] == 78 && tg[T - 1] == 79, "last window: %d %d %d %d", in[0], in[1],
          tg[0], tg[T - 1]);
    dataloader_free(&dl);
    free(in);
    free(tg);
    unlink(path);

    // uint32 with the count only in the 64-bit field: 2^31 + 5 tokens (8 GiB).
    n = (1ull << 31) + 5;
    path = tpath("huge_v2.bin");
    fd = make_sparse_shard(path, 2, n);
    put_token(fd, 2, n - 1, 123456789);
    put_token(fd, 2, (1ull << 30) + 7, 99999);  // byte offset just above 2^32
    close(fd);
    shard_open(&s, path);
    CHECK(s.num_tokens == n && s.version == 2, "huge v2 count %llu", (unsigned long long)s.num_tokens);
    shard_read(&s, n - 2, 2, out, INT32_MAX);
    CHECK(out[0] == 0 && out[1] == 123456789, "huge v2 tail: %d %d", out[0], out[1]);
    shard_read(&s, (1ull << 30) + 7, 1, out, INT32_MAX);
    CHECK(out[0] == 99999, "huge v2 at 2^30+7: %d", out[0]);
    shard_close(&s);
    unlink(path);
}

// Writes a plain shard from a header and raw body bytes, for malformed cases.
static void write_raw_shard(const char* path, const int32_t* h, size_t header_bytes, const void* body, size_t body_bytes) {
    uint8_t* d = (uint8_t*)malloc(header_bytes + body_bytes + 1);
    memcpy(d, h, header_bytes);
    if (body_bytes) memcpy(d + header_bytes, body, body_bytes);
    write_bytes(path, d, header_bytes + body_bytes);
    free(d);
}

static void write_zst(const char* path, const void* src, size_t n) {
    size_t cap = ZSTD_compressBound(n);
    uint8_t* z = (uint8_t*)malloc(cap);
    size_t nz = ZSTD_compress(z, cap, src, n, 3);
    write_bytes(path, z, nz);
    free(z);
}

static void test_shard_bad_inputs(void) {
    int32_t h[SHARD_HEADER_INTS];
    uint16_t body[1000];
    for (int i = 0; i < 1000; i++) body[i] = (uint16_t)(1 + i);

    const char* p = tpath("missing.bin");
    CHECK(dies_with(open_shard_fn, (void*)p, p, "cannot open", "No such file", NULL), "missing: %.300s", fatal_msg);

    p = tpath("magic.bin");
    make_header(h, 1, 1000);
    h[0] = 12345;
    write_raw_shard(p, h, sizeof h, body, sizeof body);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "bad magic 12345", "20240520", NULL), "magic: %.300s", fatal_msg);

    p = tpath("version.bin");
    make_header(h, 7, 1000);
    write_raw_shard(p, h, sizeof h, body, sizeof body);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "unsupported version 7", NULL), "version: %.300s", fatal_msg);

    p = tpath("short_header.bin");
    make_header(h, 1, 1000);
    write_raw_shard(p, h, 100, NULL, 0);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "truncated header", "100 bytes", NULL), "header: %.300s", fatal_msg);

    p = tpath("short_body.bin");
    make_header(h, 1, 1000);
    write_raw_shard(p, h, sizeof h, body, sizeof body - 2);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "body size mismatch", "1000 tokens (2000 bytes)", "1998 bytes", NULL),
          "short body: %.300s", fatal_msg);

    p = tpath("long_body.bin");
    make_header(h, 1, 999);
    write_raw_shard(p, h, sizeof h, body, sizeof body);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "body size mismatch", "(1998 bytes)", "2000 bytes", NULL),
          "long body: %.300s", fatal_msg);

    // The same checks after decompression.
    uint8_t raw[SHARD_HEADER_BYTES + sizeof body];
    make_header(h, 1, 1000);
    memcpy(raw, h, sizeof h);
    memcpy(raw + sizeof h, body, sizeof body);
    p = tpath("short_body.bin.zst");
    write_zst(p, raw, sizeof raw - 3);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "body size mismatch", "2000 bytes", "1997 bytes", NULL),
          "zst short body: %.300s", fatal_msg);
    p = tpath("header_only.bin.zst");  // the frame says 1024 bytes: no room grows from nothing
    write_zst(p, raw, SHARD_HEADER_BYTES);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "body size mismatch", "2000 bytes", "has 0 bytes", NULL),
          "zst header only: %.300s", fatal_msg);
    p = tpath("short_header.bin.zst");
    write_zst(p, raw, 200);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "truncated header", NULL), "zst header: %.300s", fatal_msg);
    p = tpath("magic.bin.zst");
    h[0] = 1;
    memcpy(raw, h, sizeof h);
    write_zst(p, raw, sizeof raw);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "bad magic 1", NULL), "zst magic: %.300s", fatal_msg);

    // Corrupt zstd: not zstd at all, cut short, and a flipped byte (the checksum catches it).
    p = tpath("notzstd.bin.zst");
    write_bytes(p, "hello, this is not zstd", 23);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "corrupt zstd stream", NULL), "not zstd: %.300s", fatal_msg);
    int32_t* tok = random_tokens(5, 20000, 65536);
    shard_write(tpath("good.bin.zst"), tok, 20000, 1);
    size_t nz;
    uint8_t* z = test_read_file(tpath("good.bin.zst"), &nz);
    p = tpath("cut.bin.zst");
    write_bytes(p, z, nz - 10);
    CHECK(dies_with(open_shard_fn, (void*)p, p, "corrupt zstd stream", "truncated", NULL), "cut: %.300s", fatal_msg);
    z[nz / 2] ^= 0x5a;
    p = tpath("flipped.bin.zst");
    write_bytes(p, z, nz);
    // The error zstd itself reports for these bytes must appear in the message.
    uint8_t* scratch = (uint8_t*)malloc(SHARD_HEADER_BYTES + 2 * 20000 + 64);
    size_t r = ZSTD_decompress(scratch, SHARD_HEADER_BYTES + 2 * 20000 + 64, z, nz);
    CHECK(ZSTD_isError(r), "the flipped byte should be detected by zstd");
    if (ZSTD_isError(r))
        CHECK(dies_with(open_shard_fn, (void*)p, p, "corrupt zstd stream", ZSTD_getErrorName(r), NULL), "flipped: %.300s",
              fatal_msg);
    free(scratch);
    free(z);
    free(tok);

    // Token ids at or above the vocabulary size, plain and compressed.
    uint16_t body2[100];
    for (int i = 0; i < 100; i++) body2[i] = (uint16_t)(1 + i % 50);
    body2[73] = 5000;
    make_header(h, 1, 100);
    p = tpath("vocab.bin");
    write_raw_shard(p, h, sizeof h, body2, sizeof body2);
    ReadArgs ra = {p, 10, 90, 5000};
    CHECK(dies_with(read_fn, &ra, p, "token 73 has id 5000", "vocabulary size 5000", NULL), "vocab: %.300s", fatal_msg);
    memcpy(raw, h, sizeof h);
    memcpy(raw + sizeof h, body2, sizeof body2);
    p = tpath("vocab.bin.zst");
    write_zst(p, raw, sizeof h + sizeof body2);
    ReadArgs rz = {p, 0, 100, 4096};
    CHECK(dies_with(read_fn, &rz, p, "token 73 has id 5000", NULL), "zst vocab: %.300s", fatal_msg);
    ReadArgs edge = {tpath("vocab.bin"), 0, 73, 50};  // id 50 (at 49) is not below a vocabulary of 50
    CHECK(dies_with(read_fn, &edge, "token 49 has id 50", NULL), "boundary id: %.300s", fatal_msg);
    ReadArgs past = {tpath("vocab.bin"), 95, 6, 0};
    CHECK(dies_with(read_fn, &past, "past its end", "[95, 101)", NULL), "past end: %.300s", fatal_msg);
}

static void write_v1_big_token(void* p) {
    int32_t t[3] = {1, 70000, 2};
    shard_write((const char*)p, t, 3, SHARD_VERSION_U16);
}

static void glob_none(void* p) {
    int n;
    char** paths = glob_paths((const char*)p, "--val-data", &n);
    free_paths(paths, n);
}

static void test_shard_write_and_glob(void) {
    const char* p = tpath("toolarge.bin");
    CHECK(dies_with(write_v1_big_token, (void*)p, p, "token 1 = 70000", NULL), "v1 overflow: %.300s", fatal_msg);
    CHECK(!file_exists(p), "a rejected shard must not be written");
    mkdir(tpath("g"), 0755);
    const char* names[3] = {"g/c_002.bin", "g/a_000.bin", "g/b_001.bin"};
    int32_t t[4] = {1, 2, 3, 4};
    for (int i = 0; i < 3; i++) shard_write(tpath(names[i]), t, 4, 1);
    int n;
    char** paths = glob_paths(tpath("g/*.bin"), "--train-data", &n);
    CHECK(n == 3, "glob found %d", n);
    if (n == 3)
        CHECK(strstr(paths[0], "a_000") && strstr(paths[1], "b_001") && strstr(paths[2], "c_002"), "not sorted: %s %s %s",
              paths[0], paths[1], paths[2]);
    free_paths(paths, n);
    const char* pat = tpath("g/*.nothing");
    CHECK(dies_with(glob_none, (void*)pat, "no files match", pat, "(--val-data)", NULL), "glob: %.300s", fatal_msg);
}

// ---- dataloader ---------------------------------------------------------------------------------

// Shards whose token at position i of shard s is 1 + s * 100000 + i, so a
// window's first token says exactly where it came from.
static const int dl_lengths[4] = {1000, 257, 3001, 16};  // the last one holds no window at T = 16
#define DL_T 16
#define DL_VOCAB 400000

static void make_dl_shards(const char* sub, int zst) {
    mkdir(tpath(sub), 0755);
    for (int s = 0; s < 4; s++) {
        int32_t* t = (int32_t*)malloc((size_t)dl_lengths[s] * sizeof *t);
        for (int i = 0; i < dl_lengths[s]; i++) t[i] = 1 + s * 100000 + i;
        char name[96];
        snprintf(name, sizeof name, "%s/shard_%d.bin%s", sub, s, zst && s == 1 ? ".zst" : "");
        shard_write(tpath(name), t, (uint64_t)dl_lengths[s], SHARD_VERSION_U32);
        free(t);
    }
}

static uint64_t expected_windows(void) {
    uint64_t w = 0;
    for (int s = 0; s < 4; s++) w += (uint64_t)(dl_lengths[s] - 1) / DL_T;
    return w;
}

// Decodes (shard, window) from a window and checks inputs/targets are T+1 consecutive tokens.
static int window_id(const int32_t* in, const int32_t* tg, int* ok) {
    int v = in[0] - 1, s = v / 100000, pos = v % 100000;
    *ok = s >= 0 && s < 4 && pos % DL_T == 0 && pos + DL_T + 1 <= dl_lengths[s];
    for (int k = 0; k < DL_T; k++) *ok &= in[k] == in[0] + k && tg[k] == in[0] + k + 1;
    return s * 1000 + pos / DL_T;
}

static void epoch_ids(DataLoader* dl, uint64_t epoch, int* ids) {
    int32_t in[DL_T], tg[DL_T];
    uint64_t W = dl->windows_per_epoch;
    for (uint64_t i = 0; i < W; i++) {
        int ok;
        dataloader_window(dl, epoch * W + i, in, tg);
        ids[i] = window_id(in, tg, &ok);
        if (!ok) ids[i] = -1;
    }
}

static void test_dataloader_epoch_coverage(void) {
    make_dl_shards("dl", 1);
    const char* pattern = tpath("dl/shard_*");
    uint64_t W = expected_windows();
    int* ids = (int*)malloc(W * sizeof *ids);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        DataLoader dl;
        dataloader_init(&dl, pattern, "--train-data", DL_T, DL_VOCAB, shuffle, 1234);
        CHECK(dl.num_shards == 4 && dl.windows_per_epoch == W, "shards %d W %llu want %llu", dl.num_shards,
              (unsigned long long)dl.windows_per_epoch, (unsigned long long)W);
        for (uint64_t e = 0; e < 3; e++) {
            epoch_ids(&dl, e, ids);
            int seen[4000] = {0}, bad = 0, dup = 0, in_order = 1;
            for (uint64_t i = 0; i < W; i++) {
                if (ids[i] < 0) bad++;
                else if (seen[ids[i]]++) dup++;
                if (i > 0 && ids[i] <= ids[i - 1]) in_order = 0;
            }
            CHECK(bad == 0 && dup == 0, "shuffle %d epoch %llu: %d malformed, %d repeated windows", shuffle,
                  (unsigned long long)e, bad, dup);
            // Without shuffle: sorted shards, windows in file order; with it, not.
            CHECK(in_order == !shuffle, "shuffle %d epoch %llu: in_order %d", shuffle, (unsigned long long)e, in_order);
        }
        dataloader_free(&dl);
    }
    free(ids);
}

// True when shard s's windows come in the same relative order in both epochs.
static int same_shard_order(const int* x, const int* y, uint64_t W, int s) {
    uint64_t i = 0, j = 0;
    for (;;) {
        while (i < W && x[i] / 1000 != s) i++;
        while (j < W && y[j] / 1000 != s) j++;
        if (i == W || j == W) return i == W && j == W;
        if (x[i++] != y[j++]) return 0;
    }
}

static void test_dataloader_determinism(void) {
    const char* pattern = tpath("dl/shard_*");
    uint64_t W = expected_windows();
    int *a = (int*)malloc(W * sizeof *a), *b = (int*)malloc(W * sizeof *b), *c = (int*)malloc(W * sizeof *c);
    DataLoader d1, d2, d3;
    dataloader_init(&d1, pattern, "--train-data", DL_T, DL_VOCAB, 1, 7);
    dataloader_init(&d2, pattern, "--train-data", DL_T, DL_VOCAB, 1, 7);
    dataloader_init(&d3, pattern, "--train-data", DL_T, DL_VOCAB, 1, 8);
    int first_shard_changes = 0, prev_first = -1;
    for (uint64_t e = 0; e < 6; e++) {
        epoch_ids(&d1, e, a);
        epoch_ids(&d2, e, b);
        epoch_ids(&d3, e, c);
        CHECK(memcmp(a, b, W * sizeof *a) == 0, "same seed, epoch %llu: orders differ", (unsigned long long)e);
        CHECK(memcmp(a, c, W * sizeof *a) != 0, "seeds 7 and 8 gave the same order in epoch %llu", (unsigned long long)e);
        if (e > 0) {  // each shard's own window order changes from epoch to epoch too
            int* prev = (int*)malloc(W * sizeof *prev);
            epoch_ids(&d2, e - 1, prev);
            for (int s = 0; s < 3; s++)
                CHECK(!same_shard_order(prev, a, W, s), "shard %d has the same window order in epochs %llu and %llu", s,
                      (unsigned long long)e - 1, (unsigned long long)e);
            free(prev);
        }
        int first = a[0] / 1000;
        if (prev_first >= 0 && first != prev_first) first_shard_changes++;
        prev_first = first;
        if (e == 1) {
            epoch_ids(&d2, 0, b);
            CHECK(memcmp(a, b, W * sizeof *a) != 0, "epochs 0 and 1 have the same order");
        }
    }
    CHECK(first_shard_changes > 0, "the shard order never changed across 6 epochs");
    dataloader_free(&d1);
    dataloader_free(&d2);
    dataloader_free(&d3);
    free(a);
    free(b);
    free(c);
}

static void test_dataloader_read_across_epochs(void) {
    DataLoader dl;
    dataloader_init(&dl, tpath("dl/shard_*"), "--train-data", DL_T, DL_VOCAB, 1, 99);
    uint64_t W = dl.windows_per_epoch;
    enum { N = 9 };
    int32_t in[N * DL_T], tg[N * DL_T], in1[DL_T], tg1[DL_T];
    uint64_t first = W - 4;
    dataloader_set_position(&dl, 3);
    dataloader_read(&dl, first, N, in, tg);
    CHECK(dataloader_position(&dl) == 3, "dataloader_read moved the position");
    // Reading back and forth across the boundary must give the same windows.
    for (int pass = 0; pass < 2; pass++) {
        for (int k = N - 1; k >= 0; k--) {
            dataloader_window(&dl, first + (uint64_t)k, in1, tg1);
            CHECK(memcmp(in1, in + k * DL_T, sizeof in1) == 0 && memcmp(tg1, tg + k * DL_T, sizeof tg1) == 0,
                  "window %llu differs between read and window (pass %d)", (unsigned long long)(first + k), pass);
        }
    }
    // The windows after the boundary are epoch 1's first ones.
    int* ids = (int*)malloc(W * sizeof *ids);
    epoch_ids(&dl, 1, ids);
    for (int k = 4; k < N; k++) {
        int ok;
        int id = window_id(in + k * DL_T, tg + k * DL_T, &ok);
        CHECK(ok && id == ids[k - 4], "window %d after the boundary is %d, epoch 1 starts with %d", k - 4, id, ids[k - 4]);
    }
    CHECK(dataloader_epoch(&dl) == 0, "epoch at position 3");
    dataloader_set_position(&dl, 2 * W + 1);
    CHECK(dataloader_epoch(&dl) == 2, "epoch at 2W+1");
    free(ids);
    dataloader_free(&dl);
}

static void test_dataloader_resume_and_disjoint(void) {
    const char* pattern = tpath("dl/shard_*");
    DataLoader a, b;
    dataloader_init(&a, pattern, "--train-data", DL_T, DL_VOCAB, 1, 5);
    uint64_t W = a.windows_per_epoch;
    // Three ranks consume global batches of G = 6 windows, two each: over an epoch
    // every window's first token is seen exactly once (no overlap between ranks).
    enum { G = 6, RANKS = 3 };
    int per = G / RANKS;
    char* seen = (char*)calloc(4000, 1);
    int overlaps = 0, malformed = 0;
    uint64_t g = 0;
    int32_t in[G * DL_T], tg[G * DL_T];
    for (; g + G <= W; g += G) {
        for (int r = 0; r < RANKS; r++) {
            dataloader_read(&a, g + (uint64_t)(r * per), per, in + r * per * DL_T, tg + r * per * DL_T);
            for (int k = 0; k < per; k++) {
                int ok, id = window_id(in + (r * per + k) * DL_T, tg + (r * per + k) * DL_T, &ok);
                if (!ok) malformed++;
                else if (seen[id]++) overlaps++;
            }
        }
        dataloader_set_position(&a, g + G);
    }
    CHECK(malformed == 0 && overlaps == 0, "%d malformed, %d overlapping windows across ranks", malformed, overlaps);
    // Save, restore into a fresh loader, and read on across the epoch boundary.
    uint64_t saved = dataloader_position(&a);
    CHECK(saved == g, "position %llu want %llu", (unsigned long long)saved, (unsigned long long)g);
    dataloader_init(&b, pattern, "--train-data", DL_T, DL_VOCAB, 1, 5);
    dataloader_set_position(&b, saved);
    int32_t in2[G * DL_T], tg2[G * DL_T];
    for (int step = 0; step < 5; step++) {
        uint64_t p = dataloader_position(&a);
        CHECK(p == dataloader_position(&b), "positions diverged");
        dataloader_read(&a, p, G, in, tg);
        dataloader_read(&b, p, G, in2, tg2);
        CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0, "resumed loader differs at step %d", step);
        dataloader_set_position(&a, p + G);
        dataloader_set_position(&b, p + G);
    }
    free(seen);
    dataloader_free(&a);
    dataloader_free(&b);
}

typedef struct {
    const char* pattern;
    int T, vocab;
} DlArgs;

static void dl_init_read_fn(void* p) {
    DlArgs* a = (DlArgs*)p;
    DataLoader dl;
    dataloader_init(&dl, a->pattern, "--train-data", a->T, a->vocab, 1, 1);
    int32_t* in = (int32_t*)malloc((size_t)a->T * sizeof *in);
    int32_t* tg = (int32_t*)malloc((size_t)a->T * sizeof *tg);
    for (uint64_t g = 0; g < dl.windows_per_epoch; g++) dataloader_window(&dl, g, in, tg);
    free(in);
    free(tg);
    dataloader_free(&dl);
}

static void test_dataloader_errors(void) {
    DlArgs longT = {tpath("dl/shard_*"), 3001, DL_VOCAB};
    CHECK(dies_with(dl_init_read_fn, &longT, "sequence length T=3001 is longer than the data", longT.pattern,
                    "(--train-data)", "no shard holds T+1 tokens", NULL),
          "long T: %.300s", fatal_msg);
    DlArgs fits = {tpath("dl/shard_*"), 3000, DL_VOCAB};  // exactly one window in the longest shard
    CHECK(dies_with(dl_init_read_fn, &fits, NULL) == 0 && strstr(fatal_msg, "error") == NULL,
          "T=3000 should fit: %.300s", fatal_msg);
    DlArgs none = {tpath("dl/nothing_*"), 16, DL_VOCAB};
    CHECK(dies_with(dl_init_read_fn, &none, "no files match", "(--train-data)", NULL), "no match: %.300s", fatal_msg);
    DlArgs vocab = {tpath("dl/shard_*"), 16, 200500};  // shard 2 holds ids 200001..203001
    CHECK(dies_with(dl_init_read_fn, &vocab, "shard_2.bin", "not below the vocabulary size 200500", NULL), "vocab: %.300s",
          fatal_msg);
}

// ---- tokenizer ----------------------------------------------------------------------------------

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// English-like text: words of 1-3 syllables (some UTF-8), numbers and
// punctuation, from a fixed seed.
static char* sample_text(size_t target, size_t* len) {
    static const char* syl[] = {"the", "an", "d", "lo", "rd", "un", "to", "he", "sh", "all", "in", "em", "sa", "id",
                                "thou", "y", "ca", "fé", "na", "ïve", "ü", "ber", "日本", "語", "🙂", "Ω", "me", "ga",
                                "Is", "ra", "el", "ki", "ng"};
    static const char* seps[] = {" ", " ", " ", " ", " ", ", ", ". ", ";\n", ":\n\n", "  ", "\t", " 1611 ", " 42, "};
    enum { NSYL = sizeof syl / sizeof syl[0], NSEP = sizeof seps / sizeof seps[0] };
    char* t = (char*)malloc(target + 64);
    size_t n = 0;
    uint64_t key = rng_key(3, 1, 4);
    for (uint64_t i = 0; n < target; i++) {
        int k = 1 + (int)rng_below(key, 5 * i, 3);
        for (int j = 0; j < k; j++) n += (size_t)sprintf(t + n, "%s", syl[rng_below(key, 5 * i + 1 + (uint64_t)j, NSYL)]);
        n += (size_t)sprintf(t + n, "%s", seps[rng_below(key, 5 * i + 4, NSEP)]);
    }
    *len = n;
    return t;
}

static char* decode_all(const Tokenizer* tok, const int32_t* ids, size_t n, size_t* len) {
    size_t cap = 16;
    for (size_t i = 0; i < n; i++) cap += (size_t)(ids[i] >= 0 && ids[i] < tok->vocab_size ? tok->len[ids[i]] : 0);
    char* out = (char*)malloc(cap);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += tokenizer_decode_token(tok, ids[i], out + k, cap - k);
    *len = k;
    return out;
}

static int roundtrips(const Tokenizer* tok, const char* text, size_t len, size_t* num_tokens) {
    int32_t* ids;
    size_t n = tokenizer_encode(tok, text, len, &ids);
    size_t back_len;
    char* back = decode_all(tok, ids, n, &back_len);
    int ok = back_len == len && (len == 0 || memcmp(back, text, len) == 0);
    for (size_t i = 0; i < n; i++) ok &= ids[i] >= 0 && ids[i] < tok->vocab_size && ids[i] != tok->eot;
    if (num_tokens) *num_tokens = n;
    free(back);
    free(ids);
    return ok;
}

// The definition of BPE encoding for one piece: apply merge 0, then 1, ... each
// to every non-overlapping occurrence, left to right.
static int encodes_like_merge_order(const Tokenizer* tok, const char* piece, size_t n) {
    int32_t sym[64];
    size_t m = n;
    for (size_t k = 0; k < n; k++) sym[k] = (uint8_t)piece[k];
    for (int r = 0; r < tok->num_merges; r++) {
        size_t out = 0;
        for (size_t k = 0; k < m; k++) {
            if (k + 1 < m && sym[k] == tok->merges[2 * r] && sym[k + 1] == tok->merges[2 * r + 1]) {
                sym[out++] = 256 + r;
                k++;
            } else {
                sym[out++] = sym[k];
            }
        }
        m = out;
    }
    int32_t* ids;
    size_t got = tokenizer_encode(tok, piece, n, &ids);
    int same = got == m && memcmp(ids, sym, m * sizeof *ids) == 0;
    free(ids);
    return same;
}

static void test_tokenizer_roundtrip(void) {
    size_t len;
    char* text = sample_text(200000, &len);
    Tokenizer tok;
    tokenizer_train(&tok, text, len, 600, 0);
    CHECK(tok.vocab_size == 600 && tok.eot == 599 && tok.num_merges == 343, "vocab %d eot %d merges %d", tok.vocab_size,
          tok.eot, tok.num_merges);
    size_t n;
    CHECK(roundtrips(&tok, text, len, &n), "training text does not round trip");
    CHECK(n * 2 < len, "BPE should compress the training text: %zu tokens for %zu bytes", n, len);
    const char* utf8 = "Héllo wörld — 日本語のテキスト, emoji 🙂🚀 and Ωmega; naïve café.\n";
    CHECK(roundtrips(&tok, utf8, strlen(utf8), NULL), "UTF-8 text does not round trip");
    // Arbitrary bytes: every value, 0x00 and 0xff included, then random ones.
    char bytes[4096];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i;
    uint64_t key = rng_key(11, 0, 0);
    for (int i = 256; i < 4096; i++) bytes[i] = (char)rng_below(key, (uint64_t)i, 256);
    bytes[1000] = 0;
    bytes[1001] = (char)0xff;
    CHECK(roundtrips(&tok, bytes, sizeof bytes, NULL), "arbitrary bytes do not round trip");
    CHECK(roundtrips(&tok, "", 0, &n) && n == 0, "empty text");
    char out[32];
    size_t m = tokenizer_decode_token(&tok, tok.eot, out, sizeof out);
    CHECK(m == 13 && memcmp(out, "<|endoftext|>", 13) == 0, "eot decodes as %.*s", (int)m, out);
    CHECK(tokenizer_decode_token(&tok, tok.vocab_size, out, sizeof out) == 0 &&
              tokenizer_decode_token(&tok, -1, out, sizeof out) == 0,
          "out-of-range ids must decode as nothing");
    // A merge never crosses a piece boundary: no token holds a letter then a space.
    int crossing = 0;
    for (int id = 256; id < tok.eot; id++)
        for (int k = 0; k + 1 < tok.len[id]; k++)
            if (!is_space(tok.bytes[id][k]) && is_space(tok.bytes[id][k + 1])) crossing++;
    CHECK(crossing == 0, "%d tokens span a word and the space after it", crossing);
    // Encoding is by merge rank, which must equal applying every merge in
    // training order: check single-piece words against that definition.
    int mismatches = 0;
    for (int w = 0; w < 300; w++) {
        size_t off = (size_t)rng_below(key, 10000 + (uint64_t)w, len - 40), wl = 0;
        char word[48];
        word[wl++] = ' ';
        while (off < len && wl < 40 && !is_space((uint8_t)text[off]) && (uint8_t)text[off] >= 'A') word[wl++] = text[off++];
        mismatches += !encodes_like_merge_order(&tok, word, wl);
    }
    CHECK(mismatches == 0, "%d of 300 words encode differently from applying the merges in order", mismatches);
    tokenizer_free(&tok);
    free(text);
}

typedef struct {
    Tokenizer* tok;
    const char* text;
    int vocab;
} TrainArgs;

static void train_fn(void* p) {
    TrainArgs* a = (TrainArgs*)p;
    tokenizer_train(a->tok, a->text, strlen(a->text), a->vocab, 0);
}

// Runs fn(arg) in this process with stderr sent to a file; returns what it printed.
static char* capture_stderr(void (*fn)(void*), void* arg) {
    const char* path = tpath("stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    size_t n;
    return (char*)test_read_file(path, &n);
}

static void test_tokenizer_hand_example(void) {
    // "aaabdaaabac" is one piece. Pair counts: aa 4, ab 2, others 1 -> merge aa (256).
    // Then [256 a b d 256 a b a c]: (a,b) and (256,a) both 2; the smaller ids win -> ab (257).
    // Then [256 257 d 256 257 a c]: (256,257) 2 -> "aaab" (258). Then all pairs have
    // count 1: (a,c) = (97,99) has the smallest ids -> "ac" (259).
    const char* text = "aaabdaaabac";
    Tokenizer tok;
    tokenizer_train(&tok, text, strlen(text), 261, 0);
    int32_t want[8] = {97, 97, 97, 98, 256, 257, 97, 99};
    CHECK(tok.num_merges == 4 && tok.vocab_size == 261 && tok.eot == 260, "merges %d vocab %d", tok.num_merges,
          tok.vocab_size);
    CHECK(tok.num_merges == 4 && memcmp(tok.merges, want, sizeof want) == 0, "merges %d,%d %d,%d %d,%d %d,%d",
          tok.merges[0], tok.merges[1], tok.merges[2], tok.merges[3], tok.merges[4], tok.merges[5], tok.merges[6],
          tok.merges[7]);
    CHECK(tok.len[258] == 4 && memcmp(tok.bytes[258], "aaab", 4) == 0, "token 258");
    struct {
        const char* text;
        int n;
        int32_t ids[6];
    } cases[] = {
        {"aaabdaaabac", 4, {258, 100, 258, 259}},
        {"aaaa", 2, {256, 256}},
        {"aaa", 2, {256, 97}},
        {" aaab", 2, {32, 258}},               // the leading space stays its own byte
        {"ab aa", 3, {257, 32, 256}},          // no merge across the piece boundary
        {"aaab.ac", 3, {258, 46, 259}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t* ids;
        size_t n = tokenizer_encode(&tok, cases[c].text, strlen(cases[c].text), &ids);
        CHECK(n == (size_t)cases[c].n && memcmp(ids, cases[c].ids, n * sizeof *ids) == 0,
              "encode '%s': %zu tokens, first %d", cases[c].text, n, n ? ids[0] : -1);
        free(ids);
    }
    tokenizer_free(&tok);

    // Pieces split before a space: "a b a b a b" is "a", " b", " a", " b", ... so
    // only " b" (3 times) and " a" (twice) can merge, in that order; the
    // vocabulary shrinks to what the text supports, with a warning.
    TrainArgs ta = {&tok, "a b a b a b", 300};
    char* err = capture_stderr(train_fn, &ta);
    CHECK(strstr(err, "warning: tokenizer: the text supports only 2 merges") != NULL, "warning: %.300s", err);
    free(err);
    int32_t want2[4] = {32, 98, 32, 97};
    CHECK(tok.num_merges == 2 && tok.vocab_size == 259 && tok.eot == 258, "merges %d vocab %d", tok.num_merges,
          tok.vocab_size);
    CHECK(tok.num_merges == 2 && memcmp(tok.merges, want2, sizeof want2) == 0, "space merges wrong");
    tokenizer_free(&tok);
}

static int same_tokenizer(const Tokenizer* a, const Tokenizer* b) {
    if (a->vocab_size != b->vocab_size || a->eot != b->eot || a->num_merges != b->num_merges) return 0;
    if (memcmp(a->merges, b->merges, (size_t)(2 * a->num_merges) * sizeof *a->merges)) return 0;
    for (int i = 0; i < a->vocab_size; i++)
        if (a->len[i] != b->len[i] || memcmp(a->bytes[i], b->bytes[i], (size_t)a->len[i])) return 0;
    return 1;
}

static void test_tokenizer_save_load(void) {
    size_t len;
    char* text = sample_text(50000, &len);
    Tokenizer a, b;
    tokenizer_train(&a, text, len, 400, 0);
    const char* path = tpath("tok.bin");
    tokenizer_save(&a, path);
    size_t n;
    uint8_t* d = test_read_file(path, &n);
    uint32_t h[5];
    memcpy(h, d, sizeof h);
    CHECK(h[0] == 20240328 && h[1] == 2 && h[2] == 400 && h[3] == 399 && h[4] == 143, "header %u %u %u %u %u", h[0], h[1],
          h[2], h[3], h[4]);
    size_t want = 1024 + 8 * 143;
    for (int i = 0; i < 400; i++) want += 1 + (size_t)a.len[i];
    CHECK(n == want, "file has %zu bytes, want %zu", n, want);
    free(d);
    tokenizer_load(&b, path);
    CHECK(same_tokenizer(&a, &b), "loaded tokenizer differs");
    int32_t *ia, *ib;
    size_t na = tokenizer_encode(&a, text, len, &ia), nb = tokenizer_encode(&b, text, len, &ib);
    CHECK(na == nb && memcmp(ia, ib, na * sizeof *ia) == 0, "encodings differ after load");
    free(ia);
    free(ib);
    tokenizer_free(&a);
    tokenizer_free(&b);
    free(text);

    // A long run of one letter doubles its token's length each merge; the format
    // stores lengths in one byte, so 128 + 128 must not merge. 2000 a's learn
    // 2, 4, ..., 128, and then from the tail 15x128 + 64 + 16: 192 and 208.
    char run[2001];
    memset(run, 'a', 2000);
    run[2000] = 0;
    TrainArgs ta = {&a, run, 300};
    free(capture_stderr(train_fn, &ta));  // it may warn that the text runs out of merges
    int longest = 0;
    for (int i = 0; i < a.vocab_size; i++) longest = a.len[i] > longest ? a.len[i] : longest;
    CHECK(longest == 208 && a.num_merges == 9, "longest token %d bytes after %d merges", longest, a.num_merges);
    tokenizer_save(&a, tpath("tok_run.bin"));
    tokenizer_load(&b, tpath("tok_run.bin"));
    CHECK(same_tokenizer(&a, &b), "run tokenizer differs after load");
    CHECK(roundtrips(&b, run, 2000, &n) && n < 20, "run of 2000 a's: %zu tokens", n);
    tokenizer_free(&a);
    tokenizer_free(&b);
}

// An llm.c-style decode-only file: tokens that are not raw bytes, no merges.
static void write_decode_only(const char* path, int version) {
    uint32_t h[256] = {0};
    h[0] = 20240328;
    h[1] = (uint32_t)version;
    h[2] = 300;
    if (version == 2) h[3] = 299;
    FILE* f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < 300; i++) {
        char s[16];
        uint8_t n = (uint8_t)snprintf(s, sizeof s, "<%d>", i);
        fwrite(&n, 1, 1, f);
        fwrite(s, 1, n, f);
    }
    fclose(f);
}

static void encode_fn(void* p) {
    Tokenizer tok;
    tokenizer_load(&tok, (const char*)p);
    int32_t* ids;
    tokenizer_encode(&tok, "hello", 5, &ids);
}

static void load_fn(void* p) {
    Tokenizer tok;
    tokenizer_load(&tok, (const char*)p);
    tokenizer_free(&tok);
}

static void test_tokenizer_decode_only_and_errors(void) {
    for (int version = 1; version <= 2; version++) {
        const char* path = tpath(version == 1 ? "gpt2_v1.bin" : "gpt2_v2.bin");
        write_decode_only(path, version);
        Tokenizer tok;
        tokenizer_load(&tok, path);
        CHECK(tok.vocab_size == 300 && tok.eot == 299 && tok.num_merges == 0, "v%d: vocab %d eot %d", version,
              tok.vocab_size, tok.eot);
        char out[64];
        size_t n = 0;
        int ids[3] = {0, 255, 299};
        for (int i = 0; i < 3; i++) n += tokenizer_decode_token(&tok, ids[i], out + n, sizeof out - n);
        CHECK(n == 13 && memcmp(out, "<0><255><299>", 13) == 0, "v%d decodes '%.*s'", version, (int)n, out);
        tokenizer_free(&tok);
        CHECK(dies_with(encode_fn, (void*)path, "cannot encode", NULL), "encode with decode-only: %.300s", fatal_msg);
    }
    const char* p = tpath("tok_missing.bin");
    CHECK(dies_with(load_fn, (void*)p, p, "No such file", NULL), "missing: %.300s", fatal_msg);
    size_t n;
    uint8_t* d = test_read_file(tpath("tok.bin"), &n);
    p = tpath("tok_cut.bin");
    write_bytes(p, d, n - 5);
    CHECK(dies_with(load_fn, (void*)p, p, "truncated in merge 142", NULL), "cut: %.300s", fatal_msg);
    p = tpath("tok_header.bin");
    write_bytes(p, d, 500);
    CHECK(dies_with(load_fn, (void*)p, p, "truncated header", NULL), "header: %.300s", fatal_msg);
    p = tpath("tok_magic.bin");
    d[0] ^= 1;
    write_bytes(p, d, n);
    CHECK(dies_with(load_fn, (void*)p, p, "bad magic", NULL), "magic: %.300s", fatal_msg);
    d[0] ^= 1;
    p = tpath("tok_badmerge.bin");
    uint32_t bogus = 399;  // the last merge's right id points past itself
    memcpy(d + n - 4, &bogus, 4);
    write_bytes(p, d, n);
    CHECK(dies_with(load_fn, (void*)p, p, "merge 142", NULL), "bad merge: %.300s", fatal_msg);
    free(d);
}

// ---- main ---------------------------------------------------------------------------------------

static void remove_tree(const char* dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int main(void) {
    const char* base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/test_data_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        fprintf(stderr, "cannot create a temporary directory: %s\n", strerror(errno));
        return 2;
    }
    RUN(test_shard_roundtrip_plain);
    RUN(test_shard_roundtrip_zst);
    RUN(test_shard_zst_streaming_variants);
    RUN(test_shard_64bit_offsets);
    RUN(test_shard_bad_inputs);
    RUN(test_shard_write_and_glob);
    RUN(test_dataloader_epoch_coverage);
    RUN(test_dataloader_determinism);
    RUN(test_dataloader_read_across_epochs);
    RUN(test_dataloader_resume_and_disjoint);
    RUN(test_dataloader_errors);
    RUN(test_tokenizer_roundtrip);
    RUN(test_tokenizer_hand_example);
    RUN(test_tokenizer_save_load);
    RUN(test_tokenizer_decode_only_and_errors);
    remove_tree(tmp_dir);
    return TESTS_DONE();
}
