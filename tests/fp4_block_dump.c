// fp4_block_dump.c: the CPU backend's NVFP4 quantisation and GEMM on raw
// float32 files, for tests/test_fp4_block.py to check against ml_dtypes and
// a float64 reference.
//
//   fp4_block_dump quant FMT TRANS HAD SR KEY M K IN CODES SCALES SDEC
//       op(IN) (M, K) (IN stored (K, M) when TRANS is 1), Hadamard-transformed
//       along K when HAD is 1, stochastic rounding with key KEY when SR is 1
//       -> CODES (M*K bytes, one code each), SCALES (one E4M3 byte per block),
//          SDEC (the tensor's decode scale, one float32)
//   fp4_block_dump gemm FA TA HA FB TB HB M N K A B OUT
//       OUT (M, N) = op(A) (M, K) @ op(B) (N, K)^T through Backend.nvfp4_matmul
//       (nearest rounding; HA, HB: the Hadamard transform), float32
//   fp4_block_dump rht OUT
//       the 16x16 transform matrix, entry (k, j) at k * 16 + j, float32
// FMT: a16 (1x16 blocks) or w16 (16x16 blocks).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/fp4_block.h"

static Nvfp4Format format_named(const char* s, int hadamard, int stochastic, uint64_t key) {
    Nvfp4Format f = {1, NVFP4_BLOCK, hadamard, stochastic, key};
    if (!strcmp(s, "w16")) f.br = NVFP4_BLOCK;
    else if (strcmp(s, "a16")) fatal("fp4_block_dump: format '%s' is not a16 or w16", s);
    return f;
}

static float* read_floats(const char* path, size_t n) {
    float* x = (float*)xmalloc(n * sizeof(float));
    FILE* f = fopen(path, "rb");
    if (!f || fread(x, sizeof(float), n, f) != n) fatal("fp4_block_dump: cannot read %zu floats from %s", n, path);
    fclose(f);
    return x;
}

static void write_bytes(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) fatal("fp4_block_dump: cannot write %s", path);
}

int main(int argc, char** argv) {
    if (argc == 13 && !strcmp(argv[1], "quant")) {
        Nvfp4Format f = format_named(argv[2], atoi(argv[4]), atoi(argv[5]), strtoull(argv[6], NULL, 0));
        int trans = atoi(argv[3]), M = atoi(argv[7]), K = atoi(argv[8]);
        float* x = read_floats(argv[9], (size_t)M * K);
        size_t ns = cpu_nvfp4_scale_count(M, K, f);
        uint8_t* codes = (uint8_t*)xmalloc((size_t)M * K);
        uint8_t* scales = (uint8_t*)xmalloc(ns);
        float* work = (float*)xmalloc((size_t)M * K * sizeof(float));
        memset(codes, 0xEE, (size_t)M * K);  // poison: every code must be written
        memset(scales, 0xEE, ns);
        float s_dec = NAN;
        cpu_nvfp4_quantize(codes, scales, &s_dec, work, x, trans, M, K, f);
        write_bytes(argv[10], codes, (size_t)M * K);
        write_bytes(argv[11], scales, ns);
        write_bytes(argv[12], &s_dec, sizeof s_dec);
        return 0;
    }
    if (argc == 14 && !strcmp(argv[1], "gemm")) {
        Nvfp4Format fa = format_named(argv[2], atoi(argv[4]), 0, 0), fb = format_named(argv[5], atoi(argv[7]), 0, 0);
        int ta = atoi(argv[3]), tb = atoi(argv[6]), M = atoi(argv[8]), N = atoi(argv[9]), K = atoi(argv[10]);
        float* a = read_floats(argv[11], (size_t)M * K);
        float* b = read_floats(argv[12], (size_t)N * K);
        Backend* be = cpu_backend_create(DTYPE_F32, 1);
        float* out = (float*)xmalloc((size_t)M * N * sizeof(float));
        for (size_t i = 0; i < (size_t)M * N; i++) out[i] = NAN;  // poison: every element must be written
        be->nvfp4_matmul(be, out, a, ta, fa, b, tb, fb, NULL, M, N, K, 0.0f);
        write_bytes(argv[13], out, (size_t)M * N * sizeof(float));
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "rht")) {
        float h[NVFP4_BLOCK * NVFP4_BLOCK];
        for (int k = 0; k < NVFP4_BLOCK; k++)
            for (int j = 0; j < NVFP4_BLOCK; j++) h[k * NVFP4_BLOCK + j] = nvfp4_rht_entry(k, j);
        write_bytes(argv[2], h, sizeof h);
        return 0;
    }
    fprintf(stderr, "usage: fp4_block_dump quant FMT TRANS HAD SR KEY M K IN CODES SCALES SDEC | "
                    "gemm FA TA HA FB TB HB M N K A B OUT | rht OUT\n");
    return 2;
}
