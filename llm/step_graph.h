// step_graph.h: --cuda-graphs on: the training micro-step (forward, loss,
// backward, and the gradient collectives ZeRO's hooks issue in it) captured
// once in a CUDA graph and replayed, instead of enqueuing its few hundred
// kernels one by one from the host.
//
// A graph holds the kernel arguments and host values of its capture. So a
// micro-step is replayed only from the host-side state it was captured in
// (ZeroHostState: which units sit in ZeRO-3's staging slots, whether the
// micro-step communicates, whether its loss starts the sum), and the replay
// leaves that state as the capture left it. A state seen for the first time
// runs eagerly (the warm-up: cuDNN plans, scratch growth, ZeRO-3's recording
// of the order of uses); its second occurrence is captured; from then on it
// is replayed. Inputs and targets are copied into the model's fixed device
// buffers from pinned staging before each micro-step (trainer.c), outside
// the graph. The optimizer step stays outside: its learning rate, clip
// factor and step count are host values passed by value to the AdamW
// kernels, and the guard decides on the host whether it runs at all.
#pragma once

#include "llm/parallel/zero.h"

EXTERN_C_BEGIN

#define STEP_GRAPHS_MAX 8  // states captured; further ones run eagerly

typedef struct {
    ZeroHostState before, after;
    int first;    // the micro-step's loss starts the sum (gpt_accumulate_loss)
    float dloss;  // the loss gradient's scale, passed by value
    long uses;    // ZeRO-3 parameter uses in the micro-step
    void* graph;  // NULL: seen once, not captured yet
} StepGraph;

typedef struct {
    int enabled;
    StepGraph g[STEP_GRAPHS_MAX];
    int count;
    long captured, replayed, eager;
} StepGraphs;

// Why `--cuda-graphs on` cannot be honoured for this run, or NULL.
const char* step_graphs_refusal(const Backend* be, const GPT* m, int fp8);
void step_graphs_init(StepGraphs* sg, int enabled);
void step_graphs_free(StepGraphs* sg, Backend* be);
// One micro-step of B x T (inputs and targets already in m->inputs and
// m->targets): gpt_forward, gpt_accumulate_loss (a sum from here when
// `first`), gpt_backward; eagerly, captured, or replayed.
void step_graphs_micro_step(StepGraphs* sg, Zero* z, int B, int T, int first, float dloss);

EXTERN_C_END
