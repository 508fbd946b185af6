// device.cu: CUDA device discovery, safe to call on machines without a GPU
// or without a driver (it then reports zero devices).
#include <cuda_runtime.h>

#include "llm/util/util.h"

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" void cuda_select_device(int index) {
    cudaError_t err = cudaSetDevice(index);
    if (err != cudaSuccess) fatal("cannot use GPU %d: %s", index, cudaGetErrorString(err));
}
