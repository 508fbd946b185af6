#!/usr/bin/env bash
# gpu_check.sh: the one prepared check for a machine with a GPU, fitted to how
# the GPU machine is lent: one command runs at most 10 minutes, and a command
# stopped at its limit returns only what it left in $OUT. So:
#
# - each phase has a deadline (--deadline, default 330 s), checked before
#   every step: a step whose estimate does not fit in the time left is not
#   started and is reported as SKIP; a step that starts runs under `timeout`
#   of its own limit or the time left, whichever is less;
# - after every step, $OUT holds that step's log (logs/NAME.log, at most
#   256 KiB: its head and tail) and a re-written summary.txt and steps.tsv
#   (each written under a hidden name and renamed), so a call stopped at any
#   moment returns every step that finished.
#
# Phases, one per call (each fits its deadline; `all` runs the two first
# ones, for a machine without the 10-minute limit):
#
#   correctness  the environment; every GPU test program (tests/gpu, with
#                CUBLASLT_LOG_LEVEL=1: cuBLASLt's errors), again with
#                CUDA_LAUNCH_BLOCKING=1 TRAIN_GPT_SYNC_CHECK=1 where one fails;
#                test_gpu_grid again with TRAIN_GPT_ATTENTION=native (the
#                attention backward above 2.1M rows, which cuDNN takes when it
#                loads); train_gpt as users run it (make run's command at a
#                small shape with cuDNN: samples, validation, the eval, the
#                export, then --generate); 200 BF16 steps against the CPU's loss
#                curve, the same 200 with --cuda-graphs on (the same losses bit
#                for bit), 20 FP8 steps, a checkpoint and a bit-for-bit resume;
#                then compute-sanitizer as far as time allows: memcheck over
#                test_gpu_ops and test_gpu_attention_mma with native attention,
#                then racecheck over the attention kernels.
#   perf         the headline rows first, within about 5 minutes: the register
#                report (ptxas.tsv, made when the kit was built); the GPT-2 124M
#                BF16 step at T = 1024 (tokens/s, MFU) and attention forward and
#                backward, cuDNN and native, at T = 1K/4K/8K and head sizes 64
#                and 128 (bench_gpu --headline), beside PyTorch's step
#                (reference.py --cuda-bench --headline) and SDPA
#                (bench_attention_torch.py --headline); the Llama-3-8B-shaped
#                step in BF16 and FP8 (bench_gpu --llama8b --quick) beside
#                PyTorch's (reference.py --cuda-bench --llama8b --quick). Then
#                the long grids, as time allows.
#   perf-long    the long grids alone, for a second call: GPT-2 124M step times
#                with --cuda-graphs off and on (B=4, T=256 first; B=16, T=1024
#                last), each op's share of a
#                GPT-2 124M step (TRAIN_GPT_OP_PROFILE=1), the whole bench_gpu
#                (ops, memory-bound kernels, attention to T = 32K, models, FP8),
#                PyTorch at the same shapes (reference.py --cuda-bench, eager
#                and compiled; bench_attention_torch.py).
#
# The summary table lists each step ok/FAIL/TIMEOUT/SKIP with its time, the
# checks drawn from several steps, and each figure beside PyTorch's with the
# ratio. Programs come from the GPU kit (`make gpu-kit` on any build machine:
# this script inside it, or --kit DIR, or ./gpu-kit) or, when this machine can
# build (OpenBLAS, zstd and xxhash headers present), from a build here for
# this GPU's architecture only.
#
#   scripts/gpu_check.sh [--phase correctness|perf|perf-long|all] [--deadline S] [--kit DIR] [--quick]
#   scripts/gpu_check.sh --dry-run [--phase P] [--deadline S] [--kit DIR]
#          no GPU: walk the phases with each step's estimate against the
#          deadline (SKIP where it would not fit), and check the kit
# GPU_CHECK_REHEARSAL=1 (CI only: tests/test_gpu_check.sh) runs the phases
# without a GPU, on a stand-in kit's programs.
set -uo pipefail

