#!/usr/bin/env bash
# bench_prepare.sh: prepare_data's throughput (MB of text per second, whole
# run: reading, JSON, encoding, writing shards) next to tiktoken's
# encode_ordinary_batch (encoding only) on the same documents, the same
# encoding and the same number of threads, measured in this run.
# Usage: dev/bench_prepare.sh [COPIES]  (the bundled corpus's chapters COPIES times, default 4)
set -eu
cd "$(dirname "$0")/.."
copies=${1:-4}
A=$(tests/tiktoken_assets.sh)
PY=$(cat "$A/python")
T=$(mktemp -d /tmp/bench_prepare.XXXXXX)
trap 'rm -rf "$T"' EXIT
threads=$(nproc)
zstd -dcq data/corpus/kjv.txt.zst >"$T/kjv.txt"
"$PY" - "$T" "$copies" <<'PY'
import json, sys
t, copies = sys.argv[1], int(sys.argv[2])
chapters = open(t + "/kjv.txt", encoding="utf-8").read().split("\n\n")
with open(t + "/docs.jsonl", "w") as f:
    for k in range(copies):
        for c in chapters:
            f.write(json.dumps({"text": c}) + "\n")
PY
for enc in gpt2:gpt2.tiktoken cl100k:cl100k_base.tiktoken; do
  name=${enc%%:*} ranks=$A/${enc#*:}
  ours=$(build/prepare_data --tokenizer "$ranks" --out-dir "$T/out_$name" --threads "$threads" "$T/docs.jsonl" 2>/dev/null |
    sed -nE 's/.* MB of text in [0-9.]+s: ([0-9.]+) MB\/s.*/\1/p')
  theirs=$("$PY" - "$ranks" "$name" "$T/docs.jsonl" "$threads" <<'PY'
import json, sys, time
sys.path.insert(0, "tests")
from tiktoken_ref import encoding
enc = encoding(sys.argv[1], sys.argv[2])
docs = [json.loads(l)["text"] for l in open(sys.argv[3], encoding="utf-8")]
mb = sum(len(d.encode()) for d in docs) / 1e6
enc.encode_ordinary_batch(docs[:50], num_threads=int(sys.argv[4]))  # warm up the thread pool
t = time.perf_counter()
enc.encode_ordinary_batch(docs, num_threads=int(sys.argv[4]))
print("%.1f" % (mb / (time.perf_counter() - t)))
PY
)
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }')
  printf 'bench_prepare | %-6s | %d threads | prepare_data %s MB/s (whole run) | tiktoken encode_ordinary_batch %s MB/s | ratio %s\n' \
    "$name" "$threads" "${ours:-n/a}" "${theirs:-n/a}" "$ratio"
done
