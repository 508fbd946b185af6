// cost.c: the step-time model (cost.h): the GPUs' bandwidth table, compute
// time by precision, the memory-bound kernels' bytes op by op, and the
// collectives' bytes, busy time and exposure under the schedule.
#include "llm/plan/cost.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/fp8/fp8.h"
#include "llm/plan/mfu.h"

// ---------------------------------------------------------------------------
// links

// GB/s (1e9 bytes/s). HBM: NVIDIA's datasheets (H100 SXM 3.35 TB/s, H200 4.8,
// B200 8, A100 80GB SXM 2.04). NVLink per GPU and direction: half the
// bidirectional figure (NVLink 4: 900 GB/s on H100/H200, NVLink 5: 1.8 TB/s
// on B200, NVLink 3: 600 GB/s on A100). Network per GPU: the AWS instance's
// EFA over its 8 GPUs (p5.48xlarge, p5en and p6-b200.48xlarge: 3,200 Gbps =
// 400 GB/s per node; p4d: 400 Gbps). llm/plan/README.md cites each.
static const struct {
    const char* name;
    double hbm, nvlink, network;
} LINKS[] = {
    {"H100", 3350, 450, 50},
    {"H200", 4800, 450, 50},
    {"B200", 8000, 900, 50},
    {"A100", 2039, 300, 6.25},
};

static double env_gbs(const char* var, double dflt) {
    const char* v = getenv(var);
    if (!v || !*v) return dflt;
    char* end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || !(x > 0) || !isfinite(x)) fatal("%s=%s: expected a bandwidth in GB/s, > 0", var, v);
    return x;
}

PlanLinks plan_links_of(const PlanDevice* dev) {
    PlanLinks l = {0, 0, 0};
    for (size_t i = 0; i < sizeof LINKS / sizeof LINKS[0]; i++)
        if (!strcmp(dev->name, LINKS[i].name)) {
            l.hbm = LINKS[i].hbm, l.nvlink = LINKS[i].nvlink, l.network = LINKS[i].network;
            break;
        }
    l.hbm = env_gbs("TRAIN_GPT_PLAN_HBM_GBS", l.hbm) * 1e9;
    l.nvlink = env_gbs("TRAIN_GPT_PLAN_NVLINK_GBS", l.nvlink) * 1e9;
    l.network = env_gbs("TRAIN_GPT_PLAN_NET_GBS", l.network) * 1e9;
    return l;
}

const char* mem_op_name(MemOp op) {
    static const char* names[NUM_MB_OPS] = {"norms",    "gelu/swiglu", "residual adds", "bias grads",
                                            "rope",     "embeddings",  "loss",          "fp8 casts",
                                            "recompute", "grad accum", "adamw"};
    return op >= 0 && op < NUM_MB_OPS ? names[op] : "?";
}
const char* coll_name(CollKind k) {
    return k == COLL_ALL_GATHER ? "all-gather" : k == COLL_REDUCE_SCATTER ? "reduce-scatter" : "all-reduce";
}
const char* link_name(LinkKind k) { return k == LINK_NVLINK ? "nvlink" : "network"; }

void plan_cost_print_bytes(FILE* f, const PlanCost* k) {
    double total = 0;
    for (int op = 0; op < NUM_MB_OPS; op++) {
        if (k->mem_bytes[op] <= 0) continue;
        total += k->mem_bytes[op];
        fprintf(f, "  %-17s %12.3f %10.3f\n", mem_op_name((MemOp)op), k->mem_bytes[op] / 1e9,
                k->mem_bytes[op] / (PLAN_HBM_EFF * k->links.hbm) * 1e3);
    }
    fprintf(f, "  %-17s %12.3f %10.3f\n", "= total", total / 1e9, k->t_mem * 1e3);
}

int plan_accum(const PlanConfig* pc, long batch_tokens) {
    long per = (long)pc->B * pc->T * pc->world;
    if (batch_tokens <= 0 || per <= 0) return 1;
    long a = (batch_tokens + per - 1) / per;
    return a < 1 ? 1 : (int)a;
}

// ---------------------------------------------------------------------------
// the model

// Widths (elements per token) of one layer's GEMMs: input K and output N.
typedef struct {
    double k[4], n[4], w[4];  // qkv, attproj, fc, fcproj; w = weight elements
} LayerGemms;

