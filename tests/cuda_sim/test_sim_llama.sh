#!/usr/bin/env bash
# test_sim_llama.sh: --arch llama on the simulated GPU (build/sim/train_gpt,
# the CUDA backend compiled for tests/cuda_sim): the CUDA Llama block
# (RMSNorm, RoPE, grouped-query attention, SwiGLU kernels) in FP32 follows the
# CPU backend step by step, and in BF16 follows it closely and learns.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
tiny=(--arch llama --layers 2 --channels 64 --heads 4 --kv-heads 2 --seq-len 32 --micro-batch 2 --steps 6 --warmup 2
      --lr 3e-3 --val-every 3 --val-batches 2 --sample-every 6 --sample-tokens 8)
run() {  # run NAME ARGS...: train_gpt into $T/NAME.log
  local name=$1
  shift
  "$TG" "${tiny[@]}" "$@" --log-dir "$T/$name.metrics" >"$T/$name.log" 2>&1
}
# close A B TOL: every loss and norm of run B within TOL (relative) of run A's.
close() {
  [ "$(step_losses "$T/$2.metrics" | wc -l)" -eq 6 ] &&
    paste <(step_losses "$T/$1.metrics") <(step_losses "$T/$2.metrics") |
      awk -v t="$3" '{ for (i = 1; i <= 2; i++) if ((($i - $(i + 2)) ^ 2) > (t * $i) ^ 2) bad = 1 } END { exit bad }'
}

run cpu --device cpu
run fp32 --device cuda --precision fp32
run bf16 --device cuda --precision bf16
if grep -q '^train_gpt | backend cuda' "$T/fp32.log" && close cpu fp32 1e-4; then ok sim_llama_fp32_follows_cpu
else fail sim_llama_fp32_follows_cpu "$(paste <(step_losses "$T/cpu.metrics") <(step_losses "$T/fp32.metrics") | tr '\n' ';') $(tail -n 2 "$T/fp32.log")"; fi
first=$(step_losses "$T/bf16.metrics" | head -n 1 | cut -d' ' -f1)
last=$(step_losses "$T/bf16.metrics" | tail -n 1 | cut -d' ' -f1)
if close cpu bf16 1e-2 && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.05) }'; then ok sim_llama_bf16_learns
else fail sim_llama_bf16_learns "$(paste <(step_losses "$T/cpu.metrics") <(step_losses "$T/bf16.metrics") | tr '\n' ';') $(tail -n 2 "$T/bf16.log")"; fi
finish
