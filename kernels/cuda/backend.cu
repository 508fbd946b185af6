// backend.cu: the CUDA backend object: cuda_backend_create() picks the device,
// creates the stream and cuBLASLt state, fills the function table of
// kernels/ops.h, and owns device memory: every byte comes from cudaMalloc
// through alloc() (never managed memory) and is counted, workspaces included,
// so allocated_bytes / peak_allocated_bytes are exactly what the backend holds.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention_cudnn.cuh"
#include "kernels/cuda/cuda_backend.cuh"

// ---- memory ----------------------------------------------------------------------------------------

static void record_live(CudaState* s, void* p, size_t bytes) {
    if (s->live_count == s->live_cap) {
        s->live_cap = s->live_cap ? 2 * s->live_cap : 64;
        s->live_ptr = (void**)xrealloc(s->live_ptr, s->live_cap * sizeof(void*));
        s->live_bytes = (size_t*)xrealloc(s->live_bytes, s->live_cap * sizeof(size_t));
    }
    s->live_ptr[s->live_count] = p;
    s->live_bytes[s->live_count] = bytes;
    s->live_count++;
    s->allocated += bytes;
    if (s->allocated > s->peak) s->peak = s->allocated;
}

// Raw counted allocation, also used for the backend's own workspaces.
static void* device_alloc(CudaState* s, size_t bytes, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fatal("out of GPU memory allocating %.1f MiB for %s (%.1f MiB allocated by train_gpt, %.1f of "
              "%.1f MiB free on the device): lower --micro-batch or --seq-len",
              bytes / 1048576.0, what ? what : "?", s->allocated / 1048576.0, free_b / 1048576.0,
              total_b / 1048576.0);
    }
    record_live(s, p, bytes);
    return p;
}

static void device_free(CudaState* s, void* p) {
    if (!p) return;
    for (int i = s->live_count - 1; i >= 0; i--) {
        if (s->live_ptr[i] != p) continue;
        s->allocated -= s->live_bytes[i];
        s->live_ptr[i] = s->live_ptr[s->live_count - 1];
        s->live_bytes[i] = s->live_bytes[s->live_count - 1];
        s->live_count--;
        CUDA_CHECK(cudaFree(p));
        return;
    }
    fatal("cuda backend: free of %p, which is not a live allocation of this backend", p);
}

static void* cuda_alloc(Backend* be, size_t bytes, const char* what) {
    return device_alloc(cuda_state(be), bytes, what);
}

static void cuda_free(Backend* be, void* p) {
    CudaState* s = cuda_state(be);
    // cudaFree waits for the device anyway; waiting on our stream first makes
    // sure no enqueued kernel still reads the buffer.
    if (p) CUDA_CHECK(cudaStreamSynchronize(s->stream));
    device_free(s, p);
}

static void scratch_resize(CudaState* s, size_t bytes) {
    if (s->scratch) {
        CUDA_CHECK(cudaStreamSynchronize(s->stream));
        device_free(s, s->scratch);
    }
    s->scratch = device_alloc(s, bytes, "op scratch");
    s->scratch_bytes = bytes;
}

void* cuda_scratch(Backend* be, size_t bytes) {
    CudaState* s = cuda_state(be);
    if (bytes <= s->scratch_bytes) return s->scratch;
    if (s->scratch_reserved && !s->scratch_warned) {
        s->scratch_warned = 1;
        fprintf(stderr, "train_gpt: warning: op scratch grows from %zu to %zu bytes after start-up (a cudaMalloc "
                "inside a step): an op's size is missing from cuda_reserve_scratch (kernels/cuda/backend.cu)\n",
                s->scratch_bytes, bytes);
    }
    scratch_resize(s, round_up(bytes, (size_t)1 << 20));
    return s->scratch;
}

// The largest scratch any op takes at the model's shapes, allocated once.
// The cuDNN attention's workspace is among them (its plans are built here).
static void cuda_reserve_scratch(Backend* be, int B, int T, int C, int widest, int NH, int NKV) {
    int N = B * T;
    size_t sizes[] = {cuda_attention_scratch_bytes(B, T, NH), cuda_encoder_scratch_bytes(N),
                      cuda_norm_scratch_bytes(be, N, C), cuda_reduce_scratch_bytes(N, widest > C ? widest : C),
                      attention_cudnn_scratch_bytes(be, B, T, NH, NKV, C / NH),
                      cuda_matmul_scratch_bytes(widest > C ? widest : C)};
    size_t need = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) need = sizes[i] > need ? sizes[i] : need;
    CudaState* s = cuda_state(be);
    if (need > s->scratch_bytes) scratch_resize(s, round_up(need, (size_t)256));  // exactly: tests see a miss
    s->scratch_reserved = 1;
}

