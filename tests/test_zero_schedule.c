// test_zero_schedule.c: ZeRO-3's communication schedule (llm/parallel/zero.c),
// recorded and checked over several optimizer steps of a tiny model.
//
// The test wraps the three layers ZeRO-3 talks to and logs, in program order,
// every collective (its kind, group and unit, read back from the buffers it
// names), every unit acquire and release (the model's hooks), and every
// GEMM and embedding kernel (the backend), attributed to the unit whose
// weights it reads. Then, for --zero3-prefetch K = 1 and 2, both
// architectures (Llama with an untied LM head in the final unit):
//   - every acquire finds its unit in the slot it returns, and no gathered
//     unit is replaced before it is used (no wasted gather);
//   - each steady micro-step gathers 2L - 2(K + 1) layers and nothing else
//     (2L - 4 at K = 1; gathering before every use takes 2L); the first of a
//     later step, whose gathered units the update made stale, gathers
//     2L - (K + 1) layers, the embeddings and the final unit;
//   - each gather is queued before the acquire K acquires earlier, or before
//     that unit's first GEMM (or embedding lookup): it overlaps that unit's
//     compute (the first K uses after an update excepted: their parameters
//     exist from the update on, which gathers them);
//   - one reduce-scatter per unit per micro-step; reductions across nodes
//     only on an optimizer step's last micro-step, one per unit;
//   - the weights after training are the same bits at K = 1 and K = 2, also
//     with an evaluation forward between steps.
// Runs as one process in the suite and under `mpirun -np 4` with
// TRAIN_GPT_RANKS_PER_NODE=2 in tests/test_zero.sh (hybrid sharding: two
// nodes of two ranks), where the cross-node reductions appear.
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/model/model.h"
#include "llm/parallel/comm.h"
#include "llm/parallel/zero.h"
#include "llm/util/rng.h"
#include "tests/testlib_mpi.h"

typedef enum { LOG_GATHER, LOG_REDUCE, LOG_ALL_REDUCE, LOG_ACQUIRE, LOG_RELEASE, LOG_COMPUTE, LOG_MICRO, LOG_UPDATE } LogKind;

typedef struct {
    LogKind kind;
    int unit;      // the unit concerned (-1: unknown)
    int slot;      // gathers and acquires: the staging slot
    int group;     // collectives
    int backward;  // acquires
    int step, micro;
} LogEntry;

static Comm* comm;
static Backend* be;
static GPT* model;  // the model being logged
static LogEntry* log_entries;
static int log_len, log_cap, cur_step, cur_micro;

static void log_add(LogKind kind, int unit, int slot, int group, int backward) {
    if (log_len == log_cap) {
        log_cap = log_cap ? 2 * log_cap : 4096;
        log_entries = (LogEntry*)realloc(log_entries, (size_t)log_cap * sizeof(LogEntry));
    }
    LogEntry e = {kind, unit, slot, group, backward, cur_step, cur_micro};
    log_entries[log_len++] = e;
}

// ---- reading units back from buffers -----------------------------------------

static size_t es(void) { return dtype_size(model->dtype); }

// The staging slot of ZeRO-3's parameters that p lies in, or -1.
static int param_slot_at(const void* p) {
    const char* c = (const char*)p;
    for (int s = STAGING_LAYER_A + model->param_layer_slots - 1; s >= 0; s--) {
        const char* base = (const char*)gpt_staging(model, model->params, (StagingSlot)s);
        if (c >= base && c < (const char*)model->params + model->params_size * es()) return s;
    }
    return -1;
}

// The unit whose shard (parameters or gradients) starts at p, or -1.
static int unit_of_shard(const void* base, const void* p) {
    const ParamLayout* pl = &model->layout;
    for (int u = 0; u < pl->num_units; u++)
        if ((const char*)base + pl->unit_begin[u] / (size_t)model->world * es() == (const char*)p) return u;
    return -1;
}

// The unit last gathered into slot s before log entry `before`.
static int unit_in_slot(int s, int before) {
    for (int i = before - 1; i >= 0; i--)
        if (log_entries[i].kind == LOG_GATHER && log_entries[i].slot == s) return log_entries[i].unit;
    return -1;
}

