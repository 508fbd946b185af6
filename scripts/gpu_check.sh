#!/usr/bin/env bash
# gpu_check.sh: the one prepared check for a machine with a GPU, built to give
# the most information per device minute. Two phases, each runnable alone,
# correctness sized for under 5 minutes on one H200 and perf for about 7 (with
# the Llama-8B-shaped steps; estimates, not yet timed); every step runs under
# its own timeout, so a hang costs that step, not the call:
#
#   correctness  the environment (nvidia-smi -q, driver, libraries found); every
#                GPU test program (tests/gpu: ops, FP8 GEMMs in every layout,
#                the attention backward above 2.1M rows, training steps) and,
#                for any that fails, the same again with CUDA_LAUNCH_BLOCKING=1,
#                CUBLASLT_LOG_LEVEL=2 and TRAIN_GPT_SYNC_CHECK=1; compute-sanitizer
#                memcheck, racecheck, synccheck and initcheck over the op, FP8
#                and norm-backward tests at small shapes; train_gpt end to end: 200 BF16 steps
#                against the CPU's loss curve, 20 FP8 steps, a checkpoint and a
#                resume that continues bit for bit.
#   perf         the register/spill report of every kernel (nvcc -Xptxas -v for
#                this GPU); each op's share of a GPT-2 124M BF16 step
#                (TRAIN_GPT_OP_PROFILE=1); dev/bench_gpu (ops, the one-launch
#                layernorm/RMSNorm backward checked against the CPU and as a
#                fraction of a device copy, MFU of GPT-2 124M
#                and 24 layers x 2048 at T=1024, FP8 against BF16); and the same
#                shapes in the image's PyTorch (dev/reference.py --cuda-bench:
#                torch.matmul, F.scaled_dot_product_attention, a GPT-2 124M step
#                eager and compiled), so every figure is also a ratio; a
#                Llama-3-8B-shaped step (4 layers, T=8192) in BF16 and FP8
#                (bench_gpu --llama8b) beside PyTorch's BF16 step of that shape.
#
# It ends with one summary table: each check ok/FAIL/TIMEOUT and each figure
# with its ratio. Programs come from the GPU kit (`make gpu-kit` on any build
# machine: this script inside it, or --kit DIR, or ./gpu-kit) or, when this
# machine can build (OpenBLAS, zstd and xxhash headers present), from a build
# here for this GPU's architecture only. With $OUT set, at most 8 files land
# there: summary.txt, steps.tsv, env.txt, ptxas.txt, bench.log and
# {tests,sanitizer,train}.log.gz.
#
#   scripts/gpu_check.sh [--phase correctness|perf|all] [--kit DIR] [--quick]
#   scripts/gpu_check.sh --dry-run [--kit DIR]   no GPU: walk every phase, say what
#                                                would run, and check the kit
set -uo pipefail

# ---- helpers: steps that are shell code run as `gpu_check.sh --helper NAME ARGS` ----------------------
# (so that `timeout` can run them); they read GPU_CHECK_{TG,DATA,WORK,SRC,CAP} from the environment.
if [ "${1:-}" = --helper ]; then
  what=$2
  shift 2
  case $what in
    environment)
      nvidia-smi
      nvidia-smi -q
      nvcc --version 2>&1 || echo "nvcc: not found"
      echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
      for lib in libcublasLt.so libnccl.so.2 libcudnn.so; do
        found=$(IFS=:; for d in ${LD_LIBRARY_PATH:-}; do compgen -G "$d/$lib*"; done | head -n 1)
        echo "library $lib: ${found:-not found}"
      done
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
      compute-sanitizer --version 2>&1 | head -n 2
      ;;
    train)  # train NAME ARGS...: train_gpt on the bundled corpus, metrics in $GPU_CHECK_WORK/NAME/metrics.jsonl
      name=$1
      shift
      d=$GPU_CHECK_DATA
      exec "$GPU_CHECK_TG" --train-data "$d/kjv_train_*.bin" --val-data "$d/kjv_val_*.bin" --tokenizer "$d/tokenizer.bin" \
        --log-dir "$GPU_CHECK_WORK/$name" --val-every 0 --sample-every 0 --model-dir "" "$@"
      ;;
    ptxas)  # every kernel file for this GPU's architecture, -Xptxas -v: registers, spills, shared memory
      out="$GPU_CHECK_WORK/ptxas"
      mkdir -p "$out"
      find "$GPU_CHECK_SRC/kernels/cuda" -name '*.cu' -print0 | xargs -0 -P "$(nproc)" -I{} sh -c \
        "nvcc -arch=sm_$GPU_CHECK_CAP -O3 -std=c++17 -lineinfo -Xptxas -v -I$GPU_CHECK_SRC -c {} -o $out/\$(basename {}).o 2>&1" |
        grep -E 'ptxas info|bytes spill|error' >"$GPU_CHECK_WORK/ptxas.txt"
      grep -q 'Used' "$GPU_CHECK_WORK/ptxas.txt"
      ;;
    *) echo "gpu_check: no helper '$what'" >&2; exit 2 ;;
  esac
  exit
