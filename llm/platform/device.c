// device.c: backend selection.
#include "llm/platform/device.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "llm/platform/launcher.h"

static int gpus_present(void) { return cuda_device_count ? cuda_device_count() : 0; }

int device_cuda_available(void) { return cuda_backend_create != NULL && gpus_present() > 0; }

int device_wants_cuda(DeviceChoice device) { return device == DEVICE_AUTO ? device_cuda_available() : device == DEVICE_CUDA; }

int device_select_gpu(DeviceChoice device, int local_rank) {
    if (!device_wants_cuda(device) || !cuda_select_device || gpus_present() == 0) return -1;
    LauncherInfo l = launcher_info();
    int gpu = (l.local_rank >= 0 ? l.local_rank : local_rank) % gpus_present();
    cuda_select_device(gpu);
    return gpu;
}

Backend* backend_open(DeviceChoice device, PrecisionChoice precision, int threads, int local_rank, int local_world) {
    if (precision == PRECISION_AUTO) fatal("internal: --precision auto reached the backend unresolved");
    int fp8 = precision == PRECISION_FP8;
    int want_cuda = device_wants_cuda(device);
    // FP8 trains with bf16 activations on GPUs and fp32 ones on the CPU.
    DType dtype = precision == PRECISION_FP32 || (fp8 && !want_cuda) ? DTYPE_F32 : DTYPE_BF16;

    if (!want_cuda) {
        if (dtype != DTYPE_F32)
            fatal("--precision %s: the CPU backend computes in fp32 (use --precision fp32, fp8 to emulate FP8 "
                  "GEMMs, or a GPU)",
                  config_enum_name("precision", precision));
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
    device_select_gpu(device, local_rank);
    return cuda_backend_create(dtype);
}

void backend_choose_attention(Backend* be, AttentionChoice choice, int verbose) {
    if (strcmp(be->name, "cuda") || !cuda_attention_select) {
        if (choice == ATTENTION_CUDNN)
            fatal("--attention cudnn: cuDNN runs on the CUDA backend; this run uses the %s backend (--device)",
                  be->name);
        return;
    }
    cuda_attention_select(be, (int)choice, verbose);
}
