// fp8_block_dump.c: the CPU backend's block-scaled FP8 quantisation and GEMM
// on raw float32 files, for tests/test_fp8_block.py to check against
// ml_dtypes and a float64 reference.
//
//   fp8_block_dump quant FMT TRANS M K IN CODES SCALES
//       op(IN) (M, K) (IN stored (K, M) when TRANS is 1) -> CODES (M*K bytes), SCALES
//   fp8_block_dump gemm FA TA FB TB M N K A B OUT
//       OUT (M, N) = op(A) (M, K) @ op(B) (N, K)^T, float32
// FMT: act128 (1x128, FP32 scales), w128 (128x128, FP32 scales), mx32 (1x32, E8M0 scales).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/fp8_block.h"

static Fp8BlockFormat format_named(const char* s) {
    if (!strcmp(s, "act128")) return (Fp8BlockFormat){FP8_BLOCK_FP32, 1, 128};
    if (!strcmp(s, "w128")) return (Fp8BlockFormat){FP8_BLOCK_FP32, 128, 128};
    if (!strcmp(s, "mx32")) return (Fp8BlockFormat){FP8_BLOCK_E8M0, 1, 32};
    fatal("fp8_block_dump: format '%s' is not act128, w128 or mx32", s);
}

static float* read_floats(const char* path, size_t n) {
    float* x = (float*)xmalloc(n * sizeof(float));
    FILE* f = fopen(path, "rb");
    if (!f || fread(x, sizeof(float), n, f) != n) fatal("fp8_block_dump: cannot read %zu floats from %s", n, path);
    fclose(f);
    return x;
}

static void write_bytes(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) fatal("fp8_block_dump: cannot write %s", path);
}

int main(int argc, char** argv) {
    if (argc == 9 && !strcmp(argv[1], "quant")) {
        Fp8BlockFormat f = format_named(argv[2]);
        int trans = atoi(argv[3]), M = atoi(argv[4]), K = atoi(argv[5]);
        float* x = read_floats(argv[6], (size_t)M * K);
        size_t ns = cpu_fp8_block_scale_count(M, K, f);
        uint8_t* codes = (uint8_t*)xmalloc((size_t)M * K);
        void* scales = xmalloc(ns * 4);
        cpu_fp8_block_quantize(codes, scales, x, trans, M, K, f);
        write_bytes(argv[7], codes, (size_t)M * K);
        write_bytes(argv[8], scales, ns * (size_t)fp8_block_scale_bytes(f.scale));
        return 0;
    }
    if (argc == 12 && !strcmp(argv[1], "gemm")) {
        Fp8BlockFormat fa = format_named(argv[2]), fb = format_named(argv[4]);
        int ta = atoi(argv[3]), tb = atoi(argv[5]), M = atoi(argv[6]), N = atoi(argv[7]), K = atoi(argv[8]);
        float* a = read_floats(argv[9], (size_t)M * K);
        float* b = read_floats(argv[10], (size_t)N * K);
        Backend* be = cpu_backend_create(DTYPE_F32, 1);
        float* out = (float*)xmalloc((size_t)M * N * sizeof(float));
        for (size_t i = 0; i < (size_t)M * N; i++) out[i] = NAN;  // poison: every element must be written
        be->fp8_block_matmul(be, out, a, ta, fa, b, tb, fb, NULL, M, N, K, 0.0f);
        write_bytes(argv[11], out, (size_t)M * N * sizeof(float));
        return 0;
    }
    fprintf(stderr, "usage: fp8_block_dump quant FMT TRANS M K IN CODES SCALES | gemm FA TA FB TB M N K A B OUT\n");
    return 2;
}
