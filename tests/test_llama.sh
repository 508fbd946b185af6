#!/usr/bin/env bash
# test_llama.sh: --arch llama end to end on the CPU with the bundled corpus:
# a small Llama learns; a checkpoint resumes bit for bit (the same step and
# validation lines) and refuses another architecture; ZeRO-3 over two ranks
# and selective recompute repeat the single-rank, keep-everything run; FP8
# follows FP32; and bad Llama flags get one clear error line each.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
small=(--device cpu --arch llama --depth 2 --seq-len 32 --micro-batch 2 --sample-every 0 --threads 1)
curve() { lines_after "$1" 0; }  # the step and val records of a run's --log-dir

# 1. It learns: from about ln(4096) = 8.3 to well below in 60 steps (measured: 8.36 -> 5.9),
# and its peak memory is what the planner billed, to the byte.
"$TG" "${small[@]}" --steps 60 --val-every 60 --log-every 10 --log-dir "$T/learn.metrics" >"$T/learn.log" 2>&1
first=$(grep -E '^step +1/' "$T/learn.log" | sed -E 's/.*\| loss ([^ ]+) .*/\1/')
val=$(grep -E '^val ' "$T/learn.log" | tail -n 1 | sed -E 's/.*val loss ([^ ]+).*/\1/')
if grep -q '^llama     | kv heads 1 | MLP 384' "$T/learn.log" && grep -q '^memory .* | as planned$' "$T/learn.log" && awk -v f="$first" -v v="$val" 'BEGIN { exit !(f > 8.0 && v < 7.0) }'; then
  ok llama_learns
else
  fail llama_learns "first loss '$first', val loss '$val' (want > 8.0 and < 7.0): $(tail -n 2 "$T/learn.log")"
fi

# 2. Resume parity: 16 steps straight (saving at 8) against step 8's checkpoint resumed.
"$TG" "${small[@]}" --steps 16 --val-every 8 --checkpoint-dir "$T/ck" --checkpoint-every 8 --keep-last 0 --log-dir "$T/straight.metrics" >"$T/straight.log" 2>&1
"$TG" "${small[@]}" --steps 16 --val-every 8 --checkpoint-dir "$T/ck2" --resume "$T/ck/step_00000008" --log-dir "$T/resumed.metrics" >"$T/resumed.log" 2>&1
if [ "$(resumed_from "$T/resumed.log")" = 8 ] && [ "$(lines_after "$T/straight.metrics" 8 | wc -l)" -eq 9 ] &&
   [ "$(lines_after "$T/straight.metrics" 8)" = "$(lines_after "$T/resumed.metrics" 8)" ] &&
   grep -q '"arch": "llama"' "$T/ck/step_00000008/manifest.json"; then
  ok llama_resume_parity
else
  fail llama_resume_parity "$(diff <(lines_after "$T/straight.metrics" 8) <(lines_after "$T/resumed.metrics" 8) | head -n 4; tail -n 2 "$T/resumed.log")"
fi
expect_error resume_other_arch "written for a llama model; this run trains a gpt2" \
  "$TG" --device cpu --depth 2 --seq-len 32 --micro-batch 2 --steps 16 --resume "$T/ck/step_00000008" --checkpoint-dir "$T/ck3"
