#!/usr/bin/env bash
# test_nccl_abi.sh: the CUDA build needs no nccl.h (NCCL is opened at run
# time; llm/parallel/nccl_abi.h declares the part of its ABI we call).
#
# - nvcc compiles llm/parallel/comm_nccl.cu with a poisoned nccl.h first on
#   the include path (any #include <nccl.h> would stop the compile: checked
#   on a file that does include it), and the object defines comm_nccl_create.
# - make, given a CUDA toolkit whose include folder has no nccl*.h at all
#   (a copy made of links) and no Python wheels, still compiles comm_nccl.cu
#   and links it into train_gpt (a dry run, make -n).
# - Where the toolkit has nccl.h: every size and enum value nccl_abi.h
#   declares equals nccl.h's (two C programs, one per header). The function
#   signatures are exercised by the CPU harness, whose NCCL (built on nccl.h)
#   is called through these declarations (tests/cuda_sim/test_sim_zero_nccl.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
T=$TEST_TMP
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
if [ ! -x "$NVCC" ] || [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ]; then
  echo "# test_nccl_abi: no CUDA toolkit here; nothing to check"
  finish
fi

# 1. comm_nccl.cu compiles with nccl.h poisoned.
mkdir -p "$T/poison"
echo '#error "nccl.h was included: the build must not need it"' >"$T/poison/nccl.h"
read -r -a mpi_flags <<<"$(mpicc --showme:compile 2>/dev/null)"
flags=(-O0 -std=c++17 -arch=sm_80 -I"$T/poison" -I. -Xcompiler -fopenmp "${mpi_flags[@]}")
printf '#include <nccl.h>\nint main(void) { return 0; }\n' >"$T/uses_nccl.cu"
if "$NVCC" "${flags[@]}" -c "$T/uses_nccl.cu" -o "$T/uses_nccl.o" >"$T/poison.log" 2>&1; then
  fail nccl_poison_stops_an_include "a file including nccl.h compiled: the poisoned header is not first"
elif grep -q 'the build must not need it' "$T/poison.log"; then
  ok nccl_poison_stops_an_include
else
  fail nccl_poison_stops_an_include "$(tail -n 3 "$T/poison.log")"
fi
if "$NVCC" "${flags[@]}" -c llm/parallel/comm_nccl.cu -o "$T/comm_nccl.o" >"$T/comm.log" 2>&1 &&
   nm "$T/comm_nccl.o" | grep -q ' T comm_nccl_create'; then
  ok comm_nccl_compiles_without_nccl_h
else
  fail comm_nccl_compiles_without_nccl_h "$(grep -m 3 -E 'error|nccl' "$T/comm.log")"
fi

# 2. make with a toolkit that has no nccl.h: comm_nccl.cu is compiled and linked in.
fake=$T/cuda
mkdir -p "$fake/include"
for f in "$CUDA_HOME"/include/*; do
  case $(basename "$f") in nccl*) ;; *) ln -s "$f" "$fake/include/" ;; esac
done
for d in bin lib64 lib nvvm; do [ -e "$CUDA_HOME/$d" ] && ln -s "$CUDA_HOME/$d" "$fake/$d"; done
# As a top-level make (under `make test` MAKELEVEL is 1, and the library lines
# print only at level 0).
env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make -n --no-print-directory CUDA_HOME="$fake" NVCC="$NVCC" PY_SITE="" BUILD="$T/b" BIN="$T/b/train_gpt" \
  "$T/b/train_gpt" >"$T/make.log" 2>&1
if [ ! -e "$fake/include/nccl.h" ] && grep -q 'NCCL: .*no header needed' "$T/make.log" &&
   grep -q -- "-c llm/parallel/comm_nccl.cu -o $T/b/llm/parallel/comm_nccl.o" "$T/make.log" &&
   grep -E -- "-o $T/b/train_gpt .*$T/b/llm/parallel/comm_nccl.o" "$T/make.log" >/dev/null; then
  ok make_builds_comm_nccl_without_nccl_h
else
  fail make_builds_comm_nccl_without_nccl_h "$(grep -m 4 -E 'NCCL|comm_nccl|rror' "$T/make.log")"
fi

# 3. The declared sizes and values against nccl.h's.
if [ -f "$CUDA_HOME/include/nccl.h" ]; then
  cat >"$T/values.c" <<'EOF'
#include <stdio.h>
#ifdef OURS
#include "llm/parallel/nccl_abi.h"
#else
#include <nccl.h>
#endif
int main(void) {
    printf("sizes %zu %zu %zu %zu %zu id %d\n", sizeof(ncclUniqueId), sizeof(ncclComm_t), sizeof(ncclResult_t),
           sizeof(ncclDataType_t), sizeof(ncclRedOp_t), NCCL_UNIQUE_ID_BYTES);
    printf("results %d %d %d %d %d %d %d %d %d\n", ncclSuccess, ncclUnhandledCudaError, ncclSystemError,
           ncclInternalError, ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError, ncclInProgress, ncclNumResults);
    printf("types %d %d %d %d %d %d %d %d %d %d\n", ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64,
           ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16);
    printf("ops %d %d %d %d %d\n", ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg);
    return 0;
}
EOF
  gcc -std=c11 -I. -I"$CUDA_HOME/include" -DOURS -o "$T/ours" "$T/values.c" 2>"$T/ours.err" &&
    gcc -std=c11 -I. -I"$CUDA_HOME/include" -o "$T/theirs" "$T/values.c" 2>"$T/theirs.err"
  if [ -x "$T/ours" ] && [ -x "$T/theirs" ] && [ -n "$("$T/ours")" ] && [ "$("$T/ours")" = "$("$T/theirs")" ]; then
    ok nccl_abi_matches_nccl_h
  else
    fail nccl_abi_matches_nccl_h "$(cat "$T/ours.err" "$T/theirs.err" | head -n 3; diff <("$T/ours") <("$T/theirs"))"
  fi
else
  echo "# no nccl.h in $CUDA_HOME/include: the values are not compared"
fi
finish