# ---- helpers: steps that are shell code run as `gpu_check.sh --helper NAME ARGS` ----------------------
# (so that `timeout` can run them); they read GPU_CHECK_{TG,DATA,WORK,SRC} from the environment.
if [ "${1:-}" = --helper ]; then
  what=$2
  shift 2
  case $what in
    environment)
      nvidia-smi
      nvidia-smi -q
      nvcc --version 2>&1 || echo "nvcc: not found"
      echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
      for lib in libcublasLt.so libnccl.so.2 libcudnn.so libcudnn_graph.so; do
        found=$(IFS=:; for d in ${LD_LIBRARY_PATH:-}; do compgen -G "$d/$lib*"; done | head -n 1)
        echo "library $lib: ${found:-not found}"
      done
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
      compute-sanitizer --version 2>&1 | head -n 2
      grep -m1 -E '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|avx512f|bmi2)$' | tr '\n' ' ' | sed 's/^/host cpu: /'
      echo
      ;;
    train)  # train NAME ARGS...: train_gpt on the bundled corpus, metrics in $GPU_CHECK_WORK/NAME/metrics.jsonl
      name=$1
      shift
      d=$GPU_CHECK_DATA
      exec "$GPU_CHECK_TG" --train-data "$d/kjv_train_*.bin" --val-data "$d/kjv_val_*.bin" --tokenizer "$d/tokenizer.bin" \
        --log-dir "$GPU_CHECK_WORK/$name" --val-every 0 --sample-every 0 --model-dir "" "$@"
      ;;
    user)  # make run's command at a small shape, cuDNN as it loads (--attention auto), then --generate from its checkpoint
      d=$GPU_CHECK_DATA w=$GPU_CHECK_WORK/user
      rm -rf "$w"
      run=(--train-data "$d/kjv_train_*.bin" --val-data "$d/kjv_val_*.bin" --tokenizer "$d/tokenizer.bin"
           --layers 4 --channels 256 --heads 4 --seq-len 256 --micro-batch 8 --steps 40 --val-every 20 --val-batches 4
           --sample-every 20 --sample-tokens 48 --eval-data "$d/kjv_eval.bin" --eval-every 20 --device cuda
           --checkpoint-dir "$w/ckpt" --model-dir "$w/model" --log-dir "$w")
      "$GPU_CHECK_TG" "${run[@]}" || exit
      echo "---- generate"
      exec "$GPU_CHECK_TG" "${run[@]}" --generate 1 --prompt "And God said"
      ;;
    ptxas)  # the register report: the kit's ptxas.tsv, or (a build here) made from the build's OBJ.ptxas files
      if [ -f "$GPU_CHECK_SRC/ptxas.tsv" ]; then
        cp "$GPU_CHECK_SRC/ptxas.tsv" "$GPU_CHECK_WORK/ptxas.tsv"
      else
        find "$GPU_CHECK_SRC/$GPU_CHECK_BUILD" -name '*.o.ptxas' -print0 |
          xargs -0 python3 "$GPU_CHECK_SRC/scripts/ptxas_table.py" >"$GPU_CHECK_WORK/ptxas.tsv"
      fi
      head -n 1 "$GPU_CHECK_WORK/ptxas.tsv"
      awk -F'\t' 'NR > 1 && $8 > 0' "$GPU_CHECK_WORK/ptxas.tsv"  # the kernels that spill
      [ "$(wc -l <"$GPU_CHECK_WORK/ptxas.tsv")" -gt 1 ]
      ;;
    *) echo "gpu_check: no helper '$what'" >&2; exit 2 ;;
  esac
  exit
fi

phase=all dry=0 quick=0 kit="" deadline=330
while [ $# -gt 0 ]; do
  case $1 in
    --phase) phase=${2:-}; shift 2 ;;
    --kit) kit=${2:-}; shift 2 ;;
    --deadline) deadline=${2:-}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $phase in correctness|perf|perf-long|all) ;; *) echo "gpu_check: --phase '$phase' is not one of correctness, perf, perf-long, all" >&2; exit 2 ;; esac
case $deadline in ''|*[!0-9]*) echo "gpu_check: --deadline '$deadline' is not a number of seconds" >&2; exit 2 ;; esac
rehearsal=${GPU_CHECK_REHEARSAL:-0}

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
work=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$work/logs"
steps="$work/steps.tsv"
: >"$steps"
t_start=$(date +%s)
gpu_name=none

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
[ "$dry" = 0 ] && [ "$rehearsal" = 0 ] && [ -z "$kit_given" ] && can_build && build_here=1 && kit=""
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

