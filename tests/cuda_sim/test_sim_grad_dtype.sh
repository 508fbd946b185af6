#!/usr/bin/env bash
# test_sim_grad_dtype.sh: --grad-dtype fp32 in BF16 runs on simulated GPUs
# (build/sim/train_gpt, 2 ranks over the harness's NCCL, the reductions in
# fp32) follows the CPU backend's fp32 run of the same batches: every step's
# loss within 0.03 (the BF16 tolerance of tests/gpu/test_gpu_train.c), at
# ZeRO 1 (fp32 flat gradients) and 3 (fp32 shard and staging).
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG_SIM=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
MPI=(mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none)
tiny=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 1 --steps 4 --warmup 2 --lr 3e-3
      --val-every 0 --sample-every 0 --batch-tokens 128)

"$TG" "${tiny[@]}" --device cpu --log-dir "$T/cpu.metrics" >"$T/cpu.log" 2>&1
for z in 1 3; do
  "${MPI[@]}" "$TG_SIM" "${tiny[@]}" --device cuda --precision bf16 --grad-dtype fp32 --zero "$z" \
    --log-dir "$T/sim_$z.metrics" >"$T/sim_$z.log" 2>&1
  if [ "$(step_losses "$T/sim_$z.metrics" | wc -l)" -eq 4 ] &&
     paste <(step_losses "$T/cpu.metrics") <(step_losses "$T/sim_$z.metrics") |
       awk '{ d = $1 - $3; if (d < 0) d = -d; if (d > 0.03) bad = 1 } END { exit bad }'; then
    ok "sim_bf16_grad_fp32_zero${z}_follows_cpu"
  else
    fail "sim_bf16_grad_fp32_zero${z}_follows_cpu" "$(paste <(step_losses "$T/cpu.metrics") <(step_losses "$T/sim_$z.metrics") | tr '\n' ';') $(tail -n 2 "$T/sim_$z.log")"
  fi
  grep -q 'accumulated and reduced in fp32' "$T/sim_$z.log" || fail "sim_grad_fp32_zero${z}_line" "no gradients line"
done
finish
