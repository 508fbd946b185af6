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

# ---- tests ----------------------------------------------------------------------------------
# Every tests/test_*.c is one test program linked against the library.
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_SCRIPTS := $(sort $(wildcard tests/test_*.sh tests/test_*.py))

$(BUILD)/tests/%: tests/%.c $(BUILD)/libtrain.a tests/testlib.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)

# GPU test programs in CUDA C (tests/gpu/*.cu), built in CUDA builds with NCCL so
# that CI compiles them; run by `make test-gpu` on a machine with GPUs (the C ones below).
GPU_TEST_BINS :=
ifneq ($(filter llm/parallel/comm_nccl.cu,$(CUDA_SRCS)),)
  GPU_TEST_BINS += $(BUILD)/tests/gpu/test_comm_nccl
endif
$(BUILD)/tests/gpu/%: tests/gpu/%.cu $(BUILD)/libtrain.a $(CUDA_OBJS) tests/testlib.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@.o
	$(CC) $(CFLAGS) -o $@ $@.o $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)

# ---- FP8 (begin) ------------------------------------------------------------------------------
# test_fp8_format compares kernels/fp8_format.h with CUDA's own host conversion
# (cuda_fp8.h, which also compiles as C) when the toolkit's headers are present.
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_fp8.h),)
$(BUILD)/tests/test_fp8_format: private CFLAGS += -isystem $(CUDA_HOME)/include -DHAVE_CUDA_FP8_H
endif
# All 2^32 float inputs against CUDA's conversion (about 3 minutes on 2 cores; not in make test).
.PHONY: test-fp8-exhaustive
test-fp8-exhaustive: $(BUILD)/tests/test_fp8_format
	$(BUILD)/tests/test_fp8_format --exhaustive
# ---- FP8 (end) --------------------------------------------------------------------------------

# The data and checkpoint readers again, under AddressSanitizer and UBSan.
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
ASAN_SRCS  := $(wildcard data/*.c) llm/util/util.c
$(BUILD)/asan/test_data: tests/test_data.c $(ASAN_SRCS) tests/testlib.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -fopenmp -D_GNU_SOURCE -I. $(WARN) $(ASAN_FLAGS) -DUNDER_ASAN -o $@ $< $(ASAN_SRCS) -lzstd -lm

# The checkpoint format tests (JSON and manifest readers, resharding) under the sanitizers too.
$(BUILD)/asan/test_checkpoint: tests/test_checkpoint.c $(LIB_SRCS) $(wildcard llm/*.h llm/*/*.h) tests/testlib.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -fopenmp -D_GNU_SOURCE -I. $(WARN) $(MPI_CFLAGS) $(ASAN_FLAGS) -DUNDER_ASAN -o $@ $< $(LIB_SRCS) $(LDLIBS)
ASAN_TESTS := $(BUILD)/asan/test_data $(BUILD)/asan/test_checkpoint

# A stand-in for libnvidia-ml.so.1 (tests/fake_nvml.c): NVML telemetry is tested without a GPU.
$(BUILD)/tests/libfake_nvml.so: tests/fake_nvml.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -shared -fPIC -o $@ $<

tests: train_gpt $(TEST_BINS) $(GPU_TEST_BINS) $(ASAN_TESTS) data $(BUILD)/tests/libfake_nvml.so

test: tests
	@tests/run_tests.sh $(TEST_BINS) $(ASAN_TESTS) $(TEST_SCRIPTS) $(SIM_TESTS)

# ---- GPU tests and benchmarks (CUDA builds) ----------------------------------------------------
# tests/gpu/test_*.c and dev/bench_gpu.c linked against the nvcc-built backend.
# `make tests` (and so CI, which has no GPU) only compiles and links them;
# `make test-gpu` runs them where a GPU exists and reports itself skipped
# elsewhere; `make bench-gpu` runs the benchmarks (scripts/gpu_check.sh does all).
GPU_TEST_BINS += $(if $(NVCC),$(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c)),)
GPU_BENCH     := $(if $(NVCC),$(BUILD)/gpu/bench_gpu,)
tests: $(GPU_TEST_BINS) $(GPU_BENCH)

