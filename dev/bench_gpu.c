// bench_gpu.c: benchmarks of the CUDA backend on one GPU (make bench-gpu;
// scripts/gpu_check.sh runs it after the GPU tests).
//
// Part 1, ops: each op of kernels/ops.h in BF16 at GPT-2-like shapes, timed
// over repeated calls after a warm-up; GEMMs and attention are reported in
// TFLOP/s against the GPU's dense BF16 peak, memory-bound ops in GB/s against
// its memory bandwidth (from the device's memory clock and bus width) and
// as a fraction of a device-to-device copy measured in the same run; AdamW
// over GPT-2 124M's 148 tensors one call each and in one adamw_tensors
// launch, with FP32 and with BF16 moments; the FP8 amax and casts of a BF16 activation; the layernorm and
// RMSNorm backward (one launch each) at C = 768 and 4096, checked against the
// CPU backend and for repeatability before they are timed; the MLP's GELU
// with cuBLASLt's epilogues (fc GEMM + GELU_AUX_BIAS, fcproj's input
// gradient + DGELU_BGRAD) against the GEMM and our kernels apart, as a ratio
// in the same run, saying which path cuBLASLt allowed.
// Part 2, models: whole BF16 training steps (forward, backward, norm, AdamW)
// of GPT-2 124M at T = 1024 (and again with its LM head in one chunk against
// the planner's chunks: the ratio of tokens/s and the logits each holds), a
// 24-layer 2048-channel model, and GPT-2 124M at
// the largest micro-batch that fits; tokens/s and MFU, counting
// 6 N + 12 L C T FLOPs per token (N parameters) over the dense BF16 peak.
// Part 3, FP8 against BF16 (GPUs with FP8 tensor cores): the linear layer's
// GEMMs at hidden 2048, 4096 and 8192 (8192 tokens, H -> 4H: forward, and
// backward's dinp + dweight) on operands already cast, and again counting
// the casts of the activations and gradients (the weights are cast once per
// optimizer step in training); then training steps of a hidden-4096 model
// (4 layers, T = 1024) in BF16 and in FP8 (current scaling), as tokens/s
// and their ratio.
// Part 1b, attention grid: forward and backward TFLOP/s of cuDNN's fused
// attention and of our kernels at T = 1K..32K, head sizes 64 and 128, in
// the line format dev/bench_attention_torch.py uses for PyTorch's SDPA.
// Part 4 (bench_gpu --llama8b, alone, so that the GPU check gives it its own
// timeout): a Llama-3-8B-shaped model (Llama 3 8B's layer: C 4096, 32 query
// heads on 8 kv heads, SwiGLU 14336, untied 128,256-token head, RoPE theta
// 500000; 4 layers, B = 1, T = 8192; 1.92B parameters) trained in BF16 and in
// FP8 (current scaling): tokens/s, model TFLOP/s and MFU with llm/plan/mfu.c's
// Llama FLOPs per token over the dense BF16 peak ("n/a" for an unknown GPU or
// a figure above 100%), and the tokens/s 32 such layers would give at the same
// FLOP/s. dev/reference.py --cuda-bench --llama8b is PyTorch's step of the
// same shape.
// The last lines are the summary table.
//
// Headline (bench_gpu --headline, what the GPU check measures first): the
// GPT-2 124M BF16 step at T = 1024 (tokens/s, MFU) and the attention grid at
// T = 1K, 4K and 8K (cuDNN and native, HS 64 and 128), the rows set beside
// PyTorch's step and SDPA.
// Every buffer is filled on the device (kernels/cuda/fill.cu).
//
//   bench_gpu [--quick]     --quick: fewer repetitions and only the first model
//   bench_gpu --headline [--quick]   only the headline rows
//   bench_gpu --llama8b [--quick]    only part 4 (--quick: 3 steps instead of 10)
//   bench_gpu --step-bytes [--tiny]  only the memory-bound ops of a GPT-2 124M step,
//                                    measured beside the planner's bytes (--tiny: a
//                                    2-layer model, for the emulator)
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/cuda_seam.h"
#include "kernels/ops.h"
#include "llm/arch/arch.h"
#include "llm/fp8/fp8.h"
#include "llm/model/model.h"
#include "llm/plan/cost.h"
#include "llm/plan/mfu.h"
#include "llm/plan/planner.h"
#include "llm/util/rng.h"
#include "llm/trainer.h"

Backend* cuda_backend_create(DType dtype);
void cuda_attention_forward_native(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                                   int HS);
void cuda_attention_backward_native(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                                    const float* lse, int B, int T, int NH, int NKV, int HS);
// kernels/cuda/attention_cudnn.cu: whether the last attention call used cuDNN.
int attention_cudnn_last_used(void);
// kernels/cuda/fill.cu: dst[0..n) uniform in [lo, hi) (BF16, FP32 or I32), made on the device.
void cuda_fill_uniform(Backend* be, void* dst, size_t n, DType dtype, float lo, float hi, uint64_t seed);

static Backend* be;
static double peak_tflops;   // dense BF16
static int peak_known;       // the device is in bf16_peak_for's table (else MFU prints n/a)
static double peak_gbs;      // memory bandwidth
static double copy_gbs;      // a device-to-device copy measured in this run (0 until then)
static int reps = 20;

#define MAX_ROWS 128
static char table[MAX_ROWS][160];
static int rows;

static void add_row(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void add_row(const char* fmt, ...) {
    if (rows == MAX_ROWS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(table[rows++], sizeof table[0], fmt, ap);
    va_end(ap);
}

// Dense BF16 tensor-core peak by product name (TFLOP/s, without sparsity).
static double bf16_peak_for(const char* name) {
    // Longer names first: "GB200" contains "B200" (the first match wins).
    struct { const char* key; double tflops; } known[] = {
        {"GB200", 2500}, {"B200", 2250}, {"B100", 1750}, {"GH200", 989}, {"H200", 989}, {"H100 PCIe", 756},
        {"H100", 989}, {"H800", 989}, {"A100", 312}, {"A800", 312}, {"L40S", 362}, {"A10", 125},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strstr(name, known[i].key)) return known[i].tflops;
    }
    return 0;
}

static void device_info(void) {
    int dev = 0;
    struct cudaDeviceProp p;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&p, dev);
    int mem_khz = 0;
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev);
    peak_gbs = 2.0 * mem_khz * 1e3 * (p.memoryBusWidth / 8.0) / 1e9;
    peak_tflops = bf16_peak_for(p.name);
    peak_known = peak_tflops > 0;
    printf("device: %s, %d SMs, compute capability %d.%d, %.0f GiB, memory %.0f GB/s, dense BF16 peak %s%.0f TFLOP/s\n",
           p.name, p.multiProcessorCount, p.major, p.minor, p.totalGlobalMem / 1073741824.0, peak_gbs,
           peak_tflops ? "" : "unknown, assuming ", peak_tflops ? peak_tflops : 989.0);
    if (!peak_tflops) peak_tflops = 989.0;
}

// ---- buffers --------------------------------------------------------------------------------------

// Buffers are filled on the device (kernels/cuda/fill.cu): values from a hash
// of (seed, index), the same every run; a host loop over 124M elements would
// spend seconds of the GPU check's minutes. Each buffer has its own seed.
static uint64_t fill_seed = 77;

static void* rand_buf(size_t n, float scale) {  // BF16, uniform in [-scale, scale)
    void* d = be->alloc(be, n * 2, "bench buffer");
    cuda_fill_uniform(be, d, n, DTYPE_BF16, -scale, scale, fill_seed++);
    return d;
}

static float* rand_f32(size_t n, float scale) {  // FP32, uniform in [0, scale)
    float* d = (float*)be->alloc(be, n * 4, "bench buffer");
    cuda_fill_uniform(be, d, n, DTYPE_F32, 0.0f, scale, fill_seed++);
    return d;
}

static int32_t* rand_tokens(size_t n, int V) {
    int32_t* d = (int32_t*)be->alloc(be, n * 4, "bench tokens");
    cuda_fill_uniform(be, d, n, DTYPE_I32, 0.0f, (float)V, fill_seed++);
    return d;
}

// ---- timing -------------------------------------------------------------------------------------------

typedef void (*OpFn)(void* ctx);

// Mean seconds per call over `reps` calls after 2 warm-up calls.
static double time_op(OpFn fn, void* ctx) {
    fn(ctx);
    fn(ctx);
    be->synchronize(be);
    double t0 = now_seconds();
    for (int i = 0; i < reps; i++) fn(ctx);
    be->synchronize(be);
    return (now_seconds() - t0) / reps;
}

