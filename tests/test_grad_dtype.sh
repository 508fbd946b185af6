#!/usr/bin/env bash
# test_grad_dtype.sh: --grad-dtype through train_gpt on the CPU backend under
# Open MPI: 2 ranks at ZeRO 1 and 3 against 1 rank accumulating the same
# global batch, with fp32 gradients (bitwise at ZeRO-3, to rounding at ZeRO-1:
# see test_zero.sh) and with emulated bf16 ones (each rank rounds its own
# micro-steps' sum, the ranks are summed in fp32, so within bf16 rounding:
# 1e-3 of the weights after 3 steps); the startup line naming the choice; a
# bad value is one error line naming the flag.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
small=(--device cpu --depth 1 --seq-len 32 --micro-batch 1 --batch-tokens 128 --steps 3 --val-every 0
       --sample-every 0 --threads 1 --grad-clip 0)

run() {
  local np=$1 name=$2
  shift 2
  "${MPI[@]}" -np "$np" "$TG" "$@" --export "$T/$name.bin" --log-dir "$T/$name" >"$T/$name.log" 2>&1
}

for g in fp32 bf16; do
  tol=1e-6
  [ "$g" = bf16 ] && tol=1e-3
  run 1 "one_$g" "${small[@]}" --grad-dtype "$g"
  for z in 1 3; do
    run 2 "two_${g}_$z" "${small[@]}" --grad-dtype "$g" --zero "$z"
    if [ -s "$T/two_${g}_$z.bin" ] && [ -s "$T/one_$g.bin" ]; then
      d=$(maxdiff "$T/one_$g.bin" "$T/two_${g}_$z.bin")
      echo "# --grad-dtype $g, ZeRO-$z, 2 ranks vs 1: max |weight diff| $d"
      if within "$d" "$tol"; then ok "grad_dtype_${g}_zero${z}_2ranks_match_1rank"
      else fail "grad_dtype_${g}_zero${z}_2ranks_match_1rank" "max |diff| $d > $tol"; fi
    else
      fail "grad_dtype_${g}_zero${z}_2ranks_match_1rank" "$(tail -n 2 "$T/two_${g}_$z.log")"
    fi
  done
done
# bf16 accumulation is not fp32's: the weights differ.
d=$(maxdiff "$T/one_fp32.bin" "$T/one_bf16.bin")
echo "# 1 rank, --grad-dtype fp32 vs bf16: max |weight diff| $d"
if within "$d" 0; then fail grad_dtype_bf16_differs "emulated bf16 accumulation changed nothing"
else ok grad_dtype_bf16_differs; fi
if grep -q '^gradients | accumulated and reduced in bf16, emulated in fp32 storage' "$T/one_bf16.log"; then
  ok grad_dtype_startup_line
else fail grad_dtype_startup_line "$(grep -n gradients "$T/one_bf16.log" | head -n 2)"; fi

"$TG" "${small[@]}" --grad-dtype fp16 >"$T/bad.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q -- '--grad-dtype' "$T/bad.log"; then ok grad_dtype_bad_value
else fail grad_dtype_bad_value "exit $rc: $(tail -n 2 "$T/bad.log")"; fi
finish
