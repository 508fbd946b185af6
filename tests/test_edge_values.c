// test_edge_values.c: inputs at the edges of what the arithmetic helpers
// accept (NaN, infinities, the ends of their ranges), against float64.
// Built twice: as a plain test, and under ASan/UBSan with float-cast-overflow
// (fuzz/fuzz.mk), where undefined behaviour on any of these inputs aborts.
#include <float.h>
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "tests/testlib.h"

// cpu_expf: NaN propagates (it once went through a float-to-int conversion
// and a shift of a negative int, both undefined for NaN), -inf and values
// below -87.3 give 0, +inf and values above 88 clamp to exp(88).
static void expf_special_values(void) {
    volatile float nan_in = NAN;
    CHECK(isnan(cpu_expf(nan_in)), "exp(NaN) = %g", cpu_expf(nan_in));
    CHECK(isnan(cpu_expf(-nan_in)), "exp(-NaN) = %g", cpu_expf(-nan_in));
    CHECK(cpu_expf(-INFINITY) == 0.0f, "exp(-inf) = %g", cpu_expf(-INFINITY));
    CHECK(cpu_expf(-1000.0f) == 0.0f && cpu_expf(-87.5f) == 0.0f, "deep underflow is 0");
    float top = cpu_expf(INFINITY);
    CHECK(isfinite(top) && top == cpu_expf(88.0f) && top == cpu_expf(FLT_MAX), "exp(+inf) = %g", top);
    CHECK_CLOSE(top, exp(88.0), 0, 4e-7, "exp(88)");
}

// Everywhere in between it is within a few ulp of exp in double precision.
static void expf_matches_float64(void) {
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.3f + (88.0f + 87.3f) * (float)i / 200000.0f;
        double want = exp((double)x), got = cpu_expf(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    CHECK(worst < 4e-7, "worst relative error %.3g", worst);
}

int main(void) {
    RUN(expf_special_values);
    RUN(expf_matches_float64);
    return testlib_failures;
}
