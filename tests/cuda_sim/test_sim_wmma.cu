// test_sim_wmma.cu: nvcuda::wmma against a plain double GEMM: bf16 and half
// inputs in every row/column-major combination, float accumulators loaded,
// scaled element-wise and stored either way, the other shapes and tf32, a
// tiled block GEMM staged through shared memory, and the errors a GPU would
// raise (misaligned pointers, lanes missing from the collective).
#include <vector>

#include "tests/cuda_sim/sim_test.h"

using namespace nvcuda;

template <typename T, typename LA, typename LB, int M, int N, int K>
__global__ void one_tile(const T* a, const T* b, const float* c, float* d, int lda, int ldb, int ldc, bool d_col) {
    wmma::fragment<wmma::matrix_a, M, N, K, T, LA> fa;
    wmma::fragment<wmma::matrix_b, M, N, K, T, LB> fb;
    wmma::fragment<wmma::accumulator, M, N, K, float> acc;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
    wmma::load_matrix_sync(acc, c, ldc, wmma::mem_row_major);
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 0.5f;
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, ldc, d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

template <typename T>
static float to_f(T v) { return (float)v; }
template <>
float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
float to_f(__half v) { return __half2float(v); }

template <typename T, typename LA, typename LB, int M, int N, int K>
static int tile_errors(bool d_col) {
    const bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    const int lda = (a_row ? K : M) + 8, ldb = (b_row ? N : K) + 8, ldc = (M > N ? M : N) + 4;
    std::vector<T> ha(lda * (a_row ? M : K)), hb(ldb * (b_row ? K : N));
    std::vector<float> hc(ldc * (M > N ? M : N)), hd(hc.size());
    uint64_t s = 17;
    for (auto& x : ha) x = T((float)((int)(test_rand(&s) % 17) - 8) * 0.25f);
    for (auto& x : hb) x = T((float)((int)(test_rand(&s) % 13) - 6) * 0.5f);
    for (auto& x : hc) x = (float)((int)(test_rand(&s) % 11) - 5);
    T* a = device_alloc<T>(ha.size());
    T* b = device_alloc<T>(hb.size());
    float* c = device_alloc<float>(hc.size());
    float* d = device_alloc<float>(hd.size());
    cudaMemcpy(a, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(c, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice);
    LAUNCH((one_tile<T, LA, LB, M, N, K>), 1, 32, 0, 0, a, b, c, d, lda, ldb, ldc, d_col);
    cudaMemcpy(hd.data(), d, hd.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0.5 * hc[i * ldc + j];
            for (int k = 0; k < K; k++)
                want += (double)to_f(a_row ? ha[i * lda + k] : ha[k * lda + i]) * to_f(b_row ? hb[k * ldb + j] : hb[j * ldb + k]);
            float got = d_col ? hd[j * ldc + i] : hd[i * ldc + j];
            bad += fabs(got - want) > 1e-5 * (1 + fabs(want));
        }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(d);
    return bad;
}

static void single_tiles_in_every_layout() {
    using R = wmma::row_major;
    using C = wmma::col_major;
    for (int dc = 0; dc < 2; dc++) {
        CHECK((tile_errors<__nv_bfloat16, R, R, 16, 16, 16>(dc)) == 0, "bf16 row/row (d col %d)", dc);
        CHECK((tile_errors<__nv_bfloat16, R, C, 16, 16, 16>(dc)) == 0, "bf16 row/col (d col %d)", dc);
        CHECK((tile_errors<__nv_bfloat16, C, R, 16, 16, 16>(dc)) == 0, "bf16 col/row (d col %d)", dc);
        CHECK((tile_errors<__nv_bfloat16, C, C, 16, 16, 16>(dc)) == 0, "bf16 col/col (d col %d)", dc);
        CHECK((tile_errors<__half, R, C, 16, 16, 16>(dc)) == 0, "half row/col (d col %d)", dc);
        CHECK((tile_errors<__half, C, R, 16, 16, 16>(dc)) == 0, "half col/row (d col %d)", dc);
    }
    CHECK((tile_errors<__nv_bfloat16, R, C, 32, 8, 16>(false)) == 0, "bf16 m32n8k16");
    CHECK((tile_errors<__half, C, R, 8, 32, 16>(true)) == 0, "half m8n32k16");
}

// tf32: the operands are rounded with __float_to_tf32 first, as on a GPU.
__global__ void tf32_tile(const float* a, const float* b, float* d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 16);
    for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

static void tf32_tile_rounds_operands() {
    std::vector<float> ha(16 * 8), hb(8 * 16), hd(256);
    for (int i = 0; i < 128; i++) {
        ha[i] = 1.0f + 1.0f / 4096 + i * 0.001f;  // bits below tf32's 10-bit mantissa
        hb[i] = (float)(i % 5) - 2.0f;
    }
    float* a = device_alloc<float>(128);
    float* b = device_alloc<float>(128);
    float* d = device_alloc<float>(256);
    cudaMemcpy(a, ha.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), 512, cudaMemcpyHostToDevice);
    LAUNCH(tf32_tile, 1, 32, 0, 0, a, b, d);
    cudaMemcpy(hd.data(), d, 1024, cudaMemcpyDeviceToHost);
    double worst_tf32 = 0, worst_f32 = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double t = 0, f = 0;
            for (int k = 0; k < 8; k++) {
                t += (double)wmma::__float_to_tf32(ha[i * 8 + k]) * hb[k * 16 + j];
                f += (double)ha[i * 8 + k] * hb[k * 16 + j];
            }
            worst_tf32 = fmax(worst_tf32, fabs(hd[i * 16 + j] - t));
            worst_f32 = fmax(worst_f32, fabs(hd[i * 16 + j] - f));
        }
    CHECK(worst_tf32 < 1e-5 && worst_f32 > 1e-4, "tf32 error %g, error against full fp32 %g", worst_tf32, worst_f32);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
}

