#!/usr/bin/env bash
# test_hf.sh: Hugging Face model folders both ways (llm/hf/), through the
# binary and against transformers (installed once into build/hfvenv, a venv
# over Debian's Python so that its torch 1.13 is reused; transformers 4.40.2
# runs on torch 1.13 (checked here; it needs no torch 2 API), with the
# safetensors, tokenizers and huggingface_hub it was tested with).
# 1. Bad folders and flags: one clear error line each (no transformers needed).
# 2. --export-hf: a trained GPT-2 and Llama (3 and 6 heads, GQA, tied and
#    untied) load in GPT2LMHeadModel / LlamaForCausalLM with our logits, in
#    FP32 and BF16; an FP32 folder read back and written again is the same bytes.
# 3. --init-from: folders written by transformers' save_pretrained (one file
#    and sharded) give transformers' logits and first-step loss, and train.
set -u
cd "$(dirname "$0")/.." || exit 1
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
bad rms_eps 'cfg:rms_norm_eps=0.5' "config.json: \"rms_norm_eps\" 0.5 is not in \(0, 0.01\]"
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
# GPT-2's config.json, from a GPT-2 folder of our own.
"$TG" "${base[@]}" --channels 64 --heads 2 --layers 1 --vocab-size 300 --seq-len 16 --micro-batch 1 --steps 1 \
  --train-data "$T/data.shard" --export-hf "$T/good2" >"$T/good2.log" 2>&1 || true
bad2() {
  local name=$1 kind=$2 pattern=$3
  shift 3
  edit "$T/good2" "$T/$name" "$kind"
  expect_error "hf_$name" "$pattern" run_from "$T/$name" "$@"
}
bad2 gpt2_act 'cfg:activation_function="relu"' "config.json: \"activation_function\" \"relu\" is not supported"
# A value with a newline in it still gives one error line (the fuzzer's find): the newline is escaped.
bad2 gpt2_act_newline 'cfg:activation_function="gelu\nx"' "config.json: \"activation_function\" \"gelu\\\\nx\" is not supported"
bad2 gpt2_heads 'cfg:n_head=3' "config.json: \"n_embd\" 64 is not divisible by \"n_head\" 3"
bad2 gpt2_inner 'cfg:n_inner=100' "config.json: \"n_inner\" 100 is not supported"
bad2 gpt2_untied 'cfg:tie_word_embeddings=false' "config.json: \"tie_word_embeddings\": false is not supported for GPT-2"
bad2 gpt2_arch 'cfg:architectures=["GPT2ForSequenceClassification"]' "config.json: \"architectures\" \[\"GPT2ForSequenceClassification\"\] is not supported"
bad2 gpt2_eps 'cfg:layer_norm_epsilon=1e-6' "config.json: \"layer_norm_epsilon\" 1e-06 is not supported"
bad2 gpt2_layers_type 'cfg:n_layer="two"' "config.json: \"n_layer\" is not an integer"
# A config's own Llama 3.1-style scaling (Llama 3.2's factor 32, not --rope-scaling's 8) and
# RMSNorm epsilon (1e-6) train, checkpoint and resume bit for bit (the manifest records them).
edit "$T/good" "$T/scaled0" 'cfg:rope_scaling={"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}'
edit "$T/scaled0" "$T/scaled" 'cfg:rms_norm_eps=1e-6'
srun=("${base[@]}" --init-from "$T/scaled" --train-data "$T/data.shard" --seq-len 16 --micro-batch 1 --steps 4)
"$TG" "${srun[@]}" --checkpoint-dir "$T/sck" --checkpoint-every 2 --keep-last 0 --log-dir "$T/s1" >"$T/s1.log" 2>&1
"$TG" "${srun[@]}" --checkpoint-dir "$T/sck2" --resume "$T/sck/step_00000002" --log-dir "$T/s2" >"$T/s2.log" 2>&1
if grep -q '"rope_scaling": 32, "rope_scaling_bands": \[1, 4, 8192\], "norm_eps": 9.99' "$T/sck/step_00000002/manifest.json" &&
   [ "$(lines_after "$T/s1" 2 | wc -l)" -eq 2 ] && [ "$(lines_after "$T/s1" 2)" = "$(lines_after "$T/s2" 2)" ]; then
  ok hf_rope_scaling_resume
