#!/usr/bin/env bash
# test_gpu_check.sh: scripts/gpu_check.sh without a GPU.
# - Arguments: a bad phase or deadline gets one clear error.
# - --dry-run walks the phases on each step's estimate against the deadline:
#   over the real kit (when built), and over a stand-in kit
#   (tests/gpu_check_standin.sh): perf's headline steps fit in 5 minutes and
#   its long grids are left to perf-long, a short deadline skips steps (SKIP,
#   with the estimate and the time left) instead of starting them, and a kit
#   missing a program fails naming it.
# - The rehearsal: the correctness and perf phases run on the stand-in kit
#   (GPU_CHECK_REHEARSAL=1), once to the end and several times stopped with
#   SIGKILL at a random moment; $OUT must always be well formed (summary.txt
#   whole, steps.tsv rows of four fields, a log for every step that ran) and
#   hold every step that finished (the work folder's rows, but for at most
#   the one that was being published).
# - The summary (scripts/gpu_check_summary.py) on canned step logs in the
#   exact formats of dev/bench_gpu.c, dev/reference.py and
#   dev/bench_attention_torch.py: ratios against PyTorch, the bit-for-bit
#   resume check, BF16 against the CPU curve, the user run, the register
#   report, skipped steps, failures counted.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
T=$TEST_TMP

# ---- arguments ----
scripts/gpu_check.sh --phase bogus >"$T/bad.out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "phase 'bogus' is not one of correctness, perf, perf-long, all" "$T/bad.out"; then
  ok gpu_check_rejects_bad_phase
else
  fail gpu_check_rejects_bad_phase "exit $rc: $(cat "$T/bad.out")"
fi
scripts/gpu_check.sh --deadline 5m >"$T/bad2.out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "deadline '5m' is not a number of seconds" "$T/bad2.out"; then
  ok gpu_check_rejects_bad_deadline
else
  fail gpu_check_rejects_bad_deadline "exit $rc: $(cat "$T/bad2.out")"
fi

# ---- the dry run over the real kit ----
kit=${GPU_KIT:-gpu-kit}
if [ -f "$kit/bin.tar.xz" ]; then
  GPU_CHECK_WORK=$T/dry scripts/gpu_check.sh --dry-run --kit "$kit" --phase correctness >"$T/dry.out" 2>&1
  rc=$?
  steps_named=$(grep -c '^dry-run: .* (~[0-9]*s, timeout [0-9]*s): ' "$T/dry.out")
  if [ "$rc" -eq 0 ] && [ "$steps_named" -ge 12 ] && grep -q '^dry-run: test_gpu_grid-native .*TRAIN_GPT_ATTENTION=native' "$T/dry.out" &&
     grep -q '^dry-run: train-user ' "$T/dry.out" && grep -q '^dry-run: train-resume' "$T/dry.out" &&
     grep -q 'CUBLASLT_LOG_LEVEL=1 ' "$T/dry.out" && ! grep -q 'CUBLASLT_LOG_LEVEL=2' "$T/dry.out" &&
     grep -Eq '^kit +ok' "$T/dry.out" && tail -n 1 "$T/dry.out" | grep -q '^0 failed'; then
    ok gpu_check_dry_run_over_the_kit
  else
    fail gpu_check_dry_run_over_the_kit "exit $rc, $steps_named steps: $(grep -E 'FAIL|failed' "$T/dry.out" | head -n 3)"
  fi
else
  echo "# skipped the dry run over the real kit: no GPU kit at $kit (built by make tests where nvcc exists)"
fi

# ---- the stand-in kit: dry runs ----
sk=$T/standin
tests/gpu_check_standin.sh "$sk"
GPU_CHECK_WORK=$T/dry3 scripts/gpu_check.sh --dry-run --kit "$sk" --phase perf >"$T/dry3.out" 2>&1
rc=$?
headline=$(awk -F'\t' '$1 ~ /^(ptxas|bench-headline|bench-torch-headline|bench-torch-attention-headline|bench-llama8b|bench-torch-llama8b)$/ && $2 == "dry-run" { n++; s += $3 } END { print n + 0, s + 0 }' "$T/dry3/steps.tsv")
if [ "$rc" -eq 0 ] && [ "${headline% *}" -eq 6 ] && [ "${headline#* }" -le 300 ] &&
   grep -q '^dry-run: bench-headline (~[0-9]*s, timeout [0-9]*s): .*/bin/bench_gpu --headline$' "$T/dry3.out" &&
   grep -q '^dry-run: bench-llama8b .*/bin/bench_gpu --llama8b --quick$' "$T/dry3.out" &&
   grep -q '^dry-run: bench-torch-attention-headline .*bench_attention_torch.py --headline$' "$T/dry3.out" &&
   grep -Pq '^bench-gpu\tSKIP\t0\tneeds ~200s, [0-9]+s left$' "$T/dry3/steps.tsv" && tail -n 1 "$T/dry3.out" | grep -q '^0 failed'; then
  ok gpu_check_perf_headline_first_within_5_minutes
