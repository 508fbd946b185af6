// mfu.h: model FLOPs utilisation: FLOPs per token, the dense peak of the
// device the run computes on, and MFU = achieved model FLOP/s over that peak.
//
// Convention (PaLM, Chowdhery et al. 2022, appendix B; torchtitan uses the same):
//   FLOPs per token = 6 N + 12 L h s
// 6 N: forward (2 N) and backward (4 N) of every weight matrix, where N counts
// all parameters except the position embedding (a table lookup, no
// multiply); the token embedding counts because it is also the LM head.
// Llama: N without the token embedding when the head is untied (then only a
// lookup, as torchtitan counts), and h is NH x HS: grouped-query attention
// computes all NH heads' scores.
// 12 L h s: the attention scores QK^T and their weighted sum AV (2 x 2 s h
// per token and layer forward, 3x with backward), with no discount for the
// causal mask. Recomputation is not counted (that would be HFU, not MFU).
// The peak is the dense (not 2:4-sparse) tensor-core figure for the run's
// precision, or, on the CPU backend, its own sgemm measured at start-up.
#pragma once

#include "kernels/ops.h"
#include "llm/config.h"
#include "llm/model/model.h"

EXTERN_C_BEGIN

// FLOPs to train one token of a sequence of length T (forward + backward).
double flops_per_token(const GPTConfig* c, int T);

// Dense peak TFLOP/s of one GPU whose CUDA name contains a known model
// (A100, H100, H200, B200, with the PCIe/NVL variants) at precision
// bf16 or fp8. Returns 0 when the table has no entry (an unknown GPU,
// fp32, or FP8 on an A100). *matched (optional) names the table row.
double gpu_peak_tflops(const char* gpu_name, PrecisionChoice precision, const char** matched);

// Achieved FLOP/s of the CPU backend's own matmul_forward on a square FP32
// problem (1024^3, best of five after a warm-up; about 0.2 s on two cores):
// the ceiling a CPU training step can approach. On a busy machine it comes
// out low; the report then shows MFU as n/a once a step beats it (report.c).
double cpu_sgemm_ceiling_flops(Backend* be);

// tokens_per_second (all devices) x flops_per_token / (devices x peak per
// device); NaN when the peak is unknown (<= 0).
double mfu(double tokens_per_second, double flops_per_token, double peak_flops_per_device, int devices);

EXTERN_C_END
