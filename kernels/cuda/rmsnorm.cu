// rmsnorm.cu: RMSNorm (Llama's normalisation) forward, alone and fused with
// the residual add that precedes it, and backward on the device. As the CPU
// reference (kernels/cpu/rmsnorm.c): out = x * rstd * w, rstd =
// 1 / sqrt(mean(x^2) + eps) saved in FP32; no mean, no bias. The kernels are
// norm.cuh's with LN = false (layernorm.cu's with the mean and bias left out).
#include "kernels/cuda/norm.cuh"

void cuda_rmsnorm_forward(Backend* be, void* out, float* rstd, const void* inp, const void* w, int N, int C,
                          float eps, float* amax) {
    if (be->dtype == DTYPE_BF16)
        norm_forward<bf16, false, false>(be, (bf16*)out, NULL, rstd, NULL, (const bf16*)inp, NULL, (const bf16*)w,
                                         NULL, N, C, eps, amax);
    else
        norm_forward<float, false, false>(be, (float*)out, NULL, rstd, NULL, (const float*)inp, NULL,
                                          (const float*)w, NULL, N, C, eps, amax);
}

void cuda_residual_rmsnorm_forward(Backend* be, void* residual, void* out, float* rstd, const void* a, const void* b,
                                   const void* w, int N, int C, float eps, float* amax) {
    if (be->dtype == DTYPE_BF16)
        norm_forward<bf16, false, true>(be, (bf16*)out, NULL, rstd, (bf16*)residual, (const bf16*)a, (const bf16*)b,
                                        (const bf16*)w, NULL, N, C, eps, amax);
    else
        norm_forward<float, false, true>(be, (float*)out, NULL, rstd, (float*)residual, (const float*)a,
                                         (const float*)b, (const float*)w, NULL, N, C, eps, amax);
}

// dw accumulates (+=); db is not written (the kernel's LN = false).
void cuda_rmsnorm_backward(Backend* be, void* dinp, void* dw, const void* dout, const void* inp, const void* w,
                           const float* rstd, int N, int C, float* amax) {
    if (be->dtype == DTYPE_BF16)
        norm_backward<bf16, false>(be, (bf16*)dinp, (bf16*)dw, NULL, (const bf16*)dout, (const bf16*)inp,
                                   (const bf16*)w, NULL, rstd, N, C, amax);
    else
        norm_backward<float, false>(be, (float*)dinp, (float*)dw, NULL, (const float*)dout, (const float*)inp,
                                    (const float*)w, NULL, rstd, N, C, amax);
}
