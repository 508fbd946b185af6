#!/usr/bin/env bash
# test_sim_cuda_graphs.sh: --cuda-graphs on in train_gpt on the simulated GPU
# (build/sim/train_gpt; the harness records a capture and replays exactly the
# recorded work, tests/cuda_sim/graph.cpp). The captured and replayed
# micro-steps give the same losses and norms bit for bit as --cuda-graphs off:
# BF16 and FP32 on one rank with gradient accumulation (two micro-step
# states), cuDNN attention (the fake library's executions captured), and two
# ranks under mpirun at ZeRO 1 and 3 (collectives inside the graph; ZeRO-3's
# staging slots moved by a validation pass between steps). The runs must
# really replay (the "graphs" line), and what cannot be captured is refused
# naming the flag.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
tiny=(--layers 1 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --warmup 2 --lr 3e-3
      --sample-every 0 --device cuda)

# same NAME STEPS ARGS...: --cuda-graphs off and on with ARGS for STEPS
# steps; the step losses and norms must be identical, and the on run must
# have replayed micro-steps. A state's first micro-step is its warm-up, the
# second is captured, the third replayed: 3 steps at least (5 at ZeRO-3,
# which first records its order of parameter uses).
same() {
  local name=$1 steps=$2
  shift 2
  local args=("${tiny[@]}" --steps "$steps")
  "$@" "${args[@]}" --checkpoint-dir "$T/$name.off.ck" --log-dir "$T/$name.off" >"$T/$name.off.log" 2>&1
  "$@" "${args[@]}" --cuda-graphs on --checkpoint-dir "$T/$name.on.ck" --log-dir "$T/$name.on" >"$T/$name.on.log" 2>&1
  local off on
  off=$(step_losses "$T/$name.off")
  on=$(step_losses "$T/$name.on")
  if [ "$(echo "$off" | wc -l)" -eq "$steps" ] && [ "$off" = "$on" ] &&
     grep -Eq '^graphs +\| --cuda-graphs on: [1-9][0-9]* micro-steps captured, [1-9][0-9]* replayed' "$T/$name.on.log"; then
    ok "sim_cuda_graphs_${name}_same_losses"
  else
    fail "sim_cuda_graphs_${name}_same_losses" "off: $(echo $off) on: $(echo $on) $(grep '^graphs' "$T/$name.on.log") $(tail -n 2 "$T/$name.on.log")"
  fi
}

# One rank, two micro-steps per step (the first one's loss starts the sum).
same bf16 3 "$TG" --precision bf16 --batch-tokens 128 --val-every 0
same fp32 3 "$TG" --precision fp32 --batch-tokens 128 --val-every 0
# cuDNN attention: the plans are built in the eager warm-up, executions captured.
same cudnn 3 env TRAIN_GPT_CUDNN_LIB="${SIM_CUDNN_LIB:-$PWD/build/sim/libcudnn_sim.so}" \
  "$TG" --precision bf16 --attention cudnn --batch-tokens 64 --val-every 0
if [ -n "$(command -v mpirun)" ]; then
  MPI=(mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none)
  same zero1_2ranks 3 "${MPI[@]}" "$TG" --precision bf16 --zero 1 --batch-tokens 128 --val-every 0
  # A validation pass before step 4 leaves other units in the staging slots:
  # that state is not the captured one, so it runs eagerly (its own warm-up).
  same zero3_2ranks 6 "${MPI[@]}" "$TG" --precision bf16 --zero 3 --batch-tokens 128 --val-every 3 --val-batches 1
fi

# Refusals: one line naming the flag and the reason, non-zero exit.
refused() {
  local name=$1 want=$2
  shift 2
  if "$TG" "${tiny[@]}" --cuda-graphs on --checkpoint-dir "$T/$name.ck" "$@" >"$T/$name.log" 2>&1; then
    fail "sim_cuda_graphs_refuses_$name" "exit 0"
  elif grep -q -- "--cuda-graphs on: .*$want" "$T/$name.log"; then
    ok "sim_cuda_graphs_refuses_$name"
  else
    fail "sim_cuda_graphs_refuses_$name" "$(tail -n 2 "$T/$name.log")"
  fi
}
refused cpu "needs --device cuda" --device cpu --val-every 0 --steps 1
refused fp8 "precision fp8" --precision fp8 --val-every 0 --steps 1
TRAIN_GPT_SYNC_CHECK=1 refused sync_check "TRAIN_GPT_SYNC_CHECK" --precision bf16 --val-every 0 --steps 1

finish