static LayerGemms layer_gemms(const GPTConfig* c) {
    double C = c->channels;
    LayerGemms g;
    ParamKind kinds[4] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};
    for (int i = 0; i < 4; i++) g.w[i] = (double)gpt_kind_elems(c, kinds[i]);
    double hidden = g.w[3] / C;  // MLP width H (fcproj is C x H)
    g.k[0] = C, g.n[0] = g.w[0] / C;
    g.k[1] = g.w[1] / C, g.n[1] = C;
    g.k[2] = C, g.n[2] = g.w[2] / C;  // gate|up for SwiGLU: 2H
    g.k[3] = hidden, g.n[3] = C;
    return g;
}

// Ring collectives: each of m ranks sends (m-1)/m of the buffer per pass.
static double ring(double m) { return m > 1 ? (m - 1) / m : 0; }

// Seconds a phase's communication is exposed: per link (links run in
// parallel) what exceeds the compute it hides under, plus `tail` of it that
// nothing can hide (the last unit's reduction, the first unit's gather).
static double exposed_of(const double busy[NUM_LINKS], double hide, double tail) {
    double worst = 0;
    for (int l = 0; l < NUM_LINKS; l++) {
        if (busy[l] <= 0) continue;
        double e = fmax(0, busy[l] - hide) + busy[l] * tail;
        if (e > worst) worst = e;
    }
    return worst;
}

