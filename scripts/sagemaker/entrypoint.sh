#!/usr/bin/env bash
# entrypoint.sh: the ENTRYPOINT of the train_gpt image (scripts/sagemaker/Dockerfile).
#
# SageMaker starts the image on every host of a training job as
# `docker run IMAGE train`. This script turns that into one `mpirun` over all
# hosts with one train_gpt rank per GPU:
#
#   host 0 (the first of the sorted "hosts" in resourceconfig.json, as in
#     SageMaker's own MPI launcher) starts sshd, waits until every other
#     host's sshd answers, runs mpirun, then tells the other hosts that the
#     job is over and exits with mpirun's status;
#   every other host starts sshd (mpirun starts the ranks there over ssh) and
#     waits for that word, then exits with the same status; it gives up if
#     host 0 stops answering without having said it.
#
# One host with one GPU (or none): train_gpt is exec'ed directly, no mpirun.
# train_gpt itself reads the hyperparameters, data channels and output
# folders (llm/platform/sagemaker.c); arguments after `train` are passed to it as flags.
#
# The mpi distribution of the SageMaker SDK reaches the container as the
# hyperparameters sagemaker_mpi_num_of_processes_per_host and
# sagemaker_mpi_custom_mpi_options; both are honoured here.
#
# EFA: on instance types with EFA (current_instance_type p4d, p4de, p5, p5e,
# p5en, p6-*) every rank gets FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1 and
# RDMAV_FORK_SAFE=1 unless they are set, and a job of more than one host
# fails before it starts when the aws-ofi-nccl plugin is not where NCCL
# looks for it (libnccl-net.so, or libnccl-net-$NCCL_NET_PLUGIN.so, on
# LD_LIBRARY_PATH or in the linker's cache): NCCL would fall back to TCP
# sockets. train_gpt then checks the network NCCL chose (llm/platform/efa.h).
# The hyperparameter allow-nccl-sockets=1 (or TRAIN_GPT_ALLOW_NCCL_SOCKETS=1)
# turns both checks into warnings.
#
# Exit status: 0 when the job finished; 0 also when SIGTERM (a stop, a spot
# interruption, the runtime limit) ended it with a complete checkpoint, which
# rank 0 reports in $TRAIN_GPT_STOP_FILE, whatever mpirun's own status after
# the stop (it can be 1 when mpirun itself was signalled or lost a host in the
# shutdown): the job did what a stop asks, and SageMaker resumes it from that
# checkpoint. Otherwise 1, with the reason in output/failure.
#
# Environment:
#   TRAIN_GPT_DRY_RUN=1        print the command that would run, run nothing (also: --dry-run)
#   TRAIN_GPT_SM_ROOT          replaces /opt/ml (tests)
#   TRAIN_GPT_BIN              the binary (default: train_gpt at the top of this repository)
#   TRAIN_GPT_GPUS_PER_HOST    ranks per host (default: the hyperparameter above, else nvidia-smi's count)
#   TRAIN_GPT_HOST_WAIT_S      how long hosts wait for each other before giving up (default 900)
#   TRAIN_GPT_DONE_FILE        where host 0 leaves the job's exit status on the others (default /tmp/train_gpt.done)
#   TRAIN_GPT_SSHD             the ssh daemon to start (default /usr/sbin/sshd)
#   MPI_HOME                   Open MPI's prefix on every host (default: from mpirun on PATH)
#   TRAIN_GPT_INSTANCE_TYPE    the instance type when resourceconfig.json has none (tests, other clusters)
#   TRAIN_GPT_STOP_FILE        where rank 0 reports a stop with a complete checkpoint (default /tmp/train_gpt.stopped.PID)
#   NCCL_*, FI_*, RDMAV_*, SM_*, OMP_*  passed on to every rank, as are PATH and LD_LIBRARY_PATH
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${TRAIN_GPT_SM_ROOT:-/opt/ml}
bin=${TRAIN_GPT_BIN:-$(cd "$here/../.." && pwd)/train_gpt}
dry_run=${TRAIN_GPT_DRY_RUN:-0}
wait_s=${TRAIN_GPT_HOST_WAIT_S:-900}
done_file=${TRAIN_GPT_DONE_FILE:-/tmp/train_gpt.done}
sshd=${TRAIN_GPT_SSHD:-/usr/sbin/sshd}

