"""The ok/FAIL lines of the Python tests, in the form tests/run_tests.sh counts.

check(name, cond, why) prints "ok NAME" or "FAIL NAME: WHY"; finish() exits with the
number of failures (capped, so that it stays a valid exit status)."""
import sys

failures = 0


def check(name, cond, why):
    global failures
    if cond:
        print(f"ok {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL {name}: {why}", flush=True)


def finish():
    sys.exit(min(failures, 100))
