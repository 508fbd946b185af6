#!/usr/bin/env bash
# test_sim_cudnn_train.sh: --attention on train_gpt itself on the simulated
# GPU, with the fake cuDNN of tests/cuda_sim/cudnn (TRAIN_GPT_CUDNN_LIB):
# BF16 training with --attention cudnn follows --attention native within
# BF16 tolerance and is bit-for-bit repeatable; auto prints its choice (cuDNN
# when it loads, the native kernels when not); cudnn fails with one clear
# line when cuDNN cannot run (no library, wrong version, fp32, the CPU); the
# workspace is reserved at start-up (no scratch growth inside a step); on
# Blackwell the backward takes cuDNN's pinned deterministic engine; a
# sample (40 new shapes) builds no plan; TRAIN_GPT_CUDNN_WORKSPACE skips an
# engine that asks for more, naming the size.
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
. tests/lib.sh
TG=${SIM_TG:-build/sim/train_gpt}
FAKE=${SIM_CUDNN_LIB:-$PWD/build/sim/libcudnn_sim.so}
T=$TEST_TMP
unset TRAIN_GPT_CUDNN_LIB
# Head size 64, T = 40 (not a multiple of 64).
tiny=(--layers 2 --channels 128 --heads 2 --seq-len 40 --micro-batch 2 --steps 8 --warmup 2 --lr 3e-3
      --val-every 0 --sample-every 0 --device cuda --precision bf16)

run() {  # run NAME ARGS...: train_gpt into $T/NAME.log with the fake cuDNN
  local name=$1
  shift
  TRAIN_GPT_CUDNN_LIB=$FAKE "$TG" "${tiny[@]}" "$@" --log-dir "$T/$name.metrics" >"$T/$name.log" 2>&1
}

# 1. cudnn follows native: per-step losses within 0.02 (BF16 rounding differs:
#    cuDNN's P is rounded to BF16 before P V), and both learn.
run native --attention native
run cudnn --attention cudnn
run cudnn2 --attention cudnn
d=$(paste <(step_losses "$T/native.metrics" | cut -d' ' -f1) <(step_losses "$T/cudnn.metrics" | cut -d' ' -f1) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ } END { if (n == 8) print m + 0 }')
if within "$d" 0.02 && grep -q '^attention: cuDNN' "$T/cudnn.log" && ! grep -q '^attention: cuDNN' "$T/native.log"; then
  ok sim_cudnn_follows_native
else
  fail sim_cudnn_follows_native "max loss difference '${d}'; $(grep -E '^attention|error' "$T/cudnn.log" | head -n 3)"
fi
if [ -n "$(step_losses "$T/cudnn.metrics")" ] && [ "$(step_losses "$T/cudnn.metrics")" = "$(step_losses "$T/cudnn2.metrics")" ]; then
  ok sim_cudnn_deterministic
else
  fail sim_cudnn_deterministic "two --attention cudnn runs differ"
fi

# 2. auto: cuDNN where it loads (printed once), the native kernels where not.
run auto --attention auto --steps 2
if [ "$(grep -c '^attention: cuDNN' "$T/auto.log")" -eq 1 ] && [ "$(step_losses "$T/auto.metrics" | wc -l)" -eq 2 ]; then
  ok sim_cudnn_auto_takes_cudnn
else
  fail sim_cudnn_auto_takes_cudnn "$(grep -E '^attention|error' "$T/auto.log" | head -n 3)"
fi
"$TG" "${tiny[@]}" --steps 2 --log-dir "$T/auto_none.metrics" >"$T/auto_none.log" 2>&1
if grep -q '^attention: native kernels (cuDNN not used.*library not found' "$T/auto_none.log" &&
   [ "$(step_losses "$T/auto_none.metrics" | wc -l)" -eq 2 ]; then
  ok sim_cudnn_auto_without_library
else
  fail sim_cudnn_auto_without_library "$(grep -E '^attention|error' "$T/auto_none.log" | head -n 3)"
fi