fi

phase=all dry=0 quick=0 kit=""
while [ $# -gt 0 ]; do
  case $1 in
    --phase) phase=${2:-}; shift 2 ;;
    --kit) kit=${2:-}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $phase in correctness|perf|all) ;; *) echo "gpu_check: --phase '$phase' is not one of correctness, perf, all" >&2; exit 2 ;; esac

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
work=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$work/logs"
steps="$work/steps.tsv"
: >"$steps"
t_start=$(date +%s)

# ---- where the programs come from -----------------------------------------------------------------
# bin: the folder holding train_gpt, test_gpu_*, bench_gpu; data: the bundled corpus.
# An explicit --kit wins; else a build here when this machine can build; else the kit found.
kit_given=$kit
if [ -n "$kit" ]; then kit=$(cd "$kit" && pwd) || exit 2
elif [ -f "$root/bin.tar.xz" ]; then kit=$root
elif [ -f "$root/gpu-kit/bin.tar.xz" ]; then kit=$root/gpu-kit
fi
can_build() {
  command -v nvcc >/dev/null 2>&1 && [ -f "$root/Makefile" ] &&
    for h in cblas.h zstd.h xxhash.h; do echo "#include <$h>" | cc -E -x c - >/dev/null 2>&1 || return 1; done
}
build_here=0
[ "$dry" = 0 ] && [ -z "$kit_given" ] && can_build && build_here=1 && kit=""
# The kit's programs travel packed (bin.tar.xz); run.sh unpacks them. A dry run only lists them.
if [ -n "$kit" ] && [ "$dry" = 0 ]; then "$kit/run.sh" --unpack || exit 1; fi
: >"$work/kit_list"
if [ -n "$kit" ] && [ "$dry" = 1 ]; then
  python3 -c 'import sys, tarfile; print("\n".join(tarfile.open(sys.argv[1]).getnames()))' "$kit/bin.tar.xz" \
    >"$work/kit_list" 2>/dev/null || echo "dry-run: cannot list $kit/bin.tar.xz"
