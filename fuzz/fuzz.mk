# fuzz/fuzz.mk: the sanitized builds (included by the Makefile): libFuzzer targets for every
# reader of files (fuzz/README.md) and an ASan/UBSan train_gpt for the bad-input tests.
#
#   make fuzz                 runs every target for FUZZ_SECONDS (default 60) each, growing
#                             build/fuzz/corpus/<target> from the seeds in fuzz/corpus/<target>
#   make fuzz-<target>        one of them (shard, shard_zst, llmc, tokenizer, manifest, hyperparameters, safetensors, hf_config)
#   make test                 runs each for a few seconds (tests/test_fuzz.sh),
#                             tests/test_bad_input.sh with $(BUILD)/asan/train_gpt, and
#                             tests/test_edge_values.c sanitized
#
# The library is compiled once more, by clang with AddressSanitizer, UBSan (float-cast-overflow
# included) and libFuzzer's coverage hooks, into $(BUILD)/san/; the targets and the sanitized
# train_gpt link against it. Without clang (or without its libFuzzer runtime, Debian's
# libclang-rt-dev) gcc builds the sanitized train_gpt alone and the fuzz test says it skipped.

SAN_CC        := $(if $(shell command -v clang 2>/dev/null),clang,$(CC))
FUZZ_SECONDS  ?= 60
FUZZ_TARGETS  := shard shard_zst llmc tokenizer manifest hyperparameters safetensors hf_config
FUZZ_BINS     := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
# Whether clang finds its libFuzzer runtime.
FUZZ_RUNTIME  := $(if $(filter clang,$(SAN_CC)),$(shell clang -print-file-name=libclang_rt.fuzzer-$(shell uname -m).a),)
HAVE_LIBFUZZER := $(if $(wildcard $(FUZZ_RUNTIME)),1,)
SAN_FLAGS     := -std=c11 -fopenmp -D_GNU_SOURCE -I. -g -O1 -fno-omit-frame-pointer \
                 -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all $(MPI_CFLAGS) \
                 $(if $(filter clang,$(SAN_CC)),-Wno-pass-failed,)  # at -O1 clang declines `omp simd` loops, loudly
SAN_COVERAGE  := $(if $(HAVE_LIBFUZZER),-fsanitize=fuzzer-no-link,)
SAN_OBJS      := $(LIB_SRCS:%.c=$(BUILD)/san/%.o)

$(BUILD)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) $(SAN_COVERAGE) -MMD -MP -c $< -o $@
$(SAN_OBJS): | mpi-check

$(BUILD)/san/libtrain.a: $(SAN_OBJS)
	@rm -f $@
	ar rcs $@ $^

# train_gpt under ASan/UBSan (the CPU build: train.cu as C).
$(BUILD)/asan/train_gpt: train.cu $(BUILD)/san/libtrain.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) -x c -c train.cu -o $(BUILD)/san/train.o
	$(SAN_CC) $(SAN_FLAGS) -o $@ $(BUILD)/san/train.o $(BUILD)/san/libtrain.a $(LDLIBS)

# tests/test_edge_values.c once more under the sanitizers, where undefined behaviour aborts.
$(BUILD)/asan/test_edge_values: tests/test_edge_values.c tests/testlib.h $(BUILD)/san/libtrain.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) -o $@ $< $(BUILD)/san/libtrain.a $(LDLIBS)
ASAN_TESTS += $(BUILD)/asan/test_edge_values
# tests/test_safetensors.c (the safetensors reader's lying headers) likewise.
$(BUILD)/asan/test_safetensors: tests/test_safetensors.c tests/testlib.h $(BUILD)/san/libtrain.a
	@mkdir -p $(dir $@)
	$(SAN_CC) $(SAN_FLAGS) -o $@ $< $(BUILD)/san/libtrain.a $(LDLIBS)
ASAN_TESTS += $(BUILD)/asan/test_safetensors

FUZZ_LINK = @mkdir -p $(dir $@) && $(SAN_CC) $(SAN_FLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/san/libtrain.a $(LDLIBS)
$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz.h $(BUILD)/san/libtrain.a
	$(FUZZ_LINK)
# fuzz_shard_zst is fuzz_shard reading files that end in .zst.
$(BUILD)/fuzz/fuzz_shard_zst: fuzz/fuzz_shard.c fuzz/fuzz.h $(BUILD)/san/libtrain.a
	$(FUZZ_LINK) -DFUZZ_SUFFIX='".bin.zst"'

tests: $(BUILD)/asan/train_gpt $(if $(HAVE_LIBFUZZER),$(FUZZ_BINS),)

.PHONY: fuzz $(FUZZ_TARGETS:%=fuzz-%)
fuzz: $(FUZZ_TARGETS:%=fuzz-%)
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(BUILD)/fuzz/fuzz_%
	@test -n "$(HAVE_LIBFUZZER)" || { echo "fuzz: clang's libFuzzer runtime is absent (scripts/install_deps.sh installs clang and libclang-rt-dev)"; exit 1; }
	@mkdir -p $(BUILD)/fuzz/corpus/$* $(BUILD)/fuzz/findings/$*
	ASAN_OPTIONS=detect_leaks=0 $< -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -timeout=20 \
	  -artifact_prefix=$(BUILD)/fuzz/findings/$*/ $(BUILD)/fuzz/corpus/$* fuzz/corpus/$*
