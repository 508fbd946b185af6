// backend.c: the CPU backend object: cpu_backend_create() fills the function
// table of ops.h, sets the thread counts, and owns host memory with byte
// accounting (allocated and peak), 64-byte alignment and a guard against
// freeing pointers that did not come from this allocator.
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/cpu.h"

#define CPU_ALIGN 64
#define CPU_ALLOC_MAGIC 0x43505541u  // "CPUA"
#define CPU_FREED_MAGIC 0x46524545u  // "FREE"

// Every allocation starts with one CPU_ALIGN-byte slot whose last bytes hold
// this header, so that free() knows how many bytes to subtract; the caller's
// pointer is the byte after the slot. The header sits at the end of the slot,
// away from the words malloc reuses for its free lists, so that a second
// free() of the same pointer is usually recognised.
typedef struct {
    size_t bytes;  // as requested by the caller
    uint32_t magic;
} AllocHeader;
_Static_assert(sizeof(AllocHeader) <= CPU_ALIGN, "allocation header must fit its slot");

typedef struct {
    atomic_size_t allocated;
    atomic_size_t peak;
} CpuState;

static CpuState* state_of(Backend* be) { return (CpuState*)be->impl; }

static void record_alloc(CpuState* s, size_t bytes) {
    size_t now = atomic_fetch_add(&s->allocated, bytes) + bytes;
    size_t peak = atomic_load(&s->peak);
    while (now > peak && !atomic_compare_exchange_weak(&s->peak, &peak, now)) {
    }
}

static AllocHeader* header_of(void* p) { return (AllocHeader*)((char*)p - sizeof(AllocHeader)); }

static void* cpu_alloc(Backend* be, size_t bytes, const char* what) {
    if (bytes > SIZE_MAX / 2) {
        fatal("out of host memory allocating %zu bytes for %s", bytes, what ? what : "?");
    }
    size_t total = CPU_ALIGN + round_up(bytes ? bytes : 1, CPU_ALIGN);
    char* base = (char*)aligned_alloc(CPU_ALIGN, total);
    if (!base) fatal("out of host memory allocating %zu bytes for %s", bytes, what ? what : "?");
    AllocHeader* h = header_of(base + CPU_ALIGN);
    h->bytes = bytes;
    h->magic = CPU_ALLOC_MAGIC;
    record_alloc(state_of(be), bytes);
    return base + CPU_ALIGN;
}

static void cpu_free(Backend* be, void* p) {
    if (!p) return;
    AllocHeader* h = header_of(p);
    if (h->magic != CPU_ALLOC_MAGIC) {
        fatal("cpu backend: free of %p, which is not a live allocation of this backend%s", p,
              h->magic == CPU_FREED_MAGIC ? " (freed twice)" : "");
    }
    h->magic = CPU_FREED_MAGIC;
    atomic_fetch_sub(&state_of(be)->allocated, h->bytes);
    free((char*)p - CPU_ALIGN);
}

static void cpu_memcpy(Backend* be, void* dst, const void* src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_zero(Backend* be, void* p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

static void cpu_synchronize(Backend* be) {}

static size_t cpu_allocated_bytes(Backend* be) { return atomic_load(&state_of(be)->allocated); }
static size_t cpu_peak_allocated_bytes(Backend* be) { return atomic_load(&state_of(be)->peak); }

static void* cpu_native_stream(Backend* be) { return NULL; }

static void cpu_destroy(Backend* be) {
    if (!be) return;
    free(be->impl);
    free(be);
}

// OpenBLAS 0.3.21 does not know Zen 4/5 and falls back to its AVX2 (Haswell)
// kernels, half the speed of its AVX-512 ones on these CPUs. The choice is made
// when the library loads, so all we can do is say so, once.
static void warn_if_blas_kernels_slow(void) {
    static int checked;
    if (checked) return;
    checked = 1;
#if defined(__x86_64__) || defined(__i386__)
    const char* core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || !core || !__builtin_cpu_supports("avx512f")) return;
    if (strcasecmp(core, "haswell") == 0 || strcasecmp(core, "zen") == 0) {
        warn("OpenBLAS chose its %s kernels on a CPU with AVX-512; export "
             "OPENBLAS_CORETYPE=SkylakeX before starting for ~1.7x faster matmuls",
             core);
    }
#endif
}

Backend* cpu_backend_create(DType dtype, int num_threads) {
    if (dtype != DTYPE_F32) {
        fatal("the CPU backend computes in fp32 only (asked for %s); use fp32 on the CPU",
              dtype_name(dtype));
    }
    // OpenMP threads do all the parallel work, GEMMs included (see matmul.c);
    // OpenBLAS runs single-threaded inside them.
    if (num_threads > 0) omp_set_num_threads(num_threads);
    openblas_set_num_threads(1);
    warn_if_blas_kernels_slow();
    Backend* be = (Backend*)xcalloc(1, sizeof(Backend));
    CpuState* s = (CpuState*)xcalloc(1, sizeof(CpuState));
    atomic_init(&s->allocated, 0);
    atomic_init(&s->peak, 0);
    be->name = "cpu";
    be->dtype = dtype;
    be->impl = s;

    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->to_device = cpu_memcpy;
    be->to_host = cpu_memcpy;
    be->copy = cpu_memcpy;
    be->zero = cpu_zero;
    be->synchronize = cpu_synchronize;
    be->allocated_bytes = cpu_allocated_bytes;
    be->peak_allocated_bytes = cpu_peak_allocated_bytes;
    be->destroy = cpu_destroy;
    be->native_stream = cpu_native_stream;

    be->convert = cpu_convert;
    be->encoder_forward = cpu_encoder_forward;
    be->encoder_backward = cpu_encoder_backward;
    be->layernorm_forward = cpu_layernorm_forward;
    be->residual_layernorm_forward = cpu_residual_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->matmul_forward = cpu_matmul_forward;
    be->matmul_backward = cpu_matmul_backward;
    be->matmul_backward_dgelu = cpu_matmul_backward_dgelu;
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
    be->attention_forward_chunk = cpu_attention_forward_chunk;
    be->attention_backward_chunk = cpu_attention_backward_chunk;
    be->rmsnorm_forward = cpu_rmsnorm_forward;
    be->residual_rmsnorm_forward = cpu_residual_rmsnorm_forward;
    be->rmsnorm_backward = cpu_rmsnorm_backward;
    be->rope_forward = cpu_rope_forward;
    be->rope_backward = cpu_rope_backward;
    be->swiglu_forward = cpu_swiglu_forward;
    be->swiglu_backward = cpu_swiglu_backward;
    be->cross_entropy = cpu_cross_entropy;
    be->sum = cpu_sum;
    be->sum_squares = cpu_sum_squares;
    be->sum_squares_f32 = cpu_sum_squares_f32;
    be->accumulate_f32 = cpu_accumulate_f32;
    be->adamw = cpu_adamw;
    be->adamw_tensors = cpu_adamw_tensors;
    be->fp8_support = FP8_ANY_LAYOUT;
    be->gemm_row_block = CPU_GEMM_TILE;
    be->amax = cpu_amax;
    be->fp8_amax_fold = cpu_fp8_amax_fold;
    be->fp8_quantize = cpu_fp8_quantize;
    be->fp8_update_scales = cpu_fp8_update_scales;
    be->fp8_matmul_forward = cpu_fp8_matmul_forward;
    be->fp8_matmul_backward = cpu_fp8_matmul_backward;
    be->fp8_block_matmul = cpu_fp8_block_matmul;
    be->nvfp4_matmul = cpu_nvfp4_matmul;
    return be;
}
