#!/usr/bin/env bash
# test_sagemaker_entrypoint.sh: the container entrypoint
# (scripts/sagemaker/entrypoint.sh) and the image that runs it: the mpirun
# command line for 2 hosts x 8 GPUs (checked as text in dry-run mode), the
# other hosts' role, the single-host forms, real 1- and 2-rank jobs in a fake
# /opt/ml, a worker waiting for host 0's word, and SIGTERM reaching the job's
# ranks (under mpirun, under a worker's sshd) and nothing else.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh

T=$TEST_TMP
R=$T/opt_ml
EP=scripts/sagemaker/entrypoint.sh
mkdir -p "$R/input/config"

resources() { printf '%s\n' "$1" >"$R/input/config/resourceconfig.json"; }
hyperparameters() { printf '%s\n' "$1" >"$R/input/config/hyperparameters.json"; }
# The entrypoint in a clean environment, as in a container without the SageMaker toolkit.
ep() { env -i PATH=/usr/bin:/bin MPI_HOME=/opt/amazon/openmpi TRAIN_GPT_SM_ROOT="$R" TRAIN_GPT_BIN=/opt/train_gpt/train_gpt "$@"; }

# 0. The image (scripts/sagemaker/Dockerfile; not built by the tests) starts
# from a CUDA development image, copies the repository to /opt/train_gpt
# (its .dockerignore keeping the scripts and the bundled corpus in), builds
# train_gpt there against NCCL and the EFA installer's Open MPI, and runs this
# entrypoint, executable, in exec form (so that it receives SIGTERM itself).
DF=scripts/sagemaker/Dockerfile
entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]$/\1/p' "$DF")
if [ "$entry" = /opt/train_gpt/$EP ] && [ -x "$EP" ] && grep -q '^COPY \. /opt/train_gpt$' "$DF" &&
   grep -Eq '^FROM nvidia/cuda:\$\{CUDA_VERSION\}-devel-ubuntu' "$DF" && grep -q 'efa_installer.sh' "$DF" &&
   grep -q '^ENV NCCL_HOME=/opt/nccl' "$DF" && grep -q 'make -j.* train_gpt data' "$DF" &&
   ! grep -Eq '^(scripts|data/corpus|data)/?$' "$DF.dockerignore"; then
  ok dockerfile_runs_the_entrypoint
else
  fail dockerfile_runs_the_entrypoint "ENTRYPOINT '$entry'; check $DF and $DF.dockerignore"
fi

# 1. Host 0 of 2 hosts x 8 GPUs (ranks per host from the SDK's mpi distribution).
# The host's cores are shared among its ranks.
threads=$(( $(nproc) / 8 > 0 ? $(nproc) / 8 : 1 ))
resources '{"current_host": "algo-1", "hosts": ["algo-2", "algo-1"], "network_interface_name": "eth0"}'
hyperparameters '{"steps": "10", "sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "8", "sagemaker_mpi_custom_mpi_options": ""}'
want="mpirun --allow-run-as-root -np 16 -H algo-1:8,algo-2:8 --prefix /opt/amazon/openmpi"
want+=" --mca plm_rsh_no_tree_spawn 1 --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"
want+=" --map-by slot --bind-to none --mca pml ob1 --mca btl ^openib --mca btl_vader_single_copy_mechanism none"
want+=" --mca orte_abort_on_non_zero_status 1 -x NCCL_SOCKET_IFNAME -x OMP_NUM_THREADS -x PATH -x TRAIN_GPT_SM_ROOT -x TRAIN_GPT_STOP_FILE"
want+=" /opt/train_gpt/train_gpt --steps 10"
ep env TRAIN_GPT_DRY_RUN=1 "$EP" train --steps 10 >"$T/master.txt" 2>"$T/master.err"
if [ "$(sed -n 3p "$T/master.txt")" = "$want" ] &&
   [ "$(sed -n 1p "$T/master.txt")" = "host algo-1 of 2 (host 0: algo-1), 8 rank(s) per host, 16 in all" ] &&
   [ "$(sed -n 2p "$T/master.txt")" = "environment: NCCL_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=$threads" ]; then
  ok mpirun_2_hosts_x_8_gpus
else
  fail mpirun_2_hosts_x_8_gpus "got: $(cat "$T/master.txt" "$T/master.err")"
