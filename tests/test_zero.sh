#!/usr/bin/env bash
# test_zero.sh: multi-rank training under Open MPI on the CPU backend: the
# collectives and per-rank memory (test_comm under 3 and 4 ranks), the same
# model from 1, 2, 3 and 4 ranks at ZeRO 0-3, gradient accumulation against
# ranks, hybrid sharding, determinism, and errors on one rank or on all.
#
# What is bitwise and what is not: every reduction sums the ranks in rank
# order, so at ZeRO-2/3 (each micro-step's gradients reduced onto the shard)
# any number of ranks gives the same bits as one rank accumulating the same
# micro-batches. ZeRO-0/1 accumulate micro-steps inside the backward kernels
# (sgemm with beta = 1, and the tied embedding's two contributions), which
# rounds differently from summing whole micro-step gradients, so they agree
# with ZeRO-2/3 and across rank counts to ~1e-6, not bitwise; at one rank
# count, ZeRO-0 and 1 are bitwise equal to each other. With gradient clipping
# active the global norm is summed shard by shard, an order that depends on
# the rank count, so runs of different sizes differ in the last bits;
# --grad-clip 0 isolates everything else. Hybrid sharding sums within nodes
# and then across them, a different order again (~1e-6).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
# vader's single-copy mode needs ptrace rights that containers often lack.
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
# 12 windows per step: 1 rank x 12 micro-steps, 2 x 6, 3 x 4, 4 x 3.
small=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --batch-tokens 384 --steps 20 --val-every 10
       --val-batches 4 --sample-every 0 --threads 1)

# run NP NAME ARGS...: NP ranks of train_gpt, output in $T/NAME.log, weights in $T/NAME.bin,
# metrics.jsonl in $T/NAME/.
run() {
  local np=$1 name=$2
  shift 2
  "${MPI[@]}" -np "$np" "$TG" "$@" --export "$T/$name.bin" --log-dir "$T/$name" >"$T/$name.log" 2>&1
}
# lines: step and validation losses of a run (its log dir), for comparing runs at printed precision.
curve() { jsonl_lines "$1"; }
ran_ok() { [ -s "$T/$1.bin" ] && [ "$(steps_logged "$T/$1")" -eq "$2" ]; }
# runs_agree NAME A B TOL WHAT: runs A and B print the same losses and their
# weights differ by at most TOL (reported as "# WHAT: max |weight diff| D").
runs_agree() {
  local name=$1 a=$2 b=$3 tol=$4 what=$5 d
  d=$(maxdiff "$T/$a.bin" "$T/$b.bin")
  echo "# $what: max |weight diff| $d"
  if [ "$(curve "$T/$a")" = "$(curve "$T/$b")" ] && within "$d" "$tol"; then ok "$name"
  else fail "$name" "max |diff| $d or losses differ"; fi
}

# 1. Collectives and memory per rank, under several ranks (test_comm also runs
# as one process in the suite).
for np in 3 4; do
  "${MPI[@]}" -np "$np" build/tests/test_comm 2>"$T/comm$np.err" || fail "test_comm_w$np" "exit status $?: $(tail -n 3 "$T/comm$np.err")"
  grep '^test_comm:' "$T/comm$np.err" | sed 's/^/# /'
done

# ZeRO-3's schedule, recorded (test_zero_schedule also runs as one process in
# the suite): 2 simulated nodes of 2 ranks, where reductions cross nodes.
TRAIN_GPT_RANKS_PER_NODE=2 "${MPI[@]}" -x TRAIN_GPT_RANKS_PER_NODE -np 4 build/tests/test_zero_schedule >"$T/sched.out" 2>"$T/sched.err"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c '^ok ' "$T/sched.out")" -eq 2 ]; then ok zero3_schedule_hybrid_w4
else fail zero3_schedule_hybrid_w4 "exit status $rc: $(grep -v '^ok' "$T/sched.out" | head -n 2) $(tail -n 2 "$T/sched.err")"; fi

