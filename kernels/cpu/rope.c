// rope.c: rotary position embeddings on the CPU, and the frequency table that
// every backend takes (rope_table, computed in double on the host).
//
// Pair i of a head of size HS is (x[i], x[i + HS/2]) (Hugging Face's
// rotate_half convention, so their checkpoints load without permuting q and
// k), rotated by the angle t * f_i of token t with f_i = theta^(-2i/HS).
// The first NH + NKV heads of a token's qkv row are exactly its query and key
// heads, so one loop over them covers both.
#include <math.h>

#include "kernels/cpu/cpu.h"

// Llama 3.1's frequency scaling: wavelengths shorter than
// original_max_pos / high_freq_factor keep their frequency, those longer than
// original_max_pos / low_freq_factor are divided by factor, and the band in
// between blends the two linearly in original_max_pos / wavelength.
static double scaled_frequency(double f, const RopeScaling* sc) {
    if (!sc || sc->factor == 0.0f) return f;
    double wavelen = 2.0 * M_PI / f;
    double low_wavelen = sc->original_max_pos / (double)sc->low_freq_factor;
    double high_wavelen = sc->original_max_pos / (double)sc->high_freq_factor;
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / sc->factor;
    double smooth = (sc->original_max_pos / wavelen - sc->low_freq_factor) /
                    (double)(sc->high_freq_factor - sc->low_freq_factor);
    return (1.0 - smooth) * f / sc->factor + smooth * f;
}

void rope_table(float* freqs, int T, int HS, double theta, const RopeScaling* scaling) {
    if (HS <= 0 || HS % 2 != 0) fatal("rope: head size %d is not even", HS);
    if (!(theta > 1.0)) fatal("rope: theta %g must be greater than 1", theta);
    int half = HS / 2;
    for (int i = 0; i < half; i++) {
        double f = scaled_frequency(pow(theta, -2.0 * i / HS), scaling);
        for (int t = 0; t < T; t++) {
            double angle = (double)t * f;
            freqs[((size_t)t * half + i) * 2] = (float)cos(angle);
            freqs[((size_t)t * half + i) * 2 + 1] = (float)sin(angle);
        }
    }
}

// Rotates the query and key heads of every token by +angle (sign 1) or
// -angle (sign -1, the backward pass: a rotation's transpose is its inverse).
static void rope_rotate(float* qkv, const float* freqs, int B, int T, int NH, int NKV, int HS, float sign) {
    if (HS % 2 != 0) fatal("rope: head size %d is not even", HS);
    int half = HS / 2, heads = NH + NKV;
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    size_t N = (size_t)B * T;
#pragma omp parallel for schedule(static) if (N * heads * HS > CPU_PARALLEL_MIN)
    for (size_t n = 0; n < N; n++) {
        const float* f = freqs + (n % (size_t)T) * half * 2;
        for (int h = 0; h < heads; h++) {
            float* x = qkv + n * stride + (size_t)h * HS;
            for (int i = 0; i < half; i++) {
                float c = f[2 * i], s = sign * f[2 * i + 1];
                float x0 = x[i], x1 = x[i + half];
                x[i] = fmaf(x0, c, -(x1 * s));
                x[i + half] = fmaf(x0, s, x1 * c);
            }
        }
    }
}

void cpu_rope_forward(Backend* be, void* qkv, const float* freqs, int B, int T, int NH, int NKV, int HS) {
    rope_rotate((float*)qkv, freqs, B, T, NH, NKV, HS, 1.0f);
}

void cpu_rope_backward(Backend* be, void* dqkv, const float* freqs, int B, int T, int NH, int NKV, int HS) {
    rope_rotate((float*)dqkv, freqs, B, T, NH, NKV, HS, -1.0f);
}
