#!/usr/bin/env bash
# test_hf.sh: Hugging Face model folders both ways (llm/hf/), through the
# binary and against transformers (installed once into build/hfvenv, a venv
# over Debian's Python so that its torch 1.13 is reused; transformers 4.40.2
# is the newest line that still runs on torch 1.13).
# 1. Bad folders and flags: one clear error line each (no transformers needed).
# 2. --export-hf: a trained GPT-2 and Llama (3 and 6 heads, GQA, tied and
#    untied) load in GPT2LMHeadModel / LlamaForCausalLM with our logits, in
#    FP32 and BF16; an FP32 folder read back and written again is the same bytes.
# 3. --init-from: folders written by transformers' save_pretrained (one file
#    and sharded) give transformers' logits and first-step loss, and train.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
HFL=build/tests/hf_logits
base=(--device cpu --threads 1 --sample-every 0 --val-every 0 --tokenizer '')

# tokens PATH T SEED: T + 1 random ids below 300 (int32), and PATH.shard: the same as an llm.c
# token shard, the training data of every run here (the models have 300 tokens).
tokens() {
  "$PY" - "$@" <<'PY'
import sys, numpy as np
path, T, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = np.random.default_rng(seed).integers(0, 300, T + 1).astype(np.int32)
x.tofile(path)
h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, len(x)
open(path + ".shard", "wb").write(h.tobytes() + x.astype(np.uint16).tobytes())
PY
}
tokens "$T/tok" 48 1
tokens "$T/data" 1024 2

# ---- 1. bad input -------------------------------------------------------------------------------
# A small Llama folder of our own to break in every way (written by the binary).
"$TG" "${base[@]}" --arch llama --channels 64 --heads 4 --kv-heads 2 --layers 1 --mlp-hidden 96 --vocab-size 300 \
  --seq-len 16 --micro-batch 1 --steps 1 --train-data "$T/data.shard" --export-hf "$T/good" --export-hf-dtype fp32 \
  >"$T/good.log" 2>&1 || true
# edit SRC DST KIND: a copy of folder SRC with one thing wrong (Python's standard library only).
edit() {
  rm -rf "$2" && cp -r "$1" "$2" && "$PY" - "$2" "$3" <<'PY'
import json, os, struct, sys
d, kind = sys.argv[1], sys.argv[2]
cfg_path, st_path = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")
cfg = json.load(open(cfg_path))
raw = open(st_path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def write_st(hdr, data):
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(st_path, "wb").write(struct.pack("<Q", len(h)) + h + data)
emb = "model.embed_tokens.weight"
if kind == "no_config": os.remove(cfg_path)
elif kind == "bad_json": open(cfg_path, "w").write('{"model_type": "llama",')
elif kind == "no_weights": os.remove(st_path)
elif kind.startswith("cfg:"):  # cfg:KEY=JSON
    k, v = kind[4:].split("=", 1)
    cfg[k] = json.loads(v)
    json.dump(cfg, open(cfg_path, "w"))
elif kind == "missing_tensor":  # drop o_proj and its bytes; later offsets move down
    name = "model.layers.0.self_attn.o_proj.weight"
    b, e = hdr.pop(name)["data_offsets"]
    for v in hdr.values():
        if isinstance(v, dict) and "data_offsets" in v and v["data_offsets"][0] >= e:
            v["data_offsets"] = [v["data_offsets"][0] - (e - b), v["data_offsets"][1] - (e - b)]
    write_st(hdr, data[:b] + data[e:])
elif kind == "wrong_shape":
    hdr[emb]["shape"] = hdr[emb]["shape"][::-1]
    write_st(hdr, data)
elif kind == "wrong_dtype":
    hdr[emb]["dtype"] = "I32"
    write_st(hdr, data)
elif kind == "past_end":
    write_st(hdr, data[:-4])
elif kind == "extra_tensor":
    hdr["model.layers.0.self_attn.q_norm.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    write_st(hdr, data + b"\0\0\0\0")
elif kind == "index_missing_file":
    names = [k for k in hdr if k != "__metadata__"]
    json.dump({"metadata": {}, "weight_map": {k: ("model.safetensors" if k != emb else "model-00002-of-00002.safetensors") for k in names}},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
elif kind == "same": pass
else: sys.exit("edit: unknown kind " + kind)
PY
}
if [ -s "$T/good/model.safetensors" ] && [ -s "$T/good/config.json" ]; then ok hf_export_small
else fail hf_export_small "no folder written: $(tail -n 2 "$T/good.log")"; fi
run_from() { "$TG" "${base[@]}" --seq-len 16 --micro-batch 1 --steps 1 --train-data "$T/data.shard" --init-from "$@"; }
bad() {  # bad NAME KIND PATTERN [FLAGS...]
  local name=$1 kind=$2 pattern=$3
  shift 3
  edit "$T/good" "$T/$name" "$kind"
  expect_error "hf_$name" "$pattern" run_from "$T/$name" "$@"
}
bad no_config no_config "no_config/config.json: no such file"
bad bad_json bad_json "bad_json/config.json: not valid JSON"
bad model_type 'cfg:model_type="mistral"' "model_type/config.json: \"model_type\" \"mistral\" is not supported"
bad attention_bias 'cfg:attention_bias=true' "config.json: \"attention_bias\": true is not supported"
bad hidden_act 'cfg:hidden_act="gelu"' "config.json: \"hidden_act\" \"gelu\" is not supported"
bad rms_eps 'cfg:rms_norm_eps=1e-6' "config.json: \"rms_norm_eps\" 1e-06 is not supported"
bad heads_divide 'cfg:num_attention_heads=3' "config.json: \"hidden_size\" 64 is not divisible by \"num_attention_heads\" 3"
bad kv_divide 'cfg:num_key_value_heads=3' "config.json: \"num_attention_heads\" 4 is not divisible by \"num_key_value_heads\" 3"
bad no_layers 'cfg:num_hidden_layers=null' "config.json: missing key \"num_hidden_layers\""
bad rope_type 'cfg:rope_scaling={"rope_type":"yarn","factor":4}' "config.json: \"rope_scaling\" type \"yarn\" is not supported"
bad no_weights no_weights "no model.safetensors or model.safetensors.index.json"
bad missing_tensor missing_tensor "model.safetensors: tensor 'model.layers.0.self_attn.o_proj.weight' is missing"
bad wrong_shape wrong_shape "model.safetensors: tensor 'model.embed_tokens.weight' has shape \[64, 300\] but config.json implies \[300, 64\]"
bad wrong_dtype wrong_dtype "model.safetensors: tensor 'model.embed_tokens.weight' has dtype I32; weights must be F32, F16 or BF16"
bad past_end past_end "model.safetensors: tensor '.*' has data_offsets \[[0-9]+, [0-9]+\] past the end of the data"
bad extra_tensor extra_tensor "model.safetensors: unexpected tensor 'model.layers.0.self_attn.q_norm.weight'"
bad index_missing index_missing_file "model-00002-of-00002.safetensors: no such safetensors file"
bad arch_conflict same "--arch gpt2 conflicts with --init-from .*, a llama model" --arch gpt2
bad layers_conflict same "--layers conflicts with --init-from" --layers 2
bad kv_conflict same "--kv-heads conflicts with --init-from" --kv-heads 1
