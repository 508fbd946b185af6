// test_sim_mma.cu: the harness's mma.sync m16n8k16, ldmatrix and cp.async
// (kernels/cuda/mma.cuh over tests/cuda_sim/sim_mma.h) against the PTX ISA:
// single elements placed in named lanes and registers land where the ISA's
// fragment tables say (checked against literal lane/register numbers worked
// out by hand), random tiles through ldmatrix + mma against a double GEMM,
// cp.async visible only after its group is waited for (in order) or landing
// early (random schedule: a refill race is caught), zero fill, and the
// errors a GPU would fault on.
#include <vector>

#include "kernels/cuda/mma.cuh"
#include "tests/cuda_sim/sim_test.h"

static const uint32_t ONE_LO = 0x00003f80u;  // bf16 1.0 in the low half of a register
static const uint32_t ONE_HI = 0x3f800000u;  // ... in the high half

// ---- mma: one 1 in A and one in B, placed by hand ---------------------------------------------------------------

// A[9][3] = 1: row 9 = g + 8 with g = 1, column 3 = 2t + 1 with t = 1: lane 4g + t = 5,
// register a[1] (rows g+8, columns 2t..2t+1), high half.
// B[3][5] = 1: k = 3 = 2t + 1 with t = 1, n = 5 = g: lane 21, register b[0], high half.
// D[9][5] = 1: row g + 8 with g = 1, column 5 = 2t + 1 with t = 2: lane 6, register d[3].
// And a second product with A[2][12] (g 2, t 2, a[2] low: lane 10) and B[12][0]
// (k 12 = 2t + 8, t 2, b[1] low; n 0: lane 2): D[2][0] = lane 8, d[0].
__global__ void one_hot_mma(float* out, int which) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    int lane = threadIdx.x;
    if (which == 0) {
        if (lane == 5) a[1] = ONE_HI;
        if (lane == 21) b[0] = ONE_HI;
    } else {
        if (lane == 10) a[2] = ONE_LO;
        if (lane == 2) b[1] = ONE_LO;
    }
    mma_bf16_16816(d, a, b, c);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = d[i];
}

static void mma_places_elements_as_the_isa_says() {
    float* out = device_alloc<float>(128);
    std::vector<float> h(128);
    const int want_lane[2] = {6, 8}, want_reg[2] = {3, 0};
    for (int which = 0; which < 2; which++) {
        LAUNCH(one_hot_mma, 1, 32, 0, 0, out, which);
        cudaMemcpy(h.data(), out, 128 * 4, cudaMemcpyDeviceToHost);
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                float want = l == want_lane[which] && i == want_reg[which] ? 1.0f : 0.0f;
                CHECK(h[l * 4 + i] == want, "product %d: lane %d d[%d] = %g, want %g", which, l, i, h[l * 4 + i], want);
            }
    }
    cudaFree(out);
}

// The accumulator C: lane 4g + t's c[i] is C[g + 8(i/2)][2t + i%2]; D = C when A = 0.
__global__ void mma_passes_c(float* out) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    float c[4], d[4];
    for (int i = 0; i < 4; i++) c[i] = (float)((g + 8 * (i / 2)) * 8 + 2 * t + i % 2);  // row * 8 + column
    mma_bf16_16816(d, a, b, c);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = d[i];
}

static void mma_accumulator_layout() {
    float* out = device_alloc<float>(128);
    std::vector<float> h(128);
    LAUNCH(mma_passes_c, 1, 32, 0, 0, out);
    cudaMemcpy(h.data(), out, 128 * 4, cudaMemcpyDeviceToHost);
    // By hand: lane 0 holds C[0][0], C[0][1], C[8][0], C[8][1]; lane 31 (g 7, t 3) C[7][6], C[7][7], C[15][6], C[15][7].
    CHECK(h[0] == 0 && h[1] == 1 && h[2] == 64 && h[3] == 65, "lane 0: %g %g %g %g", h[0], h[1], h[2], h[3]);
    CHECK(h[124] == 62 && h[125] == 63 && h[126] == 126 && h[127] == 127, "lane 31: %g %g %g %g", h[124], h[125],
          h[126], h[127]);
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            int g = l / 4, t = l % 4;
            CHECK(h[l * 4 + i] == (float)((g + 8 * (i / 2)) * 8 + 2 * t + i % 2), "lane %d c[%d]", l, i);
        }
    cudaFree(out);
}