test-gpu: $(BIN) $(GPU_TEST_BINS)
	@tests/gpu/run_gpu_tests.sh $(GPU_TEST_BINS) $(if $(GPU_TEST_BINS),$(wildcard tests/gpu/test_*.sh))

bench-gpu: $(BIN) $(GPU_BENCH)
	@test -n "$(GPU_BENCH)" || { echo "bench-gpu: this build has no CUDA"; exit 1; }
	$(GPU_BENCH)

$(BUILD)/gpu/bench_gpu: dev/bench_gpu.c $(BUILD)/libtrain.a $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)
$(BUILD)/gpu/%: tests/gpu/%.c tests/gpu/gpu_test.h tests/testlib.h $(BUILD)/libtrain.a $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)

# ---- CUDA kernels on the CPU: the tests/cuda_sim harness (begin) -------------------------------
# The CUDA backend's sources (kernels/cuda/*.cu, llm/*/*.cu) compiled by the host C++
# compiler with -DCUDA_SIM into $(SIM)/ and linked with the harness
# (tests/cuda_sim: CUDA's execution model, the runtime, cuBLASLt and NCCL on
# the CPU) and libtrain.a, so that `make test` runs every kernel and the GPU
# test suite (tests/gpu/test_*.c, test_*.cu) without a GPU. Needs the CUDA headers only.
SIM          := $(BUILD)/sim
SIM_CXX      ?= g++
SIM_ENABLED  := $(if $(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),1,)
SIM_MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
SIM_MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
SIM_CXXFLAGS := -std=c++17 -O2 -march=native -g -DCUDA_SIM -fno-extern-tls-init -fstack-clash-protection -fopenmp -pthread -I. \
                -isystem $(CUDA_HOME)/include $(SIM_MPI_CFLAGS) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -Wall -Wno-unused-parameter -Wno-unused-function
# Without nccl.h the NCCL parts (tests/cuda_sim/*nccl*, llm/*/*.cu) are left out.
SIM_NCCL     := $(shell echo '\#include <nccl.h>' | $(SIM_CXX) -isystem $(CUDA_HOME)/include -E -x c++ - >/dev/null 2>&1 && echo 1)
SIM_NO_NCCL  := $(if $(SIM_NCCL),,%nccl.cpp %nccl.cu %nccl.sh)
SIM_HARNESS_OBJS := $(patsubst %.cpp,$(SIM)/%.o,$(filter-out $(SIM_NO_NCCL),$(wildcard tests/cuda_sim/*.cpp)))
SIM_KERNEL_OBJS  := $(patsubst %.cu,$(SIM)/%.o,$(wildcard kernels/cuda/*.cu $(if $(SIM_NCCL),llm/*/*.cu)))
SIM_SELF_TESTS   := $(patsubst tests/cuda_sim/%.cu,$(SIM)/bin/%,$(filter-out $(SIM_NO_NCCL),$(wildcard tests/cuda_sim/test_*.cu)))
SIM_GPU_TESTS    := $(patsubst tests/gpu/%,$(SIM)/bin/gpu_%,$(basename $(filter-out $(SIM_NO_NCCL),$(wildcard tests/gpu/test_*.c tests/gpu/test_*.cu))))
# The GPU tests run twice: in order, and with every block's threads in a random order.
SIM_GPU_RANDOM   := $(SIM_GPU_TESTS:%=%.random)
SIM_SCRIPTS      := $(filter-out $(SIM_NO_NCCL),tests/cuda_sim/test_sim_train_gpt.sh tests/cuda_sim/test_sim_zero_nccl.sh \
                               tests/cuda_sim/test_sim_checkpoint.sh)
SIM_TESTS        := $(if $(SIM_ENABLED),$(SIM_SELF_TESTS) $(SIM_GPU_TESTS) $(SIM_GPU_RANDOM) $(SIM_SCRIPTS),)
SIM_LINK_LIBS    := $(SIM)/libkernels.a $(SIM)/libcudasim.a $(BUILD)/libtrain.a

