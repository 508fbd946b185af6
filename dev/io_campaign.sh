#!/usr/bin/env bash
# io_campaign.sh: the outputs-and-inputs campaign of issue 29, as a table of
# rows "tried / held": a demanding user's attacks on every folder the program
# writes and on the inputs that could silently become another model.
#   model-dir kills      kill -9 at every file operation of a --model-dir write over an old folder
#                        (TRAIN_GPT_FOLDER_FAULT=N): held = exactly the old or the new model files
#   export-hf kills      the same for --export-hf
#   unwritable outputs   --export, --export-hf, --model-dir on /proc: held = refused before step 1
#   prepare_data kills   kill -9 at random moments of a rerun over a finished folder: held = no
#                        manifest, or one that lists exactly the shards there with their sizes and xxh3
#   generate no weights  missing, empty, no checkpoint dir: held = refused, nothing created
#   reference readers    config key twice, Llama without rms_norm_eps, invalid UTF-8 in a header:
#                        held = read as Python's json / LlamaConfig / safetensors read them
#   rank file gap        a rank changed to 3,000,000: held = refused naming the line
#   sizes from files     intermediate_size 1e9, eval count 2^31-1: held = refused naming file and key
#   manifest seal        version 1 without the seal, zero_stage 7, world 3 of 2 shards, precision
#                        without its section: held = refused naming the manifest and the field
#   flag twice           held = warned, last wins
#   SIGTERM in eval      held = exit within 2 s of the signal, checkpoint written, no further step
# Run from the repository root after `make`, `make data` and tests/tiktoken_assets.sh;
# about a minute on 2 cores. Usage: dev/io_campaign.sh [PREPARE_DATA_KILLS (default 5)]
set -u
cd "$(dirname "$0")/.." || exit 1
TG=$(pwd)/train_gpt
PD=$(pwd)/build/prepare_data
PY=/usr/bin/python3
KILLS=${1:-5}
W=$(mktemp -d /tmp/io_campaign.XXXXXX)
trap 'rm -rf "$W"' EXIT
row() { printf '| %-22s | %5s | %5s |\n' "$1" "$2" "$3"; }

"$PY" - "$W/data.bin" <<'PY'
import sys, numpy as np
x = np.random.default_rng(7).integers(0, 64, 4097).astype(np.uint16)
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, len(x)
open(sys.argv[1], "wb").write(h.tobytes() + x.tobytes())
PY
base=("$TG" --device cpu --threads 1 --sample-every 0 --val-every 0 --tokenizer '' --peak-tflops 1 --seq-len 16
  --micro-batch 1 --steps 1 --train-data "$W/data.bin" --checkpoint-dir '')
run=("${base[@]}" --layers 1 --channels 32 --heads 2 --vocab-size 64)
sums() { (cd "$1" 2>/dev/null && for f in config.json model.bin model.safetensors; do [ -e "$f" ] && sha256sum "$f"; done); }

echo "| row                    | tried |  held |"
echo "|---|---|---|"
# Folder kills.
for flag in --model-dir --export-hf; do
  "${run[@]}" --seed 1 "$flag" "$W/old" >/dev/null 2>&1
  "${run[@]}" --seed 2 "$flag" "$W/new" >/dev/null 2>&1
  old=$(sums "$W/old") new=$(sums "$W/new") tried=0 held=0
  for n in $(seq 1 200); do
    rm -rf "$W/k" && mkdir "$W/k" && cp -a "$W/old" "$W/k/m"
    { TRAIN_GPT_FOLDER_FAULT=$n "${run[@]}" --seed 2 "$flag" "$W/k/m" >/dev/null 2>&1; } 2>/dev/null
    rc=$?
    tried=$((tried + 1))
    got=$(sums "$W/k/m")
    if [ "$got" = "$old" ] || [ "$got" = "$new" ]; then held=$((held + 1)); fi
    [ $rc -eq 0 ] && break
  done
  row "${flag#--} kills" $tried $held
  rm -rf "$W/old" "$W/new"
done
# Unwritable outputs.
tried=0 held=0
for flag in --export --export-hf --model-dir; do
  tried=$((tried + 1))
  out=$("${run[@]}" --steps 2 "$flag" /proc/self/fdinfo/x 2>&1)
  if ! grep -q '^step ' <<<"$out" && grep -q "error: $flag .* checked before training" <<<"$out"; then held=$((held + 1)); fi
