// recompute.h: the activation recompute policy: which layers keep which
// activations for the backward pass, and which recompute them.
//
// Three modes per layer:
//   none       the layer keeps everything its backward reads.
//   selective  it keeps what costs a GEMM or the attention to recompute (the
//              qkv projection, the attention output and its log-sum-exp, the
//              first residual sum, the MLP's pre-GELU GEMM output, the
//              layernorm statistics) and recomputes the cheap, memory-heavy
//              rest during backward: both layernorm outputs and the GELU
//              output. The attention's T x T probabilities are never stored in
//              any mode (the attention op recomputes them from qkv and lse).
//   full       the layer keeps only its output (the next layer's input, the
//              residual stream) and re-runs its forward, up to the GELU, inside
//              its backward into a one-layer working set; from there it
//              proceeds as a selective layer.
// A policy is a mode for the whole model plus a number F of fully recomputed
// layers: layers 0..F-1 are full, the others have the base mode (Megatron's
// "block" method). `--recompute full` is every layer full.
//
// Recomputation calls the same ops on the same inputs as the forward pass
// (see ops.h for the bitwise properties this relies on), so a recomputed
// activation is the stored one bit for bit. One choice follows the policy: a
// layer that recomputes its GELU output from the pre-activation (selective)
// runs the GEMM and the GELU kernel apart in forward too, while a layer that
// keeps it (none) or re-runs its whole forward (full) may take it from the
// GEMM's epilogue (CUDA). So gradients are the same bits under policies that
// agree, layer by layer, on whether the layer is selective; on the CPU, and
// on a GPU without the epilogue, under every policy; otherwise they agree
// to rounding. llm/model/ maps the policy onto the activation arena
// (act_layout_build) and the passes.
#pragma once

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef enum {
    RECOMPUTE_NONE = 0,
    RECOMPUTE_SELECTIVE = 1,
    RECOMPUTE_FULL = 2,
} RecomputeMode;

typedef struct {
    RecomputeMode mode;  // of the layers that are not fully recomputed; FULL: all are
    int full_layers;     // F: layers 0..F-1 are fully recomputed
} RecomputePolicy;

// The policy for `mode` with `full_layers` full layers out of num_layers,
// normalised so that equal memory plans compare equal: full <=> F == L.
RecomputePolicy recompute_policy(RecomputeMode mode, int full_layers, int num_layers);
// From the flags --recompute MODE and --recompute-layers N; fatal, naming the
// flag, on an N outside 0..L or one that contradicts --recompute full.
RecomputePolicy recompute_policy_from_flags(RecomputeMode mode, int full_layers, int num_layers);
// The mode layer l runs in: FULL for l < F, else the base mode.
RecomputeMode recompute_layer_mode(const RecomputePolicy* p, int layer);
const char* recompute_mode_name(RecomputeMode m);
// "none", "selective", "full", "selective + full x 12 of 32 layers" into buf.
const char* recompute_policy_describe(const RecomputePolicy* p, int num_layers, char* buf, size_t len);

EXTERN_C_END