else fail hf_rope_scaling_resume "$(grep -o '"rope_scaling[^]]*' "$T/sck/step_00000002/manifest.json" 2>&1 | head -n 1; tail -n 1 "$T/s2.log")"; fi
expect_error hf_file_not_folder "--init-from .*/model.safetensors: give the Hugging Face folder" run_from "$T/good/model.safetensors"
bad arch_conflict same "--arch gpt2 conflicts with --init-from .*, a llama model" --arch gpt2
bad layers_conflict same "--layers conflicts with --init-from" --layers 2
bad kv_conflict same "--kv-heads conflicts with --init-from" --kv-heads 1

# ---- transformers ----------------------------------------------------------------------------------
HFV=build/hfvenv
HFPY=$HFV/bin/python
if ! "$HFPY" -c 'import transformers, safetensors' 2>/dev/null; then
  echo "# installing transformers 4.40.2 into $HFV (once)"
  rm -rf "$HFV"
  if ! { /usr/bin/python3 -m venv --system-site-packages "$HFV" &&
         "$HFV/bin/pip" install -q 'transformers==4.40.2' 'safetensors==0.4.3' 'tokenizers==0.19.1' 'huggingface_hub==0.36.2'; } >"$T/venv.log" 2>&1; then
    fail hf_transformers_setup "cannot install transformers 4.40.2 into $HFV: $(tail -n 2 "$T/venv.log")"
    exit 1
  fi
fi
if [ ! -x "$HFL" ]; then fail hf_logits_helper "$HFL is not built (make tests)"; exit 1; fi

# compare NAME DIR TOL: our logits (hf_logits) against transformers' on $T/tok; prints the numbers.
compare() {
  local name=$1 dir=$2 tol=$3 line
  if ! "$HFL" "$dir" "$T/tok" "$T/$name.ours" >"$T/$name.hfl" 2>&1; then
    fail "$name" "hf_logits: $(tail -n 1 "$T/$name.hfl")"; return
  fi
  line=$("$HFPY" tests/hf_ref.py logits "$dir" "$T/tok" "$T/$name.ours" 2>&1 | tail -n 1)
  echo "$line" >"$T/$name.cmp"
  echo "# $name: $line"
  if awk -v t="$tol" '$1 == "maxdiff" && $2 <= t && $4 > 1.0 { found = 1 } END { exit !found }' <<<"$line"; then ok "$name"
  else fail "$name" "max logit difference above $tol (or logits too small to tell): $line"; fi
}

# ---- 2. --export-hf -----------------------------------------------------------------------------
# Trained long enough at a high learning rate that the logits are large (a
# wrong transpose, head order or RoPE pairing changes them by far more than
# the tolerance); max-seq-len above seq-len, so wpe has rows never trained.
train=("${base[@]}" --train-data "$T/data.shard" --vocab-size 300 --seq-len 48 --micro-batch 2 --steps 40 --lr 1e-2 --warmup 2)
gpt2=(--channels 96 --heads 3 --layers 2 --max-seq-len 64)
llama=(--arch llama --channels 96 --heads 6 --kv-heads 2 --layers 2 --mlp-hidden 200 --rope-theta 10000)
"$TG" "${train[@]}" "${gpt2[@]}" --export-hf "$T/g_fp32" --export-hf-dtype fp32 --model-dir "$T/g_model" >"$T/g_fp32.log" 2>&1
"$TG" "${train[@]}" "${gpt2[@]}" --export-hf "$T/g_bf16" >"$T/g_bf16.log" 2>&1
"$TG" "${train[@]}" "${llama[@]}" --export-hf "$T/l_fp32" --export-hf-dtype fp32 --model-dir "$T/l_model" >"$T/l_fp32.log" 2>&1
"$TG" "${train[@]}" "${llama[@]}" --export-hf "$T/l_bf16" >"$T/l_bf16.log" 2>&1
"$TG" "${train[@]}" "${llama[@]}" --tie-embeddings 1 --export-hf "$T/lt_fp32" --export-hf-dtype fp32 >"$T/lt_fp32.log" 2>&1
"$TG" "${train[@]}" "${llama[@]}" --steps 2 --rope-scaling 1 --export-hf "$T/ls_fp32" --export-hf-dtype fp32 >"$T/ls_fp32.log" 2>&1
# --model-dir (SageMaker's final weights, --export-dtype fp32 by default) holds
# the same folder as --export-hf, from the checkpointer's gathered weights, and
# llm.c's model.bin for GPT-2 only (that format describes no Llama).
for a in g l; do
  if [ -s "$T/${a}_model/model.safetensors" ] && cmp -s "$T/${a}_model/model.safetensors" "$T/${a}_fp32/model.safetensors" &&
     cmp -s "$T/${a}_model/config.json" "$T/${a}_fp32/config.json"; then ok "hf_model_dir_$a"
  else fail "hf_model_dir_$a" "$(ls "$T/${a}_model" 2>&1 | tr '\n' ' '); $(grep -i 'error\|model ' "$T/${a}_fp32.log" | head -n 3)"; fi