done
row "unwritable outputs" $tried $held
# prepare_data kills.
G=build/tiktoken/gpt2.tiktoken
if [ -x "$PD" ] && [ -f "$G" ]; then
  zstd -dcq data/corpus/kjv.txt.zst >"$W/kjv.txt"
  "$PD" --tokenizer "$G" --out-dir "$W/pd" --shard-tokens 20000 --threads 1 "$W/kjv.txt" >/dev/null 2>&1
  t0=$(date +%s.%N)
  "$PD" --tokenizer "$G" --out-dir "$W/pd2" --shard-tokens 20000 --threads 1 "$W/kjv.txt" >/dev/null 2>&1
  full=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  tried=0 held=0
  for _ in $(seq 1 "$KILLS"); do
    rm -rf "$W/pk" && cp -r "$W/pd" "$W/pk"
    "$PD" --tokenizer "$G" --out-dir "$W/pk" --shard-tokens 15000 --threads 1 "$W/kjv.txt" >/dev/null 2>&1 &
    pid=$!
    sleep "$("$PY" -c "import random; print(round(random.uniform(0.05, 0.9) * $full, 3))")"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "(prepare_data killed after ${full}s x a random share: manifest $([ -e "$W/pk/manifest.json" ] && echo present || echo absent), $(find "$W/pk" -name '*.bin' | wc -l) shards, $(find "$W/pk" -name '*.tmp' | wc -l) .tmp)"
    tried=$((tried + 1))
    if "$PY" - "$W/pk" <<'PY'
import glob, json, os, sys, xxhash
d = sys.argv[1]
if not os.path.exists(d + "/manifest.json"): sys.exit(0)  # visibly unfinished
m = json.load(open(d + "/manifest.json"))
listed = {s["file"]: s for s in m["shards"]}
for p in glob.glob(d + "/*.bin"):
    s = listed.get(os.path.basename(p))
    b = open(p, "rb").read()
    if not s or s["bytes"] != len(b) or s["xxh3"] != "%016x" % xxhash.xxh3_64_intdigest(b): sys.exit(1)
PY
    then held=$((held + 1)); fi
  done
  row "prepare_data kills" $tried $held
else
  row "prepare_data kills" n/a n/a
fi
# --generate without weights.
tried=0 held=0
mkdir -p "$W/empty"
for dir in "$W/missing" "$W/empty" ""; do
  tried=$((tried + 1))
  "${run[@]}" --generate 1 --checkpoint-dir "$dir" >"$W/g.log" 2>&1
  if [ $? -eq 1 ] && grep -q 'no weights to generate from' "$W/g.log" && [ ! -e "$W/missing" ]; then held=$((held + 1)); fi
done
row "generate no weights" $tried $held
# Reference readers (tests/test_inputs.sh checks these in detail).
out=$(MAKELEVEL=1 TG="$TG" bash tests/test_inputs.sh 2>&1)
tried=3 held=$(grep -cE '^ok (config_key_twice_last_wins|llama_rms_norm_eps_default|safetensors_header_utf8)$' <<<"$out")
row "reference readers" "$tried" "$held"
held=$(grep -cE '^ok (config_size_beyond_files|eval_count_beyond_file)$' <<<"$out")
row "sizes from files" 2 "$held"
held=$(grep -cE '^ok flag_twice_warns_last_wins$' <<<"$out")
row "flag twice" 1 "$held"
# Rank file gap.
if [ -f "$G" ]; then
  sed '5000s/ [0-9]*$/ 3000000/' "$G" >"$W/gap.tiktoken"
  echo "in the beginning" >"$W/t.txt"
  "$PD" --tokenizer "$W/gap.tiktoken" --out-dir "$W/gap" "$W/t.txt" >"$W/gap.log" 2>&1
  rc=$?
  row "rank file gap" 1 "$([ $rc -eq 1 ] && grep -q "line 5000: rank 3000000" "$W/gap.log" && echo 1 || echo 0)"
fi
# Manifest seal and contradictions (the checkpoint format's own test).
if [ -x build/tests/test_checkpoint ]; then
  build/tests/test_checkpoint >"$W/ck.log" 2>&1
  row "manifest seal" 4 "$(grep -q "^ok manifest_rejects_inconsistent" "$W/ck.log" && echo 4 || echo 0)"
fi
# SIGTERM in a multiple-choice eval.
"${base[@]}" --depth 1 --vocab-size 0 --tokenizer data/kjv/tokenizer.bin --train-data 'data/kjv/kjv_train_*.bin' \
  --seq-len 128 --micro-batch 4 --steps 3 --eval-data data/kjv/kjv_eval.bin --eval-every 1 --checkpoint-dir "$W/ck" >"$W/ev.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q '^step ' "$W/ev.log" && break; sleep 0.05; done
sleep 0.3
t0=$(date +%s.%N)
kill -TERM "$pid"
wait "$pid"
t1=$(date +%s.%N)
ok=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a < 2) }')
[ -f "$W/ck/step_00000001/manifest.json" ] && ! grep -q '^step +2/' "$W/ev.log" || ok=0
row "SIGTERM in eval" 1 "$ok"
echo "(SIGTERM in eval: exit $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s after the signal)"
