// fp8_block.cu: the quantise kernels of the block-scaled FP8 recipes
// (blockwise, mxfp8; llm/fp8/README.md): op(x) (M, K), read from the
// activation-dtype source (plain, or transposed for a column-wise copy, so
// that each copy comes from the 16-bit values, never from the other copy's
// codes), written as E4M3 codes (M, K) row-major (K contiguous: the operand
// of a TN GEMM) and one scale per block, in the layout cuBLASLt reads for the
// block's scale mode. The block GEMM itself is in matmul.cu.
//
// Blocks, scales and rounding are kernels/fp8_block.h's (shared with the
// CPU backend's emulation, kernels/cpu/fp8_block.c), so the codes and scales
// are the CPU's bits; only where each scale is stored is this file's.
//
// Scale layouts (R = M, the operand's outer dimension; Kb = ceil(K / bc)):
//   VEC128_32F (1 x 128, FP32; Hopper): scale (r, kb) at float kb * ld + r,
//     ld = roundup(R, 4): "M-major", each block column 16-byte aligned.
//   BLK128x128_32F (128 x 128, FP32; Hopper): scale (r / 128, kb) at float
//     (r / 128) * ld + kb, ld = roundup(Kb, 4).
//   Both are TransformerEngine's GEMM_READY layouts for its Float8BlockScaling
//   recipe, which it hands to cuBLASLt as they are (tests/cpp/test_common.cu,
//   get_scales: 1D rowwise {ceil(K/128), roundup(M, 4)}, 2D rowwise
//   {ceil(M/128), roundup(ceil(K/128), 4)}, row-major).
//   VEC32_UE8M0 (1 x 32, E8M0; Blackwell): cuBLAS's "block scaling factors
//     layout": the (R, Kb) scale matrix padded to roundup(R, 128) x
//     roundup(Kb, 4), cut into 128 x 4 tiles of 512 bytes stored one after
//     another, row tiles outermost; inside a tile, scale (r, c) at byte
//     (r % 32) * 16 + (r / 32) * 4 + c (the rows interleaved 0, 32, 64, 96,
//     1, 33, ...: /work/shared/notes/fp8.md section 4; TransformerEngine's
//     swizzle.h: "padded to 128x4 for row-scale").
// Padding entries are zero (the buffer is cleared first), so nothing the
// GEMM might read is uninitialised.
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/fp8_block.h"

static inline FP8_HD size_t rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

extern "C" int cuda_fp8_block_scale_mode(Fp8BlockFormat f) {
    if (f.scale == FP8_BLOCK_E8M0 && f.br == 1 && f.bc == 32) return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    if (f.scale == FP8_BLOCK_FP32 && f.br == 1 && f.bc == 128) return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (f.scale == FP8_BLOCK_FP32 && f.br == 128 && f.bc == 128) return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    fatal("block-scaled FP8: no cuBLASLt scale mode for %dx%d blocks with %s scales", f.br, f.bc,
          f.scale == FP8_BLOCK_E8M0 ? "E8M0" : "FP32");
    return -1;
}

extern "C" size_t cuda_fp8_block_scale_bytes(int M, int K, Fp8BlockFormat f) {
    cuda_fp8_block_scale_mode(f);  // a format cuBLASLt has no mode for is fatal
    return fp8_block_gpu_scale_bytes(M, K, f);  // kernels/fp8_block.h: the planner bills the same
}

// Where scale (r, kb) goes, in scale elements (bytes for E8M0, floats for FP32); r is a row of op(x)
// (any row of its 128-row block for BLK128x128).
static inline FP8_HD size_t scale_index(int mode, size_t r, size_t kb, int M, int K, int bc) {
    size_t nkb = ((size_t)K + bc - 1) / bc;
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
        return ((r / 128) * (rup(nkb, 4) / 4) + kb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + kb % 4;
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) return kb * rup((size_t)M, 4) + r;
    return (r / 128) * rup(nkb, 4) + kb;
}