# ---- $OUT: every finished step's log and the summary so far ----------------------------------------
summarize() {
  python3 "$(dirname "$self")/gpu_check_summary.py" "$work" "$gpu_name" "$phase" $(($(date +%s) - t_start)) "$@"
}
# put SRC DEST: SRC into $OUT/DEST through a hidden name and a rename (a reader, or a
# stop at any moment, sees the old file or the new one, never half of one); logs over
# 256 KiB keep their first 32 KiB and last 224 KiB.
put() {
  local dest=$OUT/$2 tmp
  tmp=$(dirname "$dest")/.$(basename "$dest").tmp
  if [ "$(stat -c %s "$1")" -le 262144 ]; then
    cp "$1" "$tmp"
  else
    { head -c 32768 "$1"; printf '\n[... %s bytes cut by gpu_check ...]\n' "$(stat -c %s "$1")"; tail -c 229376 "$1"; } >"$tmp"
  fi && mv -f "$tmp" "$dest"
}
publish() {  # publish [NAME]: the step's log, then steps.tsv and the summary, into $OUT
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT/logs"
  [ -n "${1:-}" ] && [ -f "$work/logs/$1.log" ] && put "$work/logs/$1.log" "logs/$1.log"
  [ -f "$work/ptxas.tsv" ] && [ ! -f "$OUT/ptxas.tsv" ] && put "$work/ptxas.tsv" ptxas.tsv
  put "$steps" steps.tsv
  summarize --partial >"$work/summary.partial" 2>&1 && put "$work/summary.partial" summary.txt
}

# ---- steps ------------------------------------------------------------------------------------------
# step NAME ESTIMATE LIMIT CMD...: when ESTIMATE seconds fit in what is left of the phase's
# deadline, runs CMD under `timeout` of LIMIT or the time left (the smaller), its output in
# logs/NAME.log, and adds a row to steps.tsv (name, ok|FAIL|TIMEOUT, seconds, exit status);
# otherwise adds a SKIP row (and the estimate against the time left) without starting it.
# Then publishes. A dry run walks the same logic on the estimates, and checks the program.
phase_end=0 dry_clock=0
now() { if [ "$dry" = 1 ]; then echo "$dry_clock"; else date +%s; fi; }
step() {
  local name=$1 estimate=$2 limit=$3
  shift 3
  local log="$work/logs/$name.log" t0 rc status left
  left=$((phase_end - $(now)))
  if [ "$estimate" -gt "$left" ]; then
    printf '%s\tSKIP\t0\tneeds ~%ss, %ss left\n' "$name" "$estimate" "$((left > 0 ? left : 0))" >>"$steps"
    echo "== SKIP $name: needs about ${estimate}s, ${left}s of the phase's ${deadline}s left"
    publish
    return 2
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$dry" = 1 ]; then
    dry_clock=$((dry_clock + estimate))
    local prog=$1
    [ "$prog" = env ] && prog=$(printf '%s\n' "$@" | grep -v '=' | sed -n 2p)
    if [ "${prog#/}" != "$prog" ] && ! exists "$prog"; then
      printf '%s\tFAIL\t0\tmissing %s\n' "$name" "$prog" >>"$steps"
      echo "dry-run: FAIL $name: $prog is missing"
    else
      printf '%s\tdry-run\t%s\t\n' "$name" "$estimate" >>"$steps"
      echo "dry-run: $name (~${estimate}s, timeout ${limit}s): $*"
    fi
    return 0
  fi
  echo "== $name (~${estimate}s, timeout ${limit}s)"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  status=ok
  [ "$rc" -ne 0 ] && status=FAIL
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status=TIMEOUT
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" $(($(date +%s) - t0)) "$rc" >>"$steps"
  publish "$name"
  if [ "$status" != ok ]; then
    echo "$status $name (exit $rc, log $log):"
    grep -E -m 12 'error|FAIL|fatal|Segmentation|Aborted|ERROR|what\(\)|Invalid|Race|uninitialized' "$log" | sed 's/^/    /'
    tail -n 5 "$log" | sed 's/^/    | /'
    return 1
  fi
  return 0
}

# ---- programs ---------------------------------------------------------------------------------------
cap=""
if [ "$rehearsal" = 1 ]; then
  gpu_name="rehearsal (no GPU)" cap=90
elif [ "$dry" = 0 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi finds none); --dry-run walks the phases without one" >&2
    exit 1
  fi
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
fi
build_dir=""
if [ "$build_here" = 1 ]; then
  build_dir="build-sm$cap"
  bin="$root/$build_dir/gpu"
  tg="$root/$build_dir/train_gpt"
  targets=("$tg" "$bin/bench_gpu")
  for f in tests/gpu/test_*.c; do targets+=("$bin/$(basename "$f" .c)"); done
  echo "gpu_check: building for sm_$cap in $build_dir/ (no kit given, and this machine can build)"
  phase_end=$(($(date +%s) + 900))  # the build is not part of a phase's deadline
  step build 300 900 make -j"$(nproc)" NO_MPI=1 BUILD="$build_dir" BIN="$tg" \
    CUDA_ARCH="-gencode arch=compute_$cap,code=sm_$cap" data "${targets[@]}" || { echo "gpu_check: the build failed" >&2; exit 1; }
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

