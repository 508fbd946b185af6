#!/usr/bin/env bash
# test_version.sh: runs are citable. The binary carries the version of the
# tree it was built from (`git describe --always --dirty`, "unknown" outside
# git), prints it on the first summary line and writes it into the JSONL
# config record; a new version recompiles one object (version.o) only.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
B=${BUILD:-build}
want=$(make -s --no-print-directory print-version)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git_says=$(git describe --always --dirty)
else
  git_says=unknown
fi
if [ -n "$want" ] && [ "$want" = "$git_says" ]; then
  ok version_is_git_describe
else
  fail version_is_git_describe "the Makefile says '$want', git describe '$git_says'"
fi

# 1. The first summary line ends with the version; the config record has it.
"$TG" --device cpu --depth 1 --seq-len 32 --micro-batch 2 --steps 1 --val-every 0 --sample-every 0 \
  --log-dir "$T/log" >"$T/run.out" 2>"$T/run.err"
rc=$?
first=$(grep -m 1 '^train_gpt | ' "$T/run.out")
if [ $rc -eq 0 ] && [ "$first" != "${first% | version "$want"}" ]; then
  ok version_on_first_summary_line
else
  fail version_on_first_summary_line "exit $rc, want '... | version $want' (rebuild after a commit: make train_gpt), got '$first'; $(tail -n 1 "$T/run.err")"
fi
if "$PY" - "$T/log/metrics.jsonl" "$want" <<'PYEOF'
import json, sys
first = json.loads(open(sys.argv[1]).readline())
assert first["type"] == "config" and first["version"] == sys.argv[2], first.get("version")
PYEOF
then ok version_in_config_record; else fail version_in_config_record "config record: $(head -c 120 "$T/log/metrics.jsonl")"; fi

# 2. Outside git the version is "unknown", and that is what version.c is compiled with.
unknown=$(GIT_DIR=/nonexistent make -s --no-print-directory BUILD="$T/b" print-version)
cmd=$(GIT_DIR=/nonexistent make -n --no-print-directory BUILD="$T/b" "$T/b/llm/report/version.o" | grep -- ' -c llm/report/version.c')
if [ "$unknown" = unknown ] && printf '%s' "$cmd" | grep -qF -- "-DTRAIN_GPT_VERSION='\"unknown\"'"; then
  ok version_unknown_outside_git
else
  fail version_unknown_outside_git "print-version '$unknown'; compile line: $cmd"
fi

# 3. A new version recompiles version.o and nothing else (the objects make
# would rebuild anyway are the baseline). The stamp is put back afterwards,
# mtime included, so the build directory is left as it was.
objects() { grep -E -- ' -c [^ ]+' | sed -E 's/.* -c ([^ ]+) .*/\1/' | sort; }
cp -p "$B/version.txt" "$T/version.txt.saved"
before=$(make -n --no-print-directory train_gpt | objects)
after=$(make -n --no-print-directory TRAIN_GPT_VERSION=test-version-xyz train_gpt)
cp -p "$T/version.txt.saved" "$B/version.txt"
extra=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after" | objects) | tr '\n' ' ')
if [ "$extra" = "llm/report/version.c " ] && printf '%s' "$after" | grep -q 'test-version-xyz'; then
  ok new_version_recompiles_one_object
else
  fail new_version_recompiles_one_object "objects rebuilt for the new version: '$extra'"
fi
finish