done
if [ -s "$T/g_model/model.bin" ] && [ ! -e "$T/l_model/model.bin" ]; then ok hf_model_dir_llmc_for_gpt2_only
else fail hf_model_dir_llmc_for_gpt2_only "$(ls "$T/g_model" "$T/l_model" 2>&1 | tr '\n' ' ')"; fi
# --model-format: one of the two (half of SageMaker's model.tar.gz); llmc refused for a Llama.
"$TG" "${base[@]}" --train-data "$T/data.shard" --vocab-size 300 --seq-len 16 --micro-batch 1 --steps 1 "${gpt2[@]}" \
  --model-dir "$T/g_hf_only" --model-format hf >"$T/g_hf_only.log" 2>&1
"$TG" "${base[@]}" --train-data "$T/data.shard" --vocab-size 300 --seq-len 16 --micro-batch 1 --steps 1 "${gpt2[@]}" \
  --model-dir "$T/g_llmc_only" --model-format llmc >"$T/g_llmc_only.log" 2>&1
if [ -s "$T/g_hf_only/model.safetensors" ] && [ -s "$T/g_hf_only/config.json" ] && [ ! -e "$T/g_hf_only/model.bin" ] &&
   [ -s "$T/g_llmc_only/model.bin" ] && [ ! -e "$T/g_llmc_only/model.safetensors" ] && [ ! -e "$T/g_llmc_only/config.json" ]; then
  ok hf_model_format_one_of_two
else fail hf_model_format_one_of_two "$(ls "$T/g_hf_only" "$T/g_llmc_only" 2>&1 | tr '\n' ' ')"; fi
expect_error hf_model_format_llmc_llama "--model-format llmc: llm.c's model format holds GPT-2 models only" \
  "$TG" "${base[@]}" --train-data "$T/data.shard" --vocab-size 300 --seq-len 16 --steps 1 "${llama[@]}" --model-format llmc
compare hf_export_gpt2_fp32 "$T/g_fp32" 1e-4
compare hf_export_gpt2_bf16 "$T/g_bf16" 1e-4
compare hf_export_llama_fp32 "$T/l_fp32" 1e-4
compare hf_export_llama_bf16 "$T/l_bf16" 1e-4
compare hf_export_llama_tied_fp32 "$T/lt_fp32" 1e-4
# The comparison can fail: with q and k rows permuted into the other RoPE
# pairing (i with i+1, Meta's original layout) the logits move far from ours.
rm -rf "$T/l_perm" && cp -r "$T/l_fp32" "$T/l_perm"
"$HFPY" - "$T/l_perm/model.safetensors" <<'PY'
import sys, torch
from safetensors.torch import load_file, save_file
p = sys.argv[1]
w = load_file(p)
for k in list(w):
    if k.endswith(("q_proj.weight", "k_proj.weight")):
        r = w[k].view(-1, 16, 96)  # heads of 16 rows: rows i and i + 8 become 2i and 2i + 1
        w[k] = torch.stack([r[:, :8], r[:, 8:]], dim=2).reshape(-1, 96).contiguous()
