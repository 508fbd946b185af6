#!/usr/bin/env bash
# test_prepare_data.sh: dev/prepare_data's corpus mode (--tokenizer): .txt,
# .jsonl and .jsonl.zst inputs from files, folders and globs become shards
# whose documents are eot + tiktoken's tokens, in input order, each in one
# split (tests/prepare_data_check.py); the trainer reads them (uint16 for
# GPT-2, uint32 for cl100k); reruns with other thread counts and memory
# limits give identical bytes; bad input gets one line naming file and line.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
PD=build/prepare_data
if ! A=$(tests/tiktoken_assets.sh 2>"$T/assets.err"); then
  fail prepare_data_setup "$(cat "$T/assets.err")"
  finish
fi
REF_PY=$(cat "$A/python")
G=$A/gpt2.tiktoken
C=$A/cl100k_base.tiktoken

# Inputs: the corpus's first chapters as JSON lines (plain and zstd), the torture text as .txt, in a folder tree.
mkdir -p "$T/in/sub/deeper" "$T/more"
"$REF_PY" tests/tiktoken_ref.py torture "$T/in/torture.txt"
zstd -dcq data/corpus/kjv.txt.zst | head -c 300000 >"$T/kjv_head.txt"
"$PY" - "$T" <<'PY'
import json, sys
t = sys.argv[1]
chapters = open(t + "/kjv_head.txt").read().split("\n\n")
with open(t + "/in/sub/a.jsonl", "w") as f:
    for i, c in enumerate(chapters[:40]):
        f.write(json.dumps({"id": i, "text": c, "meta": {"n": [i]}}) + "\n")
    f.write("\n   \n")  # blank lines hold no document
    f.write(json.dumps({"text": "escapes: \u00e9\u4e2d\U0001F600 \"q\" \\\\ \t tab"}, ensure_ascii=True) + "\n")
with open(t + "/in/sub/deeper/b.jsonl", "w") as f:
    for c in chapters[40:]:
        f.write(json.dumps({"text": c}, ensure_ascii=False) + "\n")
with open(t + "/more/c.jsonl", "w") as f:
    for c in chapters[:40]:
        f.write(json.dumps({"content": c[::-1], "text": 1}) + "\n")
PY
zstd -q "$T/in/sub/deeper/b.jsonl" -o "$T/in/sub/b.jsonl.zst"
echo "ignored: not a corpus file" >"$T/in/notes.md"

check() {  # check NAME OUT RANKS PATTERN FIELD INPUT...
  local name=$1
  shift
  local r
  if r=$("$REF_PY" tests/prepare_data_check.py "$@" 2>&1); then ok "$name"; else fail "$name" "$r"; fi
}

run_pd() {  # run_pd LOG ARGS...: prepare_data must succeed
  local log=$1
  shift
  if ! "$PD" "$@" >"$log" 2>&1; then fail "prepare_data $*" "$(tail -n 2 "$log")"; fi
}

# GPT-2: small shards, a large validation share so both splits have several shards.
run_pd "$T/g1.log" --tokenizer "$G" --out-dir "$T/g1" --shard-tokens 4000 --val-fraction 0.3 "$T/in"
check gpt2_documents "$T/g1" "$G" gpt2 text "$T/in"
if grep -q '"shard_version": 1' "$T/g1/manifest.json" && [ -s "$T/g1/data_val_000001.bin" ] && [ -s "$T/g1/data_train_000003.bin" ]; then
  ok gpt2_uint16_several_shards
else
  fail gpt2_uint16_several_shards "$(ls "$T/g1")"
fi
if grep -Eq '^prepare_data \| 4 files, [0-9]+ documents .* tokens .* shards of uint16 \(version 1\) .* MB/s' "$T/g1.log"; then
  ok summary_line
else
  fail summary_line "$(tail -n 1 "$T/g1.log")"
fi

