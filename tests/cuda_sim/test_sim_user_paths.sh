#!/usr/bin/env bash
# test_sim_user_paths.sh: train_gpt on the simulated GPU as a user runs it
# (build/sim/train_gpt, the fake cuDNN of tests/cuda_sim/cudnn loaded), at a
# tiny shape: make run's command (train_gpt's defaults and the Makefile's
# DEMO_FLAGS: validation, a sample, the multiple-choice eval, checkpoints,
# the final export into --model-dir), then --generate from its checkpoint,
# then a resume from its step-2 checkpoint that continues bit for bit.
#
# Each path runs with --attention auto, cudnn and native, in BF16 and FP8,
# for GPT-2 and Llama. `make test` takes six of the twelve combinations, a
# set that holds every pair of the three choices (each attention with each
# precision, each with each architecture, ...); USER_PATHS=all (make
# test-long) takes all twelve. Then two ranks under mpirun at ZeRO 1 and 3
# against one rank, with a validation set whose last round leaves one rank a
# short batch.
#
# What each run must show: it finishes; the eval scores all its examples
# (rows and lengths vary per batch); the choice of attention is printed
# once; with cuDNN the whole run builds exactly the training step's two
# plans (sampling, eval and generation never build one: the fake counts
# them); greedy generation gives the same tokens as --attention native (it
# runs natively); the resumed run repeats the first one's losses, eval and
# exported weights bit for bit.
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
FAKE=${SIM_CUDNN_LIB:-$PWD/build/sim/libcudnn_sim.so}
T=$TEST_TMP
# 10 examples of 2-4 completions, contexts of 1-60 tokens: every eval batch
# has its own row count and length.
"$PY" tests/eval_ref.py write "$T/eval.bin" 4096 18 10
shape=(--layers 2 --channels 64 --seq-len 32 --micro-batch 4 --lr 3e-3 --warmup 2 --steps 4 --val-every 2
       --val-batches 2 --sample-every 4 --sample-tokens 12 --eval-data "$T/eval.bin" --eval-every 4 --device cuda)
export TRAIN_GPT_CUDNN_LIB=$FAKE CUDA_SIM_CUDNN_STATS=1

arch_flags() {  # ARCH: the flags of the architecture (head size 32: the tensor-core kernels' and cuDNN's)
  case $1 in
    gpt2) echo "--heads 2" ;;
    llama) echo "--arch llama --heads 2 --kv-heads 1" ;;
  esac
}

# plans_built LOG: the plans the fake cuDNN built over the run (0 when it was never loaded).
plans_built() { sed -nE 's/^fake cuDNN stats: .* ([0-9]+) plans built.*/\1/p' "$1" | head -n 1 | grep . || echo 0; }
# eval_of DIR STEP: the eval record of that step.
eval_of() { grep "\"type\":\"eval\",\"step\":$2," "$1/metrics.jsonl"; }

