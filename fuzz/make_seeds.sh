#!/usr/bin/env bash
# make_seeds.sh: writes the seed corpus fuzz/corpus/<target>/ (committed; run
# again only to change it): small valid inputs of each format and a few
# near-misses, from which libFuzzer mutates. Needs ./train_gpt (for a real
# checkpoint manifest), /usr/bin/python3 with numpy (Debian's), and zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
C=fuzz/corpus
rm -rf "$C"
mkdir -p "$C"/{shard,shard_zst,llmc,tokenizer,manifest,hyperparameters,safetensors,hf_config}

/usr/bin/python3 - "$C" <<'PY'
import json, struct, sys
import numpy as np
c = sys.argv[1]
def write(path, data):
    open(path, "wb").write(data)

# Token shards: 256 int32 header (magic, version, count; version 2 also the
# count as a uint64 in words 3-4), then uint16 (v1) or uint32 (v2) tokens.
def shard(version, tokens):
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = 20240520, version, len(tokens)
    if version == 2:
        h[3], h[4] = len(tokens), 0
    return h.tobytes() + np.asarray(tokens, dtype=np.uint16 if version == 1 else np.uint32).tobytes()
write(f"{c}/shard/v1.bin", shard(1, [50256, 1, 2, 3, 4000, 7, 9]))
write(f"{c}/shard/v2.bin", shard(2, [70000, 5, 6]))
write(f"{c}/shard/empty.bin", shard(1, []))
write(f"{c}/shard/truncated.bin", shard(1, [1, 2, 3])[:-1])

# llm.c model files: header (magic, version 3 fp32 / 5 bf16, maxT, V, L, NH, C, Vp), weights.
def model(version, T, V, L, NH, C, Vp):
    n = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [20240326, version, T, V, L, NH, C, Vp]
    w = (np.arange(n, dtype=np.float32) % 7 - 3) * 0.01
    body = w.tobytes() if version == 3 else (w.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return h.tobytes() + body
write(f"{c}/llmc/fp32.bin", model(3, 4, 5, 1, 2, 4, 8))
write(f"{c}/llmc/bf16.bin", model(5, 3, 3, 2, 1, 2, 3))
write(f"{c}/llmc/header_only.bin", model(3, 4, 5, 1, 2, 4, 8)[:1024])

# Tokenizers: header (magic, version, vocab, eot, merges), then per token a
# length byte and its bytes, then (version 2) the merges as uint32 pairs.
def tokenizer(version, pieces, eot, merges=()):
    h = np.zeros(256, dtype=np.uint32)
    h[:5] = [20240328, version, len(pieces), eot, len(merges)]
    body = b"".join(bytes([len(p)]) + p for p in pieces)
    body += b"".join(struct.pack("<II", a, b) for a, b in merges)
    return h.tobytes() + body
raw = [bytes([i]) for i in range(256)]
write(f"{c}/tokenizer/v1.bin", tokenizer(1, [b"a", b"b", b"ab", b"<|endoftext|>"], 3))
write(f"{c}/tokenizer/v2_merges.bin",
      tokenizer(2, raw + [b"th", b"the", b"<|endoftext|>"], 258, [(116, 104), (256, 101)]))

# hyperparameters.json as SageMaker writes it (every value a string), and the SDK's json.dumps'd form.
hp = [{"steps": "7", "lr": "6e-4", "precision": "fp32", "device": "cpu", "beta1": "0.8"},
      {"model": "\"d6\"", "micro_batch": 3, "shuffle": False, "grad-clip": 0.5, "sagemaker_program": "train.sh"},
      {"recompute": "selective", "on_divergence": "rollback", "checkpoint-every": "5", "zero": "2"},
      {"on_divergence": "rollback", "checkpoint-every": "0"}]  # refused by config_check (a fuzzer's first find)
for i, d in enumerate(hp):
    write(f"{c}/hyperparameters/hp{i}.json", json.dumps(d).encode())

# safetensors: an 8-byte little-endian header length, the JSON header, the data.
def st(header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data
w = np.arange(6, dtype=np.float32) * 0.5
write(f"{c}/safetensors/f32.safetensors", st({"__metadata__": {"format": "pt"},
      "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
      "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
      "c": {"dtype": "F16", "shape": [2], "data_offsets": [28, 32]}},
      w.tobytes() + (w[:2].view(np.uint32) >> 16).astype(np.uint16).tobytes() + w[:2].astype(np.float16).tobytes()))
write(f"{c}/safetensors/overlap.safetensors", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
# config.json of both architectures, one with Llama 3.1's rope_scaling, and near-misses.
gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 96, "n_head": 3, "n_layer": 2,
        "n_positions": 64, "vocab_size": 300, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05}
llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 96, "intermediate_size": 200,
         "num_attention_heads": 6, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 300,
         "max_position_embeddings": 64, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
         "tie_word_embeddings": False}
scaled = dict(llama, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
for name, d in [("gpt2", gpt2), ("llama", llama), ("llama3_scaled", scaled), ("bias", dict(llama, attention_bias=True)),
                ("kv", dict(llama, num_key_value_heads=4))]:
    write(f"{c}/hf_config/{name}.json", json.dumps(d).encode())
write(f"{c}/safetensors/int.safetensors", st({"i": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8)))
PY

for f in "$C"/shard/*.bin; do zstd -q -19 "$f" -o "$C/shard_zst/$(basename "$f").zst"; done

# A real manifest, from two steps of the smallest model.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./train_gpt --device cpu --depth 1 --seq-len 16 --micro-batch 2 --steps 2 --val-every 0 --sample-every 0 \
  --checkpoint-dir "$tmp/ck" --model-dir '' >/dev/null
cp "$tmp"/ck/step_00000002/manifest.json "$C/manifest/manifest.json"
printf '{"a": [1, 2.5e3, -0, true, null, "\\u00e9\\n"], "b": {}}' >"$C/manifest/json.json"
echo "make_seeds: wrote $(find "$C" -type f | wc -l) files, $(du -sk "$C" | cut -f1) KiB, to $C"
