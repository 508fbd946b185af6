// shard.c: reading, validating and writing token shards (plain and .zst), and
// expanding the glob patterns that name them. Owns every check on shard bytes:
// whatever reaches the dataloader has a valid header, the exact body size and
// (checked per read) token ids below the vocabulary size.
#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

typedef unsigned long long ull;  // for printf of uint64_t without PRIu64 noise

static int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static size_t token_width(int version) { return version == SHARD_VERSION_U32 ? 4 : 2; }

// ---- header ---------------------------------------------------------------------------------

// Checks magic and version and returns the token count the header promises.
static uint64_t parse_header(const int32_t* h, const char* path, int* version) {
    if (h[0] != SHARD_MAGIC)
        fatal("shard '%s': bad magic %d (expected %d): not a token shard", path, h[0], SHARD_MAGIC);
    if (h[1] != SHARD_VERSION_U16 && h[1] != SHARD_VERSION_U32)
        fatal("shard '%s': unsupported version %d (expected %d for uint16 or %d for uint32 tokens)",
              path, h[1], SHARD_VERSION_U16, SHARD_VERSION_U32);
    *version = h[1];
    uint64_t wide = (uint64_t)(uint32_t)h[3] | ((uint64_t)(uint32_t)h[4] << 32);
    uint64_t n;
    if (h[2] == -1) {
        n = wide;
    } else if (h[2] < 0) {
        fatal("shard '%s': bad token count %d in header", path, h[2]);
    } else {
        n = (uint64_t)h[2];
        // Version 2 stores the count twice; a disagreement means a broken writer.
        if (*version == SHARD_VERSION_U32 && wide != 0 && wide != n)
            fatal("shard '%s': header token counts disagree (%llu vs %llu)", path, (ull)n, (ull)wide);
    }
    if (n > (UINT64_MAX - SHARD_HEADER_BYTES) / token_width(*version))
        fatal("shard '%s': implausible token count %llu in header", path, (ull)n);
    return n;
}

static void fill_header(int32_t* h, uint64_t n, int version) {
    memset(h, 0, SHARD_HEADER_BYTES);
    h[0] = SHARD_MAGIC;
    h[1] = version;
    h[2] = n <= INT32_MAX ? (int32_t)n : -1;
    if (version == SHARD_VERSION_U32 || n > INT32_MAX) {
        h[3] = (int32_t)(uint32_t)(n & 0xffffffffu);
        h[4] = (int32_t)(uint32_t)(n >> 32);
    }
}

static void check_body_size(const char* path, uint64_t n, int version, uint64_t actual) {
    uint64_t expected = n * token_width(version);
    if (actual != expected)
        fatal("shard '%s': body size mismatch: header says %llu tokens (%llu bytes) but the body has "
              "%llu bytes",
              path, (ull)n, (ull)expected, (ull)actual);
}

// ---- plain shards: pread with 64-bit offsets -------------------------------------------------

// Reads exactly `bytes` at `offset`; a short read means the file shrank under us.
static void pread_exact(int fd, void* dst, size_t bytes, uint64_t offset, const char* path) {
    uint8_t* p = (uint8_t*)dst;
    while (bytes > 0) {
        size_t chunk = bytes > (1u << 30) ? (1u << 30) : bytes;
        ssize_t got = pread(fd, p, chunk, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            fatal("shard '%s': read error at byte %llu: %s", path, (ull)offset, strerror(errno));
        }
        if (got == 0) fatal("shard '%s': unexpected end of file at byte %llu", path, (ull)offset);
        p += got;
        bytes -= (size_t)got;
        offset += (uint64_t)got;
    }
}

static void open_plain(Shard* s) {
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) fatal("shard '%s': cannot open: %s", s->path, strerror(errno));
    struct stat st;
    if (fstat(s->fd, &st) != 0) fatal("shard '%s': cannot stat: %s", s->path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fatal("shard '%s': not a regular file", s->path);
    uint64_t size = (uint64_t)st.st_size;
    if (size < SHARD_HEADER_BYTES)
        fatal("shard '%s': truncated header: file has %llu bytes, the header needs %d", s->path,
              (ull)size, SHARD_HEADER_BYTES);
    int32_t h[SHARD_HEADER_INTS];
    pread_exact(s->fd, h, SHARD_HEADER_BYTES, 0, s->path);
    s->num_tokens = parse_header(h, s->path, &s->version);
    check_body_size(s->path, s->num_tokens, s->version, size - SHARD_HEADER_BYTES);
}

// ---- compressed shards: stream-decompress into memory ----------------------------------------

typedef struct {
    ZSTD_DCtx* dctx;
    ZSTD_inBuffer in;
    size_t last_ret;  // 0 once the last frame seen is complete (starts nonzero)
    const char* path;
} Unzstd;