// ---- ldmatrix: which lane gets which element ---------------------------------------------------------------------

// smem holds four 8 x 8 matrices of 16-bit values m*64 + r*8 + c, each row
// padded to 24 elements (48 bytes, 16-byte aligned); lane 8m + r points at
// row r of matrix m. out[lane * 4 + m] = register m.
__global__ void ldmatrix_lanes(uint32_t* out, int count, int trans) {
    __shared__ __align__(16) uint16_t s[4 * 8 * 24];
    for (int i = threadIdx.x; i < 4 * 8 * 24; i += 32) {
        int m = i / (8 * 24), r = i / 24 % 8, c = i % 24;
        s[i] = (uint16_t)(c < 8 ? m * 64 + r * 8 + c : 0xdead);
    }
    __syncwarp();
    int lane = threadIdx.x, m = lane / 8 % count, r = lane % 8;  // lanes past the count repeat valid rows
    const void* row = s + (m * 8 + r) * 24;
    uint32_t reg[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    if (count == 1) trans ? ldmatrix_x1_trans(reg, row) : ldmatrix_x1(reg, row);
    if (count == 2) trans ? ldmatrix_x2_trans(reg, row) : ldmatrix_x2(reg, row);
    if (count == 4) trans ? ldmatrix_x4_trans(reg, row) : ldmatrix_x4(reg, row);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = reg[i];
}

static uint32_t pair(unsigned lo, unsigned hi) { return lo | hi << 16; }

static void ldmatrix_fragment_layouts() {
    uint32_t* out = device_alloc<uint32_t>(128);
    std::vector<uint32_t> h(128);
    for (int trans = 0; trans < 2; trans++)
        for (int count = 1; count <= 4; count *= 2) {
            LAUNCH(ldmatrix_lanes, 1, 32, 0, 0, out, count, trans);
            cudaMemcpy(h.data(), out, 128 * 4, cudaMemcpyDeviceToHost);
            for (int l = 0; l < 32; l++)
                for (int m = 0; m < 4; m++) {
                    int r = l / 4, w = l % 4;
                    uint32_t want = m >= count ? 0xffffffffu
                                    : trans    ? pair(m * 64 + 2 * w * 8 + r, m * 64 + (2 * w + 1) * 8 + r)
                                               : pair(m * 64 + r * 8 + 2 * w, m * 64 + r * 8 + 2 * w + 1);
                    CHECK(h[l * 4 + m] == want, "x%d%s lane %d reg %d = 0x%08x, want 0x%08x", count,
                          trans ? ".trans" : "", l, m, h[l * 4 + m], want);
                }
            if (count == 4 && !trans) {  // by hand: lane 13 = row 3, pair 1; register 2 is matrix 2
                CHECK(h[13 * 4 + 2] == pair(128 + 24 + 2, 128 + 24 + 3), "x4 lane 13 reg 2 = 0x%08x", h[13 * 4 + 2]);
            }
            if (count == 4 && trans) {  // lane 13: column 3, rows 2 and 3 of matrix 2
                CHECK(h[13 * 4 + 2] == pair(128 + 16 + 3, 128 + 24 + 3), "x4.trans lane 13 reg 2 = 0x%08x",
                      h[13 * 4 + 2]);
            }
        }
    cudaFree(out);
}

// ---- ldmatrix feeding mma: a 16 x 16 x 16 product as the attention kernel forms it ---------------------------------

// A (16 x 16, row-major, lda 24) by ldmatrix.x4; B given as Bt (n x k rows,
// "K rows": S = Q K^T) by ldmatrix.x4 (two n-tiles), or as B (k x n rows, "V
// rows": O = P V) by ldmatrix.x4.trans. D (16 x 16) = A B, row-major.
__global__ void ldmatrix_mma_tile(float* D, const bf16* A, const bf16* Bsrc, int b_is_rows_of_bt) {
    __shared__ __align__(16) bf16 As[16 * 24], Bs[16 * 24];
    for (int i = threadIdx.x; i < 16 * 16; i += 32) {
        As[i / 16 * 24 + i % 16] = A[i];
        Bs[i / 16 * 24 + i % 16] = Bsrc[i];
    }
    __syncwarp();
    int lane = threadIdx.x, m = lane / 8, r = lane % 8;
    uint32_t a[4], b[4];
    ldmatrix_x4(a, As + ((m & 1) * 8 + r) * 24 + (m >> 1) * 8);  // matrices: rows 0-7/8-15 x columns 0-7/8-15
    if (b_is_rows_of_bt) {
        // Bt rows are n: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        ldmatrix_x4(b, Bs + ((m >> 1) * 8 + r) * 24 + (m & 1) * 8);
    } else {
        // B rows are k: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), transposed.
        ldmatrix_x4_trans(b, Bs + ((m & 1) * 8 + r) * 24 + (m >> 1) * 8);
    }
    for (int nt = 0; nt < 2; nt++) {
        float c[4] = {0, 0, 0, 0}, d[4];
        mma_bf16_16816(d, a, b + 2 * nt, c);
        int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) D[(g + 8 * (i / 2)) * 16 + nt * 8 + 2 * t + i % 2] = d[i];
    }
}

