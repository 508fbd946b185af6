#!/usr/bin/env bash
# test_sim_checkpoint.sh: checkpoints from the CUDA backend, on the simulated
# GPU (build/sim/train_gpt): a BF16 run resumed from its checkpoint continues
# bit for bit (the stochastically rounded 16-bit parameters are saved as they
# are, beside the FP32 masters), background saves copy from device memory,
# checkpoints move between backends and precisions, and an FP8 run (delayed
# scaling) resumes bit for bit.
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
tiny=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --warmup 2 --lr 3e-3 --steps 8
      --val-every 0 --sample-every 0 --peak-tflops 1)

# 1. BF16 on the GPU: 8 steps with background saves at 4 and 8, against the
# step-4 checkpoint resumed: the same losses, final weights, and the same
# bytes in the step-8 shard (16-bit parameters, masters, moments).
"$TG" "${tiny[@]}" --device cuda --precision bf16 --checkpoint-dir "$T/a" --checkpoint-every 4 --keep-last 0 \
  --async-checkpoint 1 --export "$T/a.bin" --log-dir "$T/a.metrics" >"$T/a.log" 2>&1
"$TG" "${tiny[@]}" --device cuda --precision bf16 --checkpoint-dir "$T/b" --resume "$T/a/step_00000004" \
  --export "$T/b.bin" --log-dir "$T/b.metrics" >"$T/b.log" 2>&1
shard=step_00000008/shard_00000_of_00001.bin
if [ "$(resumed_from "$T/b.log")" = 4 ] && [ "$(lines_after "$T/a.metrics" 4 | wc -l)" -eq 4 ] &&
   [ "$(lines_after "$T/a.metrics" 4)" = "$(lines_after "$T/b.metrics" 4)" ] && cmp -s "$T/a.bin" "$T/b.bin" &&
   cmp -s "$T/a/$shard" "$T/b/$shard" && grep -q '"name": "params", "dtype": "bf16"' "$T/a/step_00000004/manifest.json"; then
  ok sim_bf16_resume_bit_for_bit
else
  fail sim_bf16_resume_bit_for_bit "$(diff <(lines_after "$T/a.metrics" 4) <(lines_after "$T/b.metrics" 4) | head -n 3) $(grep -E 'error' "$T/a.log" "$T/b.log" | head -n 2)"
fi

# 2. Across backends: an FP32 checkpoint of the CPU backend continued on the
# GPU follows the CPU's own continuation (losses within 1e-4 relative).
"$TG" "${tiny[@]}" --device cpu --checkpoint-dir "$T/c" --checkpoint-every 4 --log-dir "$T/c.metrics" >"$T/c.log" 2>&1
"$TG" "${tiny[@]}" --device cuda --precision fp32 --checkpoint-dir "$T/g" --resume "$T/c/step_00000004" --log-dir "$T/g.metrics" >"$T/g.log" 2>&1
if [ "$(resumed_from "$T/g.log")" = 4 ] && [ "$(lines_after "$T/g.metrics" 4 | wc -l)" -eq 4 ] &&
   paste <(lines_after "$T/c.metrics" 4 | sed -E 's/.*loss ([^ ]+) .*/\1/') <(lines_after "$T/g.metrics" 4 | sed -E 's/.*loss ([^ ]+) .*/\1/') |
     awk '{ d = $1 - $2; if (d * d > (1e-4 * $1) ^ 2) bad = 1 } END { exit bad }'; then
  ok sim_cpu_checkpoint_continues_on_gpu
else
  fail sim_cpu_checkpoint_continues_on_gpu "$(paste <(lines_after "$T/c.metrics" 4) <(lines_after "$T/g.metrics" 4) | head -n 2) $(grep error "$T/g.log")"
fi

# 3. Across precisions: the BF16 checkpoint continued in FP32 (parameters =
# the FP32 masters) and the CPU's FP32 one continued in BF16 (parameters
# rounded from the masters): both train on from where they were.
"$TG" "${tiny[@]}" --device cuda --precision fp32 --checkpoint-dir "$T/p1" --resume "$T/a/step_00000004" --log-dir "$T/p1.metrics" >"$T/p1.log" 2>&1
rc1=$?
"$TG" "${tiny[@]}" --device cuda --precision bf16 --checkpoint-dir "$T/p2" --resume "$T/c/step_00000004" --log-dir "$T/p2.metrics" >"$T/p2.log" 2>&1
rc2=$?
l_a=$(lines_after "$T/a.metrics" 4 | head -n 1 | sed -E 's/.*loss ([^ ]+) .*/\1/')
l_p1=$(lines_after "$T/p1.metrics" 4 | head -n 1 | sed -E 's/.*loss ([^ ]+) .*/\1/')
l_c=$(lines_after "$T/c.metrics" 4 | head -n 1 | sed -E 's/.*loss ([^ ]+) .*/\1/')
l_p2=$(lines_after "$T/p2.metrics" 4 | head -n 1 | sed -E 's/.*loss ([^ ]+) .*/\1/')
if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && [ -n "$l_p1" ] && [ -n "$l_p2" ] &&
   awk -v a="$l_a" -v b="$l_p1" -v c="$l_c" -v d="$l_p2" 'BEGIN { exit !((a - b) ^ 2 < 0.02 ^ 2 && (c - d) ^ 2 < 0.02 ^ 2) }'; then
  ok sim_checkpoint_across_precisions
else
  fail sim_checkpoint_across_precisions "step-5 losses: bf16 $l_a vs fp32 from it $l_p1; fp32 $l_c vs bf16 from it $l_p2"
fi

# 4. FP8 on the GPU, delayed scaling (history 2, so it wraps before the save):
# the step-4 checkpoint (saved in the background) resumed continues bit for
# bit, its scales and amax histories restored from the manifest.
fp8=("${tiny[@]}" --device cuda --precision fp8 --fp8-recipe delayed --fp8-amax-history 2)
"$TG" "${fp8[@]}" --checkpoint-dir "$T/f" --checkpoint-every 4 --keep-last 0 --async-checkpoint 1 \
  --export "$T/f.bin" --log-dir "$T/f.metrics" >"$T/f.log" 2>&1
"$TG" "${fp8[@]}" --checkpoint-dir "$T/f2" --resume "$T/f/step_00000004" --export "$T/f2.bin" --log-dir "$T/f2.metrics" >"$T/f2.log" 2>&1
if [ "$(resumed_from "$T/f2.log")" = 4 ] && [ "$(lines_after "$T/f.metrics" 4 | wc -l)" -eq 4 ] &&
   [ "$(lines_after "$T/f.metrics" 4)" = "$(lines_after "$T/f2.metrics" 4)" ] && cmp -s "$T/f.bin" "$T/f2.bin" &&
   grep -q '"fp8": {"recipe": "delayed"' "$T/f/step_00000004/manifest.json" && ! grep -q 'starts afresh' "$T/f2.log"; then
  ok sim_fp8_delayed_resume_bit_for_bit
else
  fail sim_fp8_delayed_resume_bit_for_bit "$(diff <(lines_after "$T/f.metrics" 4) <(lines_after "$T/f2.metrics" 4) | head -n 3) $(grep -E 'error|afresh' "$T/f.log" "$T/f2.log" | head -n 2)"
fi

finish