static void report_flops(const char* op, const char* shape, double sec, double flops) {
    double tf = flops / sec / 1e12;
    printf("%-26s %-34s %9.3f ms %8.1f TFLOP/s %5.1f%% of peak\n", op, shape, sec * 1e3, tf, 100 * tf / peak_tflops);
    add_row("%-26s %-34s %9.3f ms %8.1f TFLOP/s %5.1f%%", op, shape, sec * 1e3, tf, 100 * tf / peak_tflops);
}

static void report_bytes(const char* op, const char* shape, double sec, double bytes) {
    double gbs = bytes / sec / 1e9;
    char copy[32] = "";
    if (copy_gbs > 0) snprintf(copy, sizeof copy, " %5.1f%% of copy", 100 * gbs / copy_gbs);
    printf("%-26s %-34s %9.3f ms %8.0f GB/s    %5.1f%% of peak%s\n", op, shape, sec * 1e3, gbs, 100 * gbs / peak_gbs,
           copy);
    add_row("%-26s %-34s %9.3f ms %8.0f GB/s    %5.1f%%%s", op, shape, sec * 1e3, gbs, 100 * gbs / peak_gbs, copy);
}

// The reference for memory-bound kernels: cudaMemcpyAsync device to device of
// 1 GiB on the backend's stream (2 GiB moved per copy).
static void copy_op(void* p) {
    void** b = (void**)p;
    cudaMemcpyAsync(b[1], b[0], (size_t)1 << 30, cudaMemcpyDeviceToDevice, 0);
    cudaStreamSynchronize(0);
}
static void bench_copy(void) {
    void* b[2] = {be->alloc(be, (size_t)1 << 30, "bench copy"), be->alloc(be, (size_t)1 << 30, "bench copy")};
    double sec = time_op(copy_op, b);
    report_bytes("device copy (reference)", "1 GiB", sec, 2.0 * (1 << 30));
    copy_gbs = 2.0 * (1 << 30) / sec / 1e9;
    be->free(be, b[0]);
    be->free(be, b[1]);
}

// ---- ops ------------------------------------------------------------------------------------------------

typedef struct {
    int N, C, OC, gelu;
    void *inp, *w, *b, *out, *pre, *dout, *dinp, *dw, *db;
} MatmulCtx;

static void mm_fwd(void* p) {
    MatmulCtx* c = (MatmulCtx*)p;
    be->matmul_forward(be, c->out, c->gelu ? c->pre : NULL, c->inp, c->w, c->b, c->N, c->C, c->OC);
}
static void mm_bwd(void* p) {
    MatmulCtx* c = (MatmulCtx*)p;
    be->matmul_backward(be, c->dinp, c->dw, c->db, c->dout, c->inp, c->w, c->N, c->C, c->OC);
}

static void bench_matmul(const char* name, int N, int C, int OC, int gelu, int bias) {
    MatmulCtx c;
    memset(&c, 0, sizeof c);
    c.N = N;
    c.C = C;
    c.OC = OC;
    c.gelu = gelu;
    c.inp = rand_buf((size_t)N * C, 1);
    c.w = rand_buf((size_t)OC * C, 0.05f);
    c.b = bias ? rand_buf(OC, 0.1f) : NULL;
    c.out = rand_buf((size_t)N * OC, 1);
    c.pre = gelu ? rand_buf((size_t)N * OC, 1) : NULL;
    c.dout = rand_buf((size_t)N * OC, 1);
    c.dinp = rand_buf((size_t)N * C, 1);
    c.dw = rand_buf((size_t)OC * C, 1);
    c.db = bias ? rand_buf(OC, 1) : NULL;
    char shape[64];
    snprintf(shape, sizeof shape, "%d x %d -> %d%s", N, C, OC, gelu ? " +gelu" : "");
    double flops = 2.0 * N * C * OC;
    char op[48];
    snprintf(op, sizeof op, "matmul fwd %s", name);
    report_flops(op, shape, time_op(mm_fwd, &c), flops);
    snprintf(op, sizeof op, "matmul bwd %s", name);
    report_flops(op, shape, time_op(mm_bwd, &c), 2 * flops);
    void* bufs[] = {c.inp, c.w, c.b, c.out, c.pre, c.dout, c.dinp, c.dw, c.db};
    for (int i = 0; i < 9; i++) if (bufs[i]) be->free(be, bufs[i]);
}

// The MLP's GELU with and without cuBLASLt's epilogues, on the same
// buffers: forward fc GEMM + GELU (GELU_AUX_BIAS against the GEMM then
// gelu.cu's kernel) and backward fcproj's input gradient + GELU backward +
// fc's bias gradient (DGELU_BGRAD against the GEMM, the GELU backward
// kernel and the column sum). The row says which path cuBLASLt allowed.
static void mlp_fused_fwd(void* p) { mm_fwd(p); }
static void mlp_split_fwd(void* p) {
    MatmulCtx* c = (MatmulCtx*)p;
    be->matmul_forward(be, c->pre, NULL, c->inp, c->w, c->b, c->N, c->C, c->OC);
    be->gelu_forward(be, c->out, c->pre, (size_t)c->N * c->OC, NULL);
}
// Backward of fcproj (OC -> C here read as its input width OC): dinp (N, OC) is d(pre).
static void mlp_fused_bwd(void* p) {
    MatmulCtx* c = (MatmulCtx*)p;
    be->matmul_backward_dgelu(be, c->out, c->db, c->dinp, c->pre, c->w, c->N, c->OC, c->C, NULL);
}
static void mlp_split_bwd(void* p) {
    MatmulCtx* c = (MatmulCtx*)p;
    be->matmul_backward(be, c->out, NULL, NULL, c->dinp, NULL, c->w, c->N, c->OC, c->C);
    be->gelu_backward(be, c->out, c->pre, c->out, (size_t)c->N * c->OC, NULL);
    be->matmul_backward(be, NULL, NULL, c->db, c->out, NULL, NULL, c->N, 0, c->OC);
}

static void bench_mlp_epilogues(int N, int C) {
    MatmulCtx c;
    memset(&c, 0, sizeof c);
    c.N = N;
    c.C = C;
    c.OC = 4 * C;
    c.gelu = 1;
    c.inp = rand_buf((size_t)N * C, 1);
    c.w = rand_buf((size_t)c.OC * C, 0.05f);  // fc (4C, C); read as fcproj's (C, 4C) in backward
    c.b = rand_buf(c.OC, 0.1f);
    c.out = rand_buf((size_t)N * c.OC, 1);
    c.pre = rand_buf((size_t)N * c.OC, 1);
    c.dinp = rand_buf((size_t)N * C, 1);  // fcproj's output gradient
    c.db = rand_buf(c.OC, 1);
    CudaEpilogueCounts e0, e1;
    cuda_epilogue_counts(be, &e0);
    double ff = time_op(mlp_fused_fwd, &c), sf = time_op(mlp_split_fwd, &c);
    double fb = time_op(mlp_fused_bwd, &c), sb = time_op(mlp_split_bwd, &c);
    cuda_epilogue_counts(be, &e1);
    int fwd_fused = e1.fused[0] > e0.fused[0], bwd_fused = e1.fused[1] > e0.fused[1];
    char line[160];
    snprintf(line, sizeof line, "mlp epilogues %d x %d: fwd %.3f vs %.3f ms (%.2fx, %s) | bwd %.3f vs %.3f ms (%.2fx, %s)",
             N, C, ff * 1e3, sf * 1e3, sf / ff, fwd_fused ? "GELU_AUX_BIAS" : "no epilogue: fallback", fb * 1e3,
             sb * 1e3, sb / fb, bwd_fused ? "DGELU_BGRAD" : "no epilogue: fallback");
    printf("%s\n", line);
    add_row("%s", line);
    void* bufs[] = {c.inp, c.w, c.b, c.out, c.pre, c.dinp, c.db};
    for (int i = 0; i < 7; i++) be->free(be, bufs[i]);
}

typedef struct {
    int B, T, C, NH;
    void *qkv, *out, *dout, *dqkv;
    float* lse;
} AttnCtx;

static void at_fwd(void* p) {
    AttnCtx* c = (AttnCtx*)p;
    be->attention_forward(be, c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NH, c->C / c->NH);
}
static void at_bwd(void* p) {
    AttnCtx* c = (AttnCtx*)p;
    be->attention_backward(be, c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->NH, c->NH, c->C / c->NH);
}

