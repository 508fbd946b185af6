#!/usr/bin/env bash
# test_sagemaker.sh: train_gpt inside a fake SageMaker training container: a
# temporary /opt/ml tree (TRAIN_GPT_SM_ROOT) holding what a real job's
# container holds: hyperparameters.json with string values, resourceconfig.json,
# inputdataconfig.json and the train/val/tokenizer channels with shards of the
# bundled corpus. It trains from the channels, writes checkpoints, the final
# weights and the metrics log into the SageMaker folders, resumes after a spot
# interruption, honours the command line over the file, and reports every
# fatal error, from bad input or forced in the middle of training, in
# output/failure with exit status 1.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
R=$T/opt_ml

# make_tree: a fresh container tree with the bundled corpus in its channels.
make_tree() {
  rm -rf "$R"
  mkdir -p "$R/input/config" "$R/input/data/train" "$R/input/data/val" "$R/input/data/tokenizer" "$R/model" "$R/output"
  cp data/kjv/kjv_train_000.bin "$R/input/data/train/"
  cp data/kjv/kjv_val_000.bin "$R/input/data/val/"
  cp data/kjv/tokenizer.bin "$R/input/data/tokenizer/"
  # As SageMaker writes them: every value a string, plus the SDK's own keys.
  cat >"$R/input/config/hyperparameters.json" <<'EOF'
{"device": "cpu", "depth": "2", "seq-len": "64", "micro-batch": "4", "steps": "6", "lr": "0.003",
 "warmup": "2", "val-every": "3", "val-batches": "2", "sample-every": "0", "seed": "7",
 "sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "1",
 "sagemaker_mpi_custom_mpi_options": "", "sagemaker_job_name": "\"train-gpt-test\""}
EOF
  cat >"$R/input/config/resourceconfig.json" <<'EOF'
{"current_host": "algo-1", "current_instance_type": "ml.p5.48xlarge", "current_group_name": "homogeneousCluster",
 "hosts": ["algo-1"], "instance_groups": [{"instance_group_name": "homogeneousCluster",
 "instance_type": "ml.p5.48xlarge", "hosts": ["algo-1"]}], "network_interface_name": "eth0", "topology": null}
EOF
  cat >"$R/input/config/inputdataconfig.json" <<'EOF'
{"train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
 "val": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
 "tokenizer": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}}
EOF
}
hyperparameters() { printf '%s\n' "$1" >"$R/input/config/hyperparameters.json"; }
# Inside the container the checkpoints go to its folder (lib.sh turns them off
# through TRAIN_GPT_CHECKPOINT_DIR, which would otherwise take precedence).
sm() { env -u TRAIN_GPT_CHECKPOINT_DIR TRAIN_GPT_SM_ROOT="$R" "$TG" "$@"; }

# 1. A job with no flags at all trains from the channels and leaves its weights
# in the model folder: the same bytes as the equivalent command line outside SageMaker.
make_tree
if sm >"$T/sm.log" 2>&1; then
  steps=$(steps_logged "$R/output/data")
  vals=$(val_losses "$R/output/data" | grep -c .)
  if [ "$steps" -eq 6 ] && [ "$vals" -eq 2 ] && grep -q "^data .*$R/input/data/train/\*" "$T/sm.log" &&
     grep -q "val $R/input/data/val/\*" "$T/sm.log" && grep -q 'vocab 4096' "$T/sm.log"; then
    ok sm_trains_from_channels
  else
    fail sm_trains_from_channels "$steps steps, $vals validations; $(grep -E '^(data|model) ' "$T/sm.log")"
  fi
  "$TG" --device cpu --depth 2 --seq-len 64 --micro-batch 4 --steps 6 --lr 0.003 --warmup 2 --val-every 3 \
    --val-batches 2 --sample-every 0 --seed 7 --train-data "$R/input/data/train/*.bin" \
    --val-data "$R/input/data/val/*.bin" --tokenizer "$R/input/data/tokenizer/tokenizer.bin" \
    --export "$T/plain.bin" --export-hf "$T/plain_hf" --export-hf-dtype fp32 --log-dir "$T/plain" >"$T/plain.log" 2>&1
  if [ -s "$R/model/model.bin" ] && cmp -s "$R/model/model.bin" "$T/plain.bin" &&
     cmp -s "$R/model/model.safetensors" "$T/plain_hf/model.safetensors" && cmp -s "$R/model/config.json" "$T/plain_hf/config.json" &&
     [ "$(step_losses "$R/output/data")" = "$(step_losses "$T/plain")" ]; then
    ok sm_model_exported_same_as_flags
  else
    fail sm_model_exported_same_as_flags "model/{model.bin,model.safetensors,config.json} differ from the command-line run's --export and --export-hf"
  fi
  if grep -q '^sagemaker | root .* | host algo-1 (1 of 1: algo-1) | ml.p5.48xlarge | interface eth0$' "$T/sm.log" &&
     grep -q '^sagemaker | hyperparameters.json: 11 applied .* 4 sagemaker_\* keys left to the launcher' "$T/sm.log" &&
     grep -qF "sagemaker | checkpoints $R/checkpoints | final weights $R/model/model.bin | metrics $R/output/data/metrics.jsonl | failure reason $R/output/failure" "$T/sm.log"; then
    ok sm_reports_job
  else
    fail sm_reports_job "$(grep '^sagemaker' "$T/sm.log")"
  fi
  if [ ! -e "$R/output/failure" ]; then ok sm_no_failure_on_success; else fail sm_no_failure_on_success "$(cat "$R/output/failure")"; fi
  if [ -s "$R/checkpoints/step_00000006/manifest.json" ]; then
    ok sm_checkpoint_in_opt_ml_checkpoints
  else
    fail sm_checkpoint_in_opt_ml_checkpoints "$(ls -R "$R/checkpoints" 2>&1 | head -n 5)"
  fi
  if [ "$(grep -c '"type":"step"' "$R/output/data/metrics.jsonl" 2>/dev/null)" -eq 6 ]; then
    ok sm_metrics_log_in_output_data
  else
    fail sm_metrics_log_in_output_data "$(ls -R "$R/output")"
  fi
