// host_mem.h: the host memory a run may still take, checked before the large
// allocations whose sizes come from files or flags (a config.json's shape, an
// eval file's example count, --vocab-size), so that an impossible size fails
// with one line naming its source instead of growing until the kernel kills
// the process or the allocator fails naming nothing.
//
// The available bytes are MemAvailable of /proc/meminfo, or
// TRAIN_GPT_HOST_MEMORY (bytes, or with a K, M, G or T suffix, powers of
// 1024) where it is set: tests use it to stand for a small machine, and it
// can lower the ceiling on a shared host.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// Bytes the host can still give; 0 when unknown (no /proc/meminfo and no
// override: nothing is refused then). Fatal on a malformed override.
double host_memory_available(void);
// Where host_memory_available comes from, for messages.
const char* host_memory_source(void);
// Fatal unless `bytes` fit in what is available: "WHAT needs N bytes (X GiB)
// of host memory, but only M bytes (Y GiB) are available (SOURCE)".
void host_memory_require(double bytes, const char* what);

EXTERN_C_END
