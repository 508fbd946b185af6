// fp8.c: FP8 on the CPU: amax, quantisation to E4M3/E5M2 (plain and
// transposed), the delayed-scaling update, and the FP8 GEMMs, emulated.
//
// The emulation is exact where the GPU's arithmetic is defined: the codes
// are the same bits a GPU's cast writes (fp8_quantize_value: the product x *
// scale rounded to FP32, then to the FP8 grid, saturating), and each GEMM
// multiplies the decoded codes, which FP32 holds exactly, in an FP32 sgemm
// (cuBLASLt accumulates in FP32 too, in its own order), then dequantises by
// the product of the two scale_inv, as cuBLASLt's alpha * scale_A * scale_B.
// CPU and GPU FP8 runs therefore differ only by summation order and, on the
// GPU, BF16 storage.
#include <float.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

static float DECODE[2][256];  // [is_e4m3][code]

static void decode_tables_init(void) {
    static int done;
    if (done) return;
    for (int f = 0; f < 2; f++)
        for (int c = 0; c < 256; c++) DECODE[f][c] = fp8_decode((uint8_t)c, f);
    done = 1;
}

void cpu_amax(Backend* be, float* amax, const void* x_, size_t n) {
    const float* x = (const float*)x_;
    uint32_t mx = 0;
#pragma omp parallel for simd schedule(static) reduction(max : mx) if (n > CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t a = fp8_abs_bits(x[i]);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(amax, mx);
}

void cpu_fp8_amax_fold(Backend* be, float* acc, const float* amax, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fp8_abs_bits(amax[i]) > fp8_abs_bits(acc[i])) acc[i] = amax[i];
}

#define TRANSPOSE_TILE 32

void cpu_fp8_quantize(Backend* be, void* q_, void* qt_, DType fmt, const void* x_, int rows, int cols,
                      const float* amax, float* scale, float* scale_inv) {
    int e4m3 = dtype_fp8_is_e4m3(fmt, "cpu");
    float s = *scale;
    if (amax) {
        s = fp8_scale_from_amax(*amax, fp8_max_value(e4m3));
        *scale = s;
        *scale_inv = 1.0f / s;
    }
    const float* x = (const float*)x_;
    uint8_t* q = (uint8_t*)q_;
    uint8_t* qt = (uint8_t*)qt_;
    size_t n = (size_t)rows * cols;
    if (q) {
#pragma omp parallel for simd schedule(static) if (n > CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) q[i] = fp8_quantize_value(x[i], s, e4m3);
    }
    if (qt) {
        // Tile by tile, so that both the reads and the writes stay in cache.
        int tr = (int)ceil_div((size_t)rows, TRANSPOSE_TILE), tc = (int)ceil_div((size_t)cols, TRANSPOSE_TILE);
#pragma omp parallel for schedule(static) if (n > CPU_PARALLEL_MIN)
        for (int t = 0; t < tr * tc; t++) {
            int r0 = (t / tc) * TRANSPOSE_TILE, c0 = (t % tc) * TRANSPOSE_TILE;
            int r1 = r0 + TRANSPOSE_TILE < rows ? r0 + TRANSPOSE_TILE : rows;
            int c1 = c0 + TRANSPOSE_TILE < cols ? c0 + TRANSPOSE_TILE : cols;
            for (int c = c0; c < c1; c++)
                for (int r = r0; r < r1; r++) qt[(size_t)c * rows + r] = fp8_quantize_value(x[(size_t)r * cols + c], s, e4m3);
        }
    }
}

void cpu_fp8_update_scales(Backend* be, float* scale, float* scale_inv, float* history, int len, size_t ld,
                           int pos, size_t n, DType fmt, int margin) {
    float max_value = fp8_max_value(dtype_fp8_is_e4m3(fmt, "cpu"));
    for (size_t i = 0; i < n; i++) {
        float* now = &history[(size_t)pos * ld + i];
        if (!(*now <= FLT_MAX)) *now = 0.0f;  // NaN or inf: no information
        float window = 0.0f;
        for (int j = 0; j < len; j++) {
            float a = history[(size_t)j * ld + i];
            window = a > window ? a : window;
        }
        if (fp8_delayed_scale(window, max_value, margin, &scale[i])) scale_inv[i] = 1.0f / scale[i];
    }
}

