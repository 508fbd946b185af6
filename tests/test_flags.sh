#!/usr/bin/env bash
# test_flags.sh: the flag table's checks, as a user meets them: a value
# outside a flag's range, or not one of an enum's values, is one error line
# naming the flag, exit status 1, before any data or model is touched; the
# checks across flags (config_check) likewise; --help shows the ranges.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
tiny=(--device cpu --depth 1 --seq-len 16 --micro-batch 2 --steps 1 --val-every 0 --sample-every 0)

# Values that were accepted silently, or crashed, before the table had ranges.
expect_error beta1_above_1 "--beta1 must be in \[0, 1\) \(got 1.5\)" "$TG" "${tiny[@]}" --beta1 1.5
expect_error beta2_negative "--beta2 must be in \[0, 1\) \(got -0.1\)" "$TG" "${tiny[@]}" --beta2 -0.1
expect_error eps_zero "--eps must be positive \(got 0\)" "$TG" "${tiny[@]}" --eps 0
expect_error weight_decay_negative "--weight-decay must not be negative \(got -1\)" "$TG" "${tiny[@]}" --weight-decay -1
expect_error lr_final_frac_above_1 "--lr-final-frac must be in \[0, 1\] \(got 2\)" "$TG" "${tiny[@]}" --lr-final-frac 2
expect_error threads_negative "--threads -1 is outside 0\.\.1024" "$TG" "${tiny[@]}" --threads -1
expect_error threads_huge "--threads 100000 is outside 0\.\.1024" "$TG" "${tiny[@]}" --threads 100000
expect_error val_batches_negative "--val-batches must not be negative \(got -1\)" "$TG" "${tiny[@]}" --val-batches -1
expect_error sample_tokens_negative "--sample-tokens -1 is outside 0\.\.1000000" "$TG" "${tiny[@]}" --sample-tokens -1
expect_error depth_huge "--depth 100000 is outside 1\.\.1024" "$TG" "${tiny[@]}" --depth 100000
expect_error steps_negative "--steps must not be negative \(got -3\)" "$TG" "${tiny[@]}" --steps -3
expect_error micro_batch_zero "--micro-batch 0 is outside 1\.\.65536" "$TG" "${tiny[@]}" --micro-batch 0
expect_error lr_not_finite "--lr: 'inf' is not a number" "$TG" "${tiny[@]}" --lr inf
expect_error tokens_per_pass_over_int "--micro-batch 65536 x --seq-len 65536 = 4294967296 tokens per pass" \
  "$TG" "${tiny[@]}" --micro-batch 65536 --seq-len 65536
expect_error accumulation_over_int "--batch-tokens 9223372036854775776 is 288230376151711743 micro-batches of 32 tokens" \
  "$TG" "${tiny[@]}" --batch-tokens 9223372036854775776
expect_error zero_stage_5 "--zero 5 is not one of 0, 1, 2, 3" "$TG" "${tiny[@]}" --zero 5
expect_error context_parallel_zero "--context-parallel 0 is outside 1\.\.4096" "$TG" "${tiny[@]}" --context-parallel 0
expect_error context_parallel_on_cuda "--context-parallel 2: the CUDA backend runs only --context-parallel 1" \
  "$TG" "${tiny[@]}" --device cuda --context-parallel 2
# The same checks for values from a SageMaker hyperparameters file name it.
mkdir -p "$T/sm/input/config"
echo '{"beta1": "1.5"}' >"$T/sm/input/config/hyperparameters.json"
expect_error hyperparameter_range "hyperparameters\.json: --beta1 must be in \[0, 1\)" \
  env TRAIN_GPT_SM_ROOT="$T/sm" "$TG" "${tiny[@]}"

# Enum flags: the message lists the table's values.
expect_error device_enum "--device 'tpu' is not one of auto, cpu, cuda" "$TG" "${tiny[@]}" --device tpu
expect_error export_dtype_enum "--export-dtype 'fp16' is not one of fp32, bf16" "$TG" "${tiny[@]}" --export-dtype fp16
expect_error shard_scope_enum "--shard-scope 'rack' is not one of world, node" "$TG" "${tiny[@]}" --shard-scope rack
expect_error recompute_enum "--recompute 'most' is not one of none, selective, full" "$TG" "${tiny[@]}" --recompute most

# Checks across flags (config_check), each with its message.
expect_error skip_spikes_needs_spike_z "--skip-spikes needs spike detection" "$TG" "${tiny[@]}" --skip-spikes --spike-z 0
# The order of the rollback checks: the directory first, then the flags that need it.
expect_error rollback_needs_checkpoint_dir "--on-divergence rollback needs checkpoints to go back to, and --checkpoint-dir is empty" \
  "$TG" "${tiny[@]}" --on-divergence rollback --checkpoint-dir ''
expect_error rollback_auto_dir_resolves_to_none "--on-divergence rollback needs checkpoints to go back to, and --checkpoint-dir auto resolves to none" \
  env TRAIN_GPT_CHECKPOINT_DIR= "$TG" "${tiny[@]}" --on-divergence rollback --checkpoint-every 2
expect_error resume_empty "--resume must be auto, never, or a checkpoint directory" "$TG" "${tiny[@]}" --resume ''
expect_error resume_missing_dir "--resume '$T/nothing' is not auto, never, or an existing checkpoint directory" \
  "$TG" "${tiny[@]}" --resume "$T/nothing"
expect_error auto_with_gpu "--gpu names a GPU for --plan" "$TG" "${tiny[@]}" --auto --gpu h100
expect_error auto_with_world_size "--world-size is for --plan" "$TG" "${tiny[@]}" --auto --world-size 8
expect_error gpu_mem_zero "--gpu-mem must be a positive number of GiB" "$TG" --plan --gpu-mem 0
expect_error ranks_per_node_zero "--ranks-per-node must be positive \(got 0\)" "$TG" --plan --ranks-per-node 0
expect_error fp8_flag_without_fp8 "--fp8-margin is for FP8 training, but this run trains in fp32$" \
  "$TG" "${tiny[@]}" --precision fp32 --fp8-margin 2
expect_error fp8_flag_under_auto "--fp8-recipe is for FP8 training, but this run trains in fp32 \(chosen by --precision auto" \
  "$TG" "${tiny[@]}" --fp8-recipe delayed

# Values at the ends of a range are accepted (a run of one step trains).
if "$TG" "${tiny[@]}" --beta1 0 --beta2 0.999999 --lr-final-frac 1 --weight-decay 0 --threads 1 >"$T/edge.log" 2>&1 &&
  grep -q '^summary ' "$T/edge.log"; then
  ok range_ends_accepted
else
  fail range_ends_accepted "$(tail -n 2 "$T/edge.log")"
fi

# --help shows each range and each enum's values from the table.
"$TG" --help >"$T/help.txt"
if grep -Eq -- '--beta1 X .*\{\[0, 1\)\}' "$T/help.txt" && grep -q -- '--shard-scope world|node' "$T/help.txt" &&
  grep -Eq -- '--threads N .*\{\[0, 1024\]\}' "$T/help.txt"; then
  ok help_shows_ranges_and_values
else
  fail help_shows_ranges_and_values "$(grep -E -- '--(beta1|shard-scope|threads) ' "$T/help.txt")"
fi

finish
