#!/usr/bin/env bash
# test_sim_gpu_run.sh: train_gpt's first contact with a GPU, on the simulated
# one (build/sim/train_gpt): the rank's GPU is chosen from the launcher's local
# rank before any other CUDA call (no context on GPU 0 from --auto's planner);
# TRAIN_GPT_SYNC_CHECK=1 synchronizes after every op and changes no bit, as does
# TRAIN_GPT_OP_PROFILE=1, which prints each op's share of the GPU time; a
# head size without tensor-core kernels says once that it falls back; the op
# scratch reserved at start-up never grows inside a step.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
T=$TEST_TMP
tiny=(--layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 2 --steps 3 --warmup 1 --val-every 0
      --sample-every 0 --checkpoint-dir "")

# 1. Local rank 1 of a launcher, two GPUs, --auto: only GPU 1 is ever touched.
RANK=0 WORLD_SIZE=1 LOCAL_RANK=1 CUDA_SIM_DEVICES=2 CUDA_SIM_CONTEXTS=1 "$TG" "${tiny[@]}" --auto >"$T/rank.log" 2>&1
if grep -q '^cuda_sim: contexts on devices 1$' "$T/rank.log"; then
  ok sim_local_rank_picks_its_gpu_first
else
  fail sim_local_rank_picks_its_gpu_first "$(grep -E 'cuda_sim|error' "$T/rank.log" | head -n 3)"
fi

# 2. The sync check: announced, and the same losses and norms bit for bit.
"$TG" "${tiny[@]}" --device cuda --precision bf16 --log-dir "$T/plain.metrics" >"$T/plain.log" 2>&1
TRAIN_GPT_SYNC_CHECK=1 "$TG" "${tiny[@]}" --device cuda --precision bf16 --log-dir "$T/sync.metrics" >"$T/sync.log" 2>&1
if grep -q 'TRAIN_GPT_SYNC_CHECK=1: the GPU is synchronized after every op' "$T/sync.log" &&
   [ "$(step_losses "$T/sync.metrics" | wc -l)" -eq 3 ] && [ "$(step_losses "$T/sync.metrics")" = "$(step_losses "$T/plain.metrics")" ]; then
  ok sim_sync_check_changes_nothing
else
  fail sim_sync_check_changes_nothing "$(step_losses "$T/sync.metrics" | tr '\n' ';') vs $(step_losses "$T/plain.metrics" | tr '\n' ';') $(tail -n 2 "$T/sync.log")"
fi
expect_error sim_sync_check_bad_value "TRAIN_GPT_SYNC_CHECK='yes'" env TRAIN_GPT_SYNC_CHECK=yes "$TG" "${tiny[@]}" --device cuda

# The op profile: a table of GPU time per op whose shares add up, and again the same bits.
TRAIN_GPT_OP_PROFILE=1 "$TG" "${tiny[@]}" --device cuda --precision bf16 --log-dir "$T/prof.metrics" >"$T/prof.log" 2>&1
if grep -Eq '^op profile \| matmul_forward +[0-9]+ ' "$T/prof.log" && grep -Eq '^op profile \| attention_backward ' "$T/prof.log" &&
   grep -Eq '^op profile \| all ops .* 100\.0%$' "$T/prof.log" && [ "$(step_losses "$T/prof.metrics")" = "$(step_losses "$T/plain.metrics")" ]; then
  ok sim_op_profile_table
else
  fail sim_op_profile_table "$(grep '^op profile' "$T/prof.log" | head -n 3) $(tail -n 2 "$T/prof.log")"
fi

# 3. No scratch growth after start-up (the backend warns when an op outgrows the reservation).
if grep -q 'op scratch grows' "$T/plain.log" "$T/sync.log"; then
  fail sim_scratch_reserved_at_start "$(grep -h 'op scratch grows' "$T/plain.log" | head -n 1)"
else
  ok sim_scratch_reserved_at_start
fi

# 4. Head size 16 in BF16: one note naming the head size, then training goes on.
"$TG" "${tiny[@]}" --channels 32 --heads 2 --device cuda --precision bf16 --log-dir "$T/hs16.metrics" >"$T/hs16.log" 2>&1
notes=$(grep -c 'note: attention runs on the CUDA-core kernels.*head size 16 has no tensor-core kernel' "$T/hs16.log")
if [ "$notes" -eq 1 ] && [ "$(step_losses "$T/hs16.metrics" | wc -l)" -eq 3 ]; then
  ok sim_head_size_fallback_said_once
else
  fail sim_head_size_fallback_said_once "$notes notes; $(tail -n 2 "$T/hs16.log")"
fi
if grep -q 'note: attention' "$T/plain.log"; then
  fail sim_no_fallback_note_at_head_size_32 "$(grep 'note:' "$T/plain.log")"
else
  ok sim_no_fallback_note_at_head_size_32
fi
finish