else
  fail gpu_check_perf_headline_first_within_5_minutes "exit $rc, headline steps and seconds: $headline; $(grep -E 'headline|SKIP|FAIL' "$T/dry3.out" | head -n 4)"
fi
GPU_CHECK_WORK=$T/dry4 scripts/gpu_check.sh --dry-run --kit "$sk" --phase perf-long >"$T/dry4.out" 2>&1
if grep -q '^dry-run: bench-gpu (~200s, timeout [0-9]*s): .*/bin/bench_gpu$' "$T/dry4.out" &&
   grep -q '^dry-run: op-profile ' "$T/dry4.out" && ! grep -q 'headline' "$T/dry4.out"; then
  ok gpu_check_perf_long_runs_the_grids
else
  fail gpu_check_perf_long_runs_the_grids "$(grep -E '^dry-run|SKIP' "$T/dry4.out" | head -n 4)"
fi
# A 60-second deadline: the steps that do not fit are skipped, not started, with the arithmetic.
GPU_CHECK_WORK=$T/dry5 scripts/gpu_check.sh --dry-run --kit "$sk" --phase correctness --deadline 60 >"$T/dry5.out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^dry-run: env (~10s' "$T/dry5.out" && grep -q '^== SKIP train-cpu: needs about 30s, [0-9]*s of the phase.s 60s left' "$T/dry5.out" &&
   grep -Eq '^train-bf16 +SKIP +0s +skipped: needs ~20s, [0-9]+s left' "$T/dry5.out"; then
  ok gpu_check_deadline_skips_what_does_not_fit
else
  fail gpu_check_deadline_skips_what_does_not_fit "exit $rc: $(grep -E 'SKIP|FAIL' "$T/dry5.out" | head -n 4)"
fi
# The stand-in kit without bench_gpu: the dry run fails naming it.
cp -r "$sk" "$T/sk2"
mkdir -p "$T/sk2/x" && tar -C "$T/sk2/x" -xJf "$T/sk2/bin.tar.xz" && rm "$T/sk2/x/bin/bench_gpu" &&
  tar -C "$T/sk2/x" -cJf "$T/sk2/bin.tar.xz" bin
GPU_CHECK_WORK=$T/dry2 scripts/gpu_check.sh --dry-run --kit "$T/sk2" --phase perf >"$T/dry2.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q 'FAIL bench-headline: .*bench_gpu is missing' "$T/dry2.out" && tail -n 1 "$T/dry2.out" | grep -q '^[1-9][0-9]* failed'; then
  ok gpu_check_dry_run_finds_a_missing_program
else
  fail gpu_check_dry_run_finds_a_missing_program "exit $rc: $(tail -n 3 "$T/dry2.out")"
fi