fi
# exists PROGRAM: executable here, or (dry run) packed in the kit.
exists() {
  [ -x "$1" ] || { [ -n "$kit" ] && [ "${1#"$kit"/}" != "$1" ] && grep -qx "${1#"$kit"/}" "$work/kit_list"; }
}
# The CUDA libraries: the toolkit, then the Python wheels' nvidia/*/lib (as the kit's run.sh).
lib_dirs=()
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64; do [ -d "$d" ] && lib_dirs+=("$d"); done
for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && lib_dirs+=("$d"); done
done
LD_LIBRARY_PATH=$(IFS=:; echo "${lib_dirs[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

# ---- steps ------------------------------------------------------------------------------------------
# step NAME TIMEOUT CMD...: runs CMD under `timeout`, its output in logs/NAME.log, a row in
# steps.tsv (name, ok|FAIL|TIMEOUT|dry-run, seconds, exit status); a failure is printed with
# its message. In a dry run: says what it would run and checks that the program exists.
step() {
  local name=$1 limit=$2
  shift 2
  local log="$work/logs/$name.log" t0 rc status
  if [ "$dry" = 1 ]; then
    local prog=$1
    [ "$prog" = env ] && prog=$(printf '%s\n' "$@" | grep -v '=' | sed -n 2p)
    if [ "${prog#/}" != "$prog" ] && ! exists "$prog"; then
      printf '%s\tFAIL\t0\tmissing %s\n' "$name" "$prog" >>"$steps"
      echo "dry-run: FAIL $name: $prog is missing"
    else
      printf '%s\tdry-run\t0\t\n' "$name" >>"$steps"
      echo "dry-run: $name (timeout ${limit}s): $*"
    fi
    return 0
  fi
  echo "== $name (timeout ${limit}s)"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  status=ok
  [ "$rc" -ne 0 ] && status=FAIL
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status=TIMEOUT
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" $(($(date +%s) - t0)) "$rc" >>"$steps"
  if [ "$status" != ok ]; then
    echo "$status $name (exit $rc, log $log):"
    grep -E -m 12 'error|FAIL|fatal|Segmentation|Aborted|ERROR|what\(\)|Invalid|Race|uninitialized' "$log" | sed 's/^/    /'
    tail -n 5 "$log" | sed 's/^/    | /'
    return 1
  fi
  return 0
}

# ---- programs ---------------------------------------------------------------------------------------
gpu_name=none cap=""
if [ "$dry" = 0 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi finds none); --dry-run walks the phases without one" >&2
    exit 1
  fi
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
fi
if [ "$build_here" = 1 ]; then
  b="build-sm$cap"
  bin="$root/$b/gpu"
  tg="$root/$b/train_gpt"
  targets=("$tg" "$bin/bench_gpu")
  for f in tests/gpu/test_*.c; do targets+=("$bin/$(basename "$f" .c)"); done
  echo "gpu_check: building for sm_$cap in $b/ (no kit given, and this machine can build)"
  step build 600 make -j"$(nproc)" NO_MPI=1 BUILD="$b" BIN="$tg" CUDA_ARCH="-gencode arch=compute_$cap,code=sm_$cap" \
    data "${targets[@]}" || { echo "gpu_check: the build failed" >&2; exit 1; }
elif [ -n "$kit" ]; then
  bin="$kit/bin"
  tg="$bin/train_gpt"
  echo "gpu_check: programs from the kit $kit ($(cat "$kit/VERSION" 2>/dev/null || echo unknown))"
elif [ "$dry" = 1 ]; then
  bin="$root/gpu-kit/bin"  # no kit: the dry run still walks the phases, and the kit check fails
  tg="$bin/train_gpt"
else
  echo "gpu_check: no kit (make gpu-kit, then --kit DIR) and this machine cannot build (needs nvcc, OpenBLAS, zstd, xxhash)" >&2
  exit 1
fi
data="${kit:-$root}/data/kjv"
src=${kit:-$root}
tests=()
for t in "$bin"/test_gpu_*; do [ -x "$t" ] && tests+=("$t"); done
while read -r t; do tests+=("$kit/$t"); done < <(grep -x 'bin/test_gpu_[a-z0-9_]*' "$work/kit_list")

export GPU_CHECK_TG=$tg GPU_CHECK_DATA=$data GPU_CHECK_WORK=$work GPU_CHECK_SRC=$src GPU_CHECK_CAP=$cap

# ---- phase 1: correctness ---------------------------------------------------------------------------
tiny=(--layers 2 --channels 128 --heads 2 --seq-len 128 --micro-batch 8 --warmup 20 --lr 1e-3)

correctness() {
  step env 60 "$self" --helper environment
  for t in "${tests[@]}"; do
    name=$(basename "$t")
    if ! step "$name" 240 env CUBLASLT_LOG_LEVEL=2 "$t"; then
      step "$name-again" 240 env CUDA_LAUNCH_BLOCKING=1 CUBLASLT_LOG_LEVEL=2 TRAIN_GPT_SYNC_CHECK=1 "$t"
    fi
  done
  if command -v compute-sanitizer >/dev/null 2>&1 || [ "$dry" = 1 ]; then
    for tool in memcheck racecheck synccheck initcheck; do
      for t in test_gpu_ops test_gpu_fp8 test_gpu_norm_backward; do
        step "sanitizer-$tool-$t" 30 env TEST_SMALL=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/$t"
      done
    done
  fi
  # train_gpt end to end: BF16 against the CPU (FP32) over 200 steps, FP8, checkpoint and resume.
  step train-cpu 180 "$self" --helper train train-cpu "${tiny[@]}" --steps 200 --device cpu --precision fp32 --checkpoint-dir ""
  step train-bf16 120 "$self" --helper train train-bf16 "${tiny[@]}" --steps 200 --device cuda --precision bf16 --checkpoint-dir ""
  step train-fp8 120 "$self" --helper train train-fp8 --layers 2 --channels 256 --heads 4 --seq-len 128 --micro-batch 8 --steps 20 \
    --device cuda --precision fp8 --checkpoint-dir ""
  step train-ckpt 120 "$self" --helper train train-ckpt "${tiny[@]}" --steps 20 --device cuda --precision bf16 \
    --checkpoint-dir "$work/ckpt" --checkpoint-every 10 --resume never
  step train-resume 120 "$self" --helper train train-resume "${tiny[@]}" --steps 20 --device cuda --precision bf16 \
    --checkpoint-dir "" --resume "$work/ckpt/step_00000010"
}

# ---- phase 2: performance ---------------------------------------------------------------------------
perf() {
  if command -v nvcc >/dev/null 2>&1 || [ "$dry" = 1 ]; then
    step ptxas 240 "$self" --helper ptxas
  fi
  # Each op's share of GPT-2 124M BF16 steps at B=16, T=1024 (the bundled corpus, GPT-2's vocabulary).
  step op-profile 180 env TRAIN_GPT_OP_PROFILE=1 "$self" --helper train op-profile --model gpt2-124M \
    --vocab-size 50257 --micro-batch 16 --seq-len 1024 --steps 4 --device cuda --precision bf16 --checkpoint-dir ""
  local q=()
  [ "$quick" = 1 ] && q=(--quick)
  step bench-gpu 300 "$bin/bench_gpu" "${q[@]}"
  # The attention benchmarks of other kernels (cuDNN, mma.sync) hook in here when dev/bench_gpu offers them.
  step bench-torch 300 python3 "$src/dev/reference.py" --cuda-bench "${q[@]}"
  # A Llama-3-8B-shaped step (4 layers, B=1, T=8192; ~36 GiB ours, ~55 GiB PyTorch's): ours in BF16 and
  # FP8, then PyTorch's BF16 step eager and compiled, each its own step and timeout.
  step bench-llama8b 150 "$bin/bench_gpu" --llama8b "${q[@]}"
  step bench-torch-llama8b 180 python3 "$src/dev/reference.py" --cuda-bench --llama8b "${q[@]}"
}

case $phase in
  correctness) correctness ;;
  perf) perf ;;
  all) correctness; perf ;;
