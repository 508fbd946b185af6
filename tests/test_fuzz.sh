#!/usr/bin/env bash
# test_fuzz.sh: a short run of every libFuzzer target (fuzz/, built by
# `make tests` under ASan and UBSan) over its committed seed corpus and a few
# seconds of new inputs: no crash, no sanitizer report, every rejection one
# line naming the file. Skipped, saying so, only when clang's libFuzzer
# runtime is absent. FUZZ_TEST_SECONDS sets the time per target (default 4).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

B=${BUILD:-build}
seconds=${FUZZ_TEST_SECONDS:-4}
runtime=$(clang -print-file-name="libclang_rt.fuzzer-$(uname -m).a" 2>/dev/null)
if [ -z "$runtime" ] || [ ! -f "$runtime" ]; then
  echo "skip test_fuzz: clang's libFuzzer runtime is absent (scripts/install_deps.sh installs clang and libclang-rt-dev)"
  exit 0
fi

for t in shard shard_zst llmc tokenizer manifest hyperparameters safetensors hf_config; do
  bin="$B/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    fail "fuzz_$t" "$bin is not built (make tests builds it)"
    continue
  fi
  mkdir -p "$TEST_TMP/$t"
  # New inputs go to a scratch directory; the committed seeds are only read.
  if ASAN_OPTIONS=detect_leaks=0 "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
    -artifact_prefix="$TEST_TMP/$t/" "$TEST_TMP/$t" "fuzz/corpus/$t" >"$TEST_TMP/$t.log" 2>&1; then
    ok "fuzz_$t"
  else
    fail "fuzz_$t" "$(grep -E 'ERROR|fuzz:|runtime error|SUMMARY' "$TEST_TMP/$t.log" | head -n 3)"
  fi
done

finish
