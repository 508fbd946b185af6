#!/usr/bin/env bash
# Runs the GPU test programs named on the command line (make test-gpu) with
# tests/run_tests.sh when this machine has a GPU; otherwise prints that the
# suite was skipped and exits 0 (CI and the CPU-only build have none).
set -u
if [ $# -eq 0 ]; then
  echo "test-gpu: skipped (this build has no CUDA: nvcc was not found, or NO_CUDA=1)"
  exit 0
fi
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } && [ ! -e /dev/nvidia0 ]; then
  echo "test-gpu: skipped (no GPU on this machine)"
  exit 0
fi
exec "$(dirname "$0")/../run_tests.sh" "$@"
