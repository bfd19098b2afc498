#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (loopback), for trying and testing rlexp's Slurm path.
#
#   scripts/local_slurm.sh up       install slurmctld/slurmd/munge if missing, start them, wait for an idle node
#   scripts/local_slurm.sh status   sinfo + squeue, or "down" (exit 3)
#   scripts/local_slurm.sh down     cancel its jobs, stop exactly the daemons `up` started (pid files)
#
# Everything lives in $RLEXP_SLURM_DIR (default /tmp/rlexp-slurm): slurm.conf, the munge key and
# socket, pid files, logs, spool and controller state. Clients find the cluster through
# /etc/slurm/slurm.conf, a symlink to that slurm.conf which `up` creates only when the path is free
# and `down` removes only when it still points here (or export SLURM_CONF=$RLEXP_SLURM_DIR/slurm.conf).
# The node has this machine's cores and memory; accounting is off (no slurmdbd, so no sacct).
# Runs as root (the daemons and jobs run as root too: this is a test cluster, not a shared one).
set -euo pipefail

DIR=${RLEXP_SLURM_DIR:-/tmp/rlexp-slurm}
CONF=$DIR/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s 2>/dev/null || echo localhost)
CTLD_PORT=${RLEXP_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${RLEXP_SLURMD_PORT:-6818}
export SLURM_CONF=$CONF

die() { echo "local_slurm: $*" >&2; exit 1; }
say() { echo "local_slurm: $*" >&2; }

# pid of a daemon we started, if it is still that daemon (a recycled pid is not ours to kill)
live_pid() {
  local pidfile=$1 name=$2 pid
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && echo "$pid"
}

install_packages() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "needs root to install ${missing[*]} (apt-get) and to run the daemons"
  say "installing ${missing[*]}"
  # policy-rc.d-less systems would start the packages' own services: ours use other paths anyway.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  # RealMemory in MiB, a little under MemTotal: slurmd drains a node that reports less than configured.
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.95)}' /proc/meminfo)
  mkdir -p "$DIR"/{state,spool,log,munge}
  cat >"$CONF.tmp" <<EOF
# written by scripts/local_slurm.sh: a one-node test cluster on loopback
ClusterName=rlexp-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups in this container: track job processes through /proc, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=10  # SIGTERM to SIGKILL: a stopping rlexp job checkpoints in a few seconds
MinJobAge=300
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
  if [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then
    :
  elif [ ! -e "$ETC_CONF" ] && [ ! -L "$ETC_CONF" ]; then
    mkdir -p "$(dirname "$ETC_CONF")"
    ln -s "$CONF" "$ETC_CONF"
  else
    say "$ETC_CONF exists and is not ours: clients need export SLURM_CONF=$CONF"
  fi
}

start_munge() {
  live_pid "$DIR/munged.pid" munged >/dev/null && return 0
  if [ ! -s "$DIR/munge/munge.key" ]; then
    (umask 077 && dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none)
  fi
  chmod 755 "$DIR/munge"  # the key inside is 0600; clients need to reach the socket
  # --force: munged refuses root-owned, world-traversable /tmp parents without it
  munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
}

start_daemon() {
  local name=$1
  live_pid "$DIR/$name.pid" "$name" >/dev/null && return 0
  "$name" -f "$CONF" || die "$name did not start; see $DIR/log/$name.log"
}

wait_idle() {
  local deadline=$((SECONDS + ${RLEXP_SLURM_UP_TIMEOUT:-60})) state=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -1 || true)
    case "$state" in
      idle | mixed | allocated) return 0 ;;
      drain* | down*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  die "node $NODE is '${state:-not reported}' after ${RLEXP_SLURM_UP_TIMEOUT:-60} s; see $DIR/log/"
}

up() {
  [ "$(id -u)" = 0 ] || die "run as root: the daemons run as root on this test cluster"
  install_packages
  write_conf
  start_munge
  start_daemon slurmctld
  start_daemon slurmd
  wait_idle
  say "up: node $NODE ($(nproc) CPUs), partition local, SLURM_CONF=$CONF"
}

stop_pid() {
  local pidfile=$1 name=$2 pid i
  pid=$(live_pid "$pidfile" "$name") || { rm -f "$pidfile"; return 0; }
  kill -TERM "$pid"
  for i in $(seq 1 100); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  [ -d "/proc/$pid" ] && kill -KILL "$pid"
  rm -f "$pidfile"
}

down() {
  if live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
    # jobs first, so no slurmstepd outlives its slurmd
    scancel --quiet --partition=local 2>/dev/null || true
    for _ in $(seq 1 50); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  stop_pid "$DIR/slurmd.pid" slurmd
  stop_pid "$DIR/slurmctld.pid" slurmctld
  stop_pid "$DIR/munged.pid" munged
  if [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then
    rm -f "$ETC_CONF"
  fi
  say "down"
}

status() {
  if ! live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
    echo "local_slurm: down"
    return 3
  fi
  sinfo
  squeue
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "rlexp: error: command=${1:-}: use up, down or status; e.g. $0 up" >&2; exit 2 ;;
esac