save_file(w, p, metadata={"format": "pt"})
PY
"$HFPY" tests/hf_ref.py logits "$T/l_perm" "$T/tok" "$T/hf_export_llama_fp32.ours" >"$T/perm.txt" 2>&1
echo "# llama with the other RoPE pairing: $(cat "$T/perm.txt")"
if awk '$1 == "maxdiff" && $2 > 0.01 { f = 1 } END { exit !f }' "$T/perm.txt"; then ok hf_rope_pairing_checked
else fail hf_rope_pairing_checked "permuted q/k rows give the same logits: $(cat "$T/perm.txt")"; fi

# The BF16 folder holds BF16 values (half the bytes) close to the FP32 ones.
for a in gpt2 llama; do
  d=$("$HFPY" tests/hf_ref.py diff "$T/hf_export_${a}_bf16.ours" "$T/hf_export_${a}_fp32.ours" 300 2>&1)
  echo "# $a, bf16 against fp32: $d"
  sf=$(stat -c %s "$T/${a:0:1}_fp32/model.safetensors" 2>/dev/null || echo 0)
  sb=$(stat -c %s "$T/${a:0:1}_bf16/model.safetensors" 2>/dev/null || echo 0)
  if grep -q '"torch_dtype": "bfloat16"' "$T/${a:0:1}_bf16/config.json" && [ $((sb * 2)) -lt $((sf + 4096)) ] &&
     [ $((sb * 2)) -gt $((sf - 4096)) ] && awk '$1 == "maxdiff" && $2 > 0 && $2 < 0.05 * $4 { f = 1 } END { exit !f }' <<<"$d"; then
    ok "hf_export_bf16_values_$a"
  else fail "hf_export_bf16_values_$a" "sizes $sb (bf16) and $sf (fp32), logits $d"; fi
done
# An FP32 folder read back (--init-from) and written again is the same bytes.
for a in g l lt ls; do
  "$TG" "${base[@]}" --train-data "$T/data.shard" --seq-len 48 --micro-batch 2 --steps 0 --init-from "$T/${a}_fp32" \
    --export-hf "$T/${a}_again" --export-hf-dtype fp32 >"$T/${a}_again.log" 2>&1
  if cmp -s "$T/${a}_fp32/model.safetensors" "$T/${a}_again/model.safetensors" && cmp -s "$T/${a}_fp32/config.json" "$T/${a}_again/config.json"; then
    ok "hf_round_trip_$a"
  else fail "hf_round_trip_$a" "$(grep rope_scaling "$T/${a}_fp32/config.json"; cmp "$T/${a}_fp32/model.safetensors" "$T/${a}_again/model.safetensors" 2>&1; tail -n 1 "$T/${a}_again.log")"; fi
done

# ---- 3. --init-from a folder that transformers wrote ------------------------------------------
# Random tiny models (initializer range 0.2, so that the logits are large):
# GPT-2 with 3 heads in F16, Llama with 6 heads over 2 kv heads untied in
# F32 (with LlamaConfig's default RMSNorm epsilon 1e-6), and tied in BF16
# shards with an index (epsilon 1e-5). Their logits, then their first step's loss on one
# 48-token batch (the whole training shard; micro-batch 1, no shuffling) is
# transformers' loss on it, and training on it brings the loss down.
for a in gpt2 llama llama_tied; do
  shard=none
  [ "$a" = llama_tied ] && shard=100KB
  "$HFPY" tests/hf_ref.py save "$T/hf_$a" "$a" "$shard" >"$T/save_$a.log" 2>&1 || { fail "hf_save_$a" "$(tail -n 2 "$T/save_$a.log")"; continue; }
  [ "$shard" = none ] || ls "$T/hf_$a"/model.safetensors.index.json >/dev/null || fail hf_sharded_save "save_pretrained wrote no index"
  compare "hf_import_$a" "$T/hf_$a" 1e-4
  ref=$(sed -nE 's/.*maxdiff .* loss ([^ ]+) .*/\1/p' "$T/hf_import_$a.cmp" 2>/dev/null)
  "$TG" "${base[@]}" --init-from "$T/hf_$a" --train-data "$T/tok.shard" --shuffle 0 --seq-len 48 --micro-batch 1 \
    --steps 30 --lr 3e-3 --warmup 0 --log-dir "$T/tr_$a" >"$T/tr_$a.log" 2>&1
  first=$(step_losses "$T/tr_$a" | head -n 1 | cut -d' ' -f1)
  last=$(step_losses "$T/tr_$a" | tail -n 1 | cut -d' ' -f1)
  echo "# $a: transformers' loss $ref, our first step $first, step 30 $last"
  if [ "$(step_losses "$T/tr_$a" | wc -l)" -eq 30 ] &&
     awk -v r="$ref" -v f="$first" -v l="$last" 'BEGIN { d = r - f; if (d < 0) d = -d; exit !(r > 0 && d < 1e-4 && l < f - 1.0) }'; then
    ok "hf_import_trains_$a"
  else fail "hf_import_trains_$a" "transformers' loss '$ref', ours '$first', last '$last': $(tail -n 1 "$T/tr_$a.log")"; fi
