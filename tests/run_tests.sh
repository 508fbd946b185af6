#!/usr/bin/env bash
# Runs every test program named on the command line (C binaries or scripts),
# echoes their output, and counts the "ok <name>" / "FAIL <name>: ..." lines
# each prints. A program that exits nonzero without printing a FAIL line (a
# crash, a timeout, a sanitizer report) counts as one failure of its own.
# The last line is always "N passed, N failed".
set -u
passed=0
failed=0
failed_names=()
per_test_timeout=${TEST_TIMEOUT:-900}

for prog in "$@"; do
  echo "=== $prog"
  start=$(date +%s)
  out=$(timeout "$per_test_timeout" bash -c "$prog" 2>&1)
  rc=$?
  end=$(date +%s)
  printf '%s\n' "$out"
  ok=$(printf '%s\n' "$out" | grep -c '^ok ' || true)
  bad=$(printf '%s\n' "$out" | grep -c '^FAIL ' || true)
  passed=$((passed + ok))
  failed=$((failed + bad))
  if [ "$bad" -gt 0 ]; then
    while IFS= read -r line; do failed_names+=("$line"); done < <(printf '%s\n' "$out" | grep '^FAIL ')
  fi
  if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
    failed=$((failed + 1))
    msg="FAIL $prog: exited with status $rc without reporting a failed case"
    [ "$rc" -eq 124 ] && msg="FAIL $prog: timed out after ${per_test_timeout}s"
    echo "$msg"
    failed_names+=("$msg")
  fi
  echo "=== $prog: $ok ok, $bad failed, rc=$rc, $((end - start))s"
done

if [ ${#failed_names[@]} -gt 0 ]; then
  echo "--- failures:"
  printf '  %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
