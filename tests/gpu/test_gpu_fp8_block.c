// test_gpu_fp8_block.c: block-scaled FP8 on the CUDA backend (recipes
// blockwise and mxfp8, issue 27) against the CPU backend's exact emulation.
// - The quantise kernels (kernels/cuda/fp8_block.cu): codes bit for bit, and
//   every block's scale bit for bit at the place cuBLASLt's layout puts it
//   (the padding zero), for 1x128 / 128x128 FP32 and 1x32 E8M0 blocks, plain
//   and transposed sources, FP32 and BF16, odd shapes, and blocks holding
//   NaN, Inf, only zeros, subnormals and an outlier. Codes are poisoned first.
// - Backend.fp8_block_matmul: the linear layer's three GEMMs as llm/fp8 calls
//   them (forward with bias, dweight accumulated with beta 1 from transposed
//   sources, dinp through the weight's column-wise copy) against the CPU's,
//   both the FP32-accumulated product of the same dequantised values: within
//   the BF16 rounding of the output. Source magnitudes change from block to
//   block, so a scale stored in the wrong place gives a wrong product.
//   Blockwise on compute capability 9.0, mxfp8 on 10.x; the emulator runs
//   both (CUDA_SIM_CC=100 for mxfp8), a GPU the one it has.
#include "kernels/cpu/cpu.h"
#include "kernels/cuda_seam.h"
#include "tests/gpu/gpu_test.h"

static int small;
static const Fp8BlockFormat ACT128 = {FP8_BLOCK_FP32, 1, 128}, W128 = {FP8_BLOCK_FP32, 128, 128},
                            MX32 = {FP8_BLOCK_E8M0, 1, 32};

static const char* fmt_name(Fp8BlockFormat f) { return f.scale == FP8_BLOCK_E8M0 ? "1x32 E8M0" : f.br == 1 ? "1x128 FP32" : "128x128 FP32"; }

// A (rows, cols) source whose magnitude changes by powers of two across both
// dimensions (every 32 columns, every row, every 128 rows), rounded as stored.
static float* host_operand(int rows, int cols, float scale) {
    float* x = host_normal((size_t)rows * cols, scale);
    for (int i = 0; i < rows; i++)
        for (int k = 0; k < cols; k++) x[(size_t)i * cols + k] = as_stored(ldexpf(x[(size_t)i * cols + k], (i * 5 + (k / 32) * 3 + i / 128) % 9 - 4));
    return x;
}

