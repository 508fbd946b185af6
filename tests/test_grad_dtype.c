// test_grad_dtype.c: --grad-dtype on the CPU backend (tests/grad_dtype_check.h):
//   - 32 micro-steps accumulated in FP32 (the CPU's own dtype: the backward
//     kernels add straight into the gradients) match the float64 sum of the
//     micro-steps' gradients to 1e-5, at ZeRO 0-3, GPT-2 and Llama;
//   - accumulated as BF16 (--grad-dtype bf16 on an FP32 run: each add rounded
//     to bf16) their error is at least 10x larger, i.e. FP32 accumulation is
//     at least 10x more accurate (the requirement), and above 1e-4;
//   - the accumulate_f32 op: exact FP32 adds, and round-to-nearest-even bf16
//     adds, against host references;
//   - trainer_grad_dtype's auto: FP32 for 16-bit runs that accumulate or have
//     ranks, the run's dtype otherwise; explicit choices win.
// The same check on a BF16 CUDA backend: tests/gpu/test_gpu_grad_dtype.c.
#include "llm/trainer.h"
#include "tests/grad_dtype_check.h"
#include "tests/testlib_mpi.h"

static Comm* comm;
static Backend* be;

static void check_arch(const GPTConfig* base) {
    GPTConfig c = *base;
    gpt_config_finish(&c);
    const int micro = 32;
    size_t n;
    double* ref = gd_reference(be, &c, micro, &n);
    for (int stage = 0; stage <= 3; stage++) {
        double e32 = gd_accumulated_error(be, comm, &c, stage, DTYPE_F32, micro, ref, n);
        double e16 = gd_accumulated_error(be, comm, &c, stage, DTYPE_BF16, micro, ref, n);
        printf("# %s ZeRO-%d, %d micro-steps: relative error fp32 %.3g, bf16 %.3g (%.0fx)\n",
               c.arch == ARCH_LLAMA ? "llama" : "gpt2", stage, micro, e32, e16, e16 / e32);
        CHECK(e32 < 1e-5, "ZeRO-%d: FP32 accumulation is %.3g from the float64 reference", stage, e32);
        CHECK(e16 > 1e-4, "ZeRO-%d: emulated BF16 accumulation is only %.3g from the reference", stage, e16);
        CHECK(e32 * 10 <= e16, "ZeRO-%d: FP32 accumulation (%.3g) is not 10x better than BF16 (%.3g)", stage, e32, e16);
    }
    free(ref);
}

static void gpt2_accumulation(void) { check_arch(&GD_GPT2); }
static void llama_accumulation(void) { check_arch(&GD_LLAMA); }

static void accumulate_op(void) {
    const size_t n = 40001;  // over the threading threshold, odd
    float* acc = (float*)xmalloc(n * sizeof(float));
    float* acc16 = (float*)xmalloc(n * sizeof(float));
    float* x = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        acc[i] = (float)((double)(rng_u64(5, i) % 100000) / 7919.0 - 6.0);
        acc16[i] = bf16_to_f32(f32_to_bf16(acc[i]));
        x[i] = (float)((double)(rng_u64(6, i) % 100000) / 104729.0 - 0.5);
    }
    float* want = (float*)xmalloc(n * sizeof(float));
    float* want16 = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        want[i] = acc[i] + x[i];
        want16[i] = bf16_to_f32(f32_to_bf16(acc16[i] + bf16_to_f32(f32_to_bf16(x[i]))));
    }
    be->accumulate_f32(be, acc, x, n, 0);
    be->accumulate_f32(be, acc16, x, n, 1);
    CHECK(memcmp(acc, want, n * sizeof(float)) == 0, "accumulate_f32: FP32 adds differ from the host's");
    CHECK(memcmp(acc16, want16, n * sizeof(float)) == 0, "accumulate_f32: bf16-rounded adds differ from the host's");
    free(acc);
    free(acc16);
    free(x);
    free(want);
    free(want16);
}

static void auto_choice(void) {
    CHECK(trainer_grad_dtype(GRAD_DTYPE_AUTO, DTYPE_BF16, 2, 1) == DTYPE_F32, "auto, bf16, 2 micro-steps");
    CHECK(trainer_grad_dtype(GRAD_DTYPE_AUTO, DTYPE_BF16, 1, 8) == DTYPE_F32, "auto, bf16, 8 ranks");
    CHECK(trainer_grad_dtype(GRAD_DTYPE_AUTO, DTYPE_BF16, 1, 1) == DTYPE_BF16, "auto, bf16, nothing summed");
    CHECK(trainer_grad_dtype(GRAD_DTYPE_AUTO, DTYPE_F32, 16, 8) == DTYPE_F32, "auto, fp32");
    CHECK(trainer_grad_dtype(GRAD_DTYPE_BF16, DTYPE_BF16, 16, 8) == DTYPE_BF16, "bf16 asked");
    CHECK(trainer_grad_dtype(GRAD_DTYPE_FP32, DTYPE_BF16, 1, 1) == DTYPE_F32, "fp32 asked");
}

int main(int argc, char** argv) {
    comm = comm_init(&argc, &argv);
    be = cpu_backend_create(DTYPE_F32, 1);
    comm_attach_backend(comm, be);
    MPI_RUN(accumulate_op);
    MPI_RUN(auto_choice);
    MPI_RUN(gpt2_accumulation);
    MPI_RUN(llama_accumulation);
    be->destroy(be);
    comm_finalize(comm);
    return testlib_failures > 100 ? 100 : testlib_failures;
}
