// gelu.c: GELU with the tanh approximation, forward and backward, on the CPU.
//
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). We use the
// identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)): it needs one
// exp (which cpu_expf vectorises, unlike tanhf) and it does not cancel for
// very negative x, where 1 + tanh(u) loses all its digits.
#include "kernels/cpu/cpu.h"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_CUBIC 0.044715f

// sigmoid(2u) and e = exp(-2u) for input x; e is kept because 1 - s = e * s.
static inline float gelu_sigmoid(float x, float* e_out) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float e = cpu_expf(-2.0f * u);
    *e_out = e;
    return 1.0f / (1.0f + e);
}

void cpu_gelu_row(float* out, const float* inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float e;
        float s = gelu_sigmoid(inp[i], &e);
        out[i] = inp[i] * s;
    }
}

// Elementwise, so blocks can go to any thread without changing a bit.
#define GELU_BLOCK 4096
void cpu_gelu_forward(Backend* be, void* out_, const void* inp_, size_t n, float* amax) {
    float* out = (float*)out_;
    const float* inp = (const float*)inp_;
    size_t blocks = ceil_div(n, GELU_BLOCK);
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if (n > CPU_PARALLEL_MIN)
    for (size_t b = 0; b < blocks; b++) {
        size_t i0 = b * GELU_BLOCK, len = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        cpu_gelu_row(out + i0, inp + i0, len);
        if (amax) {
#pragma omp simd reduction(max : mx)
            for (size_t i = i0; i < i0 + len; i++) {
                uint32_t a = fp8_abs_bits(out[i]);
                mx = a > mx ? a : mx;
            }
        }
    }
    cpu_amax_commit(amax, mx);
}

// gelu'(x) = s + x * 2 s (1 - s) * du/dx with s = sigmoid(2u); 2 s (1 - s) is
// 0.5 (1 - tanh(u)^2) * 2 written without tanh. dinp may alias dout (each
// element is read before it is written), so neither pointer is restrict.
void cpu_gelu_backward(Backend* be, void* dinp_, const void* inp_, const void* dout_, size_t n, float* amax) {
    float* dinp = (float*)dinp_;
    const float* inp = (const float*)inp_;
    const float* dout = (const float*)dout_;
    uint32_t mx = 0;
#pragma omp parallel for simd schedule(static) reduction(max : mx) if (n > CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float e;
        float s = gelu_sigmoid(x, &e);
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float grad = s + x * (2.0f * s * (e * s)) * du;
        float d = dout[i] * grad;
        dinp[i] = d;
        uint32_t a = fp8_abs_bits(d);
        mx = a > mx ? a : mx;
    }
    cpu_amax_commit(amax, mx);
}