fi
if ep "$EP" --dry-run train --steps 10 | cmp -s - "$T/master.txt"; then ok dry_run_flag_same_as_env; else fail dry_run_flag_same_as_env "--dry-run differs from TRAIN_GPT_DRY_RUN=1"; fi

# 2. The user's NCCL/FI settings and custom mpirun options reach the ranks (the
# SDK json-encodes them inside the string).
resources '{"current_host": "algo-1", "hosts": ["algo-1", "algo-2", "algo-3"], "network_interface_name": "ens5"}'
hyperparameters '{"sagemaker_mpi_num_of_processes_per_host": "8", "sagemaker_mpi_custom_mpi_options": "\"--bind-to numa --report-bindings\""}'
ep env NCCL_DEBUG=INFO FI_PROVIDER=efa FI_EFA_USE_HUGE_PAGE=0 "$EP" --dry-run train >"$T/custom.txt" 2>"$T/custom.err"
cmdline=$(sed -n 3p "$T/custom.txt")
if [[ "$cmdline" == *"-np 24 -H algo-1:8,algo-2:8,algo-3:8 "* ]] && [[ "$cmdline" == *"--mca btl_tcp_if_include ens5 "* ]] &&
   [[ "$cmdline" == *"-x FI_EFA_USE_HUGE_PAGE -x FI_PROVIDER -x NCCL_DEBUG -x NCCL_SOCKET_IFNAME -x OMP_NUM_THREADS "* ]] &&
   grep -q 'environment: FI_EFA_USE_HUGE_PAGE=0 FI_PROVIDER=efa NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=ens5 ' "$T/custom.txt" &&
   [[ "$cmdline" == *" --bind-to numa --report-bindings /opt/train_gpt/train_gpt" ]] &&
   grep -q 'NCCL_SOCKET_IFNAME=ens5' "$T/custom.txt" && ! grep -q 'warning' "$T/custom.err"; then
  ok mpirun_env_and_custom_options
else
  fail mpirun_env_and_custom_options "got: $(cat "$T/custom.txt" "$T/custom.err")"
fi

# 2a. EFA instance types: the environment NCCL over EFA needs (a user's
# values stand), and the aws-ofi-nccl plugin under the name NCCL looks for
# (libnccl-net.so, or libnccl-net-$NCCL_NET_PLUGIN.so) or a clear failure.
mkdir -p "$T/ofi/lib" "$T/ofi_named/lib"
touch "$T/ofi/lib/libnccl-net.so" "$T/ofi_named/lib/libnccl-net-ofi.so"
resources '{"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "current_instance_type": "ml.p5.48xlarge", "network_interface_name": "eth0"}'
hyperparameters '{"sagemaker_mpi_num_of_processes_per_host": "8"}'
ep env LD_LIBRARY_PATH="$T/ofi/lib" "$EP" --dry-run train >"$T/efa.txt" 2>"$T/efa.err"
rc=$?
ep env LD_LIBRARY_PATH="$T/ofi/lib" FI_PROVIDER=efa-direct RDMAV_FORK_SAFE=0 "$EP" --dry-run train >"$T/efa_own.txt" 2>&1
if [ "$rc" -eq 0 ] && grep -q 'environment: FI_EFA_USE_DEVICE_RDMA=1 FI_PROVIDER=efa .*RDMAV_FORK_SAFE=1' "$T/efa.txt" &&
   grep -q -- '-x FI_EFA_USE_DEVICE_RDMA -x FI_PROVIDER .*-x RDMAV_FORK_SAFE ' "$T/efa.txt" &&
   grep -q "NCCL's network plugin $T/ofi/lib/libnccl-net.so" "$T/efa.err" &&
   grep -q 'environment: FI_EFA_USE_DEVICE_RDMA=1 FI_PROVIDER=efa-direct .*RDMAV_FORK_SAFE=0' "$T/efa_own.txt"; then
  ok efa_environment
else
  fail efa_environment "exit $rc: $(cat "$T/efa.txt" "$T/efa.err" | head -n 4)"
fi
ep "$EP" --dry-run train >/dev/null 2>"$T/efa_none.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "error: EFA instance ml.p5.48xlarge: NCCL looks for its network plugin as libnccl-net.so, which is not on LD_LIBRARY_PATH" "$T/efa_none.err"; then
  ok efa_plugin_missing_fails
