#!/usr/bin/env bash
# test_inputs.sh: inputs that must not silently become another model or run
# (issue 29): --generate without weights is refused and creates nothing; a
# config.json key given twice reads as its last value, as Python's json (and
# so transformers) reads it; a Llama config.json without rms_norm_eps gets
# LlamaConfig's default 1e-6; a safetensors header that is not valid UTF-8 is
# refused as the safetensors library refuses it; sizes read from a file (a config's
# intermediate_size, an eval file's example count) are checked against the
# file before allocating, and sizes from files or flags (the model's planned
# state, an eval file's examples) against the host's memory; a flag given
# twice warns (on rank 0 only under mpirun) and the last wins.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
"$PY" - "$T/data.bin" <<'PY'
import sys, numpy as np
x = np.random.default_rng(5).integers(0, 64, 2049).astype(np.uint16)
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, len(x)
open(sys.argv[1], "wb").write(h.tobytes() + x.tobytes())
PY
base=("$TG" --device cpu --threads 1 --sample-every 0 --val-every 0 --tokenizer '' --peak-tflops 1 --seq-len 16
  --micro-batch 1 --steps 1 --train-data "$T/data.bin" --checkpoint-dir '')
tiny=(--vocab-size 64 --channels 32 --heads 2)

# 1. --generate without weights: refused, naming where it looked; nothing created.
expect_error generate_missing_dir "--generate: no weights to generate from: no complete checkpoint in .*/nowhere \(it does not exist\); point --checkpoint-dir" \
  "${base[@]}" "${tiny[@]}" --layers 1 --generate 1 --checkpoint-dir "$T/nowhere"
if [ ! -e "$T/nowhere" ]; then ok generate_creates_nothing; else fail generate_creates_nothing "it created $T/nowhere"; fi
mkdir "$T/empty"
expect_error generate_empty_dir "--generate: no weights to generate from: no complete checkpoint in .*/empty;" \
  "${base[@]}" "${tiny[@]}" --layers 1 --generate 1 --checkpoint-dir "$T/empty"
expect_error generate_checkpoints_off "--generate: no weights to generate from: checkpoints are off" \
  "${base[@]}" "${tiny[@]}" --layers 1 --generate 1

# 2. A key given twice in config.json: the last one, as Python's json.load.
"${base[@]}" "${tiny[@]}" --layers 2 --export-hf "$T/g2" --export-hf-dtype fp32 >"$T/g2.log" 2>&1
sed -i 's/"n_layer": 2,/"n_layer": 7, "n_layer": 2,/' "$T/g2/config.json"
want=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["n_layer"])' "$T/g2/config.json")
"${base[@]}" --steps 0 --init-from "$T/g2" >"$T/dup.log" 2>&1
got=$(sed -nE 's/^model .*\| layers ([0-9]+) .*/\1/p' "$T/dup.log")
if grep -q '"n_layer": 7, "n_layer": 2' "$T/g2/config.json" && [ "$want" = 2 ] && [ "$got" = "$want" ]; then ok config_key_twice_last_wins
else fail config_key_twice_last_wins "Python reads $want, we read '$got': $(grep error "$T/dup.log")"; fi

# 3. A Llama config.json without rms_norm_eps: LlamaConfig's default (1e-6),
# recorded in the checkpoint manifest's norm_eps.
"${base[@]}" "${tiny[@]}" --arch llama --layers 1 --kv-heads 1 --mlp-hidden 48 --export-hf "$T/l1" >"$T/l1.log" 2>&1
"$PY" - "$T/l1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c["rms_norm_eps"]; json.dump(c, open(sys.argv[1], "w"))
PY
want=1e-06
if [ -x build/hfvenv/bin/python ]; then  # transformers itself, when test_hf.sh has installed it
  want=$(build/hfvenv/bin/python -c 'import transformers as t; print(t.LlamaConfig.from_pretrained(__import__("sys").argv[1]).rms_norm_eps)' "$T/l1")
