#!/usr/bin/env bash
# test_checkpoint_dir.sh: what a run checks about its checkpoints before and
# while it trains: a manifest that was edited or disagrees with its directory
# is refused, an unwritable directory fails before training, a second run in
# the same directory fails naming the first (a dead run's lock is taken
# over), a stop signal does not wait for a whole validation, sample or eval, a
# failed first save does not claim older checkpoints, and what a kill left
# of a prune is removed by the next run.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
d1=(--device cpu --seq-len 32 --micro-batch 2 --sample-every 0 --threads 1 --peak-tflops 1 --depth 1 --val-every 0)

# 1. Manifests: an edit of one field is refused (the seal), through --resume
# DIR and --resume auto; a manifest in a directory named for another step too.
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/base" --checkpoint-every 10 --keep-last 0 >/dev/null 2>&1
edit() {  # edit FROM TO: a copy of base with FROM replaced by TO in step 20's manifest
  rm -rf "$T/e" && cp -r "$T/base" "$T/e"
  sed -i "s/$1/$2/" "$T/e/step_00000020/manifest.json"
  grep -q "$2" "$T/e/step_00000020/manifest.json" || echo "# edit $1 -> $2 did not apply"
}
edit '"adam_step": 20' '"adam_step": 21'
expect_error manifest_edit_refused "--resume .*step_00000020: .*manifest.json: seal mismatch: .*edited or damaged" \
  "$TG" "${d1[@]}" --steps 30 --checkpoint-dir "$T/e" --resume "$T/e/step_00000020"
edit '"train_position": 40' '"train_position": 41'
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/e" --keep-last 0 >"$T/e.log" 2>&1
if [ "$(resumed_from "$T/e.log")" = 10 ] && grep -q 'warning: .*step_00000020/manifest.json: seal mismatch.*skipping checkpoint step 20' "$T/e.log"; then
  ok manifest_edit_skipped_by_auto
else
  fail manifest_edit_skipped_by_auto "resumed from '$(resumed_from "$T/e.log")': $(grep -E 'warning|error' "$T/e.log" | head -n 2)"
fi
rm -rf "$T/moved" && mkdir "$T/moved" && cp -r "$T/base/step_00000020" "$T/moved/step_00000025"
expect_error resume_dir_of_other_step "--resume .*step_00000025: .*records step 20, but the directory is for step 25" \
  "$TG" "${d1[@]}" --steps 30 --checkpoint-dir "$T/x" --resume "$T/moved/step_00000025"
# (a copy under another name is fine)
cp -r "$T/base/step_00000020" "$T/moved/best"
"$TG" "${d1[@]}" --steps 21 --checkpoint-dir "$T/x" --resume "$T/moved/best" >"$T/best.log" 2>&1
if [ "$(resumed_from "$T/best.log")" = 20 ]; then ok resume_dir_any_name
else fail resume_dir_any_name "$(grep -E 'resume|error' "$T/best.log" | head -n 2)"; fi

# 2. An unwritable checkpoint directory fails before the first step.
expect_error dir_not_creatable "--checkpoint-dir /proc/nowhere/ckpt is not writable \(cannot create it: .*\); checked before training" \
  "$TG" "${d1[@]}" --steps 2 --checkpoint-dir /proc/nowhere/ckpt
expect_error dir_not_writable "--checkpoint-dir /proc/self/fdinfo is not writable \(cannot write a file there: .*\); checked before training" \
  "$TG" "${d1[@]}" --steps 2 --checkpoint-dir /proc/self/fdinfo
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$T/ro" && chmod 555 "$T/ro"
  expect_error dir_read_only "--checkpoint-dir .*ro is not writable \(cannot write a file there: Permission denied\)" \
    "$TG" "${d1[@]}" --steps 2 --checkpoint-dir "$T/ro"
else
  echo "# dir_read_only not run: as root, a mode 555 directory is writable (the /proc cases cover the path)"
fi
"$TG" "${d1[@]}" --steps 2 --checkpoint-dir /proc/self/fdinfo >"$T/ro.log" 2>&1
if ! grep -q '^step ' "$T/ro.log"; then ok dir_checked_before_training
else fail dir_checked_before_training "it trained first: $(grep -c '^step ' "$T/ro.log") steps"; fi

# 3. One run per directory: a second one fails naming the holder; the first
# is unharmed (stops on SIGTERM with its checkpoint, exit 0, and says so in
# $TRAIN_GPT_STOP_FILE for the launcher); its lock is gone afterwards, and a
# lock left by a dead process is taken over.
TRAIN_GPT_STOP_FILE="$T/stopped" "$TG" "${d1[@]}" --steps 1000000 --checkpoint-dir "$T/l" >"$T/l1.log" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q '^step ' "$T/l1.log" && break; sleep 0.1; done
expect_error second_run_refused "--checkpoint-dir .*/l is in use by another run \(host $(hostname), pid $first, holding .*/l/train_gpt.lock\)" \
  "$TG" "${d1[@]}" --steps 5 --checkpoint-dir "$T/l"
kill -TERM "$first"
wait "$first"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^stop .*SIGTERM' "$T/l1.log" && [ -f "$(ls -d "$T"/l/step_* | tail -n 1)/manifest.json" ] &&
   [ ! -e "$T/l/train_gpt.lock" ] && [ "$(cat "$T/stopped")" = "step $(ls "$T/l" | tail -n 1 | sed 's/step_0*//') $T/l/$(ls "$T/l" | tail -n 1)" ]; then
  ok first_run_unharmed_lock_released
