// planner.c: the memory bill, the throughput estimate and the search for the
// recommended configuration. Pure arithmetic: nothing here allocates more
// than a parameter layout's tensor table, so it plans 64B models instantly.
#include "llm/plan/planner.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "kernels/cudnn_workspace.h"
#include "llm/fp8/fp8.h"
#include "llm/plan/cost.h"
#include "llm/plan/mfu.h"

const char* precision_name(Precision p) {
    switch (p) {
    case PREC_FP32: return "fp32";
    case PREC_BF16: return "bf16";
    case PREC_FP8: return "fp8";
    }
    return "?";
}

// ---------------------------------------------------------------------------
// devices

// Memory as nvidia-smi and cudaMemGetInfo report the total (MiB); dense
// tensor-core peaks (FLOP/s) per GPU: H100/H200 SXM 989 BF16 and 1979 FP8,
// HGX B200 (1 kW) 2250 and 4500, A100 312 BF16 and no FP8.
static const struct {
    const char* key;
    const char* name;
    double mib;
    double bf16, fp8;
} GPUS[] = {
    {"h100", "H100", 81559, 989e12, 1979e12},
    {"h200", "H200", 143771, 989e12, 1979e12},
    {"b200", "B200", 183359, 2250e12, 4500e12},
    {"a100", "A100", 81920, 312e12, 0},
};
#define NUM_GPUS ((int)(sizeof GPUS / sizeof GPUS[0]))

// Hopper takes FP8 GEMM operands only as TN, Blackwell any layout, the A100
// has no FP8 (kernels/cuda/fp8.cu decides the same by compute capability).
static Fp8Support fp8_support_of(const char* name) {
    if (!strcmp(name, "B200")) return FP8_ANY_LAYOUT;
    if (!strcmp(name, "A100")) return FP8_NONE;
    return FP8_TN_ONLY;
}

int plan_device_gpu(PlanDevice* d, const char* name) {
    for (int i = 0; i < NUM_GPUS; i++) {
        if (strcasecmp(name, GPUS[i].key) != 0) continue;
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%s", GPUS[i].name);
        d->is_gpu = 1;
        d->memory = GPUS[i].mib * 1024.0 * 1024.0;
        d->peak_bf16 = GPUS[i].bf16;
        d->peak_fp8 = GPUS[i].fp8;
        d->fp8_support = fp8_support_of(GPUS[i].name);
        return 1;
    }
    return 0;
}

void plan_device_set_peaks_from_name(PlanDevice* d, const char* device_name) {
    for (int i = 0; i < NUM_GPUS; i++) {
        if (!strstr(device_name, GPUS[i].name)) continue;
        snprintf(d->name, sizeof d->name, "%s", GPUS[i].name);
        d->peak_bf16 = GPUS[i].bf16;
        d->peak_fp8 = GPUS[i].fp8;
        d->fp8_support = fp8_support_of(GPUS[i].name);
        return;
    }
}

PlanDevice plan_device_cpu(double memory, int threads) {
    PlanDevice d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "cpu");
    d.memory = memory;
    d.fp8_support = FP8_ANY_LAYOUT;
    d.cpu_threads = threads > 0 ? threads : 1;
    return d;
}

Precision precision_for_model(double params, int is_gpu, int gpu_has_fp8) {
    if (!is_gpu) return PREC_FP32;
    return params >= PLAN_FP8_FROM_PARAMS && gpu_has_fp8 ? PREC_FP8 : PREC_BF16;
}

Precision plan_default_precision(const GPTConfig* c, const PlanDevice* dev) {
    return precision_for_model((double)gpt_num_params(c), dev->is_gpu, dev->peak_fp8 > 0);
}

// ---------------------------------------------------------------------------
// the bill

int plan_shard_world(const PlanConfig* pc) {
    if (pc->shard_group > 0) return pc->shard_group < pc->world ? pc->shard_group : pc->world;
    return pc->hybrid && pc->ranks_per_node < pc->world ? pc->ranks_per_node : pc->world;
}

