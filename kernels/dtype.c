// dtype.c: element sizes, printable names and the FP8 format of the dtypes in ops.h, shared by
// every backend (and by the planner and checkpoint code through ops.h).
#include "kernels/ops.h"

size_t dtype_size(DType t) {
    switch (t) {
        case DTYPE_F32: return 4;
        case DTYPE_BF16: return 2;
        case DTYPE_FP8_E4M3: return 1;
        case DTYPE_FP8_E5M2: return 1;
        case DTYPE_I32: return 4;
    }
    fatal("unknown dtype %d", (int)t);
}

const char* dtype_name(DType t) {
    switch (t) {
        case DTYPE_F32: return "fp32";
        case DTYPE_BF16: return "bf16";
        case DTYPE_FP8_E4M3: return "fp8_e4m3";
        case DTYPE_FP8_E5M2: return "fp8_e5m2";
        case DTYPE_I32: return "int32";
    }
    return "unknown";
}

int dtype_fp8_is_e4m3(DType t, const char* backend) {
    if (t != DTYPE_FP8_E4M3 && t != DTYPE_FP8_E5M2) fatal("%s backend: %s is not an FP8 type", backend, dtype_name(t));
    return t == DTYPE_FP8_E4M3;
}