else
  fail efa_plugin_missing_fails "exit $rc: $(cat "$T/efa_none.err")"
fi
ep env LD_LIBRARY_PATH="$T/ofi_named/lib" "$EP" --dry-run train >/dev/null 2>"$T/efa_named.err"
rc1=$?
ep env LD_LIBRARY_PATH="$T/ofi_named/lib" NCCL_NET_PLUGIN=ofi "$EP" --dry-run train >/dev/null 2>"$T/efa_named2.err"
rc2=$?
hyperparameters '{"sagemaker_mpi_num_of_processes_per_host": "8", "allow-nccl-sockets": "1"}'
ep "$EP" --dry-run train >/dev/null 2>"$T/efa_allowed.err"
rc3=$?
if [ "$rc1" -eq 1 ] && grep -q "as libnccl-net.so, .*(found: $T/ofi_named/lib/libnccl-net-ofi.so; set NCCL_NET_PLUGIN" "$T/efa_named.err" &&
   [ "$rc2" -eq 0 ] && grep -q "plugin $T/ofi_named/lib/libnccl-net-ofi.so" "$T/efa_named2.err" &&
   [ "$rc3" -eq 0 ] && grep -q 'warning: .*allow-nccl-sockets=1: going on' "$T/efa_allowed.err"; then
  ok efa_plugin_name_and_override
else
  fail efa_plugin_name_and_override "exits $rc1 $rc2 $rc3: $(cat "$T/efa_named.err" "$T/efa_named2.err" "$T/efa_allowed.err")"
fi
resources '{"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "current_instance_type": "ml.g5.48xlarge", "network_interface_name": "eth0"}'
hyperparameters '{"sagemaker_mpi_num_of_processes_per_host": "8"}'
if ep "$EP" --dry-run train 2>&1 | grep -q 'environment: NCCL_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=[0-9]*$'; then ok efa_not_on_other_types
else fail efa_not_on_other_types "$(ep "$EP" --dry-run train 2>&1 | head -n 3)"; fi

# 3. Another host runs no mpirun: it waits for host 0's.
resources '{"current_host": "algo-2", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"}'
hyperparameters '{"sagemaker_mpi_num_of_processes_per_host": "8"}'
if [ "$(ep "$EP" --dry-run train | sed -n 3p)" = "waits for algo-1's mpirun" ]; then ok worker_dry_run; else fail worker_dry_run "$(ep "$EP" --dry-run train)"; fi

# 4. One host: mpirun without -H for several GPUs; train_gpt itself for one.
resources '{"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}'
one=$(ep env TRAIN_GPT_GPUS_PER_HOST=4 "$EP" --dry-run train | sed -n 3p)
single=$(ep env TRAIN_GPT_GPUS_PER_HOST=1 "$EP" --dry-run train --lr 0.1 | sed -n 3p)
if [[ "$one" == "mpirun --allow-run-as-root -np 4 --map-by slot "* ]] && [ "$single" = "/opt/train_gpt/train_gpt --lr 0.1" ]; then
  ok single_host_forms
else
  fail single_host_forms "4 GPUs: '$one'; 1 GPU: '$single'"
fi

# 5. Bad job descriptions are errors with exit status 1.
resources '{"current_host": "algo-9", "hosts": ["algo-1", "algo-2"]}'
if ! ep "$EP" --dry-run train >/dev/null 2>"$T/bad.err" && grep -q "current_host 'algo-9' is not in" "$T/bad.err"; then
  ok bad_current_host
else
  fail bad_current_host "$(cat "$T/bad.err")"
fi
resources '{"current_host": "algo-1", "hosts": ["algo-1"]}'
if ! ep env TRAIN_GPT_GPUS_PER_HOST=eight "$EP" --dry-run train >/dev/null 2>"$T/bad.err" && grep -q "'eight' is not a positive integer" "$T/bad.err"; then
  ok bad_ranks_per_host
else
  fail bad_ranks_per_host "$(cat "$T/bad.err")"
fi

