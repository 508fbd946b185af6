// test_gpu_fp8_cast.c: the FP8 amax and casts on every path the CUDA backend
// picks (16-byte loads and stores where the shape and alignment allow,
// element by element elsewhere), bit for bit against the CPU backend: plain
// casts of sizes that are not multiples of 16, cast + transpose with rows and
// cols multiples of 16 (one, several and partial 64 x 64 tiles) and not, q or qt
// alone, and an input 2 bytes past an aligned address. Outputs are poisoned.
#include "tests/gpu/gpu_test.h"

static int small;

// One quantization of x (rows x cols, starting `skew` elements into its
// buffer) with current scaling, on both backends; the codes, amax and scales
// must be the same bits.
static void cast_case(int rows, int cols, int want_q, int want_qt, int skew, DType fmt) {
    size_t n = (size_t)rows * cols;
    float* x = host_normal(n + skew, 2.0f);
    x[skew + n / 2] = as_stored(-300.0f);
    float* rx = ref_from(x, n + skew);
    float* ramax = ref_from((float[]){0.0f}, 1);
    float* rs = ref_from((float[]){NAN, NAN}, 2);
    uint8_t* rq = (uint8_t*)xmalloc(n);
    uint8_t* rqt = (uint8_t*)xmalloc(n);
    ref->amax(ref, ramax, rx + skew, n);
    ref->fp8_quantize(ref, want_q ? rq : NULL, want_qt ? rqt : NULL, fmt, rx + skew, rows, cols, ramax, &rs[0], &rs[1]);

    void* gx = gpu_from(x, n + skew);
    const void* gxs = (const char*)gx + skew * gsize();
    float* gamax = gpu_from_f32((float[]){0.0f}, 1);
    float* gs = gpu_from_f32((float[]){NAN, NAN}, 2);
    uint8_t* gq = (uint8_t*)gpu->alloc(gpu, n, "q");
    uint8_t* gqt = (uint8_t*)gpu->alloc(gpu, n, "qt");
    uint8_t* junk = (uint8_t*)xmalloc(n);
    memset(junk, 0xAB, n);
    gpu->to_device(gpu, gq, junk, n);
    gpu->to_device(gpu, gqt, junk, n);
    gpu->amax(gpu, gamax, gxs, n);
    gpu->fp8_quantize(gpu, want_q ? gq : NULL, want_qt ? gqt : NULL, fmt, gxs, rows, cols, gamax, &gs[0], &gs[1]);
    float amax_g, s_g[2];
    gpu->to_host(gpu, &amax_g, gamax, 4);
    gpu->to_host(gpu, s_g, gs, 8);
    uint8_t* q = (uint8_t*)xmalloc(n);
    uint8_t* qt = (uint8_t*)xmalloc(n);
    gpu->to_host(gpu, q, gq, n);
    gpu->to_host(gpu, qt, gqt, n);
    const char* f = fmt == DTYPE_FP8_E4M3 ? "E4M3" : "E5M2";
    CHECK(amax_g == ramax[0] && amax_g == 300.0f, "%dx%d skew %d: amax %.9g, CPU %.9g", rows, cols, skew, amax_g,
          ramax[0]);
    CHECK(same_bits(s_g, rs, 8), "%dx%d %s: scales differ", rows, cols, f);
    if (want_q) CHECK(same_bits(q, rq, n), "%dx%d %s skew %d: q differs from the CPU's", rows, cols, f, skew);
    if (!want_q) CHECK(same_bits(q, junk, n), "%dx%d: q written though not asked for", rows, cols);
    if (want_qt) CHECK(same_bits(qt, rqt, n), "%dx%d %s skew %d: qt differs from the CPU's", rows, cols, f, skew);
    free(junk);
    free(q);
    free(qt);
    free(rq);
    free(rqt);
    gpu->free(gpu, gx);
    gpu->free(gpu, gamax);
    gpu->free(gpu, gs);
    gpu->free(gpu, gq);
    gpu->free(gpu, gqt);
    ref->free(ref, rx);
    ref->free(ref, ramax);
    ref->free(ref, rs);
    free(x);
}

static void test_fp8_casts_every_path(void) {
    DType fmts[2] = {DTYPE_FP8_E4M3, DTYPE_FP8_E5M2};
    for (int f = 0; f < 2; f++) {
        cast_case(7, 131, 1, 0, 0, fmts[f]);    // plain, n % 16 = 5
        cast_case(1, 16, 1, 0, 0, fmts[f]);     // one 16-byte pack
        cast_case(5, 33, 1, 0, 1, fmts[f]);     // plain, unaligned input
        cast_case(48, 80, 1, 1, 0, fmts[f]);    // transpose, 16-byte path: partial 64 x 64 tiles
        cast_case(128, 64, 0, 1, 0, fmts[f]);   // qt only, two full tile rows
        cast_case(16, 16, 1, 1, 0, fmts[f]);
        cast_case(37, 53, 1, 1, 0, fmts[f]);    // transpose, byte path (not multiples of 16)
        cast_case(32, 48, 1, 1, 1, fmts[f]);    // transpose, unaligned input: byte path
        if (!small) {
            cast_case(1024, 768, 1, 1, 0, fmts[f]);
            cast_case(4096, 3072, 0, 1, 0, fmts[f]);
            cast_case(1001, 999, 1, 0, 0, fmts[f]);
        }
    }
}

int main(void) {
    small = test_small();
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        gpu = cuda_backend_create(dts[d]);
        RUN_SUFFIXED(test_fp8_casts_every_path, dts[d] == DTYPE_BF16 ? "_bf16" : "_fp32");
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