PlanCost plan_cost(const PlanConfig* pc, const PlanDevice* dev, int accum) {
    PlanCost r;
    memset(&r, 0, sizeof r);
    const GPTConfig* c = &pc->model;
    r.links = plan_links_of(dev);
    r.accum = accum < 1 ? 1 : accum;
    double peak16 = pc->precision == PREC_FP32 ? dev->peak_bf16 / 2 : dev->peak_bf16;  // TF32 at half rate
    double peak8 = dev->peak_fp8 > 0 ? dev->peak_fp8 : peak16;
    if (!dev->is_gpu || peak16 <= 0 || r.links.hbm <= 0) return r;  // no estimate

    const int L = c->num_layers, U = L + 2, llama = c->arch == ARCH_LLAMA;
    const double tok = (double)pc->B * pc->T, T = pc->T, C = c->channels;
    const double a = pc->precision == PREC_FP32 ? 4 : 2;  // activation, parameter and gradient bytes
    const double HS = (double)(c->channels / c->num_heads), h = c->num_heads * HS;
    const double Vp = c->padded_vocab_size;
    LayerGemms g = layer_gemms(c);
    const double H = g.k[3];
    const int fp8 = pc->precision == PREC_FP8, block = fp8_recipe_is_block((Fp8Recipe)pc->fp8_recipe);
    int full = pc->recompute.mode == RECOMPUTE_FULL ? L : pc->recompute.full_layers;
    if (full > L) full = L;
    int selective = pc->recompute.mode == RECOMPUTE_SELECTIVE ? L - full : 0;

    // GEMMs: forward 2, backward 4 FLOPs per weight and token; a fully
    // recomputed layer runs qkv, attproj and fc forward again. The LM head stays 16-bit.
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 4; i++) {
            double flops = tok * g.w[i] * (6.0 + (l < full && i < 3 ? 2.0 : 0.0));
            int in_fp8 = fp8 && !(pc->fp8_skip && (pc->fp8_skip[l] & (1 << i)));
            if (in_fp8) r.gemm_flops_fp8 += flops;
            else r.gemm_flops_bf16 += flops;
        }
    r.gemm_flops_bf16 += tok * 6.0 * Vp * C;
    // Attention: 4 h T per token and layer forward without the mask, x3 with
    // backward; the causal mask halves what a flash kernel computes.
    r.attn_flops = tok * (L * 12.0 * h * T + full * 4.0 * h * T) / 2;
    r.t_gemm = r.gemm_flops_bf16 / (PLAN_GEMM_EFF * peak16) + r.gemm_flops_fp8 / (PLAN_GEMM_EFF_FP8 * peak8);
    r.t_attn = r.attn_flops / (PLAN_ATTN_EFF * dev->peak_bf16);

    // Memory-bound ops per micro-step, bytes per token (forward + backward).
    // A norm reads x and writes y; its backward reads x and dy and adds into dx: 6 a C.
    double mb[NUM_MB_OPS] = {0};
    mb[MB_NORMS] = (2.0 * L + 1) * 6 * a * C;
    double act_fwd = llama ? 3 * a * H : 2 * a * H;  // SwiGLU reads gate and up, writes H; GELU reads and writes H
    double act_bwd = llama ? 5 * a * H : 3 * a * H;
    mb[MB_ACT] = L * (act_fwd + act_bwd);
    mb[MB_RESIDUAL] = L * 2 * 3 * a * C;  // read two, write one; their gradients flow through the norms' backward
    if (gpt_has_kind(c, P_QKVB)) mb[MB_BIAS_GRAD] = L * a * (g.n[0] + g.n[1] + g.n[2] + g.n[3]);
    double rope_w = llama ? (c->num_heads + c->num_kv_heads) * HS : 0;
    mb[MB_ROPE] = L * 4 * a * rope_w;
    mb[MB_EMBED] = 5 * a * C;
    mb[MB_LOSS] = 3 * a * Vp;  // max and sum, then the gradient written over the logits
    double casts_per_microstep = 0;
    if (fp8 && !block) {
        double wcopies = dev->fp8_support == FP8_TN_ONLY ? 2 : 1;  // Hopper: also the transpose
        for (int l = 0; l < L; l++)
            for (int i = 0; i < 4; i++) {
                if (pc->fp8_skip && (pc->fp8_skip[l] & (1 << i))) continue;
                mb[MB_CASTS] += (a + 1) * (g.k[i] + g.n[i]);  // the input forward, the output gradient backward
                casts_per_microstep += (a + wcopies) * g.w[i];  // the weight (and its transpose), every micro-step
            }
    }
    mb[MB_RECOMPUTE] = selective * (2 * 2 * a * C + act_fwd) + full * (2 * 2 * a * C + act_fwd + 3 * a * C + 2 * a * rope_w);
    for (int op = 0; op < NUM_MB_OPS; op++) r.mem_bytes[op] = mb[op] * tok * r.accum;
    r.mem_bytes[MB_CASTS] += casts_per_microstep * r.accum;

    // The optimizer and the gradients' accumulation. FP32 gradients in a
    // 16-bit run (--grad-dtype, llm/parallel/README.md) cost every micro-step
    // the scratch's zeroing (a) and its add into the FP32 unit (read a, read
    // and write 4), at ZeRO 2/3 the FP32 staging slot's zeroing (4) too; they
    // are summed across ranks in 4 bytes and read by AdamW in 4.
    double P = (double)gpt_num_params(c);
    int n = plan_shard_world(pc);
    double shard = pc->zero_stage >= 1 ? P / n : P;
    // grad_bf16 0 is --grad-dtype auto's FP32 (or an explicit fp32), which auto
    // keeps for steps that accumulate or reduce: one micro-step on one rank is BF16.
    const int grad_f32 = pc->precision != PREC_FP32 && pc->grad_bf16 == 0 && (r.accum > 1 || pc->world > 1);
    const double gb = grad_f32 ? 4 : a;                       // gradient bytes: accumulated, reduced, read by AdamW
    const double mom = pc->adam_dtype == DTYPE_BF16 ? 2 : 4;  // AdamW moment bytes (--adam-dtype)
    if (pc->zero_stage >= 2) r.mem_bytes[MB_GRAD_ACCUM] = (r.accum - 1) * 3 * gb * shard;
    if (grad_f32) r.mem_bytes[MB_GRAD_ACCUM] += r.accum * P * (a + a + 8 + (pc->zero_stage >= 2 ? 4 : 0));
    // FP32 runs: read the gradient, read and write the weight, m and v. 16-bit
    // runs: the gradient read and zeroed, the FP32 master read and written, m
    // and v, the 16-bit weight written.
    r.mem_bytes[MB_ADAMW] = shard * (pc->precision == PREC_FP32 ? 4 + 8 + 4 * mom : gb + gb + 8 + 4 * mom + a);
    double hbm = PLAN_HBM_EFF * r.links.hbm, micro_mem = 0;
    for (int op = 0; op < NUM_MB_OPS; op++) {
        r.t_mem += r.mem_bytes[op] / hbm;
        if (op != MB_GRAD_ACCUM && op != MB_ADAMW) micro_mem += r.mem_bytes[op] / r.accum;
    }
    r.t_micro = r.t_gemm + r.t_attn + micro_mem / hbm;
    r.t_optimizer = (r.mem_bytes[MB_GRAD_ACCUM] + r.mem_bytes[MB_ADAMW]) / hbm;

    // Communication. A group inside a node runs over NVLink. A ring over a
    // group that spans nodes holds all of each node's ranks, whose channels
    // leave the node over all its network cards: its bus bandwidth is the
    // node's network (the per-GPU figure x ranks per node), capped by NVLink.
    // The replicas of a shard (hybrid, shard groups) all-reduce rail by rail,
    // one rank per node in each ring: the per-GPU network figure.
    int world = pc->world, rpn = pc->ranks_per_node < world ? pc->ranks_per_node : world;
    double reps = (double)world / n;
    double nv = PLAN_LINK_EFF * r.links.nvlink, node_net = fmin(nv, PLAN_LINK_EFF * r.links.network * rpn);
    LinkKind lg = n <= rpn ? LINK_NVLINK : LINK_NETWORK, lw = world <= rpn ? LINK_NVLINK : LINK_NETWORK, lr = lw;
    double bw_g = n <= rpn ? nv : node_net, bw_w = world <= rpn ? nv : node_net;
    double bw_r = world <= rpn ? nv : PLAN_LINK_EFF * r.links.network;
    double Pb = P * a, Pg = P * gb;  // on the wire: parameters in the model's dtype, gradients in theirs
    double layer_b = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++)
        if (param_kind_is_per_layer((ParamKind)k)) layer_b += (double)gpt_kind_elems(c, (ParamKind)k) * a;
    double other_b = Pb - L * layer_b;
    // Busy seconds per link: under each micro-step's forward and backward,
    // the last micro-step's extra backward work, and after the optimizer.
    double fwd[NUM_LINKS] = {0}, bwd[NUM_LINKS] = {0}, last[NUM_LINKS] = {0}, post[NUM_LINKS] = {0};