# 6. A real job on one host with one rank: the entrypoint execs train_gpt, which
# finds everything in the container tree.
mkdir -p "$R/input/data/train" "$R/model"
cp data/kjv/kjv_train_000.bin "$R/input/data/train/"
hyperparameters '{"device": "cpu", "depth": "1", "seq-len": "32", "micro-batch": "2", "steps": "3", "sample-every": "0", "vocab-size": "4096"}'
if env TRAIN_GPT_SM_ROOT="$R" TRAIN_GPT_GPUS_PER_HOST=1 "$EP" train >"$T/run.log" 2>&1 &&
   [ "$(grep -c '^step ' "$T/run.log")" -eq 3 ] && [ -s "$R/model/model.bin" ]; then
  ok single_rank_job_trains
else
  fail single_rank_job_trains "$(tail -n 3 "$T/run.log")"
fi

# 6b. The same job with 2 ranks on the host: mpirun starts them, each writes
# its shard of the checkpoints into the container's checkpoint folder, rank 0
# exports the weights; started again with more steps (a spot restart, the
# folder restored), both ranks resume from it. Then a bad hyperparameter
# stops both with the reason in output/failure, from rank 0, kept over the
# entrypoint's own note. (lib.sh turns checkpoints off through
# TRAIN_GPT_CHECKPOINT_DIR; a container has no such setting.)
rm -rf "$R/model/model.bin" "$R/checkpoints"
hp2='"device": "cpu", "depth": "1", "seq-len": "32", "micro-batch": "2", "sample-every": "0", "vocab-size": "4096", "zero": "2", "checkpoint-every": "2", "sagemaker_mpi_num_of_processes_per_host": "2"'
hyperparameters "{$hp2, \"steps\": \"3\"}"
ck=$R/checkpoints/step_00000003
if env -u TRAIN_GPT_CHECKPOINT_DIR TRAIN_GPT_SM_ROOT="$R" "$EP" train >"$T/run2.log" 2>&1 && grep -q '^train_gpt | .* | ranks 2 | zero 2' "$T/run2.log" &&
   [ "$(grep -c '^step ' "$T/run2.log")" -eq 3 ] && [ -s "$R/model/model.bin" ] && [ -s "$ck/manifest.json" ] &&
   [ -s "$ck/shard_00000_of_00002.bin" ] && [ -s "$ck/shard_00001_of_00002.bin" ]; then
  ok two_rank_job_trains
else
  fail two_rank_job_trains "$(grep -E '^(train_gpt|step)|error' "$T/run2.log" | tail -n 4); $(ls "$R/checkpoints" 2>&1)"
fi
hyperparameters "{$hp2, \"steps\": \"5\"}"
if env -u TRAIN_GPT_CHECKPOINT_DIR TRAIN_GPT_SM_ROOT="$R" "$EP" train >"$T/run2r.log" 2>&1 &&
   grep -q "^resume .*$ck: step 3 of 5" "$T/run2r.log" && [ "$(grep -c '^step ' "$T/run2r.log")" -eq 2 ] &&
   [ -s "$R/checkpoints/step_00000005/manifest.json" ]; then
  ok two_rank_job_resumes
else
  fail two_rank_job_resumes "$(grep -E '^(resume|step)|error' "$T/run2r.log" | tail -n 4)"
fi
hyperparameters '{"device": "cpu", "steps": "three", "sagemaker_mpi_num_of_processes_per_host": "2"}'
rm -f "$R/output/failure"
env TRAIN_GPT_SM_ROOT="$R" "$EP" train >"$T/run2bad.log" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && [ "$(cat "$R/output/failure")" = "hyperparameters.json: --steps: 'three' is not an integer (host algo-1, rank 0)" ]; then
  ok two_rank_job_failure_reason
else
  fail two_rank_job_failure_reason "exit $rc, failure '$(cat "$R/output/failure" 2>/dev/null)'"
fi

# 7. A worker exits with the status host 0 leaves it, and gives up (failure
# file, status 1) when host 0 does not answer.
resources '{"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}'
worker=(env TRAIN_GPT_SM_ROOT="$R" TRAIN_GPT_SSHD=true TRAIN_GPT_DONE_FILE="$T/done" TRAIN_GPT_GPUS_PER_HOST=2 TRAIN_GPT_HOST_WAIT_S=5)
(sleep 1; echo 3 >"$T/done") &
"${worker[@]}" "$EP" train >/dev/null 2>"$T/worker.err"
rc=$?
if [ "$rc" -eq 3 ] && grep -q 'host 0 reports the job ended with status 3' "$T/worker.err"; then ok worker_takes_host0_status; else fail worker_takes_host0_status "exit $rc: $(cat "$T/worker.err")"; fi
rm -f "$R/output/failure"
"${worker[@]}" TRAIN_GPT_HOST_WAIT_S=1 "$EP" train >/dev/null 2>"$T/worker.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q 'host 0 (algo-1) has not answered for 1s and never reported the end' "$R/output/failure"; then ok worker_gives_up; else fail worker_gives_up "exit $rc: $(cat "$T/worker.err")"; fi

