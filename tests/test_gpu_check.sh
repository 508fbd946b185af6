#!/usr/bin/env bash
# test_gpu_check.sh: scripts/gpu_check.sh without a GPU. --dry-run walks both
# phases, names every step with its timeout, checks the kit and ends with the
# summary table; a kit missing a program fails the dry run naming it; a
# stand-in kit (names only, no nvcc needed) shows the perf phase's
# Llama-3-8B-shaped steps (ours and PyTorch's) with their timeouts; bad
# arguments get one clear error. The summary (scripts/gpu_check_summary.py)
# is checked on canned step logs in the exact formats of dev/bench_gpu.c and
# dev/reference.py: ratios against PyTorch, the bit-for-bit resume check,
# BF16 against the CPU curve, failures counted.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
T=$TEST_TMP

# ---- arguments ----
scripts/gpu_check.sh --phase bogus >"$T/bad.out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "phase 'bogus' is not one of correctness, perf, all" "$T/bad.out"; then
  ok gpu_check_rejects_bad_phase
else
  fail gpu_check_rejects_bad_phase "exit $rc: $(cat "$T/bad.out")"
fi

# ---- the dry run over the kit ----
kit=${GPU_KIT:-gpu-kit}
if [ -f "$kit/bin.tar.xz" ]; then
  GPU_CHECK_WORK=$T/dry scripts/gpu_check.sh --dry-run --kit "$kit" >"$T/dry.out" 2>&1
  rc=$?
  steps_named=$(grep -c '^dry-run: .* (timeout [0-9]*s): ' "$T/dry.out")
  if [ "$rc" -eq 0 ] && [ "$steps_named" -ge 20 ] && grep -q '^dry-run: bench-torch (timeout 300s): python3 .*reference.py --cuda-bench' "$T/dry.out" &&
     grep -q '^dry-run: sanitizer-racecheck-test_gpu_ops' "$T/dry.out" && grep -q '^dry-run: train-resume' "$T/dry.out" &&
     grep -Eq '^kit +ok' "$T/dry.out" && tail -n 1 "$T/dry.out" | grep -q '^0 failed'; then
    ok gpu_check_dry_run_walks_both_phases
  else
    fail gpu_check_dry_run_walks_both_phases "exit $rc, $steps_named steps: $(grep -E 'FAIL|failed' "$T/dry.out" | head -n 3)"
  fi
  # The same kit, its archive without bench_gpu (names only: a dry run unpacks nothing).
  cp -r "$kit" "$T/kit"
  python3 - "$T/kit/bin.tar.xz" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w:xz") as t:
    for name in ("bin/train_gpt", "bin/test_gpu_ops", "bin/test_gpu_fp8", "bin/test_gpu_grid"):
        info = tarfile.TarInfo(name)
        info.mode = 0o755
        t.addfile(info, io.BytesIO(b""))
PY
  GPU_CHECK_WORK=$T/dry2 scripts/gpu_check.sh --dry-run --kit "$T/kit" --phase perf >"$T/dry2.out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q 'FAIL bench-gpu: .*bench_gpu is missing' "$T/dry2.out" && tail -n 1 "$T/dry2.out" | grep -q '^[1-9][0-9]* failed'; then
    ok gpu_check_dry_run_finds_a_missing_program
  else
    fail gpu_check_dry_run_finds_a_missing_program "exit $rc: $(tail -n 3 "$T/dry2.out")"
  fi
else
  echo "# skipped the dry run: no GPU kit at $kit (built by make tests where nvcc exists)"
fi

# ---- the dry run over a stand-in kit (program names only), so that it runs without nvcc too ----
# The perf phase lists the Llama-3-8B-shaped steps, ours and PyTorch's, each with its own timeout.
sk=$T/standin
mkdir -p "$sk/data/kjv" "$sk/dev" "$sk/scripts" "$sk/kernels/cuda"
cp dev/reference.py "$sk/dev/"
cp scripts/gpu_check.sh scripts/gpu_check_summary.py "$sk/scripts/"
touch "$sk/run.sh" "$sk/kernels/cuda/attention.cu" "$sk/data/kjv/tokenizer.bin" "$sk/data/kjv/kjv_train_000.bin"
"$PY" - "$sk/bin.tar.xz" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w:xz") as t:
    for name in ("bin/train_gpt", "bin/bench_gpu", "bin/test_gpu_ops", "bin/test_gpu_fp8", "bin/test_gpu_grid",
                 "bin/test_gpu_norm_backward"):
        info = tarfile.TarInfo(name)
        info.mode = 0o755
        t.addfile(info, io.BytesIO(b""))