static void ldmatrix_and_mma_multiply_tiles() {
    std::vector<bf16> ha(256), hb(256);
    std::vector<float> fa(256), fb(256), hd(256);
    uint64_t s = 99;
    for (int i = 0; i < 256; i++) {
        fa[i] = (float)((int)(test_rand(&s) % 17) - 8) * 0.125f;
        fb[i] = (float)((int)(test_rand(&s) % 15) - 7) * 0.25f;
        ha[i] = __float2bfloat16_rn(fa[i]);
        hb[i] = __float2bfloat16_rn(fb[i]);
    }
    bf16* a = device_alloc<bf16>(256);
    bf16* b = device_alloc<bf16>(256);
    float* d = device_alloc<float>(256);
    cudaMemcpy(a, ha.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), 512, cudaMemcpyHostToDevice);
    for (int rows_of_bt = 0; rows_of_bt < 2; rows_of_bt++) {
        cudaMemset(d, 0xff, 1024);
        LAUNCH(ldmatrix_mma_tile, 1, 32, 0, 0, d, a, b, rows_of_bt);
        cudaMemcpy(hd.data(), d, 1024, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double want = 0;
                for (int k = 0; k < 16; k++) want += (double)fa[i * 16 + k] * (rows_of_bt ? fb[j * 16 + k] : fb[k * 16 + j]);
                bad += hd[i * 16 + j] != (float)want;  // small multiples of 1/32: exact
            }
        CHECK(bad == 0, "%s: %d of 256 elements wrong", rows_of_bt ? "A Bt^T (ldmatrix)" : "A B (ldmatrix.trans)", bad);
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
}

// ---- cp.async ------------------------------------------------------------------------------------------------------

// Thread 0 copies src[0..3] (group 1) and src[4..7] (group 2) into shared memory
// that holds 7s, and records what it sees before and after each wait; then a
// zero-filled copy of 4 of 16 bytes.
__global__ void cp_async_groups(float* seen, const float* src) {
    __shared__ __align__(16) float s[12];
    for (int i = 0; i < 12; i++) s[i] = 7.0f;
    cp_async_cg16(s, src, 16);
    cp_async_commit();
    cp_async_ca16(s + 4, src + 4, 16);
    cp_async_commit();
    cp_async_cg16(s + 8, src + 8, 4);  // not committed yet
    seen[0] = s[0];  // before any wait: 7
    cp_async_wait<1>();
    seen[1] = s[0];  // group 1 landed
    seen[2] = s[4];  // group 2 not yet
    cp_async_wait<0>();
    seen[3] = s[4];   // group 2 landed
    seen[4] = s[8];   // uncommitted: still 7
    cp_async_commit();
    cp_async_wait<0>();
    seen[5] = s[8];   // src[8]
    seen[6] = s[9];   // zero-filled
    seen[7] = s[11];
}

