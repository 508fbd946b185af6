#!/usr/bin/env bash
# test_adam_dtype.sh: --adam-dtype bf16 (AdamW's moments stored in BF16 with
# stochastic rounding) through the real binary on the CPU backend: its loss
# tracks FP32 moments' (and is not the same run), the moments take half the
# memory, a resume from its checkpoint repeats the run bit for bit, the
# checkpoint records the moments' dtype and a resume with the other dtype
# converts them; sharded over 2 ranks at ZeRO 1-3 it gives the bits of the
# unsharded run, also when resumed from a 2-rank checkpoint on 1 rank (the rounding depends on the element index only); it runs with
# FP8 and with the Llama architecture.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
common=(--device cpu --seq-len 32 --micro-batch 2 --sample-every 0 --threads 1 --peak-tflops 1 --depth 2)
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)

# last_loss DIR: the last step's loss.
last_loss() { step_losses "$1" | tail -n 1 | cut -d' ' -f1; }
# adam_mib LOG: the planned AdamW MiB from the memory line.
adam_mib() { sed -nE 's/^memory +\| planned peak .* adam ([0-9.]+) .*/\1/p' "$1" | head -n 1; }

# 1. 40 steps with FP32 and BF16 moments from the same start: the BF16 run's
# losses stay within 0.02 of FP32's at every step (it trains as well) but
# are not all equal (the moments really were rounded), and the moments
# are billed and allocated at half.
for d in fp32 bf16; do
  "$TG" "${common[@]}" --steps 40 --val-every 0 --adam-dtype "$d" --log-dir "$T/$d" >"$T/$d.log" 2>&1 ||
    fail "run_$d" "exit status $?: $(tail -n 3 "$T/$d.log")"
done
gap=$(paste -d' ' <(step_losses "$T/fp32") <(step_losses "$T/bf16") | awk '
  { d = $1 - $3; d = d < 0 ? -d : d; if (d > m) m = d; if ($1 != $3) differ++; n++ }
  END { printf "%.4f %d %d", m, differ, n }')
read -r worst differ n <<<"$gap"
echo "# bf16 vs fp32 moments: largest loss gap $worst over $n steps, $differ steps differ;" \
  "last losses $(last_loss "$T/fp32") and $(last_loss "$T/bf16")"
if [ "$n" = 40 ] && within "$worst" 0.02 && [ "$differ" -gt 0 ] &&
   awk -v a="$(last_loss "$T/bf16")" 'BEGIN { exit !(a < 7.2) }'; then ok bf16_moments_track_fp32
else fail bf16_moments_track_fp32 "gap $worst over $n steps, $differ differ, last loss $(last_loss "$T/bf16")"; fi
a32=$(adam_mib "$T/fp32.log") a16=$(adam_mib "$T/bf16.log")
if awk -v a="$a32" -v b="$a16" 'BEGIN { exit !(b > 0 && a > 0 && b < 0.51 * a) }' &&
   grep -Eq '^memory +\| peak allocated .* as planned' "$T/bf16.log"; then ok bf16_moments_half_memory
else fail bf16_moments_half_memory "adam $a32 MiB with fp32, $a16 MiB with bf16: $(grep '^memory' "$T/bf16.log" | tail -n 1)"; fi

# 2. Resume parity: 20 steps straight (saving at 10) against step 10's
# checkpoint resumed: the same losses and final weights, bit for bit.
r=("${common[@]}" --batch-tokens 128 --steps 20 --val-every 5 --val-batches 2 --adam-dtype bf16)
"$TG" "${r[@]}" --checkpoint-dir "$T/ck" --checkpoint-every 10 --keep-last 0 --export "$T/straight.bin" \
  --log-dir "$T/r1" >"$T/r1.log" 2>&1
"$TG" "${r[@]}" --checkpoint-dir "$T/ck2" --resume "$T/ck/step_00000010" --export "$T/resumed.bin" \
  --log-dir "$T/r2" >"$T/r2.log" 2>&1
if [ "$(resumed_from "$T/r2.log")" = 10 ] && [ "$(lines_after "$T/r1" 10 | wc -l)" -eq 12 ] &&
   [ "$(lines_after "$T/r1" 10)" = "$(lines_after "$T/r2" 10)" ] && cmp -s "$T/straight.bin" "$T/resumed.bin"; then
  ok resume_parity_bf16_moments
else
  fail resume_parity_bf16_moments "$(diff <(lines_after "$T/r1" 10) <(lines_after "$T/r2" 10) | head -n 4) $(tail -n 2 "$T/r2.log")"
fi
# The manifest names the moments' dtype; the shard holds them in 2 bytes each.
if "$PY" - "$T/ck/step_00000010" >"$T/man.txt" 2>&1 <<'EOF'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
secs = {s["name"]: s for s in m["sections"]}
assert secs["adam_m"]["dtype"] == "bf16" and secs["adam_v"]["dtype"] == "bf16", secs
assert secs["master"]["dtype"] == "fp32", secs
n = m["shard_elements"]
assert secs["adam_v"]["offset"] - secs["adam_m"]["offset"] == 2 * n, (secs, n)
EOF
then ok manifest_records_bf16_moments; else fail manifest_records_bf16_moments "$(tail -n 3 "$T/man.txt")"; fi

# 3. Resuming with the other dtype converts the moments (a note says so) and
# goes on: from bf16 moments to fp32 and back.
"$TG" "${r[@]/bf16/fp32}" --checkpoint-dir "$T/ck3" --resume "$T/ck/step_00000010" --log-dir "$T/r3" >"$T/r3.log" 2>&1
rc3=$?
"$TG" "${r[@]}" --checkpoint-dir "$T/ck4" --resume "$T/ck3/step_00000020" --steps 25 --log-dir "$T/r4" >"$T/r4.log" 2>&1
rc4=$?
if [ "$rc3" = 0 ] && [ "$rc4" = 0 ] && grep -q 'holds bf16 AdamW moments; converted to --adam-dtype fp32' "$T/r3.log" &&
   grep -q 'holds fp32 AdamW moments; converted to --adam-dtype bf16' "$T/r4.log" &&
   [ "$(last_step "$T/r4")" = 25 ] &&
   awk -v a="$(last_loss "$T/r3")" -v b="$(last_loss "$T/r1")" 'BEGIN { d = a - b; exit !(d < 0.02 && d > -0.02) }'; then
  ok resume_converts_moments
else
  fail resume_converts_moments "rc $rc3 $rc4: $(grep -h 'note\|error' "$T/r3.log" "$T/r4.log" | head -n 3)"
fi

# 4. Sharded moments: 2 ranks at ZeRO 2 and 3 give the bits of 1 rank at ZeRO 2
# accumulating the same micro-batches, and ZeRO 1 those of ZeRO 0 at 2 ranks
# (what test_zero.sh holds for FP32 moments; --grad-clip 0: see there).
z=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --batch-tokens 128 --steps 8 --val-every 0
   --sample-every 0 --threads 1 --grad-clip 0 --adam-dtype bf16)