else
  fail sm_trains_from_channels "exit $?: $(tail -n 3 "$T/sm.log")"
fi

# 2. Flags on the command line win over hyperparameters.json and over the
# SageMaker folders, and so does $TRAIN_GPT_CHECKPOINT_DIR in the environment.
make_tree
env TRAIN_GPT_CHECKPOINT_DIR="$T/env_ckpt" TRAIN_GPT_SM_ROOT="$R" "$TG" --steps 2 --model-dir "$T/cli_model" >"$T/cli.log" 2>&1
if [ "$(steps_logged "$R/output/data")" -eq 2 ] && [ -s "$T/cli_model/model.bin" ] && [ ! -e "$R/model/model.bin" ] &&
   [ -d "$T/env_ckpt/step_00000002" ] && [ ! -e "$R/checkpoints/step_00000002" ] &&
   grep -q 'overridden by the command line: steps' "$T/cli.log" &&
   grep -qF "sagemaker | checkpoints $T/env_ckpt | final weights $T/cli_model/model.bin |" "$T/cli.log"; then
  ok sm_command_line_wins
else
  fail sm_command_line_wins "$(grep -E '^(step|sagemaker)' "$T/cli.log" | tail -n 4)"
fi

# 2b. A spot interruption: the job is killed (SIGKILL, as when the 120 s after
# SIGTERM run out) right after its step-4 checkpoint, in the folder that
# checkpointconfig.json names; SageMaker restarts it with that folder restored,
# and it resumes there and ends with the weights of a job never interrupted.
make_tree
hp_spot='{"device": "cpu", "depth": "2", "seq-len": "64", "micro-batch": "4", "steps": "6", "lr": "0.003",
 "warmup": "2", "val-every": "0", "sample-every": "0", "seed": "7", "checkpoint-every": "2"}'
hyperparameters "$hp_spot"
sm >"$T/whole.log" 2>&1
cp "$R/model/model.bin" "$T/whole.bin"
make_tree
hyperparameters "$hp_spot"
printf '{"LocalPath": "%s", "S3Uri": "s3://bucket/run-1/checkpoints"}\n' "$R/synced" >"$R/input/config/checkpointconfig.json"
(TRAIN_GPT_CRASH_AT=after-manifest@4 sm >"$T/killed.log" 2>&1)
killed=$?
mv "$R/output/data/metrics.jsonl" "$T/killed.jsonl"  # so that the log holds the restarted run's records only
sm >"$T/restarted.log" 2>&1
if [ "$killed" -eq 137 ] && [ -s "$R/synced/step_00000004/manifest.json" ] &&
   grep -q "^resume .*$R/synced/step_00000004: step 4 of 6" "$T/restarted.log" &&
   [ "$(steps_logged "$R/output/data")" -eq 2 ] && cmp -s "$R/model/model.bin" "$T/whole.bin"; then
  ok sm_spot_restart_resumes
else
  fail sm_spot_restart_resumes "killed with $killed; $(grep -E '^(resume|step)|error' "$T/restarted.log" | head -n 3)"
fi

