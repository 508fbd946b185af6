#!/usr/bin/env bash
# test_sim_train_gpt.sh: train_gpt itself on the simulated GPU
# (build/sim/train_gpt: the CUDA backend compiled for tests/cuda_sim). The
# CUDA training loop of train.cu, end to end, against the CPU backend in the
# same binary: FP32 follows the CPU's losses and gradient norms, BF16 learns,
# runs are deterministic, validation, sampling and export work; BF16 AdamW
# moments (--adam-dtype bf16) follow the CPU too.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
tiny=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --steps 6 --warmup 2 --lr 3e-3
      --val-every 3 --val-batches 2 --sample-every 6 --sample-tokens 8)

run() {  # run NAME ARGS...: train_gpt into $T/NAME.log, its metrics into $T/NAME.metrics/; returns its status
  local name=$1
  shift
  "$TG" "${tiny[@]}" "$@" --log-dir "$T/$name.metrics" >"$T/$name.log" 2>&1
}

# 1. The default device of this binary is the (simulated) GPU.
if run auto && grep -q '^train_gpt | backend cuda' "$T/auto.log"; then
  ok sim_train_gpt_picks_cuda
else
  fail sim_train_gpt_picks_cuda "$(head -n 3 "$T/auto.log")"
fi

# 2. FP32 on the GPU follows the CPU step by step: loss and norm within 1e-4 relative.
run cpu --device cpu --export "$T/cpu.bin"
run gpu --device cuda --precision fp32 --export "$T/gpu.bin"
if [ "$(step_losses "$T/gpu.metrics" | wc -l)" -eq 6 ] &&
   paste <(step_losses "$T/cpu.metrics") <(step_losses "$T/gpu.metrics") |
     awk '{ for (i = 1; i <= 2; i++) if ((($i - $(i + 2)) ^ 2) > (1e-4 * $i) ^ 2) bad = 1 } END { exit bad }'; then
  ok sim_fp32_follows_cpu
else
  fail sim_fp32_follows_cpu "cpu/gpu (loss norm): $(paste <(step_losses "$T/cpu.metrics") <(step_losses "$T/gpu.metrics") | tr '\n' ';') $(tail -n 2 "$T/gpu.log")"
fi
cpu_val=$(val_losses "$T/cpu.metrics" | tail -n 1)
gpu_val=$(val_losses "$T/gpu.metrics" | tail -n 1)
if [ -n "$gpu_val" ] && awk -v a="$cpu_val" -v b="$gpu_val" 'BEGIN { d = a - b; exit !(d * d < (1e-4 * a) ^ 2) }' &&
   grep -q '^---- sample at step 6' "$T/gpu.log" && [ -s "$T/gpu.bin" ] &&
   [ "$(stat -c %s "$T/gpu.bin")" = "$(stat -c %s "$T/cpu.bin")" ]; then
  ok sim_fp32_validation_sample_export
else
  fail sim_fp32_validation_sample_export "val cpu $cpu_val gpu $gpu_val; $(tail -n 2 "$T/gpu.log")"
fi

# 3. BF16 learns, and two runs are bit-identical.
run bf16a --device cuda --precision bf16 --steps 12 --sample-every 0 --val-every 0
run bf16b --device cuda --precision bf16 --steps 12 --sample-every 0 --val-every 0 --export "$T/bf16.bin"
first=$(step_losses "$T/bf16a.metrics" | head -n 1 | cut -d' ' -f1)
last=$(step_losses "$T/bf16a.metrics" | tail -n 1 | cut -d' ' -f1)
if [ "$(step_losses "$T/bf16a.metrics" | wc -l)" -eq 12 ] && awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.5) }'; then
  ok sim_bf16_learns
else
  fail sim_bf16_learns "loss $first -> $last; $(tail -n 2 "$T/bf16a.log")"
fi
if [ -n "$first" ] && [ "$(step_losses "$T/bf16a.metrics")" = "$(step_losses "$T/bf16b.metrics")" ]; then
  ok sim_bf16_deterministic
else
  fail sim_bf16_deterministic "two runs differ"
fi
# The peak the GPU backend allocates is the planner's bill, to the byte, with
# a BF16 model loaded and exported (both convert on the host: a device-side
# FP32 copy of the model went 1.4 MB above the plan) and in FP32.
if grep -q '^memory .* | as planned$' "$T/bf16b.log" && grep -q '^memory .* | as planned$' "$T/gpu.log" && [ -s "$T/bf16.bin" ]; then
  ok sim_peak_memory_as_planned
else
  fail sim_peak_memory_as_planned "$(grep -h '^memory .* peak' "$T/bf16b.log" "$T/gpu.log" | tr '\n' ';')"
fi

# 4. BF16 moments (--adam-dtype bf16): FP32 on the GPU follows the CPU's run
# with BF16 moments as closely as FP32 moments do (the kernels store the
# CPU's bits: tests/gpu/test_gpu_adamw_bf16.c), and BF16 with BF16 moments learns.
run cpu_m16 --device cpu --adam-dtype bf16 --sample-every 0 --val-every 0
run gpu_m16 --device cuda --precision fp32 --adam-dtype bf16 --sample-every 0 --val-every 0
if [ "$(step_losses "$T/gpu_m16.metrics" | wc -l)" -eq 6 ] &&
   paste <(step_losses "$T/cpu_m16.metrics") <(step_losses "$T/gpu_m16.metrics") |
     awk '{ for (i = 1; i <= 2; i++) if ((($i - $(i + 2)) ^ 2) > (1e-4 * $i) ^ 2) bad = 1 } END { exit bad }'; then
  ok sim_bf16_moments_follow_cpu
else
  fail sim_bf16_moments_follow_cpu "cpu/gpu: $(paste <(step_losses "$T/cpu_m16.metrics") <(step_losses "$T/gpu_m16.metrics") | tr '\n' ';') $(tail -n 2 "$T/gpu_m16.log")"
fi
run bf16_m16 --device cuda --precision bf16 --adam-dtype bf16 --steps 12 --sample-every 0 --val-every 0
first=$(step_losses "$T/bf16_m16.metrics" | head -n 1 | cut -d' ' -f1)
last=$(step_losses "$T/bf16_m16.metrics" | tail -n 1 | cut -d' ' -f1)
if [ "$(step_losses "$T/bf16_m16.metrics" | wc -l)" -eq 12 ] && awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.5) }' &&
   grep -q '^optimizer .*moments bf16' "$T/bf16_m16.log"; then
  ok sim_bf16_with_bf16_moments_learns
else
  fail sim_bf16_with_bf16_moments_learns "loss $first -> $last; $(tail -n 2 "$T/bf16_m16.log")"
fi

finish
