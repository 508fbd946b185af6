#!/usr/bin/env bash
# test_plan.sh: --plan, --auto and --recompute through the real binary: the
# plan needs no data, says plainly when nothing fits, --auto trains within its
# budget, a 16K-token run with full recompute peaks exactly at its plan,
# every recompute policy trains to the same bits, and llm/plan/README.md's planner
# table is what the binary prints today.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
tg_abs=$(cd "$(dirname "$TG")" && pwd)/$(basename "$TG")
big=(--gpu b200 --world-size 8 --vocab-size 50257 --tokenizer '')

# 1. --plan opens no data: run from an empty directory with missing shards.
if (cd "$T" && "$tg_abs" --plan --model gpt-64B --seq-len 4096 "${big[@]}" --train-data '/nonexistent/*.bin' \
      >"$T/p64.txt" 2>&1); then
  if grep -q '^summary .*fits=1 .*precision=fp8 zero=3 .*micro_batch=1 ' "$T/p64.txt" &&
     grep -Eq '^summary .*full_layers=[1-9]' "$T/p64.txt" && grep -q 'recommended: fp8 | ZeRO-3' "$T/p64.txt"; then
    ok plan_64b_needs_zero3_and_full_recompute
  else
    fail plan_64b_needs_zero3_and_full_recompute "$(grep -E 'recommended|summary' "$T/p64.txt")"
  fi
else
  fail plan_64b_needs_zero3_and_full_recompute "exit status $?: $(tail -n 2 "$T/p64.txt")"
fi

# 1b. Sharding flags are kept: on 2 nodes of 8 the plan shards per node
# unless --shard-scope world says otherwise, and --shard-group N shards over N.
"$TG" --plan --model gpt-7B --seq-len 4096 --gpu b200 --world-size 16 --ranks-per-node 8 --zero 3 >"$T/sh_auto.txt" 2>&1
"$TG" --plan --model gpt-7B --seq-len 4096 --gpu b200 --world-size 16 --ranks-per-node 8 --zero 3 --shard-scope world \
  >"$T/sh_world.txt" 2>&1
"$TG" --plan --model gpt-7B --seq-len 4096 --gpu b200 --world-size 16 --ranks-per-node 8 --zero 3 --shard-group 4 \
  >"$T/sh_g4.txt" 2>&1
if grep -q '^summary .* hybrid=1 .* shard_ranks=8$' "$T/sh_auto.txt" &&
   grep -q '^summary .* hybrid=0 .* shard_ranks=16$' "$T/sh_world.txt" &&
   grep -q '^summary .* shard_ranks=4$' "$T/sh_g4.txt" && grep -q 'inside groups of ranks (--shard-group)' "$T/sh_g4.txt"; then
  ok plan_keeps_shard_scope_and_group
else
  fail plan_keeps_shard_scope_and_group "$(grep -h summary "$T/sh_auto.txt" "$T/sh_world.txt" "$T/sh_g4.txt")"
fi
expect_error plan_shard_group_not_dividing '--shard-group 3 does not divide the 16 ranks' \
  "$TG" --plan --model gpt-7B --gpu b200 --world-size 16 --ranks-per-node 8 --shard-group 3

# 2. Nothing fits: exit status 2, the bill, and what would fit.
"$TG" --plan --model gpt-64B --seq-len 32768 "${big[@]}" >"$T/none.txt" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q 'nothing fits' "$T/none.txt" && grep -q '16 ranks (2 nodes of 8)' "$T/none.txt" &&
   grep -q -- '--seq-len 8192' "$T/none.txt" && grep -q '= total' "$T/none.txt"; then
  ok plan_nothing_fits_exit_2
else
  fail plan_nothing_fits_exit_2 "exit $rc: $(head -n 5 "$T/none.txt")"
fi

# 3. 1B at 4K on 8 x B200: no recompute, no sharding.
"$TG" --plan --model gpt-1B --seq-len 4096 "${big[@]}" >"$T/p1.txt" 2>&1
if grep -q '^summary .*fits=1 .*precision=bf16 zero=1 hybrid=0 recompute=none full_layers=0 ' "$T/p1.txt"; then
  ok plan_1b_no_recompute
else
  fail plan_1b_no_recompute "$(grep summary "$T/p1.txt")"
fi