extern "C" size_t cuda_fp8_block_scale_index(Fp8BlockFormat f, int M, int K, int r, int kb) {
    return scale_index(cuda_fp8_block_scale_mode(f), (size_t)r, (size_t)kb, M, K, f.bc);
}

#define QBLOCK_ROWS 128

template <typename T>
__device__ inline float op_elem(const T* x, int trans, int M, int K, int i, int k) {
    return to_float(trans ? x[(size_t)k * M + i] : x[(size_t)i * K + k]);
}

// Every other case (column-wise copies, 128 x 128 weight blocks): grid
// (ceil(K / bc), ceil(M / 128)), 128 threads: thread t owns row
// blockIdx.y * 128 + t of op(x) over the columns of block column blockIdx.x.
// 1 x bc blocks: each thread its own block (amax, scale, codes). 128 x bc
// blocks (br == 128): the amax is reduced over the block's threads first.
// Transposed reads are coalesced (neighbouring threads read neighbouring
// source elements); plain reads walk each thread's row.
template <typename T>
__global__ void fp8_block_quantize_kernel(uint8_t* codes, uint8_t* scales, const T* x, int trans, int M, int K,
                                          Fp8BlockScale smode, int br, int bc, int mode) {
    __shared__ float red[QBLOCK_ROWS];
    int t = threadIdx.x, i = blockIdx.y * QBLOCK_ROWS + t;
    int kb = blockIdx.x, c0 = kb * bc, c1 = c0 + bc < K ? c0 + bc : K;
    bool in = i < M;
    float amax = 0.0f;
    if (in)
        for (int k = c0; k < c1; k++) amax = fp8_block_amax_fold(amax, op_elem(x, trans, M, K, i, k));
    if (br > 1) {  // one block of 128 rows: the largest of the threads' (NaN never gets this far)
        red[t] = amax;
        __syncthreads();
        for (int s = QBLOCK_ROWS / 2; s > 0; s /= 2) {
            if (t < s) red[t] = fp8_block_amax_fold(red[t], red[t + s]);
            __syncthreads();
        }
        amax = red[0];
    }
    uint32_t stored;
    float mult = fp8_block_scale_from_amax(smode, amax, &stored);
    if (in && (br == 1 || t == 0)) {
        size_t si = scale_index(mode, (size_t)i, (size_t)kb, M, K, bc);
        if (smode == FP8_BLOCK_E8M0) scales[si] = (uint8_t)stored;
        else reinterpret_cast<uint32_t*>(scales)[si] = stored;
    }
    if (!in) return;
    for (int k = c0; k < c1; k++) codes[(size_t)i * K + k] = fp8_quantize_value(op_elem(x, trans, M, K, i, k), mult, 1);
}

