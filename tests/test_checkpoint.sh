#!/usr/bin/env bash
# test_checkpoint.sh: checkpoints through the real binary: resuming continues
# bit for bit, a crash at any stage of a save or a full disk never leaves a
# checkpoint that a restart would take, damaged checkpoints are detected and
# skipped, SIGTERM/SIGINT end a run with a checkpoint, background saves write
# the same bytes, old checkpoints are pruned, final weights reach --model-dir,
# a sealed manifest contradicting its run's own flags is refused.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
# Tiny models: depth 2 where per-layer units matter, depth 1 elsewhere.
# (--peak-tflops: no sgemm measurement at start-up, a quarter of a tiny run's time)
common=(--device cpu --seq-len 32 --micro-batch 2 --sample-every 0 --threads 1 --peak-tflops 1)
d1=("${common[@]}" --depth 1 --val-every 0)
d2=("${common[@]}" --depth 2 --val-every 5 --val-batches 2)

newest_complete() { ls -d "$1"/step_* 2>/dev/null | sort | while read -r d; do [ -f "$d/manifest.json" ] && echo "${d##*/}"; done | tail -n 1; }

# 1. Resume parity: 20 steps straight (saving at 10 and 20) against the
# checkpoint of step 10 resumed for the last 10 steps, with gradient
# accumulation and validation on: the same losses, norms and validation
# losses after step 10, and the same final weights, bit for bit.
"$TG" "${d2[@]}" --batch-tokens 128 --steps 20 --checkpoint-dir "$T/p" --checkpoint-every 10 --keep-last 0 \
  --export "$T/p_straight.bin" --log-dir "$T/p1" >"$T/p1.log" 2>&1
"$TG" "${d2[@]}" --batch-tokens 128 --steps 20 --checkpoint-dir "$T/p_resumed" --resume "$T/p/step_00000010" \
  --export "$T/p_resumed.bin" --log-dir "$T/p2" >"$T/p2.log" 2>&1
if [ "$(resumed_from "$T/p2.log")" = 10 ] && [ "$(lines_after "$T/p1" 10 | wc -l)" -eq 12 ] &&
   [ "$(lines_after "$T/p1" 10)" = "$(lines_after "$T/p2" 10)" ] &&
   cmp -s "$T/p_straight.bin" "$T/p_resumed.bin"; then
  ok resume_parity_fp32
else
  fail resume_parity_fp32 "resumed run differs: $(diff <(lines_after "$T/p1" 10) <(lines_after "$T/p2" 10) | head -n 4)"
fi
# The checkpoint's model.bin is an llm.c model file with the final weights.
if cmp -s "$T/p/step_00000020/model.bin" "$T/p_straight.bin"; then ok checkpoint_weights_are_llmc_file
else fail checkpoint_weights_are_llmc_file "step_00000020/model.bin differs from --export of the same step"; fi