static void quantize_case(int M, int K, int trans, Fp8BlockFormat f, int specials) {
    size_t n = (size_t)M * K;
    int sr = trans ? K : M, sc = trans ? M : K;  // the source's stored shape
    float* x = host_operand(sr, sc, 1.0f);
    // Special blocks of op(x) (row i, columns of block kb): x stored transposed holds (i, k) at k * M + i.
#define OPX(i, k) x[trans ? (size_t)(k) * M + (i) : (size_t)(i) * K + (k)]
    if (specials && M >= 3 && K >= 2 * f.bc) {
        OPX(0, 1) = NAN;                                   // a NaN: the block scaled by its other elements
        OPX(1, f.bc + 2) = INFINITY;                       // an Inf: the largest scale, others flush
        for (int k = 0; k < f.bc; k++) OPX(2, k) = 0.0f;   // an all-zero block (FP32 rows: row 2 of a 128-row block)
        for (int k = f.bc; k < 2 * f.bc && k < K; k++) OPX(2, k) = as_stored(ldexpf(1.0f, -130) * (float)(k % 7));  // subnormals
        OPX(M - 1, K - 1) = as_stored(-30000.0f);          // an outlier in the last (partial) block
    }
#undef OPX
    uint8_t* rq = (uint8_t*)xmalloc(n);
    size_t nscales = cpu_fp8_block_scale_count(M, K, f);
    uint8_t* rs = (uint8_t*)xmalloc(nscales * 4);
    cpu_fp8_block_quantize(rq, rs, x, trans, M, K, f);

    size_t sbytes = cuda_fp8_block_scale_bytes(M, K, f);
    void* gx = gpu_from(x, n);
    uint8_t* gq = (uint8_t*)gpu->alloc(gpu, n, "codes");
    uint8_t* gs = (uint8_t*)gpu->alloc(gpu, sbytes, "scales");
    uint8_t* poison = (uint8_t*)xmalloc(n > sbytes ? n : sbytes);
    memset(poison, 0xAB, n > sbytes ? n : sbytes);
    gpu->to_device(gpu, gq, poison, n);
    gpu->to_device(gpu, gs, poison, sbytes);
    cuda_fp8_block_quantize(gpu, gq, gs, gx, trans, M, K, f);
    uint8_t* q = (uint8_t*)xmalloc(n);
    uint8_t* s = (uint8_t*)xmalloc(sbytes);
    gpu->to_host(gpu, q, gq, n);
    gpu->to_host(gpu, s, gs, sbytes);

    const char* tag = gdt() == DTYPE_BF16 ? "bf16" : "f32";
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i] != rq[i] && !bad++) first = i;
    CHECK(bad == 0, "%s %dx%d trans %d %s: %zu codes differ from the CPU's, first (%zu, %zu): %#x, CPU %#x", fmt_name(f), M,
          K, trans, tag, bad, first / K, first % K, q[first], rq[first]);
    // Every block's scale where cuBLASLt reads it; everything else zero.
    int es = fp8_block_scale_bytes(f.scale), nbr = (M + f.br - 1) / f.br, nbc = (K + f.bc - 1) / f.bc;
    uint8_t* seen = (uint8_t*)xcalloc(sbytes, 1);
    bad = 0;
    for (int rb = 0; rb < nbr; rb++)
        for (int kb = 0; kb < nbc; kb++) {
            size_t at = cuda_fp8_block_scale_index(f, M, K, rb * f.br, kb) * es;
            CHECK(at + es <= sbytes, "%s %dx%d: scale (%d, %d) at byte %zu past the %zu-byte layout", fmt_name(f), M, K, rb, kb,
                  at, sbytes);
            if (at + es > sbytes) continue;
            if (memcmp(s + at, rs + ((size_t)rb * nbc + kb) * es, es) && !bad++)
                fprintf(stderr, "  %s %dx%d trans %d: scale (%d, %d) differs\n", fmt_name(f), M, K, trans, rb, kb);
            memset(seen + at, 1, es);
        }
    CHECK(bad == 0, "%s %dx%d trans %d %s: %zu block scales differ from the CPU's", fmt_name(f), M, K, trans, tag, bad);
    size_t junk = 0;
    for (size_t i = 0; i < sbytes; i++) junk += !seen[i] && s[i] != 0;
    CHECK(junk == 0, "%s %dx%d: %zu padding bytes of the scale layout are not zero", fmt_name(f), M, K, junk);
    free(seen);
    free(poison);
    free(q);
    free(s);
    free(rq);
    free(rs);
    free(x);
    gpu->free(gpu, gx);
    gpu->free(gpu, gq);
    gpu->free(gpu, gs);
}

static void test_quantize_matches_cpu(void) {
    Fp8BlockFormat fs[3] = {ACT128, W128, MX32};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 2; t++) {
            quantize_case(130, 300, t, fs[i], 1);  // partial blocks both ways, two 128-row blocks
            quantize_case(1, 33, t, fs[i], 0);
            quantize_case(37, 256, t, fs[i], 1);
            quantize_case(257, 96, t, fs[i], 0);
            if (!small) quantize_case(2048, 3072, t, fs[i], 1);  // on a GPU: many blocks, the grid's later rounds
        }
}