#define BILL(kind, link, bw, bytes, times, phase)                              \
    do {                                                                       \
        double b_ = (bytes);                                                   \
        if (b_ <= 0 || (bw) <= 0) break;                                       \
        r.comm_bytes[kind][link] += b_ * (times);                              \
        r.comm_time[kind][link] += b_ / (bw) * (times);                        \
        phase[link] += b_ / (bw);                                              \
    } while (0)
    int K = pc->zero3_prefetch > 1 ? pc->zero3_prefetch : 1;
    switch (pc->zero_stage) {
    case 0: BILL(COLL_ALL_REDUCE, lw, bw_w, 2 * Pg * ring(world), 1, last); break;
    case 1:
    case 2:
        if (pc->zero_stage == 1) BILL(COLL_REDUCE_SCATTER, lg, bw_g, Pg * ring(n), 1, last);
        else BILL(COLL_REDUCE_SCATTER, lg, bw_g, Pg * ring(n), r.accum, bwd);
        BILL(COLL_ALL_REDUCE, lr, bw_r, 2 * Pg / n * ring(reps), 1, last);
        BILL(COLL_ALL_GATHER, lg, bw_g, Pb * ring(n), 1, post);
        break;
    default: {
        double regathered = 2.0 * L - 2.0 * (K + 1);  // layers per micro-step beyond the resident slots
        if (regathered < 0) regathered = 0;
        BILL(COLL_ALL_GATHER, lg, bw_g, (other_b + regathered / 2 * layer_b) * ring(n), r.accum, fwd);
        BILL(COLL_ALL_GATHER, lg, bw_g, regathered / 2 * layer_b * ring(n), r.accum, bwd);
        BILL(COLL_REDUCE_SCATTER, lg, bw_g, Pg * ring(n), r.accum, bwd);
        BILL(COLL_ALL_REDUCE, lr, bw_r, 2 * Pg / n * ring(reps), 1, last);
        break;
    }
    }
#undef BILL
    // Forward: a third of the micro-step's compute, backward the rest.
    double t_fwd = r.t_micro / 3, t_bwd = r.t_micro - t_fwd;
    double last_bwd[NUM_LINKS];
    for (int l = 0; l < NUM_LINKS; l++) last_bwd[l] = bwd[l] + last[l];
    r.exposed = r.accum * exposed_of(fwd, t_fwd, 0) + (r.accum - 1) * exposed_of(bwd, t_bwd, 1.0 / U) +
                exposed_of(last_bwd, t_bwd, 1.0 / U) + exposed_of(post, t_fwd, 1.0 / U);
    r.step = r.accum * r.t_micro + r.t_optimizer + r.exposed;
    r.tokens_per_s_gpu = r.accum * tok / r.step;
    double peak = fp8 ? peak8 : peak16;
    r.mfu = r.tokens_per_s_gpu * flops_per_token(c, pc->T) / peak;
    return r;
}
