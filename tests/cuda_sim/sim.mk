# tests/cuda_sim/sim.mk: the CUDA backend on the CPU (the tests/cuda_sim harness),
# included by the Makefile; `make tests` adds $(SIM_TESTS) and $(SIM)/train_gpt.

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
# The whole-model ones are compositions of kernels that the op tests already run
# in a random order: their random runs are in make test-long, not in CI's time.
SIM_GPU_WHOLE    := $(filter %/gpu_test_gpu_train %/gpu_test_gpu_grad_dtype,$(SIM_GPU_TESTS))
SIM_GPU_RANDOM   := $(patsubst %,%.random,$(filter-out $(SIM_GPU_WHOLE),$(SIM_GPU_TESTS)))
SIM_GPU_RANDOM_LONG := $(SIM_GPU_WHOLE:%=%.random)
SIM_SCRIPTS      := $(filter-out $(SIM_NO_NCCL),tests/cuda_sim/test_sim_train_gpt.sh tests/cuda_sim/test_sim_zero_nccl.sh \
                               tests/cuda_sim/test_sim_checkpoint.sh)
# First GPU contact (device choice, TRAIN_GPT_SYNC_CHECK, scratch, fallback note): issue 15.
SIM_SCRIPTS      += tests/cuda_sim/test_sim_gpu_run.sh
# Llama (llama17): --arch llama on the simulated GPU against the CPU.
SIM_SCRIPTS      += tests/cuda_sim/test_sim_llama.sh
# FP8 recipes by compute capability (issue 27).
SIM_SCRIPTS      += tests/cuda_sim/test_sim_fp8_recipe.sh
# --cuda-graphs on against off, bit for bit (issue 28).
SIM_SCRIPTS      += tests/cuda_sim/test_sim_cuda_graphs.sh
# --grad-dtype fp32 in BF16 runs, 2 ranks over the harness's NCCL, against the CPU (issue 25).
SIM_SCRIPTS      += $(if $(SIM_NCCL),tests/cuda_sim/test_sim_grad_dtype.sh)
# dev/bench_gpu's step byte table (issue 28) on the simulated GPU: the op names it maps to the planner's rows.
SIM_SCRIPTS      += tests/cuda_sim/test_sim_bench_bytes.sh
SIM_TESTS        := $(if $(SIM_ENABLED),$(SIM_SELF_TESTS) $(SIM_GPU_TESTS) $(SIM_GPU_RANDOM) $(SIM_SCRIPTS),)
SIM_LINK_LIBS    := $(SIM)/libkernels.a $(SIM)/libcudasim.a $(BUILD)/libtrain.a
# The harness's symbols that the fake cuDNN (dlopen'ed) looks up in the program.
SIM_EXPORTS      := -Wl,--export-dynamic-symbol=cuda_sim_device_range -Wl,--export-dynamic-symbol=cuda_sim_capture

# Keep the test programs' objects (make would delete them as intermediates).
.PRECIOUS: $(SIM)/tests/cuda_sim/%.o $(SIM)/tests/gpu/%.o $(SIM)/dev/%.o
.PHONY: sim-tests
sim-tests: $(SIM_TESTS) $(if $(SIM_ENABLED),$(SIM)/train_gpt $(SIM)/bin/bench_gpu)

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
	$(SIM_CXX) $(SIM_CXXFLAGS) $(SIM_EXPORTS) -o $@ $< $@.smem.o -Wl,--whole-archive $(SIM)/libkernels.a -Wl,--no-whole-archive \
		$(SIM)/libcudasim.a $(BUILD)/libtrain.a $(LDLIBS) $(SIM_MPI_LIBS) -ldl
endef
$(SIM)/bin/%: $(SIM)/tests/cuda_sim/%.o $(SIM_LINK_LIBS) tests/cuda_sim/gen_dynamic_smem.sh
	$(sim_link)
$(SIM)/bin/gpu_%: $(SIM)/tests/gpu/%.o $(SIM_LINK_LIBS) tests/cuda_sim/gen_dynamic_smem.sh
	$(sim_link)
$(SIM)/dev/%.o: dev/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DCUDA_SIM -isystem $(CUDA_HOME)/include -MMD -MP -c $< -o $@
$(SIM)/bin/bench_gpu: $(SIM)/dev/bench_gpu.o $(SIM_LINK_LIBS) tests/cuda_sim/gen_dynamic_smem.sh
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
	$(SIM_CXX) $(SIM_CXXFLAGS) $(SIM_EXPORTS) -o $@ $(SIM)/train.o $@.smem.o $(SIM_KERNEL_OBJS) $(SIM)/libcudasim.a $(BUILD)/libtrain.a \
		$(LDLIBS) $(SIM_MPI_LIBS) -ldl
$(SIM)/train.o: train.cu
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -x c -c $< -o $@

# cuDNN on the CPU (tests/cuda_sim/cudnn): the fake libcudnn_sim.so that the harness's
# cuDNN attention path dlopens through TRAIN_GPT_CUDNN_LIB; its tests need it built.
SIM_CUDNN_LIB := $(SIM)/libcudnn_sim.so
$(SIM_CUDNN_LIB): tests/cuda_sim/cudnn/fake_cudnn.cpp
	@mkdir -p $(dir $@)
	$(SIM_CXX) -std=c++17 -O2 -g -fPIC -shared -Wall -isystem $(CUDA_HOME)/include $< -o $@
$(SIM)/bin/test_sim_cudnn: $(SIM_CUDNN_LIB)
SIM_TESTS += $(if $(SIM_ENABLED),tests/cuda_sim/test_sim_cudnn_train.sh,)
# train_gpt as users run it (issue 23): make run's command, --generate, resume, 2 ranks;
# six combinations of attention, precision and architecture (all twelve: make test-long).
SIM_TESTS += $(if $(SIM_ENABLED),$(if $(SIM_NCCL),tests/cuda_sim/test_sim_user_paths.sh))

# make test-long: the sweeps too long for make test (CI): every combination of the user paths.
.PHONY: test-long
test-long: $(if $(SIM_ENABLED),$(SIM)/train_gpt $(SIM_CUDNN_LIB) $(SIM_GPU_RANDOM_LONG)) tests
	@test -n "$(SIM_ENABLED)" || { echo "test-long: needs the CUDA headers (the harness)"; exit 1; }
	@TRAIN_GPT_TEST_LONG=1 tests/run_tests.sh "USER_PATHS=all tests/cuda_sim/test_sim_user_paths.sh" $(SIM_GPU_RANDOM_LONG) \
		$(TEST_LONG_SCRIPTS)
sim-tests: $(if $(SIM_ENABLED),$(SIM_CUDNN_LIB))
