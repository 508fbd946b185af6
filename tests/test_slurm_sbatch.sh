#!/usr/bin/env bash
# test_slurm_sbatch.sh: scripts/slurm/train.sbatch run as Slurm would run the
# batch script, with stand-ins for srun, scancel and scontrol on PATH (srun
# runs the one task it is given; the others record their arguments): the srun
# line and the ranks' environment, a real training job with its checkpoints
# and final weights in the run folder, a requeued job resuming there, and the
# time-limit signal (USR1) stopping the ranks with a checkpoint and requeueing
# the job, but not when the ranks fail. The stand-ins reach only the processes they started themselves.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
SB=scripts/slurm/train.sbatch
export FAKE_SLURM=$T/slurm
mkdir -p "$FAKE_SLURM/bin"
cat >"$FAKE_SLURM/bin/srun" <<'EOF'
#!/usr/bin/env bash
# srun: records its line and the environment the tasks get, runs the task.
printf '%s\n' "$*" >"$FAKE_SLURM/srun.args"
printf 'NCCL_SOCKET_IFNAME=%s\n' "${NCCL_SOCKET_IFNAME-unset}" >"$FAKE_SLURM/srun.env"
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do shift; done
"$@" &
echo $! >"$FAKE_SLURM/task.pid"
wait $!
EOF
cat >"$FAKE_SLURM/bin/scancel" <<'EOF'
#!/usr/bin/env bash
# scancel: records its line; --signal=TERM reaches the task srun started.
printf '%s\n' "$*" >>"$FAKE_SLURM/scancel.args"
if [ "$1" = --signal=TERM ]; then kill -TERM "$(cat "$FAKE_SLURM/task.pid")"; fi
EOF
cat >"$FAKE_SLURM/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$*" >>"$FAKE_SLURM/scontrol.args"
EOF
chmod +x "$FAKE_SLURM/bin/"*

RUN=$T/run
TGA=$PWD/train_gpt
small=(--device cpu --depth 1 --seq-len 32 --micro-batch 2 --val-every 0 --sample-every 0 --lr 0.003 --warmup 0)
# sbatch_env: the environment Slurm gives a batch script, and the stand-ins first on PATH.
sbatch_env=(env -u NCCL_SOCKET_IFNAME PATH="$FAKE_SLURM/bin:$PATH" SLURM_JOB_ID=42 SLURM_JOB_NAME=tg_test
  SLURM_SUBMIT_DIR="$PWD" SLURM_JOB_NUM_NODES=2 SLURM_JOB_NODELIST="node[1-2]" TRAIN_GPT="$TGA" RUN_DIR="$RUN")

# 1. A job: one srun line with a task per GPU, the checkpoints and the final
# weights in the run folder, the EFA bootstrap interface kept off loopback
# and container bridges; no requeue; srun's status is the script's.
"${sbatch_env[@]}" bash "$SB" "${small[@]}" --steps 4 --checkpoint-every 2 >"$T/job1.log" 2>&1
rc=$?
want="--mpi=pmix --kill-on-bad-exit=1 --cpu-bind=none $TGA --checkpoint-dir $RUN/checkpoints --model-dir $RUN/model ${small[*]} --steps 4 --checkpoint-every 2"
if [ "$rc" -eq 0 ] && [ "$(cat "$FAKE_SLURM/srun.args")" = "$want" ] &&
   [ "$(cat "$FAKE_SLURM/srun.env")" = "NCCL_SOCKET_IFNAME=^docker,lo,veth" ] &&
   [ "$(grep -c '^step ' "$T/job1.log")" -eq 4 ] && [ -s "$RUN/model/model.bin" ] &&
   [ -s "$RUN/checkpoints/step_00000004/manifest.json" ] && [ ! -e "$FAKE_SLURM/scontrol.args" ]; then
  ok sbatch_job_trains
else
  fail sbatch_job_trains "exit $rc; srun $(cat "$FAKE_SLURM/srun.args" 2>/dev/null); $(tail -n 2 "$T/job1.log")"
