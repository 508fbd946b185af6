#!/usr/bin/env bash
# test_bench_comm.sh: dev/bench_comm runs under mpirun on the CPU backend and
# reports the three collectives at the sizes that fit --max-mib, skipping the
# others, and says n/a for bus bandwidth on one rank (no link is used).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
BIN=build/bench_comm

"${MPI[@]}" -np 2 "$BIN" --max-mib 1 --iters 1 >"$T/two.txt" 2>&1
rc=$?
# The final units of gpt-7B and gpt-64B (a norm) fit in 1 MiB; the layers and llama3-8B's LM head do not.
if [ "$rc" -eq 0 ] && grep -q '^bench_comm | 2 ranks' "$T/two.txt" &&
   [ "$(grep -c 'all-gather .* ms .* GB/s | reduce-scatter .* ms .* GB/s | all-reduce .* ms .* GB/s$' "$T/two.txt")" -eq 2 ] &&
   [ "$(grep -c 'skipped: larger than --max-mib 1$' "$T/two.txt")" -eq 4 ]; then
  ok bench_comm_two_ranks
else
  fail bench_comm_two_ranks "exit status $rc: $(head -n 8 "$T/two.txt")"
fi

"${MPI[@]}" -np 1 "$BIN" --max-mib 1 --iters 1 >"$T/one.txt" 2>&1
if grep -q 'all-gather n/a (one rank) | reduce-scatter n/a (one rank) | all-reduce n/a (one rank)' "$T/one.txt"; then
  ok bench_comm_one_rank_says_na
else
  fail bench_comm_one_rank_says_na "$(head -n 4 "$T/one.txt")"
fi

expect_error bench_comm_bad_flag "unknown argument '--bogus'" "$BIN" --bogus
finish
