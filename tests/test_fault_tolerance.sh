#!/usr/bin/env bash
# test_fault_tolerance.sh: what keeps a long run from hanging or dying for
# nothing: the collective watchdog (a rank that sleeps in a collective, via
# TRAIN_GPT_INJECT_HANG, ends every rank with one timeout message instead of
# hanging; also over NCCL on simulated GPUs), --on-divergence rollback
# (repeated NaN steps reload the newest checkpoint bit for bit, also at ZeRO-3
# on 2 ranks and in BF16 on a simulated GPU, and training goes on with the
# data that follows), its limits and flag errors, and per-rank telemetry
# gathered as min/max across ranks (a fake NVML giving each rank a different GPU).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
FAKE_NVML=${BUILD:-build}/tests/libfake_nvml.so
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# --peak-tflops: no start-up sgemm measurement, which would hold rank 0 back.
tiny=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --val-every 0 --sample-every 0 --threads 1
      --peak-tflops 1 --telemetry-every 0)

# 1. A rank sleeps for ever in a collective of step 3: every rank ends, with a
# non-zero status and one error line naming the collective, the step and the
# timeout. `timeout` turns a regression (a hang) into a failure.
hang_case() {  # NAME HANG_RANK
  local name=$1 who=$2 rc err
  TRAIN_GPT_INJECT_HANG=$who:3 timeout 90 "${MPI[@]}" -np 2 "$TG" "${tiny[@]}" --steps 6 --collective-timeout 4 \
    --log-dir "$T/$name" >"$T/$name.out" 2>"$T/$name.err"
  rc=$?
  err=$(grep '^train_gpt: error:' "$T/$name.err")
  if [ $rc -eq 124 ]; then
    fail "$name" "still hanging after 90 s"
  elif [ $rc -eq 0 ]; then
    fail "$name" "exit status 0"
  elif [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ]; then
    fail "$name" "expected one error line, got: $err"
  elif ! printf '%s' "$err" | grep -Eq "rank [01] of 2.*: collective timeout: [a-z/ -]+ over the [a-z]+( group)? \(2 ranks\) at step 3 did not finish within --collective-timeout 4 s \(waited [0-9.]+ s\); another rank is stuck, dead or far behind; aborting every rank$"; then
    fail "$name" "message: $err"
  elif ! grep -q '^watchdog  | a collective unfinished after 4 s stops every rank' "$T/$name.out"; then
    fail "$name" "no watchdog line in the start-up summary"
  elif ! grep -q "TRAIN_GPT_INJECT_HANG: rank $who sleeps for ever in .* at step 3" "$T/$name.err" ||
       [ "$(steps_logged "$T/$name")" -ne 2 ]; then
    fail "$name" "the hang was not at step 3: $(steps_logged "$T/$name") steps logged; $(head -n 2 "$T/$name.err")"
  else
    ok "$name"
  fi
}
hang_case collective_timeout_rank1_hangs 1
hang_case collective_timeout_rank0_hangs 0

# FP8's amax reduction is a collective too: rank 1 sleeps in it at step 3,
# and rank 0's watchdog names it.
TRAIN_GPT_INJECT_HANG=1:3:amax timeout 90 "${MPI[@]}" -np 2 "$TG" "${tiny[@]}" --precision fp8 --steps 6 \
  --collective-timeout 4 >"$T/amax.out" 2>"$T/amax.err"
rc=$?
err=$(grep '^train_gpt: error:' "$T/amax.err")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
   printf '%s' "$err" | grep -q 'collective timeout: all-reduce (max) of FP8 amaxes over the world (2 ranks) at step 3 did not finish' &&
   grep -q 'TRAIN_GPT_INJECT_HANG: rank 1 sleeps for ever in all-reduce (max) of FP8 amaxes' "$T/amax.err"; then
  ok collective_timeout_fp8_amax
else
  fail collective_timeout_fp8_amax "exit $rc: ${err:-$(tail -n 2 "$T/amax.err")}"
fi

# The CUDA backend with NCCL, on simulated GPUs (tests/cuda_sim) when built.
SIM_TG=${SIM_TG:-${BUILD:-build}/sim/train_gpt}
if [ -x "$SIM_TG" ] && [ -e "${BUILD:-build}/sim/llm/parallel/comm_nccl.o" ]; then
  sim=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --batch-tokens 128 --steps 5 --val-every 0
       --sample-every 0 --device cuda --precision fp32 --peak-tflops 1 --telemetry-every 0 --zero 2)
  TRAIN_GPT_INJECT_HANG=1:3 timeout 90 mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none "$SIM_TG" \
    "${sim[@]}" --collective-timeout 4 --log-dir "$T/sim" >"$T/sim.out" 2>"$T/sim.err"
  rc=$?
  err=$(grep '^train_gpt: error:' "$T/sim.err")
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
     printf '%s' "$err" | grep -Eq "collective timeout: .* at step 3 did not finish within --collective-timeout 4 s" &&
     [ "$(steps_logged "$T/sim")" -eq 2 ]; then
    ok sim_nccl_collective_timeout
  else
    fail sim_nccl_collective_timeout "exit $rc: $err $(tail -n 2 "$T/sim.err")"
  fi