static void bench_attention(int B, int T, int NH, int HS) {
    AttnCtx c;
    memset(&c, 0, sizeof c);
    c.B = B;
    c.T = T;
    c.C = NH * HS;
    c.NH = NH;
    size_t n = (size_t)B * T * c.C;
    c.qkv = rand_buf(3 * n, 1);
    c.out = rand_buf(n, 1);
    c.dout = rand_buf(n, 1);
    c.dqkv = rand_buf(3 * n, 1);
    c.lse = rand_f32((size_t)B * NH * T, 1);
    // Causal: half of the T x T scores; forward 2 products, backward 5 (the usual count).
    double fwd = 2.0 * 2.0 * B * NH * ((double)T * T / 2) * HS;
    char shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d HS=%d", B, T, NH, HS);
    double tf = time_op(at_fwd, &c);
    double tb = time_op(at_bwd, &c);
    report_flops("attention fwd", shape, tf, fwd);
    report_flops("attention bwd", shape, tb, 2.5 * fwd);
    report_flops("attention fwd+bwd", shape, tf + tb, 3.5 * fwd);
    be->free(be, c.qkv);
    be->free(be, c.out);
    be->free(be, c.dout);
    be->free(be, c.dqkv);
    be->free(be, c.lse);
}

// Grouped-query attention through the native kernel's entry points (NKV kv heads).
typedef struct {
    int B, T, NH, NKV, HS;
    void *qkv, *out, *dout, *dqkv;
    float* lse;
} GqaCtx;
static void gqa_fwd(void* p) {
    GqaCtx* c = (GqaCtx*)p;
    cuda_attention_forward_native(be, c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NKV, c->HS);
}
static void gqa_bwd(void* p) {
    GqaCtx* c = (GqaCtx*)p;
    cuda_attention_backward_native(be, c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->NH, c->NKV, c->HS);
}
static void bench_attention_gqa(int B, int T, int NH, int NKV, int HS) {
    GqaCtx c = {B, T, NH, NKV, HS, NULL, NULL, NULL, NULL, NULL};
    size_t tok = (size_t)B * T;
    c.qkv = rand_buf(tok * (NH + 2 * NKV) * HS, 1);
    c.dqkv = rand_buf(tok * (NH + 2 * NKV) * HS, 1);
    c.out = rand_buf(tok * NH * HS, 1);
    c.dout = rand_buf(tok * NH * HS, 1);
    c.lse = rand_f32((size_t)B * NH * T, 1);
    double fwd = 2.0 * 2.0 * B * NH * ((double)T * T / 2) * HS;
    char shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    report_flops("attention fwd (gqa)", shape, time_op(gqa_fwd, &c), fwd);
    report_flops("attention bwd (gqa)", shape, time_op(gqa_bwd, &c), 2.5 * fwd);
    void* bufs[] = {c.qkv, c.dqkv, c.out, c.dout, c.lse};
    for (int i = 0; i < 5; i++) be->free(be, bufs[i]);
}

// One line of the attention grid, in the format dev/bench_attention_torch.py
// prints too (path "torch"), so that the GPU check can divide them:
//   attention fwd|bwd PATH T=.. HS=.. B=.. NH=.. <ms> ms <TFLOP/s> TFLOP/s   (or n/a)
static void attention_line(const char* dir, const char* path, int T, int HS, int B, int NH, double sec,
                           double flops, int in_summary) {
    char head[96];
    snprintf(head, sizeof head, "attention %s %-6s T=%d HS=%d B=%d NH=%d", dir, path, T, HS, B, NH);
    if (sec <= 0) {
        printf("%-52s n/a\n", head);
        return;
    }
    printf("%-52s %9.3f ms %7.1f TFLOP/s\n", head, sec * 1e3, flops / sec / 1e12);
    if (in_summary) add_row("%-52s %9.3f ms %7.1f TFLOP/s", head, sec * 1e3, flops / sec / 1e12);
}

// Causal attention forward and backward through cuDNN (--attention cudnn's
// path, "n/a" where cuDNN is absent or declines the shape) and our kernels, at
// the nT lengths Ts and head sizes 64 and 128: 32K tokens per call (B = 32768 /
// T), 2048 channels (NH = 2048 / HS). FLOPs as bench_attention counts them.
// all_in_summary: every row goes to the summary (else T = 8192, HS = 128's).
static void bench_attention_grid(const int* Ts, int nT, int all_in_summary) {
    int HSs[] = {64, 128};
    const char* paths[] = {"cudnn", "native"};
    int saved = reps;
    for (int hi = 0; hi < 2; hi++)
        for (int ti = 0; ti < nT; ti++) {
            int T = Ts[ti], HS = HSs[hi], B = 32768 / T, NH = 2048 / HS;
            double fwd = 2.0 * 2.0 * B * NH * ((double)T * T / 2) * HS;
            AttnCtx c;
            memset(&c, 0, sizeof c);
            c.B = B, c.T = T, c.C = NH * HS, c.NH = NH;
            size_t n = (size_t)B * T * c.C;
            c.qkv = rand_buf(3 * n, 1);
            c.out = rand_buf(n, 1);
            c.dout = rand_buf(n, 1);
            c.dqkv = rand_buf(3 * n, 1);
            c.lse = rand_f32((size_t)B * NH * T, 1);
            reps = saved * 1024 / T > 2 ? saved * 1024 / T : 2;
            for (int pi = 0; pi < 2; pi++) {
                cuda_attention_select(be, pi == 0 ? 0 : 2, 1);  // auto, native
                double tf = time_op(at_fwd, &c);
                int fwd_cudnn = attention_cudnn_last_used();
                double tb = time_op(at_bwd, &c);
                int bwd_cudnn = attention_cudnn_last_used();
                int ok_f = pi == 1 || fwd_cudnn, ok_b = pi == 1 || bwd_cudnn;
                int summary = all_in_summary || (T == 8192 && HS == 128);
                attention_line("fwd", paths[pi], T, HS, B, NH, ok_f ? tf : 0, fwd, summary);
                attention_line("bwd", paths[pi], T, HS, B, NH, ok_b ? tb : 0, 2.5 * fwd, summary);
            }
            be->free(be, c.qkv);
            be->free(be, c.out);
            be->free(be, c.dout);
            be->free(be, c.dqkv);
            be->free(be, c.lse);
        }
    reps = saved;
    cuda_attention_select(be, 0, 1);  // auto
}

typedef struct {
    int N, C, V, Vp, B, T;
    void *a, *b, *res, *out, *w, *bias, *dinp, *dw, *db, *logits, *wte, *wpe;
    float *mean, *rstd, *losses;
    int32_t* tok;
    size_t n;
    float *m, *v, *master, *scalar;
} MemCtx;

