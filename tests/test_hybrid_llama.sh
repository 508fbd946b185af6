#!/usr/bin/env bash
# test_hybrid_llama.sh: hybrid sharding (--shard-scope node) with a Llama, the
# twin of test_zero.sh's and test_checkpoint_mpi.sh's GPT-2 cases. A small
# Llama with an odd head count and grouped-query attention (3 query heads
# sharing 1 kv head, 2 layers, untied head) trains 20 steps on 4 ranks as 2
# simulated nodes x 2 (TRAIN_GPT_RANKS_PER_NODE=2) at ZeRO 1, 2 and 3, against
# the same global batch on 1 rank and on 4 flat ranks.
#
# The tolerances are the GPT-2 tests': losses equal at printed precision,
# weights within 2e-5 (hybrid sums within nodes, then across them: another
# order, ~1e-6); ZeRO-2 and 3 bitwise equal to each other in the hybrid layout.
# Checkpoints (model.bin is the run's weights as an llm.c-format FP32 file; a
# Llama has no --export): the hybrid run's step-10 checkpoint holds 2 shards,
# resumes bit for bit on the same layout, and loads on 2 flat ranks within 1e-5.
# Shard groups (--shard-group): 6 ranks in groups of 3 against one rank, and
# their checkpoint resharded to 4 ranks in groups of 1.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# 12 windows per step: 1 rank x 12 micro-steps, 4 x 3. No clipping: the global
# norm's summation order depends on the rank count (test_zero.sh).
llama=(--device cpu --arch llama --layers 2 --channels 96 --heads 3 --kv-heads 1 --mlp-hidden 160 --seq-len 32
       --micro-batch 1 --batch-tokens 384 --steps 20 --val-every 10 --val-batches 4 --sample-every 0 --threads 1
       --grad-clip 0 --keep-last 0)

# run NP NAME ARGS...: NP ranks; log $T/NAME.log, metrics $T/NAME/, checkpoints $T/NAME.ck
# (one at step 10 and one at 20, whose model.bin is the final weights).
run() {
  local np=$1 name=$2
  shift 2
  "${MPI[@]}" -np "$np" "$TG" "${llama[@]}" --checkpoint-dir "$T/$name.ck" --checkpoint-every 10 --log-dir "$T/$name" \
    "$@" >"$T/$name.log" 2>&1
}
weights() { echo "$T/$1.ck/step_00000020/model.bin"; }
ran_ok() { [ -s "$(weights "$1")" ] && [ "$(steps_logged "$T/$1")" -eq 20 ]; }
# agree NAME A B TOL WHAT: the same step and validation lines, weights within TOL.
agree() {
  local name=$1 a=$2 b=$3 tol=$4 what=$5 d
  d=$(maxdiff "$(weights "$a")" "$(weights "$b")")
  echo "# $what: max |weight diff| $d"
  if [ "$(lines_after "$T/$a" 0)" = "$(lines_after "$T/$b" 0)" ] && within "$d" "$tol"; then ok "$name"
  else fail "$name" "max |diff| '$d' or losses differ: $(diff <(lines_after "$T/$a" 0) <(lines_after "$T/$b" 0) | head -n 3)"; fi
}

# 1. The references: one rank (ZeRO-0) and 4 flat ranks at each stage.
run 1 w1z0 --zero 0
if ran_ok w1z0 && grep -q '^llama     | kv heads 1 | MLP 160' "$T/w1z0.log"; then ok llama_hybrid_reference_runs
else fail llama_hybrid_reference_runs "$(tail -n 2 "$T/w1z0.log")"; fi
for z in 1 2 3; do run 4 "w4z$z" --zero "$z"; done

# 2. Hybrid 2 x 2 at ZeRO 1-3 against the flat 4-rank run and against one rank.
for z in 1 2 3; do
  TRAIN_GPT_RANKS_PER_NODE=2 run 4 "hyb$z" --zero "$z" --shard-scope node
  if ! ran_ok "hyb$z" || ! grep -q 'sharded over 2 ranks per node' "$T/hyb$z.log" || ! ran_ok "w4z$z"; then
    fail "llama_hybrid_matches_flat_zero$z" "$(tail -n 2 "$T/hyb$z.log" "$T/w4z$z.log")"
    continue
  fi
  agree "llama_hybrid_matches_flat_zero$z" "w4z$z" "hyb$z" 2e-5 "Llama hybrid 2x2 vs flat 4 ranks, ZeRO-$z"
  agree "llama_hybrid_matches_one_rank_zero$z" w1z0 "hyb$z" 2e-5 "Llama hybrid 2x2 ZeRO-$z vs 1 rank ZeRO-0"