// out (M, N) = op(a) (M, K) @ op(b) (N, K)^T (+ beta out) (+ bias) on both backends.
static void gemm_case(const char* what, int M, int N, int K, int a_trans, Fp8BlockFormat fa, int b_trans,
                      Fp8BlockFormat fb, int with_bias, float beta) {
    size_t na = (size_t)M * K, nb = (size_t)N * K, no = (size_t)M * N;
    float* a = host_operand(a_trans ? K : M, a_trans ? M : K, 1.0f);
    float* b = host_operand(b_trans ? K : N, b_trans ? N : K, 0.5f);
    float* bias = host_normal(N, 1.0f);
    float* out0 = host_normal(no, 1.0f);
    float *ra = ref_from(a, na), *rb = ref_from(b, nb), *rbias = ref_from(bias, N), *rout = ref_from(out0, no);
    if (beta == 0.0f)
        for (size_t i = 0; i < no; i++) rout[i] = NAN;
    ref->fp8_block_matmul(ref, rout, ra, a_trans, fa, rb, b_trans, fb, with_bias ? rbias : NULL, M, N, K, beta);
    void *ga = gpu_from(a, na), *gb = gpu_from(b, nb), *gbias = gpu_from(bias, N);
    void* gout = beta == 0.0f ? gpu_nan(no) : gpu_from(out0, no);
    gpu->fp8_block_matmul(gpu, gout, ga, a_trans, fa, gb, b_trans, fb, with_bias ? gbias : NULL, M, N, K, beta);
    float* got = gpu_read(gout, no);
    double big = 0;
    for (size_t i = 0; i < no; i++) big = fabs(rout[i]) > big ? fabs(rout[i]) : big;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < no; i++) {
        double d = fabs((double)got[i] - rout[i]);
        if (!(d <= ldexp(fabs(rout[i]), -8) + 1e-5 * big) && !bad++) first = i;
    }
    CHECK(big > 0 && bad == 0, "%s (%s x %s) %dx%dx%d: %zu of %zu outputs off, first (%zu, %zu): %.7g, CPU %.7g", what,
          fmt_name(fa), fmt_name(fb), M, N, K, bad, no, first / N, first % N, got[first], rout[first]);
    free(got);
    free(a);
    free(b);
    free(bias);
    free(out0);
    ref->free(ref, ra);
    ref->free(ref, rb);
    ref->free(ref, rbias);
    ref->free(ref, rout);
    gpu->free(gpu, ga);
    gpu->free(gpu, gb);
    gpu->free(gpu, gbias);
    gpu->free(gpu, gout);
}

// The linear layer (N tokens, C -> OC) as llm/fp8/fp8.c runs it in a block recipe.
static void linear_gemms(Fp8BlockFormat fx, Fp8BlockFormat fw, int Ntok, int C, int OC) {
    gemm_case("forward", Ntok, OC, C, 0, fx, 0, fw, 1, 0.0f);
    gemm_case("dweight", OC, C, Ntok, 1, fx, 1, fx, 0, 1.0f);
    gemm_case("dinp", Ntok, C, OC, 0, fx, 1, fw, 0, 0.0f);
}

static void test_block_gemms_match_cpu(void) {
    int major = 0, minor = 0;
    cuda_current_compute_capability(&major, &minor);
    if (major == 9 && minor == 0) {
        linear_gemms(ACT128, W128, 48, 144, 80);   // partial 128-blocks along every K
        linear_gemms(ACT128, W128, 128, 256, 384);
        if (!small) linear_gemms(ACT128, W128, 512, 1024, 1536);
    } else if (major == 10) {
        linear_gemms(MX32, MX32, 48, 144, 80);
        linear_gemms(MX32, MX32, 128, 256, 384);
        if (!small) linear_gemms(MX32, MX32, 512, 1024, 1536);
    } else {
        printf("  (compute capability %d.%d runs neither blockwise nor mxfp8: GEMMs skipped)\n", major, minor);
    }
}

int main(void) {
    small = test_small();
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        gpu = cuda_backend_create(dts[d]);
        RUN_SUFFIXED(test_quantize_matches_cpu, dts[d] == DTYPE_BF16 ? "_bf16" : "_fp32");
        gpu->destroy(gpu);
    }
    gpu = cuda_backend_create(DTYPE_BF16);  // the FP8 GEMMs write BF16
    RUN(test_block_gemms_match_cpu);
    gpu->destroy(gpu);
#ifdef CUDA_SIM
    // The emulator as a Blackwell (compute capability 10.0): mxfp8.
    setenv("CUDA_SIM_CC", "100", 1);
    gpu = cuda_backend_create(DTYPE_BF16);
    RUN_SUFFIXED(test_block_gemms_match_cpu, "_sm100");
    gpu->destroy(gpu);
    unsetenv("CUDA_SIM_CC");
#endif
    ref->destroy(ref);
    return TESTS_DONE();
}
