// device_memory.cu: the current GPU's name and free/total memory, for the
// planner (--plan and --auto plan for the GPU present). Safe without a GPU.
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int cuda_device_memory(size_t* free_bytes, size_t* total_bytes, char* name, int name_len) {
    int device = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
        cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        cudaGetLastError();  // clear the error: the caller falls back to other sources
        return 0;
    }
    snprintf(name, (size_t)name_len, "%s", prop.name);
    return 1;
}
