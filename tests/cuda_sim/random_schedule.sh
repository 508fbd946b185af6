#!/usr/bin/env bash
# random_schedule.sh PROGRAM [ARGS...]: runs a test program built for the CPU
# execution harness with the threads of every block (and the blocks of every
# grid) in a random order: CUDA_SIM_SCHEDULE=random with CUDA_SIM_SEED
# (default 1; any other seed reproduces its own order). Its cases are named
# "<case>[random]" so that they stay apart from the in-order run's.
set -o pipefail
seed=${CUDA_SIM_SEED:-1}
echo "# $1 with CUDA_SIM_SCHEDULE=random CUDA_SIM_SEED=$seed"
CUDA_SIM_SCHEDULE=random CUDA_SIM_SEED=$seed "$@" 2>&1 | sed -E 's/^(ok|FAIL) ([^ :]+)/\1 \2[random]/'