# ---- the rehearsal: the stand-in kit's programs, stopped with SIGKILL at random moments ----
stub=$T/stub
mkdir -p "$stub"
printf '#!/bin/sh
echo "GPU 0: stand-in"
' >"$stub/nvidia-smi"
chmod +x "$stub/nvidia-smi"
rehearse() {  # rehearse NAME PHASE: gpu_check.sh on the stand-in kit, OUT=$T/NAME.out, work in $T/NAME.work
  OUT=$T/$1.out GPU_CHECK_WORK=$T/$1.work GPU_CHECK_REHEARSAL=1 PATH=$stub:$PATH \
    exec scripts/gpu_check.sh --kit "$sk" --phase "$2"
}
# well_formed NAME: $OUT as a reader finds it; prints what is wrong.
well_formed() {
  local out=$T/$1.out work=$T/$1.work rows_out=0 rows_work=0
  [ -f "$work/steps.tsv" ] && rows_work=$(wc -l <"$work/steps.tsv")
  [ -f "$out/steps.tsv" ] && rows_out=$(wc -l <"$out/steps.tsv")
  [ "$rows_work" -le $((rows_out + 1)) ] || echo "$rows_work steps ran, \$OUT holds $rows_out"
  if [ -f "$out/summary.txt" ]; then
    head -n 1 "$out/summary.txt" | grep -q '^==== gpu_check summary |' || echo "summary.txt has no header"
    tail -n 1 "$out/summary.txt" | grep -Eq '^[0-9]+ failed' || echo "summary.txt does not end with its count"
    [ -f "$out/steps.tsv" ] || echo "summary.txt without steps.tsv"
  fi
  [ -f "$out/steps.tsv" ] || return 0
  awk -F'\t' 'NF != 4 { print "steps.tsv row " NR " has " NF " fields" }' "$out/steps.tsv"
  while IFS=$'\t' read -r name status _; do
    case $status in ok|FAIL|TIMEOUT) [ -s "$out/logs/$name.log" ] || echo "no log for $name ($status)" ;; esac
  done <"$out/steps.tsv"
  [ "$(head -n "$rows_out" "$work/steps.tsv")" = "$(cat "$out/steps.tsv")" ] || echo "steps.tsv is not what ran"
  find "$out" -type f ! -name '.*' -size 0 | sed 's/^/empty file: /'
}
( rehearse full correctness ) >"$T/full.log" 2>&1
rc=$?
problems=$(well_formed full)
if [ "$rc" -eq 0 ] && [ -z "$problems" ] && [ "$(wc -l <"$T/full.out/steps.tsv")" -ge 13 ] &&
   ! grep -q 'in progress' "$T/full.out/summary.txt" && tail -n 1 "$T/full.out/summary.txt" | grep -q '^0 failed' &&
   grep -Eq '^train_gpt as users run it .* ok ' "$T/full.out/summary.txt" &&
   grep -Eq '^attention backward above 2.1M rows \(native kernels\) +ok' "$T/full.out/summary.txt"; then
  ok gpu_check_rehearsal_complete
else
  fail gpu_check_rehearsal_complete "exit $rc; $problems $(tail -n 3 "$T/full.log")"
fi
bad=""
for k in 1 2 3 4 5; do
  phase=correctness
  [ "$k" -gt 3 ] && phase=perf
  setsid bash -c "$(declare -f rehearse); T=$T sk=$sk stub=$stub rehearse kill$k $phase" >"$T/kill$k.log" 2>&1 &
  pid=$!
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.3 + 4 * r / 32768 }')"
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  problems=$(well_formed "kill$k")
  [ -n "$problems" ] && bad="$bad kill$k ($(ls "$T/kill$k.out" 2>&1 | tr '\n' ' ')): $problems;"
  echo "#   kill $k ($phase): $(wc -l <"$T/kill$k.out/steps.tsv" 2>/dev/null || echo 0) steps in \$OUT, $(wc -l <"$T/kill$k.work/steps.tsv" 2>/dev/null || echo 0) ran"
done
if [ -z "$bad" ]; then ok gpu_check_sigkill_leaves_out_well_formed; else fail gpu_check_sigkill_leaves_out_well_formed "$bad"; fi