# Keep the test programs' objects (make would delete them as intermediates).
.PRECIOUS: $(SIM)/tests/cuda_sim/%.o $(SIM)/tests/gpu/%.o
.PHONY: sim-tests
sim-tests: $(SIM_TESTS) $(if $(SIM_ENABLED),$(SIM)/train_gpt)
tests: sim-tests

$(SIM)/libcudasim.a: $(SIM_HARNESS_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(SIM)/libkernels.a: $(SIM_KERNEL_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(SIM)/tests/cuda_sim/%.o: tests/cuda_sim/%.cpp
	@mkdir -p $(dir $@)
	$(SIM_CXX) $(SIM_CXXFLAGS) -MMD -MP -c $< -o $@
$(SIM)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(SIM_CXX) $(SIM_CXXFLAGS) -MMD -MP -x c++ -c $< -o $@
$(SIM)/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DCUDA_SIM -MMD -MP -c $< -o $@

# A test program: its object, the extern __shared__ arrays its objects use
# (gen_dynamic_smem.sh), the kernels (whole: libtrain.a refers to parts of
# the CUDA backend weakly, which does not pull them out of an archive), the
# harness and the CPU library.
define sim_link
	@mkdir -p $(dir $@)
	tests/cuda_sim/gen_dynamic_smem.sh $@.smem.cpp $< $(SIM_LINK_LIBS)
	$(SIM_CXX) $(SIM_CXXFLAGS) -c $@.smem.cpp -o $@.smem.o
	$(SIM_CXX) $(SIM_CXXFLAGS) -o $@ $< $@.smem.o -Wl,--whole-archive $(SIM)/libkernels.a -Wl,--no-whole-archive \
		$(SIM)/libcudasim.a $(BUILD)/libtrain.a $(LDLIBS) $(SIM_MPI_LIBS) -ldl
endef
$(SIM)/bin/%: $(SIM)/tests/cuda_sim/%.o $(SIM_LINK_LIBS) tests/cuda_sim/gen_dynamic_smem.sh
	$(sim_link)
$(SIM)/bin/gpu_%: $(SIM)/tests/gpu/%.o $(SIM_LINK_LIBS) tests/cuda_sim/gen_dynamic_smem.sh
	$(sim_link)
$(SIM)/bin/%.random: $(SIM)/bin/% tests/cuda_sim/random_schedule.sh
	printf '#!/bin/sh\nexec $(CURDIR)/tests/cuda_sim/random_schedule.sh $(abspath $<) "$$@"\n' > $@
	@chmod +x $@

# train_gpt itself on the simulated GPU (--device auto picks it): main() as in
# the CPU build, the backend's objects linked whole (libtrain.a refers to the
# CUDA backend weakly, which would not pull them out of an archive).
$(SIM)/train_gpt: $(SIM)/train.o $(SIM_KERNEL_OBJS) $(SIM)/libcudasim.a $(BUILD)/libtrain.a tests/cuda_sim/gen_dynamic_smem.sh
	tests/cuda_sim/gen_dynamic_smem.sh $@.smem.cpp $(SIM_KERNEL_OBJS) $(SIM)/libcudasim.a
	$(SIM_CXX) $(SIM_CXXFLAGS) -c $@.smem.cpp -o $@.smem.o
	$(SIM_CXX) $(SIM_CXXFLAGS) -o $@ $(SIM)/train.o $@.smem.o $(SIM_KERNEL_OBJS) $(SIM)/libcudasim.a $(BUILD)/libtrain.a \
		$(LDLIBS) $(SIM_MPI_LIBS) -ldl
$(SIM)/train.o: train.cu
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -x c -c $< -o $@
# ---- CUDA kernels on the CPU: the tests/cuda_sim harness (end) ---------------------------------

# ---- data, demo, benchmarks --------------------------------------------------------------------
DATA_DIR := data/kjv
$(BUILD)/prepare_data: dev/prepare_data.c $(BUILD)/libtrain.a
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

$(BUILD)/bench_cpu: dev/bench_cpu.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)

clean:
	rm -rf $(BUILD) $(BIN)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