# user_path ARCH PRECISION ATTENTION
user_path() {
  local name="$1-$2-$3" d="$T/$1-$2-$3" why=""
  read -r -a a <<<"$(arch_flags "$1")"
  local run=("${shape[@]}" "${a[@]}" --precision "$2" --attention "$3")
  mkdir -p "$d"
  "$TG" "${run[@]}" --checkpoint-dir "$d/ckpt" --checkpoint-every 2 --model-dir "$d/model" --log-dir "$d/a" >"$d/a.log" 2>&1
  local rc=$? cudnn_lines want_plans=2 want_lines=1
  cudnn_lines=$(grep -c '^attention: cuDNN' "$d/a.log")
  [ "$3" = native ] && want_plans=0 want_lines=0
  [ "$rc" -eq 0 ] || why="$why; exit $rc: $(grep -aE 'error|fake cuDNN:' "$d/a.log" | head -n 2)"
  [ "$(steps_logged "$d/a")" -eq 4 ] && [ "$(val_losses "$d/a" | wc -l)" -eq 2 ] || why="$why; steps or validations missing"
  grep -aq '^---- sample at step 4' "$d/a.log" || why="$why; no sample"
  grep -aEq '^eval +4/4 \| acc [0-9.]+ \| acc_norm [0-9.]+ \| loss [0-9.]+ \| 10 examples$' "$d/a.log" || why="$why; no eval of 10 examples"
  [ -s "$d/model/model.safetensors" ] && [ -s "$d/model/config.json" ] || why="$why; no model folder"
  [ -d "$d/ckpt/step_00000002" ] && [ -d "$d/ckpt/step_00000004" ] || why="$why; checkpoints missing"
  [ "$cudnn_lines" -eq "$want_lines" ] || why="$why; the cuDNN choice printed $cudnn_lines times"
  [ "$(plans_built "$d/a.log")" -eq "$want_plans" ] || why="$why; $(plans_built "$d/a.log") cuDNN plans built (want $want_plans)"
  if [ -z "$why" ]; then ok "sim_user_run_$name"; else fail "sim_user_run_$name" "${why#; }"; fi

  # --generate from the newest checkpoint, greedy: the same tokens as the native kernels give.
  "$TG" "${run[@]}" --checkpoint-dir "$d/ckpt" --generate 1 --temperature 0 --prompt "In the beginning" \
    >"$d/gen.log" 2>&1
  rc=$?
  local text native
  text=$(grep -a -A1 '^generate  |' "$d/gen.log" | tail -n 1)
  native=$text
  if [ "$3" != native ]; then
    "$TG" "${shape[@]}" "${a[@]}" --precision "$2" --attention native --checkpoint-dir "$d/ckpt" --generate 1 \
      --temperature 0 --prompt "In the beginning" >"$d/gen_native.log" 2>&1
    native=$(grep -a -A1 '^generate  |' "$d/gen_native.log" | tail -n 1)
  fi
  if [ "$rc" -eq 0 ] && [ "${#text}" -gt 16 ] && [ "$text" = "$native" ] &&
     [ "$(plans_built "$d/gen.log")" -eq "$want_plans" ]; then
    ok "sim_user_generate_$name"
  else
    fail "sim_user_generate_$name" "exit $rc, '$text' vs native '$native', $(plans_built "$d/gen.log") plans; $(grep -aE 'error' "$d/gen.log" | head -n 1)"
  fi

  # The resume from step 2: steps 3-4, validation, eval and the exported weights, bit for bit.
  "$TG" "${run[@]}" --checkpoint-dir "$d/ckpt2" --resume "$d/ckpt/step_00000002" --model-dir "$d/model2" \
    --log-dir "$d/b" >"$d/b.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && [ "$(resumed_from "$d/b.log")" = 2 ] && [ "$(lines_after "$d/a" 2 | wc -l)" -eq 3 ] &&
     [ "$(lines_after "$d/a" 2)" = "$(lines_after "$d/b" 2)" ] && [ -n "$(eval_of "$d/a" 4)" ] &&
     [ "$(eval_of "$d/a" 4)" = "$(eval_of "$d/b" 4)" ] && cmp -s "$d/model/model.safetensors" "$d/model2/model.safetensors"; then
    ok "sim_user_resume_$name"
  else
    fail "sim_user_resume_$name" "exit $rc; $(diff <(lines_after "$d/a" 2) <(lines_after "$d/b" 2) | head -n 2 | tr '\n' ' ') $(grep -aE 'error' "$d/b.log" | head -n 1)"
  fi
}

if [ "${USER_PATHS:-}" = all ]; then
  for arch in gpt2 llama; do
    for prec in bf16 fp8; do
      for attn in auto cudnn native; do user_path "$arch" "$prec" "$attn"; done
    done
  done
else
  # Every pair of values of (architecture, precision, attention) in six runs.
  user_path gpt2 bf16 auto
  user_path gpt2 fp8 cudnn
  user_path gpt2 bf16 native
  user_path llama bf16 cudnn
  user_path llama fp8 auto
  user_path llama fp8 native
fi

# Two ranks under mpirun (NCCL over MPI) at ZeRO 1 and 3 against one rank
# accumulating the same global batch: BF16 with cuDNN, the user's flags. Three
# validation micro-batches over two ranks: the second round gives rank 1 no
# window, and it runs a one-row forward (a short batch: natively). Losses
# within BF16 rounding of one rank's (a difference of 0 prints as 0), the same eval count, each rank's run
# building only the step's two plans.
MPI=(mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none)
multi=("${shape[@]}" --heads 2 --precision bf16 --attention auto --batch-tokens 256 --val-batches 3
       --checkpoint-dir "" --model-dir "")
"$TG" "${multi[@]}" --log-dir "$T/one" >"$T/one.log" 2>&1
for z in 1 3; do
  "${MPI[@]}" "$TG" "${multi[@]}" --zero "$z" --log-dir "$T/two_$z" >"$T/two_$z.log" 2>&1
  rc=$?
  d=$(paste <(jsonl_lines "$T/one" | sed -E 's/.*(loss|val_loss) ([^ ]+).*/\2/') \
            <(jsonl_lines "$T/two_$z" | sed -E 's/.*(loss|val_loss) ([^ ]+).*/\2/') |
      awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ } END { if (n == 6) print m + 0 }')
  if [ "$rc" -eq 0 ] && within "$d" 0.03 && grep -aEq '^eval +4/4 .*\| 10 examples$' "$T/two_$z.log" &&
     [ "$(grep -c '^fake cuDNN stats: .* 2 plans built' "$T/two_$z.log")" -eq 2 ]; then
    ok "sim_user_2ranks_zero${z}_matches_1rank"
  else
    fail "sim_user_2ranks_zero${z}_matches_1rank" "exit $rc, largest loss difference '$d'; $(grep -aE 'error|fake cuDNN' "$T/two_$z.log" | head -n 3)"
  fi
done
finish
