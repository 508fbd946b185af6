#!/usr/bin/env bash
# fp8_quality.sh: training quality of each FP8 recipe on the CPU (the
# emulation is exact in codes and scales), against FP32 and FP32's own
# seed-to-seed spread. Prints one markdown row per run and a summary line:
#
#   dev/fp8_quality.sh gpt2|llama [STEPS] [more train_gpt flags]
#
# gpt2: 2 layers x 64 channels, 2 heads; llama: --arch llama, the same size
# (tests/test_fp8_train.sh's model); seq 32, micro-batch 8, on the bundled
# corpus (`make data`). Runs: FP32 with seeds 1337, 1 and 2, then current,
# delayed, blockwise, mxfp8 and nvfp4 with seed 1337; one thread each, two at
# a time. (nvfp4's last-layers rule keeps no layer of 2 in BF16: every GEMM is FP4.)
# Validation loss over 32 batches at the end. Logs under build/fp8_quality/;
# TG=path runs another train_gpt binary.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: dev/fp8_quality.sh gpt2|llama [STEPS] [flags]}
steps=${2:-300}
shift $(($# >= 2 ? 2 : 1))
case $arch in
  gpt2 | llama) ;;
  *) echo "dev/fp8_quality.sh: '$arch' is not gpt2 or llama" >&2; exit 1 ;;
esac
out=build/fp8_quality/$arch
mkdir -p "$out"
model=(--device cpu --arch "$arch" --layers 2 --channels 64 --heads 2 --seq-len 32 --micro-batch 8 --threads 1
       --sample-every 0 --steps "$steps" --val-every "$steps" --val-batches 32 --checkpoint-dir '' "$@")

run() {  # NAME FLAGS...: one run into $out/NAME
  local name=$1
  shift
  "${TG:-./train_gpt}" "${model[@]}" "$@" --log-dir "$out/$name" >"$out/$name.log" 2>&1
}
run fp32_s1337 --precision fp32 --seed 1337 & run fp32_s1 --precision fp32 --seed 1; wait
run fp32_s2 --precision fp32 --seed 2 & run current --precision fp8 --fp8-recipe current --seed 1337; wait
run delayed --precision fp8 --fp8-recipe delayed --seed 1337 & run blockwise --precision fp8 --fp8-recipe blockwise --seed 1337; wait
run mxfp8 --precision fp8 --fp8-recipe mxfp8 --seed 1337 & run nvfp4 --precision fp8 --fp8-recipe nvfp4 --seed 1337; wait

val() { grep -o '"val_loss": *[0-9.]*' "$out/$1/metrics.jsonl" | tail -n 1 | grep -o '[0-9.]*$'; }
printf '| %s, %s steps | %s |\n' "$arch" "$steps" "validation loss"
for r in fp32_s1337 fp32_s1 fp32_s2 current delayed blockwise mxfp8 nvfp4; do printf '| %s | %.4f |\n' "$r" "$(val $r)"; done
awk -v a="$(val fp32_s1337)" -v b="$(val fp32_s1)" -v c="$(val fp32_s2)" -v cur="$(val current)" \
    -v del="$(val delayed)" -v blk="$(val blockwise)" -v mx="$(val mxfp8)" -v fp4="$(val nvfp4)" 'BEGIN {
  lo = a; hi = a; if (b < lo) lo = b; if (c < lo) lo = c; if (b > hi) hi = b; if (c > hi) hi = c
  printf "fp32 spread over 3 seeds %.4f; seed 1337 minus fp32: current %+.4f delayed %+.4f blockwise %+.4f mxfp8 %+.4f nvfp4 %+.4f\n",
         hi - lo, cur - a, del - a, blk - a, mx - a, fp4 - a }'