size_t plan_gpu_op_scratch(const GPTConfig* c, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)c->channels, NH = (size_t)c->num_heads, HS = C / NH;
    size_t widest = 4 * C;  // the MLP's biased linear layer (reserve_scratch's `widest`)
    size_t d = (N * NH * sizeof(float) + 255) / 256 * 256;  // attention's D (B, NH, T)
    // cuDNN's workspace: what its engines ask for, never more than the limit
    // (an engine that asks more is skipped: kernels/cudnn_workspace.h).
    size_t ws = cudnn_attention_workspace_bound(B, T, (int)NH, (int)HS), limit = cudnn_workspace_limit();
    size_t cudnn = d + (ws < limit ? ws : limit);
    size_t norm_rows = N < PLAN_GPU_MAX_SMS * 2 ? N : PLAN_GPU_MAX_SMS * 2;
    size_t norm = norm_rows * 2 * C * sizeof(float);  // layernorm/RMSNorm backward partials (2 blocks per SM)
    size_t colsum = (N + 127) / 128 * widest * sizeof(float);  // bias gradients' partials (128 rows a block)
    size_t encoder = 8;
    while (encoder < N * 8) encoder <<= 1;  // the encoder backward's sort keys (a power of two)
    size_t sizes[] = {cudnn, norm, colsum, encoder}, most = 0;
    for (int i = 0; i < 4; i++) most = sizes[i] > most ? sizes[i] : most;
    return most;
}

int plan_head_chunks(const GPTConfig* c, int B, int T) {
    size_t N = (size_t)B * T;
    ActLayout al;
    act_layout_build(&al, c, B, T, DTYPE_F32, NULL);
    size_t wide = al.count[A_SCRATCH_BT4C] / N;  // the MLP scratch's elements per token
    if (wide < (size_t)c->channels) wide = (size_t)c->channels;
    size_t by_memory = ceil_div((size_t)c->padded_vocab_size, wide);
    size_t by_rows = ceil_div(N, PLAN_HEAD_MIN_ROWS);
    size_t chunks = by_memory < by_rows ? by_memory : by_rows;
    return chunks < 1 ? 1 : (int)chunks;
}

int plan_resolved_head_chunks(const PlanConfig* pc) {
    return pc->head_chunks > 0 ? pc->head_chunks : plan_head_chunks(&pc->model, pc->B, pc->T);
}

int plan_param_layer_slots(const PlanConfig* pc) { return 1 + (pc->zero3_prefetch > 1 ? pc->zero3_prefetch : 1); }