static void op_ln_fwd(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->residual_layernorm_forward(be, c->res, c->out, c->mean, c->rstd, c->a, c->b, c->w, c->bias, c->N, c->C, NULL);
}
static void op_ln_bwd(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->layernorm_backward(be, c->dinp, c->dw, c->db, c->out, c->res, c->w, c->mean, c->rstd, c->N, c->C, NULL);
}
static void op_gelu_bwd(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->gelu_backward(be, c->a, c->b, c->a, (size_t)c->N * c->C, NULL);
}
static void op_ce(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->cross_entropy(be, c->losses, c->logits, c->tok, c->N, c->V, c->Vp, 1e-6f);
}
static void op_enc_fwd(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->encoder_forward(be, c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
}
static void op_enc_bwd(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->encoder_backward(be, c->wte, c->wpe, c->out, c->tok, c->B, c->T, c->C);
}
// The benchmark's AdamW hyper-parameters (step 1, seed 7) with the given
// weight decay, index base and moments' dtype; gradients in the model's dtype.
static AdamWParams bench_adamw_params(float weight_decay, uint64_t index_base, DType moments) {
    AdamWParams a;
    memset(&a, 0, sizeof a);
    a.lr = 1e-4f;
    a.beta1 = 0.9f;
    a.beta2 = 0.95f;
    a.eps = 1e-8f;
    a.weight_decay = weight_decay;
    a.grad_scale = 1.0f;
    a.step = 1;
    a.seed = 7;
    a.index_base = index_base;
    a.moment_dtype = moments;
    return a;
}
static void op_adamw(void* p) {
    MemCtx* c = (MemCtx*)p;
    AdamWParams a = bench_adamw_params(0.1f, 0, DTYPE_F32);
    be->adamw(be, c->a, c->master, c->b, c->m, c->v, c->n, &a);
}
static void op_norm(void* p) {
    MemCtx* c = (MemCtx*)p;
    be->sum_squares(be, c->scalar, c->b, c->n, 0);
}

// GPT-2 124M's 148 tensors (T = 1024, padded vocabulary) over the flat buffers,
// as gpt_update passes them.
#define G124_TENSORS 148
static AdamWTensor g124_tensors[G124_TENSORS];
static size_t g124_layout(void) {
    size_t C = 768, sizes[G124_TENSORS], k = 0, off = 0;
    sizes[k++] = 50304 * C;
    sizes[k++] = 1024 * C;
    for (int l = 0; l < 12; l++) {
        size_t layer[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
        for (int i = 0; i < 12; i++) sizes[k++] = layer[i];
    }
    sizes[k++] = C;
    sizes[k++] = C;
    for (int i = 0; i < G124_TENSORS; i++) {
        AdamWTensor* t = &g124_tensors[i];
        t->param = t->grad = t->state = t->index_base = off;
        t->count = sizes[i];
        t->weight_decay = sizes[i] > C * 4 ? 0.1f : 0.0f;
        t->amax = NULL;
        off += sizes[i];
    }
    return off;
}
static void op_adamw_per_tensor(void* p) {
    MemCtx* c = (MemCtx*)p;
    for (int i = 0; i < G124_TENSORS; i++) {
        const AdamWTensor* t = &g124_tensors[i];
        AdamWParams a = bench_adamw_params(t->weight_decay, t->index_base, DTYPE_F32);
        be->adamw(be, (char*)c->a + t->param * 2, c->master + t->state, (char*)c->b + t->grad * 2, c->m + t->state,
                  c->v + t->state, t->count, &a);
    }
}
static void op_adamw_tensors(void* p) {
    MemCtx* c = (MemCtx*)p;
    AdamWParams a = bench_adamw_params(0.0f, 0, DTYPE_F32);
    be->adamw_tensors(be, c->a, c->master, c->b, c->m, c->v, g124_tensors, G124_TENSORS, &a);
}
// The same with BF16 moments (--adam-dtype bf16): the FP32 m and v buffers hold them in their first half.
static void op_adamw_tensors_bf16_moments(void* p) {
    MemCtx* c = (MemCtx*)p;
    AdamWParams a = bench_adamw_params(0.0f, 0, DTYPE_BF16);
    be->adamw_tensors(be, c->a, c->master, c->b, c->m, c->v, g124_tensors, G124_TENSORS, &a);
}

typedef struct {
    void* x;
    void *q, *qt;
    float *amax, *scale;
    int rows, cols;
} CastCtx;
static void op_amax(void* p) {
    CastCtx* c = (CastCtx*)p;
    be->amax(be, c->amax, c->x, (size_t)c->rows * c->cols);
}
static void op_cast(void* p) {
    CastCtx* c = (CastCtx*)p;
    be->fp8_quantize(be, c->q, NULL, DTYPE_FP8_E4M3, c->x, c->rows, c->cols, c->amax, c->scale, c->scale + 1);
}
static void op_cast_transpose(void* p) {
    CastCtx* c = (CastCtx*)p;
    be->fp8_quantize(be, c->q, c->qt, DTYPE_FP8_E4M3, c->x, c->rows, c->cols, c->amax, c->scale, c->scale + 1);
}

// The FP8 casts of a (16K, 3072) BF16 activation (the fc output at 124M).
static void bench_fp8_casts(void) {
    CastCtx c;
    c.rows = 16 * 1024;
    c.cols = 3072;
    size_t n = (size_t)c.rows * c.cols;
    c.x = rand_buf(n, 1);
    c.q = be->alloc(be, n, "bench q");
    c.qt = be->alloc(be, n, "bench qt");
    c.amax = rand_f32(1, 1);
    c.scale = rand_f32(2, 1);
    char shape[64];
    snprintf(shape, sizeof shape, "%d x %d bf16", c.rows, c.cols);
    report_bytes("fp8 amax", shape, time_op(op_amax, &c), n * 2.0);
    report_bytes("fp8 cast", shape, time_op(op_cast, &c), n * 3.0);
    report_bytes("fp8 cast+transpose", shape, time_op(op_cast_transpose, &c), n * 4.0);
    be->free(be, c.x);
    be->free(be, c.q);
    be->free(be, c.qt);
    be->free(be, c.amax);
    be->free(be, c.scale);
}

// ---- layernorm and RMSNorm backward (one launch, kernels/cuda/norm.cuh) ------------------------------------

// A device BF16 buffer of n elements as host floats.
static float* read_bf16(const void* d, size_t n) {
    uint16_t* h = (uint16_t*)xmalloc(n * 2);
    be->to_host(be, h, d, n * 2);
    float* f = (float*)xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(h[i]);
    free(h);
    return f;
}

// max |got - want| / max |want| (infinite on a non-finite got).
static double norm_rel_err(const float* got, const float* want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num = fmax(num, fabs((double)got[i] - want[i]));
        den = fmax(den, fabs((double)want[i]));
    }
    return den > 0 ? num / den : num;
}

typedef struct {
    int ln, N, C;
    void *dinp, *dw, *db, *dout, *x, *w;
    float *mean, *rstd;
} NormCtx;

static void op_norm_bwd(void* p) {
    NormCtx* c = (NormCtx*)p;
    if (c->ln) be->layernorm_backward(be, c->dinp, c->dw, c->db, c->dout, c->x, c->w, c->mean, c->rstd, c->N, c->C, NULL);
    else be->rmsnorm_backward(be, c->dinp, c->dw, c->dout, c->x, c->w, c->rstd, c->N, c->C, NULL);
}

// One backward against the CPU backend (FP32 on the same BF16 inputs, the
// statistics from the CPU's forward): the largest relative error of dinp, dw
// (and db), printed with PASS below 1e-2 (BF16 storage); a second call from
// the same start must give the same bits. Then the timing: dout, x read and
// dinp read and written, 4 x N x C x 2 bytes, as GB/s and as a fraction of
// the device copy.
static void bench_norm_backward(int ln, int N, int C) {
    const char* name = ln ? "layernorm bwd (1 launch)" : "rmsnorm bwd (1 launch)";
    size_t nc = (size_t)N * C;
    NormCtx c = {ln, N, C, rand_buf(nc, 1), rand_buf(C, 1), rand_buf(C, 1), rand_buf(nc, 1), rand_buf(nc, 2),
                 rand_buf(C, 1), NULL, NULL};
    c.mean = (float*)be->alloc(be, (size_t)N * 4, "bench mean");
    c.rstd = (float*)be->alloc(be, (size_t)N * 4, "bench rstd");
    Backend* cpu = cpu_backend_create(DTYPE_F32, 0);
    float *x = read_bf16(c.x, nc), *w = read_bf16(c.w, C), *dout = read_bf16(c.dout, nc);
    float *dinp = read_bf16(c.dinp, nc), *dw = read_bf16(c.dw, C), *db = read_bf16(c.db, C);
    float *out = (float*)xmalloc(nc * 4), *mean = (float*)xmalloc((size_t)N * 4), *rstd = (float*)xmalloc((size_t)N * 4);
    if (ln) cpu->layernorm_forward(cpu, out, mean, rstd, x, w, w, N, C, NULL);
    else cpu->rmsnorm_forward(cpu, out, rstd, x, w, N, C, 1e-5f, NULL);
    be->to_device(be, c.mean, mean, (size_t)N * 4);
    be->to_device(be, c.rstd, rstd, (size_t)N * 4);
    // The device's start values, kept for the repeat (the op accumulates).
    void *dinp0 = be->alloc(be, nc * 2, "bench"), *dw0 = be->alloc(be, (size_t)C * 2, "bench"),
         *db0 = be->alloc(be, (size_t)C * 2, "bench");
    be->copy(be, dinp0, c.dinp, nc * 2);
    be->copy(be, dw0, c.dw, (size_t)C * 2);
    be->copy(be, db0, c.db, (size_t)C * 2);
    if (ln) cpu->layernorm_backward(cpu, dinp, dw, db, dout, x, w, mean, rstd, N, C, NULL);
    else cpu->rmsnorm_backward(cpu, dinp, dw, dout, x, w, rstd, N, C, NULL);
    op_norm_bwd(&c);
    float *g_dinp = read_bf16(c.dinp, nc), *g_dw = read_bf16(c.dw, C), *g_db = read_bf16(c.db, C);
    double err = fmax(norm_rel_err(g_dinp, dinp, nc), norm_rel_err(g_dw, dw, C));
    if (ln) err = fmax(err, norm_rel_err(g_db, db, C));
    be->copy(be, c.dinp, dinp0, nc * 2);
    be->copy(be, c.dw, dw0, (size_t)C * 2);
    be->copy(be, c.db, db0, (size_t)C * 2);
    op_norm_bwd(&c);
    float *r_dinp = read_bf16(c.dinp, nc), *r_dw = read_bf16(c.dw, C), *r_db = read_bf16(c.db, C);
    int same = !memcmp(r_dinp, g_dinp, nc * 4) && !memcmp(r_dw, g_dw, (size_t)C * 4) && !memcmp(r_db, g_db, (size_t)C * 4);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    printf("%-26s %-34s vs CPU rel err %.2e %s, repeat %s\n", name, shape, err, err <= 1e-2 ? "PASS" : "FAIL",
           same ? "bit-identical" : "DIFFERS (FAIL)");
    add_row("%-26s %-34s vs CPU %.1e %s, repeat %s", name, shape, err, err <= 1e-2 ? "PASS" : "FAIL",
            same ? "same bits" : "DIFFERS");
    report_bytes(name, shape, time_op(op_norm_bwd, &c), nc * 2.0 * 4);
    void* bufs[] = {c.dinp, c.dw, c.db, c.dout, c.x, c.w, c.mean, c.rstd, dinp0, dw0, db0};
    for (int i = 0; i < 11; i++) be->free(be, bufs[i]);
    float* hbufs[] = {x, w, dout, dinp, dw, db, out, mean, rstd, g_dinp, g_dw, g_db, r_dinp, r_dw, r_db};
    for (int i = 0; i < 15; i++) free(hbufs[i]);
    cpu->destroy(cpu);
}

static void bench_norms(void) {
    for (int ln = 1; ln >= 0; ln--) {
        bench_norm_backward(ln, 16384, 768);  // GPT-2 124M, B*T = 16K
        bench_norm_backward(ln, 4096, 4096);  // Llama-8B width
    }
}

// The planner's byte count of the memory-bound kernels per step (issue 28),
// op by op from shapes, by the function --plan prints it with (plan_cost),
// for a BF16 model on one GPU at one micro-step (so BF16 gradients, as
// --grad-dtype auto runs it), on the GPU present when the planner knows it.
static PlanCost planned_cost(GPTConfig g, int B, int T, PlanDevice* d) {
    struct cudaDeviceProp prop;
    plan_device_gpu(d, "h100");  // the table's figures when the GPU is not one it knows
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) plan_device_set_peaks_from_name(d, prop.name);
    gpt_config_finish(&g);
    PlanConfig pc;
    memset(&pc, 0, sizeof pc);
    pc.model = g;
    pc.precision = PREC_BF16;
    pc.B = B;
    pc.T = T;
    pc.world = pc.ranks_per_node = 1;
    return plan_cost(&pc, d, 1);
}

