// telemetry.c: NVML through dlopen/dlsym, per-rank samples, min/max across ranks.
#include "llm/report/telemetry.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------
// The part of NVML's C API we use, declared here (nvml.h is not needed to
// build). Values from NVML's header; they are part of its stable ABI.

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
    unsigned int gpu, memory;  // percent
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;  // bytes
} nvmlMemory_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
};
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };

// Clock event ("throttle") reason bits.
#define NVML_REASON_SW_POWER_CAP 0x4ULL
#define NVML_REASON_HW_SLOWDOWN 0x8ULL
#define NVML_REASON_SW_THERMAL 0x20ULL
#define NVML_REASON_HW_THERMAL 0x40ULL
#define NVML_REASON_HW_POWER_BRAKE 0x80ULL

struct NvmlApi {
    void* lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char* (*error_string)(nvmlReturn_t);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t*);
    nvmlReturn_t (*by_pci_bus_id)(const char*, nvmlDevice_t*);
    nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int);
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*);        // mW
    nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int*);  // mW
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*);
    nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*);
    nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned int*);
    nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*);
};

static const char* FIELD_KEYS[TEL_NUM_FIELDS] = {
    "sm_util", "mem_util", "mem_used_bytes", "mem_total_bytes", "power_w", "power_limit_w", "temp_c",
    "sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz", "throttle_power", "throttle_thermal", "throttle_hw_slowdown"};

const char* telemetry_field_key(TelemetryField f) { return f >= 0 && f < TEL_NUM_FIELDS ? FIELD_KEYS[f] : "?"; }

// The first of the names that the library exports (newer NVML versions
// rename functions and keep the old names as deprecated aliases).
static void* resolve(void* lib, const char* name, const char* fallback) {
    void* p = dlsym(lib, name);
    if (!p && fallback) p = dlsym(lib, fallback);
    return p;
}

static const char* nvml_error(const Telemetry* t, nvmlReturn_t rc) {
    const char* s = t->api && t->api->error_string ? t->api->error_string(rc) : NULL;
    return s ? s : "unknown error";
}

static void turn_off(Telemetry* t, const char* fmt, const char* a, const char* b) {
    snprintf(t->notice, sizeof t->notice, fmt, a, b);
    t->active = 0;
}

// Releases the library; shuts NVML down only if it was initialised.
static void unload(Telemetry* t, int initialized) {
    if (t->api) {
        if (initialized && t->api->shutdown) t->api->shutdown();
        dlclose(t->api->lib);
        free(t->api);
    }
    t->api = NULL;
    t->device = NULL;
    t->active = 0;
}

void telemetry_open(Telemetry* t, const char* pci_bus_id, int index) {
    memset(t, 0, sizeof *t);
    const char* path = getenv("TRAIN_GPT_NVML_LIB");
    if (!path || !path[0]) path = "libnvidia-ml.so.1";
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        turn_off(t, "NVML not available (%s%s)", why ? why : path, "");
        return;
    }
    NvmlApi* api = (NvmlApi*)xcalloc(1, sizeof *api);
    api->lib = lib;
    t->api = api;
