#!/usr/bin/env bash
# test_sim_bench_bytes.sh: dev/bench_gpu's table of a training step's
# memory-bound ops (issue 28), run on the simulated GPU at a tiny shape
# (bench_gpu --step-bytes --tiny). The timings mean nothing here; what is
# checked is what the first GPU run relies on: every planner row whose work
# is done by separate kernels finds them by their op names
# (kernels/cuda/op_watch.cu), rows whose work is fused say so, the total is
# the sum of the rows, and the op profile is not printed a second time.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
BG=${SIM_BENCH_GPU:-build/sim/bin/bench_gpu}
T=$TEST_TMP

if ! "$BG" --step-bytes --tiny >"$T/out.txt" 2>"$T/err.txt"; then
  fail sim_bench_step_bytes_runs "$(tail -n 3 "$T/err.txt")"
  finish
fi
ok sim_bench_step_bytes_runs

# The rows: op name, planned GB, plan ms, measured ms, GB/s, calls per step.
row() { grep -E "^  $1 +[0-9]" "$T/out.txt"; }
found=1
for r in 'norms \+ residual adds' embeddings loss adamw; do
  line=$(row "$r")
  # calls per step (last field) and measured ms (the field before GB/s) must be positive
  if ! echo "$line" | awk '{ if (!($NF + 0 > 0 && $(NF - 2) + 0 > 0)) exit 1 }'; then
    found=0
    echo "  row '$r': '$line'"
  fi
done
if [ "$found" = 1 ]; then ok sim_bench_rows_find_their_kernels; else fail sim_bench_rows_find_their_kernels "$(cat "$T/out.txt")"; fi

# GELU runs in the fc GEMM's cuBLASLt epilogue here, and the bias gradients inside matmul_backward.
if grep -Eq '^  gelu/swiglu .*no kernel ran: fused' "$T/out.txt" && grep -Eq '^  bias grads .*inside matmul_backward' "$T/out.txt"; then
  ok sim_bench_fused_rows_say_so
else
  fail sim_bench_fused_rows_say_so "$(grep -E '^  (gelu|bias)' "$T/out.txt")"
fi

# The total's measured ms is the sum of the rows' (to the printed precision).
if awk '/^  op /{on = 1; next} on && /^  = total/{ t = $(NF); exit } on && /^  /{ if ($0 !~ /no kernel ran|inside matmul/) s += $(NF - 2) }
        END { exit !(t != "" && (s - t) ^ 2 < 1e-4 + (1e-5 * t) ^ 2) }' "$T/out.txt"; then
  ok sim_bench_total_is_sum
else
  fail sim_bench_total_is_sum "$(grep -A12 '^  op ' "$T/out.txt")"
fi

if grep -q '^op profile |' "$T/err.txt"; then fail sim_bench_profile_taken_once "$(head -n 3 "$T/err.txt")"; else ok sim_bench_profile_taken_once; fi
finish
