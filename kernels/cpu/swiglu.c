// swiglu.c: the SwiGLU gate of Llama's MLP, forward and backward, on the CPU.
// inp (N, 2H) is the fused gate/up projection's output: gate in columns
// 0..H-1, up in H..2H-1; out (N, H) = silu(gate) * up, silu(x) = x sigmoid(x).
// sigmoid(x) = 1 / (1 + e) with e = exp(-x); 1 - sigmoid(x) = e * sigmoid(x)
// is used in backward because it does not cancel for large x.
#include "kernels/cpu/cpu.h"

void cpu_swiglu_forward(Backend* be, void* out_, const void* inp_, int N, int H, float* amax) {
    float* out = (float*)out_;
    const float* inp = (const float*)inp_;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * H > CPU_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        const float* g = inp + (size_t)n * 2 * H;
        const float* u = g + H;
        float* o = out + (size_t)n * H;
#pragma omp simd reduction(max : mx)
        for (int i = 0; i < H; i++) {
            float s = 1.0f / (1.0f + cpu_expf(-g[i]));
            o[i] = g[i] * s * u[i];
            uint32_t a = fp8_abs_bits(o[i]);
            mx = a > mx ? a : mx;
        }
    }
    cpu_amax_commit(amax, mx);
}

// d gate = dout * up * silu'(gate), silu'(x) = s + x s (1 - s); d up = dout * silu(gate).
void cpu_swiglu_backward(Backend* be, void* dinp_, const void* inp_, const void* dout_, int N, int H,
                         float* amax) {
    float* dinp = (float*)dinp_;
    const float* inp = (const float*)inp_;
    const float* dout = (const float*)dout_;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if ((size_t)N * H > CPU_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        const float* g = inp + (size_t)n * 2 * H;
        const float* u = g + H;
        const float* d = dout + (size_t)n * H;
        float* dg = dinp + (size_t)n * 2 * H;
        float* du = dg + H;
#pragma omp simd reduction(max : mx)
        for (int i = 0; i < H; i++) {
            float x = g[i];
            float e = cpu_expf(-x);
            float s = 1.0f / (1.0f + e);
            float silu = x * s;
            float dsilu = s + x * (s * (e * s));
            dg[i] = d[i] * u[i] * dsilu;
            du[i] = d[i] * silu;
            uint32_t a = fp8_abs_bits(dg[i]), b = fp8_abs_bits(du[i]);
            a = a > b ? a : b;
            mx = a > mx ? a : mx;
        }
    }
    cpu_amax_commit(amax, mx);
}