# 2. The same global batch from 1, 2, 3 and 4 ranks at every stage, 20 steps.
for np in 1 2 3 4; do
  for z in 0 1 2 3; do run "$np" "w${np}z$z" "${small[@]}" --zero "$z" --grad-clip 0; done
done
all_ran=1
for np in 1 2 3 4; do for z in 0 1 2 3; do ran_ok "w${np}z$z" 20 || { all_ran=0; fail "world_matrix_runs" "w${np}z$z: $(tail -n 2 "$T/w${np}z$z.log")"; }; done; done
if [ "$all_ran" = 1 ]; then
  ok world_matrix_runs
  same=1
  for np in 1 2 3 4; do for z in 0 1 2 3; do [ "$(curve "$T/w${np}z$z")" = "$(curve "$T/w1z0")" ] || same=0; done; done
  if [ "$same" = 1 ]; then ok losses_agree_across_ranks_and_stages; else fail losses_agree_across_ranks_and_stages "step or val lines differ at printed precision"; fi
  bitwise=1
  for np in 1 2 3 4; do
    cmp -s "$T/w${np}z0.bin" "$T/w${np}z1.bin" || bitwise=0
    for z in 2 3; do cmp -s "$T/w${np}z$z.bin" "$T/w1z2.bin" || bitwise=0; done
  done
  if [ "$bitwise" = 1 ]; then ok zero23_bitwise_across_ranks_zero01_within; else fail zero23_bitwise_across_ranks_zero01_within "weights differ"; fi
  worst=0
  for np in 1 2 3 4; do for z in 0 1 2 3; do
    d=$(maxdiff "$T/w1z2.bin" "$T/w${np}z$z.bin"); within "$d" "$worst" || worst=$d
  done; done
  echo "# largest weight difference across ranks and stages after 20 steps: $worst"
  if within "$worst" 2e-5; then ok weights_agree_across_ranks_and_stages; else fail weights_agree_across_ranks_and_stages "max |diff| $worst > 2e-5"; fi
fi

# 3. With clipping on (the default), 1 rank at ZeRO-0 against 4 at ZeRO-3.
run 1 clip1 "${small[@]}" --zero 0
run 4 clip4 "${small[@]}" --zero 3
if ran_ok clip1 20 && ran_ok clip4 20; then
  runs_agree clipped_runs_agree clip1 clip4 2e-5 "with clipping: 1 rank ZeRO-0 vs 4 ranks ZeRO-3"
else
  fail clipped_runs_agree "$(tail -n 2 "$T/clip4.log")"
fi

# make test runs the cases that cover each mechanism once; make test-long
# (TRAIN_GPT_TEST_LONG=1) every stage of sections 4 and 5b as well.
long=${TRAIN_GPT_TEST_LONG:-}

# 4. Gradient accumulation against ranks: 1 rank x 4 micro-steps = 4 ranks x 1
# (ZeRO-0 accumulates in the backward, ZeRO-3 on the shard; 1 and 2 in test-long).
acc=(--device cpu --depth 1 --seq-len 32 --micro-batch 2 --batch-tokens 256 --steps 6 --val-every 0 --sample-every 0
     --threads 1 --grad-clip 0)
for z in 0 1 2 3; do
  [ -z "$long" ] && { [ "$z" = 1 ] || [ "$z" = 2 ]; } && continue
  run 1 "acc1z$z" "${acc[@]}" --zero "$z"
  run 4 "acc4z$z" "${acc[@]}" --zero "$z"
  if ! ran_ok "acc1z$z" 6 || ! ran_ok "acc4z$z" 6 || ! grep -q 'accumulation 4 ' "$T/acc1z$z.log" ||
     ! grep -q 'ranks 4 x accumulation 1 ' "$T/acc4z$z.log"; then
    fail "accumulation_equals_ranks_zero$z" "$(tail -n 2 "$T/acc4z$z.log")"
  elif [ "$z" -ge 2 ]; then
    if cmp -s "$T/acc1z$z.bin" "$T/acc4z$z.bin"; then ok "accumulation_equals_ranks_zero${z}_bitwise"
    else fail "accumulation_equals_ranks_zero${z}_bitwise" "weights differ: $(maxdiff "$T/acc1z$z.bin" "$T/acc4z$z.bin")"; fi
  else
    runs_agree "accumulation_equals_ranks_zero$z" "acc1z$z" "acc4z$z" 1e-5 "ZeRO-$z: 1 rank x 4 vs 4 ranks x 1"
  fi
