#!/usr/bin/env bash
# test_model_folder.sh: a model folder (--model-dir, --export-hf) is replaced
# all at once (llm/util/atomic_dir.c). A kill -9 at every file operation of a
# write over an existing folder (TRAIN_GPT_FOLDER_FAULT=N) leaves a folder
# whose model files are exactly the old ones or exactly the new ones (sha256
# of each), never a mix and never none; the folder's other files (a README,
# a subfolder) survive; leftovers of killed writes are removed by the next
# write; the same over the two-rename fallback (TRAIN_GPT_FOLDER_NO_EXCHANGE=1),
# where a kill between the renames leaves the whole old folder beside the
# missing one, which --init-from names and the next write restores. An in-place write ("." of a folder, as on a mount point) leaves the
# new model or no loadable one. Output paths that cannot be written fail
# before the first step.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
"$PY" - "$T/data.bin" <<'PY'
import sys, numpy as np
x = np.random.default_rng(3).integers(0, 64, 2049).astype(np.uint16)
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, len(x)
open(sys.argv[1], "wb").write(h.tobytes() + x.tobytes())
PY
TGA=$(cd "$(dirname "$TG")" && pwd)/$(basename "$TG")  # (one run works inside the folder)
base=("$TGA" --device cpu --threads 1 --sample-every 0 --val-every 0 --tokenizer '' --peak-tflops 1 --seq-len 16
  --micro-batch 1 --steps 1 --train-data "$T/data.bin" --checkpoint-dir '')
run=("${base[@]}" --layers 1 --channels 32 --heads 2 --vocab-size 64)

# The model files of a folder, "name sha256" a line (empty when none).
model_sums() {
  (cd "$1" 2>/dev/null && for f in config.json model.bin model.safetensors model.safetensors.index.json; do
    [ -e "$f" ] && echo "$f $(sha256sum <"$f" | cut -c1-64)"
  done)
}
# The other files (they must survive every write).
other_sums() { (cd "$1" 2>/dev/null && cat README.txt keep/notes.txt 2>/dev/null | sha256sum); }

# kill_sweep NAME FLAG...: kills the write of FLAG DIR over an old folder at
# operation 1, 2, ... until a run finishes; every killed state must hold the
# old model files or the new ones.
kill_sweep() {
  local name=$1
  shift
  "${run[@]}" --seed 1 "$@" "$T/$name.old" >"$T/$name.old.log" 2>&1 || { fail "$name" "old write failed: $(tail -n 2 "$T/$name.old.log")"; return; }
  "${run[@]}" --seed 2 "$@" "$T/$name.new" >"$T/$name.new.log" 2>&1 || { fail "$name" "new write failed: $(tail -n 2 "$T/$name.new.log")"; return; }
  echo "a tokenizer or a README the user put here" >"$T/$name.old/README.txt"
  mkdir -p "$T/$name.old/keep" && echo "notes" >"$T/$name.old/keep/notes.txt"
  : >"$T/$name.old/model.safetensors.tmp.2147483646"  # left by a killed writer of an older program
  local old new others n=0 olds=0 news=0 gaps=0 bad=""
  old=$(model_sums "$T/$name.old")
  new=$(model_sums "$T/$name.new")
  others=$(other_sums "$T/$name.old")
  if [ "$old" = "$new" ] || [ -z "$old" ]; then fail "$name" "the old and new models do not differ: $old"; return; fi
  while [ $n -lt 400 ]; do
    n=$((n + 1))
    rm -rf "$T/k" && mkdir "$T/k" && cp -a "$T/$name.old" "$T/k/m"
    { TRAIN_GPT_FOLDER_FAULT=$n "${run[@]}" --seed 2 "$@" "$T/k/m" >"$T/k.log" 2>&1; } 2>/dev/null
    local rc=$? got
    got=$(model_sums "$T/k/m")
    local at=$T/k/m
    if [ -n "${TRAIN_GPT_FOLDER_NO_EXCHANGE:-}" ] && [ ! -e "$T/k/m" ]; then
      # The fallback killed between its two renames: the old folder, whole,
      # waits as m.old-PID, and the next write puts it back first.
      at=$(find "$T/k" -mindepth 1 -maxdepth 1 -name 'm.old-*' | head -n 1)
      got=$(model_sums "$at")
      if [ "$got" = "$old" ] && [ "$(other_sums "$at")" = "$others" ]; then
        gaps=$((gaps + 1))
        # A reader is told where the folder is.
        if ! "${base[@]}" --steps 0 --init-from "$T/k/m" 2>&1 |
          grep -q "^train_gpt: error: --init-from .*/k/m does not exist, but .*/k/m\.old-[0-9]* beside it holds the folder"; then
          bad="--init-from of the missing folder (kill at operation $n) does not point at $at"
          break
        fi
        "${run[@]}" --seed 2 "$@" "$T/k/m" >"$T/k3.log" 2>&1
        if ! grep -q "warning: .*/k/m was missing .*: restored from .*/k/m.old-" "$T/k3.log" ||
          [ "$(model_sums "$T/k/m")" != "$new" ] || [ "$(find "$T/k" -mindepth 1 -maxdepth 1 -printf '%f ')" != "m " ]; then
          bad="the write after a kill at operation $n (between the renames) did not restore and replace: $(grep -E 'warning|error' "$T/k3.log" | head -n 2)"
          break
        fi
        continue
      fi
    fi
    if [ "$got" = "$old" ]; then olds=$((olds + 1)); elif [ "$got" = "$new" ]; then news=$((news + 1));
    else bad="kill at operation $n (rc $rc) left: $(echo "$got" | tr '\n' ' ')"; break; fi
    if [ "$(other_sums "$at")" != "$others" ]; then bad="kill at operation $n lost the folder's other files"; break; fi
    [ $rc -eq 0 ] && break
    [ $rc -eq 137 ] || { bad="operation $n: exit status $rc: $(tail -n 2 "$T/k.log")"; break; }
    # Half-way through: the next write finishes and cleans up after the killed one.
    if [ $n -eq 3 ]; then
      "${run[@]}" --seed 2 "$@" "$T/k/m" >"$T/k2.log" 2>&1
      local left
      left=$(find "$T/k" -mindepth 1 -maxdepth 1 -printf '%f ')$(find "$T/k/m" -name '*.tmp.*' | wc -l)
      if [ "$(model_sums "$T/k/m")" != "$new" ] || [ "$left" != "m 0" ]; then
        bad="the write after a kill at operation 3 left: $left / $(model_sums "$T/k/m" | tr '\n' ' ')"
        break
      fi
    fi
  done
  if [ -n "$bad" ]; then fail "$name" "$bad"
  elif [ "$rc" -ne 0 ] || [ $olds -lt 3 ] || [ $news -lt 1 ]; then
    fail "$name" "the sweep did not end in a finished write (rc $rc, $olds old, $news new states of $n)"
  elif [ -n "${TRAIN_GPT_FOLDER_NO_EXCHANGE:-}" ] && [ $gaps -lt 1 ]; then
    fail "$name" "no kill landed between the fallback's two renames ($n kill points)"
  else ok "$name"; echo "# $name: $n kill points, $olds left the old model, $news the new one, $gaps the old one beside"; fi
}
kill_sweep model_dir_kill_sweep --model-dir
kill_sweep export_hf_kill_sweep --export-hf
# The same over the two-rename fallback (a file system without
# renameat2(RENAME_EXCHANGE)): old or new, or the whole old folder beside a
# missing one, which the next write restores.
# (--model-dir writes both formats: every file of either kind is swept.)
export TRAIN_GPT_FOLDER_NO_EXCHANGE=1
kill_sweep model_dir_fallback_kill_sweep --model-dir
unset TRAIN_GPT_FOLDER_NO_EXCHANGE
# (Last: the folder it leaves is the one loaded below.)
kill_sweep model_dir_hf_only_kill_sweep --model-format hf --model-dir