MemoryBill plan_bill(const PlanConfig* pc, const PlanDevice* dev) {
    MemoryBill b;
    memset(&b, 0, sizeof b);
    const GPTConfig* c = &pc->model;
    // FP8 on the CPU: FP32 storage, FP8 GEMMs emulated.
    DType dt = pc->precision == PREC_FP32 || (pc->precision == PREC_FP8 && !dev->is_gpu) ? DTYPE_F32 : DTYPE_BF16;
    DType grad_want = pc->grad_bf16 == 2 || (pc->grad_bf16 == 1 && dt != DTYPE_F32) ? DTYPE_BF16 : DTYPE_F32;
    b.state = gpt_state_bytes_full(c, dt, plan_shard_world(pc), pc->zero_stage, plan_param_layer_slots(pc),
                                   pc->adam_dtype, grad_want);
    act_layout_build_chunked(&b.acts, c, pc->B, pc->T, dt, &pc->recompute, plan_resolved_head_chunks(pc));
    b.activations = b.acts.bytes;
    size_t BT = (size_t)pc->B * pc->T;
    size_t fp8_gemm_scratch = 0;
    if (pc->precision == PREC_FP8) {
        Fp8Bytes f = gpt_fp8_bytes(c, pc->B, pc->T, pc->zero_stage, dev->is_gpu ? dev->fp8_support : FP8_ANY_LAYOUT,
                                   fp8_recipe_is_block((Fp8Recipe)pc->fp8_recipe) ? (Fp8Recipe)pc->fp8_recipe
                                   : pc->fp8_history                                ? FP8_DELAYED
                                                                                    : FP8_CURRENT,
                                   pc->fp8_history, pc->fp8_skip);
        b.fp8_weights = f.weights;
        b.fp8_scaling = f.scaling;
        b.activations += f.casts;
        fp8_gemm_scratch = f.cpu_gemm_scratch;
    }
    b.tokens = 2 * BT * sizeof(int32_t) + 4 * sizeof(float);
    // The architecture's own tables (Llama's RoPE table (T, HS/2, 2) FP32) are billed with these small buffers.
    b.tokens += gpt_arch_state_bytes(c, pc->T);
    if (dev->is_gpu) {
        b.workspace = PLAN_CUBLASLT_WORKSPACE + plan_gpu_op_scratch(c, pc->B, pc->T) + PLAN_CUDA_NORM_TICKET;
    } else {
        // One op's scratch at a time: the attention's, or an emulated FP8 GEMM's.
        size_t att = cpu_attention_scratch_bytes(pc->T, c->channels / c->num_heads, dev->cpu_threads);
        b.workspace = att > fp8_gemm_scratch ? att : fp8_gemm_scratch;
    }
    b.allocated = b.state.params + b.state.grads + b.state.master + b.state.adam + b.fp8_weights + b.fp8_scaling +
                  b.activations + b.tokens + b.workspace;
    b.reserve = dev->is_gpu ? PLAN_GPU_RUNTIME_RESERVE + b.allocated / 100 * PLAN_FRAGMENTATION_PERCENT : 0;
    b.total = b.allocated + b.reserve;
    return b;
}

int plan_fits(const MemoryBill* b, const PlanDevice* dev) { return (double)b->total <= plan_usable_memory(dev); }

double plan_usable_memory(const PlanDevice* dev) {
    return dev->is_gpu ? dev->memory * (100 - PLAN_GPU_HEADROOM_PERCENT) / 100.0 : dev->memory;
}

// ---------------------------------------------------------------------------
// throughput

PlanSpeed plan_speed(const PlanConfig* pc, const PlanDevice* dev) {
    PlanSpeed s;
    memset(&s, 0, sizeof s);
    const GPTConfig* c = &pc->model;
    double h = c->channels, T = pc->T;
    // The same 6N + 12*L*h*s as a run's MFU (llm/plan/mfu.h).
    s.model_flops = flops_per_token(c, pc->T);
    // A fully recomputed layer re-runs its qkv, attention-projection and fc
    // GEMMs (2 x their weights per token: 16h^2 for GPT-2; Llama's qkv is
    // narrower with GQA and its fc is gate|up) and its attention forward (4 h T).
    double gemm_weights = (double)gpt_kind_elems(c, P_QKVW) + (double)gpt_kind_elems(c, P_ATTPROJW) +
                          (double)gpt_kind_elems(c, P_FCW);
    s.recompute_flops = pc->recompute.full_layers * (2.0 * gemm_weights + 4.0 * h * T);
    if (pc->precision == PREC_FP8) s.peak = dev->peak_fp8 > 0 ? dev->peak_fp8 : dev->peak_bf16;
    else if (pc->precision == PREC_BF16) s.peak = dev->peak_bf16;
    else s.peak = dev->peak_bf16 / 2;  // TF32 runs at half the BF16 rate
    if (s.peak <= 0) return s;
    s.tokens_per_s_gpu = PLAN_ASSUMED_MFU * s.peak / (s.model_flops + s.recompute_flops);
    s.tokens_per_s = s.tokens_per_s_gpu * pc->world;
    s.gpu_hours_per_billion = 1e9 / s.tokens_per_s_gpu / 3600.0;
    s.hours_per_billion = s.gpu_hours_per_billion / pc->world;
    return s;
}

// ---------------------------------------------------------------------------
// the search

static int fits(const PlanConfig* pc, const PlanDevice* dev) {
    MemoryBill b = plan_bill(pc, dev);
    return plan_fits(&b, dev);
}