# 2a. The default attention survives sampling (issue 23): a sample of 40
#     tokens is 40 forwards of new shapes (B=1, T=1..40), which on main built
#     a plan each and stopped the run at the 33rd ("more than 32 attention
#     shapes"), printing the choice a dozen times. Now the run finishes, the
#     choice is printed once, saying that the other shapes run natively, and
#     the whole run builds exactly the step's two plans.
for mode in auto cudnn; do
  CUDA_SIM_CUDNN_STATS=1 run "sample_$mode" --attention "$mode" --steps 4 --sample-every 4 --sample-tokens 40 \
    --checkpoint-dir '' --model-dir ''
  rc=$?
  if [ "$rc" -eq 0 ] && [ "$(grep -c '^attention: cuDNN' "$T/sample_$mode.log")" -eq 1 ] &&
     grep -q '^attention: cuDNN .* for the training step (B=2 T=40); other shapes (sampling, generation' "$T/sample_$mode.log" &&
     grep -q '^---- sample at step 4' "$T/sample_$mode.log" && grep -q 'fake cuDNN stats: .* 2 plans built' "$T/sample_$mode.log"; then
    ok "sim_cudnn_sampling_builds_no_plan_$mode"
  else
    fail "sim_cudnn_sampling_builds_no_plan_$mode" "exit $rc: $(grep -aE '^attention|error|fake cuDNN' "$T/sample_$mode.log" | head -n 4)"
  fi
done

# 2b. cuDNN's workspace is reserved at start-up with the other ops' scratch:
#     at B*T = 640 rows the backward's (dP, B*NH*T*T*2 bytes in the fake's
#     deterministic engine) is the largest, and no step grows the scratch
#     (the warning names the miss).
run long --attention cudnn --channels 64 --heads 1 --seq-len 320 --micro-batch 2 --steps 2
if grep -q '^attention: cuDNN' "$T/long.log" && ! grep -q 'op scratch grows' "$T/long.log" &&
   [ "$(step_losses "$T/long.metrics" | wc -l)" -eq 2 ]; then
  ok sim_cudnn_workspace_reserved
else
  fail sim_cudnn_workspace_reserved "$(grep -E '^attention|scratch|error' "$T/long.log" | head -n 3)"
fi

# 2b'. TRAIN_GPT_CUDNN_WORKSPACE below what the backward's engine asks (dP:
#     2 * 2 * 40 * 40 * 2 = 12800 bytes; the forward asks 4736): auto runs the
#     forward on cuDNN and the backward natively, says so once naming the
#     size, and learns as native does; cudnn stops at start-up naming it.
TRAIN_GPT_CUDNN_WORKSPACE=8K run wslimit --attention auto --steps 8
d=$(paste <(step_losses "$T/native.metrics" | cut -d' ' -f1) <(step_losses "$T/wslimit.metrics" | cut -d' ' -f1) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ } END { if (n == 8) print m + 0 }')
if within "$d" 0.02 && [ "$(grep -c '^attention: ' "$T/wslimit.log")" -eq 2 ] && grep -q '^attention: cuDNN' "$T/wslimit.log" &&
   grep -q "^attention: native kernels (cuDNN not used for the backward: cuDNN's engines need 12.5 KiB of workspace, over the limit of 8 KiB (TRAIN_GPT_CUDNN_WORKSPACE raises it))" "$T/wslimit.log"; then
  ok sim_cudnn_workspace_limit_auto
else
  fail sim_cudnn_workspace_limit_auto "max loss difference '${d}'; $(grep -E '^attention|error' "$T/wslimit.log" | head -n 3)"
fi
expect_error sim_cudnn_workspace_limit_cudnn "cannot run the backward of B=2 T=40 NH=2 NKV=2 HS=64: cuDNN's engines need 12.5 KiB" \
  env TRAIN_GPT_CUDNN_WORKSPACE=8K TRAIN_GPT_CUDNN_LIB="$FAKE" "$TG" "${tiny[@]}" --attention cudnn

# 2c. Blackwell (CUDA_SIM_CC=100): the backward runs on cuDNN's one
#     deterministic engine, pinned with its knobs (the fake refuses any other
#     engine config there), and repeats bit for bit; cuDNN 9.23's knob set
#     too; before 9.18 there is none: cudnn fails naming why, auto runs the
#     backward natively.
CUDA_SIM_CC=100 run bw1 --attention cudnn --steps 3
CUDA_SIM_CC=100 run bw2 --attention cudnn --steps 3
if [ "$(step_losses "$T/bw1.metrics" | wc -l)" -eq 3 ] && [ "$(step_losses "$T/bw1.metrics")" = "$(step_losses "$T/bw2.metrics")" ] &&
   grep -q '^attention: cuDNN' "$T/bw1.log" && ! grep -q 'native kernels' "$T/bw1.log"; then
  ok sim_cudnn_blackwell_deterministic
else
  fail sim_cudnn_blackwell_deterministic "$(grep -E '^attention|error|fake' "$T/bw1.log" | head -n 3)"