# The new folder loads, and a GPT-2 --model-format hf folder written over a
# "both" one keeps no old model.bin.
if "${base[@]}" --steps 0 --init-from "$T/k/m" >"$T/load.log" 2>&1 && [ ! -e "$T/k/m/model.bin" ]; then
  ok model_folder_loads
else fail model_folder_loads "$(tail -n 2 "$T/load.log"; ls "$T/k/m")"; fi

# In place (a folder named ".", as a mount point is written): a kill leaves
# the old model, the new one, or nothing that loads (no config.json, no
# model.bin).
"${run[@]}" --seed 2 --export-hf "$T/inplace.new" >/dev/null 2>&1
"${run[@]}" --seed 1 --export-hf "$T/inplace.old" >/dev/null 2>&1
new=$(model_sums "$T/inplace.new")
old=$(model_sums "$T/inplace.old")
n=0 bad=""
while [ $n -lt 400 ]; do
  n=$((n + 1))
  rm -rf "$T/ip" && cp -a "$T/inplace.old" "$T/ip"
  (cd "$T/ip" && { TRAIN_GPT_FOLDER_FAULT=$n "${run[@]}" --seed 2 --export-hf . >"$T/ip.log" 2>&1; } 2>/dev/null)
  rc=$?
  got=$(model_sums "$T/ip")
  if [ "$got" != "$new" ] && [ "$got" != "$old" ] && echo "$got" | grep -qE '^(config.json|model.bin) '; then
    bad="kill at operation $n left a loadable mix: $(echo "$got" | tr '\n' ' ')"
    break
  fi
  [ $rc -eq 0 ] && break
done
if [ -z "$bad" ] && [ "$rc" -eq 0 ] && [ "$got" = "$new" ]; then ok in_place_new_or_nothing
else fail in_place_new_or_nothing "${bad:-rc $rc after $n operations}"; fi

# Unwritable outputs fail before the first step, naming the flag.
for flag in --export --export-hf --model-dir; do
  name=probe_${flag#--}
  expect_error "${name//-/_}" "^train_gpt: error: $flag /proc/nowhere/out is not writable \(cannot create /proc/nowhere: .*\); checked before training" \
    "${run[@]}" --steps 2 "$flag" /proc/nowhere/out
done
echo x >"$T/a_file"
expect_error probe_model_dir_is_file "^train_gpt: error: --model-dir $T/a_file is not writable \($T/a_file exists and is not a directory\)" \
  "${run[@]}" --steps 2 --model-dir "$T/a_file"
"${run[@]}" --steps 2 --export-hf /proc/self/fdinfo/x >"$T/ro.log" 2>&1
if ! grep -q '^step ' "$T/ro.log"; then ok probe_before_training
else fail probe_before_training "it trained first: $(grep -c '^step ' "$T/ro.log") steps"; fi
exit $((failures > 0))
