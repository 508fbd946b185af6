# Makefile for train_gpt.
#
#   make            build ./train_gpt (CUDA + CPU backends where nvcc exists, CPU-only otherwise)
#   make run        install deps, build, prepare the bundled corpus, train the default model
#   make test       build and run the whole test suite (ends with "N passed, N failed")
#   make test-long  the sweeps too long for make test: every user-path combination on the simulated GPU,
#                   the whole-model GPU tests in random order, every kill point and ZeRO stage (TRAIN_GPT_TEST_LONG=1)
#   make bench      CPU benchmarks
#   make data       tokenize the bundled corpus into data/kjv/
#   make test-gpu   GPU test suite (reports itself skipped without a GPU)
#   make fuzz       runs every reader's libFuzzer target for FUZZ_SECONDS (fuzz/README.md)
#   make gpu-kit    gpu-kit/: train_gpt and the GPU tests for a GPU machine that cannot build
#                   (scripts/gpu_kit.mk; run there: gpu-kit/scripts/gpu_check.sh)
#   make clean
#
# Variables: NO_CUDA=1 forces the CPU-only build; NO_MPI=1 builds without MPI (a world of
# one, no mpirun); CUDA_HOME (default /usr/local/cuda); BUILD (object directory, default
# build) and BIN (the binary, default train_gpt). `make gpu-kit`: scripts/gpu_kit.mk.

CC       ?= gcc
CC       := $(if $(filter cc,$(CC)),gcc,$(CC))
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(NO_CUDA),1)
NVCC :=
endif

BUILD    ?= build
BIN      ?= train_gpt
WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wno-sign-compare
# ARCH_FLAGS: the host CPU the C code targets; the GPU kit builds for any x86-64 (scripts/gpu_kit.mk).
ARCH_FLAGS ?= -march=native
CFLAGS   ?= -O3 $(ARCH_FLAGS) -g
CFLAGS   += -std=c11 -fopenmp -D_GNU_SOURCE -I. $(WARN)
LDLIBS   := -lopenblas -lzstd -lxxhash -lpthread -lm -ldl
LDLIBS   += -lpcre2-8   # data/bpe.c: tiktoken's split patterns
# STATIC_DEPS=1 (make gpu-kit): OpenBLAS, zstd, xxhash and the C++/OpenMP runtimes linked in,
# so that the binaries run where none of them is installed; glibc stays dynamic.
ifeq ($(STATIC_DEPS),1)
  LDLIBS := -static-libgcc -Wl,--as-needed -Wl,-Bstatic -lopenblas -lzstd -lxxhash -lpcre2-8 -lgomp -lstdc++ \
            -Wl,-Bdynamic -lpthread -lm -ldl
endif

# MPI starts the ranks (llm/parallel/comm.c); a plain ./train_gpt runs as a world of one.
# Flags come from the MPI compiler wrapper. NO_MPI=1: no MPI at all (llm/parallel/mpi_single.h).
ifeq ($(NO_MPI),1)
  MPI_CFLAGS  := -DTRAIN_GPT_NO_MPI
  MPI_LDFLAGS :=
else
  MPICC       ?= mpicc
  MPI_CFLAGS  := $(shell $(MPICC) --showme:compile 2>/dev/null)
  MPI_LDFLAGS := $(shell $(MPICC) --showme:link 2>/dev/null)
endif
CFLAGS   += $(MPI_CFLAGS)
LDLIBS   += $(MPI_LDFLAGS)

# Everything except main() lives in a static library that tests link too.
LIB_SRCS := $(wildcard llm/*.c llm/*/*.c data/*.c kernels/*.c kernels/cpu/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)

ifneq ($(NVCC),)
  # CUDA build: the CUDA backend by nvcc; cuBLASLt found by kernels/cuda/libs.mk
  # (toolkit, /usr or Python wheels), which prints where. NCCL needs nothing at
  # build time (llm/parallel/nccl_abi.h; libnccl.so.2 is opened at run time).
  CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_100,code=sm_100 -gencode arch=compute_100,code=compute_100
  # -lineinfo: source lines for compute-sanitizer and ncu (no effect on the code).
  NVCCFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -lineinfo -I. -Xcompiler -fopenmp,-Wall,-Wno-unused-parameter
  include kernels/cuda/libs.mk
  CUDA_SRCS  := $(wildcard kernels/cuda/*.cu) $(wildcard llm/*/*.cu)
  NVCCFLAGS  += $(CUBLASLT_CFLAGS)
  CUDA_LIBS  := $(CUBLASLT_LIBS) $(CUDART_LIBS) $(if $(filter 1,$(STATIC_DEPS)),,-lstdc++)
  # CUDA_BUILD: where the CUDA objects live (gpu-kit reuses the default build's).
  CUDA_BUILD ?= $(BUILD)
  CUDA_OBJS  := $(CUDA_SRCS:%.cu=$(CUDA_BUILD)/%.o)
  BUILD_KIND := cuda build
else
  CUDA_OBJS  :=
  CUDA_LIBS  :=
  BUILD_KIND := cpu build
endif
BUILD_KIND := $(BUILD_KIND)$(if $(filter 1,$(NO_MPI)), without MPI)
MAIN_OBJ := $(BUILD)/train.o

.PHONY: all clean test test-gpu bench bench-gpu data run deps tests
all: $(BIN)

# ---- the binary -------------------------------------------------------------------------------
$(BIN): $(MAIN_OBJ) $(BUILD)/libtrain.a $(CUDA_OBJS)
	$(CC) $(CFLAGS) -o $@ $(MAIN_OBJ) $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)
	@echo "built $@ ($(BUILD_KIND))"

