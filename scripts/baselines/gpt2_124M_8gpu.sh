#!/usr/bin/env bash
# gpt2_124M_8gpu.sh: GPT-2 124M on FineWeb 10B on one 8-GPU node, llm.c's
# reproduction run (its scripts/run_gpt2_124M.sh) in this program's flags.
#
#   hardware:           one node of 8 GPUs (8 x H100 80GB SXM; 8 x A100 80GB SXM for llm.c's figures),
#                       BF16, ZeRO-1, no recompute; the plan: 28.0 GiB per H100 (--plan below)
#   tokens:             18,865 steps x 524,288 tokens = 9.89B tokens (FineWeb's 10B-token sample,
#                       GPT-2's tokenizer, 50,257 tokens; shards in llm.c's format, e.g. from llm.c's
#                       dev/data/fineweb.py -v 10B)
#   expected val loss:  not yet measured with train_gpt. Reference: llm.c reaches 3.28 on FineWeb's
#                       validation tokens (modded-nanogpt's llm.c baseline); HellaSwag 29.9 (OpenAI's
#                       GPT-2 124M: 29.4)
#   time:               not yet measured with train_gpt (no GPU has run it). Reference: llm.c, about
#                       90 min on 8 x A100 80GB SXM (about 300 ms per step, 1.75M tokens/s), 45 min
#                       on 8 x H100; the planner's estimate at an assumed 40% MFU on 8 x H100 is
#                       0.075 h per 1B tokens, about 45 min
#
#   scripts/baselines/gpt2_124M_8gpu.sh DATA_DIR [more flags]
#
# DATA_DIR holds fineweb_train_*.bin, fineweb_val_*.bin and gpt2_tokenizer.bin. The flags are
# llm.c's (-b 64 -t 1024 -d 524288 -l 0.0006 -q 0.0 -u 700 -c 0.1 -z 1 -v 250 -s 20000 -g 144
# -n 5000 -y 1): the run checkpoints every 5,000 steps into ./checkpoints and resumes from there
# when started again. llm.c's HellaSwag evaluation (-h 1) has no flag here.
# Cite a run by the version on its first summary line (`train_gpt | ... | version ...`).
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:?usage: $0 DATA_DIR [more flags]}
shift
make train_gpt
mpirun -np 8 --bind-to none ./train_gpt --model gpt2-124M \
  --train-data "$data/fineweb_train_*.bin" --val-data "$data/fineweb_val_*.bin" --tokenizer "$data/gpt2_tokenizer.bin" \
  --seq-len 1024 --micro-batch 64 --batch-tokens 524288 --steps 18865 \
  --lr 6e-4 --warmup 700 --lr-final-frac 0 --weight-decay 0.1 --grad-clip 1.0 --seed 1337 \
  --precision bf16 --zero 1 --recompute none \
  --val-every 250 --val-batches 20 --sample-every 20000 --sample-tokens 144 \
  --checkpoint-every 5000 --log-dir logs/gpt2_124M --export gpt2_124M.bin "$@"