else
  fail first_run_unharmed_lock_released "rc $rc; $(ls "$T/l"); $(grep -E 'error|stop' "$T/l1.log" | head -n 2)"
fi
dead=$(sh -c 'echo $$')  # a pid that no longer runs
echo "$(hostname) $dead" >"$T/l/train_gpt.lock"
"$TG" "${d1[@]}" --steps 3 --checkpoint-dir "$T/l" --resume never >"$T/l2.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ ! -e "$T/l/train_gpt.lock" ]; then ok stale_lock_taken_over
else fail stale_lock_taken_over "rc $rc: $(grep error "$T/l2.log")"; fi

# 4. A stop signal during a long validation (or sample, or multiple-choice
# eval) ends the run within a small part of the time the validation (sample,
# eval) takes, with a checkpoint of the steps done, no partial validation loss
# or accuracy, and no further step.
stop_during() {  # stop_during NAME FLAGS...: exit time after SIGTERM vs. the run uninterrupted
  local name=$1
  shift
  local t0 t1 t2 t3 rc
  t0=$(date +%s.%N)
  "$TG" "${d1[@]}" --steps 1 "$@" >"$T/$name.full.log" 2>&1
  t1=$(date +%s.%N)
  "$TG" "${d1[@]}" --steps 3 "$@" --checkpoint-dir "$T/$name" >"$T/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do grep -q '^step ' "$T/$name.log" && break; sleep 0.05; done
  sleep 0.5
  t2=$(date +%s.%N)
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  t3=$(date +%s.%N)
  local full stop
  full=$(echo "$t1 - $t0" | bc)
  stop=$(echo "$t3 - $t2" | bc)
  echo "# $name: uninterrupted run ${full}s (one step and the long part), exit after SIGTERM ${stop}s"
  if [ "$rc" -eq 0 ] && awk -v s="$stop" -v f="$full" 'BEGIN { exit !(s * 4 < f) }' &&
     grep -q '^stop .*SIGTERM after step 1: checkpoint in' "$T/$name.log" &&
     [ -f "$T/$name/step_00000001/manifest.json" ] && ! grep -qE '^(val|eval) ' "$T/$name.log" && ! grep -q '^step +2/' "$T/$name.log"; then
    ok "$name"
  else
    fail "$name" "rc $rc, exit ${stop}s vs ${full}s; $(grep -E '^(stop|val|step)' "$T/$name.log" | tail -n 3)"
  fi
}
stop_during sigterm_during_validation --val-every 1 --val-batches 0 --seq-len 64 --micro-batch 4 --depth 2
stop_during sigterm_during_sample --sample-every 1 --sample-tokens 2500 --depth 2
# (the first 120 examples of the bundled eval file: enough to take seconds)
"$PY" - data/kjv/kjv_eval.bin "$T/eval120.bin" <<'PY'
import sys, numpy as np
raw = open(sys.argv[1], "rb").read()
h = np.frombuffer(raw[:1024], dtype=np.int32).copy()
body = np.frombuffer(raw[1024:], dtype=np.uint16)
pos = 0
for _ in range(120):
    pos += int(body[pos + 1]) // 2
h[2] = 120
open(sys.argv[2], "wb").write(h.tobytes() + body[:pos].tobytes())
PY
stop_during sigterm_during_eval --eval-data "$T/eval120.bin" --eval-every 1 --micro-batch 4 --seq-len 128 --depth 1

# 5. A failed first save says that there is no older checkpoint; a failed
# later one that there is.
TRAIN_GPT_DISK_FULL_AT=10 "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/full" --checkpoint-every 10 >"$T/full.log" 2>&1
expect_line() { if grep -q "$2" "$3"; then ok "$1"; else fail "$1" "$(grep error "$3")"; fi; }
expect_line failed_first_save_no_older "checkpoint of step 10: .*No space left on device; there is no older checkpoint" "$T/full.log"
TRAIN_GPT_DISK_FULL_AT=20 "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/full" --checkpoint-every 10 >"$T/full2.log" 2>&1
expect_line failed_later_save_older_intact "checkpoint of step 20: .*No space left on device; older checkpoints are intact" "$T/full2.log"

# 6. A kill in the middle of a prune (step 10's manifest deleted, its files
# not) leaves step 10 behind; the next run removes it, even with nothing to train.
(TRAIN_GPT_CRASH_AT="mid-prune@20" "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/p" --checkpoint-every 10 --keep-last 1
 exit $?) >/dev/null 2>&1
before=$(cd "$T/p" && ls -d step_* | tr '\n' ' ')
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/p" --checkpoint-every 10 --keep-last 1 >"$T/p2.log" 2>&1
after=$(cd "$T/p" && ls -d step_* | tr '\n' ' ')
if [ "$before" = "step_00000010 step_00000020 " ] && [ "$after" = "step_00000020 " ] &&
   grep -q '^ckpt .*removed .*step_00000010: no manifest' "$T/p2.log" && ! grep -q 'warning' "$T/p2.log"; then
  ok half_pruned_removed
else
  fail half_pruned_removed "before '$before', after '$after': $(grep -E 'ckpt|warning' "$T/p2.log" | head -n 2)"
fi
finish