else
  echo "# test_fault_tolerance: no build/sim/train_gpt with NCCL: the simulated-GPU timeout case is not run"
fi

# Without the watchdog the same run trains when no rank hangs.
if "${MPI[@]}" -np 2 "$TG" "${tiny[@]}" --steps 3 --collective-timeout 0 --log-dir "$T/nowd" >"$T/nowd.out" 2>&1 &&
   [ "$(steps_logged "$T/nowd")" -eq 3 ] && grep -q '^watchdog  | off: collectives may wait for ever' "$T/nowd.out"; then
  ok collective_timeout_zero_trains
else
  fail collective_timeout_zero_trains "$(tail -n 2 "$T/nowd.out")"
fi
expect_error bad_collective_timeout 'collective-timeout must not be negative' "$TG" "${tiny[@]}" --collective-timeout -1
expect_error bad_inject_hang "TRAIN_GPT_INJECT_HANG='3': expected RANK:STEP" env TRAIN_GPT_INJECT_HANG=3 "$TG" "${tiny[@]}"
expect_error bad_inject_hang_text "TRAIN_GPT_INJECT_HANG='1:3:': TEXT after RANK:STEP: must be 1 to 63 characters" \
  env TRAIN_GPT_INJECT_HANG=1:3: "$TG" "${tiny[@]}"

# 2. Telemetry and memory from two ranks: fake GPU i has SM utilisation 90+i %,
# 350+i W, 60+i C, 10+i GiB used. Rank 0 reports the min and max of both.
TRAIN_GPT_NVML_LIB=$FAKE_NVML "${MPI[@]}" -np 2 "$TG" "${tiny[@]}" --steps 4 --telemetry-every 2 \
  --log-dir "$T/tel" >"$T/tel.out" 2>&1
"$PY" - "$T/tel/metrics.jsonl" >"$T/tel.txt" 2>&1 <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
tel = [r for r in recs if r["type"] == "telemetry"]
assert [r["step"] for r in tel] == [2, 4], [r["step"] for r in tel]
for r in tel:
    assert r["ranks"] == 2
    assert (r["sm_util_min"], r["sm_util_max"]) == (90, 91), r
    assert (r["power_w_min"], r["power_w_max"]) == (350, 351), r
    assert (r["temp_c_min"], r["temp_c_max"]) == (60, 61), r
    # (the log keeps 10 significant digits)
    assert abs(r["mem_used_bytes_min"] / 2**30 - 10) < 1e-8 and abs(r["mem_used_bytes_max"] / 2**30 - 11) < 1e-8, r
    assert (r["sm_clock_mhz_min"], r["sm_clock_mhz_max"]) == (1880, 1980), r
print("ok")
EOF
if [ "$(tail -n 1 "$T/tel.txt")" = ok ] && grep -q '^gpu      2/4 | .*90\.\.91' "$T/tel.out"; then
  ok telemetry_minmax_across_ranks
else
  fail telemetry_minmax_across_ranks "$(tail -n 2 "$T/tel.txt") $(grep '^gpu' "$T/tel.out" | head -n 1)"
fi

