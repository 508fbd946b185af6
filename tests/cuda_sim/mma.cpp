// mma.cpp: mma.sync m16n8k16 (BF16, FP32 accumulate) and ldmatrix as warp
// collectives, with the PTX ISA's register layouts (see sim_mma.h). cp.async
// lives in scheduler.cpp, beside the per-thread state it keeps.
#include <string.h>

#include "tests/cuda_sim/sim_internal.h"

namespace cuda_sim {

namespace {

// bf16 halves of a .b32 register: the lower-indexed element in the low 16 bits.
double bf16_lo(uint32_t r) { return (double)__uint_as_float(r << 16); }
double bf16_hi(uint32_t r) { return (double)__uint_as_float(r & 0xffff0000u); }

struct MmaLane {
    float* d;
    const uint32_t* a;
    const uint32_t* b;
    const float* c;
};

void resolve_mma(void* const* data, unsigned arrived) {
    char loc[512];
    if (arrived != 0xffffffffu)
        fatal("%s: mma.sync.m16n8k16 needs all 32 lanes of the warp, lanes %s exited", where(loc, sizeof loc),
              lanes_named(~arrived).c_str());
    double A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const MmaLane* l = (const MmaLane*)data[lane];
        int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) {  // a[i]: rows g (i even) or g+8, columns 2t (i < 2) or 2t+8
            int r = g + (i & 1) * 8, c = 2 * t + (i >> 1) * 8;
            A[r][c] = bf16_lo(l->a[i]);
            A[r][c + 1] = bf16_hi(l->a[i]);
        }
        for (int i = 0; i < 2; i++) {  // b[i]: rows (k) 2t + 8i and 2t + 8i + 1, column g
            B[2 * t + 8 * i][g] = bf16_lo(l->b[i]);
            B[2 * t + 8 * i + 1][g] = bf16_hi(l->b[i]);
        }
        for (int i = 0; i < 4; i++) C[g + (i >> 1) * 8][2 * t + (i & 1)] = (double)l->c[i];
    }
    float D[16][8];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double acc = C[i][j];
            for (int k = 0; k < 16; k++) acc += A[i][k] * B[k][j];
            D[i][j] = (float)acc;
        }
    // Every lane has read its inputs above, so d may alias c.
    for (int lane = 0; lane < 32; lane++) {
        const MmaLane* l = (const MmaLane*)data[lane];
        int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) l->d[i] = D[g + (i >> 1) * 8][2 * t + (i & 1)];
    }
}

struct LdmatrixLane {
    uint32_t* regs;
    int count;
    bool trans;
    const void* row;
};

const char* ldmatrix_name(int count, bool trans) {
    static const char* names[2][3] = {
        {"ldmatrix.x1", "ldmatrix.x2", "ldmatrix.x4"},
        {"ldmatrix.x1.trans", "ldmatrix.x2.trans", "ldmatrix.x4.trans"},
    };
    return names[trans][count == 1 ? 0 : count == 2 ? 1 : 2];
}

void resolve_ldmatrix(void* const* data, unsigned arrived) {
    char loc[512];
    const LdmatrixLane* first = (const LdmatrixLane*)data[__builtin_ctz(arrived)];
    const char* what = ldmatrix_name(first->count, first->trans);
    if (arrived != 0xffffffffu)
        fatal("%s: %s needs all 32 lanes of the warp, lanes %s exited", where(loc, sizeof loc), what,
              lanes_named(~arrived).c_str());
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixLane* l = (const LdmatrixLane*)data[lane];
        if (l->count != first->count || l->trans != first->trans)
            fatal("%s: lane %d runs %s while lane 0 runs %s", where(loc, sizeof loc), lane,
                  ldmatrix_name(l->count, l->trans), what);
    }
    // The 8 x 8 matrices, row by row, from the addresses of lanes 0 .. 8*count-1.
    uint16_t M[4][8][8];
    for (int m = 0; m < first->count; m++)
        for (int r = 0; r < 8; r++) {
            const void* p = ((const LdmatrixLane*)data[8 * m + r])->row;
            if ((uintptr_t)p % 16 != 0)
                fatal("%s: %s: lane %d's row address %p is not 16-byte aligned", where(loc, sizeof loc), what,
                      8 * m + r, p);
            memcpy(M[m][r], p, 16);
        }
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixLane* l = (const LdmatrixLane*)data[lane];
        int r = lane / 4, w = lane % 4;
        for (int m = 0; m < first->count; m++) {
            uint16_t lo = first->trans ? M[m][2 * w][r] : M[m][r][2 * w];
            uint16_t hi = first->trans ? M[m][2 * w + 1][r] : M[m][r][2 * w + 1];
            l->regs[m] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

}  // namespace

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    MmaLane l{d, a, b, c};
    warp_collective("mma.sync.m16n8k16", 0xffffffffu, &l, &resolve_mma);
}

void ldmatrix(uint32_t* regs, int count, bool trans, const void* row) {
    if (count != 1 && count != 2 && count != 4) fatal("ldmatrix: .x%d is not a matrix count (x1, x2, x4)", count);
    LdmatrixLane l{regs, count, trans, row};
    warp_collective(ldmatrix_name(count, trans), 0xffffffffu, &l, &resolve_ldmatrix);
}

}  // namespace cuda_sim