// The largest micro-batch allowed; *per_rank > 0 when it must divide the
// sequences each rank processes per optimizer step.
static int micro_batch_cap(const PlanConfig* pc, const PlanFixed* fx, long* per_rank) {
    *per_rank = 0;
    if (fx && fx->batch_tokens > 0) {
        *per_rank = fx->batch_tokens / ((long)pc->T * pc->world);
        return *per_rank >= 1 ? (int)(*per_rank < PLAN_MAX_MICRO_BATCH ? *per_rank : PLAN_MAX_MICRO_BATCH) : 1;
    }
    long cap = PLAN_MAX_MICRO_BATCH_TOKENS / pc->T;
    if (cap > PLAN_MAX_MICRO_BATCH) cap = PLAN_MAX_MICRO_BATCH;
    return cap < 1 ? 1 : (int)cap;
}

int plan_max_micro_batch(const PlanConfig* pc, const PlanFixed* fixed, const PlanDevice* dev) {
    PlanConfig t = *pc;
    long per_rank;
    int hi = micro_batch_cap(pc, fixed, &per_rank), lo = 0;  // lo fits (0: nothing yet)
    while (lo < hi) {  // memory grows with B
        int mid = lo + (hi - lo + 1) / 2;
        t.B = mid;
        if (fits(&t, dev)) lo = mid;
        else hi = mid - 1;
    }
    if (per_rank > 0)
        while (lo > 0 && per_rank % lo != 0) lo--;
    return lo;
}

// The cheapest recompute policy that fits at pc's micro-batch, written into
// pc; 0 if even full recompute does not fit.
static int cheapest_recompute(PlanConfig* pc, const PlanFixed* fx, const PlanDevice* dev) {
    int L = pc->model.num_layers;
    if (fx->recompute) return fits(pc, dev);
    pc->recompute = recompute_policy(RECOMPUTE_NONE, 0, L);
    if (fits(pc, dev)) return 1;
    pc->recompute = recompute_policy(RECOMPUTE_SELECTIVE, 0, L);
    if (fits(pc, dev)) return 1;
    pc->recompute = recompute_policy(RECOMPUTE_FULL, L, L);
    if (!fits(pc, dev)) return 0;
    int lo = 1, hi = L;  // memory falls as more layers are fully recomputed; hi fits
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        pc->recompute = recompute_policy(RECOMPUTE_SELECTIVE, mid, L);
        if (fits(pc, dev)) hi = mid;
        else lo = mid + 1;
    }
    pc->recompute = recompute_policy(RECOMPUTE_SELECTIVE, lo, L);
    return 1;
}

// Seconds per token of pc's step under the time model (llm/plan/cost.h); 0
// where the device has none (the CPU, an unknown GPU).
static double seconds_per_token(const PlanConfig* pc, const PlanFixed* fx, const PlanDevice* dev) {
    PlanCost k = plan_cost(pc, dev, plan_accum(pc, fx->batch_tokens));
    return k.step > 0 ? k.step / (k.accum * (double)pc->B * pc->T) : 0;
}

// The sharding a stage may use: the request's when it is fixed or the world
// is one node; else shard groups of a node, 2, 4, ... nodes and the world
// (hybrid first: least traffic across nodes). Returns the count.
#define MAX_SHARDINGS 24
static int shardings(const PlanConfig* req, const PlanFixed* fx, int z, int hybrid[], int group[]) {
    int spans_nodes = req->world > req->ranks_per_node && z > 0;
    if (!spans_nodes || fx->hybrid) {
        hybrid[0] = spans_nodes ? req->hybrid : 0;
        group[0] = req->shard_group;
        return 1;
    }
    int n = 0;
    for (int g = req->ranks_per_node; g < req->world && n < MAX_SHARDINGS - 1; g *= 2) {
        if (req->world % g != 0) continue;
        hybrid[n] = g == req->ranks_per_node;
        group[n++] = g == req->ranks_per_node ? 0 : g;
    }
    hybrid[n] = 0;
    group[n++] = 0;
    return n;
}

