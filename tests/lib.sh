# lib.sh: helpers for the shell tests. Each case prints "ok <name>" or
# "FAIL <name>: <why>", the lines tests/run_tests.sh counts.
# shellcheck shell=bash

TG=${TG:-./train_gpt}
# Debian's python3 has numpy and torch (scripts/install_deps.sh); a pyenv python on PATH may not.
PY=/usr/bin/python3
TEST_TMP=$(mktemp -d /tmp/train_gpt_test.XXXXXX)
# Runs write no checkpoints and resume none unless a test names a
# --checkpoint-dir: otherwise every run would resume the one before it.
export TRAIN_GPT_CHECKPOINT_DIR=""
trap 'rm -rf "$TEST_TMP"' EXIT
failures=0

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# expect_error NAME PATTERN CMD...: the command must exit with status 1
# (not a crash, not success), print exactly one "train_gpt: error:" line on
# stderr, and that line must match PATTERN (an extended regex).
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local err rc lines
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c '^train_gpt: error:')
  if [ "$rc" -ne 1 ]; then
    fail "$name" "exit status $rc, expected 1; stderr: $(printf '%s' "$err" | tail -n 3)"
  elif [ "$lines" -ne 1 ]; then
    fail "$name" "expected one error line, got $lines: $err"
  elif ! printf '%s\n' "$err" | grep '^train_gpt: error:' | grep -Eq -- "$pattern"; then
    fail "$name" "error line does not match /$pattern/: $err"
  else
    ok "$name"
  fi
}

# The loss column of every step line, for bitwise comparisons of runs.
step_losses() { grep -E '^step ' "$1" | sed -E 's/.*\| loss ([^ ]+) \| norm ([^ ]+) \|.*/\1 \2/'; }

# The step and validation lines of log $1 after step $2, up to the learning
# rate (what follows is timing and memory): what a resumed run must repeat.
lines_after() { grep -E '^(step|val) ' "$1" | sed -E 's/^(step .* \| lr [^ ]+) \|.*/\1/' |
  awk -v s="$2" '{ split($2, a, "/"); if (a[1] + 0 > s) print }'; }
# The step a run resumed from, from its "resume" line.
resumed_from() { grep -E '^resume +\| ' "$1" | head -n 1 | sed -E 's/.*: step ([0-9]+) of.*/\1/'; }

# Largest absolute difference between the weights of two runs (exported
# model files, past their 256-word header).
maxdiff() {
  "$PY" -c "import numpy as n,sys; a,b=(n.fromfile(f,dtype=n.float32)[256:] for f in sys.argv[1:]); print('%.3g' % abs(a-b).max())" "$1" "$2"
}
# within D TOL: D is a number no larger than TOL (an empty D, e.g. from a
# missing file, fails).
within() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d != "" && d <= t) }'; }

# reseal_manifest FILE: seals a checkpoint manifest again after a deliberate
# edit (its last line holds XXH3 of every byte before it; see
# llm/checkpoint/ckpt_manifest.h), so that the checks behind the seal are tested.
reseal_manifest() {
  "$PY" - "$1" <<'EOF'
import re, sys, xxhash
p = sys.argv[1]
text = open(p, "rb").read()
m = re.search(rb'  "manifest_xxh3": "[0-9a-f]{16}"\n}\n$', text)
body = text[:m.start()] if m else text.rstrip()[:-1].rstrip() + b",\n"
open(p, "wb").write(body + b'  "manifest_xxh3": "%s"\n}\n' % xxhash.xxh3_64_hexdigest(body).encode())
EOF
}

finish() { exit $((failures > 100 ? 100 : failures)); }