# 4. Bad planner input: one clear line, exit 1.
expect_error plan_bad_gpu "--gpu 'x100' is not one of h100, h200, b200, a100" "$TG" --plan --gpu x100
expect_error plan_bad_recompute "--recompute 'most' is not one of none, selective, full" "$TG" --plan --recompute most
expect_error plan_bad_recompute_layers "--recompute-layers 9 is outside 0..4" "$TG" --plan --recompute-layers 9
expect_error plan_full_with_layers "--recompute-layers 2: with --recompute full" "$TG" --plan --recompute full --recompute-layers 2
expect_error plan_seq_too_long "--seq-len 262144 is outside 1..131072" "$TG" --plan --seq-len 262144
expect_error plan_bad_gpu_mem "--gpu-mem must not be negative" "$TG" --plan --gpu-mem -3
expect_error plan_bad_world "--world-size must be positive" "$TG" --plan --world-size 0
expect_error plan_bad_zero "--zero 5 is not one of 0, 1, 2, 3" "$TG" --plan --zero 5
expect_error plan_cpu_bf16 "--precision bf16: the CPU backend computes in fp32" "$TG" --plan --device cpu --precision bf16
expect_error plan_a100_fp8 "--precision fp8: the A100 has no FP8" "$TG" --plan --gpu a100 --precision fp8
expect_error plan_bad_net_env "TRAIN_GPT_PLAN_NET_GBS=fast: expected a bandwidth in GB/s" \
  env TRAIN_GPT_PLAN_NET_GBS=fast "$TG" --plan --gpu b200

# 4b. The step-time model (llm/plan/README.md): gpt-64B on 16 nodes of B200
# shards over groups of 32 ranks without full recompute and prints the byte
# and communication tables; on a 1 GB/s network it keeps node shards. BF16
# gradients: with FP32 ones node shards do not fit gpt-64B at all.
st=(--plan --model gpt-64B --seq-len 8192 --gpu b200 --world-size 128 --batch-tokens 4194304 --tokenizer '' --grad-dtype bf16)
"$TG" "${st[@]}" >"$T/st.txt" 2>&1
TRAIN_GPT_PLAN_NET_GBS=1 "$TG" "${st[@]}" >"$T/st_slow.txt" 2>&1
if grep -q '^summary .* full_layers=0 .* shard_ranks=32$' "$T/st.txt" && grep -Eq '^  adamw +[0-9.]+ +[0-9.]+$' "$T/st.txt" &&
   grep -Eq '^  all-gather +network +[0-9.]+ +[0-9.]+$' "$T/st.txt" && grep -q '^step time  | [0-9.]* ms = 4 x ' "$T/st.txt" &&
   grep -q '^summary .* hybrid=1 .* shard_ranks=8$' "$T/st_slow.txt"; then
  ok plan_step_time_chooses_shard_group
else
  fail plan_step_time_chooses_shard_group "$(grep -hE '^(summary|step time)' "$T/st.txt" "$T/st_slow.txt")"
fi
expect_error plan_batch_tokens "--batch-tokens 1000 is not a multiple of seq-len x ranks = 256" "$TG" --plan --batch-tokens 1000
expect_error auto_with_gpu "--gpu names a GPU for --plan" "$TG" --auto --device cpu --gpu h100
expect_error auto_with_world "--world-size is for --plan" "$TG" --auto --device cpu --world-size 8
expect_error auto_nothing_fits "--auto: no configuration fits in 0.001 GiB" "$TG" --auto --device cpu --gpu-mem 0.001 --steps 1

# 5. --auto on the CPU with a 20 MiB budget: it picks the micro-batch, stays
# within the budget, and its peak is what it planned; an explicit flag wins.
small=(--device cpu --threads 2 --depth 2 --seq-len 64 --val-every 0 --sample-every 0 --steps 2)
"$TG" "${small[@]}" --auto --gpu-mem 0.02 >"$T/auto.txt" 2>&1
peak=$(sed -nE 's/^memory +\| peak allocated ([0-9]+) bytes.*/\1/p' "$T/auto.txt")
if grep -q '^auto .*planned: fp32 | ZeRO-0 | recompute none | micro-batch 2 x seq 64' "$T/auto.txt" &&
   grep -q 'as planned$' "$T/auto.txt" && [ -n "$peak" ] && [ "$peak" -le $((20971520 * 95 / 100)) ]; then
  ok auto_fits_budget
else
  fail auto_fits_budget "$(grep -E '^(auto|memory)' "$T/auto.txt")"
fi
"$TG" "${small[@]}" --auto --gpu-mem 0.02 --micro-batch 1 >"$T/auto1.txt" 2>&1
if grep -q '^batch .*micro-batch 1 x seq 64' "$T/auto1.txt" && grep -q '^auto .*recompute none | micro-batch 1 ' "$T/auto1.txt"; then
  ok auto_explicit_flag_wins
