// gpu_info.h: what the CUDA runtime says about the GPU this process computes
// on (the current device), for the MFU peak table and for NVML telemetry.
// Defined in kernels/cuda/gpu_info.cu in CUDA builds; weak here, so CPU-only
// builds link and see them as NULL.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// Each writes a NUL-terminated string and returns 1, or returns 0 when there
// is no current CUDA device.
int cuda_current_device_name(char* out, int len) __attribute__((weak));
// "0000:53:00.0" style, as nvmlDeviceGetHandleByPciBusId expects; unlike a
// device index it does not depend on CUDA_VISIBLE_DEVICES.
int cuda_current_pci_bus_id(char* out, int len) __attribute__((weak));
// The compute capability (e.g. 9, 0 for Hopper).
int cuda_current_compute_capability(int* major, int* minor) __attribute__((weak));

EXTERN_C_END