export GPU_CHECK_TG=$tg GPU_CHECK_DATA=$data GPU_CHECK_WORK=$work GPU_CHECK_SRC=$src GPU_CHECK_BUILD=$build_dir

# start_phase NAME: its deadline counts from now.
start_phase() {
  phase_end=$(($(now) + deadline))
  echo "==== phase $1 (deadline ${deadline}s)"
}

# ---- phase 1: correctness ---------------------------------------------------------------------------
tiny=(--layers 2 --channels 128 --heads 2 --seq-len 128 --micro-batch 8 --warmup 20 --lr 1e-3)
sanitizer=()
command -v compute-sanitizer >/dev/null 2>&1 && sanitizer=(compute-sanitizer)
[ "$dry" = 1 ] && sanitizer=(compute-sanitizer)

correctness() {
  start_phase correctness
  step env 10 60 "$self" --helper environment
  # First what the issue that made this check found: train_gpt as users run it (samples, eval, generate).
  step train-user 40 120 "$self" --helper user
  for t in "${tests[@]}"; do
    name=$(basename "$t")
    # The programs that test one small op (a few launches on a few MB) need a
    # context and little else: 8 s, not the 15 s of the op and model suites.
    est=15
    case $name in test_gpu_adamw_*|test_gpu_scratch|test_gpu_fp8_cast|test_gpu_fp8_block|test_gpu_llama_ops|test_gpu_grad_dtype) est=8 ;; esac
    if ! step "$name" "$est" 120 env CUBLASLT_LOG_LEVEL=1 "$t"; then
      [ -f "$work/logs/$name.log" ] &&
        step "$name-again" 20 120 env CUDA_LAUNCH_BLOCKING=1 CUBLASLT_LOG_LEVEL=1 TRAIN_GPT_SYNC_CHECK=1 "$t"
    fi
    # With cuDNN loaded, test_gpu_grid's BF16 backward is cuDNN's: once more on ours (above 2.1M rows).
    [ "$name" = test_gpu_grid ] && step test_gpu_grid-native 15 120 env TRAIN_GPT_ATTENTION=native CUBLASLT_LOG_LEVEL=1 "$t"
  done
  # train_gpt end to end: BF16 against the CPU (FP32) over 200 steps, FP8, checkpoint and resume.
  step train-cpu 30 120 "$self" --helper train train-cpu "${tiny[@]}" --steps 200 --device cpu --precision fp32 --checkpoint-dir ""
  step train-bf16 20 120 "$self" --helper train train-bf16 "${tiny[@]}" --steps 200 --device cuda --precision bf16 --checkpoint-dir ""
  # The same run with the micro-step captured in a CUDA graph and replayed: the same losses, bit for bit.
  step train-graphs 20 120 "$self" --helper train train-graphs "${tiny[@]}" --steps 200 --device cuda --precision bf16 \
    --checkpoint-dir "" --cuda-graphs on
  step train-fp8 15 120 "$self" --helper train train-fp8 --layers 2 --channels 256 --heads 4 --seq-len 128 --micro-batch 8 --steps 20 \
    --device cuda --precision fp8 --checkpoint-dir ""
  step train-ckpt 15 120 "$self" --helper train train-ckpt "${tiny[@]}" --steps 20 --device cuda --precision bf16 \
    --checkpoint-dir "$work/ckpt" --checkpoint-every 10 --resume never
  step train-resume 15 120 "$self" --helper train train-resume "${tiny[@]}" --steps 20 --device cuda --precision bf16 \
    --checkpoint-dir "" --resume "$work/ckpt/step_00000010"
  # The block-scaled FP8 recipe this GPU runs (blockwise on 9.0, mxfp8 on 10.x; issue 27) end to end.
  block_recipe=blockwise
  case $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) in 10.*) block_recipe=mxfp8 ;; esac
  step train-fp8-block 15 120 "$self" --helper train train-fp8-block --layers 2 --channels 256 --heads 4 --seq-len 128 \
    --micro-batch 8 --steps 20 --device cuda --precision fp8 --fp8-recipe "$block_recipe" --checkpoint-dir ""
  # compute-sanitizer as far as the deadline allows: memcheck over two tests (native attention:
  # our kernels, not cuDNN's), then racecheck over the attention kernels.
  if [ "${#sanitizer[@]}" -gt 0 ]; then
    for t in test_gpu_ops test_gpu_attention_mma; do
      step "sanitizer-memcheck-$t" 60 150 env TEST_SMALL=1 TRAIN_GPT_ATTENTION=native \
        compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/$t"
    done
    step sanitizer-racecheck-test_gpu_attention_mma 90 180 env TEST_SMALL=1 TRAIN_GPT_ATTENTION=native \
      compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_gpu_attention_mma"
  else
    printf 'sanitizers\tSKIP\t0\tcompute-sanitizer not found\n' >>"$steps"
  fi
}