done

# Greedy generation from an imported folder continues as transformers' generate() does.
ours=$("$TG" "${base[@]}" --generate 1 --init-from "$T/hf_llama" --seq-len 48 --prompt "1 2 3" --sample-tokens 12 --temperature 0 2>/dev/null | tail -n 1)
theirs=$("$HFPY" tests/hf_ref.py greedy "$T/hf_llama" "1 2 3" 12 2>&1 | tail -n 1)
if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then ok hf_generate_greedy
else fail hf_generate_greedy "ours '$ours', transformers' '$theirs'"; fi
# GPT-2 as the Hub's own gpt2 stores it (names without "transformer.", attn.bias
# mask buffers) loads too, with the same values.
"$HFPY" tests/hf_ref.py hub "$T/g_fp32" "$T/hub" >"$T/hub.log" 2>&1
if "$HFL" "$T/hub" "$T/tok" "$T/hub.ours" >>"$T/hub.log" 2>&1 && cmp -s "$T/hub.ours" "$T/hf_export_gpt2_fp32.ours"; then ok hf_gpt2_hub_names
else fail hf_gpt2_hub_names "$(tail -n 1 "$T/hub.log")"; fi

# Every rank reads the folder and keeps its own pieces: 2 ranks at ZeRO-3
# import the sharded folder and export it gathered, byte for byte as 1 rank does.
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
zrun=("${base[@]}" --init-from "$T/hf_llama_tied" --train-data "$T/data.shard" --seq-len 48 --micro-batch 1 --batch-tokens 96 --steps 0 --export-hf-dtype fp32)
"$TG" "${zrun[@]}" --export-hf "$T/z1" >"$T/z1.log" 2>&1
"${MPI[@]}" -np 2 "$TG" "${zrun[@]}" --zero 3 --export-hf "$T/z3" >"$T/z3.log" 2>&1
if [ -s "$T/z1/model.safetensors" ] && cmp -s "$T/z1/model.safetensors" "$T/z3/model.safetensors"; then ok hf_zero3_two_ranks
else fail hf_zero3_two_ranks "$(cmp "$T/z1/model.safetensors" "$T/z3/model.safetensors" 2>&1; tail -n 1 "$T/z3.log")"; fi
# Exported over a sharded folder, the old index goes (it would win over the
# new model.safetensors) and the folder loads as the new one.
rm -rf "$T/over" && cp -r "$T/hf_llama_tied" "$T/over"
"$TG" "${zrun[@]}" --export-hf "$T/over" >"$T/over.log" 2>&1
if [ ! -e "$T/over/model.safetensors.index.json" ] && cmp -s "$T/z1/model.safetensors" "$T/over/model.safetensors" &&
   cmp -s "$T/z1/config.json" "$T/over/config.json"; then ok hf_export_over_sharded
else fail hf_export_over_sharded "$(ls "$T/over" | tr '\n' ' '; tail -n 1 "$T/over.log")"; fi

exit $((failures > 0))