log() { echo "entrypoint: $*" >&2; }

# The failure reason for SageMaker: first writer wins, as in llm/platform/sagemaker.c.
fail() {
  log "error: $*"
  if [ -d "$root/input/config" ] && [ "$dry_run" != 1 ]; then
    mkdir -p "$root/output"
    local tmp="$root/output/.failure.$$.tmp"
    if printf 'entrypoint: %s\n' "$*" >"$tmp"; then ln "$tmp" "$root/output/failure" 2>/dev/null || true; fi
    rm -f "$tmp"
  fi
  exit 1
}

# A hyperparameter as text. SageMaker writes strings; the SDK's framework
# estimators write JSON inside them ("8", "\"--mca x y\""), so decode when possible.
hyperparameter() {
  local file="$root/input/config/hyperparameters.json"
  [ -f "$file" ] || return 0
  jq -r --arg k "$1" '.[$k] // empty | tostring | . as $s | (try fromjson catch $s) | tostring' "$file"
}

# ---- arguments ----------------------------------------------------------------------------------
args=("$@")
if [ "${#args[@]}" -gt 0 ] && [ "${args[0]}" = "--dry-run" ]; then dry_run=1; args=("${args[@]:1}"); fi
if [ "${#args[@]}" -gt 0 ] && [ "${args[0]}" = "train" ]; then args=("${args[@]:1}"); fi

# ---- the job: hosts, interface, ranks per host ------------------------------------------------
resources="$root/input/config/resourceconfig.json"
if [ -f "$resources" ]; then
  command -v jq >/dev/null || fail "jq is needed to read $resources"
  mapfile -t hosts < <(jq -r '.hosts | sort | .[]' "$resources")
  current_host=$(jq -r '.current_host // empty' "$resources")
  interface=$(jq -r '.network_interface_name // "eth0"' "$resources")
  instance_type=$(jq -r '.current_instance_type // empty' "$resources")
  if [ "${#hosts[@]}" -eq 0 ] || [ -z "$current_host" ]; then fail "$resources: needs \"hosts\" and \"current_host\""; fi
  printf '%s\n' "${hosts[@]}" | grep -qxF -- "$current_host" || fail "$resources: current_host '$current_host' is not in \"hosts\""
else
  hosts=(localhost)
  current_host=localhost
  interface=${NCCL_SOCKET_IFNAME:-eth0}
fi
master=${hosts[0]}
instance_type=${instance_type:-${TRAIN_GPT_INSTANCE_TYPE:-}}

gpus=${TRAIN_GPT_GPUS_PER_HOST:-$(hyperparameter sagemaker_mpi_num_of_processes_per_host)}
if [ -z "$gpus" ]; then
  gpus=0
  if command -v nvidia-smi >/dev/null; then gpus=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU' || true); fi
  [ "$gpus" -gt 0 ] || gpus=1
