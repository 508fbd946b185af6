#!/usr/bin/env bash
# test_bad_input.sh: every kind of bad input gets one clear error line that
# names the file or flag, exit status 1, and no crash.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
tok=data/kjv/tokenizer.bin
# A valid run needs only a tiny model; each case breaks one thing.
base=(--device cpu --depth 1 --seq-len 16 --micro-batch 2 --steps 1 --val-every 0 --sample-every 0 --tokenizer "$tok")

# Writes shards with python so that each one is broken in exactly one way.
"$PY" - "$T" <<'EOF'
import struct, sys, numpy as np
d = sys.argv[1]
def shard(path, tokens, magic=20240520, version=1, count=None, dtype=np.uint16, cut=None):
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = magic, version, len(tokens) if count is None else count
    data = h.tobytes() + np.asarray(tokens, dtype=dtype).tobytes()
    open(path, "wb").write(data if cut is None else data[:cut])
rng = np.random.default_rng(1)
good = rng.integers(1, 4000, size=5000)
shard(f"{d}/good.bin", good)
shard(f"{d}/magic.bin", good, magic=12345)
shard(f"{d}/version.bin", good, version=9)
shard(f"{d}/header.bin", good, cut=100)
shard(f"{d}/body.bin", good, cut=1024 + 2 * 4000)
shard(f"{d}/vocab.bin", np.r_[good[:3000], 60000, good[3000:]])
shard(f"{d}/short.bin", good[:10])
open(f"{d}/corrupt.bin.zst", "wb").write(b"\x28\xb5\x2f\xfd" + bytes(range(200)))
open(f"{d}/model_magic.bin", "wb").write(np.zeros(256, dtype=np.int32).tobytes())
h = np.zeros(256, dtype=np.int32); h[:8] = [20240326, 3, 16, 4096, 1, 1, 64, 4096]
open(f"{d}/model_trunc.bin", "wb").write(h.tobytes() + b"\0" * 1000)
# A header whose 3*C and 4*C*C overflow int (C = 2^30).
h = np.zeros(256, dtype=np.int32); h[:8] = [20240326, 3, 16, 4096, 1, 1, 1 << 30, 4096]
open(f"{d}/model_huge.bin", "wb").write(h.tobytes() + b"\0" * 1000)
# A complete, valid model file (L=1, C=64, V=4096, maxT=16) with one NaN in
# layer 0's qkvw and one with +inf in lnfb; tensors in llm.c's order.
L, C, V, T = 1, 64, 4096, 16
sizes = [("wte", V * C), ("wpe", T * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
         ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
         ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
         ("lnfw", C), ("lnfb", C)]
start = {}
n = 0
for name, k in sizes:
    start[name] = n
    n += k
h = np.zeros(256, dtype=np.int32); h[:8] = [20240326, 3, T, V, L, 1, C, V]
for name, at, bad in [("qkvw", 5 * C + 7, np.nan), ("lnfb", 3, np.inf)]:
    w = (rng.standard_normal(n) * 0.02).astype(np.float32)
    w[start[name] + at] = bad
    open(f"{d}/model_{name}_bad.bin", "wb").write(h.tobytes() + w.tobytes())
# Tokenizers (version 2: magic, version, vocab, eot, merges): 2^31 - 1 merges
# (256 + merges overflows int), and a plain 4,096-token one without merges.
def tokenizer(path, vocab, merges):
    t = np.zeros(256, dtype=np.uint32); t[:5] = [20240328, 2, vocab, vocab - 1, merges]
    body = b"".join(bytes([1, i % 256]) for i in range(vocab))
    open(path, "wb").write(t.tobytes() + body)
tokenizer(f"{d}/tok_merges.bin", 4096, 2**31 - 1)
EOF

run=("$TG" "${base[@]}")
expect_error missing_train_file "nothing.*--train-data|--train-data.*nothing|no files match" "${run[@]}" --train-data "$T/nothing_*.bin"
expect_error wrong_magic "magic\.bin.*magic" "${run[@]}" --train-data "$T/magic.bin"
expect_error wrong_version "version\.bin.*version" "${run[@]}" --train-data "$T/version.bin"
expect_error truncated_header "header\.bin.*(truncated|header)" "${run[@]}" --train-data "$T/header.bin"
expect_error truncated_body "body\.bin.*(truncated|size|bytes)" "${run[@]}" --train-data "$T/body.bin"
expect_error token_out_of_vocab "vocab\.bin.*60000" "${run[@]}" --train-data "$T/vocab.bin" --micro-batch 8 --seq-len 256 --batch-tokens 4096 --steps 3
expect_error corrupt_zstd "corrupt\.bin\.zst" "${run[@]}" --train-data "$T/corrupt.bin.zst"
expect_error seq_len_longer_than_data "short\.bin|--train-data" "${run[@]}" --train-data "$T/short.bin"
expect_error batch_not_divisible "--batch-tokens" "${run[@]}" --train-data "$T/good.bin" --batch-tokens 33
expect_error unknown_flag "--bogus" "${run[@]}" --train-data "$T/good.bin" --bogus 1
expect_error bad_number "--lr" "${run[@]}" --train-data "$T/good.bin" --lr abc
expect_error missing_flag_value "--steps" "${run[@]}" --train-data "$T/good.bin" --steps
expect_error bad_device "--device" "${run[@]}" --train-data "$T/good.bin" --device tpu
expect_error heads_do_not_divide "--channels|--heads" "${run[@]}" --train-data "$T/good.bin" --channels 60 --heads 7
expect_error init_from_missing "no_model\.bin" "$TG" --device cpu --init-from "$T/no_model.bin" --train-data "$T/good.bin"
expect_error init_from_bad_magic "model_magic\.bin.*magic" "$TG" --device cpu --init-from "$T/model_magic.bin" --train-data "$T/good.bin"
expect_error init_from_truncated "model_trunc\.bin.*bytes" "$TG" --device cpu --init-from "$T/model_trunc.bin" --train-data "$T/good.bin"
expect_error init_from_with_shape_flag "--layers.*--init-from" "$TG" --device cpu --init-from "$T/model_trunc.bin" --layers 2 --train-data "$T/good.bin"
expect_error missing_tokenizer "no_tok\.bin" "${run[@]}" --train-data "$T/good.bin" --tokenizer "$T/no_tok.bin"
# Sizes from a file or a flag that once overflowed int (issue 19).
expect_error init_from_huge_channels "model_huge\.bin: invalid model shape .*channels 1073741824 is outside 1\.\.65536" \
  "$TG" --device cpu --init-from "$T/model_huge.bin" --train-data "$T/good.bin"
expect_error tokenizer_merges_overflow "tok_merges\.bin.*2147483647 merges do not fit a vocabulary of 4096" \
  "${run[@]}" --train-data "$T/good.bin" --tokenizer "$T/tok_merges.bin"
expect_error vocab_size_not_tokenizers "--vocab-size 5000 does not match the tokenizer's vocabulary \(4096\)" \
  "${run[@]}" --train-data "$T/good.bin" --vocab-size 5000
# Weights with a NaN or an infinity are refused, naming the tensor.
expect_error init_from_nan_weight "model_qkvw_bad\.bin: tensor qkvw of layer 0 holds a non-finite value \(nan\) at element 327 " \
  "$TG" --device cpu --init-from "$T/model_qkvw_bad.bin" --train-data "$T/good.bin" --seq-len 16 --steps 1 --val-every 0 --sample-every 0
expect_error init_from_inf_weight "model_lnfb_bad\.bin: tensor lnfb holds a non-finite value \(inf\) at element 3 " \
  "$TG" --device cpu --init-from "$T/model_lnfb_bad.bin" --train-data "$T/good.bin" --seq-len 16 --steps 1 --val-every 0 --sample-every 0

finish
