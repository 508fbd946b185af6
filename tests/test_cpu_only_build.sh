#!/usr/bin/env bash
# test_cpu_only_build.sh: without nvcc the Makefile builds a CPU-only
# train_gpt with gcc alone, and that binary trains.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

out=build/cpu-only
if make --no-print-directory NO_CUDA=1 BUILD="$out" BIN="$out/train_gpt" -j2 "$out/train_gpt" >"$TEST_TMP/build.log" 2>&1; then
  if grep -q nvcc "$TEST_TMP/build.log"; then fail cpu_only_build_uses_gcc "nvcc ran in a NO_CUDA build"; else ok cpu_only_build_uses_gcc; fi
else
  fail cpu_only_build_uses_gcc "build failed: $(tail -n 5 "$TEST_TMP/build.log")"
fi
if "$out/train_gpt" --depth 1 --seq-len 32 --micro-batch 2 --steps 2 --val-every 0 --sample-every 0 >"$TEST_TMP/run.log" 2>&1 &&
   grep -q 'backend cpu' "$TEST_TMP/run.log" && [ "$(grep -c '^step ' "$TEST_TMP/run.log")" -eq 2 ]; then
  ok cpu_only_binary_trains
else
  fail cpu_only_binary_trains "$(tail -n 3 "$TEST_TMP/run.log")"
fi
expect_error cpu_only_rejects_cuda "--device cuda.*without CUDA" "$out/train_gpt" --device cuda
finish
