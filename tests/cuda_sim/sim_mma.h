// sim_mma.h: the PTX warp-matrix instructions behind kernels/cuda/mma.cuh on
// the CPU, with the register layouts the PTX ISA gives them (unlike wmma's
// opaque fragments, kernels index these registers, so the layout is the
// contract):
//   - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: with
//     g = lane / 4 and t = lane % 4, A (16 x 16) is four .b32 registers of two
//     bf16 each, a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
//     a[3] = A[g+8][2t+8..] (the lower column in the low half); B (16 x 8,
//     k x n) is b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]; C and D (16 x 8
//     float) are c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1].
//     Products are exact and summed in double, rounded to float once.
//   - ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16: lane 8m + r
//     gives the address of row r of matrix m (16 bytes, 16-byte aligned; lanes
//     past the matrix count are ignored); register m of lane 4r + w receives
//     row r, elements 2w and 2w+1 of matrix m, or with .trans column r,
//     elements 2w and 2w+1 (row 2w and 2w+1 of that column).
//   - cp.async.{ca,cg}.shared.global (cg: 16 bytes; ca: 4, 8 or 16), with an
//     optional source size that zero-fills the rest, commit_group and
//     wait_group N: a copy may land at any time from its issue to the wait for
//     its group. In order every copy lands at the wait (only then are its
//     bytes read and written), so a kernel that reads shared memory before
//     waiting (or before the barrier that publishes other threads' copies)
//     reads what was there before: stale data or the poison. Under random
//     scheduling each copy lands at its issue or at the wait (a coin flip), so
//     refilling a buffer other threads still read is caught as well.
// All three are warp collectives (mma, ldmatrix) or per-thread (cp.async), as
// on the GPU; misuse (lanes missing, misaligned rows) stops the program with
// the fault a GPU would show.
#pragma once

#include <stdint.h>

namespace cuda_sim {

// D = A B + C of one warp (mma.sync m16n8k16, BF16 in, FP32 accumulate).
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
// ldmatrix m8n8 .b16 of `count` (1, 2, 4) matrices; `row` is this lane's row address.
void ldmatrix(uint32_t* regs, int count, bool trans, const void* row);
// One cp.async of `bytes` (4, 8, 16) from src, of which src_bytes (<= bytes) are read
// and the rest zero-filled; `cg` (bypass L1) allows only 16.
void cp_async(void* dst, const void* src, int bytes, int src_bytes, bool cg);
void cp_async_commit();
void cp_async_wait(int n);  // until at most n of this thread's committed groups are pending

}  // namespace cuda_sim
