# tests/tests.mk: the test programs, the sanitizer builds and the GPU test and benchmark
# programs (included by the Makefile, which assembles `make tests` from what is defined here).

# Every tests/test_*.c is one test program linked against the library.
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_SCRIPTS := $(sort $(wildcard tests/test_*.sh tests/test_*.py))
# Scripts with sweeps that make test-long (TRAIN_GPT_TEST_LONG=1) runs whole and make test in part.
TEST_LONG_SCRIPTS := tests/test_zero.sh tests/test_model_folder.sh tests/test_train_e2e.sh tests/test_context_parallel.sh

$(BUILD)/tests/%: tests/%.c $(BUILD)/libtrain.a tests/testlib.h tests/testlib_mpi.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)
# The two parity tests against PyTorch share their reading of reference.py and their checks.
$(BUILD)/tests/test_torch_parity $(BUILD)/tests/test_torch_parity_llama: tests/torch_parity.h

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
# test_fp8_block.py runs the CPU backend's block-scaled quantisation through this helper.
$(BUILD)/tests/fp8_block_dump: tests/fp8_block_dump.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)
tests: $(BUILD)/tests/fp8_block_dump
# test_fp4_block.py runs the CPU backend's NVFP4 quantisation and GEMM through this helper.
$(BUILD)/tests/fp4_block_dump: tests/fp4_block_dump.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)
tests: $(BUILD)/tests/fp4_block_dump
# All 2^32 float inputs against CUDA's conversion (about 3 minutes on 2 cores; not in make test).
.PHONY: test-fp8-exhaustive
test-fp8-exhaustive: $(BUILD)/tests/test_fp8_format
	$(BUILD)/tests/test_fp8_format --exhaustive
# ---- FP8 (end) --------------------------------------------------------------------------------

# The data and checkpoint readers again, under AddressSanitizer and UBSan.
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
ASAN_SRCS  := $(wildcard data/*.c) llm/util/util.c llm/util/json_read.c llm/util/host_mem.c
$(BUILD)/asan/test_data: tests/test_data.c $(ASAN_SRCS) tests/testlib.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -fopenmp -D_GNU_SOURCE -I. $(WARN) $(ASAN_FLAGS) -DUNDER_ASAN -o $@ $< $(ASAN_SRCS) -lzstd -lpcre2-8 -lxxhash -lm

# The checkpoint format tests (JSON and manifest readers, resharding) under the sanitizers too.
$(BUILD)/asan/test_checkpoint: tests/test_checkpoint.c $(LIB_SRCS) $(wildcard llm/*.h llm/*/*.h) tests/testlib.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -fopenmp -D_GNU_SOURCE -I. $(WARN) $(MPI_CFLAGS) $(ASAN_FLAGS) -DUNDER_ASAN -o $@ $< $(LIB_SRCS) $(LDLIBS)
ASAN_TESTS := $(BUILD)/asan/test_data $(BUILD)/asan/test_checkpoint

# A stand-in for libnvidia-ml.so.1 (tests/fake_nvml.c): NVML telemetry is tested without a GPU.
$(BUILD)/tests/libfake_nvml.so: tests/fake_nvml.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -shared -fPIC -o $@ $<



# ---- GPU tests and benchmarks (CUDA builds) ----------------------------------------------------
# tests/gpu/test_*.c and dev/bench_gpu.c linked against the nvcc-built backend.
# `make tests` (and so CI, which has no GPU) only compiles and links them;
# `make test-gpu` runs them where a GPU exists and reports itself skipped
# elsewhere; `make bench-gpu` runs the benchmarks (scripts/gpu_check.sh does all).
GPU_TEST_BINS += $(if $(NVCC),$(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c)),)
GPU_BENCH     := $(if $(NVCC),$(BUILD)/gpu/bench_gpu,)

test-gpu: $(BIN) $(GPU_TEST_BINS)
	@tests/gpu/run_gpu_tests.sh $(GPU_TEST_BINS) $(if $(GPU_TEST_BINS),$(wildcard tests/gpu/test_*.sh))

bench-gpu: $(BIN) $(GPU_BENCH)
	@test -n "$(GPU_BENCH)" || { echo "bench-gpu: this build has no CUDA"; exit 1; }
	$(GPU_BENCH)
	$(GPU_BENCH) --llama8b

# dev/bench_comm.c with the CUDA backend: NCCL's bus bandwidth on several GPUs
# (`make bench-comm-gpu NP=8`; one rank per GPU).
GPU_BENCH_COMM := $(if $(NVCC),$(BUILD)/gpu/bench_comm,)
NP ?= 8
bench-comm-gpu: $(GPU_BENCH_COMM)
	@test -n "$(GPU_BENCH_COMM)" || { echo "bench-comm-gpu: this build has no CUDA"; exit 1; }
	mpirun --allow-run-as-root --bind-to none -np $(NP) $(GPU_BENCH_COMM) --device cuda
$(BUILD)/gpu/bench_comm: dev/bench_comm.c $(BUILD)/libtrain.a $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)

$(BUILD)/gpu/bench_gpu: dev/bench_gpu.c $(BUILD)/libtrain.a $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)
$(BUILD)/gpu/%: tests/gpu/%.c tests/gpu/gpu_test.h tests/testlib.h $(BUILD)/libtrain.a $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJS) $(BUILD)/libtrain.a $(CUDA_LIBS) $(LDLIBS)

# ---- tiktoken-compatible tokenizer (data/bpe.c) -----------------------------------------------
# test_tiktoken.sh runs dev/tokenize against tiktoken (from PyPI, cached in build/tiktoken).
tests: $(BUILD)/tokenize

# ---- Hugging Face folders (llm/hf/) ------------------------------------------------------------
# test_hf.sh compares transformers' logits with the model's, read by this helper.
$(BUILD)/tests/hf_logits: tests/hf_logits.c $(BUILD)/libtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtrain.a $(LDLIBS)
tests: $(BUILD)/tests/hf_logits
