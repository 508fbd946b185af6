#!/usr/bin/env bash
# test_checkpoint_mpi.sh: checkpoints of multi-rank runs under Open MPI on the
# CPU backend: resuming on the same ranks continues bit for bit (ZeRO 1 and
# 3), checkpoints load on another number of ranks, another ZeRO stage and
# from hybrid sharding (matching the unresharded continuation to rounding:
# sums over ranks change order with the rank count), a SIGTERM to one rank
# stops every rank at the same step with a checkpoint, and a crash in the
# middle of a multi-rank save leaves the previous checkpoint in charge.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# 12 windows per step: 1 x 12 micro-steps, 2 x 6, 3 x 4, 4 x 3. No clipping:
# the global norm's summation order depends on the rank count.
small=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --batch-tokens 384 --steps 20 --val-every 0
       --sample-every 0 --threads 1 --grad-clip 0 --peak-tflops 1)

# Largest difference between two runs' losses after step $3 (their log dirs).
loss_diff() {
  paste <(lines_after "$1" "$3" | sed -E 's/.*loss ([^ ]+) .*/\1/') <(lines_after "$2" "$3" | sed -E 's/.*loss ([^ ]+) .*/\1/') |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m + 0 }'
}

# resume_parity NAME REF RESUMED: run RESUMED (log $T/RESUMED.log, metrics in
# $T/RESUMED.metrics/), resumed from REF's checkpoint
# of step 10, repeats REF's last 10 steps and ends with the same weights.
resume_parity() {
  local name=$1 a=$T/$2 b=$T/$3
  if [ "$(resumed_from "$b.log")" = 10 ] && [ "$(lines_after "$a.metrics" 10)" = "$(lines_after "$b.metrics" 10)" ] &&
     [ "$(lines_after "$a.metrics" 10 | wc -l)" -eq 10 ] && cmp -s "$a.bin" "$b.bin"; then
    ok "$name"
  else
    fail "$name" "resumed from '$(resumed_from "$b.log")'; $(diff <(lines_after "$a.metrics" 10) <(lines_after "$b.metrics" 10) | head -n 3) $(grep error "$b.log")"
  fi
}

# 1. The reference: 2 ranks at ZeRO 1, checkpoints at steps 10 and 20.
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 1 --checkpoint-dir "$T/a" --checkpoint-every 10 --keep-last 0 \
  --export "$T/a.bin" --log-dir "$T/a.metrics" >"$T/a.log" 2>&1
files=$(cd "$T/a/step_00000010" 2>/dev/null && echo *)
if [ "$files" = "manifest.json model.bin shard_00000_of_00002.bin shard_00001_of_00002.bin" ] &&
   grep -q '"world": 2,' "$T/a/step_00000010/manifest.json" && grep -q '"layout_world": 2,' "$T/a/step_00000010/manifest.json"; then
  ok mpi_checkpoint_per_rank_shards
else
  fail mpi_checkpoint_per_rank_shards "step_00000010 holds: $files; $(grep error "$T/a.log" | head -n 2)"
fi

# 2. Resume on the same 2 ranks, ZeRO 1: bit for bit.
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 1 --checkpoint-dir "$T/a1" --resume "$T/a/step_00000010" \
  --export "$T/a1.bin" --log-dir "$T/a1.metrics" >"$T/a1.log" 2>&1
resume_parity mpi_resume_parity_2_ranks_zero1 a a1

# 3. ZeRO 3 (parameters sharded too): save and resume on 2 ranks, bit for bit.
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 3 --checkpoint-dir "$T/z3" --checkpoint-every 10 --keep-last 0 \
  --export "$T/z3.bin" --log-dir "$T/z3.metrics" >"$T/z3.log" 2>&1
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 3 --checkpoint-dir "$T/z3r" --resume "$T/z3/step_00000010" \
  --export "$T/z3r.bin" --log-dir "$T/z3r.metrics" >"$T/z3r.log" 2>&1
resume_parity mpi_resume_parity_2_ranks_zero3 z3 z3r

# 4. Resharding: the step-10 checkpoint of 2 ranks at ZeRO 1 continued on 3
# ranks at ZeRO 1, on 2 ranks at ZeRO 3, and on 1 rank, against the
# unresharded continuation.
for case in "3:1:r3z1" "2:3:r2z3" "1:0:r1z0"; do
  IFS=: read -r np z name <<<"$case"
  "${MPI[@]}" -np "$np" "$TG" "${small[@]}" --zero "$z" --checkpoint-dir "$T/$name" --resume "$T/a/step_00000010" \
    --export "$T/$name.bin" --log-dir "$T/$name.metrics" >"$T/$name.log" 2>&1
  d=$(maxdiff "$T/a.bin" "$T/$name.bin" 2>/dev/null)
  l=$(loss_diff "$T/a.metrics" "$T/$name.metrics" 10)
  echo "# 2 ranks ZeRO 1 -> $np ranks ZeRO $z: final weights differ by $d, losses by $l"
  if [ "$(resumed_from "$T/$name.log")" = 10 ] && grep -q "resharded to $np rank" "$T/$name.log" &&
     [ "$(lines_after "$T/$name.metrics" 10 | wc -l)" -eq 10 ] && within "$d" 1e-5 && within "$l" 2e-4; then
    ok "mpi_reshard_2z1_to_${np}z$z"
  else
    fail "mpi_reshard_2z1_to_${np}z$z" "weights differ by $d, losses by $l; $(grep -E 'error|resume' "$T/$name.log" | head -n 2)"
  fi
done