# Reruns: one thread and a tight memory limit (many small batches) give the same bytes.
run_pd "$T/g2.log" --tokenizer "$G" --out-dir "$T/g2" --shard-tokens 4000 --val-fraction 0.3 --threads 1 --memory-mb 1 "$T/in"
if diff -r "$T/g1" "$T/g2" >/dev/null; then ok rerun_identical; else fail rerun_identical "$(diff -rq "$T/g1" "$T/g2" | head -n 3)"; fi
# A rerun into the same folder with bigger shards leaves no stale shard behind.
run_pd "$T/g3.log" --tokenizer "$G" --out-dir "$T/g1" --shard-tokens 100000 --val-fraction 0.3 "$T/in"
if [ ! -e "$T/g1/data_train_000001.bin" ] && grep -q 'stale shards' "$T/g3.log"; then
  check rerun_bigger_shards "$T/g1" "$G" gpt2 text "$T/in"
else
  fail rerun_bigger_shards "$(ls "$T/g1")"
fi

# The trainer reads the uint16 shards (train and val) with the rank file as its tokenizer.
if $TG --device cpu --depth 1 --seq-len 32 --micro-batch 2 --steps 2 --val-every 1 --sample-every 0 \
  --train-data "$T/g2/data_train_*.bin" --val-data "$T/g2/data_val_*.bin" --tokenizer "$G" >"$T/t16.log" 2>&1 &&
  grep -q '^val ' "$T/t16.log" && grep -q '| vocab 50257 ' "$T/t16.log"; then ok trainer_reads_uint16; else fail trainer_reads_uint16 "$(tail -n 3 "$T/t16.log")"; fi

# The manifest is a promise about the shards beside it (data/shard_manifest.h):
# it lists each with its bytes and xxh3, and train_gpt refuses a shard it does
# not list, one of another size, or (sampled: the first shard) another checksum.
tr16=(--device cpu --depth 1 --seq-len 32 --micro-batch 2 --steps 1 --val-every 0 --sample-every 0 --tokenizer "$G" --peak-tflops 1)
if "$PY" -c 'import json,sys,os,xxhash; d=sys.argv[1]; m=json.load(open(d+"/manifest.json"))
for s in m["shards"]:
    b=open(os.path.join(d,s["file"]),"rb").read(); assert s["bytes"]==len(b) and s["xxh3"]=="%016x"%xxhash.xxh3_64_intdigest(b), s' "$T/g2" 2>"$T/mf.err"
then ok manifest_lists_bytes_and_xxh3; else fail manifest_lists_bytes_and_xxh3 "$(tail -n 1 "$T/mf.err")"; fi
rm -rf "$T/m1" && cp -r "$T/g2" "$T/m1" && cp "$T/m1/data_train_000001.bin" "$T/m1/data_train_000042.bin"
expect_error shard_not_in_manifest "m1/data_train_000042\.bin \(--train-data\): not listed in .*m1/manifest\.json" \
  "$TG" "${tr16[@]}" --train-data "$T/m1/data_train_*.bin"
rm -rf "$T/m1" && cp -r "$T/g2" "$T/m1" && printf 'x' >>"$T/m1/data_train_000002.bin"
expect_error shard_size_differs "m1/data_train_000002\.bin \(--train-data\): [0-9]+ bytes, but .*m1/manifest\.json lists [0-9]+" \
  "$TG" "${tr16[@]}" --train-data "$T/m1/data_train_*.bin"
rm -rf "$T/m1" && cp -r "$T/g2" "$T/m1" && printf '\x07' | dd of="$T/m1/data_train_000000.bin" bs=1 seek=2000 conv=notrunc status=none
expect_error shard_checksum_differs "m1/data_train_000000\.bin \(--train-data\): checksum [0-9a-f]{16}, but .*m1/manifest\.json lists [0-9a-f]{16}" \
  "$TG" "${tr16[@]}" --train-data "$T/m1/data_train_*.bin"
# A rerun into a finished folder removes its manifest before it touches a
# shard: one that fails (or is killed) midway leaves no manifest vouching for
# a mix of old and new shards.
rm -rf "$T/m1" && cp -r "$T/g2" "$T/m1"
printf '{"text": "a"}\n{"text": "b"}\n{"body": "c"}\n' >"$T/late_error.jsonl"
"$PD" --tokenizer "$G" --out-dir "$T/m1" "$T/late_error.jsonl" >/dev/null 2>&1
if [ ! -e "$T/m1/manifest.json" ]; then ok failed_rerun_removes_manifest
else fail failed_rerun_removes_manifest "the old manifest is still there"; fi

