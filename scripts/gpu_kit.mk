# scripts/gpu_kit.mk: `make gpu-kit`, included by the Makefile. Builds, on a
# machine without a GPU, a folder ($(KIT), at most 48 MiB) that runs on a GPU
# machine which cannot build train_gpt (no MPI, no OpenBLAS, no installs):
#   train_gpt, tests/gpu/* and bench_gpu with the default build's CUDA objects
#   (sm_80, sm_90 for H100/H200, sm_100 for B200, and PTX),
#   host code for any x86-64 CPU (ARCH_FLAGS: no -march=native, whose AVX-512 the
#   GPU machine's CPU may lack; tests/test_gpu_kit.sh disassembles our code to check),
#   without MPI (a world of one) and with OpenBLAS, zstd, xxhash and the C++ and
#   OpenMP runtimes linked in; cuBLASLt and NCCL are found at run time
#   (run.sh puts the toolkit's and the Python wheels' nvidia/*/lib on LD_LIBRARY_PATH),
#   the bundled corpus (data/kjv) and tokenizer, the GPU test scripts,
#   scripts/gpu_check.sh and dev/reference.py, and run.sh (scripts/gpu_kit_run.sh).
# tests/test_gpu_kit.sh checks what stays dynamic and the size.
KIT       ?= gpu-kit
KIT_BUILD := $(BUILD)/kit
KIT_ARCH_FLAGS := -march=x86-64 -mtune=generic
KIT_BINS  := $(KIT_BUILD)/train_gpt $(KIT_BUILD)/gpu/bench_gpu \
             $(patsubst tests/gpu/%.c,$(KIT_BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c))

.PHONY: gpu-kit
gpu-kit: data $(CUDA_OBJS)
	@test -n "$(NVCC)" || { echo "gpu-kit: needs nvcc (the CUDA toolkit) on this machine"; exit 1; }
	$(MAKE) --no-print-directory NO_MPI=1 STATIC_DEPS=1 BUILD=$(KIT_BUILD) BIN=$(KIT_BUILD)/train_gpt \
		CUDA_BUILD=$(CUDA_BUILD) ARCH_FLAGS="$(KIT_ARCH_FLAGS)" $(KIT_BINS)
	scripts/gpu_kit_assemble.sh $(KIT) $(KIT_BUILD) $(DATA_DIR) $(CUDA_BUILD)
