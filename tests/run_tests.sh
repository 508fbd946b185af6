#!/usr/bin/env bash
# Runs every test program named on the command line (C binaries or scripts),
# echoes their output, and counts the "ok <name>" / "FAIL <name>: ..." lines
# each prints. A program that exits nonzero without printing a FAIL line (a
# crash, a timeout, a sanitizer report) counts as one failure of its own.
# The last line is always "N passed, N failed".
#
# A test script that says "# run_tests: background" in its first 30 lines
# spends its time waiting on the network (pip installing from PyPI), not on
# the cores: it starts first, runs beside the others, and is counted at the
# end. Nothing else runs concurrently, so timings and timeouts of the rest
# hold as on an idle machine.
set -u
passed=0
failed=0
failed_names=()
per_test_timeout=${TEST_TIMEOUT:-900}
bg_dir=$(mktemp -d)
trap 'rm -rf "$bg_dir"' EXIT

is_background() { [ -f "$1" ] && head -n 30 "$1" | grep -q '^# run_tests: background'; }

# run PROG: runs it under the timeout; its output in $bg_dir/N.out, its status in N.rc, its seconds in N.s.
run() {
  local start end
  start=$(date +%s)
  timeout "$per_test_timeout" bash -c "$2" >"$bg_dir/$1.out" 2>&1
  echo $? >"$bg_dir/$1.rc"
  end=$(date +%s)
  echo $((end - start)) >"$bg_dir/$1.s"
}

foreground=()
background=()
for prog in "$@"; do
  if is_background "$prog"; then background+=("$prog"); else foreground+=("$prog"); fi
done
bg_pids=()
for i in "${!background[@]}"; do
  run "bg$i" "${background[$i]}" &
  bg_pids+=($!)
done

# count PROG OUT RC SECONDS: echoes a test's output and adds up its ok/FAIL lines.
count() {
  local prog=$1 out=$2 rc=$3 secs=$4
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
  echo "=== $prog: $ok ok, $bad failed, rc=$rc, ${secs}s"
}

for i in "${!foreground[@]}"; do
  echo "=== ${foreground[$i]}"
  run "fg$i" "${foreground[$i]}"
  count "${foreground[$i]}" "$(cat "$bg_dir/fg$i.out")" "$(cat "$bg_dir/fg$i.rc")" "$(cat "$bg_dir/fg$i.s")"
done
for i in "${!background[@]}"; do
  wait "${bg_pids[$i]}"
  echo "=== ${background[$i]} (ran in the background)"
  count "${background[$i]}" "$(cat "$bg_dir/bg$i.out")" "$(cat "$bg_dir/bg$i.rc")" "$(cat "$bg_dir/bg$i.s")"
done

if [ ${#failed_names[@]} -gt 0 ]; then
  echo "--- failures:"
  printf '  %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