static void cp_async_lands_at_wait_group() {
    float hsrc[12];
    for (int i = 0; i < 12; i++) hsrc[i] = (float)(i + 1);
    float* src = device_alloc<float>(12);
    float* seen = device_alloc<float>(8);
    cudaMemcpy(src, hsrc, sizeof hsrc, cudaMemcpyHostToDevice);
    cuda_sim::set_schedule(false, 1);  // copies land at their waits (the in-order model)
    LAUNCH(cp_async_groups, 1, 1, 0, 0, seen, src);
    float h[8];
    cudaMemcpy(h, seen, sizeof h, cudaMemcpyDeviceToHost);
    const float want[8] = {7, 1, 7, 5, 7, 9, 0, 0};
    for (int i = 0; i < 8; i++) CHECK(h[i] == want[i], "seen[%d] = %g, want %g", i, h[i], want[i]);
    cudaFree(src);
    cudaFree(seen);
}

// Double buffering across a block: each thread copies its own 16 bytes; the
// tile is read by other threads after wait + __syncthreads; without the
// barrier (skip_barrier) a thread reads its neighbour's stale bytes.
__global__ void cp_async_tile(float* out, const float* src, int skip_barrier) {
    __shared__ __align__(16) float s[2][64 * 4];
    for (int i = threadIdx.x; i < 2 * 64 * 4; i += blockDim.x) (&s[0][0])[i] = -1.0f;
    __syncthreads();
    for (int round = 0; round < 3; round++) {
        float* buf = s[round & 1];
        cp_async_cg16(buf + threadIdx.x * 4, src + (round * 64 + threadIdx.x) * 4, 16);
        cp_async_commit();
        cp_async_wait<0>();
        if (!skip_barrier) __syncthreads();
        int other = (threadIdx.x + 1) % 64;
        out[round * 64 + threadIdx.x] = buf[other * 4 + 1];
        __syncthreads();
    }
}

static void cp_async_needs_the_barrier() {
    std::vector<float> hsrc(3 * 64 * 4), h(3 * 64);
    for (size_t i = 0; i < hsrc.size(); i++) hsrc[i] = (float)i;
    float* src = device_alloc<float>(hsrc.size());
    float* out = device_alloc<float>(h.size());
    cudaMemcpy(src, hsrc.data(), hsrc.size() * 4, cudaMemcpyHostToDevice);
    LAUNCH(cp_async_tile, 1, 64, 0, 0, out, src, 0);
    cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int r = 0; r < 3; r++)
        for (int t = 0; t < 64; t++) bad += h[r * 64 + t] != hsrc[(r * 64 + (t + 1) % 64) * 4 + 1];
    CHECK(bad == 0, "%d of 192 reads after wait + barrier are wrong", bad);
    // In order, thread t runs to its read before thread t+1 has waited: it must see the old value.
    cuda_sim::set_schedule(false, 1);
    LAUNCH(cp_async_tile, 1, 64, 0, 0, out, src, 1);
    cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost);
    CHECK(h[0] == -1.0f, "without the barrier thread 0 read %g, not the stale -1", h[0]);
    cudaFree(src);
    cudaFree(out);
}

