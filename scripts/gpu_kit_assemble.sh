#!/usr/bin/env bash
# gpu_kit_assemble.sh KIT BUILD DATA CUDA_BUILD: lays out the GPU kit
# (scripts/gpu_kit.mk) from the binaries in BUILD, the corpus in DATA and the
# register report of the CUDA objects in CUDA_BUILD (their OBJ.ptxas files,
# as ptxas.tsv: scripts/ptxas_table.py), and refuses a kit over 48 MiB. The programs are stripped of host debug information (-lineinfo's
# line tables, which compute-sanitizer and ncu read, are in the device code)
# and travel as one bin.tar.xz: each program carries the same static
# libraries and kernels (about 38 MB apiece), which one xz stream with a large
# dictionary stores once (about 9 MB for all); run.sh unpacks it on first use.
# The dictionary does the work, not the preset: preset 1 packs in a seventh of
# preset 6's time (20 s of one core instead of about 150 s, in every CI build)
# for 15% more bytes.
set -euo pipefail
kit=$1 build=$2 data=$3 cuda_build=${4:-build}
max_mib=48
programs=("$build/train_gpt" "$build"/gpu/test_gpu_* "$build/gpu/bench_gpu")
# The archive is kept in BUILD and packed again only when a program changed.
packed="$build/bin.tar.xz"
stale=0
for p in "${programs[@]}"; do [ "$p" -nt "$packed" ] && stale=1; done
if [ "$stale" = 1 ]; then
  rm -rf "$build/pack"
  mkdir -p "$build/pack/bin"
  cp "${programs[@]}" "$build/pack/bin/"
  strip --strip-debug "$build"/pack/bin/*
  tar -C "$build/pack" -cf - bin | xz -T1 --lzma2=preset=1,dict=256MiB >"$packed.tmp"
  mv "$packed.tmp" "$packed"
fi
rm -rf "$kit"
mkdir -p "$kit/data/kjv" "$kit/tests/gpu" "$kit/scripts" "$kit/dev"
cp "$packed" "$kit/bin.tar.xz"
cp "$data"/*.bin "$kit/data/kjv/"
cp tests/gpu/run_gpu_tests.sh "$kit/tests/gpu/"
cp tests/run_tests.sh tests/lib.sh "$kit/tests/"
cp scripts/gpu_check.sh scripts/gpu_check_summary.py "$kit/scripts/"
# Registers, shared memory and spills of every kernel, from this build's own
# objects (ptxas -v at compile time): the GPU check compiles nothing.
mapfile -t reports < <(find "$cuda_build/kernels" "$cuda_build/llm" -name '*.o.ptxas' 2>/dev/null | sort)
if [ "${#reports[@]}" -eq 0 ]; then
  echo "gpu-kit: no ptxas reports (*.o.ptxas) under $cuda_build: rebuild the CUDA objects (make clean)" >&2
  exit 1
fi
python3 scripts/ptxas_table.py "${reports[@]}" >"$kit/ptxas.tsv"
# The sources, for reading beside the report.
tar -cf - kernels llm train.cu | tar -xf - -C "$kit"
cp dev/reference.py dev/bench_attention_torch.py "$kit/dev/"
cp scripts/gpu_kit_run.sh "$kit/run.sh"
git describe --always --dirty 2>/dev/null >"$kit/VERSION" || echo unknown >"$kit/VERSION"
size=$(du -sm "$kit" | cut -f1)
if [ "$size" -gt "$max_mib" ]; then
  echo "gpu-kit: $kit is $size MiB, over the $max_mib MiB limit" >&2
  exit 1
fi
echo "gpu-kit: $kit ($size MiB): $(tar -tJf "$kit/bin.tar.xz" | sed -n 's#^bin/##p' | tr '\n' ' ')"