// The search of plan_recommend without the suggestions for when nothing fits.
static int search(const PlanConfig* req, const PlanFixed* fx, const PlanDevice* dev, PlanConfig* out) {
    PlanConfig base = *req;
    if (!fx->precision) base.precision = plan_default_precision(&req->model, dev);
    int min_b = fx->micro_batch ? req->B : 1, L = req->model.num_layers;
    // ZeRO-1 moves the bytes of ZeRO-0 (a reduce-scatter and an all-gather
    // are one all-reduce) and keeps only a shard of the optimizer state, so
    // on more than one rank it comes first; ZeRO-2 and 3 communicate more.
    // Of every stage's plans, the one with the least time per token; a later
    // stage (more communication, or more recompute where an earlier one fits
    // only with it) must be 1% faster to be chosen. Without a time model: the
    // first stage in this order where anything fits.
    PlanConfig one = base;
    one.zero_stage = 1;
    int order[4] = {0, 1, 2, 3};
    if (plan_shard_world(&one) > 1) order[0] = 1, order[1] = 0;
    int found = 0;
    double best = 0;
    for (int i = 0; i < 4; i++) {
        int z = order[i];
        if (fx->zero_stage && z != req->zero_stage) continue;
        // Of the shardings, and of the cheapest recompute that fits and full
        // recompute, each at its largest micro-batch, the plan with the least
        // time per token, by 1% or more.
        int hy[MAX_SHARDINGS], gr[MAX_SHARDINGS];
        int ns = shardings(req, fx, z, hy, gr);
        for (int s = 0; s < ns; s++) {
            PlanConfig pc = base;
            pc.zero_stage = z;
            pc.hybrid = hy[s];
            pc.shard_group = gr[s];
            pc.B = min_b;
            if (!cheapest_recompute(&pc, fx, dev)) continue;
            RecomputePolicy policies[2] = {pc.recompute, recompute_policy(RECOMPUTE_FULL, L, L)};
            int np = fx->recompute || pc.recompute.full_layers == L ? 1 : 2;
            for (int p = 0; p < np; p++) {
                PlanConfig c = pc;
                c.recompute = policies[p];
                if (!fx->micro_batch) {
                    int b = plan_max_micro_batch(&c, fx, dev);
                    if (b < 1) continue;  // only possible when B must divide the batch
                    c.B = b;
                }
                double t = seconds_per_token(&c, fx, dev);
                if (!found || (t > 0 && t < best * 0.99)) {  // 1% faster to be worth a larger group
                    *out = c;
                    best = t;
                }
                found = 1;
                if (t <= 0) return 1;  // no time model: the first that fits
            }
        }
    }
    return found;
}

// The configuration with the least memory that the fixed choices allow:
// micro-batch 1, full recompute, and the ZeRO stage (and sharding) whose
// bill is smallest (ZeRO-3 over all ranks, except on very few ranks).
static PlanConfig least_memory(const PlanConfig* req, const PlanFixed* fx, const PlanDevice* dev) {
    PlanConfig best = *req;
    if (!fx->precision) best.precision = plan_default_precision(&req->model, dev);
    if (!fx->micro_batch) best.B = 1;
    if (!fx->recompute) best.recompute = recompute_policy(RECOMPUTE_FULL, 0, req->model.num_layers);
    size_t least = (size_t)-1;
    PlanConfig pc = best;
    for (int z = 0; z <= 3; z++) {
        if (fx->zero_stage && z != req->zero_stage) continue;
        for (int h = 0; h <= 1; h++) {
            if (h && !(req->world > req->ranks_per_node && z > 0)) continue;
            if (fx->hybrid && h != req->hybrid && req->world > req->ranks_per_node) continue;
            pc.zero_stage = z;
            pc.hybrid = h;
            size_t total = plan_bill(&pc, dev).total;
            if (total < least) {
                least = total;
                best = pc;
            }
        }
    }
    return best;
}

