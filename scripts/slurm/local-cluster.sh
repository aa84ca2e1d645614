#!/usr/bin/env bash
# A throw-away one-node Slurm cluster in a directory, for tests and local measurements (docs/cluster.md):
#   scripts/slurm/local-cluster.sh start DIR   # munged + slurmctld + slurmd, own slurm.conf, state dirs,
#                                              # free ports; prints "export SLURM_CONF=DIR/slurm.conf"
#   scripts/slurm/local-cluster.sh stop DIR    # kills the daemons it started (PIDs in DIR/pids)
# Runs as root (slurmd must), with Debian's slurm-wlm + munge (installed by scripts/setup.sh).
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none: no cgroups, so it runs in a container.
# Exit status 77 from start: Slurm or munge is not installed (callers report "skipped").
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

stop_cluster() {
  [[ -f "$dir/pids" ]] || return 0
  # newest first: slurmd, slurmctld, munged; each by the PID we recorded when starting it
  local pids
  pids=$(tac "$dir/pids")
  for pid in $pids; do kill "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -f "$dir/pids"
}

if [[ "$cmd" == stop ]]; then stop_cluster; exit 0; fi
[[ "$cmd" == start ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

for b in munged mungekey slurmctld slurmd sbatch squeue sinfo; do
  command -v "$b" >/dev/null 2>&1 || { echo "$b not found: install slurm-wlm and munge (scripts/setup.sh)" >&2; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "a local Slurm cluster needs root (slurmd)" >&2; exit 77; }

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 700 "$dir"
mkdir -p "$dir/munge" "$dir/ctld" "$dir/slurmd"
chmod 700 "$dir/munge"

free_port() {
  "${RETRO_PYTHON:-/usr/bin/python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port=$(free_port); done
node=$(hostname -s)
cpus=$(nproc)

mungekey --create --keyfile="$dir/munge/munge.key" --force >/dev/null 2>&1
chmod 600 "$dir/munge/munge.key"
cat >"$dir/slurm.conf" <<EOF
ClusterName=retro-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=2
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
: >"$dir/pids"

munged --foreground --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" \
  >"$dir/munge/stdout.log" 2>&1 &
echo $! >>"$dir/pids"
for _ in $(seq 50); do [[ -S "$dir/munge/munge.socket" ]] && break; sleep 0.1; done
[[ -S "$dir/munge/munge.socket" ]] || { echo "munged did not start: $(tail -3 "$dir/munge/munged.log" 2>/dev/null)" >&2; stop_cluster; exit 1; }

export SLURM_CONF="$dir/slurm.conf"
slurmctld -D -c -f "$SLURM_CONF" >"$dir/slurmctld.stdout" 2>&1 &
echo $! >>"$dir/pids"
slurmd -D -N "$node" -f "$SLURM_CONF" >"$dir/slurmd.stdout" 2>&1 &
echo $! >>"$dir/pids"

# Ready when the node is idle.
for _ in $(seq 150); do
  state=$(sinfo -h -n "$node" -o %t 2>/dev/null || true)
  [[ "$state" == idle* ]] && break
  sleep 0.2
done
if [[ "$state" != idle* ]]; then
  echo "the local Slurm cluster did not come up (node state '$state'); logs in $dir" >&2
  tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 2>/dev/null || true
  stop_cluster
  exit 1
fi
echo "export SLURM_CONF=$SLURM_CONF"
