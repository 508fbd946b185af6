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

# What a run logged: the helpers below read DIR/metrics.jsonl of a run given
# --log-dir DIR (rank 0's records), never the human step line, so that its
# format can change. Numbers come at the step line's precision (loss and norm
# %.4f, lr %.2e; a non-finite value, null in the log, as nan), so that a
# comparison is exactly as strict as one of printed lines.
# jsonl_lines DIR AFTER: one line per step record ("step N/M loss L norm G
# lr R") and per validation record ("val N val_loss V") after step AFTER.
jsonl_lines() {
  "$PY" - "$1/metrics.jsonl" "${2:-0}" <<'PYEOF'
import json, os, sys
def f(v, fmt): return "nan" if v is None else fmt % v
if not os.path.exists(sys.argv[1]):
    sys.exit(print("no log: " + sys.argv[1]))  # two missing logs never compare equal
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "step" and r["step"] > int(sys.argv[2]):
        print("step %d/%d loss %s norm %s lr %s" % (r["step"], r["steps"], f(r["loss"], "%.4f"),
                                                    f(r["grad_norm"], "%.4f"), f(r["lr"], "%.2e")))
    elif r["type"] == "val" and r["step"] > int(sys.argv[2]):
        print("val %d val_loss %s" % (r["step"], f(r["val_loss"], "%.4f")))
PYEOF
}
# "loss norm" of every step, for bitwise comparisons of runs.
step_losses() { jsonl_lines "$1" | sed -nE '/^no log: /p; s/^step [0-9]+\/[0-9]+ loss ([^ ]+) norm ([^ ]+) .*/\1 \2/p'; }
# The step and validation records after step $2, up to the learning rate
# (timing and memory are left out): what a resumed run must repeat.
lines_after() { jsonl_lines "$1" "$2"; }
# The validation losses, one a line.
val_losses() { jsonl_lines "$1" | sed -nE '/^no log: /p; s/^val [0-9]+ val_loss (.*)/\1/p'; }
# How many steps the run logged, and the number of the last one.
steps_logged() { jsonl_lines "$1" | grep -c '^step '; }
last_step() { jsonl_lines "$1" | sed -nE 's/^step ([0-9]+)\/.*/\1/p' | tail -n 1; }
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

# two_ranks_match_one PREFIX STEPS ARGS...: $TG with ARGS on one rank at ZeRO-2, then on 2 ranks
# ("${MPI[@]}" -np 2) at ZeRO-2 and ZeRO-3, logs in $T; PREFIX_two_ranks_zero{2,3}_bitwise pass when
# the one rank logged STEPS steps and each 2-rank run logged the same losses and norms.
two_ranks_match_one() {
  local prefix=$1 steps=$2 z
  shift 2
  "$TG" "$@" --zero 2 --log-dir "$T/r1.metrics" >"$T/r1.log" 2>&1
  for z in 2 3; do "${MPI[@]}" -np 2 "$TG" "$@" --zero "$z" --log-dir "$T/r2z$z.metrics" >"$T/r2z$z.log" 2>&1; done
  for z in 2 3; do
    if [ "$(steps_logged "$T/r1.metrics")" -eq "$steps" ] && [ "$(step_losses "$T/r1.metrics")" = "$(step_losses "$T/r2z$z.metrics")" ]; then
      ok "${prefix}_two_ranks_zero${z}_bitwise"
    else
      fail "${prefix}_two_ranks_zero${z}_bitwise" "$(diff <(step_losses "$T/r1.metrics") <(step_losses "$T/r2z$z.metrics") | head -n 4; tail -n 2 "$T/r2z$z.log")"
    fi
  done
}

finish() { exit $((failures > 100 ? 100 : failures)); }