fi
[[ "$gpus" =~ ^[1-9][0-9]*$ ]] || fail "ranks per host '$gpus' is not a positive integer"
read -r -a custom_mpi_options <<<"$(hyperparameter sagemaker_mpi_custom_mpi_options)"
world=$(( ${#hosts[@]} * gpus ))

# ---- the EFA / NCCL environment of every rank -------------------------------------------------
# The bootstrap goes over TCP on SageMaker's interface.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-$interface}
# EFA: libfabric's EFA provider with GPUDirect RDMA, and fork-safe verbs
# (MPI and NCCL share the process); a user's own values stand. Recent
# libfabric finds EFA without FI_PROVIDER, but an image with more than one
# provider, or an older stack, does not: set it, as AWS's guides do.
# (FI_EFA_USE_HUGE_PAGE=0 is the remedy if fork() fails with ENOMEM; train_gpt
# does not fork, so huge pages stay on.)
has_efa() { [[ "${1#ml.}" =~ ^(p4d|p4de|p5|p5e|p5en|p6-b200|p6-b300|p6e-gb200)\. ]]; }
allow_sockets=${TRAIN_GPT_ALLOW_NCCL_SOCKETS:-$(hyperparameter allow-nccl-sockets)}
# nccl_net_plugin: the library name NCCL dlopen()s for its network plugin.
nccl_net_plugin() {
  case ${NCCL_NET_PLUGIN:-} in
    "") echo libnccl-net.so ;;
    *.so | */*) echo "$NCCL_NET_PLUGIN" ;;
    *) echo "libnccl-net-$NCCL_NET_PLUGIN.so" ;;
  esac
}
# findable NAME: where dlopen would find NAME (LD_LIBRARY_PATH, the linker's cache, /lib, /usr/lib).
findable() {
  local dir
  if [[ "$1" == */* ]]; then [ -e "$1" ] && echo "$1"; return; fi
  IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
  for dir in "${dirs[@]}" /lib /usr/lib /lib64 /usr/lib64 /usr/lib/x86_64-linux-gnu; do
    if [ -n "$dir" ] && [ -e "$dir/$1" ]; then echo "$dir/$1"; return; fi
  done
  if command -v ldconfig >/dev/null; then ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }'; fi
}
if [ -n "$instance_type" ] && has_efa "$instance_type"; then
  export FI_PROVIDER=${FI_PROVIDER:-efa} FI_EFA_USE_DEVICE_RDMA=${FI_EFA_USE_DEVICE_RDMA:-1} RDMAV_FORK_SAFE=${RDMAV_FORK_SAFE:-1}
  plugin=$(nccl_net_plugin)
  found=$(findable "$plugin")
  if [ -n "$found" ]; then
    log "EFA instance $instance_type: FI_PROVIDER=$FI_PROVIDER FI_EFA_USE_DEVICE_RDMA=$FI_EFA_USE_DEVICE_RDMA RDMAV_FORK_SAFE=$RDMAV_FORK_SAFE; NCCL's network plugin $found"
  elif [ "${#hosts[@]}" -gt 1 ]; then
    others=$(find /opt/amazon/ofi-nccl /opt/aws-ofi-nccl /usr/local/lib ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} \
      -maxdepth 2 -name 'libnccl-net*.so' 2>/dev/null | head -n 3 | tr '\n' ' ' || true)
    why="EFA instance $instance_type: NCCL looks for its network plugin as $plugin, which is not on LD_LIBRARY_PATH or in the linker's cache, so NCCL would use TCP sockets between the ${#hosts[@]} hosts${others:+ (found: ${others% }; set NCCL_NET_PLUGIN or LD_LIBRARY_PATH to match)}"
    if [ "$allow_sockets" = 1 ]; then log "warning: $why; allow-nccl-sockets=1: going on"; else fail "$why; pass the hyperparameter allow-nccl-sockets=1 to run anyway"; fi
  fi
fi
# The ranks of a host share its cores (the CPU backend's and the data loader's threads).
if [ "$gpus" -gt 1 ]; then
  cores=$(nproc)
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((cores / gpus > 0 ? cores / gpus : 1))}
fi

# Rank 0 reports a stop with a complete checkpoint here (llm/checkpoint/checkpoint.h).
export TRAIN_GPT_STOP_FILE=${TRAIN_GPT_STOP_FILE:-/tmp/train_gpt.stopped.$$}
rm -f "$TRAIN_GPT_STOP_FILE"

# ---- the command ------------------------------------------------------------------------------
if [ "$world" -eq 1 ]; then
  cmd=("$bin" "${args[@]}")