# 8. Host 0 gives up (failure file, status 1) when another host never answers.
resources '{"current_host": "algo-1", "hosts": ["algo-1", "nohost.invalid"]}'
rm -f "$R/output/failure"
env TRAIN_GPT_SM_ROOT="$R" TRAIN_GPT_SSHD=true TRAIN_GPT_DONE_FILE="$T/done" TRAIN_GPT_GPUS_PER_HOST=2 TRAIN_GPT_HOST_WAIT_S=1 "$EP" train >/dev/null 2>"$T/master.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q 'host nohost.invalid did not answer on port 22' "$R/output/failure"; then ok master_gives_up; else fail master_gives_up "exit $rc: $(cat "$T/master.err")"; fi

# 9. SIGTERM to the entrypoint (SageMaker's stop) reaches every rank of its
# job, under mpirun on host 0 and under sshd on the others, which exit
# cleanly, and the entrypoint exits with their status. It reaches nothing
# else: a process of the same binary (same name, same file) that the
# entrypoint did not start, such as another job's rank or another test's
# train_gpt on this machine, keeps running.
mkdir -p "$T/bin"
rank_bin=$T/bin/train_gpt
cat >"$T/fake_rank.c" <<'EOF'
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static volatile sig_atomic_t stop;
static void on_term(int sig) {
    (void)sig;
    stop = 1;
    // FAKE_WRITE_STOP: rank 0 reports a complete checkpoint, as train_gpt does.
    const char* rank = getenv("OMPI_COMM_WORLD_RANK");
    const char* stop_file = getenv("TRAIN_GPT_STOP_FILE");
    if (getenv("FAKE_WRITE_STOP") && stop_file && rank && rank[0] == '0' && !rank[1]) {
        int fd = open(stop_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0 && write(fd, "step 7 /ckpt/step_00000007\n", 27) == 27) close(fd);
    }
    const char* status = getenv("FAKE_TERM_EXIT");  // exit at once, with this status
    if (status) _exit(atoi(status));
}
static void say(const char* path, const char* what) {
    FILE* f = fopen(path, "a");
    const char* rank = getenv("OMPI_COMM_WORLD_RANK");
    fprintf(f, "%s %s\n", what, rank ? rank : "?");
    fclose(f);
}
int main(int argc, char** argv) {
    signal(SIGTERM, on_term);
    say(argv[argc - 1], "start");
    for (int i = 0; i < 300 && !stop; i++) usleep(100000);  // 30 s at most
    say(argv[argc - 1], stop ? "term" : "timeout");
    return stop ? 0 : 1;
}
EOF
gcc -O1 -o "$rank_bin" "$T/fake_rank.c"
# wait_for COUNT WORD FILE: until FILE has COUNT lines starting with WORD (20 s at most).
wait_for() {
  for _ in $(seq 100); do
    [ "$(grep -c "^$2" "$3" 2>/dev/null)" = "$1" ] && return 0
    sleep 0.2
  done
  return 1
}
"$rank_bin" "$T/decoy.log" &
decoy=$!
env TRAIN_GPT_SM_ROOT="$T/not_sagemaker" TRAIN_GPT_BIN="$rank_bin" TRAIN_GPT_GPUS_PER_HOST=2 "$EP" train "$T/ranks.log" >"$T/term.log" 2>&1 &
ep_pid=$!
wait_for 2 start "$T/ranks.log"
kill -TERM "$ep_pid"
wait "$ep_pid"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c '^term' "$T/ranks.log")" = 2 ] && grep -q "passing it to the job's 2 rank(s) on this host" "$T/term.log"; then
  ok sigterm_reaches_ranks
else
  fail sigterm_reaches_ranks "exit $rc; ranks: $(tr '\n' ' ' <"$T/ranks.log" 2>/dev/null); $(tail -n 3 "$T/term.log")"
fi

