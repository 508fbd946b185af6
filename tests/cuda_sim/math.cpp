// math.cpp: the CUDA fast-math intrinsics whose names glibc's <math.h> already
// declares (as internal aliases it does not export): defined here with the
// accurate results, like the inline ones in sim_device.h.
#include <math.h>

extern "C" {
float __expf(float x) noexcept { return expf(x); }
float __logf(float x) noexcept { return logf(x); }
float __log2f(float x) noexcept { return log2f(x); }
float __log10f(float x) noexcept { return log10f(x); }
float __exp10f(float x) noexcept { return exp10f(x); }
float __sinf(float x) noexcept { return sinf(x); }
float __cosf(float x) noexcept { return cosf(x); }
float __tanf(float x) noexcept { return tanf(x); }
float __powf(float x, float y) noexcept { return powf(x, y); }
}
