// test_telemetry.c: NVML telemetry (llm/report/telemetry.c) against the fake NVML
// library tests/fake_nvml.c (built next to this program): loading and symbol
// resolution, device choice, every query's units, throttle decoding,
// unsupported and failing calls, the min/max reduction across ranks and the
// printed line; and the notice when there is no library at all.
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm/report/telemetry.h"
#include "tests/testlib.h"

static char fake_lib[1024];

static void use_fake(void) {
    setenv("TRAIN_GPT_NVML_LIB", fake_lib, 1);
    unsetenv("FAKE_NVML_FAIL");
    unsetenv("FAKE_NVML_FAIL_AFTER");
    unsetenv("FAKE_NVML_UNSUPPORTED");
    unsetenv("FAKE_NVML_REASONS");
    unsetenv("FAKE_NVML_DEVICES");
}

static void missing_library_gives_notice(void) {
    setenv("TRAIN_GPT_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    Telemetry t;
    telemetry_open(&t, NULL, 0);
    CHECK(!t.active, "telemetry active without a library");
    CHECK(strstr(t.notice, "NVML not available") && strstr(t.notice, "/nonexistent"), "notice: '%s'", t.notice);
    double v[TEL_NUM_FIELDS];
    CHECK(telemetry_read(&t, v) == 0, "read succeeded without a library");
    for (int i = 0; i < TEL_NUM_FIELDS; i++) CHECK(isnan(v[i]), "field %d is %g, want NaN", i, v[i]);
    CHECK(!t.notice_pending, "a missing library is not a mid-run failure");
    telemetry_close(&t);
}

static void not_an_nvml_library(void) {
    // A real shared library without NVML's symbols: libm.
    setenv("TRAIN_GPT_NVML_LIB", "libm.so.6", 1);
    Telemetry t;
    telemetry_open(&t, NULL, 0);
    CHECK(!t.active && strstr(t.notice, "not a usable NVML library"), "notice: '%s'", t.notice);
    telemetry_close(&t);
}

static void reads_every_field(void) {
    use_fake();
    Telemetry t;
    telemetry_open(&t, NULL, 1);
    CHECK(t.active, "not active: %s", t.notice);
    CHECK(!strcmp(t.device_name, "Fake GPU 1"), "device name '%s'", t.device_name);
    double v[TEL_NUM_FIELDS];
    CHECK(telemetry_read(&t, v) == 1, "read failed: %s", t.notice);
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    CHECK_CLOSE(v[TEL_SM_UTIL], 91, 0, 0, "sm util");
    CHECK_CLOSE(v[TEL_MEM_UTIL], 40, 0, 0, "mem util");
    CHECK_CLOSE(v[TEL_MEM_USED], 11 * GiB, 0, 0, "mem used");
    CHECK_CLOSE(v[TEL_MEM_TOTAL], 80 * GiB, 0, 0, "mem total");
    CHECK_CLOSE(v[TEL_POWER], 351, 0, 0, "power (mW -> W)");
    CHECK_CLOSE(v[TEL_POWER_LIMIT], 700, 0, 0, "power limit");
    CHECK_CLOSE(v[TEL_TEMP], 61, 0, 0, "temperature");
    CHECK_CLOSE(v[TEL_SM_CLOCK], 1880, 0, 0, "sm clock");
    CHECK_CLOSE(v[TEL_SM_CLOCK_MAX], 1980, 0, 0, "sm clock max");
    CHECK_CLOSE(v[TEL_MEM_CLOCK], 2619, 0, 0, "mem clock");
    CHECK(v[TEL_THROTTLE_POWER] == 0 && v[TEL_THROTTLE_THERMAL] == 0 && v[TEL_THROTTLE_HW] == 0, "throttled");
    telemetry_close(&t);
}

static void device_by_pci_bus_id(void) {
    use_fake();
    Telemetry t;
    telemetry_open(&t, "00000000:10:00.0", 1);  // the bus id wins over the index
    CHECK(t.active && !strcmp(t.device_name, "Fake GPU 0"), "device '%s' (%s)", t.device_name, t.notice);
    telemetry_close(&t);
    telemetry_open(&t, NULL, 7);
    CHECK(!t.active && strstr(t.notice, "no GPU at NVML index 7"), "notice: '%s'", t.notice);
    telemetry_close(&t);
    telemetry_open(&t, "00000000:99:00.0", 0);
    CHECK(!t.active && strstr(t.notice, "PCI bus id 00000000:99:00.0") && strstr(t.notice, "Not Found"), "notice: '%s'",
          t.notice);
    telemetry_close(&t);
}

static void throttle_reasons_decoded(void) {
    static const struct {
        const char* bits;
        int power, thermal, hw;
    } CASES[] = {
        {"0x1", 0, 0, 0},    // GPU idle: not a slowdown
        {"0x4", 1, 0, 0},    // software power cap
        {"0x80", 1, 0, 0},   // hardware power brake
        {"0x20", 0, 1, 0},   // software thermal
        {"0x40", 0, 1, 0},   // hardware thermal
        {"0x8", 0, 0, 1},    // hardware slowdown
        {"0xEC", 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        use_fake();
        setenv("FAKE_NVML_REASONS", CASES[i].bits, 1);
        Telemetry t;
        telemetry_open(&t, NULL, 0);
        double v[TEL_NUM_FIELDS];
        telemetry_read(&t, v);
        CHECK(v[TEL_THROTTLE_POWER] == CASES[i].power && v[TEL_THROTTLE_THERMAL] == CASES[i].thermal &&
                  v[TEL_THROTTLE_HW] == CASES[i].hw,
              "reasons %s -> power %g thermal %g hw %g", CASES[i].bits, v[TEL_THROTTLE_POWER], v[TEL_THROTTLE_THERMAL],
              v[TEL_THROTTLE_HW]);
        telemetry_close(&t);
    }
}

static void unsupported_query_is_missing(void) {
    use_fake();
    setenv("FAKE_NVML_UNSUPPORTED", "nvmlDeviceGetPowerUsage", 1);
    Telemetry t;
    telemetry_open(&t, NULL, 0);
    double v[TEL_NUM_FIELDS];
    CHECK(telemetry_read(&t, v) == 1 && t.active, "an unsupported query turned telemetry off: %s", t.notice);
    CHECK(isnan(v[TEL_POWER]), "power %g, want NaN", v[TEL_POWER]);
    CHECK_CLOSE(v[TEL_TEMP], 60, 0, 0, "temperature after the unsupported query");
    CHECK(!t.notice_pending, "notice for an unsupported query");
    telemetry_close(&t);
}

static void failing_call_turns_off_once(void) {
    use_fake();
    setenv("FAKE_NVML_FAIL", "nvmlDeviceGetTemperature", 1);
    setenv("FAKE_NVML_FAIL_AFTER", "2", 1);
    Telemetry t;
    telemetry_open(&t, NULL, 0);
    double v[TEL_NUM_FIELDS];
    CHECK(telemetry_read(&t, v) == 1 && telemetry_read(&t, v) == 1, "the first two reads should work");
    CHECK(telemetry_read(&t, v) == 0, "the third read should fail");
    CHECK(!t.active && t.notice_pending, "active %d pending %d", t.active, t.notice_pending);
    CHECK(strstr(t.notice, "nvmlDeviceGetTemperature failed: Unknown Error"), "notice: '%s'", t.notice);
    for (int i = 0; i < TEL_NUM_FIELDS; i++) CHECK(isnan(v[i]), "field %d of a failed sample is %g", i, v[i]);
    t.notice_pending = 0;
    CHECK(telemetry_read(&t, v) == 0 && !t.notice_pending, "telemetry came back, or noticed twice");
    telemetry_close(&t);

    use_fake();
    setenv("FAKE_NVML_FAIL", "nvmlInit_v2", 1);
    telemetry_open(&t, NULL, 0);
    CHECK(!t.active && strstr(t.notice, "nvmlInit failed: Unknown Error"), "notice: '%s'", t.notice);
    telemetry_close(&t);
}

// A reducer standing in for a second rank whose values are `other` (NaN:
// that rank has no value).
static double other_rank[TEL_NUM_FIELDS];
static void two_rank_minmax(void* ctx, double* lo, double* hi, int n) {
    (*(int*)ctx)++;
    for (int i = 0; i < n; i++) {
        double o = other_rank[i];
        double olo = isnan(o) ? INFINITY : o, ohi = isnan(o) ? -INFINITY : o;
        CHECK(!isnan(lo[i]) && !isnan(hi[i]), "NaN handed to the reducer (field %d)", i);
        lo[i] = lo[i] < olo ? lo[i] : olo;
        hi[i] = hi[i] > ohi ? hi[i] : ohi;
    }
}

static void reduces_across_ranks(void) {
    use_fake();
    setenv("FAKE_NVML_UNSUPPORTED", "nvmlDeviceGetPowerUsage", 1);
    Telemetry t;
    telemetry_open(&t, NULL, 0);  // this rank: sm 90, temp 60, no power reading
    for (int i = 0; i < TEL_NUM_FIELDS; i++) other_rank[i] = NAN;
    other_rank[TEL_SM_UTIL] = 97;
    other_rank[TEL_TEMP] = 55;
    other_rank[TEL_POWER] = 690;
    other_rank[TEL_THROTTLE_POWER] = 1;  // the other rank is power-capped
    int calls = 0;
    RankReducer red = {&calls, two_rank_minmax};
    TelemetryRange r;
    telemetry_gather(&t, &red, &r);
    CHECK(calls == 1, "reducer called %d times", calls);
    CHECK(r.lo[TEL_SM_UTIL] == 90 && r.hi[TEL_SM_UTIL] == 97, "sm %g..%g", r.lo[TEL_SM_UTIL], r.hi[TEL_SM_UTIL]);
    CHECK(r.lo[TEL_TEMP] == 55 && r.hi[TEL_TEMP] == 60, "temp %g..%g", r.lo[TEL_TEMP], r.hi[TEL_TEMP]);
    CHECK(r.lo[TEL_POWER] == 690 && r.hi[TEL_POWER] == 690, "power from the one rank that has it: %g..%g",
          r.lo[TEL_POWER], r.hi[TEL_POWER]);
    CHECK(r.lo[TEL_MEM_CLOCK] == 2619 && r.hi[TEL_MEM_CLOCK] == 2619, "mem clock from this rank only");
    CHECK(r.lo[TEL_THROTTLE_POWER] == 0 && r.hi[TEL_THROTTLE_POWER] == 1, "throttle %g..%g",
          r.lo[TEL_THROTTLE_POWER], r.hi[TEL_THROTTLE_POWER]);
    CHECK(telemetry_range_any(&r), "range reported empty");
    char line[1024];
    telemetry_format(&r, line, sizeof line);
    const char* want[] = {"sm 90..97%", "mem-util 40%", "hbm 10.0/80.0 GiB", "power 690/700 W", "temp 55..60 C",
                          "sm-clock 1980/1980 MHz", "mem-clock 2619 MHz", "throttle power(some ranks)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(line, want[i]), "'%s' not in '%.300s'", want[i], line);
    telemetry_close(&t);

    // No rank has anything: NaN everywhere, nothing to print.
    setenv("TRAIN_GPT_NVML_LIB", "/nonexistent", 1);
    telemetry_open(&t, NULL, 0);
    for (int i = 0; i < TEL_NUM_FIELDS; i++) other_rank[i] = NAN;
    telemetry_gather(&t, &red, &r);
    CHECK(!telemetry_range_any(&r), "a range from no data");
    for (int i = 0; i < TEL_NUM_FIELDS; i++) CHECK(isnan(r.lo[i]) && isnan(r.hi[i]), "field %d not NaN", i);
    telemetry_close(&t);
}

static void one_rank_needs_no_reducer(void) {
    use_fake();
    Telemetry t;
    telemetry_open(&t, NULL, 1);
    TelemetryRange r;
    telemetry_gather(&t, NULL, &r);
    for (int i = 0; i < TEL_NUM_FIELDS; i++) CHECK(r.lo[i] == r.hi[i], "field %d: %g..%g", i, r.lo[i], r.hi[i]);
    char line[1024];
    telemetry_format(&r, line, sizeof line);
    CHECK(!strcmp(line, "sm 91% | mem-util 40% | hbm 11.0/80.0 GiB | power 351/700 W | temp 61 C | "
                        "sm-clock 1880/1980 MHz | mem-clock 2619 MHz | throttle none"),
          "line '%.300s'", line);
    telemetry_close(&t);
}

int main(int argc, char** argv) {
    (void)argc;
    char* self = strdup(argv[0]);
    snprintf(fake_lib, sizeof fake_lib, "%s/libfake_nvml.so", dirname(self));
    free(self);
    RUN(missing_library_gives_notice);
    RUN(not_an_nvml_library);
    RUN(reads_every_field);
    RUN(device_by_pci_bus_id);
    RUN(throttle_reasons_decoded);
    RUN(unsupported_query_is_missing);
    RUN(failing_call_turns_off_once);
    RUN(reduces_across_ranks);
    RUN(one_rank_needs_no_reducer);
    return TESTS_DONE();
}
