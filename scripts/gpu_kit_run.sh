#!/usr/bin/env bash
# run.sh (the GPU kit's runner, from scripts/gpu_kit_run.sh): runs a program of
# the kit with the CUDA libraries found where this machine has them: the CUDA
# toolkit's lib64, then every Python wheel's site-packages/nvidia/*/lib
# (nvidia-cublas, nvidia-nccl-cu13, nvidia-cudnn-cu13, as PyTorch installs
# them). Prints what it found with --libs, the library path with --ld-path;
# --unpack only unpacks the programs.
#   ./run.sh train_gpt --steps 20        ./run.sh test_gpu_ops        ./run.sh --libs
set -euo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
# The programs travel as bin.tar.xz (gpu_kit_assemble.sh); unpacked here once,
# with Python's tarfile where there is no xz.
if [ ! -x "$kit/bin/train_gpt" ] || [ "$kit/bin.tar.xz" -nt "$kit/bin/train_gpt" ]; then
  rm -rf "${kit:?}/bin"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$kit/bin.tar.xz" "$kit" ||
    { echo "run.sh: cannot unpack $kit/bin.tar.xz" >&2; exit 1; }
  touch "$kit/bin/train_gpt"
fi
dirs=()
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64; do [ -d "$d" ] && dirs+=("$d"); done
for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && dirs+=("$d"); done
done
LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
if [ "${1:-}" = --unpack ]; then
  exit 0
fi
if [ "${1:-}" = --ld-path ]; then
  echo "$LD_LIBRARY_PATH"
  exit 0
fi
if [ "${1:-}" = --libs ]; then
  for lib in libcublasLt.so libnccl.so.2 libcudnn.so; do
    found=""
    for d in "${dirs[@]}"; do compgen -G "$d/$lib*" >/dev/null && { found=$d; break; }; done
    echo "$lib: ${found:-not found}"
  done
  exit 0
fi
[ $# -ge 1 ] || { echo "usage: run.sh PROGRAM [ARGS...] | --libs (programs: $(cd "$kit/bin" && echo *))" >&2; exit 2; }
prog=$1
shift
[ -x "$kit/bin/$prog" ] || { echo "run.sh: no program '$prog' in $kit/bin" >&2; exit 2; }
cd "$kit"
exec "$kit/bin/$prog" "$@"
