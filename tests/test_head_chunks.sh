#!/usr/bin/env bash
# test_head_chunks.sh: --head-chunks through train_gpt on the CPU backend.
# The LM head runs its backward inside the forward pass (llm/model/head.c),
# asking ZeRO's hooks for the head's gradient buffer there, and sampling
# computes its logits row from the final norm's output: so 1 and 4 chunks
# must give the same bits (losses, validation, samples, weights), on one rank
# and on 2 ranks at ZeRO-2 and 3 (which give one rank's bits: test_zero.sh),
# for GPT-2 and Llama. Then the --plan bill shows one chunk of logits, and a
# bad value is refused naming the flag.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# 3 x 131 = 393 rows a micro-step: 1 chunk or 4 (3 x 128 + 9; chunks are whole multiples of 128 rows);
# 2 micro-steps on one rank, 1 on each of two.
base=(--device cpu --depth 1 --seq-len 131 --micro-batch 3 --batch-tokens 786 --steps 4 --val-every 2
      --val-batches 1 --sample-every 3 --sample-tokens 6 --threads 1 --grad-clip 0)

# run NP NAME ARGS...: NP ranks, output in $T/NAME.log, weights in $T/NAME.bin, metrics in $T/NAME/.
run() {
  local np=$1 name=$2
  shift 2
  "${MPI[@]}" -np "$np" "$TG" "${base[@]}" "$@" --export-hf "$T/$name.hf" --export-hf-dtype fp32 \
    --log-dir "$T/$name" >"$T/$name.log" 2>&1
}
samples() { sed -n '/^---- sample at step/,/^----------/p' "$1"; }
same_run() {  # same_run NAME A B: same losses, validation, samples and weights
  local name=$1 a=$2 b=$3
  if [ "$(jsonl_lines "$T/$a")" = "$(jsonl_lines "$T/$b")" ] && [ "$(steps_logged "$T/$a")" -eq 4 ] &&
     [ "$(samples "$T/$a.log")" = "$(samples "$T/$b.log")" ] && [ -n "$(samples "$T/$a.log")" ] &&
     cmp -s "$T/$a.hf/model.safetensors" "$T/$b.hf/model.safetensors"; then
    ok "$name"
  else
    fail "$name" "$a and $b differ: $(tail -n 2 "$T/$b.log")"
  fi
}

# ZeRO-0 and 1 accumulate micro-steps inside the GEMMs, ZeRO-2 and 3 sum
# whole micro-step gradients (test_zero.sh): the multi-rank runs compare with
# one rank at ZeRO-2.
for arch in gpt2 llama; do
  run 1 "${arch}_c1" --arch "$arch" --head-chunks 1
  run 1 "${arch}_c4" --arch "$arch" --head-chunks 4
  same_run "${arch}_4_chunks_same_bits" "${arch}_c1" "${arch}_c4"
  run 1 "${arch}_z2_c1" --arch "$arch" --head-chunks 1 --zero 2
  for z in 2 3; do
    run 2 "${arch}_z${z}_c4" --arch "$arch" --head-chunks 4 --zero "$z"
    same_run "${arch}_zero${z}_2_ranks_4_chunks_same_bits" "${arch}_z2_c1" "${arch}_z${z}_c4"
  done
done

# The plan bills one chunk: GPT-2 124M at 4 x 1024 in the planner's 4 chunks of 1024 rows.
"$TG" --plan --model gpt2-124M --seq-len 1024 --micro-batch 4 --gpu h100 --zero 0 --recompute none >"$T/plan.txt" 2>&1
if grep -Eq 'logits +\(1024,50304\): 1 of 4 head chunks' "$T/plan.txt"; then ok plan_bills_one_chunk
else fail plan_bills_one_chunk "$(grep -E 'logits' "$T/plan.txt")"; fi

expect_error head_chunks_negative "head-chunks" "$TG" --device cpu --head-chunks -1
finish