zrun() {
  local np=$1 name=$2
  shift 2
  "${MPI[@]}" -np "$np" "$TG" "${z[@]}" "$@" --export "$T/$name.bin" --log-dir "$T/$name" >"$T/$name.log" 2>&1
}
zrun 1 z2_w1 --zero 2
zrun 2 z2_w2 --zero 2
zrun 2 z3_w2 --zero 3
zrun 2 z0_w2 --zero 0
zrun 2 z1_w2 --zero 1
for pair in "z2_w2 z2_w1" "z3_w2 z2_w1" "z1_w2 z0_w2"; do
  read -r a b <<<"$pair"
  if [ "$(steps_logged "$T/$a")" = 8 ] && [ "$(step_losses "$T/$a")" = "$(step_losses "$T/$b")" ] &&
     cmp -s "$T/$a.bin" "$T/$b.bin"; then ok "sharded_bf16_moments_${a}_is_${b}"
  else fail "sharded_bf16_moments_${a}_is_${b}" "max |diff| $(maxdiff "$T/$a.bin" "$T/$b.bin"): $(tail -n 2 "$T/$a.log")"; fi
done

# Resharded: the 2-rank ZeRO-3 run's step-4 checkpoint resumed on 1 rank at
# ZeRO 2 ends with the bits of the 1-rank run (BF16 moments read from 2 shards).
zrun 2 zc_w2 --zero 3 --checkpoint-dir "$T/zck" --checkpoint-every 4 --keep-last 0
zrun 1 zc_w1 --zero 2 --checkpoint-dir "$T/zck2" --resume "$T/zck/step_00000004"
if [ "$(resumed_from "$T/zc_w1.log")" = 4 ] && cmp -s "$T/zc_w1.bin" "$T/z2_w1.bin"; then ok resharded_bf16_moments
else fail resharded_bf16_moments "max |diff| $(maxdiff "$T/zc_w1.bin" "$T/z2_w1.bin"): $(tail -n 2 "$T/zc_w1.log")"; fi

# 5. With FP8 GEMMs and with the Llama architecture: learns like FP32 moments.
for v in "fp8:--precision fp8" "llama:--arch llama"; do
  name=${v%%:*}
  read -ra extra <<<"${v#*:}"
  for d in fp32 bf16; do
    "$TG" "${common[@]}" "${extra[@]}" --steps 20 --val-every 0 --adam-dtype "$d" --log-dir "$T/${name}_$d" \
      >"$T/${name}_$d.log" 2>&1
  done
  a=$(last_loss "$T/${name}_fp32") b=$(last_loss "$T/${name}_bf16")
  echo "# $name: last loss $a with fp32 moments, $b with bf16"
  if [ "$(steps_logged "$T/${name}_bf16")" = 20 ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a != "" && d < 0.03 && d > -0.03) }'; then
    ok "bf16_moments_$name"
  else fail "bf16_moments_$name" "last losses $a and $b: $(tail -n 2 "$T/${name}_bf16.log")"; fi
done

# 6. A bad value is one clear error naming the flag.
expect_error bad_adam_dtype 'adam-dtype' "$TG" "${common[@]}" --steps 1 --adam-dtype fp16

finish