else
  fail auto_explicit_flag_wins "$(grep -E '^(auto|batch)' "$T/auto1.txt")"
fi
# 16.4 MiB: too little for one sequence without recompute (16.6 MiB planned).
"$TG" "${small[@]}" --auto --gpu-mem 0.016 >"$T/auto2.txt" 2>&1
if grep -q '^auto .*recompute selective | micro-batch 1 ' "$T/auto2.txt" && grep -q 'as planned$' "$T/auto2.txt"; then
  ok auto_recomputes_when_needed
else
  fail auto_recomputes_when_needed "$(grep -E '^(auto|memory)' "$T/auto2.txt"; tail -n 1 "$T/auto2.txt")"
fi

# 6. A 16K-token sequence with full recompute: it trains, and the backend's
# peak is the planned number to the byte.
"$TG" --device cpu --layers 2 --channels 32 --heads 1 --seq-len 16384 --micro-batch 1 --recompute full --steps 1 \
  --val-every 0 --sample-every 0 --log-dir "$T/long" >"$T/long.txt" 2>&1
if [ "$(jsonl_lines "$T/long" | cut -d' ' -f2)" = 1/1 ] && grep -q 'as planned$' "$T/long.txt"; then
  ok long_sequence_full_recompute_as_planned
else
  fail long_sequence_full_recompute_as_planned "$(tail -n 2 "$T/long.txt")"
fi

# 7. Every recompute policy trains to the same losses and weights.
"$TG" "${small[@]}" --steps 3 --micro-batch 4 --export "$T/r_none.bin" --log-dir "$T/r_none" >"$T/r_none.txt" 2>&1
same=1
for r in "--recompute selective" "--recompute full" "--recompute-layers 1" "--recompute selective --recompute-layers 1"; do
  # shellcheck disable=SC2086
  "$TG" "${small[@]}" --steps 3 --micro-batch 4 $r --export "$T/r.bin" --log-dir "$T/r" >"$T/r.txt" 2>&1
  if ! cmp -s "$T/r.bin" "$T/r_none.bin" || [ "$(step_losses "$T/r")" != "$(step_losses "$T/r_none")" ]; then
    same=0
    fail recompute_policies_train_identically "$r differs from --recompute none"
  fi
done
[ "$(step_losses "$T/r_none" | wc -l)" -eq 3 ] || { same=0; fail recompute_policies_train_identically "no step lines"; }
[ "$same" -eq 1 ] && ok recompute_policies_train_identically

# 7b. A preset plans with its own vocabulary, unless one is given, and says which.
"$TG" --plan --model gpt-7B --seq-len 131072 --gpu b200 --world-size 8 >"$T/v1.txt" 2>&1
"$TG" --plan --model gpt-7B --seq-len 131072 --gpu b200 --world-size 8 --vocab-size 32000 >"$T/v2.txt" 2>&1
"$TG" --plan --model gpt-7B --seq-len 4096 --gpu b200 --world-size 8 --tokenizer data/kjv/tokenizer.bin >"$T/v3.txt" 2>&1
if grep -q "vocab 50257 (GPT-2's, the preset's; --vocab-size or --tokenizer to change; padded 50304)" "$T/v1.txt" &&
   grep -q 'vocab 32000 (--vocab-size; padded 32000)' "$T/v2.txt" &&
   grep -q 'vocab 4096 (from --tokenizer data/kjv/tokenizer.bin; padded 4096)' "$T/v3.txt" &&
   grep -q '^summary .*fits=1 .*zero=[1-3] ' "$T/v1.txt"; then
  ok plan_preset_vocabulary
else
  fail plan_preset_vocabulary "$(grep -h '^plan .*vocab' "$T"/v[123].txt)"
fi

# 8. llm/plan/README.md's planner table is what the binary prints.
readme=$(sed -n '/<!-- plan-table:begin -->/,/<!-- plan-table:end -->/p' llm/plan/README.md | sed '1d;$d')
if [ -n "$readme" ] && [ "$readme" = "$(TG=$TG scripts/plan_table.sh)" ]; then
  ok readme_plan_table_current
else
  fail readme_plan_table_current "llm/plan/README.md differs from scripts/plan_table.sh (run scripts/plan_table.sh --update)"
fi

# 9. --help documents the new flags; a switch works without a value.
"$TG" --help >"$T/help.txt"
if grep -q -- '--recompute-layers N' "$T/help.txt" && grep -q -- '--plan ' "$T/help.txt" && grep -q -- '--gpu-mem GiB' "$T/help.txt"; then
  ok help_lists_planner_flags
else
  fail help_lists_planner_flags "missing from --help"
fi

finish