// Decompresses into dst until it is full or the input is used up; returns the bytes written.
static size_t unzstd_fill(Unzstd* z, void* dst, size_t cap) {
    ZSTD_outBuffer out = {dst, cap, 0};
    // Calling again after a frame has ended with no input left would start a new, empty frame.
    while (out.pos < out.size && !(z->in.pos == z->in.size && z->last_ret == 0)) {
        size_t in_before = z->in.pos, out_before = out.pos;
        size_t ret = ZSTD_decompressStream(z->dctx, &out, &z->in);
        if (ZSTD_isError(ret))
            fatal("shard '%s': corrupt zstd stream: %s", z->path, ZSTD_getErrorName(ret));
        z->last_ret = ret;
        if (z->in.pos == in_before && out.pos == out_before) break;  // input used up mid-frame
    }
    return out.pos;
}

static uint8_t* read_whole_file(const char* path, size_t* size) {
    int64_t n = file_size(path);
    if (n < 0) fatal("shard '%s': cannot open: %s", path, strerror(errno));
    FILE* f = fopen(path, "rb");
    if (!f) fatal("shard '%s': cannot open: %s", path, strerror(errno));
    uint8_t* buf = (uint8_t*)xmalloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        fatal("shard '%s': read error: %s", path, ferror(f) ? strerror(errno) : "file shrank");
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void open_compressed(Shard* s) {
    size_t src_size;
    uint8_t* src = read_whole_file(s->path, &src_size);
    unsigned long long content = ZSTD_getFrameContentSize(src, src_size);
    if (content == ZSTD_CONTENTSIZE_ERROR)
        fatal("shard '%s': corrupt zstd stream: not a zstd frame (bad magic or too short)", s->path);
    Unzstd z = {ZSTD_createDCtx(), {src, src_size, 0}, 1, s->path};
    if (!z.dctx) fatal("shard '%s': cannot create a zstd decompression context", s->path);

    // The header goes to its own buffer so the token bytes land at the start of s->data.
    int32_t h[SHARD_HEADER_INTS];
    size_t got = unzstd_fill(&z, h, SHARD_HEADER_BYTES);
    if (got < SHARD_HEADER_BYTES) {
        if (z.last_ret != 0) fatal("shard '%s': corrupt zstd stream: truncated (ends mid-frame)", s->path);
        fatal("shard '%s': truncated header: %zu decompressed bytes, the header needs %d", s->path,
              got, SHARD_HEADER_BYTES);
    }
    s->num_tokens = parse_header(h, s->path, &s->version);
    uint64_t expected = s->num_tokens * token_width(s->version);
    if (expected > SIZE_MAX) fatal("shard '%s': too large for this machine's address space", s->path);

    // Grow toward the promised size instead of trusting it up front: a corrupt
    // header must give a size-mismatch error, not an out-of-memory one.
    size_t cap = (size_t)expected, filled = 0;
    if (content != ZSTD_CONTENTSIZE_UNKNOWN && content >= SHARD_HEADER_BYTES &&
        content - SHARD_HEADER_BYTES < cap)
        cap = (size_t)(content - SHARD_HEADER_BYTES);
    if (cap > ((size_t)1 << 26) && content == ZSTD_CONTENTSIZE_UNKNOWN) cap = (size_t)1 << 26;
    s->data = (uint8_t*)xmalloc(cap);
    for (;;) {
        filled += unzstd_fill(&z, s->data + filled, cap - filled);
        if (filled < cap || cap == expected) break;
        size_t grown = cap >= 32768 ? 2 * cap : 65536;
        cap = grown < expected ? grown : (size_t)expected;
        s->data = (uint8_t*)xrealloc(s->data, cap);
    }
    uint64_t actual = filled;
    if (filled == expected) {  // count what lies beyond, to report the real size
        uint8_t scratch[65536];
        size_t more;
        while ((more = unzstd_fill(&z, scratch, sizeof scratch)) > 0) actual += more;
    }
    if (z.last_ret != 0) fatal("shard '%s': corrupt zstd stream: truncated (ends mid-frame)", s->path);
    check_body_size(s->path, s->num_tokens, s->version, actual);
    ZSTD_freeDCtx(z.dctx);
    free(src);
}

void shard_open(Shard* s, const char* path) {
    memset(s, 0, sizeof *s);
    s->path = xstrdup(path);
    s->fd = -1;
    s->compressed = ends_with(path, ".zst");
    if (s->compressed)
        open_compressed(s);
    else
        open_plain(s);
}

void shard_close(Shard* s) {
    if (s->fd >= 0) close(s->fd);
    free(s->data);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

// ---- reading tokens -----------------------------------------------------------------------------

// Widens `count` raw tokens (stored at the start of out) to int32 in place,
// back to front so no raw token is overwritten before it is read.
static void widen_u16_in_place(int32_t* out, size_t count) {
    const uint8_t* raw = (const uint8_t*)out;
    for (size_t i = count; i-- > 0;) {
        uint16_t v;
        memcpy(&v, raw + 2 * i, 2);
        out[i] = v;
    }
}

static void check_vocab(const Shard* s, uint64_t start, const int32_t* tok, size_t count, int vocab_size) {
    if (vocab_size <= 0) return;
    for (size_t i = 0; i < count; i++) {
        if ((uint32_t)tok[i] >= (uint32_t)vocab_size)
            fatal("shard '%s': token %llu has id %u, not below the vocabulary size %d", s->path,
                  (ull)(start + i), (uint32_t)tok[i], vocab_size);
    }
}

void shard_read(const Shard* s, uint64_t start, size_t count, int32_t* out, int vocab_size) {
    if (start > s->num_tokens || count > s->num_tokens - start)
        fatal("shard '%s': read of tokens [%llu, %llu) is past its end (%llu tokens)", s->path,
              (ull)start, (ull)(start + count), (ull)s->num_tokens);
    size_t width = token_width(s->version);
    uint64_t offset = start * width;
    if (s->compressed)
        memcpy(out, s->data + offset, count * width);
    else
        pread_exact(s->fd, out, count * width, SHARD_HEADER_BYTES + offset, s->path);
    if (width == 2) widen_u16_in_place(out, count);
    check_vocab(s, start, out, count, vocab_size);
}

// ---- writing ----------------------------------------------------------------------------------

typedef struct {
    FILE* f;
    const char* path;  // the temporary file, for error messages
    ZSTD_CCtx* cctx;   // NULL: plain
    uint8_t* zbuf;
    size_t zcap;
} Sink;

static void sink_write(Sink* k, const void* src, size_t bytes, ZSTD_EndDirective mode) {
    if (!k->cctx) {
        xfwrite(src, bytes, k->f, k->path);
        return;
    }
    ZSTD_inBuffer in = {src, bytes, 0};
    for (;;) {
        ZSTD_outBuffer out = {k->zbuf, k->zcap, 0};
        size_t ret = ZSTD_compressStream2(k->cctx, &out, &in, mode);
        if (ZSTD_isError(ret)) fatal("shard '%s': zstd compression failed: %s", k->path, ZSTD_getErrorName(ret));
        xfwrite(k->zbuf, out.pos, k->f, k->path);
        int done = mode == ZSTD_e_end ? ret == 0 : in.pos == in.size;
        if (done) break;
    }
}

static void check_writable_tokens(const char* path, const int32_t* tokens, uint64_t n, int version) {
    if (version != SHARD_VERSION_U16 && version != SHARD_VERSION_U32)
        fatal("shard '%s': cannot write version %d (only %d or %d)", path, version, SHARD_VERSION_U16,
              SHARD_VERSION_U32);
    int64_t limit = version == SHARD_VERSION_U16 ? 65536 : (int64_t)INT32_MAX + 1;
    for (uint64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= limit)
            fatal("shard '%s': token %llu = %d does not fit a version %d shard", path, (ull)i, tokens[i],
                  version);
    }
}

// Makes the rename durable too; a failure here is harmless, so it is not fatal.
static void fsync_parent_dir(const char* path) {
    char* dir = xstrdup(path);
    char* slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

void shard_write(const char* path, const int32_t* tokens, uint64_t n, int version) {
    check_writable_tokens(path, tokens, n, version);
    size_t tmp_len = strlen(path) + 5;
    char* tmp = (char*)xmalloc(tmp_len);
    snprintf(tmp, tmp_len, "%s.tmp", path);
    Sink k = {xfopen(tmp, "wb"), tmp, NULL, NULL, 0};
    size_t width = token_width(version);
    if (ends_with(path, ".zst")) {
        k.cctx = ZSTD_createCCtx();
        if (!k.cctx) fatal("shard '%s': cannot create a zstd compression context", path);
        ZSTD_CCtx_setParameter(k.cctx, ZSTD_c_compressionLevel, 19);
        ZSTD_CCtx_setParameter(k.cctx, ZSTD_c_checksumFlag, 1);  // so corruption is caught on read
        ZSTD_CCtx_setPledgedSrcSize(k.cctx, SHARD_HEADER_BYTES + n * width);
        k.zcap = ZSTD_CStreamOutSize();
        k.zbuf = (uint8_t*)xmalloc(k.zcap);
    }
    int32_t h[SHARD_HEADER_INTS];
    fill_header(h, n, version);
    sink_write(&k, h, SHARD_HEADER_BYTES, ZSTD_e_continue);

    enum { CHUNK = 1 << 16 };
    uint8_t* buf = (uint8_t*)xmalloc(CHUNK * 4);
    for (uint64_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? (size_t)(n - i) : CHUNK;
        for (size_t j = 0; j < m; j++) {
            if (width == 2) {
                uint16_t v = (uint16_t)tokens[i + j];
                memcpy(buf + 2 * j, &v, 2);
            } else {
                uint32_t v = (uint32_t)tokens[i + j];
                memcpy(buf + 4 * j, &v, 4);
            }
        }
        sink_write(&k, buf, m * width, ZSTD_e_continue);
    }
    if (k.cctx) sink_write(&k, NULL, 0, ZSTD_e_end);
    free(buf);

    if (fflush(k.f) != 0 || fsync(fileno(k.f)) != 0)
        fatal("shard '%s': cannot flush to disk: %s", tmp, strerror(errno));
    xfclose(k.f, tmp);
    if (rename(tmp, path) != 0) fatal("shard '%s': cannot rename '%s' into place: %s", path, tmp, strerror(errno));
    fsync_parent_dir(path);
    ZSTD_freeCCtx(k.cctx);
    free(k.zbuf);
    free(tmp);
}

// ---- glob ---------------------------------------------------------------------------------------

void shard_writer_open(ShardWriter* w, const char* path, int version) {
    check_writable_tokens(path, NULL, 0, version);
    w->path = xstrdup(path);
    size_t tmp_len = strlen(path) + 5;
    w->tmp = (char*)xmalloc(tmp_len);
    snprintf(w->tmp, tmp_len, "%s.tmp", path);
    w->f = xfopen(w->tmp, "wb");
    w->version = version;
    w->n = 0;
    int32_t h[SHARD_HEADER_INTS];
    fill_header(h, 0, version);  // rewritten with the count on close
    xfwrite(h, SHARD_HEADER_BYTES, w->f, w->tmp);
}

void shard_writer_append(ShardWriter* w, const int32_t* tokens, size_t n) {
    check_writable_tokens(w->path, tokens, n, w->version);
    enum { CHUNK = 1 << 14 };
    uint16_t narrow[CHUNK];
    if (w->version == SHARD_VERSION_U32) {
        xfwrite(tokens, n * 4, w->f, w->tmp);  // int32 and uint32 agree below 2^31 (checked above)
    } else {
        for (size_t i = 0; i < n; i += CHUNK) {
            size_t m = n - i < CHUNK ? n - i : CHUNK;
            for (size_t j = 0; j < m; j++) narrow[j] = (uint16_t)tokens[i + j];
            xfwrite(narrow, m * 2, w->f, w->tmp);
        }
    }
    w->n += n;
}

void shard_writer_close(ShardWriter* w) {
    int32_t h[SHARD_HEADER_INTS];
    fill_header(h, w->n, w->version);
    if (fseek(w->f, 0, SEEK_SET) != 0) fatal("shard '%s': cannot seek: %s", w->tmp, strerror(errno));
    xfwrite(h, SHARD_HEADER_BYTES, w->f, w->tmp);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        fatal("shard '%s': cannot flush to disk: %s", w->tmp, strerror(errno));
    xfclose(w->f, w->tmp);
    if (rename(w->tmp, w->path) != 0)
        fatal("shard '%s': cannot rename '%s' into place: %s", w->path, w->tmp, strerror(errno));
    fsync_parent_dir(w->path);
    free(w->path);
    free(w->tmp);
    memset(w, 0, sizeof *w);
}

static int compare_paths(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

char** glob_paths(const char* pattern, const char* flag, int* count) {
    glob_t g;
    int rc = glob(pattern, GLOB_BRACE, NULL, &g);  // {a,b} alternatives: dir/*.{bin,bin.zst}
    const char* from = flag ? flag : "pattern";
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        fatal("no files match '%s' (%s)", pattern, from);
    }
    if (rc != 0) {
        globfree(&g);
        fatal("cannot expand '%s' (%s): %s", pattern, from,
              rc == GLOB_NOSPACE ? "out of memory" : "read error while listing directories");
    }
    if (g.gl_pathc > INT_MAX) fatal("'%s' (%s) matches too many files", pattern, from);
    int n = (int)g.gl_pathc;
    char** paths = (char**)xmalloc((size_t)n * sizeof *paths);
    for (int i = 0; i < n; i++) paths[i] = xstrdup(g.gl_pathv[i]);
    globfree(&g);
    // glob sorts by the locale's collation; byte order is the same on every machine.
    qsort(paths, (size_t)n, sizeof *paths, compare_paths);
    *count = n;
    return paths;
}

void free_paths(char** paths, int count) {
    for (int i = 0; i < count; i++) free(paths[i]);
    free(paths);
}