else
  cmd=(mpirun --allow-run-as-root -np "$world")
  if [ "${#hosts[@]}" -gt 1 ]; then
    host_slots=""
    for host in "${hosts[@]}"; do host_slots+="$host:$gpus,"; done
    mpi_home=${MPI_HOME:-$(dirname "$(dirname "$(command -v mpirun || echo /opt/amazon/openmpi/bin/mpirun)")")}
    # --prefix: the orted daemons on the other hosts find Open MPI without a login shell.
    # no_tree_spawn: host 0 starts every daemon itself (one ssh hop, no ssh between workers).
    cmd+=(-H "${host_slots%,}" --prefix "$mpi_home"
      --mca plm_rsh_no_tree_spawn 1
      --mca btl_tcp_if_include "$interface" --mca oob_tcp_if_include "$interface")
  fi
  # Ranks fill host 0's slots first, so rank = host index * gpus + local rank
  # and local rank picks the GPU. No CPU binding: the GPU-to-socket layout
  # differs between instance types; add it with custom_mpi_options.
  # MPI carries only control messages (NCCL moves the tensors): plain TCP and
  # shared memory, without the single-copy mechanism containers forbid.
  cmd+=(--map-by slot --bind-to none
    --mca pml ob1 --mca btl '^openib' --mca btl_vader_single_copy_mechanism none
    --mca orte_abort_on_non_zero_status 1)
  mapfile -t passed < <(compgen -e | grep -E '^(NCCL_|FI_|RDMAV_|SM_|OMP_|TRAINING_JOB_)|^(TRAIN_GPT_SM_ROOT|TRAIN_GPT_STOP_FILE|TRAIN_GPT_INSTANCE_TYPE|PATH|LD_LIBRARY_PATH)$' | LC_ALL=C sort)
  for var in "${passed[@]}"; do cmd+=(-x "$var"); done
  cmd+=("${custom_mpi_options[@]}" "$bin" "${args[@]}")
fi

# Words as a shell would need them typed: quoted only where necessary.
shell_words() {
  local word out=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./:,=@%^+-]+$ ]]; then out+=("$word"); else out+=("'${word//\'/\'\\\'\'}'"); fi
  done
  echo "${out[*]}"
}

if [ "$dry_run" = 1 ]; then
  echo "host $current_host of ${#hosts[@]} (host 0: $master), $gpus rank(s) per host, $world in all"
  shown=()
  while read -r var; do shown+=("$var=${!var}"); done < <(compgen -e | grep -E '^(NCCL_|FI_|RDMAV_|OMP_)' | LC_ALL=C sort)
  echo "environment: ${shown[*]}"
  if [ "$current_host" = "$master" ]; then shell_words "${cmd[@]}"; else echo "waits for $master's mpirun"; fi
  exit 0
fi