# cl100k: more than 65,535 ids, so uint32 shards (version 2), which the trainer reads too.
run_pd "$T/c1.log" --tokenizer "$C" --out-dir "$T/c1" --shard-tokens 5000 --val-fraction 0.2 "$T/in/sub" "$T/in/torture.txt"
check cl100k_documents "$T/c1" "$C" cl100k text "$T/in/sub" "$T/in/torture.txt"
ver=$("$PY" -c 'import numpy as n,sys; print(n.fromfile(sys.argv[1],dtype="<i4",count=5)[1])' "$T/c1/data_train_000000.bin")
if [ "$ver" = 2 ] && grep -q '"token_dtype": "uint32"' "$T/c1/manifest.json"; then ok cl100k_uint32; else fail cl100k_uint32 "header version $ver"; fi
if $TG --device cpu --depth 1 --seq-len 32 --micro-batch 2 --steps 1 --val-every 0 --sample-every 0 \
  --train-data "$T/c1/data_train_*.bin" --tokenizer "$C" >"$T/t32.log" 2>&1 &&
  grep -q '| vocab 100277 ' "$T/t32.log"; then ok trainer_reads_uint32; else fail trainer_reads_uint32 "$(tail -n 3 "$T/t32.log")"; fi

# --text-field and a glob input.
run_pd "$T/f1.log" --tokenizer "$G" --out-dir "$T/f1" --text-field content --val-fraction 0 "$T/more/*.jsonl"
check text_field_and_glob "$T/f1" "$G" gpt2 content "$T/more/c.jsonl"

# Bad input: one line naming the file and line, exit 1, no manifest.
printf '{"text": "a"}\n{"text": "b"}\n{"body": "c"}\n' >"$T/nofield.jsonl"
expect_error missing_field "nofield\.jsonl' line 3: no \"text\" member" "$PD" --tokenizer "$G" --out-dir "$T/bad1" "$T/nofield.jsonl"
printf '{"text": "a"}\n{"text": "b",}\n' >"$T/badjson.jsonl"
expect_error invalid_json "badjson\.jsonl' line 2: invalid JSON" "$PD" --tokenizer "$G" --out-dir "$T/bad2" "$T/badjson.jsonl"
printf '{"text": 5}\n' >"$T/notstring.jsonl"
expect_error field_not_string "notstring\.jsonl' line 1: member \"text\" is not a string" "$PD" --tokenizer "$G" --out-dir "$T/bad3" "$T/notstring.jsonl"
zstd -qc "$T/in/sub/deeper/b.jsonl" >"$T/whole.zst"
head -c $(($(stat -c %s "$T/whole.zst") - 100)) "$T/whole.zst" >"$T/trunc.jsonl.zst"
expect_error truncated_zstd "trunc\.jsonl\.zst' line [0-9]+: truncated zstd stream" "$PD" --tokenizer "$G" --out-dir "$T/bad4" "$T/trunc.jsonl.zst"
if [ ! -e "$T/bad1/manifest.json" ] && [ ! -e "$T/bad4/manifest.json" ] && ! ls "$T"/bad*/*.tmp >/dev/null 2>&1; then ok no_manifest_on_error; else fail no_manifest_on_error "a manifest was written"; fi
expect_error missing_input "inputs: '.*/nothing\.jsonl' does not exist" "$PD" --tokenizer "$G" --out-dir "$T/bad5" "$T/nothing.jsonl"
expect_error unknown_suffix "notes\.md' is not a \.txt" "$PD" --tokenizer "$G" --out-dir "$T/bad6" "$T/in/notes.md"
mkdir -p "$T/empty"
expect_error empty_folder "folder '.*/empty' has no \.txt" "$PD" --tokenizer "$G" --out-dir "$T/bad7" "$T/empty"
head -c 300000 /dev/zero | tr '\0' 'a' | sed 's/^/{"text": "/; s/$/"}/' >"$T/long.jsonl"
expect_error record_over_memory "long\.jsonl' line 1: a record of more than [0-9]+ bytes does not fit the memory limit" \
  "$PD" --tokenizer "$G" --out-dir "$T/bad8" --memory-mb 1 "$T/long.jsonl"
expect_error bad_fraction "--val-fraction: '2' is not a number in \[0, 1\]" "$PD" --tokenizer "$G" --out-dir "$T/bad9" --val-fraction 2 "$T/in"
finish
