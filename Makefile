# Makefile for train_gpt.
#
#   make            build ./train_gpt (CUDA + CPU backends where nvcc exists, CPU-only otherwise)
#   make run        install deps, build, prepare the bundled corpus, train the default model
#   make test       build and run the whole test suite (ends with "N passed, N failed")
#   make bench      CPU benchmarks
#   make data       tokenize the bundled corpus into data/kjv/
#   make test-gpu   GPU test suite (reports itself skipped without a GPU)
#   make clean
#
# Variables: NO_CUDA=1 forces the CPU-only build; CUDA_HOME (default /usr/local/cuda);
# BUILD (object directory, default build) and BIN (the binary, default train_gpt).

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
CFLAGS   ?= -O3 -march=native -g
CFLAGS   += -std=c11 -fopenmp -D_GNU_SOURCE -I. $(WARN)
LDLIBS   := -lopenblas -lzstd -lxxhash -lpthread -lm -ldl
LDLIBS   += -lpcre2-8   # data/bpe.c: tiktoken's split patterns

# MPI starts the ranks (llm/parallel/comm.c); every build links it, and a plain ./train_gpt
# runs as a world of one. Flags come from the MPI compiler wrapper.
MPICC       ?= mpicc
MPI_CFLAGS  := $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LDFLAGS := $(shell $(MPICC) --showme:link 2>/dev/null)
CFLAGS   += $(MPI_CFLAGS)
LDLIBS   += $(MPI_LDFLAGS)

# Everything except main() lives in a static library that tests link too.
LIB_SRCS := $(wildcard llm/*.c llm/*/*.c data/*.c kernels/*.c kernels/cpu/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)

ifneq ($(NVCC),)
  # CUDA build: train.cu and the CUDA backend by nvcc, linked against the CUDA runtime and cuBLASLt.
  CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_100,code=sm_100 -gencode arch=compute_100,code=compute_100
  NVCCFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -I. -Xcompiler -fopenmp,-Wall,-Wno-unused-parameter
  CUDA_SRCS  := $(wildcard kernels/cuda/*.cu)
  CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
  # llm/*/*.cu: NCCL collectives (llm/parallel/comm_nccl.cu). Without NCCL headers the
  # build still links (a weak symbol) and multi-GPU runs say NCCL is missing.
  NCCL_HOME  ?= $(CUDA_HOME)
  ifneq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
    CUDA_SRCS  += $(wildcard llm/*/*.cu)
    NVCCFLAGS  += -I$(NCCL_HOME)/include
    CUDA_LIBS  += -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib -lnccl
  else
    $(warning NCCL not found under $(NCCL_HOME): building without multi-GPU collectives)
  endif
  CUDA_OBJS  := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
  MAIN_OBJ   := $(BUILD)/train_cuda.o
  BUILD_KIND := cuda
else
  CUDA_OBJS  :=
  CUDA_LIBS  :=
  MAIN_OBJ   := $(BUILD)/train_cpu.o
  BUILD_KIND := cpu
endif

.PHONY: all clean test test-gpu bench bench-gpu data run deps tests
all: $(BIN)

# ---- the binary -------------------------------------------------------------------------------
$(BIN): $(MAIN_OBJ) $(BUILD)/libtrain.a $(CUDA_OBJS)
	$(CC) $(CFLAGS) -o $@ $(MAIN_OBJ) $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)
	@echo "built $@ ($(BUILD_KIND) build)"

# Checked when building, not when reading this file, so that `make run` can install it first.
.PHONY: mpi-check
mpi-check:
	@if [ -z "$(strip $(MPI_LDFLAGS))" ]; then \
	  echo "MPI not found: '$(MPICC) --showme:link' failed (scripts/install_deps.sh installs libopenmpi-dev)"; exit 1; fi
$(LIB_OBJS) $(MAIN_OBJ): | mpi-check

$(BUILD)/libtrain.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/train_cpu.o: train.cu
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -x c -c $< -o $@

$(BUILD)/train_cuda.o: train.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -DTRAIN_GPT_CUDA -x cu -c $< -o $@

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/llm/%.o: llm/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# ---- tests: rules in tests/tests.mk and tests/cuda_sim/sim.mk, assembled here ------------------
include tests/tests.mk tests/cuda_sim/sim.mk

tests: train_gpt data $(TEST_BINS) $(ASAN_TESTS) $(BUILD)/tests/libfake_nvml.so $(GPU_TEST_BINS) $(GPU_BENCH) sim-tests

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

run: deps
	@$(MAKE) --no-print-directory train_gpt data
	./train_gpt

bench: train_gpt $(BUILD)/bench_cpu
	$(BUILD)/bench_cpu

# prepare_data's MB/s next to tiktoken's encode_ordinary_batch, same text and threads (dev/bench_prepare.sh).
.PHONY: bench-prepare
bench: bench-prepare
bench-prepare: $(BUILD)/prepare_data
	dev/bench_prepare.sh

$(BUILD)/bench_cpu: dev/bench_cpu.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)

clean:
	rm -rf $(BUILD) $(BIN)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