done

# 5. Hybrid sharding: 2 simulated nodes x 2 ranks against the flat 4-rank run.
for z in 1 2 3; do
  TRAIN_GPT_RANKS_PER_NODE=2 run 4 "hyb$z" "${small[@]}" --zero "$z" --grad-clip 0 --shard-scope node
  if ! ran_ok "hyb$z" 20 || ! grep -q 'sharded over 2 ranks per node' "$T/hyb$z.log"; then
    fail "hybrid_matches_flat_zero$z" "$(tail -n 2 "$T/hyb$z.log")"
    continue
  fi
  runs_agree "hybrid_matches_flat_zero$z" "w4z$z" "hyb$z" 2e-5 "hybrid 2x2 vs flat 4 ranks, ZeRO-$z"
done
if cmp -s "$T/hyb2.bin" "$T/hyb3.bin"; then ok hybrid_zero2_zero3_bitwise; else fail hybrid_zero2_zero3_bitwise "weights differ"; fi

# ZeRO-3 prefetching two units ahead (a third layer slot) computes the same bits.
run 4 w4z3k2 "${small[@]}" --zero 3 --zero3-prefetch 2 --grad-clip 0
if ran_ok w4z3k2 20 && cmp -s "$T/w4z3k2.bin" "$T/w4z3.bin"; then ok zero3_prefetch2_bitwise
else fail zero3_prefetch2_bitwise "$(tail -n 2 "$T/w4z3k2.log")"; fi

# 5b. Shard groups of any size (--shard-group N) against one rank: groups of 1
# inside nodes of 2 (4 ranks), and groups of 3 whole nodes of 1 (6 ranks; the
# batch is 12 windows, 2 micro-steps per rank). Groups sum within the group,
# then across groups: another order (~1e-6, as hybrid sharding). make test:
# groups of 1 at ZeRO-1 and 3, groups of 3 at ZeRO-3; the rest in test-long.
for z in 1 2 3; do
  [ -z "$long" ] && [ "$z" = 2 ] && continue
  TRAIN_GPT_RANKS_PER_NODE=2 run 4 "sg1z$z" "${small[@]}" --zero "$z" --grad-clip 0 --shard-group 1
  if ran_ok "sg1z$z" 20 && grep -q 'sharded over 1 rank per group, 4 groups' "$T/sg1z$z.log"; then
    runs_agree "shard_group1_matches_one_rank_zero$z" w1z2 "sg1z$z" 1e-5 "4 ranks in groups of 1, ZeRO-$z, vs 1 rank"
  else fail "shard_group1_matches_one_rank_zero$z" "$(tail -n 2 "$T/sg1z$z.log")"; fi
done
for z in 1 3; do
  [ -z "$long" ] && [ "$z" = 1 ] && continue
  TRAIN_GPT_RANKS_PER_NODE=1 run 6 "sg3z$z" "${small[@]}" --zero "$z" --grad-clip 0 --shard-group 3
  if ran_ok "sg3z$z" 20 && grep -q 'sharded over 3 ranks per group, 2 groups' "$T/sg3z$z.log"; then
    runs_agree "shard_group3_matches_one_rank_zero$z" w1z2 "sg3z$z" 1e-5 "6 ranks in groups of 3, ZeRO-$z, vs 1 rank"
  else fail "shard_group3_matches_one_rank_zero$z" "$(tail -n 2 "$T/sg3z$z.log")"; fi
done

