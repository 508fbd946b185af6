#!/usr/bin/env bash
# gpu_check.sh: the one command to run on a machine with a GPU. Builds
# train_gpt and the GPU programs for this GPU only (-gencode for its compute
# capability, so the build takes seconds), runs the GPU test suite
# (make test-gpu: every CUDA op and whole training steps against the CPU
# backend), then the GPU benchmarks (dev/bench_gpu.c), and prints a summary
# last: the test totals and, per op and shape, time and TFLOP/s or GB/s
# against the device's peak, per model tokens/s and MFU, and FP8 against BF16
# (GEMM TFLOP/s at hidden 2048/4096/8192, tokens/s of a hidden-4096 model,
# as ratios) on GPUs with FP8. Sized to finish in
# about 5 minutes on one H200 (not yet timed on one). Logs:
# build-smXX/gpu_check_{build,tests,bench}.log. Needs the build dependencies
# (scripts/install_deps.sh) and the CUDA toolkit.
#
#   scripts/gpu_check.sh            full run
#   scripts/gpu_check.sh --quick    shorter benchmarks (one model, fewer repetitions)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no GPU here (nvidia-smi finds none); nothing to check" >&2
  exit 1
fi
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
build="build-sm$cap"
arch="-gencode arch=compute_$cap,code=sm_$cap"
jobs=$(nproc)
echo "gpu_check: $gpu (sm_$cap), building in $build/"

gpu_tests=()
for f in tests/gpu/test_*.c; do
  [ -e "$f" ] && gpu_tests+=("$build/gpu/$(basename "$f" .c)")
done

start=$(date +%s)
if ! make -j"$jobs" BUILD="$build" BIN="$build/train_gpt" CUDA_ARCH="$arch" \
     "$build/train_gpt" "$build/gpu/bench_gpu" "${gpu_tests[@]}" \
     > "$build.log" 2>&1; then
  tail -30 "$build.log"
  echo "gpu_check: build failed (log: $build.log)" >&2
  exit 1
fi
mv "$build.log" "$build/gpu_check_build.log"
built=$(date +%s)
echo "gpu_check: built in $((built - start)) s; running the GPU tests"

make --no-print-directory BUILD="$build" BIN="$build/train_gpt" CUDA_ARCH="$arch" test-gpu \
  2>&1 | tee "$build/gpu_check_tests.log" | grep -E '^(ok|FAIL|#|===)' 
tested=$(date +%s)
echo "gpu_check: tests took $((tested - built)) s; running the benchmarks"

"$build/gpu/bench_gpu" "$@" 2>&1 | tee "$build/gpu_check_bench.log" | sed '/^---- summary/,$d'
benched=$(date +%s)

echo
echo "==== gpu_check summary: $gpu, build $((built - start)) s, tests $((tested - built)) s, benchmarks $((benched - tested)) s ===="
grep -E '^FAIL' "$build/gpu_check_tests.log" || true
echo "tests: $(tail -1 "$build/gpu_check_tests.log")"
sed -n '/^---- summary/,$p' "$build/gpu_check_bench.log"
