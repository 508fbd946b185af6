// test_gpu_grad_dtype.c: --grad-dtype on a BF16 CUDA backend (in CI: the
// CPU execution harness, tests/cuda_sim), with tests/grad_dtype_check.h:
//   - a BF16 run's gradient over 32 micro-steps, accumulated in FP32 (each
//     micro-step's BF16 gradient from the scratch added into FP32 gradients,
//     accumulate_f32), is within 1e-5 of the float64 sum of the same BF16
//     micro-step gradients, at ZeRO 0-3 (under the harness GPT-2 at 1, Llama at 3), GPT-2
//     and Llama; accumulated in BF16 (today's path: the kernels add into the
//     BF16 gradients, ZeRO-2/3 add BF16 reduce-scatters into a BF16 shard)
//     it is at least 10x further off;
//   - accumulate_f32 on BF16 input (exact adds into FP32) and on FP32 input
//     with bf16 rounding, against the CPU backend bit for bit;
//   - sum_squares_f32 against the CPU to 1e-6 relative.
// One process: the shard group is one rank (collectives over NCCL or the harness's).
#include "llm/parallel/comm.h"
#include "tests/gpu/gpu_test.h"
#include "tests/grad_dtype_check.h"

static Comm* comm;

// At ZeRO stages first..last.
static void check_arch(const GPTConfig* base, int first, int last) {
    GPTConfig c = *base;
    gpt_config_finish(&c);
    const int micro = 32;
    size_t n;
    double* ref_grad = gd_reference(gpu, &c, micro, &n);
    for (int stage = first; stage <= last; stage++) {
        double e32 = gd_accumulated_error(gpu, comm, &c, stage, DTYPE_F32, micro, ref_grad, n);
        double e16 = gd_accumulated_error(gpu, comm, &c, stage, DTYPE_BF16, micro, ref_grad, n);
        printf("# %s ZeRO-%d bf16 run, %d micro-steps: relative error of the accumulation fp32 %.3g, bf16 %.3g\n",
               c.arch == ARCH_LLAMA ? "llama" : "gpt2", stage, micro, e32, e16);
        CHECK(e32 < 1e-5, "ZeRO-%d: FP32 accumulation is %.3g from the float64 reference", stage, e32);
        CHECK(e32 * 10 <= e16, "ZeRO-%d: FP32 accumulation (%.3g) is not 10x better than BF16 (%.3g)", stage, e32, e16);
    }
    free(ref_grad);
}

// Under the harness one stage each: GPT-2 the flat gradients (ZeRO-1), Llama
// the sharded ones and gathered parameters (ZeRO-3).
static void test_gpt2_accumulation(void) { check_arch(&GD_GPT2, test_small() ? 1 : 0, test_small() ? 1 : 3); }
static void test_llama_accumulation(void) { check_arch(&GD_LLAMA, test_small() ? 3 : 0, 3); }

static void test_accumulate_and_norm_ops(void) {
    const size_t n = 3001;
    float* acc = host_normal(n, 3.0f);
    float* x = host_normal(n, 0.1f);
    for (size_t i = 0; i < n; i++) x[i] = as_stored(x[i]);  // what the GPU's dtype holds
    float* want = (float*)xmalloc(n * sizeof(float));
    float* want16 = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        want[i] = acc[i] + x[i];
        want16[i] = bf16_to_f32(f32_to_bf16(acc[i] + bf16_to_f32(f32_to_bf16(x[i]))));
    }
    float* dacc = gpu_from_f32(acc, n);
    void* dx = gpu_from(x, n);
    gpu->accumulate_f32(gpu, dacc, dx, n, 0);
    float* got = gpu_read_f32(dacc, n);
    CHECK(memcmp(got, want, n * sizeof(float)) == 0, "accumulate_f32 (%s input) differs from exact FP32 adds",
          dtype_name(gdt()));
    free(got);
    gpu->to_device(gpu, dacc, acc, n * sizeof(float));
    gpu->accumulate_f32(gpu, dacc, dx, n, 1);
    got = gpu_read_f32(dacc, n);
    CHECK(memcmp(got, want16, n * sizeof(float)) == 0, "accumulate_f32 with bf16 rounding differs from the host's");
    free(got);
    float* out = gpu_nan_f32(1);
    gpu->sum_squares_f32(gpu, out, dacc, n, 0);
    float* s = gpu_read_f32(out, 1);
    double w = 0;
    for (size_t i = 0; i < n; i++) w += (double)want16[i] * want16[i];
    CHECK_CLOSE(s[0], w, 0, 1e-6, "sum_squares_f32");
    free(s);
    gpu->free(gpu, out);
    gpu->free(gpu, dacc);
    gpu->free(gpu, dx);
    free(acc);
    free(x);
    free(want);
    free(want16);
}

int main(int argc, char** argv) {
    comm = comm_init(&argc, &argv);
    ref = cpu_backend_create(DTYPE_F32, 0);
    gpu = cuda_backend_create(DTYPE_F32);
    RUN_SUFFIXED(test_accumulate_and_norm_ops, "_fp32");
    gpu->destroy(gpu);
    gpu = cuda_backend_create(DTYPE_BF16);
    RUN_SUFFIXED(test_accumulate_and_norm_ops, "_bf16");
    comm_attach_backend(comm, gpu);
    RUN(test_gpt2_accumulation);
    RUN(test_llama_accumulation);
    comm_attach_backend(comm, ref);  // the NCCL device goes before its backend
    gpu->destroy(gpu);
    ref->destroy(ref);
    int failures = TESTS_DONE();
    comm_finalize(comm);
    return failures;
}
