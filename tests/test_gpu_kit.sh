#!/usr/bin/env bash
# test_gpu_kit.sh: the GPU kit (make gpu-kit, scripts/gpu_kit.mk) runs where
# nothing of ours is installed: each of its programs needs only glibc-level
# system libraries and the CUDA libraries found at run time (readelf's NEEDED
# entries, and ldd through run.sh's library path); it is at most 48 MiB; our
# host code in it holds no instruction beyond baseline x86-64; it ships the
# register report of its kernels; its train_gpt trains on the CPU from the
# kit's own data. Skipped in builds without nvcc (no kit).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
kit=${GPU_KIT:-gpu-kit}
if [ ! -f "$kit/bin.tar.xz" ]; then
  echo "# skipped: no GPU kit at $kit (built by make tests where nvcc exists)"
  finish
fi
size=$(du -sm "$kit" | cut -f1)
if [ "$size" -le 48 ]; then ok gpu_kit_at_most_48_mib; else fail gpu_kit_at_most_48_mib "$size MiB"; fi
# A copy, unpacked as on the GPU machine (run.sh does it on first use).
cp -r "$kit" "$TEST_TMP/kit"
kit=$TEST_TMP/kit
if "$kit/run.sh" --unpack && [ -x "$kit/bin/train_gpt" ] && [ -x "$kit/bin/test_gpu_ops" ] && [ -x "$kit/bin/bench_gpu" ]; then
  ok gpu_kit_unpacks
else
  fail gpu_kit_unpacks "$(ls "$kit/bin" 2>&1 | tr '\n' ' ')"
fi

# What may stay dynamic: the C library's own parts and the CUDA libraries.
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|libcublasLt\.so\.[0-9]+|libcublas\.so\.[0-9]+|libcudnn\.so\.[0-9]+)$'
bad=""
for prog in "$kit"/bin/*; do
  while IFS= read -r lib; do
    printf '%s\n' "$lib" | grep -Eq "$allowed" || bad="$bad $(basename "$prog"):$lib"
  done < <(readelf -d "$prog" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
if [ -z "$bad" ]; then ok gpu_kit_needs_only_system_and_cuda_libraries; else fail gpu_kit_needs_only_system_and_cuda_libraries "$bad"; fi

# ldd with run.sh's library path: everything resolves, nothing from outside /lib, /usr/lib or a CUDA folder.
missing=$(LD_LIBRARY_PATH=$("$kit/run.sh" --ld-path) ldd "$kit/bin/train_gpt" | grep -E 'not found|openblas|zstd|xxhash|gomp|stdc\+\+|mpi' || true)
if [ -z "$missing" ]; then ok gpu_kit_ldd_resolves_without_our_deps; else fail gpu_kit_ldd_resolves_without_our_deps "$missing"; fi

# Device code for sm_90 and sm_100 (cuobjdump, where the toolkit has it).
cuobjdump=$(command -v cuobjdump || echo "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump")
archs=$("$cuobjdump" --list-elf "$kit/bin/train_gpt" 2>/dev/null | grep -oE 'sm_[0-9]+' | sort -u | tr '\n' ' ')
if [ ! -x "$cuobjdump" ]; then
  echo "# cuobjdump is not installed: the architectures are not checked"
elif printf '%s' "$archs" | grep -q sm_90 && printf '%s' "$archs" | grep -q sm_100; then
  ok gpu_kit_has_sm90_and_sm100
else
  fail gpu_kit_has_sm90_and_sm100 "cuobjdump lists: ${archs:-nothing}"
fi

# Host code for any x86-64: the kit is built on a machine with AVX-512 and runs on a GPU machine
# whose CPU may not have it (SIGILL before anything runs). Our functions, in the objects the
# kit links (its libtrain.a and train.o, the CUDA objects' host code) and in the kit's
# train_gpt, hold no instruction beyond baseline x86-64 (tests/baseline_isa.awk: no AVX or
# AVX-512, BMI, POPCNT, SSE3/4); the static libraries' own kernels (OpenBLAS's, chosen at
# run time by CPU) are not ours and not checked. The checker must catch AVX-512 code.
kit_build=${GPU_KIT_BUILD:-build/kit}
cuda_objs=()
for f in kernels/cuda/*.cu llm/*/*.cu; do cuda_objs+=("${GPU_KIT_CUDA_BUILD:-build}/${f%.cu}.o"); done
ours=$TEST_TMP/ours.txt
nm --defined-only "$kit_build/libtrain.a" "$kit_build/train.o" "${cuda_objs[@]}" 2>/dev/null |
  awk 'NF == 3 && $2 ~ /^[TtWw]$/ { print $3 }' | sort -u >"$ours"
