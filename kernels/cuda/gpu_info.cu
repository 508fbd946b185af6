// gpu_info.cu: the current CUDA device's name and PCI bus id (kernels/cuda_seam.h).
#include <cuda_runtime.h>

extern "C" int cuda_current_device_name(char* out, int len) {
    int dev;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    int i = 0;
    for (; i + 1 < len && prop.name[i]; i++) out[i] = prop.name[i];
    if (len > 0) out[i] = 0;
    return 1;
}

extern "C" int cuda_current_pci_bus_id(char* out, int len) {
    int dev;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(out, len, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

extern "C" int cuda_current_compute_capability(int* major, int* minor) {
    int dev;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    *major = prop.major;
    *minor = prop.minor;
    return 1;
}