static void bench_memory_ops(int B, int T, int C, int V) {
    MemCtx c;
    memset(&c, 0, sizeof c);
    c.B = B;
    c.T = T;
    c.N = B * T;
    c.C = C;
    c.V = V;
    c.Vp = (int)round_up((size_t)V, 128);
    size_t nc = (size_t)c.N * C;
    c.a = rand_buf(nc, 1);
    c.b = rand_buf(nc, 1);
    c.res = rand_buf(nc, 1);
    c.out = rand_buf(nc, 1);
    c.dinp = rand_buf(nc, 1);
    c.w = rand_buf(C, 1);
    c.bias = rand_buf(C, 1);
    c.dw = rand_buf(C, 1);
    c.db = rand_buf(C, 1);
    c.mean = rand_f32(c.N, 1);
    c.rstd = rand_f32(c.N, 1);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", c.N, C);
    report_bytes("residual+layernorm fwd", shape, time_op(op_ln_fwd, &c), nc * 2.0 * 4);
    report_bytes("layernorm bwd", shape, time_op(op_ln_bwd, &c), nc * 2.0 * 4);
    snprintf(shape, sizeof shape, "N=%d x 4C=%d (in place)", c.N, 4 * C);
    be->free(be, c.a);
    be->free(be, c.b);
    c.a = rand_buf(4 * nc, 1);
    c.b = rand_buf(4 * nc, 1);
    c.N *= 4;
    report_bytes("gelu bwd", shape, time_op(op_gelu_bwd, &c), 4 * nc * 2.0 * 3);
    c.N /= 4;

    c.logits = rand_buf((size_t)c.N * c.Vp, 4);
    c.losses = rand_f32(c.N, 1);
    c.tok = rand_tokens(c.N, V);
    snprintf(shape, sizeof shape, "N=%d V=%d", c.N, V);
    report_bytes("cross-entropy fwd+bwd", shape, time_op(op_ce, &c), (double)c.N * c.Vp * 2.0 * 3);
    be->free(be, c.logits);

    c.wte = rand_buf((size_t)c.Vp * C, 1);
    c.wpe = rand_buf((size_t)T * C, 1);
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d", B, T, C);
    report_bytes("encoder fwd", shape, time_op(op_enc_fwd, &c), nc * 2.0 * 3);
    report_bytes("encoder bwd (sorted)", shape, time_op(op_enc_bwd, &c), nc * 2.0 * 3);

    // The optimizer over 124M parameters: bf16 params/grads, fp32 master/m/v.
    c.n = (size_t)124 << 20;
    be->free(be, c.a);
    be->free(be, c.b);
    c.a = rand_buf(c.n, 1);
    c.b = rand_buf(c.n, 1);
    c.m = rand_f32(c.n, 1);
    c.v = rand_f32(c.n, 1);
    c.master = rand_f32(c.n, 1);
    c.scalar = rand_f32(1, 1);
    snprintf(shape, sizeof shape, "n=%zuM", c.n >> 20);
    report_bytes("adamw (bf16 + master)", shape, time_op(op_adamw, &c), c.n * (2.0 + 2 + 3 * 8));
    // 124M as its 148 tensors: one call each, and one adamw_tensors call.
    size_t n124 = g124_layout();
    if (n124 <= c.n) {
        snprintf(shape, sizeof shape, "%d tensors, %.1fM", G124_TENSORS, n124 / 1e6);
        double per = time_op(op_adamw_per_tensor, &c), one = time_op(op_adamw_tensors, &c);
        report_bytes("adamw per tensor", shape, per, n124 * (2.0 + 2 + 3 * 8));
        report_bytes("adamw_tensors (1 launch)", shape, one, n124 * (2.0 + 2 + 3 * 8));
        printf("adamw_tensors / per-tensor calls: %.2fx the throughput\n", per / one);
        // BF16 moments: 20 bytes an element instead of 28 (m and v read and written in 2 bytes each).
        double m16 = time_op(op_adamw_tensors_bf16_moments, &c);
        report_bytes("adamw_tensors, bf16 moments", shape, m16, n124 * (2.0 + 2 + 2 * 4 + 4 * 2));
        printf("adamw_tensors with bf16 moments / fp32 moments: %.2fx the speed\n", one / m16);
    }
    report_bytes("grad norm (sum_squares)", shape, time_op(op_norm, &c), c.n * 2.0);
    void* bufs[] = {c.a, c.b, c.res, c.out, c.dinp, c.w, c.bias, c.dw, c.db, c.mean, c.rstd, c.losses, c.tok,
                    c.wte, c.wpe, c.m, c.v, c.master, c.scalar};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]);
}

// ---- models ----------------------------------------------------------------------------------------------

// Bytes gpt_create would allocate for (c, B, T) in BF16 (parameters, grads,
// master, Adam moments, activations), to find the largest micro-batch that fits.
static size_t model_bytes(const GPTConfig* c, int B, int T) {
    StateBytes sb = gpt_state_bytes(c, DTYPE_BF16, 1, 0);
    ActLayout al;
    act_layout_build(&al, c, B, T, DTYPE_BF16, NULL);
    return sb.params + sb.grads + sb.master + sb.adam + al.bytes;
}