# 5. Hybrid sharding (2 simulated nodes of 2 ranks, sharded per node): the
# first node's ranks write 2 shards; the checkpoint resumes bit for bit on
# the same layout and loads on 2 ranks sharded over the world.
export TRAIN_GPT_RANKS_PER_NODE=2
"${MPI[@]}" -np 4 "$TG" "${small[@]}" --zero 1 --shard-scope node --checkpoint-dir "$T/h" --checkpoint-every 10 \
  --keep-last 0 --export "$T/h.bin" --log-dir "$T/h.metrics" >"$T/h.log" 2>&1
"${MPI[@]}" -np 4 "$TG" "${small[@]}" --zero 1 --shard-scope node --checkpoint-dir "$T/hr" --resume "$T/h/step_00000010" \
  --export "$T/hr.bin" --log-dir "$T/hr.metrics" >"$T/hr.log" 2>&1
unset TRAIN_GPT_RANKS_PER_NODE
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 1 --checkpoint-dir "$T/h2" --resume "$T/h/step_00000010" \
  --export "$T/h2.bin" --log-dir "$T/h2.metrics" >"$T/h2.log" 2>&1
files=$(cd "$T/h/step_00000010" 2>/dev/null && echo *)
d=$(maxdiff "$T/h.bin" "$T/h2.bin" 2>/dev/null)
echo "# hybrid 2 x 2 -> 2 ranks: final weights differ by $d"
if [ "$files" = "manifest.json model.bin shard_00000_of_00002.bin shard_00001_of_00002.bin" ] &&
   grep -q '"world": 4,' "$T/h/step_00000010/manifest.json" && cmp -s "$T/h.bin" "$T/hr.bin" &&
   [ "$(lines_after "$T/h.metrics" 10)" = "$(lines_after "$T/hr.metrics" 10)" ] && within "$d" 1e-5; then
  ok mpi_hybrid_sharding_checkpoint
else
  fail mpi_hybrid_sharding_checkpoint "files: $files; hybrid -> 2 ranks weights differ by $d; $(grep error "$T/hr.log" "$T/h2.log" | head -n 2)"
fi

# 6. SIGTERM to one rank only: every rank stops after the same step, with a
# complete checkpoint, exit 0; resuming continues exactly (constant LR).
long=("${small[@]}" --zero 1 --warmup 0 --lr-final-frac 1)
"${MPI[@]}" -np 2 "$TG" "${long[@]}" --steps 100000 --checkpoint-dir "$T/term" >"$T/term.log" 2>&1 &
mpi=$!
for _ in $(seq 1 600); do
  n=$(grep -c '^step ' "$T/term.log" 2>/dev/null)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.05
done
rank1=$(pgrep -P "$mpi" -x train_gpt | tail -n 1)
[ -n "$rank1" ] && kill -TERM "$rank1"
wait "$mpi"
rc=$?
S=$(grep -E '^stop ' "$T/term.log" | sed -E 's/.*after step ([0-9]+):.*/\1/')
if [ "$rc" -eq 0 ] && [ -n "$S" ] && [ -f "$(printf '%s/step_%08d/manifest.json' "$T/term" "$S")" ]; then
  ok mpi_sigterm_one_rank_stops_all
else
  fail mpi_sigterm_one_rank_stops_all "rc $rc, stop after '$S': $(tail -n 3 "$T/term.log")"
fi
E=$((S + 3))
"${MPI[@]}" -np 2 "$TG" "${long[@]}" --steps "$E" --checkpoint-dir "$T/term" --export "$T/term_r.bin" --log-dir "$T/term_r.metrics" >"$T/term_r.log" 2>&1
"${MPI[@]}" -np 2 "$TG" "${long[@]}" --steps "$E" --export "$T/term_s.bin" --log-dir "$T/term_s.metrics" >"$T/term_s.log" 2>&1
if [ "$(resumed_from "$T/term_r.log")" = "$S" ] && [ "$(lines_after "$T/term_r.metrics" "$S")" = "$(lines_after "$T/term_s.metrics" "$S")" ] &&
   cmp -s "$T/term_r.bin" "$T/term_s.bin"; then
  ok mpi_sigterm_resume_exact
else
  fail mpi_sigterm_resume_exact "resumed from '$(resumed_from "$T/term_r.log")' (want $S)"
fi

# 7. A crash in the middle of a 2-rank save: the restart takes the previous
# checkpoint and ends with the uninterrupted run's weights.
(TRAIN_GPT_CRASH_AT=mid-shard@20 "${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 1 --steps 30 --checkpoint-dir "$T/c" \
   --checkpoint-every 10 --keep-last 1
 exit $?) >"$T/c1.log" 2>&1
rc1=$?
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 1 --steps 30 --checkpoint-dir "$T/c" --checkpoint-every 10 --keep-last 1 \
  --export "$T/c.bin" --log-dir "$T/c2.metrics" >"$T/c2.log" 2>&1
"${MPI[@]}" -np 2 "$TG" "${small[@]}" --zero 1 --steps 30 --export "$T/c_ref.bin" >/dev/null 2>&1
if [ "$rc1" -ne 0 ] && [ "$(resumed_from "$T/c2.log")" = 10 ] && cmp -s "$T/c.bin" "$T/c_ref.bin"; then
  ok mpi_crash_mid_save_resumes
else
  fail mpi_crash_mid_save_resumes "crash rc $rc1, resumed from '$(resumed_from "$T/c2.log")'; $(grep -E 'error|warning' "$T/c2.log" | head -n 2)"
fi

finish
