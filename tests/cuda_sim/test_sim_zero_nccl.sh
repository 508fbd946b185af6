#!/usr/bin/env bash
# test_sim_zero_nccl.sh: data parallelism and ZeRO over NCCL on simulated GPUs:
# build/sim/train_gpt under `mpirun -np 2` (two processes, each with its
# simulated GPU; the harness's NCCL runs over MPI) against one rank
# accumulating the same global batch. Runs once train_gpt has --zero.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
if ! "$TG" --help 2>/dev/null | grep -q -- '--zero'; then
  echo "# test_sim_zero_nccl: this train_gpt has no --zero flag; nothing to run"
  finish
fi
MPI=(mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none)
tiny=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --steps 4 --warmup 2 --lr 3e-3
      --val-every 0 --sample-every 0 --batch-tokens 128 --device cuda)

# Loss and norm of every step within 1e-4 relative of the reference log.
close() {
  [ "$(step_losses "$2" | wc -l)" -eq 4 ] &&
    paste <(step_losses "$1") <(step_losses "$2") |
      awk '{ for (i = 1; i <= 2; i++) if ((($i - $(i + 2)) ^ 2) > (1e-4 * $i) ^ 2) bad = 1 } END { exit bad }'
}

"$TG" "${tiny[@]}" --precision fp32 --log-dir "$T/one.metrics" >"$T/one.log" 2>&1
for z in 0 2 3; do
  "${MPI[@]}" "$TG" "${tiny[@]}" --precision fp32 --zero "$z" --log-dir "$T/two_$z.metrics" >"$T/two_$z.log" 2>&1
  if close "$T/one.metrics" "$T/two_$z.metrics"; then
    ok "sim_nccl_2ranks_zero${z}_matches_1rank"
  else
    fail "sim_nccl_2ranks_zero${z}_matches_1rank" "$(paste <(step_losses "$T/one.metrics") <(step_losses "$T/two_$z.metrics") | tr '\n' ';') $(tail -n 2 "$T/two_$z.log")"
  fi
done

"${MPI[@]}" "$TG" "${tiny[@]}" --precision bf16 --zero 3 --log-dir "$T/bf16_a.metrics" >"$T/bf16_a.log" 2>&1
"${MPI[@]}" "$TG" "${tiny[@]}" --precision bf16 --zero 3 --log-dir "$T/bf16_b.metrics" >"$T/bf16_b.log" 2>&1
if [ "$(step_losses "$T/bf16_a.metrics" | wc -l)" -eq 4 ] && [ "$(step_losses "$T/bf16_a.metrics")" = "$(step_losses "$T/bf16_b.metrics")" ]; then
  ok sim_nccl_2ranks_bf16_zero3_deterministic
else
  fail sim_nccl_2ranks_bf16_zero3_deterministic "$(tail -n 2 "$T/bf16_a.log")"
fi

finish