fi
CUDA_SIM_CC=100 CUDA_SIM_CUDNN_VERSION=92300 run bw923 --attention cudnn --steps 2
if [ "$(step_losses "$T/bw923.metrics" | wc -l)" -eq 2 ]; then
  ok sim_cudnn_blackwell_knobs_9_23
else
  fail sim_cudnn_blackwell_knobs_9_23 "$(grep -E '^attention|error|fake' "$T/bw923.log" | head -n 3)"
fi
CUDA_SIM_CC=100 CUDA_SIM_CUDNN_VERSION=91700 run bwauto --attention auto --steps 2
if grep -q '^attention: native kernels (cuDNN not used for the backward: cuDNN 91700 has no deterministic attention backward on Blackwell' "$T/bwauto.log" &&
   [ "$(step_losses "$T/bwauto.metrics" | wc -l)" -eq 2 ]; then
  ok sim_cudnn_blackwell_old_auto_native
else
  fail sim_cudnn_blackwell_old_auto_native "$(grep -E '^attention|error' "$T/bwauto.log" | head -n 3)"
fi
expect_error sim_cudnn_blackwell_old 'cannot run the backward .*no deterministic attention backward on Blackwell \(9.18.0' \
  env TRAIN_GPT_CUDNN_LIB="$FAKE" CUDA_SIM_CC=100 CUDA_SIM_CUDNN_VERSION=91700 "$TG" "${tiny[@]}" --attention cudnn

# 3. --attention cudnn where it cannot run: one error line naming why, exit 1.
expect_error sim_cudnn_no_library '--attention cudnn: library not found' "$TG" "${tiny[@]}" --attention cudnn
expect_error sim_cudnn_bad_path '--attention cudnn: cannot load /nonexistent/libcudnn_graph.so.9' \
  env TRAIN_GPT_CUDNN_LIB=/nonexistent/libcudnn_graph.so.9 "$TG" "${tiny[@]}" --attention cudnn
expect_error sim_cudnn_old_version 'cuDNN version 8907; the fused attention graphs need 9.x' \
  env TRAIN_GPT_CUDNN_LIB="$FAKE" CUDA_SIM_CUDNN_VERSION=8907 "$TG" "${tiny[@]}" --attention cudnn
expect_error sim_cudnn_fp32 '--attention cudnn: cannot run the forward .*runs in bf16' \
  env TRAIN_GPT_CUDNN_LIB="$FAKE" "$TG" "${tiny[@]}" --precision fp32 --attention cudnn
expect_error sim_cudnn_head_size '--attention cudnn: cannot run the forward .*HS=20: head size 20' \
  env TRAIN_GPT_CUDNN_LIB="$FAKE" "$TG" "${tiny[@]}" --channels 40 --attention cudnn
expect_error sim_cudnn_on_cpu '--attention cudnn: cuDNN runs on the CUDA backend; this run uses the cpu backend' \
  "$TG" "${tiny[@]}" --device cpu --precision fp32 --attention cudnn
expect_error sim_attention_bad_word "--attention 'fast' is not one of auto, cudnn, native" \
  "$TG" "${tiny[@]}" --attention fast

# 4. Programs without --attention (the GPU tests, bench_gpu) take
#    TRAIN_GPT_ATTENTION: native keeps cuDNN out where it loads (the GPU
#    check's native variant of test_gpu_grid), auto takes it; a bad word is
#    one error line.
GRID=${SIM_GRID:-build/sim/bin/gpu_test_gpu_grid}
TRAIN_GPT_CUDNN_LIB=$FAKE TRAIN_GPT_ATTENTION=native "$GRID" >"$T/grid_native.log" 2>&1
rc_native=$?
TRAIN_GPT_CUDNN_LIB=$FAKE "$GRID" >"$T/grid_auto.log" 2>&1
if [ "$rc_native" -eq 0 ] && grep -q '^ok test_attention_backward_rows_bf16' "$T/grid_native.log" &&
   ! grep -q '^attention: cuDNN' "$T/grid_native.log" && grep -q '^attention: cuDNN' "$T/grid_auto.log"; then
  ok sim_attention_env_forces_native
else
  fail sim_attention_env_forces_native "exit $rc_native; $(grep -E '^attention|FAIL|error' "$T/grid_native.log" "$T/grid_auto.log" | head -n 3)"
fi
expect_error sim_attention_env_bad_word "TRAIN_GPT_ATTENTION='fast' is not one of auto, cudnn, native" \
  env TRAIN_GPT_ATTENTION=fast "$GRID"

finish
