// layernorm.cu: layernorm forward (alone, and fused with the residual add
// that precedes it) and backward on the device. As the CPU reference
// (kernels/cpu/layernorm.c): eps 1e-5, biased variance from a second pass
// over the centred values, mean and rstd saved in FP32. The kernels are
// norm.cuh's, shared with RMSNorm (rmsnorm.cu); the backward is one launch,
// deterministic (dw and db partials added in a fixed order by the last block).
#include "kernels/cuda/norm.cuh"

#define LN_EPS 1e-5f

void cuda_layernorm_forward(Backend* be, void* out, float* mean, float* rstd, const void* inp,
                            const void* w, const void* b, int N, int C, float* amax) {
    if (be->dtype == DTYPE_BF16)
        norm_forward<bf16, true, false>(be, (bf16*)out, mean, rstd, NULL, (const bf16*)inp, NULL, (const bf16*)w,
                                        (const bf16*)b, N, C, LN_EPS, amax);
    else
        norm_forward<float, true, false>(be, (float*)out, mean, rstd, NULL, (const float*)inp, NULL,
                                         (const float*)w, (const float*)b, N, C, LN_EPS, amax);
}

void cuda_residual_layernorm_forward(Backend* be, void* residual, void* out, float* mean,
                                     float* rstd, const void* a, const void* b, const void* w,
                                     const void* bias, int N, int C, float* amax) {
    if (be->dtype == DTYPE_BF16)
        norm_forward<bf16, true, true>(be, (bf16*)out, mean, rstd, (bf16*)residual, (const bf16*)a, (const bf16*)b,
                                       (const bf16*)w, (const bf16*)bias, N, C, LN_EPS, amax);
    else
        norm_forward<float, true, true>(be, (float*)out, mean, rstd, (float*)residual, (const float*)a,
                                        (const float*)b, (const float*)w, (const float*)bias, N, C, LN_EPS, amax);
}

// The partials of either backward (layernorm's 2C per block bound RMSNorm's C).
size_t cuda_norm_scratch_bytes(Backend* be, int N, int C) {
    return norm_backward_scratch_bytes(cuda_state(be)->sm_count, N, C);
}

void cuda_layernorm_backward(Backend* be, void* dinp, void* dw, void* db, const void* dout,
                             const void* inp, const void* w, const float* mean, const float* rstd,
                             int N, int C, float* amax) {
    if (be->dtype == DTYPE_BF16)
        norm_backward<bf16, true>(be, (bf16*)dinp, (bf16*)dw, (bf16*)db, (const bf16*)dout, (const bf16*)inp,
                                  (const bf16*)w, mean, rstd, N, C, amax);
    else
        norm_backward<float, true>(be, (float*)dinp, (float*)dw, (float*)db, (const float*)dout,
                                   (const float*)inp, (const float*)w, mean, rstd, N, C, amax);
}