# ---- run ------------------------------------------------------------------------------------------
# SageMaker stops a job (StopTrainingJob, spot interruption) by SIGTERM to each
# container's first process, SIGKILL 120 s later. mpirun would turn its own
# SIGTERM into SIGKILL a second later, so the ranks on this host get it
# straight: they checkpoint and exit, and mpirun then ends by itself.
# Only this job's ranks: the processes running the rank binary below the one
# this script started that leads to them (mpirun on host 0; sshd, under which
# host 0's mpirun starts its daemon and ranks, on the others). Another
# train_gpt on the same machine, from any other job or test, is not touched.
# job_ranks PID: those processes below PID, one PID a line.
# shellcheck disable=SC2317  # called from stop_ranks
job_ranks() {
  local top=$1 stat line pid up
  local -A parent=()
  for stat in /proc/[0-9]*/stat; do
    IFS= read -r line 2>/dev/null <"$stat" || continue
    pid=${stat#/proc/}
    pid=${pid%/stat}
    line=${line##*") "}  # the fields after "(name)", which may hold anything
    line=${line#* }      # past the state: the parent's PID comes next
    parent[$pid]=${line%% *}
  done
  for pid in "${!parent[@]}"; do
    up=${parent[$pid]}
    while [ "$up" -gt 1 ] && [ "$up" != "$top" ]; do up=${parent[$up]:-0}; done
    if [ "$up" = "$top" ] && [ "/proc/$pid/exe" -ef "$bin" ]; then echo "$pid"; fi
  done
}
# shellcheck disable=SC2317  # invoked by trap
stop_ranks() {
  interrupted=1
  stopped=1
  local ranks=()
  [ -n "${1:-}" ] && mapfile -t ranks < <(job_ranks "$1")
  log "SIGTERM: passing it to the job's ${#ranks[@]} rank(s) on this host${ranks[*]:+ (pid ${ranks[*]})}"
  if [ "${#ranks[@]}" -gt 0 ]; then kill -TERM "${ranks[@]}" 2>/dev/null || true; fi
}

if [ "$world" -eq 1 ]; then exec "${cmd[@]}"; fi

sshd_pid=
if [ "${#hosts[@]}" -gt 1 ]; then
  rm -f "$done_file"
  if [ -z "${TRAIN_GPT_SSHD:-}" ]; then mkdir -p /run/sshd; fi  # OpenSSH's privilege separation folder
  "$sshd" -t || fail "$sshd cannot start (sshd -t: configuration or host keys)"
  # In the foreground (-D), as a child of this script: the ranks mpirun starts
  # through it are then found below it (job_ranks), and it ends with the job.
  "$sshd" -D &
  sshd_pid=$!
  # shellcheck disable=SC2064  # the PID is fixed now
  trap "kill $sshd_pid 2>/dev/null || true" EXIT
fi

# Whether a host's sshd answers (its name may not resolve yet).
answers() { timeout 5 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; }

if [ "$current_host" != "$master" ]; then
  # Another host: the ranks here are started by host 0's mpirun over ssh.
  # Wait for host 0 to report the end; give up if it stops answering (a
  # container that dies takes its sshd with it) without having reported.
  trap 'stop_ranks "$sshd_pid"' TERM
  check_every=$((wait_s < 10 ? 1 : 10))
  last_answer=$SECONDS
  next_check=0
  while [ ! -f "$done_file" ]; do
    if [ "$SECONDS" -ge "$next_check" ]; then
      if answers "$master"; then last_answer=$SECONDS; fi
      if [ $((SECONDS - last_answer)) -ge "$wait_s" ] && [ ! -f "$done_file" ]; then
        fail "host 0 ($master) has not answered for ${wait_s}s and never reported the end of the job"
      fi
      next_check=$((SECONDS + check_every))
    fi
    sleep 1 & wait $! || true  # (a plain sleep would hold off the TERM trap)
  done
  status=$(cat "$done_file")
  log "host 0 reports the job ended with status $status"
  exit "$status"
fi

# Host 0: wait for every other host's sshd (names may resolve late: retry).
for host in "${hosts[@]:1}"; do
  deadline=$((SECONDS + wait_s))
  until answers "$host"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "host $host did not answer on port 22 within ${wait_s}s"
    sleep 1
  done
done

log "running: ${cmd[*]}"
mpirun_pid=
stopped=0
trap 'stop_ranks "$mpirun_pid"' TERM
"${cmd[@]}" &
mpirun_pid=$!
status=0
# A trapped signal ends wait early, with 128 + its number rather than
# mpirun's status: then wait again (bash keeps the status of a child that
# has exited meanwhile).
while :; do
  interrupted=0
  wait "$mpirun_pid" && status=0 || status=$?
  [ "$interrupted" = 1 ] || break
done

# A stop that ended with a complete checkpoint is a success, whatever
# mpirun says after it (see "Exit status" above).
if [ "$status" -ne 0 ] && [ "$stopped" = 1 ] && [ -s "$TRAIN_GPT_STOP_FILE" ]; then
  log "SIGTERM: the job stopped with a complete checkpoint ($(head -n 1 "$TRAIN_GPT_STOP_FILE")); mpirun's status $status after the stop is not a failure: exit 0"
  status=0
fi
for host in "${hosts[@]:1}"; do
  ssh -o ConnectTimeout=10 "$host" "echo $status > '$done_file'" || log "warning: could not tell $host that the job ended"
done
if [ "$status" -ne 0 ]; then
  fail "mpirun exited with status $status; the failing rank's error is in the job's log and in output/failure on its host"
fi
exit 0