// One model's BF16 training steps with the LM head in `head_chunks` chunks;
// returns tokens/s.
static double bench_model_chunked(const char* name, GPTConfig c, int B, int T, int steps, int head_chunks) {
    gpt_config_finish(&c);
    GPT m;
    gpt_create_chunked(&m, &c, be, B, T, 1, 0, 0, NULL, head_chunks);
    gpt_init_random(&m, 1);
    cuda_fill_uniform(be, m.inputs, (size_t)B * T, DTYPE_I32, 0.0f, (float)c.vocab_size, 3);
    be->copy(be, m.targets, m.inputs, (size_t)B * T * 4);
    double t0 = 0, loss = 0;
    for (int s = 0; s < steps + 2; s++) {
        if (s == 2) {
            be->synchronize(be);
            t0 = now_seconds();
        }
        gpt_zero_grads(&m);
        gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (float)(B * T));
        gpt_accumulate_loss(&m, B, T, 0);
        gpt_backward(&m, m.inputs, B, T);
        gpt_grad_norm_squared(&m, 0, m.layout.total);
        float sc[2];
        be->to_host(be, sc, m.scalars, sizeof sc);
        loss = sc[0] / ((double)B * T);
        gpt_update(&m, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, (float)grad_clip_scale(sqrt(sc[1]), 1.0), (uint64_t)s);
    }
    be->synchronize(be);
    double sec = (now_seconds() - t0) / steps;
    double tok_s = (double)B * T / sec;
    double flops_per_token = 6.0 * (double)gpt_num_params(&c) + 12.0 * c.num_layers * c.channels * (double)T;
    double mfu = tok_s * flops_per_token / (peak_tflops * 1e12);
    char shape[64];
    snprintf(shape, sizeof shape, "L=%d C=%d B=%d T=%d", c.num_layers, c.channels, B, T);
    printf("model %-20s %-30s %8.1f ms/step %10.0f tok/s  MFU %5.1f%%  (loss %.3f, %.1f GiB)\n", name, shape,
           sec * 1e3, tok_s, 100 * mfu, loss, be->peak_allocated_bytes(be) / 1073741824.0);
    add_row("model %-20s %-30s %8.1f ms %10.0f tok/s MFU %5.1f%%", name, shape, sec * 1e3, tok_s, 100 * mfu);
    gpt_free(&m);
    return tok_s;
}

static void bench_model(const char* name, GPTConfig c, int B, int T, int steps) {
    bench_model_chunked(name, c, B, T, steps, 1);
}

// The LM head in one chunk against the planner's chunks (head.c), in the
// same run: the step's speed ratio and the logits buffer each holds.
static void bench_head_chunks(GPTConfig c, int B, int T, int steps) {
    gpt_config_finish(&c);
    int chunks = plan_head_chunks(&c, B, T);
    ActLayout one, many;
    act_layout_build_chunked(&one, &c, B, T, DTYPE_BF16, NULL, 1);
    act_layout_build_chunked(&many, &c, B, T, DTYPE_BF16, NULL, chunks);
    double t1 = bench_model_chunked("gpt2-124M head x1", c, B, T, steps, 1);
    char name[48];
    snprintf(name, sizeof name, "gpt2-124M head x%d", chunks);
    double tn = bench_model_chunked(name, c, B, T, steps, chunks);
    printf("LM head in %d chunks / 1 chunk: %.3fx the tokens/s; logits %.1f MiB instead of %.1f MiB\n", chunks,
           tn / t1, act_kind_bytes(&many, A_LOGITS) / 1048576.0, act_kind_bytes(&one, A_LOGITS) / 1048576.0);
    add_row("head chunks %d/1: %.3fx tok/s, logits %.0f/%.0f MiB", chunks, tn / t1,
            act_kind_bytes(&many, A_LOGITS) / 1048576.0, act_kind_bytes(&one, A_LOGITS) / 1048576.0);
}

// ---- FP8 against BF16 ----------------------------------------------------------------------------------

typedef struct {
    int N, C, OC, with_casts;
    void *x, *w, *dy, *out, *dinp, *dw;  // BF16
    uint8_t *xq, *xqt, *wq, *wqt, *dyq, *dyqt;
    float* sc;  // amax, scale, scale_inv for x, w, dy (3 each)
} Fp8Ctx;

static Fp8Tensor op8(Fp8Ctx* c, int k, const void* q, const void* qt, DType t) {
    Fp8Tensor f = {q, be->fp8_support == FP8_TN_ONLY ? qt : NULL, t, &c->sc[3 * k + 2]};
    return f;
}
static void cast8(Fp8Ctx* c, int k, void* q, void* qt, DType t, const void* x, int nrows, int cols) {
    be->zero(be, &c->sc[3 * k], sizeof(float));
    be->amax(be, &c->sc[3 * k], x, (size_t)nrows * cols);
    be->fp8_quantize(be, q, be->fp8_support == FP8_TN_ONLY ? qt : NULL, t, x, nrows, cols, &c->sc[3 * k],
                     &c->sc[3 * k + 1], &c->sc[3 * k + 2]);
}
static void fp8_fwd(void* p) {
    Fp8Ctx* c = (Fp8Ctx*)p;
    if (c->with_casts) cast8(c, 0, c->xq, c->xqt, DTYPE_FP8_E4M3, c->x, c->N, c->C);
    Fp8Tensor x = op8(c, 0, c->xq, c->xqt, DTYPE_FP8_E4M3), w = op8(c, 1, c->wq, c->wqt, DTYPE_FP8_E4M3);
    be->fp8_matmul_forward(be, c->out, &x, &w, NULL, c->N, c->C, c->OC);
}
static void fp8_bwd(void* p) {
    Fp8Ctx* c = (Fp8Ctx*)p;
    if (c->with_casts) {
        cast8(c, 2, c->dyq, c->dyqt, DTYPE_FP8_E5M2, c->dy, c->N, c->OC);
        cast8(c, 0, c->xq, c->xqt, DTYPE_FP8_E4M3, c->x, c->N, c->C);
    }
    Fp8Tensor x = op8(c, 0, c->xq, c->xqt, DTYPE_FP8_E4M3), w = op8(c, 1, c->wq, c->wqt, DTYPE_FP8_E4M3),
              dy = op8(c, 2, c->dyq, c->dyqt, DTYPE_FP8_E5M2);
    be->fp8_matmul_backward(be, c->dinp, c->dw, &dy, &x, &w, c->N, c->C, c->OC);
}
static void bf16_fwd(void* p) {
    Fp8Ctx* c = (Fp8Ctx*)p;
    be->matmul_forward(be, c->out, NULL, c->x, c->w, NULL, c->N, c->C, c->OC);
}
static void bf16_bwd(void* p) {
    Fp8Ctx* c = (Fp8Ctx*)p;
    be->matmul_backward(be, c->dinp, c->dw, NULL, c->dy, c->x, c->w, c->N, c->C, c->OC);
}

static void bench_fp8_gemm(int H) {
    Fp8Ctx c;
    memset(&c, 0, sizeof c);
    c.N = 8192;
    c.C = H;
    c.OC = 4 * H;
    size_t nx = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C, ny = (size_t)c.N * c.OC;
    c.x = rand_buf(nx, 1);
    c.w = rand_buf(nw, 0.02f);
    c.dy = rand_buf(ny, 1e-3f);
    c.out = rand_buf(ny, 1);
    c.dinp = rand_buf(nx, 1);
    c.dw = rand_buf(nw, 1);
    c.xq = (uint8_t*)be->alloc(be, nx, "x e4m3");
    c.xqt = (uint8_t*)be->alloc(be, nx, "x^T e4m3");
    c.wq = (uint8_t*)be->alloc(be, nw, "w e4m3");
    c.wqt = (uint8_t*)be->alloc(be, nw, "w^T e4m3");
    c.dyq = (uint8_t*)be->alloc(be, ny, "dy e5m2");
    c.dyqt = (uint8_t*)be->alloc(be, ny, "dy^T e5m2");
    c.sc = (float*)be->alloc(be, 9 * sizeof(float), "scales");
    cast8(&c, 0, c.xq, c.xqt, DTYPE_FP8_E4M3, c.x, c.N, c.C);
    cast8(&c, 1, c.wq, c.wqt, DTYPE_FP8_E4M3, c.w, c.OC, c.C);
    cast8(&c, 2, c.dyq, c.dyqt, DTYPE_FP8_E5M2, c.dy, c.N, c.OC);
    double flops = 2.0 * c.N * c.C * c.OC;
    char shape[64];
    snprintf(shape, sizeof shape, "hidden %d: %d x %d -> %d", H, c.N, c.C, c.OC);
    double bf = time_op(bf16_fwd, &c), bb = time_op(bf16_bwd, &c);
    double ff = time_op(fp8_fwd, &c), fb = time_op(fp8_bwd, &c);
    c.with_casts = 1;
    double cf = time_op(fp8_fwd, &c), cb = time_op(fp8_bwd, &c);
    report_flops("gemm fwd bf16", shape, bf, flops);
    report_flops("gemm fwd fp8", shape, ff, flops);
    report_flops("gemm fwd fp8 + cast", shape, cf, flops);
    report_flops("gemm bwd bf16", shape, bb, 2 * flops);
    report_flops("gemm bwd fp8", shape, fb, 2 * flops);
    report_flops("gemm bwd fp8 + casts", shape, cb, 2 * flops);
    add_row("fp8/bf16 hidden %-5d fwd %.2fx (%.2fx with cast) | bwd %.2fx (%.2fx with casts)", H, bf / ff, bf / cf,
            bb / fb, bb / cb);
    printf("%s\n", table[rows - 1]);
    void* bufs[] = {c.x, c.w, c.dy, c.out, c.dinp, c.dw, c.xq, c.xqt, c.wq, c.wqt, c.dyq, c.dyqt, c.sc};
    for (int i = 0; i < 13; i++) be->free(be, bufs[i]);
}