# 6. Same ranks and flags, same bits.
run 3 again "${small[@]}" --zero 3 --grad-clip 0
if cmp -s "$T/again.bin" "$T/w3z3.bin" && [ "$(step_losses "$T/again")" = "$(step_losses "$T/w3z3")" ]; then
  ok rerun_bit_identical
else
  fail rerun_bit_identical "a second run with 3 ranks differs"
fi

# 7. Errors. One rank fails (its own data is missing, or holds a token outside
# the vocabulary, found mid-step while the others wait in collectives): every
# rank exits, the error is printed once, naming the rank, within seconds.
"$PY" - "$T" <<'EOF'
import sys, numpy as np
h = np.zeros(256, dtype=np.int32); h[:3] = [20240520, 1, 20000]
open(f"{sys.argv[1]}/bad_vocab.bin", "wb").write(h.tobytes() + np.full(20000, 5000, dtype=np.uint16).tobytes())
EOF
one=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --steps 50 --val-every 0 --sample-every 0 --threads 1)
# expect_mpi_error NAME PATTERN MPIRUN-ARGS...: nonzero exit, one error line matching PATTERN, under 30 s.
expect_mpi_error() {
  local name=$1 pattern=$2 start err rc lines
  shift 2
  start=$(date +%s)
  err=$(timeout 60 "${MPI[@]}" "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c '^train_gpt: error:')
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then fail "$name" "exit status $rc"
  elif [ "$lines" -ne 1 ]; then fail "$name" "expected one error line, got $lines: $(printf '%s\n' "$err" | grep error)"
  elif ! printf '%s\n' "$err" | grep '^train_gpt: error:' | grep -Eq -- "$pattern"; then fail "$name" "no /$pattern/: $err"
  elif [ $(($(date +%s) - start)) -gt 30 ]; then fail "$name" "took $(($(date +%s) - start)) s"
  else ok "$name"; fi
}
expect_mpi_error one_rank_missing_shard 'rank 2 of 4 .*no files match' \
  -np 2 "$TG" "${one[@]}" : -np 1 "$TG" "${one[@]}" --train-data "$T/missing_*.bin" : -np 1 "$TG" "${one[@]}"
expect_mpi_error one_rank_bad_token_mid_step 'rank 1 of 3 .*bad_vocab\.bin.*5000' \
  -np 1 "$TG" "${one[@]}" --zero 3 : -np 1 "$TG" "${one[@]}" --zero 3 --train-data "$T/bad_vocab.bin" : -np 1 "$TG" "${one[@]}" --zero 3
expect_mpi_error every_rank_bad_flag '^train_gpt: error: unknown flag .--bogus' -np 3 "$TG" "${one[@]}" --bogus 1
expect_mpi_error ranks_per_node_not_dividing 'TRAIN_GPT_RANKS_PER_NODE=3' -x TRAIN_GPT_RANKS_PER_NODE=3 -np 4 "$TG" "${one[@]}"
expect_error bad_zero_stage '--zero 4' "$TG" "${one[@]}" --zero 4
expect_error bad_shard_scope "--shard-scope 'rack'" "$TG" "${one[@]}" --shard-scope rack
expect_error bad_zero3_prefetch '--zero3-prefetch 3' "$TG" "${one[@]}" --zero3-prefetch 3
expect_mpi_error shard_group_not_dividing_ranks '--shard-group 3 does not divide the 4 ranks' -np 4 "$TG" "${one[@]}" --shard-group 3
expect_mpi_error shard_group_across_node_boundary '--shard-group 2 is neither a divisor nor a multiple of the 3 ranks per node' \
  -x TRAIN_GPT_RANKS_PER_NODE=3 -np 6 "$TG" "${one[@]}" --shard-group 2
expect_mpi_error shard_group_and_scope_disagree '--shard-group 1 and --shard-scope world \(2 ranks\) disagree' \
  -np 2 "$TG" "${one[@]}" --shard-group 1 --shard-scope world
expect_error node_scope_needs_sharding '--shard-scope node needs --zero' "$TG" "${one[@]}" --zero 0 --shard-scope node

finish
