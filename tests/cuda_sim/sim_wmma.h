// sim_wmma.h: nvcuda::wmma (warp-level matrix multiply) on the CPU.
//
// A fragment's layout across lanes is opaque in CUDA, so any layout is a
// faithful one: here element e of lane l holds tile entry p = e*32 + l, with
// p counted row by row over the fragment's tile (M x K for matrix_a, K x N for
// matrix_b, M x N for the accumulator). Element-wise code over frag.x[] works
// unchanged. load/store/mma are warp collectives like on the GPU: every lane
// of the warp must reach them, with the same pointer, leading dimension and
// layout; the pointer must be 256-bit aligned and ldm a multiple of 16 bytes,
// or the harness stops with the error a GPU would show as a fault.
// Supported: half and bf16 m16n16k16, m32n8k16, m8n32k16 with float or half
// accumulators; tf32 m16n16k8 with float accumulators.
#pragma once

#include <stdint.h>

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {
template <typename Use, int M, int N, int K> struct tile;
template <int M, int N, int K> struct tile<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct tile<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct tile<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <typename T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };
template <typename L> struct layout_of { enum { value = -1 }; };
template <> struct layout_of<row_major> { enum { value = mem_row_major }; };
template <> struct layout_of<col_major> { enum { value = mem_col_major }; };

template <int M, int N, int K, typename T> struct shape_ok {
    enum { value = (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16) };
};
template <int M, int N, int K> struct shape_ok<M, N, K, precision::tf32> {
    enum { value = M == 16 && N == 16 && K == 8 };
};
template <int M, int N, int K> struct shape_ok<M, N, K, float> {  // accumulators: any half/bf16 shape or tf32's
    enum { value = shape_ok<M, N, K, __half>::value || shape_ok<M, N, K, precision::tf32>::value };
};

inline float elem_to_float(float v) { return v; }
inline float elem_to_float(__half v) { return __half2float(v); }
inline float elem_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> inline T elem_from_float(float v);
template <> inline float elem_from_float<float>(float v) { return v; }
template <> inline __half elem_from_float<__half>(float v) { return __float2half_rn(v); }
template <> inline __nv_bfloat16 elem_from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// The tensor cores read only the top 19 bits of a tf32 operand.
inline float tf32_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    b &= 0xffffe000u;
    memcpy(&v, &b, 4);
    return v;
}

// What one lane brings to a load or store: its fragment and the arguments
// that must agree across the warp.
struct MemoryOp {
    const char* what;
    const void* ptr;
    unsigned ldm;
    int layout;         // mem_row_major / mem_col_major
    int rows, cols;     // the tile
    unsigned elem_bytes;
    void* frag;         // this lane's fragment elements
    void (*move)(MemoryOp* op, unsigned lane);  // one lane's elements, memory <-> fragment
};
void check_memory_op(void* const* data, unsigned arrived);  // scheduler.cpp: same arguments, alignment
void resolve_memory_op(void* const* data, unsigned arrived);

struct MmaOp {
    const char* what;
    void* d;
    const void* a;
    const void* b;
    const void* c;
    void (*compute)(void* const* data, unsigned arrived);
};
void resolve_mma(void* const* data, unsigned arrived);
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
    static_assert(detail::shape_ok<M, N, K, T>::value, "cuda_sim: unsupported wmma shape/type");

  public:
    typedef typename detail::storage<T>::type element_type;
    typedef typename detail::storage<T>::type storage_element_type;
    enum { rows = detail::tile<Use, M, N, K>::rows, cols = detail::tile<Use, M, N, K>::cols };
    enum { num_elements = rows * cols / 32 };
    storage_element_type x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const typename fragment<Use, M, N, K, T, L>::element_type& v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

namespace detail {
template <typename Frag, typename MemT>
void move_elements(MemoryOp* op, unsigned lane, bool load) {
    Frag* f = static_cast<Frag*>(op->frag);
    for (int e = 0; e < Frag::num_elements; e++) {
        int p = e * 32 + (int)lane;
        int r = p / Frag::cols, c = p % Frag::cols;
        size_t off = op->layout == mem_row_major ? (size_t)r * op->ldm + c : (size_t)c * op->ldm + r;
        if (load) {
            const MemT* src = static_cast<const MemT*>(op->ptr);
            f->x[e] = (typename Frag::storage_element_type)src[off];
        } else {
            MemT* dst = static_cast<MemT*>(const_cast<void*>(op->ptr));
            dst[off] = (MemT)f->x[e];
        }
    }
}
template <typename Frag, typename MemT> void load_elements(MemoryOp* op, unsigned lane) { move_elements<Frag, MemT>(op, lane, true); }
template <typename Frag, typename MemT> void store_elements(MemoryOp* op, unsigned lane) { move_elements<Frag, MemT>(op, lane, false); }

template <typename Frag, typename MemT>
inline void memory_collective(const char* what, Frag& f, const MemT* ptr, unsigned ldm, int layout, bool load) {
    static_assert(std::is_same<typename std::remove_cv<MemT>::type, typename Frag::storage_element_type>::value,
                  "wmma: the pointer's element type must be the fragment's");
    MemoryOp op;
    op.what = what;
    op.ptr = ptr;
    op.ldm = ldm;
    op.layout = layout;
    op.rows = Frag::rows;
    op.cols = Frag::cols;
    op.elem_bytes = sizeof(MemT);
    op.frag = &f;
    op.move = load ? &load_elements<Frag, MemT> : &store_elements<Frag, MemT>;
    ::cuda_sim::warp_collective(what, 0xffffffffu, &op, &resolve_memory_op);
}
}  // namespace detail

