# kernels/cuda/libs.mk: where the CUDA backend's libraries are, included by the
# Makefile in CUDA builds. Each is looked for in the CUDA toolkit, then Debian's
# /usr, then the Python wheels' site-packages/nvidia/<pkg>/{include,lib}
# (pip's nvidia-cublas, nvidia-cudnn-cu13), and make prints which one it used.
# Override with CUBLASLT_HOME / CUDNN_HOME (a folder with include/ and lib/ or
# lib64/) or PY_SITE (site-packages folders).
#
# cuBLASLt is linked (train_gpt needs it for every GEMM). NCCL is not looked
# for: llm/parallel/comm_nccl.cu declares the part of NCCL's ABI it uses
# (llm/parallel/nccl_abi.h) and opens libnccl.so.2 at run time, when two or
# more GPUs share a rank group, so one GPU needs no NCCL and the build needs
# no nccl.h. cuDNN is found and reported for the code that uses it (CUDNN_CFLAGS, CUDNN_LIBS).
PY_SITE ?= $(shell python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)

# $(call cuda_lib_find,HEADER,LIB,WHEEL_PKG,HOME): the first folder holding
# include/HEADER (and, when LIB is given, LIB under lib64/ or lib/).
cuda_lib_dirs = $(strip $(4) $(CUDA_HOME) /usr /usr/local $(foreach s,$(PY_SITE),$(s)/nvidia/$(3)))
cuda_lib_has  = $(and $(wildcard $(1)/include/$(2)),$(if $(3),$(wildcard $(1)/lib64/$(3) $(1)/lib/$(3) \
                $(1)/lib/x86_64-linux-gnu/$(3)),ok))
cuda_lib_find = $(firstword $(foreach d,$(call cuda_lib_dirs,$(1),$(2),$(3),$(4)),$(if $(call cuda_lib_has,$(d),$(1),$(2)),$(d))))
# -L and run-path flags for a found folder's library directory.
cuda_lib_link = $(foreach l,$(wildcard $(1)/lib64 $(1)/lib/x86_64-linux-gnu $(1)/lib),-L$(l) -Wl,-rpath,$(l))

CUBLASLT_DIR := $(call cuda_lib_find,cublasLt.h,libcublasLt.so,cublas,$(CUBLASLT_HOME))
CUDNN_DIR    := $(call cuda_lib_find,cudnn.h,libcudnn.so*,cudnn,$(CUDNN_HOME))

ifeq ($(CUBLASLT_DIR),)
  $(error cuBLASLt not found (cublasLt.h and libcublasLt.so under $(CUDA_HOME), /usr or a Python wheel): set CUBLASLT_HOME, or NO_CUDA=1)
endif
CUBLASLT_CFLAGS := $(if $(filter $(CUDA_HOME),$(CUBLASLT_DIR)),,-I$(CUBLASLT_DIR)/include)
CUBLASLT_LIBS   := $(call cuda_lib_link,$(CUBLASLT_DIR)) -lcublasLt
# The CUDA runtime: the toolkit's static library (no libcudart.so to find at run time).
CUDART_LIBS     := -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl -lpthread

CUDNN_CFLAGS := $(if $(CUDNN_DIR),-I$(CUDNN_DIR)/include)
CUDNN_LIBS   := $(if $(CUDNN_DIR),$(call cuda_lib_link,$(CUDNN_DIR)) -lcudnn)

# Printed once per make (not by the recursive makes of gpu-kit).
ifeq ($(MAKELEVEL),0)
  $(info cuBLASLt: $(CUBLASLT_DIR) (linked))
  $(info NCCL:     no header needed; libnccl.so.2 is opened at run time for 2+ GPUs)
  $(info cuDNN:    $(if $(CUDNN_DIR),$(CUDNN_DIR),not found))
endif
