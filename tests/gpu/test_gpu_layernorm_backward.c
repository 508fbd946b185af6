// test_gpu_layernorm_backward.c: the CUDA layernorm backward against the CPU
// at widths that pick each block shape of its column phase (packs x row
// slices: many slices for narrow rows, one slice, more packs than threads)
// and each load width (16-byte packs, or one element where C is not a
// multiple): dinp (+=), dw and db (+=), the FP8 amax of dinp, and bit-for-bit
// repeatability.
#include "tests/gpu/gpu_test.h"

static void ln_case(int N, int C) {
    size_t n = (size_t)N * C;
    float *inp = host_normal(n, 1.5f), *w = host_normal(C, 1.0f), *dout = host_normal(n, 1.0f);
    float *dinp = host_normal(n, 1.0f), *dw = host_normal(C, 1.0f), *db = host_normal(C, 1.0f);
    float *r_inp = ref_from(inp, n), *r_w = ref_from(w, C), *r_dout = ref_from(dout, n);
    float *r_dinp = ref_from(dinp, n), *r_dw = ref_from(dw, C), *r_db = ref_from(db, C);
    float *r_out = ref_nan(n), *r_mean = ref_nan(N), *r_rstd = ref_nan(N), *r_amax = ref_from((float[]){0.0f}, 1);
    ref->layernorm_forward(ref, r_out, r_mean, r_rstd, r_inp, r_w, r_w, N, C, NULL);
    ref->layernorm_backward(ref, r_dinp, r_dw, r_db, r_dout, r_inp, r_w, r_mean, r_rstd, N, C, r_amax);
    void *g_inp = gpu_from(inp, n), *g_w = gpu_from(w, C), *g_dout = gpu_from(dout, n);
    float *g_mean = gpu_from_f32(r_mean, N), *g_rstd = gpu_from_f32(r_rstd, N);
    float* first[2] = {NULL, NULL};
    for (int run = 0; run < 2; run++) {
        void *g_dinp = gpu_from(dinp, n), *g_dw = gpu_from(dw, C), *g_db = gpu_from(db, C);
        float* g_amax = gpu_from_f32((float[]){0.0f}, 1);
        gpu->layernorm_backward(gpu, g_dinp, g_dw, g_db, g_dout, g_inp, g_w, g_mean, g_rstd, N, C, g_amax);
        char what[80];
        float* got_dw = gpu_read(g_dw, C);
        float* got_db = gpu_read(g_db, C);
        if (run == 0) {
            snprintf(what, sizeof what, "layernorm dinp N=%d C=%d", N, C);
            EXPECT_DEVICE_CLOSE(g_dinp, r_dinp, n, tolerance(1), what);
            snprintf(what, sizeof what, "layernorm dw N=%d C=%d", N, C);
            EXPECT_CLOSE(got_dw, r_dw, C, tolerance(1), what);
            snprintf(what, sizeof what, "layernorm db N=%d C=%d", N, C);
            EXPECT_CLOSE(got_db, r_db, C, tolerance(1), what);
            float amax;
            gpu->to_host(gpu, &amax, g_amax, 4);
            CHECK(fabs(amax - r_amax[0]) <= tolerance(1) * r_amax[0], "N=%d C=%d: amax %g, CPU %g", N, C, amax,
                  r_amax[0]);
            first[0] = got_dw;
            first[1] = got_db;
        } else {
            CHECK(same_bits(first[0], got_dw, C * sizeof(float)) && same_bits(first[1], got_db, C * sizeof(float)),
                  "N=%d C=%d: a second run differs", N, C);
            free(got_dw);
            free(got_db);
        }
        gpu->free(gpu, g_dinp);
        gpu->free(gpu, g_dw);
        gpu->free(gpu, g_db);
        gpu->free(gpu, g_amax);
    }
    free(first[0]);
    free(first[1]);
    void* bufs[] = {g_inp, g_w, g_dout, g_mean, g_rstd};
    for (int i = 0; i < 5; i++) gpu->free(gpu, bufs[i]);
    float* rbufs[] = {r_inp, r_w, r_dout, r_dinp, r_dw, r_db, r_out, r_mean, r_rstd, r_amax};
    for (int i = 0; i < 10; i++) ref->free(ref, rbufs[i]);
    free(inp);
    free(w);
    free(dout);
    free(dinp);
    free(dw);
    free(db);
}

static void test_layernorm_backward_shapes(void) {
    ln_case(200, 768);   // bf16: 96 packs x 2 slices; fp32: 192 packs; 4 blocks of rows, the last partial
    ln_case(130, 40);    // narrow: 5 (bf16) or 10 packs, many slices
    ln_case(70, 37);     // not a multiple of the vector width: 37 columns x 6 slices
    ln_case(65, 2100);   // one element per load, more columns than threads
    ln_case(9, 8200);    // bf16: 1025 packs, more than a block's threads
    if (!test_small()) ln_case(16384, 768);
}

int main(void) {
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        gpu = cuda_backend_create(dts[d]);
        RUN_SUFFIXED(test_layernorm_backward_shapes, dts[d] == DTYPE_BF16 ? "_bf16" : "_fp32");
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