// C (M x N, row-major) = A (M x K, row-major) @ B (K x N, row-major) in bf16:
// 4 warps per block, each owning one 16x16 output tile of the block's 32x32;
// the A and B tiles of each K step are staged in shared memory.
__global__ void tiled_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, float* Cout, int M, int N, int K) {
    __shared__ __align__(32) __nv_bfloat16 as[32][16 + 16];
    __shared__ __align__(32) __nv_bfloat16 bs[16][32 + 16];
    int warp = threadIdx.x / 32, wr = warp / 2, wc = warp % 2;
    int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = threadIdx.x; i < 32 * 16; i += blockDim.x) {
            int r = i / 16, c = i % 16;
            as[r][c] = A[(row0 + r) * K + k0 + c];
            int br = i / 32, bc = i % 32;
            bs[br][bc] = B[(k0 + br) * N + col0 + bc];
        }
        __syncthreads();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, &as[wr * 16][0], 32);
        wmma::load_matrix_sync(fb, &bs[0][wc * 16], 48);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncthreads();
    }
    wmma::store_matrix_sync(Cout + (row0 + wr * 16) * N + col0 + wc * 16, acc, N, wmma::mem_row_major);
}

static void tiled_gemm_through_shared_memory() {
    const int M = 64, N = 96, K = 48;
    std::vector<__nv_bfloat16> ha(M * K), hb(K * N);
    uint64_t s = 5;
    for (auto& x : ha) x = __float2bfloat16((float)((int)(test_rand(&s) % 9) - 4) * 0.125f);
    for (auto& x : hb) x = __float2bfloat16((float)((int)(test_rand(&s) % 7) - 3) * 0.25f);
    __nv_bfloat16* a = device_alloc<__nv_bfloat16>(M * K);
    __nv_bfloat16* b = device_alloc<__nv_bfloat16>(K * N);
    float* c = device_alloc<float>(M * N);
    cudaMemcpy(a, ha.data(), M * K * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), K * N * 2, cudaMemcpyHostToDevice);
    for (uint64_t seed = 0; seed < 2; seed++) {
        cuda_sim::set_schedule(seed > 0, seed);
        cudaMemset(c, 0xff, M * N * 4);
        LAUNCH(tiled_gemm, dim3(N / 32, M / 32), 128, 0, 0, a, b, c, M, N, K);
        std::vector<float> hc(M * N);
        cudaMemcpy(hc.data(), c, M * N * 4, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double want = 0;
                for (int k = 0; k < K; k++) want += (double)__bfloat162float(ha[i * K + k]) * __bfloat162float(hb[k * N + j]);
                bad += !(fabs(hc[i * N + j] - want) <= 1e-5);
            }
        CHECK(bad == 0, "%d of %d outputs wrong (seed %llu)", bad, M * N, (unsigned long long)seed);
    }
    cuda_sim::set_schedule(false, 1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
}

__global__ void misaligned_load(const __half* p) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, p + 4, 16);  // 8 bytes past a 256-bit boundary
}

__global__ void half_warp_mma(float* out) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    if (threadIdx.x < 16) wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

static void wmma_errors_are_reported() {
    __half* p = device_alloc<__half>(1024);
    float* f = device_alloc<float>(256);
    check_child_error([&] { LAUNCH(misaligned_load, 1, 32, 0, 0, p); },
                      {"kernel 'misaligned_load'", "wmma::load_matrix_sync", "is not 256-bit aligned"});
    check_child_error([&] { LAUNCH(half_warp_mma, 1, 32, 0, 0, f); },
                      {"kernel 'half_warp_mma'", "wmma::store_matrix_sync", "needs all 32 lanes", "lanes 16-31 exited"});
    cudaFree(p);
    cudaFree(f);
}

int main() {
    RUN(single_tiles_in_every_layout);
    RUN(tf32_tile_rounds_operands);
    RUN(tiled_gemm_through_shared_memory);
    RUN(wmma_errors_are_reported);
    return TESTS_DONE();
}