printf 'void axpy(float* y, const float* x, float a, int n) { for (int i = 0; i < n; i++) y[i] += a * x[i]; }\n' >"$TEST_TMP/avx.c"
gcc -O3 -mavx512f -c "$TEST_TMP/avx.c" -o "$TEST_TMP/avx.o"
objdump -d --no-show-raw-insn "$TEST_TMP/avx.o" | awk -f tests/baseline_isa.awk <(echo axpy) - >"$TEST_TMP/avx.out"
if ! grep -q '^axpy: ' "$TEST_TMP/avx.out"; then
  fail gpu_kit_host_code_is_baseline_x86_64 "the checker passed an -mavx512f loop: $(cat "$TEST_TMP/avx.out")"
elif [ "$(wc -l <"$ours")" -lt 500 ]; then
  fail gpu_kit_host_code_is_baseline_x86_64 "only $(wc -l <"$ours") of our functions in $kit_build and the CUDA objects"
elif ! isa=$(objdump -d --no-show-raw-insn "$kit_build/libtrain.a" "$kit_build/train.o" "${cuda_objs[@]}" |
             awk -f tests/baseline_isa.awk "$ours" -); then
  fail gpu_kit_host_code_is_baseline_x86_64 "objects: $isa"
elif ! isa=$(objdump -d --no-show-raw-insn "$kit_build/train_gpt" | awk -f tests/baseline_isa.awk "$ours" -); then
  fail gpu_kit_host_code_is_baseline_x86_64 "$kit_build/train_gpt: $isa"
else
  ok gpu_kit_host_code_is_baseline_x86_64
fi

# The register report of the kit's own objects (ptxas -v at build time), for the GPU check.
if head -n 1 "$kit/ptxas.tsv" | grep -q $'^source\tarch\tkernel\tregisters' &&
   [ "$(awk -F'\t' '$2 == "sm_90"' "$kit/ptxas.tsv" | wc -l)" -ge 50 ] &&
   awk -F'\t' '$2 == "sm_90" && $3 ~ /attention_forward_mma/ && $4 > 0 { found = 1 } END { exit !found }' "$kit/ptxas.tsv"; then
  ok gpu_kit_ships_the_register_report
else
  fail gpu_kit_ships_the_register_report "$(head -n 3 "$kit/ptxas.tsv" 2>&1)"
fi

# The kit's train_gpt, from the kit's folder and data, trains on the CPU (static OpenBLAS, zstd, xxhash).
if "$kit/run.sh" train_gpt --depth 1 --seq-len 32 --micro-batch 2 --steps 2 --val-every 0 --sample-every 0 \
     --device cpu --checkpoint-dir "" --model-dir "" >"$TEST_TMP/run.log" 2>&1 &&
   [ "$(grep -c '^step ' "$TEST_TMP/run.log")" -eq 2 ]; then
  ok gpu_kit_train_gpt_runs
else
  fail gpu_kit_train_gpt_runs "$(tail -n 3 "$TEST_TMP/run.log")"
fi
if "$kit/run.sh" --libs | grep -q '^libcublasLt.so: /'; then ok gpu_kit_run_finds_cublaslt; else fail gpu_kit_run_finds_cublaslt "$("$kit/run.sh" --libs | tr '\n' ';')"; fi
expect_error gpu_kit_refuses_ranks "built without MPI" env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=8 "$kit/run.sh" train_gpt
finish