# ---- phase 2: performance ---------------------------------------------------------------------------
q=()
[ "$quick" = 1 ] && q=(--quick)
perf_headline() {
  step ptxas 1 30 "$self" --helper ptxas
  step bench-headline 60 180 "$bin/bench_gpu" --headline "${q[@]}"
  step bench-torch-headline 45 150 python3 "$src/dev/reference.py" --cuda-bench --headline "${q[@]}"
  step bench-torch-attention-headline 40 150 python3 "$src/dev/bench_attention_torch.py" --headline
  # A Llama-3-8B-shaped step (4 layers, B=1, T=8192; ~36 GiB ours, ~55 GiB PyTorch's) in BF16 and
  # FP8, then PyTorch's BF16 step, three steps each.
  step bench-llama8b 75 180 "$bin/bench_gpu" --llama8b --quick
  step bench-torch-llama8b 75 180 python3 "$src/dev/reference.py" --cuda-bench --llama8b --quick
}
perf_long() {
  # CUDA graphs off and on (the summary compares the step times): a launch-bound GPT-2 124M step
  # at B=4, T=256 first (40 s of the phase), GPT-2 124M at B=16, T=1024 after the grids.
  graphs_pair small 20 --micro-batch 4 --seq-len 256
  # Each op's share of GPT-2 124M BF16 steps at B=16, T=1024 (the bundled corpus, GPT-2's vocabulary).
  step op-profile 60 180 env TRAIN_GPT_OP_PROFILE=1 "$self" --helper train op-profile --model gpt2-124M \
    --vocab-size 50257 --micro-batch 16 --seq-len 1024 --steps 4 --device cuda --precision bf16 --checkpoint-dir ""
  step bench-gpu 200 300 "$bin/bench_gpu" "${q[@]}"
  step bench-torch 120 300 python3 "$src/dev/reference.py" --cuda-bench "${q[@]}"
  step bench-torch-attention 90 240 python3 "$src/dev/bench_attention_torch.py" "${q[@]}"
  graphs_pair 124m 35 --micro-batch 16 --seq-len 1024
}
# graphs_pair NAME ESTIMATE ARGS...: 12 BF16 steps of GPT-2 124M with --cuda-graphs off, then on.
graphs_pair() {
  local name=$1 est=$2 g
  shift 2
  for g in off on; do
    step "graphs-$g-$name" "$est" 150 "$self" --helper train "graphs-$g-$name" --model gpt2-124M --vocab-size 50257 \
      --steps 12 --device cuda --precision bf16 --checkpoint-dir "" --cuda-graphs "$g" "$@"
  done
}

case $phase in
  correctness) correctness ;;
  perf) start_phase perf; perf_headline; perf_long ;;
  perf-long) start_phase perf-long; perf_long ;;
  all) correctness; start_phase perf; perf_headline; perf_long ;;
esac

# ---- the kit itself (dry run) -----------------------------------------------------------------------
if [ "$dry" = 1 ]; then
  kit_ok=1
  if [ -z "$kit" ]; then
    echo "dry-run: FAIL kit: no kit found (make gpu-kit, or --kit DIR)"
    kit_ok=0
  else
    for f in bin/train_gpt bin/bench_gpu bin/test_gpu_ops bin/test_gpu_fp8 bin/test_gpu_grid bin/test_gpu_norm_backward \
             bin/test_gpu_attention_mma; do
      exists "$kit/$f" || { echo "dry-run: FAIL kit: $f is missing from bin.tar.xz"; kit_ok=0; }
    done
    for f in bin.tar.xz ptxas.tsv data/kjv/tokenizer.bin data/kjv/kjv_train_000.bin data/kjv/kjv_eval.bin \
             dev/reference.py dev/bench_attention_torch.py scripts/gpu_check.sh scripts/gpu_check_summary.py run.sh; do
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
summarize | tee "$work/summary.txt"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  put "$steps" steps.tsv
  put "$work/summary.txt" summary.txt
  echo "gpu_check: $(find "$OUT" -type f ! -name '.*' | wc -l) files in $OUT"
fi
tail -n 1 "$work/summary.txt" | grep -q "^0 failed"