PY
GPU_CHECK_WORK=$T/dry3 scripts/gpu_check.sh --dry-run --kit "$sk" --phase perf >"$T/dry3.out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^dry-run: bench-llama8b (timeout 150s): .*/bin/bench_gpu --llama8b$' "$T/dry3.out" &&
   grep -q '^dry-run: bench-torch-llama8b (timeout 180s): python3 .*reference.py --cuda-bench --llama8b$' "$T/dry3.out" &&
   grep -Eq '^bench-llama8b +dry-run' "$T/dry3.out" && tail -n 1 "$T/dry3.out" | grep -q '^0 failed'; then
  ok gpu_check_dry_run_lists_llama8b_steps
else
  fail gpu_check_dry_run_lists_llama8b_steps "exit $rc: $(grep -E 'llama|FAIL|failed' "$T/dry3.out" | head -n 4)"
fi

# ---- the summary on canned logs ----
w=$T/canned
mkdir -p "$w/logs" "$w/train-cpu" "$w/train-bf16" "$w/train-ckpt" "$w/train-resume" "$w/train-resume-bad"
printf 'env\tok\t2\t0\ntest_gpu_ops\tok\t30\t0\ntest_gpu_grid\tok\t5\t0\nsanitizer-memcheck-test_gpu_ops\tFAIL\t40\t9\n' >"$w/steps.tsv"
printf 'ok a\nok b\nFAIL c: x\n' >"$w/logs/test_gpu_ops.log"
printf '#   attention backward over 2228224 rows (B=2048 T=64 NH=17 HS=32)\nok test_attention_backward_rows_fp32\nok test_attention_backward_rows_bf16\n' >"$w/logs/test_gpu_grid.log"
printf '========= ERROR SUMMARY: 3 errors\n' >"$w/logs/sanitizer-memcheck-test_gpu_ops.log"
# bench_gpu.c's formats: "%-26s %-34s %9.3f ms %8.1f TFLOP/s %5.1f%% of peak" and the model line.
{
  printf '%-26s %-34s %9.3f ms %8.1f TFLOP/s %5.1f%% of peak\n' "matmul fwd qkv" "16384 x 768 -> 2304" 0.2 500.0 50.6
  printf '%-26s %-34s %9.3f ms %8.1f TFLOP/s %5.1f%% of peak\n' "matmul fwd fc" "16384 x 768 -> 3072 +gelu" 0.3 450.0 45.5
  printf '%-26s %-34s %9.3f ms %8.1f TFLOP/s %5.1f%% of peak\n' "attention fwd" "B=16 T=1024 NH=12 HS=64" 0.5 150.0 15.2
  printf 'model %-20s %-30s %8.1f ms/step %10.0f tok/s  MFU %5.1f%%  (loss %.3f, %.1f GiB)\n' gpt2-124M "L=12 C=768 B=16 T=1024" 50.0 327680 33.1 10.9 20.0
  printf 'fp8/bf16 hidden 4096  fwd 1.60x (1.40x with cast) | bwd 1.50x (1.30x with casts)\n'
} >"$w/logs/bench-gpu.log"
# reference.py --cuda-bench's formats: "torch " + the same op line, and the model line.
{
  printf 'torch %-26s %-34s %9.3f ms %8.1f TFLOP/s\n' "matmul fwd qkv" "16384 x 768 -> 2304" 0.25 400.0
  printf 'torch %-26s %-34s %9.3f ms %8.1f TFLOP/s\n' "matmul fwd fc" "16384 x 768 -> 3072" 0.3 500.0
  printf 'torch %-26s %-34s %9.3f ms %8.1f TFLOP/s\n' "attention fwd" "B=16 T=1024 NH=12 HS=64" 0.2 300.0
  printf 'torch model gpt2-124M %-7s L=12 C=768 B=16 T=1024 %8.1f ms/step %10.0f tok/s %8.1f TFLOP/s\n' eager 80.0 204800 150.0
  printf 'torch model gpt2-124M %-7s L=12 C=768 B=16 T=1024 %8.1f ms/step %10.0f tok/s %8.1f TFLOP/s\n' compile 40.0 409600 300.0
} >"$w/logs/bench-torch.log"
printf 'op profile | %-28s %8ld %12.3f %6.1f%%\n' matmul_backward 96 30.0 60.0 attention_forward 48 20.0 40.0 >"$w/logs/op-profile.log"
jsonl() {  # jsonl DIR FIRST LAST BASE: step records with losses BASE - step/100
  for s in $(seq "$2" "$3"); do
    printf '{"type":"step","step":%d,"loss":%s,"grad_norm":1.5}\n' "$s" "$(awk -v b="$4" -v s="$s" 'BEGIN { printf "%.6f", b - s / 100 }')"
  done >"$1/metrics.jsonl"
}
jsonl "$w/train-cpu" 1 200 6.0
jsonl "$w/train-bf16" 1 200 6.01
jsonl "$w/train-ckpt" 1 20 8.0
jsonl "$w/train-resume" 11 20 8.0
python3 scripts/gpu_check_summary.py "$w" "Test GPU" all 99 >"$T/summary.out" 2>&1
s=$T/summary.out
if grep -Eq '^matmul fwd qkv 16384 x 768 -> 2304 +500.0 TFLOP/s +400.0 TFLOP/s +1.25x' "$s" &&
   grep -Eq '^matmul fwd fc 16384 x 768 -> 3072 \+gelu +450.0 TFLOP/s +500.0 TFLOP/s +0.90x' "$s" &&
   grep -Eq '^attention fwd B=16 T=1024 NH=12 HS=64 +150.0 TFLOP/s +300.0 TFLOP/s +0.50x' "$s" &&
   grep -Eq '^  vs PyTorch eager +327680 tok/s +204800 tok/s +1.60x' "$s" &&
   grep -Eq '^  vs PyTorch compile +327680 tok/s +409600 tok/s +0.80x' "$s" && grep -Eq '^MFU gpt2-124M +33.1%' "$s"; then
  ok gpu_check_summary_ratios