// ---- the recording wrappers ---------------------------------------------------

static CommDevice* real_dev;
static CommDevice rec_dev;

static void rec_reduce_scatter(CommDevice* d, CommGroup g, void* buf, size_t chunk, DType t, void* acc) {
    log_add(LOG_REDUCE, acc ? unit_of_shard(model->grads, acc) : -1, -1, g, 0);
    real_dev->reduce_scatter(real_dev, g, buf, chunk, t, acc);
}
static void rec_all_reduce(CommDevice* d, CommGroup g, void* buf, size_t n, DType t) {
    log_add(LOG_ALL_REDUCE, unit_of_shard(model->grads, buf), -1, g, 0);
    real_dev->all_reduce(real_dev, g, buf, n, t);
}
static void rec_all_reduce_max(CommDevice* d, CommGroup g, float* buf, size_t n) { real_dev->all_reduce_max(real_dev, g, buf, n); }
static void rec_all_gather(CommDevice* d, CommGroup g, const void* mine, void* buf, size_t chunk, DType t) {
    log_add(LOG_GATHER, unit_of_shard(model->params, mine), param_slot_at(buf), g, 0);
    real_dev->all_gather(real_dev, g, mine, buf, chunk, t);
}
static void rec_wait_compute(CommDevice* d) { real_dev->wait_compute(real_dev); }
static void rec_record(CommDevice* d, int ev) { real_dev->record(real_dev, ev); }
static void rec_compute_wait(CommDevice* d, int ev) { real_dev->compute_wait(real_dev, ev); }
static void rec_compute_wait_all(CommDevice* d) { real_dev->compute_wait_all(real_dev); }
static void rec_destroy(CommDevice* d) { real_dev->destroy(real_dev); }

static void install_comm_recorder(void) {
    real_dev = comm->dev;
    rec_dev = *real_dev;
    rec_dev.reduce_scatter = rec_reduce_scatter;
    rec_dev.all_reduce = rec_all_reduce;
    rec_dev.all_reduce_max = rec_all_reduce_max;
    rec_dev.all_gather = rec_all_gather;
    rec_dev.wait_compute = rec_wait_compute;
    rec_dev.record = rec_record;
    rec_dev.compute_wait = rec_compute_wait;
    rec_dev.compute_wait_all = rec_compute_wait_all;
    rec_dev.destroy = rec_destroy;
    comm->dev = &rec_dev;
}

static const GPTHooks* zero_hooks;
static GPTHooks rec_hooks;

static void* rec_unit_params(void* ctx, GPT* m, int u, int backward) {
    // Logged when it returns: after any gather it issued.
    void* p = zero_hooks->unit_params(zero_hooks->ctx, m, u, backward);
    log_add(LOG_ACQUIRE, u, param_slot_at(p), -1, backward);
    return p;
}
static void* rec_unit_grads(void* ctx, GPT* m, int u) { return zero_hooks->unit_grads(zero_hooks->ctx, m, u); }
static void rec_backward_done(void* ctx, GPT* m, int u) { zero_hooks->unit_backward_done(zero_hooks->ctx, m, u); }
static void rec_unit_release(void* ctx, GPT* m, int u, int backward) {
    log_add(LOG_RELEASE, u, -1, -1, backward);
    zero_hooks->unit_release(zero_hooks->ctx, m, u, backward);
}

static void install_hook_recorder(GPT* m) {
    zero_hooks = m->hooks;
    rec_hooks = *zero_hooks;
    rec_hooks.unit_params = rec_unit_params;
    rec_hooks.unit_grads = rec_unit_grads;
    rec_hooks.unit_backward_done = rec_backward_done;
    rec_hooks.unit_release = rec_unit_release;
    m->hooks = &rec_hooks;
}

// Compute that reads a weight in staging: logged with the unit in its slot.
static Backend real_be;

