#!/usr/bin/env bash
# test_llmc_compat.sh: --llmc-compat 1 trains on llm.c's batches in llm.c's
# order with llm.c's cosine schedule: from the same weights and shards, its
# losses are those of dev/reference.py's PyTorch model fed by a
# re-implementation of llm.c's loader (MT19937 seeded 42, Fisher-Yates of the
# shards every epoch and of each shard's batches) and schedule, over three
# shards of different sizes and almost two epochs. Without the flag (train_gpt's
# own order and schedule) the losses differ, so the comparison can fail.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
# Three shards cut from the bundled corpus: 4, 5 and 5 batches of 4 x 32 + 1 tokens.
"$PY" - "$T" <<'PYEOF'
import numpy as np, sys
t = sys.argv[1]
raw = open("data/kjv/kjv_train_000.bin", "rb").read()
header = np.frombuffer(raw[:1024], dtype=np.int32)
tokens = np.frombuffer(raw[1024:], dtype=np.uint16)[:header[2]]
start = 0
for i, n in enumerate([600, 700, 650]):
    h = np.zeros(256, dtype=np.int32)
    h[:3] = [20240520, 1, n]
    with open(f"{t}/shard_{i}.bin", "wb") as f:
        f.write(h.tobytes() + tokens[start:start + n].tobytes())
    start += 5000
PYEOF
common=(--device cpu --threads 1 --peak-tflops 1 --sample-every 0 --val-every 0 --seq-len 32 --micro-batch 4)
"$TG" "${common[@]}" --depth 2 --steps 1 --export "$T/init.bin" >/dev/null 2>&1
hp=(--lr 0.001 --warmup 3 --lr-final-frac 0.1 --weight-decay 0.1 --grad-clip 1.0 --beta1 0.9 --beta2 0.95 --eps 1e-8)
run() {  # run NAME FLAGS...: 12 steps of 2 micro-steps from init.bin; losses (full precision) in NAME.losses
  local name=$1
  shift
  "$TG" "${common[@]}" --init-from "$T/init.bin" --train-data "$T/shard_*.bin" --batch-tokens 256 --steps 12 "${hp[@]}" \
    --log-dir "$T/$name" "$@" >"$T/$name.log" 2>&1
  "$PY" -c 'import json, sys; [print(repr(r["loss"])) for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]' \
    "$T/$name/metrics.jsonl" >"$T/$name.losses" 2>/dev/null
}
run compat --llmc-compat 1
run own
"$PY" dev/reference.py --model "$T/init.bin" --train-data "$T/shard_*.bin" --micro-batch 4 --seq-len 32 --accum 2 \
  --steps 12 "${hp[@]}" --out "$T/ref.losses" >"$T/ref.log" 2>&1
diff_of() { "$PY" -c 'import sys; a, b = ([float(x) for x in open(f)] for f in sys.argv[1:]); print("%.3g" % max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 12 else "")' "$1" "$2"; }
d_compat=$(diff_of "$T/compat.losses" "$T/ref.losses")
d_own=$(diff_of "$T/own.losses" "$T/ref.losses")
echo "# 12 steps: |train_gpt --llmc-compat 1 - reference| <= ${d_compat:-n/a}; without the flag ${d_own:-n/a}"
if within "$d_compat" 2e-4 && ! within "$d_own" 1e-2; then
  ok llmc_order_and_schedule_match_reference
else
  fail llmc_order_and_schedule_match_reference "max loss difference ${d_compat:-n/a} (want <= 2e-4), without the flag ${d_own:-n/a} (want > 1e-2); $(tail -n 2 "$T/compat.log" "$T/ref.log")"
fi
# The schedule: llm.c's cosine never reaches the floor (1e-4): the last step's
# lr is above it; train_gpt's own reaches it at the last step.
last_compat=$(grep -E '^step +12/12' "$T/compat.log" | sed -E 's/.*\| lr ([^ ]+) \|.*/\1/')
last_own=$(grep -E '^step +12/12' "$T/own.log" | sed -E 's/.*\| lr ([^ ]+) \|.*/\1/')
if [ "$last_own" = "1.00e-04" ] && awk -v l="$last_compat" 'BEGIN { exit !(l > 1.0e-4) }'; then ok llmc_schedule_never_reaches_floor
else fail llmc_schedule_never_reaches_floor "last lr: --llmc-compat '$last_compat', own '$last_own'"; fi
# A shard without one whole batch is refused, as llm.c would.
"$PY" -c 'import numpy as n, sys; h = n.zeros(256, n.int32); h[:3] = [20240520, 1, 100]; open(sys.argv[1], "wb").write(h.tobytes() + n.arange(100, dtype=n.uint16).tobytes())' "$T/tiny_0.bin"
expect_error llmc_short_shard "--train-data: shard '.*tiny_0.bin' holds 100 tokens, fewer than llm.c's one batch of micro-batch x seq-len x ranks \+ 1 = 129" \
  "$TG" "${common[@]}" --init-from "$T/init.bin" --train-data "$T/tiny_*.bin" --steps 1 --llmc-compat 1
finish