# 2. The manifest records what a resume and a reader need, and every file's size.
if "$PY" - "$T/p/step_00000020" "$TG" >"$T/manifest_check.txt" 2>&1 <<'EOF'
import json, os, re, subprocess, sys
d, tg = sys.argv[1], sys.argv[2]
text = open(os.path.join(d, "manifest.json")).read()
m = json.loads(text)
assert m["format"] == "train_gpt checkpoint" and m["version"] == 2
# sealed: the last member, on its own line (the C tests check the hash itself)
assert re.search(r'\n  "manifest_xxh3": "[0-9a-f]{16}"\n}\n$', text) and list(m)[-1] == "manifest_xxh3", text[-80:]
assert m["step"] == 20 and m["adam_step"] == 20, (m["step"], m["adam_step"])
assert m["world"] == 1 and m["layout_world"] == 1 and m["zero_stage"] == 1 and m["precision"] == "fp32"
assert "fp8" in m and m["rng"]["seed"] == 1337 and m["rng"]["step"] == 20
assert m["data"]["train_position"] == 20 * 2 * 2, m["data"]  # 20 steps x 2 micro-steps x 2 windows
W = m["data"]["windows_per_epoch"]
assert (m["data"]["epoch"], m["data"]["window_in_epoch"]) == (80 // W, 80 % W), m["data"]
assert m["model"] == {"arch": "gpt2", "layers": 2, "channels": 128, "heads": 2, "kv_heads": 2, "mlp_hidden": 512,
                      "tie_embeddings": 1, "rope_theta": 0, "rope_scaling": 0, "vocab_size": 4096, "padded_vocab_size": 4096, "max_seq_len": 32}, m["model"]
names = sorted(f["name"] for f in m["files"])
assert names == ["model.bin", "shard_00000_of_00001.bin"], names
for f in m["files"]:
    assert os.path.getsize(os.path.join(d, f["name"])) == f["bytes"], f
    assert re.fullmatch(r"[0-9a-f]{16}", f["xxh3"]), f
assert sorted(os.listdir(d)) == sorted(names + ["manifest.json"]), os.listdir(d)
flags = set(re.findall(r"^  --([a-z0-9-]+) ", subprocess.run([tg, "--help"], capture_output=True, text=True).stdout, re.M)) - {"help"}
assert flags == set(m["config"]), flags ^ set(m["config"])
assert m["config"]["batch-tokens"] == 128 and m["config"]["checkpoint-every"] == 10
print("manifest ok")
EOF
then ok manifest_contents; else fail manifest_contents "$(tail -n 3 "$T/manifest_check.txt")"; fi

# 3. Keep-last: only the newest K complete checkpoints remain.
"$TG" "${d1[@]}" --steps 25 --checkpoint-dir "$T/k" --checkpoint-every 5 --keep-last 2 >"$T/k.log" 2>&1
kept=$(cd "$T/k" && ls -d step_* | tr '\n' ' ')
if [ "$kept" = "step_00000020 step_00000025 " ] && [ "$(grep -c '^ckpt ' "$T/k.log")" -eq 5 ]; then ok keep_last_prunes
else fail keep_last_prunes "left: $kept"; fi

# 4. Auto-resume after a completed run: nothing left to train, nothing rewritten.
"$TG" "${d1[@]}" --steps 25 --checkpoint-dir "$T/k" --checkpoint-every 5 --keep-last 2 --log-dir "$T/k2" >"$T/k2.log" 2>&1
if [ "$(resumed_from "$T/k2.log")" = 25 ] && [ "$(steps_logged "$T/k2")" -eq 0 ] && ! grep -q '^ckpt ' "$T/k2.log" &&
   grep -q 'nothing left to train' "$T/k2.log"; then
  ok auto_resume_finished_run
else
  fail auto_resume_finished_run "$(grep -E '^(resume|ckpt|step)' "$T/k2.log" | head -n 3)"
fi

# 5. A crash (SIGKILL) at every stage of a save: the next start takes the
# newest complete checkpoint, never a half-written one, and the run ends
# with exactly the weights of a run that never crashed.
"$TG" "${d1[@]}" --steps 30 --export "$T/c_ref.bin" >/dev/null 2>&1
for case in mid-shard:10 before-manifest:10 mid-manifest:10 after-manifest:20 mid-prune:20; do
  stage=${case%:*}
  want=${case#*:}
  dir="$T/c_$stage"
  # (in a subshell, so that the shell's "Killed" notice goes to the log)
  (TRAIN_GPT_CRASH_AT="$stage@20" "$TG" "${d1[@]}" --steps 30 --checkpoint-dir "$dir" --checkpoint-every 10 --keep-last 1
   exit $?) >"$T/c1_$stage.log" 2>&1
  rc1=$?
  after_crash=$(newest_complete "$dir")
  "$TG" "${d1[@]}" --steps 30 --checkpoint-dir "$dir" --checkpoint-every 10 --keep-last 1 --export "$T/c_$stage.bin" \
    >"$T/c2_$stage.log" 2>&1
  rc2=$?
  from=$(resumed_from "$T/c2_$stage.log")
  left=$(cd "$dir" && ls -d step_* | tr '\n' ' ')
  if [ "$rc1" -eq 137 ] && [ "$after_crash" = "step_000000$want" ] && [ "$rc2" -eq 0 ] && [ "$from" = "$want" ] &&
     cmp -s "$T/c_ref.bin" "$T/c_$stage.bin" && [ "$left" = "step_00000030 " ]; then
    ok "crash_${stage}_resumes_from_complete"
  else
    fail "crash_${stage}_resumes_from_complete" "crash rc $rc1, newest complete after crash '$after_crash', resume rc $rc2 from '$from' (want $want), left '$left'; $(grep -E 'error|warning' "$T/c2_$stage.log" | head -n 2)"
  fi
done
# A rerun that saves the same step again clears what the interrupted save left.
rm -rf "$T/c_again"
(TRAIN_GPT_CRASH_AT="mid-shard@20" "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/c_again" --checkpoint-every 10
 exit $?) >/dev/null 2>&1
had_temp=$(find "$T/c_again/step_00000020" -name '*.tmp.*' | wc -l)
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/c_again" --checkpoint-every 10 >/dev/null 2>&1
if [ "$had_temp" -eq 1 ] && [ "$(cd "$T/c_again/step_00000020" && echo *)" = "manifest.json model.bin shard_00000_of_00001.bin" ]; then
  ok crash_leftovers_cleared
else
  fail crash_leftovers_cleared "temporary files before: $had_temp; after: $(cd "$T/c_again/step_00000020" && echo *)"
fi
# The interrupted save is reported in one warning line naming its manifest.
if grep -q 'warning: .*step_00000020/manifest.json: missing (the save of this checkpoint did not finish)' "$T/c2_mid-shard.log"; then
  ok crash_reported
else
  fail crash_reported "$(grep warning "$T/c2_mid-shard.log")"
fi

# 6. Damaged checkpoints: each problem is reported in one warning line that
# names the file, and the previous checkpoint is used.
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/base" --checkpoint-every 10 --keep-last 0 >/dev/null 2>&1
"$TG" "${common[@]}" --depth 2 --val-every 0 --steps 1 \
  --checkpoint-dir "$T/other" >/dev/null 2>&1
damage() {  # damage NAME: a fresh copy of the base checkpoints with step 20 broken in one way
  rm -rf "$T/dmg" && cp -r "$T/base" "$T/dmg"
  local s20="$T/dmg/step_00000020" shard="$T/dmg/step_00000020/shard_00000_of_00001.bin"
  case $1 in
    flipped_byte) "$PY" -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(100000); b=f.read(1); f.seek(100000); f.write(bytes([b[0]^1]))" "$shard" ;;
    flipped_weights) "$PY" -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(5000); b=f.read(1); f.seek(5000); f.write(bytes([b[0]^0x40]))" "$s20/model.bin" ;;
    truncated_shard) truncate -s 50000 "$shard" ;;
    missing_shard) rm "$shard" ;;
    other_config) cp "$T/other/step_00000001/manifest.json" "$s20/manifest.json" ;;
    broken_json) truncate -s 300 "$s20/manifest.json" ;;
  esac
}
for case in "flipped_byte:shard_00000_of_00001.bin: checksum mismatch" "flipped_weights:model.bin: checksum mismatch" \
            "truncated_shard:shard_00000_of_00001.bin: 50000 bytes, the manifest lists [0-9]+ \(truncated\)" \
            "missing_shard:shard_00000_of_00001.bin: missing" \
            "other_config:manifest.json: written for another model \(layers 2, channels 128" \
            "broken_json:manifest.json: not valid JSON"; do
  name=${case%%:*}
  pattern=${case#*:}
  damage "$name"
  "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/dmg" --keep-last 0 >"$T/dmg_$name.log" 2>&1
  rc=$?
  warnings=$(grep -c 'warning:' "$T/dmg_$name.log")
  if [ "$rc" -eq 0 ] && [ "$(resumed_from "$T/dmg_$name.log")" = 10 ] && [ "$warnings" -eq 1 ] &&
     grep 'warning:' "$T/dmg_$name.log" | grep -Eq "step_00000020/$pattern.*skipping checkpoint step 20"; then
    ok "damaged_${name}_falls_back"
  else
    fail "damaged_${name}_falls_back" "rc $rc, resumed from '$(resumed_from "$T/dmg_$name.log")', $warnings warnings: $(grep -E 'warning|error' "$T/dmg_$name.log" | head -n 2)"
  fi
done
# The fallback run replaced the damaged step 20 with a good one: identical
# to the original, since training from step 10 is deterministic.
if cmp -s "$T/dmg/step_00000020/shard_00000_of_00001.bin" "$T/base/step_00000020/shard_00000_of_00001.bin"; then
  ok damaged_checkpoint_rewritten
else
  fail damaged_checkpoint_rewritten "step 20 after the fallback run differs from the original"
fi
# --resume naming a damaged checkpoint: a clear error, no training.
damage flipped_byte
expect_error resume_path_damaged "step_00000020/shard_00000_of_00001.bin: checksum mismatch" \
  "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/dmg" --resume "$T/dmg/step_00000020"
# Every complete checkpoint damaged: auto refuses to start over on top of them.
damage other_config
cp "$T/other/step_00000001/manifest.json" "$T/dmg/step_00000010/manifest.json"
expect_error resume_auto_none_usable "none of the 2 complete checkpoints in '.*dmg' is usable" \
  "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/dmg"
expect_error resume_path_missing "--resume '.*nowhere' is not auto, never, or an existing checkpoint directory" \
  "$TG" "${d1[@]}" --steps 2 --resume "$T/nowhere"
expect_error resume_path_not_checkpoint "--resume .*: .*manifest.json: missing \(not a complete checkpoint\)" \
  "$TG" "${d1[@]}" --steps 2 --resume "$T"
expect_error bad_checkpoint_every "--checkpoint-every must not be negative" "$TG" "${d1[@]}" --checkpoint-every -1
expect_error bad_keep_last "--keep-last must not be negative" "$TG" "${d1[@]}" --keep-last -2
expect_error bad_crash_hook "TRAIN_GPT_CRASH_AT='mid-lunch' is not STAGE" env TRAIN_GPT_CRASH_AT=mid-lunch "$TG" "${d1[@]}" --steps 1

# 7. --resume never on a directory with checkpoints: warns, starts at step 0.
"$TG" "${d1[@]}" --steps 3 --checkpoint-dir "$T/base" --resume never --keep-last 0 --log-dir "$T/never" >"$T/never.log" 2>&1
if grep -q 'warning: --resume never: .*base already holds checkpoints (newest: step 20)' "$T/never.log" &&
   jsonl_lines "$T/never" | grep -q '^step 1/3 ' && ! grep -q '^resume' "$T/never.log"; then
  ok resume_never_starts_over
else
  fail resume_never_starts_over "$(grep -E 'warning|resume|^step' "$T/never.log" | head -n 3)"
fi

# 8. Disk full during a save (the ENOSPC hook, and a real small tmpfs where
# this machine lets us mount one): a clear error, the older checkpoint intact.
TRAIN_GPT_DISK_FULL_AT=20 "$TG" "${d1[@]}" --steps 30 --checkpoint-dir "$T/full" --checkpoint-every 10 --keep-last 1 \
  >"$T/full.log" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "error: checkpoint of step 20: writing '.*step_00000020/shard_00000_of_00001.bin' failed: No space left on device; older checkpoints are intact" "$T/full.log" &&
   [ "$(cd "$T/full" && ls -d step_* | tr '\n' ' ')" = "step_00000010 " ] &&
   "$TG" "${d1[@]}" --steps 10 --checkpoint-dir "$T/full" >"$T/full2.log" 2>&1 && [ "$(resumed_from "$T/full2.log")" = 10 ]; then
  ok disk_full_clear_error
else
  fail disk_full_clear_error "rc $rc: $(grep error "$T/full.log")"
fi
mkdir -p "$T/tmpfs"
if mount -t tmpfs -o size=7m tmpfs "$T/tmpfs" 2>/dev/null; then
  # One depth-1 checkpoint is 4.5 MiB: the first fits, the second does not.
  "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/tmpfs/ck" --checkpoint-every 10 --keep-last 1 >"$T/tmpfs.log" 2>&1
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q 'No space left on device; older checkpoints are intact' "$T/tmpfs.log" &&
     [ "$(newest_complete "$T/tmpfs/ck")" = step_00000010 ] && ! ls "$T/tmpfs/ck/step_00000020" >/dev/null 2>&1; then
    ok disk_full_real_tmpfs
  else
    fail disk_full_real_tmpfs "rc $rc: $(grep error "$T/tmpfs.log")"
  fi
  umount "$T/tmpfs"
else
  echo "# disk_full_real_tmpfs not run: mounting a tmpfs is not permitted here (the ENOSPC hook case above covers the path)"
fi

# 9. SIGTERM mid-run: the current step ends, a checkpoint is written, exit 0;
# resuming continues exactly (constant LR, so any --steps gives one schedule).
long=("${d1[@]}" --warmup 0 --lr-final-frac 1 --checkpoint-every 0)
run_until_steps() {  # run_until_steps LOG N SIGNAL ARGS...: start, wait for N step lines, signal; sets pid
  local log=$1 n=$2 sig=$3
  shift 3
  "$@" >"$log" 2>&1 &
  pid=$!
  local lines
  for _ in $(seq 1 600); do
    lines=$(grep -c '^step ' "$log" 2>/dev/null)
    [ "${lines:-0}" -ge "$n" ] && break
    sleep 0.05
  done
  kill "-$sig" "$pid"
}
run_until_steps "$T/term.log" 5 TERM "$TG" "${long[@]}" --steps 100000 --checkpoint-dir "$T/term" --log-dir "$T/term_l"
wait "$pid"
rc=$?
S=$(grep -E '^stop ' "$T/term.log" | sed -E 's/.*after step ([0-9]+):.*/\1/')
last=$(last_step "$T/term_l")
if [ "$rc" -eq 0 ] && [ -n "$S" ] && [ "$S" = "$last" ] && [ "$(newest_complete "$T/term")" = "$(printf 'step_%08d' "$S")" ]; then
  ok sigterm_checkpoints_and_exits_0
else
  fail sigterm_checkpoints_and_exits_0 "rc $rc, stop after '$S', last step '$last', newest '$(newest_complete "$T/term")'"
fi
E=$((S + 4))
"$TG" "${long[@]}" --steps "$E" --checkpoint-dir "$T/term" --export "$T/term_resumed.bin" --log-dir "$T/term2" >"$T/term2.log" 2>&1
"$TG" "${long[@]}" --steps "$E" --export "$T/term_straight.bin" --log-dir "$T/term3" >"$T/term3.log" 2>&1
if [ "$(resumed_from "$T/term2.log")" = "$S" ] && [ "$(lines_after "$T/term2" "$S" | wc -l)" -eq 4 ] &&
   [ "$(lines_after "$T/term2" "$S")" = "$(lines_after "$T/term3" "$S")" ] &&
   cmp -s "$T/term_resumed.bin" "$T/term_straight.bin"; then
  ok sigterm_resume_exact
else
  fail sigterm_resume_exact "resumed from '$(resumed_from "$T/term2.log")' (want $S); $(diff <(lines_after "$T/term2" "$S") <(lines_after "$T/term3" "$S") | head -n 3)"
fi
# SIGINT (Ctrl-C) does the same.
run_until_steps "$T/int.log" 3 INT "$TG" "${long[@]}" --steps 100000 --checkpoint-dir "$T/int"
wait "$pid"
rc=$?
if [ "$rc" -eq 0 ] && grep -qE '^stop +\| SIGINT after step' "$T/int.log" && [ -n "$(newest_complete "$T/int")" ]; then
  ok sigint_checkpoints_and_exits_0
else
  fail sigint_checkpoints_and_exits_0 "rc $rc: $(grep -E '^stop|error' "$T/int.log")"
fi
# With background saves in flight: the stop waits for them, then saves its own step.
run_until_steps "$T/term_async.log" 5 TERM "$TG" "${long[@]}" --steps 100000 --checkpoint-dir "$T/term_async" \
  --checkpoint-every 2 --keep-last 2 --async-checkpoint 1
wait "$pid"
rc=$?
S=$(grep -E '^stop ' "$T/term_async.log" | sed -E 's/.*after step ([0-9]+):.*/\1/')
if [ "$rc" -eq 0 ] && [ -n "$S" ] && [ "$(newest_complete "$T/term_async")" = "$(printf 'step_%08d' "$S")" ] &&
   [ -z "$(find "$T/term_async" -name '*.tmp.*')" ]; then
  ok sigterm_with_background_saves
else
  fail sigterm_with_background_saves "rc $rc, stop after '$S', newest '$(newest_complete "$T/term_async")'"
fi
# A second signal exits at once, non-zero (128 + the signal), writing
# nothing. The process is stopped while both arrive, so that the second is
# sure to come before the first step ends (two pending SIGTERMs would merge
# into one: SIGTERM and SIGINT do not).
run_until_steps "$T/term_twice.log" 3 STOP "$TG" "${long[@]}" --steps 100000 --checkpoint-dir "$T/twice"
kill -TERM "$pid"
kill -INT "$pid"
kill -CONT "$pid"
wait "$pid"
rc=$?
if { [ "$rc" -eq 143 ] || [ "$rc" -eq 130 ]; } && grep -q 'second stop signal: exiting now' "$T/term_twice.log" &&
   [ -z "$(newest_complete "$T/twice")" ]; then
  ok second_signal_exits_at_once
else
  fail second_signal_exits_at_once "rc $rc (want 143 or 130): $(tail -n 2 "$T/term_twice.log")"
fi

# 10. Background saves write the very bytes of synchronous ones, and the
# training they overlap is unchanged. Both runs log into one --log-dir (moved
# away after the first), so that their manifests' flags differ only in two.
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/sync" --checkpoint-every 5 --keep-last 0 --log-dir "$T/log" \
  >"$T/sync.log" 2>&1
mv "$T/log" "$T/sync_log"
"$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/async" --checkpoint-every 5 --keep-last 0 --async-checkpoint 1 \
  --log-dir "$T/log" >"$T/async.log" 2>&1
same=1
for s in 5 10 15 20; do
  for f in shard_00000_of_00001.bin model.bin; do
    cmp -s "$T/sync/step_000000$(printf %02d "$s")/$f" "$T/async/step_000000$(printf %02d "$s")/$f" || same=0
  done
  # The manifests differ only in the two flags that differ, and so in their seals.
  [ "$(diff "$T/sync/step_000000$(printf %02d "$s")/manifest.json" "$T/async/step_000000$(printf %02d "$s")/manifest.json" |
       grep -c '^[<>]')" -eq 6 ] || same=0
done
if [ "$same" -eq 1 ] && [ "$(lines_after "$T/sync_log" 0 | wc -l)" -eq 20 ] && [ "$(lines_after "$T/sync_log" 0)" = "$(lines_after "$T/log" 0)" ] &&
   [ "$(grep -c 'written in the background' "$T/async.log")" -ge 3 ]; then
  ok async_identical_to_sync
else
  fail async_identical_to_sync "background checkpoints differ from synchronous ones"
fi

# 11. Final weights to --model-dir (and to $SM_MODEL_DIR by default), in
# llm.c's format, equal to --export.
"$TG" "${d1[@]}" --steps 3 --model-dir "$T/model" --export "$T/m_export.bin" >/dev/null 2>&1
SM_MODEL_DIR="$T/sm_model" "$TG" "${d1[@]}" --steps 3 --export-dtype bf16 --export "$T/m_export_bf16.bin" >/dev/null 2>&1
if cmp -s "$T/model/model.bin" "$T/m_export.bin" && cmp -s "$T/sm_model/model.bin" "$T/m_export_bf16.bin"; then
  ok model_dir_final_weights
else
  fail model_dir_final_weights "model.bin in --model-dir / SM_MODEL_DIR differs from --export"
fi

# 12. A sealed manifest that contradicts its run's own flags (issue 29): a
# world of 2 with one shard under --shard-scope world, a 'zero_stage' other
# than the run's --zero. Refused naming the manifest and the field.
for edit in 'world|s/"world": 1,/"world": 2,/' 'zero|s/"zero_stage": 1,/"zero_stage": 0,/'; do
  name=${edit%%|*}
  rm -rf "$T/contra_$name" && cp -r "$T/base/step_00000010" "$T/contra_$name"
  sed -i "${edit#*|}" "$T/contra_$name/manifest.json"
  reseal_manifest "$T/contra_$name/manifest.json"
done
expect_error manifest_world_2_one_shard "contra_world/manifest\.json.*'layout_world' 1 \(shards\), but 'config\.shard-scope' world cuts the model over all 'world' 2 ranks" \
  "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/contra_ck" --resume "$T/contra_world"
expect_error manifest_zero_stage_vs_flags "contra_zero/manifest\.json.*'zero_stage' 0, but the run's 'config\.zero' is 1" \
  "$TG" "${d1[@]}" --steps 20 --checkpoint-dir "$T/contra_ck" --resume "$T/contra_zero"

finish