static void log_compute(const void* weight) {
    int s = param_slot_at(weight);
    if (s >= 0) log_add(LOG_COMPUTE, unit_in_slot(s, log_len), s, -1, 0);
}
static void rec_matmul_forward(Backend* b, void* out, void* pre_gelu, const void* inp, const void* weight,
                               const void* bias, int N, int C, int OC) {
    log_compute(weight);
    real_be.matmul_forward(b, out, pre_gelu, inp, weight, bias, N, C, OC);
}
static void rec_matmul_backward(Backend* b, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                const void* weight, int N, int C, int OC) {
    log_compute(weight);
    real_be.matmul_backward(b, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
static void rec_encoder_forward(Backend* b, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                                int T, int C) {
    log_compute(wte);
    real_be.encoder_forward(b, out, tokens, wte, wpe, B, T, C);
}

static void install_compute_recorder(void) {
    real_be = *be;
    be->matmul_forward = rec_matmul_forward;
    be->matmul_backward = rec_matmul_backward;
    be->encoder_forward = rec_encoder_forward;
}
static void remove_compute_recorder(void) { *be = real_be; }

// ---- the run --------------------------------------------------------------------

enum { B = 2, T = 8, STEPS = 4, ACCUM = 3 };
static const GPTConfig GPT2_CFG = {.max_seq_len = 16, .vocab_size = 101, .num_layers = 5, .num_heads = 2, .channels = 32};
static const GPTConfig LLAMA_CFG = {.max_seq_len = 16, .vocab_size = 101, .num_layers = 5, .num_heads = 4, .channels = 32,
                                    .arch = ARCH_LLAMA, .num_kv_heads = 2, .mlp_hidden = 40, .rope_theta = 10000.0f};

static void load_batch(GPT* m, uint64_t key) {
    int32_t tok[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) tok[i] = (int32_t)(rng_u64(rng_key(key, (uint64_t)comm->rank, 5), (uint64_t)i) % 101);
    be->to_device(be, m->inputs, tok, (size_t)B * T * sizeof(int32_t));
    be->to_device(be, m->targets, tok + B * T, (size_t)B * T * sizeof(int32_t));
}

// Trains STEPS steps of ACCUM micro-steps at ZeRO-3 with --zero3-prefetch K,
// logging everything (an evaluation forward after step `eval_after`, -1:
// none), and leaves the whole model as FP32 in `weights`.
static void run(const GPTConfig* cfg, int K, int eval_after, float* weights) {
    GPTConfig c = *cfg;
    gpt_config_finish(&c);
    GPT m;
    Zero z;
    gpt_create_staged(&m, &c, be, B, T, comm->group[COMM_SHARD].size, comm->group[COMM_SHARD].rank, 3, NULL, K + 1);
    zero_init(&z, &m, comm);
    gpt_init_random(&m, 7);
    model = &m;
    log_len = 0;
    install_hook_recorder(&m);
    install_compute_recorder();
    install_comm_recorder();
    for (int step = 0; step < STEPS; step++) {
        cur_step = step;
        zero_begin_step(&z);
        for (int a = 0; a < ACCUM; a++) {
            cur_micro = a;
            log_add(LOG_MICRO, -1, -1, -1, 0);
            load_batch(&m, 100 * (uint64_t)step + (uint64_t)a);
            zero_begin_micro_step(&z, a, ACCUM);
            gpt_forward(&m, m.inputs, m.targets, B, T, 1.0f / (B * T * ACCUM));
            gpt_accumulate_loss(&m, B, T, a > 0);
            gpt_backward(&m, m.inputs, B, T);
        }
        double loss, norm;
        zero_step_totals(&z, &loss, &norm);
        cur_micro = ACCUM;
        log_add(LOG_UPDATE, -1, -1, -1, 0);
        zero_update(&z, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 99 + (uint64_t)step);
        if (step == eval_after) {
            load_batch(&m, 777);
            gpt_forward(&m, m.inputs, m.targets, B, T, 0.0f);
        }
    }
    comm->dev = real_dev;
    remove_compute_recorder();
    zero_gather_params_f32(&z, weights);
    zero_free(&z);
    gpt_free(&m);
}

// Whether log entry i lies in a steady micro-step (not the first of a step).
static int steady(const LogEntry* e) { return e->micro >= 1 && e->micro < ACCUM; }

// The checks on the log of run(): see the top of the file.
static void check_log(const GPTConfig* cfg, int K, int eval_after) {
    int L = cfg->num_layers, U = L + 2, F = U - 1;
    int hybrid = comm->group[COMM_REPLICA].size > 1;
    int gathers[STEPS][ACCUM + 1], layer_gathers[STEPS][ACCUM + 1];
    int reduces[STEPS][ACCUM + 1], cross[STEPS][ACCUM + 1];
    memset(gathers, 0, sizeof gathers);
    memset(layer_gathers, 0, sizeof layer_gathers);
    memset(reduces, 0, sizeof reduces);
    memset(cross, 0, sizeof cross);
    int wasted = 0, wrong = 0, late = 0, unknown = 0;
    char first_problem[200] = "";
    int since_update = 1 << 20;  // acquires since the last update
    int prev_acq[4] = {-1, -1, -1, -1};  // log indices of the latest acquires, newest first
    for (int i = 0; i < log_len; i++) {
        const LogEntry* e = &log_entries[i];
        // Gathers and reductions count toward the micro-step they serve: an
        // update's gathers toward the next step's first.
        int st = e->step, mi = e->micro;
        if (mi == ACCUM) st++, mi = 0;
        if (e->kind == LOG_GATHER) {
            if (e->unit < 0 || e->slot < 0) unknown++;
            if (st < STEPS) gathers[st][mi]++, layer_gathers[st][mi] += e->unit >= 1 && e->unit <= L;
            // The gathered unit is acquired from this slot before the slot is gathered into again.
            int used = 0;
            for (int j = i + 1; j < log_len; j++) {
                const LogEntry* f = &log_entries[j];
                if (f->kind == LOG_GATHER && f->slot == e->slot) break;
                if (f->kind == LOG_ACQUIRE && f->unit == e->unit) {
                    used = 1;
                    break;
                }
            }
            // Gathers that an evaluation or the end of training leave unused are not waste.
            int tail = 1;
            for (int j = i + 1; j < log_len; j++)
                if (log_entries[j].kind == LOG_MICRO) tail = 0;
            if (!used && !tail && !wasted++)
                snprintf(first_problem, sizeof first_problem, "unit %d gathered into slot %d (step %d micro %d) and replaced unused",
                         e->unit, e->slot, e->step, e->micro);
        } else if (e->kind == LOG_REDUCE) {
            if (e->unit < 0) unknown++;
            reduces[e->step][e->micro]++;
        } else if (e->kind == LOG_ALL_REDUCE) {
            if (e->group == COMM_REPLICA) cross[e->step][e->micro]++;
        } else if (e->kind == LOG_UPDATE) {
            since_update = 0;
        } else if (e->kind == LOG_ACQUIRE) {
            if (unit_in_slot(e->slot, i) != e->unit && !wrong++)
                snprintf(first_problem, sizeof first_problem, "acquire of unit %d got slot %d holding unit %d", e->unit,
                         e->slot, unit_in_slot(e->slot, i));
            // The gather that filled the slot came before the acquire K
            // acquires earlier or before that unit's first GEMM (or
            // embedding lookup) after it: it overlaps that unit's compute.
            int g = -1;
            for (int j = i - 1; j >= 0; j--)
                if (log_entries[j].kind == LOG_GATHER && log_entries[j].slot == e->slot) {
                    g = j;
                    break;
                }
            int back = prev_acq[K - 1];
            if (steady(e) && since_update >= K && back >= 0 && g > back) {
                int first_kernel = -1;
                for (int j = back + 1; j < i; j++)
                    if (log_entries[j].kind == LOG_COMPUTE && log_entries[j].unit == log_entries[back].unit) {
                        first_kernel = j;
                        break;
                    }
                if ((first_kernel < 0 || g > first_kernel) && !late++)
                    snprintf(first_problem, sizeof first_problem,
                             "unit %d (step %d micro %d) gathered at log %d, after the compute of unit %d began at %d",
                             e->unit, e->step, e->micro, g, log_entries[back].unit, first_kernel);
            }
            for (int k = 3; k > 0; k--) prev_acq[k] = prev_acq[k - 1];
            prev_acq[0] = i;
            since_update++;
        }
    }
    CHECK(!unknown, "%d collectives on buffers the test cannot name", unknown);
    CHECK(!wrong && !wasted && !late, "%d wrong slots, %d wasted gathers, %d late gathers: %s", wrong, wasted, late,
          first_problem);
    int steady_want = 2 * L - 2 * (K + 1), first_want = 2 * L - (K + 1);
    for (int st = 0; st < STEPS; st++)
        for (int mi = 0; mi < ACCUM; mi++) {
            if (mi > 0)
                CHECK(gathers[st][mi] == steady_want && layer_gathers[st][mi] == steady_want,
                      "step %d micro-step %d: %d gathers (%d of layers), want 2L - 2(K + 1) = %d layers", st, mi,
                      gathers[st][mi], layer_gathers[st][mi], steady_want);
            else if (st > 0 && st != eval_after + 1)  // an evaluation's gathers count toward the next step
                CHECK(gathers[st][mi] == first_want + 2 && layer_gathers[st][mi] == first_want,
                      "step %d's first micro-step: %d gathers (%d of layers), want the embeddings, the final unit "
                      "and 2L - (K + 1) = %d layers",
                      st, gathers[st][mi], layer_gathers[st][mi], first_want);
            CHECK(reduces[st][mi] == U, "step %d micro-step %d: %d reduce-scatters, want one per unit (%d)", st, mi,
                  reduces[st][mi], U);
            int cross_want = hybrid && mi == ACCUM - 1 ? U : 0;
            CHECK(cross[st][mi] == cross_want, "step %d micro-step %d: %d reductions across nodes, want %d", st, mi,
                  cross[st][mi], cross_want);
        }
    (void)F;
    if (comm->rank == 0 && cfg->arch == ARCH_GPT2 && eval_after < 0)
        fprintf(stderr, "test_zero_schedule: L = %d, K = %d: %d gathers per steady micro-step, %d in a step's first\n", L,
                K, gathers[1][1], gathers[1][0]);
}

static void check_arch(const GPTConfig* cfg) {
    size_t n = 0;
    {
        GPTConfig c = *cfg;
        gpt_config_finish(&c);
        ParamLayout pl;
        param_layout_build(&pl, &c, comm->group[COMM_SHARD].size);
        n = pl.total;
        param_layout_free(&pl);
    }
    float* w1 = (float*)calloc(n, sizeof(float));
    float* w2 = (float*)calloc(n, sizeof(float));
    for (int K = 1; K <= 2; K++) {
        run(cfg, K, -1, K == 1 ? w1 : w2);
        check_log(cfg, K, -1);
    }
    CHECK(memcmp(w1, w2, n * sizeof(float)) == 0, "the weights differ between --zero3-prefetch 1 and 2");
    // An evaluation forward between steps leaves the schedule correct and the bits alone.
    run(cfg, 2, 1, w2);
    check_log(cfg, 2, 1);
    CHECK(memcmp(w1, w2, n * sizeof(float)) == 0, "an evaluation forward between steps changed the weights");
    free(w1);
    free(w2);
}

static void gpt2_schedule(void) { check_arch(&GPT2_CFG); }
static void llama_untied_head_schedule(void) { check_arch(&LLAMA_CFG); }

int main(int argc, char** argv) {
    comm = comm_init(&argc, &argv);
    comm_set_shard_scope(comm, comm->num_nodes > 1);
    be = cpu_backend_create(DTYPE_F32, 1);
    comm_attach_backend(comm, be);
    MPI_RUN(gpt2_schedule);
    MPI_RUN(llama_untied_head_schedule);
    free(log_entries);
    be->destroy(be);
    comm_finalize(comm);
    return testlib_failures > 100 ? 100 : testlib_failures;
}