// Copies above this size go straight from the caller's memory (setup-time
// parameter uploads); smaller ones (the per-step token batches) go through
// pinned staging so that they do not wait for the kernels in flight.
#define STAGING_MAX_BYTES ((size_t)64 << 20)

static void* host_pinned_alloc(size_t bytes) {
    void* p = NULL;
    CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
}

static void host_pinned_free(void* p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

static void cuda_to_device(Backend* be, void* dst, const void* src, size_t bytes) {
    CudaState* s = cuda_state(be);
    if (!bytes) return;
    if (bytes > STAGING_MAX_BYTES) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream));
        CUDA_CHECK(cudaStreamSynchronize(s->stream));
        return;
    }
    // Round-robin over the staging slots: a slot is reused only after the copy
    // issued from it (several calls ago) has completed.
    int k = s->next_staging;
    s->next_staging = (k + 1) % 4;
    if (s->staging[k].used) CUDA_CHECK(cudaEventSynchronize(s->staging[k].done));
    if (s->staging[k].bytes < bytes) {
        host_pinned_free(s->staging[k].host);
        s->staging[k].bytes = round_up(bytes, 4096);
        s->staging[k].host = host_pinned_alloc(s->staging[k].bytes);
    }
    memcpy(s->staging[k].host, src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, s->staging[k].host, bytes, cudaMemcpyHostToDevice, s->stream));
    CUDA_CHECK(cudaEventRecord(s->staging[k].done, s->stream));
    s->staging[k].used = 1;
}

static void cuda_to_host(Backend* be, void* dst, const void* src, size_t bytes) {
    CudaState* s = cuda_state(be);
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
}

static void cuda_copy(Backend* be, void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(be)));
}

static void cuda_zero(Backend* be, void* p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(be)));
}

static void cuda_synchronize(Backend* be) {
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
    CUDA_CHECK(cudaGetLastError());
}

static size_t cuda_allocated_bytes(Backend* be) { return cuda_state(be)->allocated; }
static size_t cuda_peak_allocated_bytes(Backend* be) { return cuda_state(be)->peak; }
static void* cuda_native_stream(Backend* be) { return (void*)cuda_stream(be); }

static void cuda_destroy(Backend* be) {
    if (!be) return;
    CudaState* s = cuda_state(be);
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    cuda_matmul_destroy(be);
    if (s->scratch) device_free(s, s->scratch);
    for (int k = 0; k < 4; k++) {
        host_pinned_free(s->staging[k].host);
        CUDA_CHECK(cudaEventDestroy(s->staging[k].done));
    }
    // Buffers the caller did not free are released with the backend.
    while (s->live_count > 0) device_free(s, s->live_ptr[s->live_count - 1]);
    CUDA_CHECK(cudaStreamDestroy(s->stream));
    free(s->unwrapped);
    free(s->live_ptr);
    free(s->live_bytes);
    free(s);
    free(be);
}

// ---- CUDA graphs (kernels/ops.h: graph_begin ... graph_free) ----------------------------------------
// Thread-local capture mode: a cudaMalloc, a synchronous copy or a
// device-wide synchronisation from this thread during the capture is an
// error (CUDA invalidates the capture), so that nothing the step needs is
// left out of it; the other threads (the collective watchdog's event polls,
// background checkpoint writes) may go on, which global mode would forbid.
static void cuda_graph_begin(Backend* be) {
    CUDA_CHECK(cudaStreamBeginCapture(cuda_stream(be), cudaStreamCaptureModeThreadLocal));
}

static void* cuda_graph_end(Backend* be) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_CHECK(cudaStreamEndCapture(cuda_stream(be), &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));  // the executable graph keeps what it needs
    return (void*)exec;
}

static void cuda_graph_launch(Backend* be, void* graph) {
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cuda_stream(be)));
}

