#!/usr/bin/env bash
# A single-node Slurm on loopback for the SLURM profile test (tests/test_slurm.py).
#   local_slurm.sh start DIR   install slurm-wlm and munge if missing (Debian, as root), write
#                              /etc/slurm/slurm.conf and gres.conf (state, logs, munge key in
#                              DIR), start munged, slurmctld and slurmd, wait until the node is idle
#   local_slurm.sh stop DIR    stop the daemons by the pids recorded in DIR
# One fake GPU (Gres=gpu:1 with File=/dev/null) lets GPU jobs schedule; a task prolog writes what
# SLURM gave each job (`scontrol show job`: its comment, which names the rule, and the GPUs it
# holds; the CUDA_VISIBLE_DEVICES SLURM set) to DIR/given.log, then hides the fake GPU from the task (unset
# CUDA_VISIBLE_DEVICES: a job given a GPU that CUDA cannot see stops, as it should on a real
# cluster), so the jobs compute on the CPU. The config goes to the
# default path because snakemake-executor-plugin-slurm removes every SLURM_* variable, SLURM_CONF
# included, inside its jobs before it calls srun. An /etc/slurm/slurm.conf not written by this
# script is never overwritten.
set -euo pipefail
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"  # munged, slurmctld, slurmd (root tools)
cmd=${1:?usage: local_slurm.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: local_slurm.sh start|stop DIR}")

if [[ $cmd == stop ]]; then
    scancel --user="$(id -un)" 2>/dev/null || true
    for name in slurmd slurmctld munged; do
        pidfile="$dir/$name.pid"
        [[ -f $pidfile ]] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
    for f in /etc/slurm/slurm.conf /etc/slurm/gres.conf; do
        grep -qF "# written by nadpipe tests/slurm/local_slurm.sh" "$f" 2>/dev/null && rm -f "$f"
    done
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        echo "local_slurm.sh: slurm-wlm and munge are not installed, and cannot be installed" \
             "here (needs root and apt-get)" >&2
        exit 2
    fi
    echo "installing slurm-wlm and munge (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 slurm-wlm munge >&2 ||
        { apt-get update -q -o DPkg::Lock::Timeout=600 >&2 && apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 slurm-wlm munge >&2; }
fi

if pids=$(pgrep -x 'slurmctld|slurmd' | tr '\n' ' ') && [[ -n $pids ]]; then
    echo "local_slurm.sh: Slurm daemons are already running (pids $pids); stop them first" >&2
    exit 2
fi
mkdir -p "$dir"/{state,spool,munge,log}
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

# munge: its own key and socket in DIR, so a system munged is left alone
key="$dir/munge/munge.key"
[[ -f $key ]] || dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
chmod 700 "$dir/munge"; chmod 400 "$key"
socket="$dir/munge/munge.socket"
munged --force --key-file="$key" --socket="$socket" --pid-file="$dir/munged.pid" \
       --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"

conf=/etc/slurm/slurm.conf
mark="# written by nadpipe tests/slurm/local_slurm.sh"
if [[ -f $conf ]] && ! grep -qF "$mark" "$conf"; then
    echo "local_slurm.sh: $conf exists and was not written by this script; not touching it" >&2
    exit 2
fi
mkdir -p /etc/slurm
cat > "$conf" <<CONF
$mark
ClusterName=nadpipe-ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1 State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
TaskProlog=$dir/task_prolog.sh
CONF
cat > "$dir/task_prolog.sh" <<PROLOG
#!/bin/sh
job=\$(scontrol show job "\$SLURM_JOB_ID" | tr ' ' '\n' |
      grep -E '^(JobId|Comment|TresPerJob|TresPerNode)=' | tr '\n' ' ')
# one write of one line: tasks of jobs that start together append to the same file
echo "\$job CUDA_VISIBLE_DEVICES=\${CUDA_VISIBLE_DEVICES:-none}" >> "$dir/given.log"
echo "unset CUDA_VISIBLE_DEVICES"
PROLOG
chmod 755 "$dir/task_prolog.sh"
cat > /etc/slurm/gres.conf <<CONF
$mark
NodeName=$host Name=gpu File=/dev/null
CONF
slurmctld
slurmd
for _ in $(seq 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && { echo "local Slurm up: node $host idle, config $conf"; exit 0; }
    sleep 1
done
echo "local_slurm.sh: node $host did not become idle (state '${state:-none}'); logs in $dir/log" >&2
tail -n 20 "$dir"/log/*.log >&2 || true
exit 1