# 9a. Ranks that fail on the stop (exit 3 at once): the entrypoint reports
# mpirun's status 3, not the signal that interrupted its wait.
env TRAIN_GPT_SM_ROOT="$T/not_sagemaker" TRAIN_GPT_BIN="$rank_bin" TRAIN_GPT_GPUS_PER_HOST=2 FAKE_TERM_EXIT=3 \
  "$EP" train "$T/ranks3.log" >"$T/term3.log" 2>&1 &
ep_pid=$!
wait_for 2 start "$T/ranks3.log"
kill -TERM "$ep_pid"
wait "$ep_pid"
rc=$?
if [ "$rc" -eq 1 ] && grep -q 'error: mpirun exited with status 3;' "$T/term3.log"; then
  ok sigterm_failing_ranks_status
else
  fail sigterm_failing_ranks_status "exit $rc: $(grep -E 'error' "$T/term3.log" | tail -n 2)"
fi

# 9b. The same, but rank 0 reported a stop with a complete checkpoint: the
# job did what a stop asks, so the entrypoint exits 0 whatever mpirun's status.
env TRAIN_GPT_SM_ROOT="$T/not_sagemaker" TRAIN_GPT_BIN="$rank_bin" TRAIN_GPT_GPUS_PER_HOST=2 FAKE_TERM_EXIT=1 \
  FAKE_WRITE_STOP=1 TRAIN_GPT_STOP_FILE="$T/stopped" "$EP" train "$T/ranks_s.log" >"$T/term_s.log" 2>&1 &
ep_pid=$!
wait_for 2 start "$T/ranks_s.log"
kill -TERM "$ep_pid"
wait "$ep_pid"
rc=$?
if [ "$rc" -eq 0 ] && grep -q 'SIGTERM: the job stopped with a complete checkpoint (step 7 /ckpt/step_00000007); mpirun.s status 1 after the stop is not a failure: exit 0' "$T/term_s.log"; then
  ok sigterm_clean_stop_exit_0
else
  fail sigterm_clean_stop_exit_0 "exit $rc: $(tail -n 3 "$T/term_s.log")"
fi

# 9c. A worker host: host 0's mpirun starts the ranks through this host's
# sshd, here a stand-in that starts them as orted would, in a shell below it.
# SIGTERM reaches them; the worker then waits for host 0's word as before.
cat >"$T/fake_sshd" <<'EOF'
#!/usr/bin/env bash
[ "$1" = -t ] && exit 0
bash -c '"$RANK_BIN" "$RANKS_LOG" & "$RANK_BIN" "$RANKS_LOG" & wait'
EOF
chmod +x "$T/fake_sshd"
resources '{"current_host": "algo-2", "hosts": ["127.0.0.1", "algo-2"]}'
env TRAIN_GPT_SM_ROOT="$R" TRAIN_GPT_SSHD="$T/fake_sshd" TRAIN_GPT_DONE_FILE="$T/done_w" TRAIN_GPT_BIN="$rank_bin" \
  TRAIN_GPT_GPUS_PER_HOST=2 TRAIN_GPT_HOST_WAIT_S=60 RANK_BIN="$rank_bin" RANKS_LOG="$T/wranks.log" \
  "$EP" train >"$T/wterm.log" 2>&1 &
ep_pid=$!
wait_for 2 start "$T/wranks.log"
kill -TERM "$ep_pid"
wait_for 2 term "$T/wranks.log"
terms=$(grep -c '^term' "$T/wranks.log")
echo 0 >"$T/done_w"
wait "$ep_pid"
rc=$?
if [ "$rc" -eq 0 ] && [ "$terms" = 2 ]; then
  ok sigterm_reaches_worker_ranks
else
  fail sigterm_reaches_worker_ranks "exit $rc; ranks: $(tr '\n' ' ' <"$T/wranks.log" 2>/dev/null); $(tail -n 3 "$T/wterm.log")"
fi
if kill -0 "$decoy" 2>/dev/null && [ "$(cat "$T/decoy.log")" = "start ?" ]; then
  ok sigterm_spares_other_processes
else
  fail sigterm_spares_other_processes "a train_gpt the entrypoint did not start got: $(tr '\n' ' ' <"$T/decoy.log")"
fi
kill -KILL "$decoy" 2>/dev/null
wait "$decoy" 2>/dev/null

finish