# 3. Rollback. NaN gradients at steps 6 and 7 with --max-bad-steps 2: after
# step 7 the run reloads the checkpoint of step 4 and trains steps 5-8 on the
# data after step 7. A run resumed from a copy of that checkpoint whose data
# position is moved to the same place (7 steps x 4 windows) must give the
# same losses and bit-identical final weights: the reload restored the
# parameters and optimizer state exactly.
#
# rollback_and_resume DIR FROM TO CMD... [-- ARGS...]: the rolled-back run of
# CMD (ARGS only for it) into DIR/rb.out and DIR/rb.bin, checkpoints in
# DIR/ck; then CMD resumed from a copy of its step-4 checkpoint whose
# train_position FROM is moved to TO, into DIR/moved.out, DIR/moved.bin and
# DIR/moved_log/metrics.jsonl.
# Sets rb_rc to the rolled-back run's exit status.
# move_position FILE FROM TO: the data position FROM of a manifest moved to
# TO (with its epoch and window), sealed again.
move_position() {
  [ -f "$1" ] || return
  "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys
p, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = open(p).read()
W = json.loads(t)["data"]["windows_per_epoch"]
f = '"train_position": %d, "windows_per_epoch": %d, "epoch": %d, "window_in_epoch": %d,'
assert f % (a, W, a // W, a % W) in t, t[:400]
open(p, "w").write(t.replace(f % (a, W, a // W, a % W), f % (b, W, b // W, b % W)))
EOF
  reseal_manifest "$1"
}
rollback_and_resume() {
  local dir=$1 from=$2 to=$3
  shift 3
  local cmd=() extra=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift && extra=("$@")
  mkdir -p "$dir/moved"
  TRAIN_GPT_INJECT_NAN=6,7 "${cmd[@]}" --steps 8 --checkpoint-dir "$dir/ck" --checkpoint-every 4 \
    --on-divergence rollback "${extra[@]}" --export "$dir/rb.bin" >"$dir/rb.out" 2>&1
  rb_rc=$?
  cp -r "$dir/ck/step_00000004" "$dir/moved/" 2>/dev/null
  move_position "$dir/moved/step_00000004/manifest.json" "$from" "$to"
  "${cmd[@]}" --steps 8 --checkpoint-dir "" --resume "$dir/moved/step_00000004" --export "$dir/moved.bin" \
    --log-dir "$dir/moved_log" >"$dir/moved.out" 2>&1
}
# rollback_matches_resume NAME DIR TO: the rollback happened at step 7 and the
# resumed run, from data position TO, ended with the same weights.
rollback_matches_resume() {
  local name=$1 dir=$2 to=$3
  if [ "$rb_rc" -eq 0 ] && grep -q '^rollback  | step 7: .* checkpoint of step 4' "$dir/rb.out" &&
     grep -q "data position $to\$" "$dir/moved.out" && cmp -s "$dir/rb.bin" "$dir/moved.bin"; then
    ok "$name"
  else
    fail "$name" "exit $rb_rc: $(grep -E '^(rollback|resume|train_gpt: error)' "$dir/rb.out" "$dir/moved.out" | head -n 3)"
  fi
}

small=(--device cpu --depth 2 --seq-len 64 --micro-batch 4 --sample-every 0 --val-every 0 --peak-tflops 1
       --telemetry-every 0 --max-bad-steps 2)
R=$T/rb
rollback_and_resume "$R" 16 28 "$TG" "${small[@]}" -- --keep-last 0 --log-dir "$R/log"
# "loss norm" of the steps logged after the rollback record, as step_losses prints them.
after_rollback=$("$PY" - "$R/log/metrics.jsonl" <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
at = [i for i, r in enumerate(recs) if r["type"] == "rollback"]
for r in recs[at[0] + 1 if at else len(recs):]:
    if r["type"] == "step":
        print(" ".join("nan" if v is None else "%.4f" % v for v in (r["loss"], r["grad_norm"])))
PYEOF
)
if [ $rb_rc -ne 0 ]; then
  fail rollback_reloads_checkpoint "exit $rb_rc: $(tail -n 2 "$R/rb.out")"
elif ! grep -q '^rollback  | step 7: 2 steps in a row skipped (the last for a non-finite loss or gradient norm), reaching --max-bad-steps 2: reloaded the checkpoint of step 4 (rollback 1); training goes on from step 5 with the data after step 7' "$R/rb.out"; then
  fail rollback_reloads_checkpoint "no rollback line: $(grep -A1 '^step     7' "$R/rb.out")"
elif ! grep -q 'data position 28$' "$R/moved.out" || [ "$(step_losses "$R/moved_log" | wc -l)" -ne 4 ] ||
     [ "$after_rollback" != "$(step_losses "$R/moved_log")" ]; then
  fail rollback_reloads_checkpoint "losses after the rollback differ from the resumed run: $(echo $after_rollback) vs $(step_losses "$R/moved_log" | tr '\n' ' ')"
elif ! cmp -s "$R/rb.bin" "$R/moved.bin"; then
  fail rollback_reloads_checkpoint "final weights differ from the resumed run's"
else
  ok rollback_reloads_checkpoint
fi
"$PY" - "$R/log/metrics.jsonl" >"$T/rbj.txt" 2>&1 <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
rb = [r for r in recs if r["type"] == "rollback"]
assert rb == [{"type": "rollback", "step": 7, "to_step": 4, "bad_in_row": 2, "rollbacks": 1}], rb
steps = [r for r in recs if r["type"] == "step"]
assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6, 7, 5, 6, 7, 8], [r["step"] for r in steps]
assert [r["rollbacks"] for r in steps] == [0] * 7 + [1] * 4
assert steps[-1]["tokens"] == 11 * 256, steps[-1]["tokens"]  # every batch read, the rolled-back ones too
s = recs[-1]
assert s["type"] == "summary" and s["status"] == "ok" and s["rollbacks"] == 1 and s["skipped_steps"] == 2, s
print("ok")
PYEOF
if [ "$(tail -n 1 "$T/rbj.txt")" = ok ] && grep -q '^summary   | 11 steps in .* | 2 skipped (2 non-finite, 0 loss spikes) | 1 rollback |' "$R/rb.out"; then
  ok rollback_logged
else
  fail rollback_logged "$(tail -n 2 "$T/rbj.txt") $(grep '^summary' "$R/rb.out")"
fi

# FP8 with delayed scaling: the scales and amax histories go back to the
# checkpoint's too (the skipped steps recorded non-finite gradient amaxes).
rollback_and_resume "$T/rb8" 16 28 "$TG" "${small[@]}" --precision fp8 --fp8-recipe delayed --fp8-amax-history 4 \
  -- --keep-last 0
rollback_matches_resume rollback_fp8_delayed_scaling "$T/rb8" 28

# The same on 2 ranks at ZeRO-3 (sharded parameters: the gathered copies the
# skipped steps left behind must not outlive the reload).
z3=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --batch-tokens 128 --val-every 0 --sample-every 0 --threads 1
    --peak-tflops 1 --telemetry-every 0 --max-bad-steps 2 --zero 3)
rollback_and_resume "$T/rbz" 16 28 "${MPI[@]}" -np 2 "$TG" "${z3[@]}"
rollback_matches_resume rollback_two_ranks_zero3 "$T/rbz" 28

# The CUDA backend in BF16 on a simulated GPU: the reload from device memory.
if [ -x "$SIM_TG" ]; then
  simrb=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --batch-tokens 64 --val-every 0
         --sample-every 0 --device cuda --precision bf16 --peak-tflops 1 --telemetry-every 0 --max-bad-steps 2)
  rollback_and_resume "$T/rbs" 8 14 "$SIM_TG" "${simrb[@]}"
  rollback_matches_resume rollback_sim_cuda_bf16 "$T/rbs" 14
fi

# The same checkpoint reloaded more than --max-rollbacks times: stop.
expect_error rollback_limit_stops 'step 7: 2 steps in a row skipped \(the last for a non-finite loss or gradient norm\) after 1 rollbacks to the checkpoint of step 4 \(--max-rollbacks 1\); the run diverges again from it: stopping' \
  env TRAIN_GPT_INJECT_NAN=6,7,6,7 "$TG" "${small[@]}" --steps 8 --checkpoint-dir "$T/ck2" --checkpoint-every 4 \
  --on-divergence rollback --max-rollbacks 1
# Divergence before the first checkpoint: nothing to go back to.
expect_error rollback_without_checkpoint "step 3: 2 steps in a row skipped .*; --on-divergence rollback: no complete checkpoint in '.*ck3' to go back to \(the first is written at step 4\)" \
  env TRAIN_GPT_INJECT_NAN=2,3 "$TG" "${small[@]}" --steps 8 --checkpoint-dir "$T/ck3" --checkpoint-every 4 \
  --on-divergence rollback
# Stop mode (the default) keeps the message naming the step.
expect_error divergence_stop 'step 7: 2 steps in a row skipped \(the last for a non-finite loss or gradient norm\), reaching --max-bad-steps 2; stopping' \
  env TRAIN_GPT_INJECT_NAN=6,7 "$TG" "${small[@]}" --steps 8 --checkpoint-dir "$T/ck4" --checkpoint-every 4 \
  --on-divergence stop

# Flag errors, before any training.
expect_error bad_on_divergence "--on-divergence 'later' is not one of stop, rollback" "$TG" "${tiny[@]}" --on-divergence later
expect_error bad_max_rollbacks '--max-rollbacks must be at least 1' "$TG" "${tiny[@]}" --max-rollbacks 0
expect_error rollback_needs_checkpoint_dir '--on-divergence rollback needs checkpoints to go back to, and --checkpoint-dir is empty' \
  "$TG" "${tiny[@]}" --on-divergence rollback --checkpoint-dir ''
expect_error rollback_needs_checkpoint_every '--on-divergence rollback needs --checkpoint-every above 0' \
  "$TG" "${tiny[@]}" --on-divergence rollback --checkpoint-dir "$T/ck5"
expect_error rollback_needs_max_bad_steps '--on-divergence rollback needs --max-bad-steps above 0' \
  "$TG" "${tiny[@]}" --on-divergence rollback --checkpoint-dir "$T/ck5" --checkpoint-every 2 --max-bad-steps 0

finish
