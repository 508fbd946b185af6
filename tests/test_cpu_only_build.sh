#!/usr/bin/env bash
# test_cpu_only_build.sh: the smallest build: without nvcc (NO_CUDA=1) and
# without MPI (NO_MPI=1) the Makefile builds train_gpt with gcc alone; that
# binary trains as a world of one, bit for bit like the MPI build, and a
# launcher that asks for several ranks gets an error naming the build.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

out=build/cpu-only
if make --no-print-directory NO_CUDA=1 NO_MPI=1 BUILD="$out" BIN="$out/train_gpt" -j2 "$out/train_gpt" >"$TEST_TMP/build.log" 2>&1; then
  if grep -q nvcc "$TEST_TMP/build.log"; then fail cpu_only_build_uses_gcc "nvcc ran in a NO_CUDA build"; else ok cpu_only_build_uses_gcc; fi
else
  fail cpu_only_build_uses_gcc "build failed: $(tail -n 5 "$TEST_TMP/build.log")"
fi
if grep -q -- '-lmpi\|mpi.h' "$TEST_TMP/build.log" || ldd "$out/train_gpt" 2>/dev/null | grep -q libmpi; then
  fail no_mpi_build_has_no_mpi "the NO_MPI build links or includes MPI: $(ldd "$out/train_gpt" | grep mpi)"
else
  ok no_mpi_build_has_no_mpi
fi
tiny=(--depth 1 --seq-len 32 --micro-batch 2 --steps 3 --val-every 0 --sample-every 0 --device cpu --checkpoint-dir "")
if "$out/train_gpt" "${tiny[@]}" --log-dir "$TEST_TMP/run.metrics" >"$TEST_TMP/run.log" 2>&1 &&
   grep -q 'backend cpu' "$TEST_TMP/run.log" && [ "$(grep -c '^step ' "$TEST_TMP/run.log")" -eq 3 ]; then
  ok cpu_only_binary_trains
else
  fail cpu_only_binary_trains "$(tail -n 3 "$TEST_TMP/run.log")"
fi
# The same run in the default build (MPI, a world of one): the same losses and norms, bit for bit.
if ./train_gpt "${tiny[@]}" --log-dir "$TEST_TMP/mpi.metrics" >"$TEST_TMP/mpi.log" 2>&1 && [ -n "$(step_losses "$TEST_TMP/mpi.metrics")" ] &&
   [ "$(step_losses "$TEST_TMP/mpi.metrics")" = "$(step_losses "$TEST_TMP/run.metrics")" ]; then
  ok no_mpi_matches_mpi_build
else
  fail no_mpi_matches_mpi_build "$(step_losses "$TEST_TMP/run.metrics" | tr '\n' ';') vs $(step_losses "$TEST_TMP/mpi.metrics" | tr '\n' ';')"
fi
expect_error cpu_only_rejects_cuda "--device cuda.*without CUDA" "$out/train_gpt" --device cuda
expect_error no_mpi_rejects_open_mpi_ranks "built without MPI.*Open MPI started it as rank 1 of 4" \
  env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 "$out/train_gpt" "${tiny[@]}"
expect_error no_mpi_rejects_slurm_ranks "built without MPI.*Slurm started it as rank 0 of 2" \
  env SLURM_PROCID=0 SLURM_NTASKS=2 "$out/train_gpt" "${tiny[@]}"
expect_error launcher_bad_rank "OMPI_COMM_WORLD_RANK='x' is not a rank" \
  env OMPI_COMM_WORLD_RANK=x OMPI_COMM_WORLD_SIZE=2 "$out/train_gpt" "${tiny[@]}"
# A launcher's world of one is fine.
if env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 "$out/train_gpt" "${tiny[@]}" >"$TEST_TMP/one.log" 2>&1; then
  ok no_mpi_accepts_world_of_one
else
  fail no_mpi_accepts_world_of_one "$(tail -n 2 "$TEST_TMP/one.log")"
fi
finish