PlanResult plan_recommend(const PlanConfig* asked, const PlanFixed* fixed, const PlanDevice* dev) {
    PlanResult r;
    memset(&r, 0, sizeof r);
    PlanConfig req = *asked;
    const PlanConfig* request = &req;
    r.fits = search(request, fixed, dev, &r.config);
    // --grad-dtype auto: FP32 gradients where some plan fits with them, else
    // BF16 ones (2 bytes per parameter less, and no scratch).
    if (!r.fits && !fixed->grad_dtype && !req.grad_bf16) {
        req.grad_bf16 = 1;
        r.fits = search(request, fixed, dev, &r.config);
    }
    if (!r.fits) {
        r.config = least_memory(request, fixed, dev);
        // What would fit with nothing fixed but the precision.
        PlanFixed keep_precision;
        memset(&keep_precision, 0, sizeof keep_precision);
        keep_precision.precision = 1;
        PlanConfig base = *request;
        base.precision = r.config.precision;
        // More ranks: the model state shrinks with the world, the activations do not.
        PlanConfig w = base;
        w.world = w.world < w.ranks_per_node ? 2 * w.world : w.world + w.ranks_per_node;
        for (; w.world <= 65536; w.world *= 2) {
            PlanConfig l = least_memory(&w, &keep_precision, dev);
            if (fits(&l, dev)) {
                r.fits_with_world = w.world;
                break;
            }
        }
        // Shorter sequences at this world size (the position embedding
        // follows the sequence when it did before).
        for (int T = base.T / 2; T >= 64 && !r.fits_with_seq_len; T /= 2) {
            PlanConfig t = base;
            t.T = T;
            if (request->model.max_seq_len == request->T) t.model.max_seq_len = T;
            PlanConfig l = least_memory(&t, &keep_precision, dev);
            if (fits(&l, dev)) r.fits_with_seq_len = T;
        }
        // Without the explicit choices.
        if (fixed->precision || fixed->micro_batch || fixed->recompute || fixed->zero_stage || fixed->batch_tokens) {
            PlanFixed none;
            memset(&none, 0, sizeof none);
            r.fits_when_unfixed = search(request, &none, dev, &r.unfixed);
        }
    }
    r.bill = plan_bill(&r.config, dev);
    r.speed = plan_speed(&r.config, dev);
    return r;
}

// ---------------------------------------------------------------------------
// the bill of a live model

PlanConfig plan_config_of_model(const GPT* m) {
    PlanConfig pc;
    memset(&pc, 0, sizeof pc);
    pc.model = m->config;
    pc.precision = m->fp8 ? PREC_FP8 : m->dtype == DTYPE_F32 ? PREC_FP32 : PREC_BF16;
    pc.adam_dtype = m->adam_dtype;
    if (m->fp8) {
        pc.fp8_history = m->fp8->history ? m->fp8->opt.history : 0;
        pc.fp8_recipe = m->fp8->opt.recipe;
        pc.fp8_skip = m->fp8->skip;
    }
    pc.B = m->B;
    pc.T = m->T;
    pc.recompute = m->acts.recompute;
    // The chunk count that gives the model's chunk rows back (head_chunk_rows).
    pc.head_chunks = (int)ceil_div((size_t)m->B * m->T, (size_t)m->acts.head_rows);
    pc.zero_stage = m->zero_stage;
    pc.zero3_prefetch = m->param_layer_slots - 1;
    pc.grad_bf16 = m->grad_round_bf16 ? 2 : m->grad_dtype == DTYPE_BF16 ? 1 : 0;
    pc.world = m->world;
    pc.ranks_per_node = m->world;
    return pc;
}

PlanDevice plan_device_of_backend(const Backend* be) {
    PlanDevice d = plan_device_cpu(0, omp_get_max_threads());
    if (strcmp(be->name, "cpu") != 0) {
        d.is_gpu = 1;
        snprintf(d.name, sizeof d.name, "%s", be->name);
    }
    d.fp8_support = be->fp8_support;
    return d;
}

MemoryBill plan_bill_of_model(const GPT* m) {
    PlanConfig pc = plan_config_of_model(m);
    PlanDevice d = plan_device_of_backend(m->be);
    return plan_bill(&pc, &d);
}
