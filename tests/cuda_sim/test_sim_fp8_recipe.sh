#!/usr/bin/env bash
# test_sim_fp8_recipe.sh: --fp8-recipe on the simulated GPU at compute
# capability 9.0 and 10.0 (CUDA_SIM_CC): auto's choice is printed with its
# reason, and a recipe the GPU cannot run stops before training with one line
# naming the GPU and the recipe (llm/fp8/fp8.c, fp8_resolve_recipe and
# fp8_recipe_runs). The block-scaled recipes train on the GPU that runs them
# (blockwise on 9.0, mxfp8 on 10.0: kernels/cuda/fp8_block.cu and the
# emulator's cuBLASLt block scale modes) and follow the CPU backend's exact
# emulation of the same recipe: every step's loss within 0.05 (the FP8
# tolerance of tests/gpu/test_gpu_fp8.c), the loss falls, and the device's
# peak memory is the planner's bill to the byte.
# nvfp4 (10.x only, and no NVFP4 GEMMs in this build) is refused on both.
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
if grep -q "^fp8       | recipe mxfp8 (auto: .* (compute capability 10.0) scales 1x32 blocks natively)" "$T/b.log" &&
   [ "$(steps_logged "$T/b.metrics")" -eq 1 ]; then ok sim_fp8_recipe_auto_blackwell
else fail sim_fp8_recipe_auto_blackwell "$(grep -E '^(fp8|train_gpt)' "$T/b.log")"; fi

export CUDA_SIM_CC=90
expect_error sim_fp8_mxfp8_on_hopper "^train_gpt: error: --fp8-recipe mxfp8: this GPU \($gpu, compute capability 9.0\) cannot run it" \
  "$TG" "${tiny[@]}" --fp8-recipe mxfp8
export CUDA_SIM_CC=100
expect_error sim_fp8_blockwise_on_blackwell "--fp8-recipe blockwise: this GPU \($gpu, compute capability 10.0\) cannot run it: .*use mxfp8" \
  "$TG" "${tiny[@]}" --fp8-recipe blockwise
# nvfp4: FP4 tensor cores need 10.x; this build's CUDA backend has no NVFP4 GEMMs yet.
expect_error sim_fp8_nvfp4_on_blackwell_needs_kernels "^train_gpt: error: --fp8-recipe nvfp4: this GPU \($gpu, compute capability 10.0\) could run it, but this build's CUDA backend has no NVFP4 GEMMs yet" \
  "$TG" "${tiny[@]}" --fp8-recipe nvfp4
export CUDA_SIM_CC=90
expect_error sim_fp8_nvfp4_on_hopper "^train_gpt: error: --fp8-recipe nvfp4: this GPU \($gpu, compute capability 9.0\) cannot run it: NVFP4's FP4 tensor cores \(cuBLASLt VEC16_UE4M3, TN only\) need compute capability 10.x" \
  "$TG" "${tiny[@]}" --fp8-recipe nvfp4
unset CUDA_SIM_CC

# follows_cpu NAME CC RECIPE: 4 steps on the simulated GPU at compute capability CC against the CPU backend.
small=(--precision fp8 --layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --steps 4 --warmup 2 --lr 3e-3
       --val-every 0 --sample-every 0 --checkpoint-dir '')
follows_cpu() {
  local name=$1 cc=$2 recipe=$3
  CPU_TG=${CPU_TG:-./train_gpt}
  "$CPU_TG" --device cpu "${small[@]}" --fp8-recipe "$recipe" --log-dir "$T/cpu_$recipe.metrics" >"$T/cpu_$recipe.log" 2>&1
  CUDA_SIM_CC=$cc "$TG" --device cuda "${small[@]}" --fp8-recipe "$recipe" --log-dir "$T/gpu_$recipe.metrics" \
    >"$T/gpu_$recipe.log" 2>&1
  local pair
  pair=$(paste <(step_losses "$T/cpu_$recipe.metrics") <(step_losses "$T/gpu_$recipe.metrics"))
  if [ "$(step_losses "$T/gpu_$recipe.metrics" | wc -l)" -eq 4 ] && [ "$(step_losses "$T/cpu_$recipe.metrics" | wc -l)" -eq 4 ] &&
     grep -q "^fp8       | recipe $recipe" "$T/gpu_$recipe.log" &&
     echo "$pair" | awk '{ d = $1 - $3; if (d < 0) d = -d; if (d > 0.05) bad = 1 } NR == 1 { first = $3 } END { exit bad || !($3 < first - 0.1) }'; then
    ok "$name"
  else
    fail "$name" "$(echo "$pair" | tr '\n' ';') $(grep -E '^train_gpt: (error|warning)' "$T/gpu_$recipe.log" "$T/cpu_$recipe.log" | head -n 2)"
  fi
  # The planner bills the block GEMM's codes and scales (llm/fp8/fp8.c): the device's peak is the plan to the byte.
  if grep -q "^memory    | peak allocated .* | as planned" "$T/gpu_$recipe.log" && ! grep -q "op scratch grows" "$T/gpu_$recipe.log"; then
    ok "${name}_memory_as_planned"
  else
    fail "${name}_memory_as_planned" "$(grep -E '^memory    \| peak|op scratch' "$T/gpu_$recipe.log")"
  fi
}
follows_cpu sim_fp8_blockwise_on_hopper_follows_cpu 90 blockwise
follows_cpu sim_fp8_mxfp8_on_blackwell_follows_cpu 100 mxfp8
finish