# 3. Channels: a 'validation' channel instead of 'val'; .bin and .bin.zst
# shards side by side; SM_CHANNEL_TRAIN pointing elsewhere; no val channel
# (no validation); no channels at all (the bundled demo data, by default path).
make_tree
mv "$R/input/data/val" "$R/input/data/validation"
zstd -q data/kjv/kjv_val_000.bin -o "$R/input/data/train/kjv_val_000.bin.zst"
if sm --steps 1 >"$T/ch.log" 2>&1 && grep -q '(2 shards)' "$T/ch.log" && grep -q "val $R/input/data/validation/" "$T/ch.log"; then
  ok sm_validation_channel_and_zst_shards
else
  fail sm_validation_channel_and_zst_shards "$(grep -E '^data|error' "$T/ch.log")"
fi
mkdir -p "$T/elsewhere"
cp data/kjv/kjv_train_000.bin "$T/elsewhere/shard_a.bin"
rm -rf "$R/input/data/validation"
if SM_CHANNEL_TRAIN="$T/elsewhere" sm --steps 1 >"$T/env.log" 2>&1 && grep -q "^data .*train $T/elsewhere/\*" "$T/env.log" &&
   ! grep -q '^val ' "$T/env.log"; then
  ok sm_channel_env_and_no_val
else
  fail sm_channel_env_and_no_val "$(grep -E '^data|^val|error' "$T/env.log")"
fi
rm -rf "$R/input/data"
if sm --steps 1 >"$T/demo.log" 2>&1 && grep -q '^data .*train data/kjv/kjv_train_' "$T/demo.log"; then
  ok sm_without_channels_trains_bundled_data
else
  fail sm_without_channels_trains_bundled_data "$(grep -E '^data|error' "$T/demo.log")"
fi

# 4. Outside SageMaker (a root without input/config) nothing changes: no
# SageMaker lines, no failure file on an error.
mkdir -p "$T/not_sm/output"
if env TRAIN_GPT_SM_ROOT="$T/not_sm" "$TG" --device cpu --depth 1 --seq-len 16 --micro-batch 2 --steps 1 \
     --val-every 0 --sample-every 0 >"$T/out.log" 2>&1 && ! grep -q '^sagemaker' "$T/out.log" &&
   ! env TRAIN_GPT_SM_ROOT="$T/not_sm" "$TG" --steps x >/dev/null 2>&1 && [ ! -e "$T/not_sm/output/failure" ]; then
  ok outside_sagemaker_unchanged
else
  fail outside_sagemaker_unchanged "$(grep -E '^sagemaker|error' "$T/out.log"; ls "$T/not_sm/output")"
fi

