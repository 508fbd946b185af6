#!/usr/bin/env bash
# gpu_check_standin.sh DIR: lays out a stand-in GPU kit in DIR for
# tests/test_gpu_check.sh: the real kit's layout (bin.tar.xz, run.sh,
# data/kjv, dev/, scripts/, ptxas.tsv), with programs that are short scripts
# printing what the real ones print, in their formats (train_gpt's metrics
# and lines, the tests' ok lines, bench_gpu's and PyTorch's rows), each
# after a random pause of up to 0.3 s. scripts/gpu_check.sh runs on it
# without a GPU (GPU_CHECK_REHEARSAL=1), so that CI can stop it at random
# moments and read what it left in $OUT.
set -euo pipefail
kit=$1
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$kit"
mkdir -p "$kit/pack/bin" "$kit/data/kjv" "$kit/dev" "$kit/scripts"

cat >"$kit/pack/bin/train_gpt" <<'EOF'
#!/usr/bin/env bash
# stand-in train_gpt: --log-dir DIR, --steps N, --resume .../step_K, --generate 1
sleep "0.$((RANDOM % 3))"
dir="" steps=20 from=0 gen=0
while [ $# -gt 0 ]; do
  case $1 in
    --log-dir) dir=$2; shift ;;
    --steps) steps=$2; shift ;;
    --resume) from=$(basename "$2" | sed -nE 's/^step_0*([0-9]+)$/\1/p'); from=${from:-0}; shift ;;
    --generate) gen=$2; shift ;;
  esac
  shift
done
echo "attention: cuDNN 91900 fused attention (stand-in) for the training step (B=8 T=128); other shapes run natively"
if [ "$gen" = 1 ]; then
  printf 'generate  | 4 prompt tokens, 96 new | temperature 1 | top-k 0 | seed 1337\nAnd God said, let there be light\n'
  exit 0
fi
mkdir -p "$dir"
for s in $(seq $((from + 1)) "$steps"); do
  printf '{"type":"step","step":%d,"loss":%s,"grad_norm":1.5}\n' "$s" "$(awk -v s="$s" 'BEGIN { printf "%.6f", 8 - s / 100 }')" \
    >>"$dir/metrics.jsonl"
  if [ $((s % 20)) -eq 0 ]; then echo "---- sample at step $s"; echo "eval    $s/$steps | acc 0.3 | loss 4 | 400 examples"; fi
done
EOF

cat >"$kit/pack/bin/test_gpu_standin" <<'EOF'
#!/usr/bin/env bash
# stand-in GPU test: a few ok lines (test_gpu_grid's rows line too)
sleep "0.$((RANDOM % 3))"
case $(basename "$0") in
  test_gpu_grid) echo "#   attention backward over 2228224 rows (B=2048 T=64 NH=17 HS=32)"
                 echo "ok test_attention_backward_rows_fp32"; echo "ok test_attention_backward_rows_bf16" ;;
  *) echo "ok $(basename "$0")_a"; echo "ok $(basename "$0")_b" ;;
esac
EOF
for t in test_gpu_ops test_gpu_fp8 test_gpu_grid test_gpu_norm_backward test_gpu_attention_mma; do
  cp "$kit/pack/bin/test_gpu_standin" "$kit/pack/bin/$t"
done
rm "$kit/pack/bin/test_gpu_standin"

cat >"$kit/pack/bin/bench_gpu" <<'EOF'
#!/usr/bin/env bash
# stand-in bench_gpu: the model line and the attention grid's lines in bench_gpu.c's formats
sleep "0.$((RANDOM % 3))"
printf 'model %-20s %-30s %8.1f ms/step %10.0f tok/s  MFU %5.1f%%  (loss %.3f, %.1f GiB)\n' gpt2-124M "L=12 C=768 B=16 T=1024" 50.0 327680 33.1 10.9 20.0
for T in 1024 4096 8192; do
  for path in cudnn native; do
    printf '%-52s %9.3f ms %7.1f TFLOP/s\n' "attention fwd $(printf '%-6s' $path) T=$T HS=128 B=$((32768 / T)) NH=16" 1.0 300.0
  done
done
EOF

cat >"$kit/dev/reference.py" <<'EOF'
"""stand-in reference.py --cuda-bench: PyTorch's GPT-2 124M step line."""
print("torch model gpt2-124M eager   L=12 C=768 B=16 T=1024     80.0 ms/step     204800 tok/s    150.0 TFLOP/s")
EOF
cat >"$kit/dev/bench_attention_torch.py" <<'EOF'
"""stand-in bench_attention_torch.py: PyTorch's SDPA rows in the grid's format."""
for T in (1024, 4096, 8192):
    head = f"attention fwd {'torch':<6} T={T} HS=128 B={32768 // T} NH=16"
    print(f"{head:<52} {2.0:9.3f} ms {400.0:7.1f} TFLOP/s  (flash)")
EOF

printf 'source\tarch\tkernel\tregisters\tbarriers\tstatic_smem\tstack\tspill_stores\tspill_loads\n' >"$kit/ptxas.tsv"
printf 'fill.cu\tsm_90\tvoid fill(float*)\t12\t0\t0\t0\t0\t0\nnorm.cu\tsm_90\tvoid norm(float*)\t96\t1\t2048\t80\t92\t292\n' >>"$kit/ptxas.tsv"
chmod +x "$kit"/pack/bin/*
tar -C "$kit/pack" -cJf "$kit/bin.tar.xz" bin
rm -rf "$kit/pack"
touch "$kit/data/kjv/tokenizer.bin" "$kit/data/kjv/kjv_train_000.bin" "$kit/data/kjv/kjv_eval.bin"
cp "$src/scripts/gpu_kit_run.sh" "$kit/run.sh"
cp "$src/scripts/gpu_check.sh" "$src/scripts/gpu_check_summary.py" "$kit/scripts/"