size_t cpu_fp8_matmul_scratch_bytes(int N, int C, int OC) {
    return ((size_t)N * OC + (size_t)OC * C + (size_t)N * C) * sizeof(float);
}

// An operand decoded to FP32 into dst, in whichever layout it came (q or qt);
// returns whether it is the transposed one.
static int decode_operand(float* dst, const Fp8Tensor* t, size_t n, const char* what) {
    const uint8_t* src = (const uint8_t*)(t->q ? t->q : t->qt);
    if (!src) fatal("cpu backend: FP8 GEMM operand %s has neither layout", what);
    const float* table = DECODE[dtype_fp8_is_e4m3(t->type, "cpu")];
#pragma omp parallel for simd schedule(static) if (n > CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = table[src[i]];
    return t->q == NULL;
}

static void check_types(const Fp8Tensor* t, DType want, const char* what) {
    if (t->type != want) fatal("cpu backend: FP8 GEMM %s is %s, expected %s", what, dtype_name(t->type), dtype_name(want));
}

void cpu_fp8_matmul_forward(Backend* be, void* out, const Fp8Tensor* inp, const Fp8Tensor* weight,
                            const void* bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    decode_tables_init();
    check_types(inp, DTYPE_FP8_E4M3, "input");
    check_types(weight, DTYPE_FP8_E4M3, "weight");
    size_t nx = (size_t)N * C, nw = (size_t)OC * C;
    float* x = (float*)cpu_scratch(be, (nx + nw) * sizeof(float), "FP8 GEMM operands");
    float* w = x + nx;
    int xt = decode_operand(x, inp, nx, "input");
    int wt = decode_operand(w, weight, nw, "weight");
    // out (N,OC) = x (N,C) @ w^T: w (OC,C) is read transposed, its transpose (C,OC) as is.
    cpu_sgemm_tiled(xt, !wt, N, OC, C, *inp->scale_inv * *weight->scale_inv, x, xt ? N : C, w, wt ? OC : C, 0.0f,
                    (float*)out, OC);
    if (bias) cpu_add_bias((float*)out, (const float*)bias, N, OC);
    be->free(be, x);
}

void cpu_fp8_matmul_backward(Backend* be, void* dinp, void* dweight, const Fp8Tensor* dout, const Fp8Tensor* inp,
                             const Fp8Tensor* weight, int N, int C, int OC) {
    if (N <= 0 || (!dinp && !dweight)) return;
    decode_tables_init();
    check_types(dout, DTYPE_FP8_E5M2, "output gradient");
    size_t ng = (size_t)N * OC, nw = dinp ? (size_t)OC * C : 0, nx = dweight ? (size_t)N * C : 0;
    float* g = (float*)cpu_scratch(be, (ng + nw + nx) * sizeof(float), "FP8 GEMM operands");
    int gt = decode_operand(g, dout, ng, "output gradient");
    if (dinp) {
        // dinp (N,C) = g (N,OC) @ w (OC,C)
        check_types(weight, DTYPE_FP8_E4M3, "weight");
        float* w = g + ng;
        int wt = decode_operand(w, weight, nw, "weight");
        cpu_sgemm_tiled(gt, wt, N, C, OC, *dout->scale_inv * *weight->scale_inv, g, gt ? N : OC, w, wt ? OC : C,
                        0.0f, (float*)dinp, C);
    }
    if (dweight) {
        // dweight (OC,C) += g^T (OC,N) @ x (N,C)
        check_types(inp, DTYPE_FP8_E4M3, "input");
        float* x = g + ng + nw;
        int xt = decode_operand(x, inp, nx, "input");
        cpu_sgemm_tiled(!gt, xt, OC, C, N, *dout->scale_inv * *inp->scale_inv, g, gt ? N : OC, x, xt ? N : C, 1.0f,
                        (float*)dweight, C);
    }
    be->free(be, g);
}