#define NVML_FN(field, name, fallback) *(void**)&api->field = resolve(lib, name, fallback)
    NVML_FN(init, "nvmlInit_v2", "nvmlInit");
    NVML_FN(shutdown, "nvmlShutdown", NULL);
    NVML_FN(error_string, "nvmlErrorString", NULL);
    NVML_FN(by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    NVML_FN(by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId");
    NVML_FN(name, "nvmlDeviceGetName", NULL);
    NVML_FN(utilization, "nvmlDeviceGetUtilizationRates", NULL);
    NVML_FN(memory, "nvmlDeviceGetMemoryInfo", NULL);
    NVML_FN(power, "nvmlDeviceGetPowerUsage", NULL);
    NVML_FN(power_limit, "nvmlDeviceGetEnforcedPowerLimit", NULL);
    NVML_FN(temperature, "nvmlDeviceGetTemperature", NULL);
    NVML_FN(clock, "nvmlDeviceGetClockInfo", NULL);
    NVML_FN(max_clock, "nvmlDeviceGetMaxClockInfo", NULL);
    NVML_FN(reasons, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons");
#undef NVML_FN
    if (!api->init || !api->shutdown || !api->by_index) {
        turn_off(t, "%s is not a usable NVML library (nvmlInit_v2, nvmlShutdown or nvmlDeviceGetHandleByIndex_v2 missing)%s",
                 path, "");
        unload(t, 0);
        return;
    }
    nvmlReturn_t rc = api->init();
    if (rc != NVML_SUCCESS) {
        turn_off(t, "nvmlInit failed: %s%s", nvml_error(t, rc), "");
        unload(t, 0);
        return;
    }
    nvmlDevice_t dev = NULL;
    char where[64];
    if (pci_bus_id && pci_bus_id[0] && api->by_pci_bus_id) {
        rc = api->by_pci_bus_id(pci_bus_id, &dev);
        snprintf(where, sizeof where, "PCI bus id %s", pci_bus_id);
    } else {
        rc = api->by_index((unsigned int)index, &dev);
        snprintf(where, sizeof where, "index %d", index);
    }
    if (rc != NVML_SUCCESS) {
        turn_off(t, "no GPU at NVML %s (%s)", where, nvml_error(t, rc));
        unload(t, 1);
        return;
    }
    t->device = dev;
    if (!api->name || api->name(dev, t->device_name, sizeof t->device_name) != NVML_SUCCESS)
        snprintf(t->device_name, sizeof t->device_name, "GPU at NVML %s", where);
    t->active = 1;
}

void telemetry_close(Telemetry* t) { unload(t, 1); }

// One query's outcome: a value, "missing" (the GPU does not support it), or
// a failure that turns telemetry off. Returns 0 on failure.
static int query(Telemetry* t, nvmlReturn_t rc, const char* what, double* slot, double value) {
    if (rc == NVML_SUCCESS) {
        *slot = value;
        return 1;
    }
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_NO_PERMISSION) return 1;
    turn_off(t, "%s failed: %s", what, nvml_error(t, rc));
    t->notice_pending = 1;
    return 0;
}

int telemetry_read(Telemetry* t, double v[TEL_NUM_FIELDS]) {
    for (int i = 0; i < TEL_NUM_FIELDS; i++) v[i] = NAN;
    if (!t->active) return 0;
    const NvmlApi* a = t->api;
    nvmlDevice_t d = (nvmlDevice_t)t->device;
    unsigned int u = 0;
    int ok = 1;
    nvmlReturn_t rc;
    if (ok && a->utilization) {
        nvmlUtilization_t util = {0, 0};
        rc = a->utilization(d, &util);
        ok = query(t, rc, "nvmlDeviceGetUtilizationRates", &v[TEL_SM_UTIL], util.gpu);
        if (ok && rc == NVML_SUCCESS) v[TEL_MEM_UTIL] = util.memory;
    }
    if (ok && a->memory) {
        nvmlMemory_t mem = {0, 0, 0};
        rc = a->memory(d, &mem);
        ok = query(t, rc, "nvmlDeviceGetMemoryInfo", &v[TEL_MEM_USED], (double)mem.used);
        if (ok && rc == NVML_SUCCESS) v[TEL_MEM_TOTAL] = (double)mem.total;
    }
    // Each call first, then its value: the call fills `u`, and C leaves the
    // order in which function arguments are evaluated unspecified.
    if (ok && a->power) {
        rc = a->power(d, &u);
        ok = query(t, rc, "nvmlDeviceGetPowerUsage", &v[TEL_POWER], u / 1000.0);
    }
    if (ok && a->power_limit) {
        rc = a->power_limit(d, &u);
        ok = query(t, rc, "nvmlDeviceGetEnforcedPowerLimit", &v[TEL_POWER_LIMIT], u / 1000.0);
    }
    if (ok && a->temperature) {
        rc = a->temperature(d, NVML_TEMPERATURE_GPU, &u);
        ok = query(t, rc, "nvmlDeviceGetTemperature", &v[TEL_TEMP], u);
    }
    if (ok && a->clock) {
        rc = a->clock(d, NVML_CLOCK_SM, &u);
        ok = query(t, rc, "nvmlDeviceGetClockInfo", &v[TEL_SM_CLOCK], u);
    }
    if (ok && a->max_clock) {
        rc = a->max_clock(d, NVML_CLOCK_SM, &u);
        ok = query(t, rc, "nvmlDeviceGetMaxClockInfo", &v[TEL_SM_CLOCK_MAX], u);
    }
    if (ok && a->clock) {
        rc = a->clock(d, NVML_CLOCK_MEM, &u);
        ok = query(t, rc, "nvmlDeviceGetClockInfo", &v[TEL_MEM_CLOCK], u);
    }
    if (ok && a->reasons) {
        unsigned long long r = 0;
        rc = a->reasons(d, &r);
        ok = query(t, rc, "nvmlDeviceGetCurrentClocksEventReasons", &v[TEL_THROTTLE_POWER],
                   (r & (NVML_REASON_SW_POWER_CAP | NVML_REASON_HW_POWER_BRAKE)) ? 1 : 0);
        if (ok && rc == NVML_SUCCESS) {
            v[TEL_THROTTLE_THERMAL] = (r & (NVML_REASON_SW_THERMAL | NVML_REASON_HW_THERMAL)) ? 1 : 0;
            v[TEL_THROTTLE_HW] = (r & NVML_REASON_HW_SLOWDOWN) ? 1 : 0;
        }
    }
    if (!ok) {
        // Nothing from a sample that failed half-way: the values could mix two moments.
        for (int i = 0; i < TEL_NUM_FIELDS; i++) v[i] = NAN;
        telemetry_close(t);
        return 0;
    }
    return 1;
}

void telemetry_gather(Telemetry* t, const RankReducer* reduce, TelemetryRange* out) {
    double v[TEL_NUM_FIELDS];
    telemetry_read(t, v);
    // A missing value must lose both reductions, so it travels as +inf / -inf.
    for (int i = 0; i < TEL_NUM_FIELDS; i++) {
        out->lo[i] = isnan(v[i]) ? INFINITY : v[i];
        out->hi[i] = isnan(v[i]) ? -INFINITY : v[i];
    }
    rank_minmax(reduce, out->lo, out->hi, TEL_NUM_FIELDS);
    for (int i = 0; i < TEL_NUM_FIELDS; i++) {
        if (isinf(out->lo[i])) out->lo[i] = NAN;
        if (isinf(out->hi[i])) out->hi[i] = NAN;
    }
}

int telemetry_range_any(const TelemetryRange* r) {
    for (int i = 0; i < TEL_NUM_FIELDS; i++)
        if (!isnan(r->lo[i])) return 1;
    return 0;
}

// "97" or "95..99" (min..max when the ranks differ), scaled and with `decimals`.
static void range_text(char* out, size_t len, const TelemetryRange* r, TelemetryField f, double scale, int decimals) {
    double lo = r->lo[f] * scale, hi = r->hi[f] * scale;
    char a[32], b[32];
    snprintf(a, sizeof a, "%.*f", decimals, lo);
    snprintf(b, sizeof b, "%.*f", decimals, hi);
    if (strcmp(a, b) == 0) snprintf(out, len, "%s", a);
    else snprintf(out, len, "%s..%s", a, b);
}

void telemetry_format(const TelemetryRange* r, char* out, size_t len) {
    size_t n = 0;
    out[0] = 0;
#define PART(...)                                                              \
    do {                                                                       \
        if (n < len) n += (size_t)snprintf(out + n, len - n, __VA_ARGS__);    \
    } while (0)
#define HAS(f) (!isnan(r->lo[f]))
    // Each measurement as "label value[/limit]unit", the limit where the GPU reports one.
    static const struct {
        TelemetryField f, limit;  // limit: TEL_NUM_FIELDS for none
        const char *label, *unit;
        double scale;
        int decimals;
    } PARTS[] = {
        {TEL_SM_UTIL, TEL_NUM_FIELDS, "sm", "%", 1, 0},
        {TEL_MEM_UTIL, TEL_NUM_FIELDS, "mem-util", "%", 1, 0},
        {TEL_MEM_USED, TEL_MEM_TOTAL, "hbm", " GiB", 1.0 / (1024.0 * 1024.0 * 1024.0), 1},
        {TEL_POWER, TEL_POWER_LIMIT, "power", " W", 1, 0},
        {TEL_TEMP, TEL_NUM_FIELDS, "temp", " C", 1, 0},
        {TEL_SM_CLOCK, TEL_SM_CLOCK_MAX, "sm-clock", " MHz", 1, 0},
        {TEL_MEM_CLOCK, TEL_NUM_FIELDS, "mem-clock", " MHz", 1, 0},
    };
    char a[80];
    for (size_t i = 0; i < sizeof PARTS / sizeof PARTS[0]; i++) {
        if (!HAS(PARTS[i].f)) continue;
        range_text(a, sizeof a, r, PARTS[i].f, PARTS[i].scale, PARTS[i].decimals);
        PART("%s%s %s", n ? " | " : "", PARTS[i].label, a);
        if (PARTS[i].limit != TEL_NUM_FIELDS && HAS(PARTS[i].limit)) {
            range_text(a, sizeof a, r, PARTS[i].limit, PARTS[i].scale, PARTS[i].decimals);
            PART("/%s", a);
        }
        PART("%s", PARTS[i].unit);
    }
    if (HAS(TEL_THROTTLE_POWER)) {
        // hi = 1: some rank is held down; lo = 0 as well: not all of them.
        static const struct { TelemetryField f; const char* name; } REASONS[] = {
            {TEL_THROTTLE_POWER, "power"}, {TEL_THROTTLE_THERMAL, "thermal"}, {TEL_THROTTLE_HW, "hw-slowdown"}};
        PART("%sthrottle", n ? " | " : "");
        int any = 0;
        for (size_t i = 0; i < sizeof REASONS / sizeof REASONS[0]; i++) {
            TelemetryField f = REASONS[i].f;
            if (!HAS(f) || r->hi[f] < 1) continue;
            PART("%s%s%s", any ? "," : " ", REASONS[i].name, r->lo[f] < 1 ? "(some ranks)" : "");
            any = 1;
        }
        if (!any) PART(" none");
    }
#undef HAS
#undef PART
}