done
if [ -s "$(weights hyb2)" ] && cmp -s "$(weights hyb2)" "$(weights hyb3)"; then ok llama_hybrid_zero2_zero3_bitwise
else fail llama_hybrid_zero2_zero3_bitwise "weights differ"; fi

# 3. Checkpoints across the hybrid layout, at ZeRO 1 and 3: the step-10
# checkpoint of hybZ holds the first node's 2 shards and a world of 4; resumed on
# the same layout it repeats steps 11-20 and ends with the same weights; on 2
# flat ranks (the same stage) it ends within 1e-5 of the hybrid run.
for z in 1 3; do
  ck=$T/hyb$z.ck/step_00000010
  TRAIN_GPT_RANKS_PER_NODE=2 run 4 "hyb${z}r" --zero "$z" --shard-scope node --resume "$ck"
  run 2 "flat${z}r" --zero "$z" --resume "$ck"
  files=$(cd "$ck" 2>/dev/null && echo *)
  d=$(maxdiff "$(weights "hyb$z")" "$(weights "flat${z}r")" 2>/dev/null)
  echo "# Llama hybrid 2 x 2 ZeRO-$z checkpoint -> 2 flat ranks: final weights differ by $d"
  if [ "$files" = "manifest.json model.bin shard_00000_of_00002.bin shard_00001_of_00002.bin" ] &&
     grep -q '"world": 4,' "$ck/manifest.json" && grep -q '"arch": "llama"' "$ck/manifest.json" &&
     [ "$(resumed_from "$T/hyb${z}r.log")" = 10 ] && [ "$(resumed_from "$T/flat${z}r.log")" = 10 ] &&
     cmp -s "$(weights "hyb$z")" "$(weights "hyb${z}r")" &&
     [ "$(lines_after "$T/hyb$z" 10 | wc -l)" -eq 11 ] && [ "$(lines_after "$T/hyb$z" 10)" = "$(lines_after "$T/hyb${z}r" 10)" ] &&
     within "$d" 1e-5; then
    ok "llama_hybrid_checkpoint_zero$z"
  else
    fail "llama_hybrid_checkpoint_zero$z" "files: $files; -> 2 ranks differ by '$d'; $(grep -h error "$T/hyb${z}r.log" "$T/flat${z}r.log" | head -n 2)"
  fi
done

# 4. Shard groups of any size (--shard-group N; groups of one node are the
# hybrid case above): 6 ranks as 6 simulated nodes of 1, sharded in groups of
# 3 whole nodes at ZeRO 3, against one rank; then their step-10 checkpoint (3
# shards) resumed on 4 ranks (2 nodes of 2) in groups of 1, a divisor of the
# node, at ZeRO 1.
TRAIN_GPT_RANKS_PER_NODE=1 run 6 sg3z3 --zero 3 --shard-group 3
if ran_ok sg3z3 && grep -q 'sharded over 3 ranks per group, 2 groups' "$T/sg3z3.log"; then
  agree llama_shard_group3_matches_one_rank w1z0 sg3z3 1e-5 "Llama 6 ranks in shard groups of 3, ZeRO-3, vs 1 rank"
else fail llama_shard_group3_matches_one_rank "$(tail -n 2 "$T/sg3z3.log")"; fi
ck=$T/sg3z3.ck/step_00000010
TRAIN_GPT_RANKS_PER_NODE=2 run 4 sg1r --zero 1 --shard-group 1 --resume "$ck"
files=$(cd "$ck" 2>/dev/null && echo *)
d=$(maxdiff "$(weights sg3z3)" "$(weights sg1r)" 2>/dev/null)
echo "# Llama groups of 3 (ZeRO-3) -> groups of 1 (ZeRO-1) at step 10: final weights differ by $d"
if [ "$files" = "manifest.json model.bin shard_00000_of_00003.bin shard_00001_of_00003.bin shard_00002_of_00003.bin" ] &&
   [ "$(resumed_from "$T/sg1r.log")" = 10 ] && grep -q 'sharded over 1 rank per group, 4 groups' "$T/sg1r.log" &&
   [ "$(lines_after "$T/sg3z3" 10)" = "$(lines_after "$T/sg1r" 10)" ] && within "$d" 1e-5; then
  ok llama_shard_group_reshard_3_to_1
else
  fail llama_shard_group_reshard_3_to_1 "files: $files; differ by '$d'; $(grep -h -E 'error|resume' "$T/sg1r.log" | head -n 2)"
fi

finish
