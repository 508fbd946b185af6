// host_mem.c: the host's available memory (MemAvailable, or the
// TRAIN_GPT_HOST_MEMORY override) and the check made before large host
// allocations (host_mem.h).
#include "llm/util/host_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_MEMORY_ENV "TRAIN_GPT_HOST_MEMORY"

// The override in bytes; -1 when unset.
static double env_override(void) {
    const char* s = getenv(HOST_MEMORY_ENV);
    if (!s || !*s) return -1;
    char* end;
    double x = strtod(s, &end);
    double unit = 1;
    if (*end) {
        switch (*end) {
            case 'K': case 'k': unit = 1024.0; break;
            case 'M': case 'm': unit = 1024.0 * 1024; break;
            case 'G': case 'g': unit = 1024.0 * 1024 * 1024; break;
            case 'T': case 't': unit = 1024.0 * 1024 * 1024 * 1024; break;
            default: unit = 0;
        }
        end++;
    }
    if (end == s || *end || unit == 0 || !(x >= 0) || x * unit > 1e18)
        fatal("%s='%s' is not a number of bytes (e.g. 8G)", HOST_MEMORY_ENV, s);
    return x * unit;
}

static double meminfo_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    long kb;
    double bytes = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1) {
            bytes = (double)kb * 1024.0;
            break;
        }
    }
    fclose(f);
    return bytes;
}

double host_memory_available(void) {
    double o = env_override();
    return o >= 0 ? o : meminfo_available();
}

const char* host_memory_source(void) {
    return env_override() >= 0 ? HOST_MEMORY_ENV : "MemAvailable in /proc/meminfo; " HOST_MEMORY_ENV " overrides";
}

void host_memory_require(double bytes, const char* what) {
    double avail = host_memory_available();
    if (avail <= 0 || bytes <= avail) return;
    fatal("%s needs %.0f bytes (%.2f GiB) of host memory, but only %.0f bytes (%.2f GiB) are available (%s)", what,
          bytes, bytes / 1073741824.0, avail, avail / 1073741824.0, host_memory_source());
}
