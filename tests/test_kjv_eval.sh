#!/usr/bin/env bash
# test_kjv_eval.sh: the multiple-choice eval `make data` builds from the bundled
# corpus (dev/prepare_data.c write_kjv_eval): built as data/README.md says
# (tests/kjv_eval_check.py reads the corpus text and the validation shard
# itself), byte-identical on a rerun, and turned on in `make run`.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
CORPUS=data/corpus/kjv.txt.zst
for d in a b; do
  build/prepare_data --corpus "$CORPUS" --out-dir "$T/$d" >"$T/$d.log" 2>&1 ||
    fail prepare_data "exit $?: $(tail -n 2 "$T/$d.log")"
done

if r=$("$PY" tests/kjv_eval_check.py "$CORPUS" "$T/a" 2>&1); then ok kjv_eval_as_documented; else fail kjv_eval_as_documented "$r"; fi
if [ -s "$T/a/kjv_eval.bin" ] && cmp -s "$T/a/kjv_eval.bin" "$T/b/kjv_eval.bin"; then
  ok kjv_eval_rerun_identical
else
  fail kjv_eval_rerun_identical "two runs of prepare_data wrote different kjv_eval.bin"
fi
if grep -q '^prepare_data: eval: 400 multiple-choice examples' "$T/a.log"; then
  ok kjv_eval_count_printed
else
  fail kjv_eval_count_printed "$(grep 'eval:' "$T/a.log")"
fi

# `make run` evaluates at a few points of its 300 steps, on the file make data writes.
flags=$(make -s --no-print-directory print-demo-flags 2>/dev/null | tail -n 1)
every=$(sed -nE 's/.*--eval-every ([0-9]+).*/\1/p' <<<"$flags")
# shellcheck disable=SC2016  # $(DEMO_FLAGS) is the Makefile's text, not a shell expansion
if [[ "$flags" == *"--eval-data data/kjv/kjv_eval.bin"* ]] && [ -n "$every" ] && [ "$every" -gt 0 ] && [ "$every" -lt 300 ] &&
   grep -q '^	\./train_gpt \$(DEMO_FLAGS)$' Makefile; then
  ok make_run_evaluates
else
  fail make_run_evaluates "make run's flags: '$flags'"
fi
finish
