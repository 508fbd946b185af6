"""The ok/FAIL lines of the Python tests, in the form tests/run_tests.sh counts.

ok(name) prints "ok NAME", fail(name, why) "FAIL NAME: WHY" and counts it;
check(name, cond, why) is one or the other; finish() exits with the number of
failures (capped, so that it stays a valid exit status)."""
import sys

failures = 0


def ok(name):
    print(f"ok {name}", flush=True)


def fail(name, why):
    global failures
    failures += 1
    print(f"FAIL {name}: {why}", flush=True)


def check(name, cond, why):
    if cond:
        ok(name)
    else:
        fail(name, why)


def finish():
    sys.exit(min(failures, 100))
