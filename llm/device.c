// device.c: backend selection.
#include "llm/device.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

DType parse_precision(const char* precision) {
    if (!strcmp(precision, "fp32")) return DTYPE_F32;
    if (!strcmp(precision, "bf16")) return DTYPE_BF16;
    fatal("--precision '%s' is not one of fp32, bf16", precision);
}

static int gpus_present(void) { return cuda_device_count ? cuda_device_count() : 0; }

Backend* backend_open(const char* device, const char* precision, int threads, int local_rank, int local_world) {
    DType dtype = parse_precision(precision);
    int want_cuda;
    if (!strcmp(device, "auto")) want_cuda = gpus_present() > 0 && cuda_backend_create != NULL;
    else if (!strcmp(device, "cpu")) want_cuda = 0;
    else if (!strcmp(device, "cuda")) want_cuda = 1;
    else fatal("--device '%s' is not one of auto, cpu, cuda", device);

    if (!want_cuda) {
        if (dtype != DTYPE_F32)
            fatal("--precision %s: the CPU backend computes in fp32 (use --precision fp32 or a GPU)", precision);
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
