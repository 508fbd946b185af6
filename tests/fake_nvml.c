// fake_nvml.c: a stand-in for libnvidia-ml.so.1, built as a shared library
// so the telemetry code's dlopen/dlsym path, its parsing of every query and
// its failure handling run in CI, where there is no GPU or driver. Loaded
// through TRAIN_GPT_NVML_LIB.
//
// Device i (of FAKE_NVML_DEVICES, default 2) reports: SM utilisation 90+i %,
// memory utilisation 40 %, (10+i) GiB used of 80 GiB, 350+i W of a 700 W
// limit, 60+i C, SM clock 1980-100i MHz of 1980, memory clock 2619 MHz, and
// the clock event reasons FAKE_NVML_REASONS (hex, default 0). Its PCI bus id
// is 00000000:1i:00.0 (i < 10).
//
// Failures: FAKE_NVML_FAIL=<function> makes that function return
// NVML_ERROR_UNKNOWN once it has succeeded FAKE_NVML_FAIL_AFTER times
// (default 0) since nvmlInit; FAKE_NVML_UNSUPPORTED=<function> makes it
// return NVML_ERROR_NOT_SUPPORTED.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct {
    int index;
} FakeDevice;
typedef FakeDevice* nvmlDevice_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

#define OK 0
#define NOT_SUPPORTED 3
#define NOT_FOUND 6
#define UNKNOWN 999
#define MAX_DEVICES 10

static FakeDevice devices[MAX_DEVICES];
static int calls_since_init;

static int num_devices(void) {
    const char* s = getenv("FAKE_NVML_DEVICES");
    int n = s ? atoi(s) : 2;
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

// The outcome the environment asks for, for a call of `fn`.
static nvmlReturn_t outcome(const char* fn) {
    const char* uns = getenv("FAKE_NVML_UNSUPPORTED");
    if (uns && !strcmp(uns, fn)) return NOT_SUPPORTED;
    const char* fail = getenv("FAKE_NVML_FAIL");
    if (fail && !strcmp(fail, fn)) {
        const char* after = getenv("FAKE_NVML_FAIL_AFTER");
        if (calls_since_init++ >= (after ? atoi(after) : 0)) return UNKNOWN;
    }
    return OK;
}

#define CHECK_OUTCOME()                         \
    do {                                        \
        nvmlReturn_t rc_ = outcome(__func__);   \
        if (rc_ != OK) return rc_;              \
    } while (0)

nvmlReturn_t nvmlInit_v2(void) {
    calls_since_init = 0;
    for (int i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    CHECK_OUTCOME();
    return OK;
}

nvmlReturn_t nvmlShutdown(void) { return OK; }

const char* nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case NOT_FOUND: return "Not Found";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* dev) {
    CHECK_OUTCOME();
    if ((int)index >= num_devices()) return 2;  // NVML_ERROR_INVALID_ARGUMENT
    *dev = &devices[index];
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* dev) {
    CHECK_OUTCOME();
    for (int i = 0; i < num_devices(); i++) {
        char id[32];
        snprintf(id, sizeof id, "00000000:1%d:00.0", i);
        if (!strcmp(bus, id)) {
            *dev = &devices[i];
            return OK;
        }
    }
    return NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned int len) {
    CHECK_OUTCOME();
    snprintf(name, len, "Fake GPU %d", dev->index);
    return OK;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t* u) {
    CHECK_OUTCOME();
    u->gpu = 90 + (unsigned)dev->index;
    u->memory = 40;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t* m) {
    CHECK_OUTCOME();
    const unsigned long long gib = 1ULL << 30;
    m->total = 80 * gib;
    m->used = (10 + (unsigned long long)dev->index) * gib;
    m->free = m->total - m->used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int* mw) {
    CHECK_OUTCOME();
    *mw = 350000 + 1000 * (unsigned)dev->index;
    return OK;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int* mw) {
    CHECK_OUTCOME();
    *mw = 700000;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int* c) {
    CHECK_OUTCOME();
    if (sensor != 0) return 2;
    *c = 60 + (unsigned)dev->index;
    return OK;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int* mhz) {
    CHECK_OUTCOME();
    if (type == 1) *mhz = 1980 - 100 * (unsigned)dev->index;  // NVML_CLOCK_SM
    else if (type == 2) *mhz = 2619;                         // NVML_CLOCK_MEM
    else return 2;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int type, unsigned int* mhz) {
    CHECK_OUTCOME();
    if (type != 1) return 2;
    *mhz = 1980;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long* reasons) {
    CHECK_OUTCOME();
    const char* s = getenv("FAKE_NVML_REASONS");
    *reasons = s ? strtoull(s, NULL, 16) : 0;
    return OK;
}