// A buffer refilled while another thread may still read it: thread t reads its
// right neighbour's 16 bytes, then refills its own and waits only after the
// next barrier (the double-buffered loop's shape). Without a barrier between
// the read and the refill, a copy that lands early overwrites the bytes before
// the neighbour read them; random scheduling lands each copy early or late.
template <bool BARRIER>
__global__ void refill_race(float* out, const float* src) {
    __shared__ __align__(16) float s[64 * 4];
    int t = threadIdx.x;
    cp_async_cg16(s + t * 4, src + t * 4, 16);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float v = t < 63 ? s[(t + 1) * 4] : 0.0f;
    if (BARRIER) __syncthreads();
    cp_async_cg16(s + t * 4, src + (64 + t) * 4, 16);
    cp_async_commit();
    __syncthreads();
    cp_async_wait<0>();
    out[t] = v;
}

template <bool BARRIER>
static int refill_errors(const float* src, const std::vector<float>& hsrc, bool random, uint64_t seed) {
    float* out = device_alloc<float>(64);
    std::vector<float> h(64);
    cuda_sim::set_schedule(random, seed);
    LAUNCH(refill_race<BARRIER>, 1, 64, 0, 0, out, src);
    cuda_sim::set_schedule(false, 1);
    cudaMemcpy(h.data(), out, 64 * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int t = 0; t < 63; t++) bad += h[t] != hsrc[(t + 1) * 4];
    cudaFree(out);
    return bad;
}

static void cp_async_may_land_early_under_random_schedule() {
    std::vector<float> hsrc(128 * 4);
    for (size_t i = 0; i < hsrc.size(); i++) hsrc[i] = (float)i;
    float* src = device_alloc<float>(hsrc.size());
    cudaMemcpy(src, hsrc.data(), hsrc.size() * 4, cudaMemcpyHostToDevice);
    CHECK(refill_errors<false>(src, hsrc, false, 1) == 0, "in order every copy lands at its wait");
    for (uint64_t seed = 1; seed <= 3; seed++) {
        CHECK(refill_errors<false>(src, hsrc, true, seed) > 0, "seed %llu: the refill race went unnoticed",
              (unsigned long long)seed);
        CHECK(refill_errors<true>(src, hsrc, true, seed) == 0, "seed %llu: errors with the barrier",
              (unsigned long long)seed);
    }
    cudaFree(src);
}

// ---- errors ------------------------------------------------------------------------------------------------------

__global__ void misaligned_ldmatrix() {
    __shared__ __align__(16) bf16 s[8 * 16];
    uint32_t r[1];
    ldmatrix_x1(r, s + (threadIdx.x % 8) * 16 + 4);  // 8 bytes into the row
}
__global__ void half_warp_mma() {
    if (threadIdx.x >= 16) return;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    mma_bf16_16816(d, a, b, c);
}
__global__ void misaligned_cp_async(const float* src) {
    __shared__ __align__(16) float s[8];
    cp_async_cg16(s, src + 1, 16);
    cp_async_commit();
    cp_async_wait<0>();
}

static void misuse_is_reported() {
    float* src = device_alloc<float>(16);
    check_child_error([&] { LAUNCH(misaligned_ldmatrix, 1, 32, 0, 0); },
                      {"kernel 'misaligned_ldmatrix'", "ldmatrix.x1", "is not 16-byte aligned"});
    check_child_error([&] { LAUNCH(half_warp_mma, 1, 32, 0, 0); },
                      {"kernel 'half_warp_mma'", "mma.sync.m16n8k16", "needs all 32 lanes", "lanes 16-31 exited"});
    check_child_error([&] { LAUNCH(misaligned_cp_async, 1, 1, 0, 0, src); },
                      {"cp.async.cg", "must be 16-byte aligned"});
    cudaFree(src);
}

int main() {
    RUN(mma_places_elements_as_the_isa_says);
    RUN(mma_accumulator_layout);
    RUN(ldmatrix_fragment_layouts);
    RUN(ldmatrix_and_mma_multiply_tiles);
    RUN(cp_async_lands_at_wait_group);
    RUN(cp_async_needs_the_barrier);
    RUN(cp_async_may_land_early_under_random_schedule);
    RUN(misuse_is_reported);
    return TESTS_DONE();
}
