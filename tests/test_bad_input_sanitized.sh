#!/usr/bin/env bash
# test_bad_input_sanitized.sh: the bad-input and flag tests again, with
# train_gpt built under AddressSanitizer and UBSan ($BUILD/asan/train_gpt,
# fuzz/fuzz.mk): every rejection must also be free of sanitizer reports,
# which abort the run (exit status not 1, so expect_error fails).
set -u
cd "$(dirname "$0")/.." || exit 1
TG=${BUILD:-build}/asan/train_gpt
if [ ! -x "$TG" ]; then
  echo "FAIL sanitized_train_gpt: $TG is not built (make tests builds it)"
  exit 1
fi
export TG
# MPI's start-up allocations are not this program's leaks.
export ASAN_OPTIONS=detect_leaks=0
tests/test_bad_input.sh | sed 's/^\(ok\|FAIL\) /\1 sanitized_/'
status=${PIPESTATUS[0]}
tests/test_flags.sh | sed 's/^\(ok\|FAIL\) /\1 sanitized_/'
exit $((status + PIPESTATUS[0]))
