#!/usr/bin/env bash
# test_eval.sh: --eval-data (llm/eval.c): multiple-choice accuracy, length-
# normalised accuracy and the correct completions' loss equal a PyTorch
# computation with the same weights (tests/eval_ref.py) on a synthetic eval
# file (2-4 completions, a row longer than --seq-len), and with every row
# shorter than --seq-len (forwards at the rows' length); the same on 2 ranks;
# logged on the step output and in metrics.jsonl at --eval-every and the
# end; malformed eval files get one clear line.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
"$PY" tests/eval_ref.py write "$T/eval.bin" 4096 18

# matches_pytorch NAME LOG MODEL SEQ_LEN: the final eval line of LOG against
# tests/eval_ref.py's float64 scores of MODEL at SEQ_LEN (acc and acc_norm to the
# printed 4 decimals, the example count exactly, the mean loss within 1e-4).
matches_pytorch() {
  local name=$1 log=$2 model=$3 seq=$4 ours ref racc rnorm rloss rn acc norm loss n
  ours=$(grep '^eval     3/3 ' "$log" | sed -E 's/.*acc ([^ ]+) \| acc_norm ([^ ]+) \| loss ([^ ]+) \| ([0-9]+) examples/\1 \2 \3 \4/')
  ref=$("$PY" tests/eval_ref.py score "$model" "$T/eval.bin" "$seq")
  read -r _ racc _ rnorm _ rloss _ rn <<<"$ref"
  read -r acc norm loss n <<<"$ours"
  if [ "$acc" = "$(printf '%.4f' "$racc")" ] && [ "$norm" = "$(printf '%.4f' "$rnorm")" ] && [ "$n" = "$rn" ] &&
     within "$(awk -v a="$loss" -v b="$rloss" 'BEGIN { d = a - b; print d < 0 ? -d : d }')" 1e-4; then
    ok "$name"
  else
    fail "$name" "train_gpt: ${ours:-nothing}; PyTorch: $ref"
  fi
}

run=(--device cpu --depth 2 --seq-len 32 --micro-batch 4 --batch-tokens 256 --steps 3 --val-every 0 --sample-every 0 --threads 1
     --eval-data "$T/eval.bin")

"$TG" "${run[@]}" --eval-every 2 --export "$T/model.bin" --log-dir "$T/log" >"$T/one.log" 2>&1 ||
  fail eval_run "exit $?: $(tail -n 3 "$T/one.log")"
matches_pytorch eval_matches_pytorch "$T/one.log" "$T/model.bin" 32
# Every row under --seq-len: each forward runs at its longest row's length, not
# --seq-len (llm/eval.c), and must give the same scores as PyTorch at full length.
"$TG" --device cpu --depth 2 --seq-len 128 --micro-batch 4 --steps 3 --val-every 0 --sample-every 0 --threads 1 \
  --eval-data "$T/eval.bin" --export "$T/model128.bin" >"$T/t128.log" 2>&1 ||
  fail eval_short_rows "exit $?: $(tail -n 3 "$T/t128.log")"
matches_pytorch eval_short_rows "$T/t128.log" "$T/model128.bin" 128
if [ "$(grep -c '"type":"eval"' "$T/log/metrics.jsonl")" = 2 ] && grep -q '"type":"eval","step":2,"acc":' "$T/log/metrics.jsonl"; then
  ok eval_logged
else
  fail eval_logged "$(grep eval "$T/log/metrics.jsonl")"
fi

# Two ranks share the examples and report the same numbers.
"${MPI[@]}" -np 2 "$TG" "${run[@]}" >"$T/two.log" 2>&1 || fail eval_two_ranks "exit $?: $(tail -n 3 "$T/two.log")"
if [ "$(grep '^eval ' "$T/two.log" | cut -d"|" -f2-4)" = "$(grep "^eval     3/3 " "$T/one.log" | cut -d"|" -f2-4)" ]; then
  ok eval_two_ranks
else
  fail eval_two_ranks "$(grep '^eval ' "$T/two.log") vs $(grep '^eval     3/3' "$T/one.log")"
fi

# Malformed files: one line, exit 1, before any training.
for kind in magic truncated label token; do "$PY" tests/eval_ref.py corrupt "$T/eval.bin" "$T/$kind.bin" "$kind"; done
base=(--device cpu --depth 1 --seq-len 32 --micro-batch 4 --steps 1 --val-every 0 --sample-every 0)
expect_error eval_bad_magic "--eval-data '.*magic\.bin': bad magic 20240520" "$TG" "${base[@]}" --eval-data "$T/magic.bin"
expect_error eval_truncated "--eval-data '.*truncated\.bin': .*(truncated|not a whole number)" "$TG" "${base[@]}" --eval-data "$T/truncated.bin"
expect_error eval_bad_label "label\.bin': example 2: label [0-9] is not below its completion count" "$TG" "${base[@]}" --eval-data "$T/label.bin"
expect_error eval_bad_token "token\.bin': example 2: context token 60000 is not below the vocabulary size 4096" "$TG" "${base[@]}" --eval-data "$T/token.bin"
expect_error eval_rows "more than the 1 rows of --micro-batch" "$TG" "${base[@]}" --micro-batch 1 --eval-data "$T/eval.bin"
expect_error eval_missing "--eval-data '.*none\.bin' does not exist" "$TG" "${base[@]}" --eval-data "$T/none.bin"
finish