static void cuda_graph_free(Backend* be, void* graph) {
    if (graph) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

// ---- creation -----------------------------------------------------------------------------------------

extern "C" Backend* cuda_backend_create(DType dtype) {
    if (dtype != DTYPE_F32 && dtype != DTYPE_BF16) {
        fatal("the CUDA backend computes in fp32 or bf16 (asked for %s)", dtype_name(dtype));
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        fatal("--device cuda: no CUDA GPU is visible to this process");
    }
    CudaState* s = (CudaState*)xcalloc(1, sizeof(CudaState));
    CUDA_CHECK(cudaGetDevice(&s->device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, s->device));
    if (prop.major < 8) {
        fatal("GPU %d (%s) has compute capability %d.%d; the CUDA backend needs 8.0 or newer (bf16 tensor cores)",
              s->device, prop.name, prop.major, prop.minor);
    }
    s->cc_major = prop.major;
    s->cc_minor = prop.minor;
    s->sm_count = prop.multiProcessorCount;
    s->smem_optin = prop.sharedMemPerBlockOptin;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    s->norm_ticket = (unsigned*)device_alloc(s, sizeof(unsigned), "norm backward ticket");
    CUDA_CHECK(cudaMemset(s->norm_ticket, 0, sizeof(unsigned)));
    for (int k = 0; k < 4; k++) CUDA_CHECK(cudaEventCreateWithFlags(&s->staging[k].done, cudaEventDisableTiming));

    Backend* be = (Backend*)xcalloc(1, sizeof(Backend));
    be->name = "cuda";
    be->dtype = dtype;
    be->impl = s;

    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->to_device = cuda_to_device;
    be->to_host = cuda_to_host;
    be->copy = cuda_copy;
    be->zero = cuda_zero;
    be->synchronize = cuda_synchronize;
    be->allocated_bytes = cuda_allocated_bytes;
    be->peak_allocated_bytes = cuda_peak_allocated_bytes;
    be->destroy = cuda_destroy;
    be->native_stream = cuda_native_stream;
    be->reserve_scratch = cuda_reserve_scratch;
    be->graph_begin = cuda_graph_begin;
    be->graph_end = cuda_graph_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_free = cuda_graph_free;

    be->convert = cuda_convert;
    be->encoder_forward = cuda_encoder_forward;
    be->encoder_backward = cuda_encoder_backward;
    be->layernorm_forward = cuda_layernorm_forward;
    be->residual_layernorm_forward = cuda_residual_layernorm_forward;
    be->layernorm_backward = cuda_layernorm_backward;
    be->matmul_forward = cuda_matmul_forward;
    be->matmul_backward = cuda_matmul_backward;
    be->matmul_backward_dgelu = cuda_matmul_backward_dgelu;
    be->gelu_forward = cuda_gelu_forward;
    be->gelu_backward = cuda_gelu_backward;
    be->attention_forward = cuda_attention_forward;
    be->attention_backward = cuda_attention_backward;
    be->rmsnorm_forward = cuda_rmsnorm_forward;
    be->residual_rmsnorm_forward = cuda_residual_rmsnorm_forward;
    be->rmsnorm_backward = cuda_rmsnorm_backward;
    be->rope_forward = cuda_rope_forward;
    be->rope_backward = cuda_rope_backward;
    be->swiglu_forward = cuda_swiglu_forward;
    be->swiglu_backward = cuda_swiglu_backward;
    be->cross_entropy = cuda_cross_entropy;
    be->sum = cuda_sum;
    be->sum_squares = cuda_sum_squares;
    be->sum_squares_f32 = cuda_sum_squares_f32;
    be->accumulate_f32 = cuda_accumulate_f32;
    be->adamw = cuda_adamw;
    be->adamw_tensors = cuda_adamw_tensors;
    be->fp8_support = cuda_fp8_support_for(prop.major, prop.minor);
    be->amax = cuda_amax;
    be->fp8_amax_fold = cuda_fp8_amax_fold;
    be->fp8_quantize = cuda_fp8_quantize;
    be->fp8_update_scales = cuda_fp8_update_scales;
    be->fp8_matmul_forward = cuda_fp8_matmul_forward;
    be->fp8_matmul_backward = cuda_fp8_matmul_backward;
    be->fp8_block_matmul = cuda_fp8_block_matmul;

    cuda_matmul_init(be);
    cuda_op_watch_install(be);  // TRAIN_GPT_SYNC_CHECK=1, TRAIN_GPT_OP_PROFILE=1 (op_watch.cu)
    return be;
}
