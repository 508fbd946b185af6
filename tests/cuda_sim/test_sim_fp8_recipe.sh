#!/usr/bin/env bash
# test_sim_fp8_recipe.sh: --fp8-recipe on the simulated GPU at compute
# capability 9.0 and 10.0 (CUDA_SIM_CC): auto's choice is printed with its
# reason, and a recipe the GPU cannot run stops before training with one line
# naming the GPU and the recipe (llm/fp8/fp8.c, fp8_resolve_recipe and
# fp8_recipe_runs); nvfp4 too (10.x only, and no NVFP4 GEMMs in this build).
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
tiny=(--device cuda --precision fp8 --layers 1 --channels 32 --heads 2 --seq-len 16 --micro-batch 1 --steps 1
      --val-every 0 --sample-every 0 --checkpoint-dir '')
gpu="NVIDIA H100 80GB HBM3 \(cuda_sim\)"

CUDA_SIM_CC=90 "$TG" "${tiny[@]}" --log-dir "$T/h.metrics" >"$T/h.log" 2>&1
if grep -q "^fp8       | recipe current (auto: NVIDIA H100 80GB HBM3 (cuda_sim) (compute capability 9.0)" "$T/h.log" &&
   [ "$(steps_logged "$T/h.metrics")" -eq 1 ]; then ok sim_fp8_recipe_auto_hopper
else fail sim_fp8_recipe_auto_hopper "$(grep -E '^(fp8|train_gpt)' "$T/h.log")"; fi
CUDA_SIM_CC=100 "$TG" "${tiny[@]}" --log-dir "$T/b.metrics" >"$T/b.log" 2>&1
if grep -q "^fp8       | recipe current (auto: .* (compute capability 10.0) would take mxfp8, but this build's CUDA backend has no block-scaled GEMMs yet)" "$T/b.log" &&
   [ "$(steps_logged "$T/b.metrics")" -eq 1 ]; then ok sim_fp8_recipe_auto_blackwell
else fail sim_fp8_recipe_auto_blackwell "$(grep -E '^(fp8|train_gpt)' "$T/b.log")"; fi

export CUDA_SIM_CC=90
expect_error sim_fp8_mxfp8_on_hopper "^train_gpt: error: --fp8-recipe mxfp8: this GPU \($gpu, compute capability 9.0\) cannot run it" \
  "$TG" "${tiny[@]}" --fp8-recipe mxfp8
expect_error sim_fp8_blockwise_on_hopper_needs_kernels "--fp8-recipe blockwise: this GPU \($gpu, compute capability 9.0\) could run it, but this build's CUDA backend has no block-scaled GEMMs" \
  "$TG" "${tiny[@]}" --fp8-recipe blockwise
export CUDA_SIM_CC=100
expect_error sim_fp8_blockwise_on_blackwell "--fp8-recipe blockwise: this GPU \($gpu, compute capability 10.0\) cannot run it: .*use mxfp8" \
  "$TG" "${tiny[@]}" --fp8-recipe blockwise
# nvfp4: FP4 tensor cores need 10.x; this build's CUDA backend has no NVFP4 GEMMs yet.
expect_error sim_fp8_nvfp4_on_blackwell_needs_kernels "^train_gpt: error: --fp8-recipe nvfp4: this GPU \($gpu, compute capability 10.0\) could run it, but this build's CUDA backend has no NVFP4 GEMMs yet" \
  "$TG" "${tiny[@]}" --fp8-recipe nvfp4
export CUDA_SIM_CC=90
expect_error sim_fp8_nvfp4_on_hopper "^train_gpt: error: --fp8-recipe nvfp4: this GPU \($gpu, compute capability 9.0\) cannot run it: NVFP4's FP4 tensor cores \(cuBLASLt VEC16_UE4M3, TN only\) need compute capability 10.x" \
  "$TG" "${tiny[@]}" --fp8-recipe nvfp4