// The row-wise copy of 1 x bc blocks (bc a multiple of 32; plain source:
// the activations and gradients, most of the bytes): one warp per block,
// lane l taking elements l, l + 32, ... of it, so that each load of the warp
// reads consecutive elements; the amax is a butterfly over the lanes. Warps
// loop over the (row, block column) pairs (grid_for may cap the grid).
template <typename T>
__global__ void fp8_block_quantize_rows_kernel(uint8_t* codes, uint8_t* scales, const T* x, int M, int K,
                                               Fp8BlockScale smode, int bc, int mode) {
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    size_t nkb = ((size_t)K + bc - 1) / bc, pairs = (size_t)M * nkb;
    for (size_t p = (size_t)blockIdx.x * warps + threadIdx.x / 32; p < pairs; p += (size_t)gridDim.x * warps) {
        size_t i = p / nkb, kb = p % nkb;
        int c0 = (int)kb * bc, c1 = c0 + bc < K ? c0 + bc : K;
        const T* row = x + i * K;
        float amax = 0.0f;
        for (int k = c0 + lane; k < c1; k += 32) amax = fp8_block_amax_fold(amax, to_float(row[k]));
        for (int o = 16; o > 0; o /= 2) amax = fp8_block_amax_fold(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        uint32_t stored;
        float mult = fp8_block_scale_from_amax(smode, amax, &stored);
        if (lane == 0) {
            size_t si = scale_index(mode, i, kb, M, K, bc);
            if (smode == FP8_BLOCK_E8M0) scales[si] = (uint8_t)stored;
            else reinterpret_cast<uint32_t*>(scales)[si] = stored;
        }
        for (int k = c0 + lane; k < c1; k += 32) codes[i * K + k] = fp8_quantize_value(to_float(row[k]), mult, 1);
    }
}

extern "C" void cuda_fp8_block_quantize(Backend* be, uint8_t* codes, void* scales, const void* x, int trans, int M,
                                        int K, Fp8BlockFormat f) {
    if (M <= 0 || K <= 0) return;
    int mode = cuda_fp8_block_scale_mode(f);
    if (f.br != 1 && f.br != QBLOCK_ROWS) fatal("block-scaled FP8: %d-row blocks are not supported", f.br);
    CUDA_CHECK(cudaMemsetAsync(scales, 0, cuda_fp8_block_scale_bytes(M, K, f), cuda_stream(be)));
    if (!trans && f.br == 1 && f.bc % 32 == 0) {  // the row-wise copy of the activations and gradients
        size_t pairs = (size_t)M * ((K + f.bc - 1) / f.bc);
        unsigned blocks = grid_for(pairs * 32, QBLOCK_ROWS, 1);
        if (be->dtype == DTYPE_BF16)
            LAUNCH(fp8_block_quantize_rows_kernel<bf16>, blocks, QBLOCK_ROWS, 0, cuda_stream(be), codes,
                   (uint8_t*)scales, (const bf16*)x, M, K, f.scale, f.bc, mode);
        else
            LAUNCH(fp8_block_quantize_rows_kernel<float>, blocks, QBLOCK_ROWS, 0, cuda_stream(be), codes,
                   (uint8_t*)scales, (const float*)x, M, K, f.scale, f.bc, mode);
        CUDA_CHECK_LAUNCH();
        return;
    }
    dim3 grid((unsigned)((K + f.bc - 1) / f.bc), (unsigned)((M + QBLOCK_ROWS - 1) / QBLOCK_ROWS));
    if (be->dtype == DTYPE_BF16)
        LAUNCH(fp8_block_quantize_kernel<bf16>, grid, QBLOCK_ROWS, 0, cuda_stream(be), codes, (uint8_t*)scales,
               (const bf16*)x, trans, M, K, f.scale, f.br, f.bc, mode);
    else
        LAUNCH(fp8_block_quantize_kernel<float>, grid, QBLOCK_ROWS, 0, cuda_stream(be), codes, (uint8_t*)scales,
               (const float*)x, trans, M, K, f.scale, f.br, f.bc, mode);
    CUDA_CHECK_LAUNCH();
}

// out (M, N) = the bias (N) in every row: the block GEMM's forward then accumulates onto it (beta 1),
// so the bias is added inside the GEMM, rounded once, without asking cuBLASLt for a BIAS epilogue
// with block scale modes (matmul.cu).
template <typename T>
__global__ void bias_rows_kernel(T* out, const T* bias, size_t M, size_t N) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N; i += stride) out[i] = bias[i % N];
}

void cuda_fp8_block_bias_rows(Backend* be, void* out, const void* bias, int M, int N) {
    size_t n = (size_t)M * N;
    if (n == 0) return;
    if (be->dtype == DTYPE_BF16)
        LAUNCH(bias_rows_kernel<bf16>, grid_for(n, 256, 4), 256, 0, cuda_stream(be), (bf16*)out, (const bf16*)bias,
               (size_t)M, (size_t)N);
    else
        LAUNCH(bias_rows_kernel<float>, grid_for(n, 256, 4), 256, 0, cuda_stream(be), (float*)out, (const float*)bias,
               (size_t)M, (size_t)N);
    CUDA_CHECK_LAUNCH();
}