// matrix_a / matrix_b: the layout is part of the fragment's type.
template <typename Use, int M, int N, int K, typename T, typename L, typename MemT>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const MemT* p, unsigned ldm) {
    static_assert(detail::layout_of<L>::value >= 0, "cuda_sim: load_matrix_sync without a layout needs one as argument");
    detail::memory_collective("wmma::load_matrix_sync", f, p, ldm, detail::layout_of<L>::value, true);
}
// The accumulator: the layout is an argument.
template <int M, int N, int K, typename T, typename MemT>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const MemT* p, unsigned ldm, layout_t layout) {
    detail::memory_collective("wmma::load_matrix_sync", f, p, ldm, (int)layout, true);
}
template <int M, int N, int K, typename T, typename MemT>
inline void store_matrix_sync(MemT* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
    detail::memory_collective("wmma::store_matrix_sync", const_cast<fragment<accumulator, M, N, K, T>&>(f), p, ldm,
                              (int)layout, false);
}

namespace detail {
template <typename FD, typename FA, typename FB, typename FC, bool TF32>
void compute_mma(void* const* data, unsigned arrived) {
    enum { M = FA::rows, K = FA::cols, N = FB::cols };
    float a[M * K], b[K * N], c[M * N];
    for (unsigned lane = 0; lane < 32; lane++) {
        const MmaOp* op = static_cast<const MmaOp*>(data[lane]);
        const FA* fa = static_cast<const FA*>(op->a);
        const FB* fb = static_cast<const FB*>(op->b);
        const FC* fc = static_cast<const FC*>(op->c);
        for (int e = 0; e < FA::num_elements; e++) a[e * 32 + lane] = TF32 ? detail::tf32_bits(detail::elem_to_float(fa->x[e])) : detail::elem_to_float(fa->x[e]);
        for (int e = 0; e < FB::num_elements; e++) b[e * 32 + lane] = TF32 ? detail::tf32_bits(detail::elem_to_float(fb->x[e])) : detail::elem_to_float(fb->x[e]);
        for (int e = 0; e < FC::num_elements; e++) c[e * 32 + lane] = detail::elem_to_float(fc->x[e]);
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = c[i * N + j];
            for (int k = 0; k < K; k++) acc += a[i * K + k] * b[k * N + j];
            c[i * N + j] = acc;
        }
    for (unsigned lane = 0; lane < 32; lane++) {
        FD* fd = static_cast<FD*>(static_cast<const MmaOp*>(data[lane])->d);
        for (int e = 0; e < FD::num_elements; e++)
            fd->x[e] = detail::elem_from_float<typename FD::storage_element_type>(c[e * 32 + lane]);
    }
}
}  // namespace detail

template <int M, int N, int K, typename TAB, typename LA, typename LB, typename TC, typename TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TAB, LA>& a,
                     const fragment<matrix_b, M, N, K, TAB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                     bool satf = false) {
    (void)satf;
    detail::MmaOp op;
    op.what = "wmma::mma_sync";
    op.d = &d;
    op.a = &a;
    op.b = &b;
    op.c = &c;
    op.compute = &detail::compute_mma<fragment<accumulator, M, N, K, TD>, fragment<matrix_a, M, N, K, TAB, LA>,
                                      fragment<matrix_b, M, N, K, TAB, LB>, fragment<accumulator, M, N, K, TC>,
                                      std::is_same<TAB, precision::tf32>::value>;
    ::cuda_sim::warp_collective("wmma::mma_sync", 0xffffffffu, &op, &detail::resolve_mma);
}

inline float __float_to_tf32(float v) {
    // Round to nearest (ties away), keeping 10 mantissa bits.
    uint32_t b;
    memcpy(&b, &v, 4);
    if ((b & 0x7f800000u) != 0x7f800000u) b = (b + 0x1000u) & 0xffffe000u;
    memcpy(&v, &b, 4);
    return v;
}

}  // namespace wmma
}  // namespace nvcuda
