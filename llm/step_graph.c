// step_graph.c: the training micro-step captured in CUDA graphs and replayed
// (--cuda-graphs on); what is captured and when: step_graph.h.
#include "llm/step_graph.h"

#include <string.h>

#include "llm/util/util.h"

const char* step_graphs_refusal(const Backend* be, const GPT* m, int fp8) {
    if (!strcmp(be->name, "cpu")) return "the CPU backend has no CUDA graphs (it needs --device cuda)";
    if (!be->graph_begin)
        return "TRAIN_GPT_SYNC_CHECK and TRAIN_GPT_OP_PROFILE wait for the GPU after every op, which a capture cannot";
    // The FP8 recipes decide on the host, step by step, which scales a GEMM
    // reads (delayed scaling's history, the first step's current scaling):
    // not yet shown to be the same in every replayed micro-step.
    if (fp8) return "--precision fp8 is not captured yet (its scaling is decided on the host step by step); use bf16 or fp32";
    (void)m;
    return NULL;
}

void step_graphs_init(StepGraphs* sg, int enabled) {
    memset(sg, 0, sizeof *sg);
    sg->enabled = enabled;
}

void step_graphs_free(StepGraphs* sg, Backend* be) {
    for (int i = 0; i < sg->count; i++)
        if (sg->g[i].graph) be->graph_free(be, sg->g[i].graph);
    sg->count = 0;
}

static void run_micro_step(GPT* m, int B, int T, int first, float dloss) {
    gpt_forward(m, m->inputs, m->targets, B, T, dloss);
    gpt_accumulate_loss(m, B, T, !first);
    gpt_backward(m, m->inputs, B, T);  // the hooks reduce gradients unit by unit
}

static StepGraph* find(StepGraphs* sg, const ZeroHostState* st, int first, float dloss) {
    for (int i = 0; i < sg->count; i++) {
        StepGraph* g = &sg->g[i];
        if (g->first == first && g->dloss == dloss && !memcmp(&g->before, st, sizeof *st)) return g;
    }
    return NULL;
}

void step_graphs_micro_step(StepGraphs* sg, Zero* z, int B, int T, int first, float dloss) {
    GPT* m = z->m;
    Backend* be = m->be;
    // ZeRO-3 records the order of its parameter uses in the first micro-steps:
    // host decisions that change from one micro-step to the next.
    if (!sg->enabled || (gpt_params_sharded(m) && !z->order_known)) {
        run_micro_step(m, B, T, first, dloss);
        sg->eager++;
        return;
    }
    ZeroHostState st;
    zero_host_state(z, &st);
    StepGraph* g = find(sg, &st, first, dloss);
    // Whatever the communication stream still has in flight (ZeRO-3's
    // gathers behind the last update) is waited for before the graph, whose
    // waits on events recorded before its capture are not part of it.
    if (g && g->graph) {
        comm_compute_wait_all(z->comm);
        be->graph_launch(be, g->graph);
        zero_set_host_state(z, &g->after, g->uses);
        sg->replayed++;
        return;
    }
    if (!g) {  // first time in this state: the warm-up, run eagerly
        if (sg->count < STEP_GRAPHS_MAX) {
            g = &sg->g[sg->count++];
            memset(g, 0, sizeof *g);
            g->before = st;
            g->first = first;
            g->dloss = dloss;
        }
        run_micro_step(m, B, T, first, dloss);
        sg->eager++;
        return;
    }
    // Second time: capture (nothing runs), then launch what was captured.
    long uses_before = z->uses;
    comm_compute_wait_all(z->comm);
    be->graph_begin(be);
    comm_capture_begin(z->comm);
    run_micro_step(m, B, T, first, dloss);
    comm_compute_wait_all(z->comm);  // joins the communication stream back into the capture
    comm_capture_end(z->comm);
    g->graph = be->graph_end(be);
    zero_host_state(z, &g->after);
    g->uses = z->uses - uses_before;
    be->graph_launch(be, g->graph);
    sg->captured++;
}
