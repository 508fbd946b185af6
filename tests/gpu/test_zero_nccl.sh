#!/usr/bin/env bash
# test_zero_nccl.sh: ZeRO over NCCL on GPUs, for a machine that has them
# (reports itself skipped otherwise). Needs the CUDA backend.
#   1. the NCCL collectives (build/tests/gpu/test_comm_nccl), one rank per GPU;
#   2. one GPU, ZeRO 0-3: with one rank and one micro-step per optimizer step
#      every stage computes the same thing, so the weights must be bitwise
#      equal, in fp32 and bf16; and the fp32 losses must match the CPU
#      backend's to 1e-3;
#   3. with two or more GPUs, 2 ranks at each stage against 1 GPU (the
#      batch does not depend on the ranks; NCCL sums in its own order).
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -eq 0 ]; then
  echo "skip test_zero_nccl: no GPU"
  finish
fi
T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --bind-to none)
np=$((gpus < 2 ? 1 : 2))

if "${MPI[@]}" -np "$np" build/tests/gpu/test_comm_nccl; then :; else fail test_comm_nccl "exit status $?"; fi

base=(--depth 4 --seq-len 128 --micro-batch 4 --steps 20 --val-every 10 --sample-every 0 --grad-clip 0)
for prec in fp32 bf16; do
  for z in 0 1 2 3; do
    "$TG" "${base[@]}" --device cuda --precision "$prec" --zero "$z" --export "$T/g_${prec}_$z.bin" >"$T/g_${prec}_$z.log" 2>&1 ||
      fail "nccl_1gpu_${prec}_zero$z" "$(tail -n 3 "$T/g_${prec}_$z.log")"
  done
  same=1
  for z in 1 2 3; do cmp -s "$T/g_${prec}_0.bin" "$T/g_${prec}_$z.bin" || same=0; done
  if [ "$same" = 1 ]; then ok "nccl_1gpu_${prec}_stages_bitwise"; else fail "nccl_1gpu_${prec}_stages_bitwise" "weights differ between stages"; fi
done

"$TG" "${base[@]}" --device cpu --threads 0 >"$T/cpu.log" 2>&1
if "$PY" - "$T/cpu.log" "$T/g_fp32_3.log" <<'EOF'
import re, sys
def losses(p): return [float(m.group(1)) for m in re.finditer(r'^step .*\| loss ([0-9.]+)', open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
sys.exit(0 if len(a) == len(b) == 20 and max(abs(x - y) for x, y in zip(a, b)) < 1e-3 else 1)
EOF
then ok nccl_fp32_matches_cpu; else fail nccl_fp32_matches_cpu "losses differ from the CPU backend by 1e-3 or more"; fi

if [ "$gpus" -ge 2 ]; then
  for z in 0 1 2 3; do
    "${MPI[@]}" -np 2 "$TG" "${base[@]}" --device cuda --precision fp32 --zero "$z" --batch-tokens 1024 \
      >"$T/g2_$z.log" 2>&1 || fail "nccl_2gpu_zero$z" "$(tail -n 3 "$T/g2_$z.log")"
    "$TG" "${base[@]}" --device cuda --precision fp32 --zero "$z" --batch-tokens 1024 >"$T/g1_$z.log" 2>&1
    if "$PY" - "$T/g1_$z.log" "$T/g2_$z.log" <<'EOF'
import re, sys
def losses(p): return [float(m.group(1)) for m in re.finditer(r'^step .*\| loss ([0-9.]+)', open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
sys.exit(0 if len(a) == len(b) == 20 and max(abs(x - y) for x, y in zip(a, b)) < 1e-3 else 1)
EOF
    then ok "nccl_2gpu_zero${z}_matches_1gpu"; else fail "nccl_2gpu_zero${z}_matches_1gpu" "losses differ"; fi
  done
fi
finish
