#!/usr/bin/env bash
# test_generate.sh: ./train_gpt --generate (llm/generate.c): greedy
# (--temperature 0) continues a prompt exactly as PyTorch's greedy decoding
# with the same weights (tests/generate_ref.py), also past --seq-len tokens;
# sampling is the same for a seed and differs for another; text prompts are
# encoded and the continuation decoded; from a checkpoint too; bad flags get one line.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
"$TG" --device cpu --depth 2 --seq-len 16 --steps 40 --val-every 0 --sample-every 0 --export "$T/model.bin" \
  >"$T/train.log" 2>&1 || fail generate_setup "training failed: $(tail -n 3 "$T/train.log")"
gen=(--device cpu --init-from "$T/model.bin" --seq-len 16 --generate 1)
prompt="12 400 7 1033 5"
read -r -a prompt_ids <<<"$prompt"

# Greedy, 24 new tokens: the window slides past the 16 positions.
"$TG" "${gen[@]}" --tokenizer '' --prompt "$prompt" --temperature 0 --sample-tokens 24 >"$T/greedy.log" 2>&1
ours=$(grep -A1 '^generate  |' "$T/greedy.log" | tail -n 1 | sed "s/^$prompt //")
ref=$("$PY" tests/generate_ref.py "$T/model.bin" 24 "${prompt_ids[@]}")
if [ -n "$ref" ] && [ "$ours" = "$ref" ]; then ok greedy_matches_pytorch; else fail greedy_matches_pytorch "ours '$ours' vs PyTorch '$ref'"; fi

# Sampling: a seed gives the same tokens, another seed other ones.
sample() { "$TG" "${gen[@]}" --tokenizer '' --prompt "$prompt" --temperature 1.0 --top-k 50 --sample-tokens 24 --seed "$1" 2>&1 |
  grep -A1 '^generate  |' | tail -n 1; }
a=$(sample 7) b=$(sample 7) c=$(sample 8)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]; then ok sample_seeded; else fail sample_seeded "seed 7: '$a' / '$b', seed 8: '$c'"; fi

# Text in, text out with the bundled tokenizer; the prompt comes first.
"$TG" "${gen[@]}" --prompt "In the beginning" --temperature 0 --sample-tokens 8 >"$T/text.log" 2>&1
line=$(grep -A1 '^generate  |' "$T/text.log" | tail -n 1)
case "$line" in
  "In the beginning"?*) ok text_prompt ;;
  *) fail text_prompt "got '$line': $(tail -n 2 "$T/text.log")" ;;
esac

# From a checkpoint (the newest in --checkpoint-dir): the same greedy tokens as its exported weights.
"$TG" --device cpu --depth 2 --seq-len 16 --steps 5 --val-every 0 --sample-every 0 --checkpoint-dir "$T/ck" \
  --export "$T/ck_model.bin" >"$T/ck.log" 2>&1
"$TG" --device cpu --depth 2 --seq-len 16 --steps 5 --checkpoint-dir "$T/ck" --generate 1 --tokenizer '' --vocab-size 4096 \
  --prompt "$prompt" --temperature 0 --sample-tokens 10 >"$T/ckgen.log" 2>&1
ours=$(grep -A1 '^generate  |' "$T/ckgen.log" | tail -n 1 | sed "s/^$prompt //")
ref=$("$PY" tests/generate_ref.py "$T/ck_model.bin" 10 "${prompt_ids[@]}")
if [ -n "$ref" ] && [ "$ours" = "$ref" ] && grep -q '^resume' "$T/ckgen.log"; then ok from_checkpoint; else fail from_checkpoint "ours '$ours' vs '$ref': $(tail -n 2 "$T/ckgen.log")"; fi

expect_error bad_prompt_ids "--prompt 'x y': without a --tokenizer it must be token ids" "$TG" "${gen[@]}" --tokenizer '' --prompt 'x y'
expect_error bad_temperature "--temperature must not be negative" "$TG" "${gen[@]}" --temperature -1
finish