else
  fail gpu_check_summary_ratios "$(cat "$s")"
fi
if grep -Eq '^test_gpu_ops +ok .* 2 passed, 1 failed' "$s" && grep -Eq '^sanitizer-memcheck-test_gpu_ops +FAIL .*3 errors' "$s" &&
   grep -Eq '^resume continues bit for bit +ok' "$s" && grep -Eq '^bf16 follows the cpu \(200 steps\) +ok' "$s" &&
   grep -Eq '^attention backward above 2.1M rows +ok .*2228224 rows' "$s" && grep -Eq '^  matmul_backward +60.0%' "$s" &&
   tail -n 1 "$s" | grep -q '^1 failed: sanitizer-memcheck-test_gpu_ops'; then
  ok gpu_check_summary_checks
else
  fail gpu_check_summary_checks "$(cat "$s")"
fi
# A resume that drifts, and a BF16 curve 10% off the CPU's, are failures.
jsonl "$w/train-resume" 11 20 8.001
jsonl "$w/train-bf16" 1 200 6.6
python3 scripts/gpu_check_summary.py "$w" "Test GPU" all 99 >"$T/summary2.out" 2>&1
if grep -Eq '^resume continues bit for bit +FAIL' "$T/summary2.out" && grep -Eq '^bf16 follows the cpu \(200 steps\) +FAIL' "$T/summary2.out" &&
   tail -n 1 "$T/summary2.out" | grep -q '^3 failed'; then
  ok gpu_check_summary_catches_drift
else
  fail gpu_check_summary_catches_drift "$(tail -n 8 "$T/summary2.out")"
fi
finish