// Seconds per training step of model c (BF16, or FP8 with current scaling).
static double model_step_seconds(GPTConfig c, int B, int T, int steps, int fp8) {
    gpt_config_finish(&c);
    GPT m;
    Fp8State s;
    gpt_create(&m, &c, be, B, T, 1, 0, 0);
    if (fp8) {
        Fp8Options o = {.recipe = FP8_CURRENT, .history = 1, .margin = 0, .skip = NULL};
        gpt_enable_fp8(&m, &s, &o);
    }
    gpt_init_random(&m, 1);
    cuda_fill_uniform(be, m.inputs, (size_t)B * T, DTYPE_I32, 0.0f, (float)c.vocab_size, 3);
    be->copy(be, m.targets, m.inputs, (size_t)B * T * 4);
    double t0 = 0;
    for (int st = 0; st < steps + 2; st++) {
        if (st == 2) {
            be->synchronize(be);
            t0 = now_seconds();
        }
        if (fp8) fp8_begin_step(&s, st);
        gpt_zero_grads(&m);
        gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (float)(B * T));
        gpt_backward(&m, m.inputs, B, T);
        gpt_grad_norm_squared(&m, 0, m.layout.total);
        float sc[2];
        be->to_host(be, sc, m.scalars, sizeof sc);
        gpt_update(&m, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, (float)grad_clip_scale(sqrt(sc[1]), 1.0), (uint64_t)st);
        if (fp8) fp8_end_step(&s, NULL);
    }
    be->synchronize(be);
    double sec = (now_seconds() - t0) / steps;
    gpt_free(&m);  // and its FP8 state
    return sec;
}

// The memory-bound ops of a BF16 training step measured beside the planner's
// bytes (issue 28: the first GPU run shows each kernel's achieved bandwidth).
// A second backend with the op profile (TRAIN_GPT_OP_PROFILE,
// kernels/cuda/op_watch.cu: CUDA events around each op, the host waiting
// after each) runs the steps; each planner row gets the GPU time of the ops
// that do its work. A row whose ops never ran was fused into a GEMM's
// epilogue (GELU, bias gradients) or has no kernel in this configuration.
typedef struct {
    const char* row;
    MemOp billed[2];  // -1: none
    const char* ops[7];
} StepBytesRow;

static const StepBytesRow STEP_BYTES_ROWS[] = {
    {"norms + residual adds", {MB_NORMS, MB_RESIDUAL},
     {"layernorm_forward", "residual_layernorm_forward", "layernorm_backward", "rmsnorm_forward",
      "residual_rmsnorm_forward", "rmsnorm_backward"}},
    {"gelu/swiglu", {MB_ACT, (MemOp)-1}, {"gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward"}},
    {"bias grads", {MB_BIAS_GRAD, (MemOp)-1}, {NULL}},
    {"rope", {MB_ROPE, (MemOp)-1}, {"rope_forward", "rope_backward"}},
    {"embeddings", {MB_EMBED, (MemOp)-1}, {"encoder_forward", "encoder_backward"}},
    {"loss", {MB_LOSS, (MemOp)-1}, {"cross_entropy"}},
    {"fp8 casts", {MB_CASTS, (MemOp)-1}, {"fp8_quantize", "amax", "fp8_amax_fold", "fp8_update_scales"}},
    {"grad accum", {MB_GRAD_ACCUM, (MemOp)-1}, {"accumulate_f32"}},
    {"adamw", {MB_ADAMW, (MemOp)-1}, {"adamw", "adamw_tensors"}},
    {"grad norm (unbilled)", {(MemOp)-1, (MemOp)-1}, {"sum_squares", "sum_squares_f32"}},
};

static void bench_step_bytes(const char* name, GPTConfig g, int B, int T, int steps) {
    if (!cuda_op_profile_take) return;
    PlanDevice d;
    PlanCost k = planned_cost(g, B, T, &d);
    Backend* plain = be;
    setenv("TRAIN_GPT_OP_PROFILE", "1", 1);
    be = cuda_backend_create(DTYPE_BF16);
    unsetenv("TRAIN_GPT_OP_PROFILE");
    CudaOpTime t[64];
    model_step_seconds(g, B, T, 1, 0);  // warm-up: 3 steps, not counted
    cuda_op_profile_take(t, 64);
    model_step_seconds(g, B, T, steps, 0);
    int n = cuda_op_profile_take(t, 64), ran = steps + 2;
    be->destroy(be);
    be = plain;
    printf("memory-bound ops of a %s BF16 step (B x T = %d x %d, %d steps): planned bytes (llm/plan/cost.c) and the "
           "measured GPU time of the ops doing that work (TRAIN_GPT_OP_PROFILE)\n", name, B, T, ran);
    printf("  %-22s %10s %10s %12s %10s %8s\n", "op", "planned GB", "plan ms", "measured ms", "GB/s", "calls");
    double plan_total = 0, ms_total = 0;
    for (size_t r = 0; r < sizeof STEP_BYTES_ROWS / sizeof STEP_BYTES_ROWS[0]; r++) {
        const StepBytesRow* row = &STEP_BYTES_ROWS[r];
        double bytes = 0, ms = 0;
        long calls = 0;
        for (int b = 0; b < 2; b++)
            if ((int)row->billed[b] >= 0) bytes += k.mem_bytes[row->billed[b]];
        for (int o = 0; o < 7 && row->ops[o]; o++)
            for (int i = 0; i < n; i++)
                if (!strcmp(t[i].op, row->ops[o])) {
                    ms += t[i].ms / ran;
                    calls += t[i].calls;
                }
        if (bytes <= 0 && calls == 0) continue;
        plan_total += bytes;
        ms_total += ms;
        char gbs[32] = "n/a";
        if (calls && bytes > 0 && ms > 0) snprintf(gbs, sizeof gbs, "%.0f", bytes / (ms * 1e-3) / 1e9);
        if (calls) {
            printf("  %-22s %10.3f %10.3f %12.3f %10s %8.1f\n", row->row, bytes / 1e9,
                   bytes / (PLAN_HBM_EFF * k.links.hbm) * 1e3, ms, gbs, (double)calls / ran);
        } else {
            printf("  %-22s %10.3f %10.3f %12s %10s %8s  (%s)\n", row->row, bytes / 1e9,
                   bytes / (PLAN_HBM_EFF * k.links.hbm) * 1e3, "-", "-", "0",
                   row->ops[0] ? "no kernel ran: fused or not used" : "inside matmul_backward");
        }
    }
    printf("  %-22s %10.3f %10.3f %12.3f %10s\n", "= total", plan_total / 1e9,
           plan_total / (PLAN_HBM_EFF * k.links.hbm) * 1e3, ms_total, "");
    add_row("%s memory-bound ops: planned %.3f GB %.3f ms at %.0f%% of %s HBM, measured %.3f ms", name, plan_total / 1e9,
            plan_total / (PLAN_HBM_EFF * k.links.hbm) * 1e3, PLAN_HBM_EFF * 100, d.name, ms_total);
}

static void bench_fp8_model(int steps) {
    GPTConfig c;
    memset(&c, 0, sizeof c);
    c.max_seq_len = 1024;
    c.vocab_size = 50257;
    c.num_layers = 4;
    c.num_heads = 32;
    c.channels = 4096;
    int B = 4, T = 1024;
    double b = model_step_seconds(c, B, T, steps, 0), f = model_step_seconds(c, B, T, steps, 1);
    printf("model hidden 4096 (L=4 B=%d T=%d): bf16 %.0f tok/s, fp8 %.0f tok/s\n", B, T, B * T / b, B * T / f);
    add_row("fp8/bf16 model hidden 4096 (L=4 B=%d T=%d): %.0f vs %.0f tok/s, %.2fx", B, T, B * T / f, B * T / b, b / f);
}

// ---- a Llama-3-8B-shaped model (--llama8b) --------------------------------------------------------

