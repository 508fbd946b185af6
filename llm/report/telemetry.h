// telemetry.h: GPU health through NVML, loaded at run time: SM and memory
// utilisation, memory used, power, temperature, clocks and the reasons the
// clocks are held down, for the GPU of each rank, reduced to min/max across
// ranks so that one slow, hot or throttled GPU stands out.
//
// NVML is opened with dlopen("libnvidia-ml.so.1") (or the file named by the
// environment variable TRAIN_GPT_NVML_LIB, for tests) and never linked, so
// the binary runs where there is no driver. Nothing here is fatal: a missing
// library, no GPU or a failing call leaves telemetry off with one notice.
// A query the GPU does not support (NOT_SUPPORTED, NO_PERMISSION) is just
// missing from the report.
#pragma once

#include <stddef.h>

#include "llm/parallel/rank_reduce.h"

EXTERN_C_BEGIN

typedef enum {
    TEL_SM_UTIL,           // % of the last sample period in which a kernel ran
    TEL_MEM_UTIL,          // % of the last sample period device memory was read or written
    TEL_MEM_USED,          // bytes of device memory in use (all processes)
    TEL_MEM_TOTAL,         // bytes
    TEL_POWER,             // W
    TEL_POWER_LIMIT,       // W, the enforced limit
    TEL_TEMP,              // degrees C, GPU die
    TEL_SM_CLOCK,          // MHz
    TEL_SM_CLOCK_MAX,      // MHz
    TEL_MEM_CLOCK,         // MHz
    TEL_THROTTLE_POWER,    // 1: clocks held down by the software power cap or the power brake
    TEL_THROTTLE_THERMAL,  // 1: software or hardware thermal slowdown
    TEL_THROTTLE_HW,       // 1: hardware slowdown (the board asserted it)
    TEL_NUM_FIELDS
} TelemetryField;

// JSON key of a field ("sm_util", "power_w", ...).
const char* telemetry_field_key(TelemetryField f);

typedef struct NvmlApi NvmlApi;

typedef struct {
    NvmlApi* api;           // resolved NVML functions; NULL when telemetry is off
    void* device;           // nvmlDevice_t of this rank's GPU
    int active;             // sampling works on this rank
    char device_name[96];
    char notice[320];       // why telemetry is off, when it is
    int notice_pending;     // a call failed during the run: the caller prints notice once
} Telemetry;

// Loads NVML and finds this rank's GPU: by PCI bus id when one is given (the
// CUDA backend's device), else by NVML index. Never fails: on any problem
// active is 0 and notice says why.
void telemetry_open(Telemetry* t, const char* pci_bus_id, int index);
void telemetry_close(Telemetry* t);

// Reads this rank's GPU into v (NaN for what is missing). A failing call
// turns telemetry off on this rank and sets notice_pending. Returns whether
// anything was read.
int telemetry_read(Telemetry* t, double v[TEL_NUM_FIELDS]);

// Min and max of each field over all ranks; NaN where no rank had a value.
typedef struct {
    double lo[TEL_NUM_FIELDS], hi[TEL_NUM_FIELDS];
} TelemetryRange;

// Reads this rank's GPU and reduces across ranks. Collective: every rank
// calls it at the same steps, whether or not its own telemetry works.
void telemetry_gather(Telemetry* t, const RankReducer* reduce, TelemetryRange* out);
// Whether any rank reported anything.
int telemetry_range_any(const TelemetryRange* r);
// One line (no newline): "sm 97% | mem-util 41% | hbm 71.2/80.0 GiB | ...";
// a field that differs across ranks prints as "min..max".
void telemetry_format(const TelemetryRange* r, char* out, size_t len);

EXTERN_C_END
