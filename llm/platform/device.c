// device.c: backend selection.
#include "llm/platform/device.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int gpus_present(void) { return cuda_device_count ? cuda_device_count() : 0; }

int device_cuda_available(void) { return cuda_backend_create != NULL && gpus_present() > 0; }

int device_wants_cuda(const char* device) {
    if (!strcmp(device, "auto")) return device_cuda_available();
    if (!strcmp(device, "cpu")) return 0;
    if (!strcmp(device, "cuda")) return 1;
    fatal("--device '%s' is not one of auto, cpu, cuda", device);
}

Backend* backend_open(const char* device, const char* precision, int threads, int local_rank, int local_world) {
    int fp8 = !strcmp(precision, "fp8");
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16") && !fp8)
        fatal("--precision '%s' is not one of fp32, bf16, fp8", precision);
    int want_cuda = device_wants_cuda(device);
    // FP8 trains with bf16 activations on GPUs and fp32 ones on the CPU.
    DType dtype = !strcmp(precision, "fp32") || (fp8 && !want_cuda) ? DTYPE_F32 : DTYPE_BF16;

    if (!want_cuda) {
        if (dtype != DTYPE_F32)
            fatal("--precision %s: the CPU backend computes in fp32 (use --precision fp32, fp8 to emulate FP8 "
                  "GEMMs, or a GPU)",
                  precision);
        // Ranks on one machine share its cores rather than each taking all.
        if (threads == 0 && local_world > 1 && !getenv("OMP_NUM_THREADS")) {
            threads = omp_get_num_procs() / local_world;
            if (threads < 1) threads = 1;
        }
        return cpu_backend_create(dtype, threads);
    }
    if (!cuda_device_count) fatal("--device cuda: this binary was built without CUDA (nvcc was not found at build time)");
    if (gpus_present() == 0) fatal("--device cuda: no CUDA GPU is visible to this process");
    if (!cuda_backend_create) fatal("--device cuda: this build has no CUDA backend");
    if (cuda_select_device) cuda_select_device(local_rank % gpus_present());
    return cuda_backend_create(dtype);
}

void backend_choose_attention(Backend* be, const char* mode, int verbose) {
    if (strcmp(mode, "auto") && strcmp(mode, "cudnn") && strcmp(mode, "native"))
        fatal("--attention '%s' is not one of auto, cudnn, native", mode);
    if (strcmp(be->name, "cuda") || !cuda_attention_select) {
        if (!strcmp(mode, "cudnn"))
            fatal("--attention cudnn: cuDNN runs on the CUDA backend; this run uses the %s backend (--device)",
                  be->name);
        return;
    }
    cuda_attention_select(be, mode, verbose);
}