# Checked when building, not when reading this file, so that `make run` can install it first.
.PHONY: mpi-check
mpi-check:
	@if [ "$(NO_MPI)" != 1 ] && [ -z "$(strip $(MPI_LDFLAGS))" ]; then \
	  echo "MPI not found: '$(MPICC) --showme:link' failed (scripts/install_deps.sh installs libopenmpi-dev; NO_MPI=1 builds without)"; exit 1; fi
$(LIB_OBJS) $(MAIN_OBJ): | mpi-check

$(BUILD)/libtrain.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The version runs cite (llm/report/version.c): `git describe` of this tree, "unknown" outside git.
# It reaches one object only; build/version.txt changes when the version does, so a new commit
# recompiles version.o and relinks, nothing else.
TRAIN_GPT_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(BUILD)/version.txt 2>/dev/null)" = '$(TRAIN_GPT_VERSION)' ] || \
        echo '$(TRAIN_GPT_VERSION)' > $(BUILD)/version.txt; })
$(BUILD)/llm/report/version.o: $(BUILD)/version.txt
$(BUILD)/llm/report/version.o: private CFLAGS += -DTRAIN_GPT_VERSION='"$(TRAIN_GPT_VERSION)"'
.PHONY: print-version
print-version:
	@echo '$(TRAIN_GPT_VERSION)'

# train.cu is plain C in every build (the CUDA parts sit behind kernels/cuda_seam.h).
$(BUILD)/train.o: train.cu
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -x c -c $< -o $@

# Each CUDA object keeps ptxas's report of its kernels beside it (OBJ.ptxas: registers,
# shared memory, stack, spills for every architecture), which the GPU kit ships: the GPU
# check reads it instead of compiling on the GPU machine. Its other lines (warnings) are shown.
nvcc_with_report = $(NVCC) $(NVCCFLAGS) -Xptxas -v -MMD -MP -c $< -o $@ 2>$@.ptxas; rc=$$?; \
	grep -v -e '^ptxas info' -e 'bytes stack frame' $@.ptxas >&2; exit $$rc

$(CUDA_BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(nvcc_with_report)

$(CUDA_BUILD)/llm/%.o: llm/%.cu
	@mkdir -p $(dir $@)
	$(nvcc_with_report)

# ---- the GPU kit: scripts/gpu_kit.mk -----------------------------------------------------------
include scripts/gpu_kit.mk

# ---- tests: rules in tests/tests.mk and tests/cuda_sim/sim.mk, assembled here ------------------
include tests/tests.mk tests/cuda_sim/sim.mk
# The sanitized builds: libFuzzer targets for every reader, an ASan/UBSan train_gpt (fuzz/fuzz.mk).
include fuzz/fuzz.mk

tests: train_gpt data $(TEST_BINS) $(ASAN_TESTS) $(BUILD)/tests/libfake_nvml.so $(GPU_TEST_BINS) $(GPU_BENCH) sim-tests \
       $(BUILD)/bench_comm $(GPU_BENCH_COMM) \
       $(if $(NVCC),gpu-kit)

test: tests
	@tests/run_tests.sh $(TEST_BINS) $(ASAN_TESTS) $(TEST_SCRIPTS) $(SIM_TESTS)

# ---- data, demo, benchmarks --------------------------------------------------------------------
DATA_DIR := data/kjv
$(BUILD)/prepare_data: dev/prepare_data.c dev/prepare_shards.c dev/prepare_shards.h $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ dev/prepare_data.c dev/prepare_shards.c $(BUILD)/libtrain.a $(LDLIBS)

# dev/tokenize: encode/decode with a tiktoken rank file or llm.c's gpt2_tokenizer.bin (data/bpe.h).
$(BUILD)/tokenize: dev/tokenize.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)

data: $(DATA_DIR)/tokenizer.bin
$(DATA_DIR)/tokenizer.bin: $(BUILD)/prepare_data data/corpus/kjv.txt.zst
	$(BUILD)/prepare_data --corpus data/corpus/kjv.txt.zst --out-dir $(DATA_DIR)

deps:
	@scripts/install_deps.sh

# The demo: train_gpt's defaults, and the multiple-choice eval that `make data` builds
# (data/README.md), at steps 0, 100, 200 and 300 (one pass costs about 4% of the run).
DEMO_FLAGS := --eval-data $(DATA_DIR)/kjv_eval.bin --eval-every 100
run: deps
	@$(MAKE) --no-print-directory train_gpt data
	./train_gpt $(DEMO_FLAGS)
.PHONY: print-demo-flags
print-demo-flags:
	@echo '$(DEMO_FLAGS)'

bench: train_gpt $(BUILD)/bench_cpu
	$(BUILD)/bench_cpu

# prepare_data's MB/s next to tiktoken's encode_ordinary_batch, same text and threads (dev/bench_prepare.sh).
.PHONY: bench-prepare
bench: bench-prepare
bench-prepare: $(BUILD)/prepare_data
	dev/bench_prepare.sh

# The collectives' bus bandwidth at the presets' unit sizes, MPI on the CPU (dev/bench_comm.c).
.PHONY: bench-comm
bench: bench-comm
bench-comm: $(BUILD)/bench_comm
	mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none -np 2 $(BUILD)/bench_comm

$(BUILD)/bench_comm: dev/bench_comm.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)

$(BUILD)/bench_cpu: dev/bench_cpu.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)

clean:
	rm -rf $(BUILD) $(BIN) $(KIT)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