# ---- the summary on canned logs ----
w=$T/canned
mkdir -p "$w/logs" "$w/train-cpu" "$w/train-bf16" "$w/train-ckpt" "$w/train-resume" "$w/train-resume-bad"
printf 'env\tok\t2\t0\ntest_gpu_ops\tok\t30\t0\ntest_gpu_grid\tok\t5\t0\nsanitizer-memcheck-test_gpu_ops\tFAIL\t40\t9\n' >"$w/steps.tsv"
printf 'sanitizer-racecheck-test_gpu_attention_mma\tSKIP\t0\tneeds ~90s, 12s left\n' >>"$w/steps.tsv"
# The user run (train-user: its log, then --generate's) and its metrics; the register report.
mkdir -p "$w/user"
for s in $(seq 1 40); do printf '{"type":"step","step":%d,"loss":5.0,"grad_norm":1.0}\n' "$s"; done >"$w/user/metrics.jsonl"
{
  echo "attention: cuDNN 91900 fused attention (libcudnn_graph.so.9) for the training step (B=8 T=256); other shapes run natively"
  printf -- '---- sample at step 20\nx\n---- sample at step 40\ny\n'
  printf 'eval    20/40 | acc 0.2500 | acc_norm 0.2500 | loss 6.1 | 400 examples\neval    40/40 | acc 0.2600 | acc_norm 0.2600 | loss 6.0 | 400 examples\n'
  printf -- '---- generate\nattention: cuDNN 91900 fused attention (libcudnn_graph.so.9)\ngenerate  | 4 prompt tokens, 96 new\nAnd God said unto Moses\n'
} >"$w/logs/train-user.log"
printf 'source\tarch\tkernel\tregisters\tbarriers\tstatic_smem\tstack\tspill_stores\tspill_loads\n' >"$w/ptxas.tsv"
printf 'a.cu\tsm_90\tvoid big<128>(float*)\t240\t1\t0\t0\t0\t0\nb.cu\tsm_90\tvoid spills(float*)\t96\t1\t4096\t80\t92\t292\n' >>"$w/ptxas.tsv"
printf 'a.cu\tsm_80\tvoid big<128>(float*)\t255\t1\t0\t0\t0\t0\n' >>"$w/ptxas.tsv"
# bench_gpu --headline's grid lines and bench_attention_torch.py --headline's.
{
  printf '%-52s %9.3f ms %7.1f TFLOP/s\n' "attention fwd cudnn  T=4096 HS=128 B=8 NH=16" 1.0 450.0
  printf '%-52s n/a\n' "attention bwd cudnn  T=4096 HS=128 B=8 NH=16"
  printf '%-52s %9.3f ms %7.1f TFLOP/s\n' "attention bwd native T=4096 HS=128 B=8 NH=16" 1.0 150.0
} >"$w/logs/bench-headline.log"
{
  printf '%-52s %9.3f ms %7.1f TFLOP/s  (flash)\n' "attention fwd torch  T=4096 HS=128 B=8 NH=16" 1.0 500.0
  printf '%-52s %9.3f ms %7.1f TFLOP/s  (cudnn)\n' "attention bwd torch  T=4096 HS=128 B=8 NH=16" 1.0 300.0
} >"$w/logs/bench-torch-attention-headline.log"
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
  # bench_step_bytes's table: the header, the column names, rows, the total.
  printf 'memory-bound ops of a gpt2-124M BF16 step (B x T = 16 x 1024, 7 steps): planned bytes\n'
  printf '  %-22s %10s %10s %12s %10s %8s\n' op "planned GB" "plan ms" "measured ms" GB/s calls
  printf '  %-22s %10.3f %10.3f %12.3f %10s %8.1f\n' "norms + residual adds" 3.775 0.983 1.500 2517 98.0
  printf '  %-22s %10.3f %10.3f %12s %10s %8s  (%s)\n' gelu/swiglu 1.208 0.315 - - 0 "no kernel ran: fused or not used"
  printf '  %-22s %10.3f %10.3f %12.3f %10s\n' "= total" 4.983 1.298 1.500 ""
  printf 'model that follows the table\n'
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
   grep -Eq '^attention backward above 2.1M rows \(as the test ran\) +ok .*2228224 rows' "$s" && grep -Eq '^  matmul_backward +60.0%' "$s" &&
   grep -Eq '^sanitizer-racecheck-test_gpu_attention_mma +SKIP +0s +skipped: needs ~90s, 12s left' "$s" &&
   grep -Eq '^train_gpt as users run it \(sample, eval, generate\) +ok +40 steps, 2 samples, 2 evals, generated 23 chars; cuDNN 91900' "$s" &&
   grep -Eq '^register report \(sm_90, ptxas -v at build\) +info +2 kernels, at most 240 registers \(big<128>\), static smem at most 4096 bytes, 1 spill: spills' "$s" &&
   grep -Eq '^attention fwd cudnn T=4096 HS=128 +450.0 TFLOP/s +500.0 TFLOP/s +0.90x' "$s" &&
   grep -Eq '^attention bwd cudnn T=4096 HS=128 +n/a +300.0 TFLOP/s +n/a' "$s" &&
   grep -Eq '^attention bwd native T=4096 HS=128 +150.0 TFLOP/s +300.0 TFLOP/s +0.50x' "$s" &&
   grep -Eq '^memory-bound ops of a gpt2-124M BF16 step' "$s" && grep -Eq '^  norms \+ residual adds +3.775 +0.983 +1.500 +2517' "$s" &&
   grep -Eq '^  = total +4.983' "$s" && ! grep -q '^model that follows the table' "$s" &&
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