// Llama 3 8B's shape (llm/presets.c's llama3-8B) with `layers` of its 32 layers.
static GPTConfig llama8b_shape(int layers) {
    GPTConfig c = {.arch = ARCH_LLAMA, .max_seq_len = 8192, .vocab_size = 128256, .num_layers = layers,
                   .num_heads = 32, .num_kv_heads = 8, .channels = 4096, .mlp_hidden = 14336, .tie_embeddings = 0,
                   .rope_theta = 500000.0f};
    gpt_config_finish(&c);
    return c;
}

// "41.2%", or "n/a" where the peak is unknown or the figure impossible (above 100%).
static const char* mfu_text(char* buf, size_t size, double flops_per_s) {
    double m = flops_per_s / (peak_tflops * 1e12);
    if (!peak_known || !(m > 0) || m > 1) snprintf(buf, size, "n/a");
    else snprintf(buf, size, "%.1f%%", 100 * m);
    return buf;
}

// The Llama-3-8B-shaped step in BF16 and FP8, one line each:
//   llama8b bf16 L=4 C=4096 B=1 T=8192  <ms> ms/step <tok/s> tok/s <TF> TFLOP/s MFU <x%|n/a>  (...)
// (scripts/gpu_check_summary.py reads it; reference.py prints PyTorch's as "torch model llama8b bf16 eager ...").
static void bench_llama8b(int steps) {
    const int B = 1, T = 8192;
    GPTConfig c = llama8b_shape(4), full = llama8b_shape(32);
    double fpt = flops_per_token(&c, T), fpt_full = flops_per_token(&full, T);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    double need = model_bytes(&c, B, T) / 1073741824.0;
    printf("llama8b shape: L=4 C=4096 NH=32 NKV=8 MLP=14336 V=128256 untied, B=%d T=%d: %.3fB parameters, "
           "%.2f GFLOP/token; BF16 state + activations %.1f GiB of %.1f GiB free\n",
           B, T, gpt_num_params(&c) / 1e9, fpt / 1e9, need, free_b / 1073741824.0);
    if (need > 0.9 * free_b / 1073741824.0) {
        printf("llama8b: skipped, %.1f GiB do not fit in 90%% of the free memory\n", need);
        add_row("llama8b L=4 T=8192: skipped (needs %.1f GiB)", need);
        return;
    }
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        const char* prec = fp8 ? "fp8" : "bf16";
        if (fp8 && be->fp8_support == FP8_NONE) {
            printf("llama8b fp8: n/a (this GPU has no FP8 tensor cores)\n");
            continue;
        }
        double sec = model_step_seconds(c, B, T, steps, fp8);
        double tok_s = B * T / sec, flops_s = tok_s * fpt;
        char m[16];
        printf("llama8b %-4s L=4 C=4096 B=%d T=%d %9.1f ms/step %9.0f tok/s %7.1f TFLOP/s MFU %s  "
               "(32 layers at this FLOP/s: %.0f tok/s; peak memory %.1f GiB)\n",
               prec, B, T, sec * 1e3, tok_s, flops_s / 1e12, mfu_text(m, sizeof m, flops_s), flops_s / fpt_full,
               be->peak_allocated_bytes(be) / 1073741824.0);
        add_row("llama8b %-4s L=4 T=%d: %.0f tok/s, %.1f TFLOP/s, MFU %s", prec, T, tok_s, flops_s / 1e12, m);
    }
}

static GPTConfig gpt2(int L, int C, int NH, int V) {
    GPTConfig c;
    memset(&c, 0, sizeof c);
    c.max_seq_len = 1024;
    c.vocab_size = V;
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    return c;
}

static void print_summary(void) {
    printf("---- summary (peak: %.0f TFLOP/s dense BF16%s, %.0f GB/s) ----\n", peak_tflops, peak_known ? "" : ", assumed",
           peak_gbs);
    for (int i = 0; i < rows; i++) printf("%s\n", table[i]);
}

int main(int argc, char** argv) {
    int quick = 0, llama8b = 0, headline = 0, step_bytes = 0, tiny = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--llama8b") == 0) llama8b = 1;
        else if (strcmp(argv[i], "--headline") == 0) headline = 1;
        else if (strcmp(argv[i], "--step-bytes") == 0) step_bytes = 1;
        else if (strcmp(argv[i], "--tiny") == 0) tiny = 1;
        else {
            fprintf(stderr, "bench_gpu: unknown argument '%s' (bench_gpu [--quick] [--llama8b | --headline | "
                            "--step-bytes [--tiny]])\n", argv[i]);
            return 2;
        }
    }
    if (quick) reps = 5;
    be = cuda_backend_create(DTYPE_BF16);
    device_info();
    if (step_bytes) {
        // --tiny: a 2-layer model at B x T = 2 x 64, for the emulator (tests/cuda_sim/test_sim_bench_bytes.sh).
        if (tiny) bench_step_bytes("tiny gpt2", gpt2(2, 64, 2, 512), 2, 64, 1);
        else bench_step_bytes("gpt2-124M", gpt2(12, 768, 12, 50257), 16, 1024, quick ? 2 : 5);
        print_summary();
        be->destroy(be);
        return 0;
    }
    if (headline) {
        printf("---- headline: GPT-2 124M BF16 step; attention cuDNN and native, T = 1K, 4K, 8K, HS 64 and 128 ----\n");
        bench_model("gpt2-124M", gpt2(12, 768, 12, 50257), 16, 1024, quick ? 3 : 10);
        bench_step_bytes("gpt2-124M", gpt2(12, 768, 12, 50257), 16, 1024, quick ? 2 : 5);
        int head_T[] = {1024, 4096, 8192};
        bench_attention_grid(head_T, 3, 1);
        print_summary();
        be->destroy(be);
        return 0;
    }
    if (llama8b) {
        printf("---- a Llama-3-8B-shaped model (4 layers, T = 8192; BF16 and FP8 training steps) ----\n");
        bench_llama8b(quick ? 3 : 10);
        print_summary();
        be->destroy(be);
        return 0;
    }
    printf("---- ops (BF16) ----\n");
    int N = 16 * 1024;
    bench_matmul("qkv", N, 768, 2304, 0, 1);
    bench_matmul("fc", N, 768, 3072, 1, 1);
    bench_matmul("fcproj", N, 3072, 768, 0, 1);
    bench_matmul("lm head", N, 768, 50304, 0, 0);
    bench_matmul("fc 2048", 8192, 2048, 8192, 1, 1);
    bench_mlp_epilogues(N, 768);
    bench_mlp_epilogues(8192, 2048);
    bench_attention(16, 1024, 12, 64);
    bench_attention(4, 4096, 16, 128);
    bench_attention(1, 8192, 16, 128);
    bench_attention(1, 16384, 16, 128);
    if (!quick) bench_attention(1, 32768, 16, 128);
    bench_attention_gqa(1, 8192, 32, 8, 128);
    bench_copy();
    bench_memory_ops(16, 1024, 768, 50257);
    bench_norms();
    if (be->fp8_support != FP8_NONE) bench_fp8_casts();
    printf("---- attention: cuDNN and native (BF16, causal; dev/bench_attention_torch.py prints PyTorch's rows) ----\n");
    int grid_T[] = {1024, 2048, 4096, 8192, 16384, 32768};
    bench_attention_grid(grid_T, quick ? 4 : 6, 0);

    printf("---- models (BF16 training steps) ----\n");
    int steps = quick ? 3 : 10;
    GPTConfig g124 = gpt2(12, 768, 12, 50257);
    bench_model("gpt2-124M", g124, 16, 1024, steps);
    bench_step_bytes("gpt2-124M", g124, 16, 1024, quick ? 2 : 5);
    bench_head_chunks(g124, 16, 1024, steps);
    if (!quick) {
        bench_model("24L-2048C", gpt2(24, 2048, 16, 50257), 8, 1024, steps);
        // The largest micro-batch of GPT-2 124M (T = 1024) that fits in 90% of the free memory.
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        GPTConfig c = g124;
        gpt_config_finish(&c);
        int B = 16;
        while (model_bytes(&c, B + 8, 1024) < (size_t)(0.9 * free_b)) B += 8;
        bench_model("gpt2-124M max batch", g124, B, 1024, steps);
    }

    if (be->fp8_support != FP8_NONE) {
        printf("---- FP8 against BF16 ----\n");
        bench_fp8_gemm(2048);
        bench_fp8_gemm(4096);
        if (!quick) bench_fp8_gemm(8192);
        bench_fp8_model(steps);
    } else {
        printf("---- FP8: this GPU has no FP8 tensor cores ----\n");
    }

    print_summary();
    be->destroy(be);
    return 0;
}