fi
"${base[@]}" --init-from "$T/l1" --checkpoint-dir "$T/lc" --checkpoint-every 1 >"$T/eps.log" 2>&1
got=$("$PY" -c 'import json,sys,glob; print(json.load(open(glob.glob(sys.argv[1] + "/step_*/manifest.json")[0]))["model"]["norm_eps"])' "$T/lc" 2>&1)
if "$PY" -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-12)' "$got" "$want" 2>/dev/null; then ok llama_rms_norm_eps_default
else fail llama_rms_norm_eps_default "manifest norm_eps '$got', LlamaConfig's default $want"; fi

# 3b. A safetensors header with invalid UTF-8 in a __metadata__ key: refused,
# as the safetensors library refuses it (checked with the library itself
# when build/hfvenv exists).
cp -r "$T/l1" "$T/u8"
"$PY" - "$T/u8/model.safetensors" "$T/control.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
for path, key in ((sys.argv[1], b"f\xffo"), (sys.argv[2], b"fxo")):  # (the control: the same, valid)
    text = b'{"__metadata__":{"' + key + b'":"pt"},' + json.dumps(h, separators=(",", ":")).encode()[1:]
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
lib="refused accepted"
if [ -x build/hfvenv/bin/python ]; then
  lib=$(build/hfvenv/bin/python -c 'import sys; from safetensors import safe_open
for p in sys.argv[1:]:
    try:
        safe_open(p, "pt"); print("accepted", end=" ")
    except Exception: print("refused", end=" ")' "$T/u8/model.safetensors" "$T/control.safetensors" 2>&1)
  lib=${lib% }
fi
if [ "$lib" = "refused accepted" ]; then
  expect_error safetensors_header_utf8 "u8/model\.safetensors: safetensors header is not valid UTF-8 \(byte 19 of the header\)" \
    "${base[@]}" --init-from "$T/u8"
else fail safetensors_header_utf8 "the safetensors library: $lib"; fi

# 4. Sizes from a file are checked against the file before anything is
# allocated for them, naming the file and the key.
cp -r "$T/l1" "$T/big"
sed -i 's/"intermediate_size": 48/"intermediate_size": 1000000000/' "$T/big/config.json"
expect_error config_size_beyond_files "big/config.json: .*\"intermediate_size\" 1000000000, .* describe [0-9]+ parameters, more than the folder's safetensors files \([0-9]+ bytes\) hold" \
  "${base[@]}" --init-from "$T/big"
"$PY" - "$T/lie.eval" <<'PY'
import sys, numpy as np
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240522, 1, 2**31 - 1
ex = np.array([65535, 16, 0, 0, 2, 1, 5, 1, 6, 1, 7], dtype=np.uint16)  # (a small body)
open(sys.argv[1], "wb").write(h.tobytes() + ex.tobytes())
PY
expect_error eval_count_beyond_file "lie\.eval': the header's example count 2147483647 needs at least 12884901882 tokens, but the body holds 11" \
  "${base[@]}" "${tiny[@]}" --layers 1 --eval-data "$T/lie.eval"

# 5. A flag given twice: a warning naming both values, and the last one wins.
"${base[@]}" "${tiny[@]}" --layers 1 --steps 1 --steps 2 >"$T/twice.log" 2>&1
if grep -q "^train_gpt: warning: --steps is given twice ('1', then '2'): the last wins" "$T/twice.log" &&
  [ "$(grep -c '^step ' "$T/twice.log")" = 2 ]; then ok flag_twice_warns_last_wins
else fail flag_twice_warns_last_wins "$(grep -E 'warning|^step' "$T/twice.log" | head -n 3)"; fi
# 6. Host memory before allocating (llm/util/host_mem.c): the model's planned
# state on the CPU backend and an eval file's examples are checked against
# the available memory (TRAIN_GPT_HOST_MEMORY stands for a small machine)
# before they are allocated, in one line naming the flag or the file and key.
# The bytes it needs are the planner's, which a run that fits reports.
"${base[@]}" "${tiny[@]}" --layers 1 >"$T/fits.log" 2>&1
planned=$(sed -nE 's/^memory .*\| planned ([0-9]+) bytes.*/\1/p' "$T/fits.log")
expect_error host_memory_model_bill "^train_gpt: error: the model of --layers 1 --channels 32 --vocab-size 64 at --micro-batch 1 --seq-len 16 needs ${planned:-PLANNED} bytes \(0\.00 GiB\) of host memory, but only 100000 bytes \(0\.00 GiB\) are available \(TRAIN_GPT_HOST_MEMORY\)" \
  env TRAIN_GPT_HOST_MEMORY=100000 "${base[@]}" "${tiny[@]}" --layers 1
# A --vocab-size that would take ~5 GB is refused before it is allocated:
# under a 2 GB address-space limit an allocation would fail first, with the
# allocator's message instead of this one.
(ulimit -v 2000000 && TRAIN_GPT_HOST_MEMORY=1G exec "${base[@]}" --channels 32 --heads 2 --layers 1 --vocab-size 10000000) >"$T/vocab.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qE "^train_gpt: error: the model of --layers 1 --channels 32 --vocab-size 10000000 .* needs [0-9]{10} bytes \([0-9.]+ GiB\) of host memory, but only 1073741824 bytes \(1\.00 GiB\) are available" "$T/vocab.log"; then
  ok host_memory_vocab_size_before_allocating
else fail host_memory_vocab_size_before_allocating "rc $rc: $(grep -E 'error|^step' "$T/vocab.log" | head -n 2)"; fi
expect_error host_memory_bad_override "^train_gpt: error: TRAIN_GPT_HOST_MEMORY='lots' is not a number of bytes" \
  env TRAIN_GPT_HOST_MEMORY=lots "${base[@]}" "${tiny[@]}" --layers 1
# From a config.json: the error names the file and its keys.
expect_error host_memory_hf_config "^train_gpt: error: --init-from .*/l1/config.json's model \(\"hidden_size\" 32, \"intermediate_size\" 48, \"num_hidden_layers\" 1, \"vocab_size\" 64\) at --micro-batch 1 --seq-len 16 needs [0-9]+ bytes .* only 100000 bytes" \
  env TRAIN_GPT_HOST_MEMORY=100000 "${base[@]}" --init-from "$T/l1"
# An eval file's example count: 100000 examples of 6 tokens need 6 MB of
# tables and tokens, more than a 4 MB machine, refused before reading them.
"$PY" - "$T/many.eval" <<'PY'
import sys, numpy as np
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240522, 1, 100000
open(sys.argv[1], "wb").write(h.tobytes() + np.zeros(600000, dtype=np.uint16).tobytes())
PY
expect_error host_memory_eval_count "^train_gpt: error: --eval-data '.*/many\.eval' \(its header's example count 100000, 1200000 bytes of tokens\) needs [0-9]+ bytes .* only 4194304 bytes \(0\.00 GiB\) are available" \
  env TRAIN_GPT_HOST_MEMORY=4M "${base[@]}" "${tiny[@]}" --layers 1 --eval-data "$T/many.eval"

# 7. Under mpirun every rank parses the flags: the flag-twice warning is rank 0's alone.
if command -v mpirun >/dev/null && ldd "$TG" 2>/dev/null | grep -q libmpi; then
  mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none -np 2 \
    "${base[@]}" "${tiny[@]}" --layers 1 --steps 1 --steps 2 >"$T/twice2.log" 2>&1
  n=$(grep -c "warning: --steps is given twice ('1', then '2')" "$T/twice2.log")
  if [ "$n" = 1 ] && grep -qE '^step +2/2' "$T/twice2.log"; then ok flag_twice_warns_on_rank_0_only
  else fail flag_twice_warns_on_rank_0_only "$n warnings: $(grep -E 'warning|error' "$T/twice2.log" | head -n 3)"; fi
fi
exit $((failures > 0))
