// cudnn_workspace.c: the cuDNN attention workspace limit and bound
// (cudnn_workspace.h), shared by the CUDA backend and the planner.
#include "kernels/cudnn_workspace.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

size_t cudnn_workspace_limit(void) {
    const char* v = getenv(CUDNN_WORKSPACE_ENV);
    if (!v || !*v) return CUDNN_WORKSPACE_DEFAULT;
    char* end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
        case 'K': shift = 10, end++; break;
        case 'M': shift = 20, end++; break;
        case 'G': shift = 30, end++; break;
        default: break;
    }
    if (end == v || !isdigit((unsigned char)v[0]) || *end || errno || n > (~0ULL >> (shift + 1)))
        fatal("%s='%s' is not a size (bytes, or a number with K, M or G: 256M, 8G)", CUDNN_WORKSPACE_ENV, v);
    return (size_t)(n << shift);
}

size_t cudnn_attention_workspace_bound(int B, int T, int NH, int HS) {
    size_t rows = (size_t)B * NH * T;
    size_t dp = rows * T * 2;                      // the deterministic backward's dP, BF16
    size_t dq_accum = rows * ((size_t)HS + 1) * 4;  // an FP32 dQ accumulator and row sums
    return dp > dq_accum ? dp : dq_accum;
}

const char* cudnn_bytes_text(char* buf, size_t size, size_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)bytes;
    int u = 0;
    while (x >= 1024 && u < 4) x /= 1024, u++;
    if (u == 0) snprintf(buf, size, "%zu bytes", bytes);
    else snprintf(buf, size, x < 100 && x != (double)(long)x ? "%.1f %s" : "%.0f %s", x, units[u]);
    return buf;
}