# The checkpoint's model.bin holds a Llama in llm.c's layout under its own magic
# (llm/checkpoint/llmc_io.h: 20261202, [8] kv heads, [9] MLP width, [10] tied),
# so that nothing reads it as a GPT-2; --init-from names it and says what to use.
hdr=$(od -An -t d4 -N 44 "$T/ck/step_00000008/model.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
want=$(sed -nE 's/^llama +\| kv heads ([0-9]+) \| MLP ([0-9]+) .*/\1 \2/p' "$T/straight.log" | head -n 1)
if [ "$(cut -d' ' -f1 <<<"$hdr")" = 20261202 ] && [ -n "$want" ] && [ "$(cut -d' ' -f9,10 <<<"$hdr")" = "$want" ]; then
  ok llama_checkpoint_weights_magic
else
  fail llama_checkpoint_weights_magic "header '$hdr', kv heads and MLP from the log '$want'"
fi
expect_error llama_checkpoint_weights_init_from "a Llama's weights from a checkpoint .* --resume" \
  "$TG" --device cpu --init-from "$T/ck/step_00000008/model.bin" --steps 1

# 3. ZeRO-3 on two ranks (same global batch) and selective recompute give the same curve.
"$TG" "${small[@]}" --steps 8 --val-every 8 --batch-tokens 128 --zero 0 --log-dir "$T/z0.metrics" >"$T/z0.log" 2>&1
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --steps 8 --val-every 8 --batch-tokens 128 --zero 3 --log-dir "$T/z3.metrics" >"$T/z3.log" 2>&1
"$TG" "${small[@]}" --steps 8 --val-every 8 --batch-tokens 128 --recompute selective --log-dir "$T/sel.metrics" >"$T/sel.log" 2>&1
if [ "$(curve "$T/z0.metrics" | wc -l)" -eq 9 ] && [ "$(curve "$T/z0.metrics")" = "$(curve "$T/z3.metrics")" ]; then
  ok llama_zero3_two_ranks
else
  fail llama_zero3_two_ranks "$(diff <(curve "$T/z0.metrics") <(curve "$T/z3.metrics") | head -n 4; tail -n 2 "$T/z3.log")"
fi
if [ "$(curve "$T/z0.metrics")" = "$(curve "$T/sel.metrics")" ]; then ok llama_selective_recompute
else fail llama_selective_recompute "$(diff <(curve "$T/z0.metrics") <(curve "$T/sel.metrics") | head -n 4)"; fi

# 4. FP8 (emulated exactly on the CPU: q/k/v, o, gate|up and down GEMMs in
# E4M3/E5M2) follows FP32 step by step (losses within 0.05; measured below 0.01),
# and its peak memory is as planned.
big=(--device cpu --arch llama --depth 2 --seq-len 32 --micro-batch 2 --sample-every 0 --threads 1 --steps 8 --val-every 8
     --warmup 2 --lr 3e-3)
"$TG" "${big[@]}" --precision fp8 --log-dir "$T/fp8.metrics" >"$T/fp8.log" 2>&1
"$TG" "${big[@]}" --log-dir "$T/fp32.metrics" >"$T/fp32.log" 2>&1
if grep -q '^fp8 ' "$T/fp8.log" && grep -q '^memory .* | as planned$' "$T/fp8.log" && [ "$(step_losses "$T/fp8.metrics" | wc -l)" -eq 8 ] &&
   paste <(step_losses "$T/fp32.metrics") <(step_losses "$T/fp8.metrics") | awk '{ d = $1 - $3; if (d * d > 0.05 * 0.05) bad = 1 } END { exit bad }'; then
  ok llama_fp8_near_fp32
else
  fail llama_fp8_near_fp32 "$(paste <(step_losses "$T/fp32.metrics") <(step_losses "$T/fp8.metrics") | tr '\n' ';') $(tail -n 2 "$T/fp8.log")"
fi

# 5. Bad input.
base=(--device cpu --depth 2 --seq-len 32 --micro-batch 2 --steps 1)
expect_error bad_arch "--arch 'gpt3' is not one of gpt2, llama" "$TG" "${base[@]}" --arch gpt3
expect_error kv_heads_do_not_divide "--kv-heads 3 does not divide --heads 4" "$TG" "${base[@]}" --arch llama --heads 4 --kv-heads 3
expect_error odd_head_size "head size 9 .* must be even for RoPE" "$TG" "${base[@]}" --arch llama --channels 18 --heads 2
expect_error llama_flag_on_gpt2 "--kv-heads conflicts with --arch gpt2" "$TG" "${base[@]}" --kv-heads 1
expect_error llama_preset_vs_arch "--model llama3-1B is a Llama; it conflicts with --arch gpt2" \
  "$TG" --device cpu --model llama3-1B --arch gpt2 --steps 1
expect_error gpt2_preset_vs_arch "--model gpt2-124M is a GPT-2-style preset; it conflicts with --arch llama" \
  "$TG" --device cpu --model gpt2-124M --arch llama --steps 1
expect_error llama_fp8_widths "q/k/v width 48 .* and --mlp-hidden 72 must be multiples of 16" \
  "$TG" "${base[@]}" --arch llama --channels 32 --heads 4 --kv-heads 1 --mlp-hidden 72 --seq-len 32 --precision fp8
expect_error llama_export "--export writes llm.c's model format, which holds GPT-2 models only" \
  "$TG" "${base[@]}" --arch llama --export "$T/x.bin"
expect_error llama_init_from "--init-from: llm.c's model format holds GPT-2 models only" \
  "$TG" --device cpu --arch llama --init-from "$T/none.bin" --steps 1
expect_error bad_rope_theta "--rope-theta must be greater than 1" "$TG" "${base[@]}" --arch llama --rope-theta 0.5
finish
