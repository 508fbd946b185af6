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

finish