esac

# ---- the kit itself (dry run) -----------------------------------------------------------------------
if [ "$dry" = 1 ]; then
  kit_ok=1
  if [ -z "$kit" ]; then
    echo "dry-run: FAIL kit: no kit found (make gpu-kit, or --kit DIR)"
    kit_ok=0
  else
    for f in bin/train_gpt bin/bench_gpu bin/test_gpu_ops bin/test_gpu_fp8 bin/test_gpu_grid bin/test_gpu_norm_backward; do
      exists "$kit/$f" || { echo "dry-run: FAIL kit: $f is missing from bin.tar.xz"; kit_ok=0; }
    done
    for f in bin.tar.xz data/kjv/tokenizer.bin data/kjv/kjv_train_000.bin dev/reference.py scripts/gpu_check.sh \
             scripts/gpu_check_summary.py run.sh kernels/cuda/attention.cu; do
      [ -e "$kit/$f" ] || { echo "dry-run: FAIL kit: $f is missing"; kit_ok=0; }
    done
    size=$(du -sm "$kit" | cut -f1)
    [ "$size" -le 48 ] || { echo "dry-run: FAIL kit: $size MiB, over 48"; kit_ok=0; }
    python3 -m py_compile "$kit/dev/reference.py" "$kit/scripts/gpu_check_summary.py" ||
      { echo "dry-run: FAIL kit: a Python script does not compile"; kit_ok=0; }
  fi
  printf 'kit\t%s\t0\t\n' "$([ $kit_ok = 1 ] && echo ok || echo FAIL)" >>"$steps"
fi

# ---- summary ----------------------------------------------------------------------------------------
python3 "$(dirname "$self")/gpu_check_summary.py" "$work" "$gpu_name" "$phase" $(($(date +%s) - t_start)) \
  | tee "$work/summary.txt"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$work/summary.txt" "$work/steps.tsv" "$OUT/"
  [ -f "$work/logs/env.log" ] && cp "$work/logs/env.log" "$OUT/env.txt"
  [ -f "$work/ptxas.txt" ] && cp "$work/ptxas.txt" "$OUT/ptxas.txt"
  cat "$work"/logs/bench-*.log "$work"/logs/op-profile.log >"$OUT/bench.log" 2>/dev/null
  for group in test sanitizer train; do
    files=("$work"/logs/"$group"*.log)
    [ -e "${files[0]}" ] && tail -n +1 "${files[@]}" | gzip -c >"$OUT/$group.log.gz"
  done
  echo "gpu_check: $(find "$OUT" -maxdepth 1 -type f | wc -l) files in $OUT"
fi
tail -n 1 "$work/summary.txt" | grep -q "^0 failed"