# 5. Every fatal error: exit status 1, one error line, and the same message in
# output/failure (what SageMaker shows as the job's FailureReason), followed by
# the host once resourceconfig.json has been read. Each case breaks a tree of
# its own, and the cases run side by side (each run is mostly MPI start-up).
# new_case NAME: a fresh tree for one case, as $R.
# sm_error NAME PATTERN [train_gpt flags...]: starts the case in the background.
cases=()
new_case() { R=$T/cases/$1; make_tree; }
sm_error() {
  local name=$1
  printf '%s\n' "$2" >"$R.pattern"
  shift 2
  (env TRAIN_GPT_SM_ROOT="$R" "$TG" "$@" >/dev/null 2>"$R.err"; echo $? >"$R.rc") &
  cases+=("$name")
}
check_error() {
  local name=$1 R=$T/cases/$1 pattern err rc lines reason host
  pattern=$(cat "$R.pattern")
  rc=$(cat "$R.rc")
  lines=$(grep -c '^train_gpt: error:' "$R.err")
  err=$(sed -n 's/^train_gpt: error: //p' "$R.err")
  if [ "$rc" -ne 1 ] || [ "$lines" -ne 1 ] || ! printf '%s\n' "$err" | grep -Eq -- "$pattern"; then
    fail "$name" "exit $rc, $lines error lines, want /$pattern/: $err"
    return
  fi
  ok "$name"
  reason=$(cat "$R/output/failure" 2>/dev/null)
  host=$(sed -n 's/.*"current_host": "\([^"]*\)".*/\1/p' "$R/input/config/resourceconfig.json")
  if { [ "$reason" = "$err" ] || [ "$reason" = "$err (host $host)" ]; } && [ -z "$(find "$R/output" -name '.failure*')" ]; then
    ok "${name}_failure_file"
  else
    fail "${name}_failure_file" "output/failure: '$reason', error: '$err'"
  fi
}
new_case hp_bad_integer
hyperparameters '{"steps": "ten", "depth": "2"}'
sm_error hp_bad_integer "hyperparameters\.json: --steps: 'ten' is not an integer"
new_case hp_bad_number
hyperparameters '{"lr": "fast"}'
sm_error hp_bad_number "hyperparameters\.json: --lr: 'fast' is not a number"
new_case hp_bad_boolean
hyperparameters '{"shuffle": "maybe"}'
sm_error hp_bad_boolean "hyperparameters\.json: --shuffle: 'maybe' is not a boolean"
new_case hp_number_for_integer
hyperparameters '{"steps": 1.5}'
sm_error hp_number_for_integer "--steps: '1\.5' is not an integer"
new_case hp_unknown_keys
hyperparameters '{"stepz": "1", "learning_rate": "0.1", "steps": "2"}'
sm_error hp_unknown_keys "unknown hyperparameters 'stepz' 'learning_rate' \(keys are train_gpt's flags"
new_case hp_array_value
hyperparameters '{"steps": [1, 2]}'
sm_error hp_array_value "hyperparameter 'steps' is an array; expected a string, number or boolean"
new_case hp_null_value
hyperparameters '{"model": null}'
sm_error hp_null_value "hyperparameter 'model' is null"
new_case hp_same_flag_twice
hyperparameters '{"micro-batch": "2", "micro_batch": "4"}'
sm_error hp_same_flag_twice "'micro-batch' and 'micro_batch' name the same flag --micro-batch"
new_case hp_key_twice
hyperparameters '{"steps": "2", "steps": "3"}'
sm_error hp_key_twice "hyperparameter 'steps' is given twice"
new_case hp_invalid_json
hyperparameters '{"steps": "1",}'
sm_error hp_invalid_json "hyperparameters\.json: invalid JSON: line 1: "
new_case hp_not_object
hyperparameters '["steps", "1"]'
sm_error hp_not_object "hyperparameters\.json: expected an object of hyperparameters, found an array"
new_case bad_command_line_flag
sm_error bad_command_line_flag "unknown flag '--bogus'" --bogus 1
new_case resource_unknown_host
echo '{"current_host": "algo-3", "hosts": ["algo-1", "algo-2"]}' >"$R/input/config/resourceconfig.json"
sm_error resource_unknown_host "resourceconfig\.json: current_host 'algo-3' is not in \"hosts\""
new_case resource_no_hosts
echo '{"current_host": "algo-1", "hosts": []}' >"$R/input/config/resourceconfig.json"
sm_error resource_no_hosts "resourceconfig\.json: \"hosts\" must be a non-empty array"
new_case empty_train_channel
rm "$R/input/data/train/"*
sm_error empty_train_channel "channel 'train' \($R/input/data/train\) holds no \*\.bin or \*\.bin\.zst shards"
new_case val_and_validation
mkdir -p "$R/input/data/validation"
sm_error val_and_validation "channels 'val' .* and 'validation' .* are both present"
new_case tokenizer_channel_empty
rm "$R/input/data/tokenizer/tokenizer.bin"
sm_error tokenizer_channel_empty "channel 'tokenizer' .* has no tokenizer\.bin"
new_case pipe_mode
rm -rf "$R/input/data/train"
mkfifo "$R/input/data/train_0"
sm_error pipe_mode "channel 'train' uses Pipe input mode"
new_case bad_shard_in_channel
printf 'XXXX' | dd of="$R/input/data/train/kjv_train_000.bin" bs=1 conv=notrunc status=none
sm_error bad_shard_in_channel "kjv_train_000\.bin.*magic"
# A fatal error in the middle of training, forced: the checkpoint of step 4
# finds the disk full (TRAIN_GPT_DISK_FULL_AT). The failure file holds the
# reason; the checkpoint of step 2 stays complete for a restart; no final weights.
new_case disk_full_mid_training
hyperparameters '{"device": "cpu", "depth": "1", "seq-len": "32", "micro-batch": "2", "steps": "6", "val-every": "0",
 "sample-every": "0", "checkpoint-every": "2", "keep-last": "0"}'
printf '%s\n' "checkpoint of step 4: .*No space left on device; older checkpoints are intact" >"$R.pattern"
(env -u TRAIN_GPT_CHECKPOINT_DIR TRAIN_GPT_DISK_FULL_AT=4 TRAIN_GPT_SM_ROOT="$R" "$TG" >"$R.out" 2>"$R.err"; echo $? >"$R.rc") &
cases+=(disk_full_mid_training)
wait
for name in "${cases[@]}"; do check_error "$name"; done
R=$T/cases/disk_full_mid_training
if [ -s "$R/checkpoints/step_00000002/manifest.json" ] && [ ! -e "$R/checkpoints/step_00000004/manifest.json" ] &&
   [ "$(steps_logged "$R/output/data")" -eq 4 ] && [ ! -e "$R/model/model.bin" ]; then
  ok disk_full_mid_training_keeps_checkpoint
else
  fail disk_full_mid_training_keeps_checkpoint "$(steps_logged "$R/output/data") steps logged; $(ls "$R/checkpoints" "$R/model" 2>&1 | tr '\n' ' ')"
fi

finish