fi

# 2. The job requeued (a preemption, a node failure): it resumes from the run
# folder's newest checkpoint and goes on to the new last step.
"${sbatch_env[@]}" SLURM_RESTART_COUNT=1 bash "$SB" "${small[@]}" --steps 6 --checkpoint-every 2 >"$T/job2.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^resume .*$RUN/checkpoints/step_00000004" "$T/job2.log" &&
   [ "$(grep -c '^step ' "$T/job2.log")" -eq 2 ] && grep -q 'job 42 (restart 1) on 2 nodes' "$T/job2.log"; then
  ok sbatch_requeued_job_resumes
else
  fail sbatch_requeued_job_resumes "exit $rc; $(grep -E '^(resume|step)|error' "$T/job2.log" | head -n 3)"
fi

# 3. Five minutes before the time limit Slurm signals the script (USR1): it
# sends SIGTERM to the job's steps (scancel, never the script itself), the
# ranks checkpoint and exit 0, and the job is requeued.
rm -rf "$RUN"
"${sbatch_env[@]}" bash "$SB" "${small[@]}" --steps 100000 >"$T/job3.log" 2>&1 &
sb=$!
for _ in $(seq 200); do
  [ "$(grep -c '^step ' "$T/job3.log" 2>/dev/null)" -ge 2 ] && break
  sleep 0.1
done
kill -USR1 "$sb"
wait "$sb"
rc=$?
S=$(sed -nE 's/^stop .* after step ([0-9]+):.*/\1/p' "$T/job3.log")
if [ "$rc" -eq 0 ] && [ "$(cat "$FAKE_SLURM/scancel.args" 2>/dev/null)" = "--signal=TERM 42" ] &&
   [ "$(cat "$FAKE_SLURM/scontrol.args" 2>/dev/null)" = "requeue 42" ] && [ -n "$S" ] &&
   [ -s "$(printf '%s/checkpoints/step_%08d/manifest.json' "$RUN" "$S")" ] && grep -q 'time limit near' "$T/job3.log"; then
  ok sbatch_time_limit_checkpoints_and_requeues
else
  fail sbatch_time_limit_checkpoints_and_requeues "exit $rc, stop after '$S', scancel '$(cat "$FAKE_SLURM/scancel.args" 2>/dev/null)', scontrol '$(cat "$FAKE_SLURM/scontrol.args" 2>/dev/null)': $(tail -n 2 "$T/job3.log")"
fi

# 4. Ranks that fail after the time-limit stop (here a stand-in that exits 3
# on SIGTERM) are not requeued: the job ends with their status.
rm -f "$FAKE_SLURM/scancel.args" "$FAKE_SLURM/scontrol.args"
cat >"$T/failing_rank" <<'EOF'
#!/usr/bin/env bash
echo "step 1"
sleep 30 &
trap 'kill $!; exit 3' TERM
wait
EOF
chmod +x "$T/failing_rank"
"${sbatch_env[@]}" TRAIN_GPT="$T/failing_rank" bash "$SB" >"$T/job4.log" 2>&1 &
sb=$!
for _ in $(seq 100); do
  grep -q '^step ' "$T/job4.log" 2>/dev/null && break
  sleep 0.1
done
kill -USR1 "$sb"
wait "$sb"
rc=$?
if [ "$rc" -eq 3 ] && [ "$(cat "$FAKE_SLURM/scancel.args" 2>/dev/null)" = "--signal=TERM 42" ] &&
   [ ! -e "$FAKE_SLURM/scontrol.args" ] && grep -q 'not requeueing job 42' "$T/job4.log"; then
  ok sbatch_failed_stop_not_requeued
else
  fail sbatch_failed_stop_not_requeued "exit $rc, scontrol '$(cat "$FAKE_SLURM/scontrol.args" 2>/dev/null)': $(tail -n 2 "$T/job4.log")"
fi

finish
