#!/usr/bin/env bash
# Berth and Slurm side by side, in one run on one machine (docs/benchmarks.md,
# "Berth and Slurm side by side"):
#
#   bench/compare_slurm.sh [--duration 20] [--clients 16] [--rounds 3] [--idle-jobs 50]
#       [--backlog-jobs 2000] [--out DIR] [--no-berth] [--no-slurm] [--keep]
#       [--sched-params 'batch_sched_delay=0,...']   (slurm.conf SchedulerParameters;
#        Slurm's defaults without it)
#
# 1. Installs Debian's slurm-wlm, munge and libslurm-dev (and gcc) when missing
#    (apt-get, with a policy-rc.d that keeps the packages' own services from starting).
# 2. Starts a private Slurm: its own munged (own key and socket), one slurmctld and
#    8 `slurmd -N n1..n8` on this host (ports 16817 and 17001-17008), 8 fake GPUs a
#    node (gres File= symlinks to /dev/null); config, state, spool and logs in a temp
#    dir. On exit (a trap) it stops exactly the daemons it started, by their pids.
# 3. Measures Slurm (bench/compare_slurm.py slurm, with the libslurm client
#    bench/slurm_submit.c): submit→running on an idle cluster, trivial 1-GPU jobs
#    completed/s on 64 GPUs with a backlog, single submissions/s from long-running
#    clients with the server CPU per submission.
# 4. Measures Berth: bench/bench_api.py (single submissions/s and CPU per
#    submission), alternating with Slurm's submission run --rounds times (the machine
#    is noisy); then stops Slurm and runs, when the tree has it, bench/bench_e2e.py
#    (jobs completed/s and submit→running). DATABASE_URL and REDIS_URL are passed through
#    (the scripts' defaults otherwise; bench_e2e.py empties that database and flushes
#    that Redis db: give them their own); PYTHON names the venv's python (.venv/bin/python).
# 5. Prints the side-by-side table (metric | Slurm | Berth | ratio, ≥ 1.0 when Berth
#    is at least as good) and writes it, the JSON figures and the logs to --out
#    (default var/compare-slurm-<time>/).
#
# Runs as root (slurmd launches the jobs; apt-get installs); the cluster is private,
# so it touches no system Slurm or munge.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=20
ROUNDS=3
CLIENTS=16
IDLE_JOBS=50
BACKLOG_JOBS=2000
OUT=""
RUN_BERTH=1
RUN_SLURM=1
KEEP=0
NODES=8
GPUS=8
CTLD_PORT=16817
NODE_PORT0=17001
SCHED_PARAMS=""

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --idle-jobs) IDLE_JOBS=$2; shift 2 ;;
    --backlog-jobs) BACKLOG_JOBS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-berth) RUN_BERTH=0; shift ;;
    --no-slurm) RUN_SLURM=0; shift ;;
    --keep) KEEP=1; shift ;;
    --sched-params) SCHED_PARAMS=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "compare_slurm.sh: unknown argument $1" >&2; usage 2 >&2 ;;
  esac
done

PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
OUT=${OUT:-$ROOT/var/compare-slurm-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log() { echo "== $*" | tee -a "$OUT/run.log"; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "machine: nproc=$(nproc) cpu='$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)'" \
       "mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) $(uname -r)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo '(with uncommitted changes)')"
  echo "flags: --duration $DURATION --clients $CLIENTS --rounds $ROUNDS --idle-jobs $IDLE_JOBS --backlog-jobs $BACKLOG_JOBS${SCHED_PARAMS:+ --sched-params $SCHED_PARAMS}"
  echo "load before: $(uptime)"
} | tee "$OUT/run.log"

# --- the private Slurm ------------------------------------------------------------

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

install_missing() {
  local need=()
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    || need+=(slurm-wlm)
  command -v munged >/dev/null || need+=(munge)
  [ -e /usr/include/slurm/slurm.h ] || need+=(libslurm-dev)
  command -v cc >/dev/null || need+=(gcc)
  [ ${#need[@]} -eq 0 ] && return
  log "installing ${need[*]}"
  # The packages' postinst would start the system munge/slurmctld/slurmd services:
  # a policy-rc.d that refuses keeps them stopped (removed again if it was ours).
  local policy=/usr/sbin/policy-rc.d ours=0
  if [ ! -e $policy ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee $policy >/dev/null
    as_root chmod 755 $policy
    ours=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}")
  if ! as_root "${apt[@]}" >>"$OUT/apt.log" 2>&1; then
    as_root apt-get update -q >>"$OUT/apt.log" 2>&1
    as_root "${apt[@]}" >>"$OUT/apt.log" 2>&1 || { echo "apt-get failed: $OUT/apt.log" >&2; exit 1; }
  fi
  [ $ours = 1 ] && as_root rm -f $policy
  return 0
}

PIDS=()        # every daemon this script started, in start order
SLURMD_PIDS=()
CTLD_PID=""
MUNGED_PID=""
S=""           # the private cluster's directory

alive() {  # a zombie (a daemon a signal ended, not yet reaped) is not alive
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

stop_slurm() {
  [ ${#PIDS[@]} -eq 0 ] && return 0
  # Our cluster's running jobs first (a running job's slurmstepd outlives its
  # slurmd); pending ones go with the controller.
  if [ -n "$CTLD_PID" ] && alive "$CTLD_PID"; then
    timeout 10 scancel --quiet --state=RUNNING 2>/dev/null || true
    for _ in $(seq 25); do
      [ -z "$(timeout 5 squeue -h -t R,CG -o %i 2>/dev/null || true)" ] && break
      sleep 0.2
    done
  fi
  local i pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local any=0
    for pid in "${PIDS[@]}"; do alive "$pid" && any=1; done
    [ $any = 0 ] && break
    sleep 0.2
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  # slurmstepd processes of our nodes (their command line names our spool dir): ours too.
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$S/"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  PIDS=()
  [ -n "$S" ] && cp "$S"/log/*.log "$OUT/" 2>/dev/null || true
  log "slurm stopped (the daemons this script started)"
}

cleanup() {
  local rc=$?
  trap '' INT TERM  # a second Ctrl-C (or the pending one) must not cut the cleanup short
  set +e
  stop_slurm
  if [ -n "$S" ] && [ $KEEP = 0 ]; then rm -rf "$S"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_ctld() {  # a fresh controller: -c, no jobs from before
  slurmctld -D -c -i -f "$SLURM_CONF" >>"$S/log/slurmctld.out" 2>&1 &
  CTLD_PID=$!
  PIDS+=("$CTLD_PID")
  for _ in $(seq 300); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
}

wait_nodes_idle() {
  local idle=0
  for _ in $(seq 300); do
    idle=$(sinfo -h -p gpu -t idle -o %D 2>/dev/null | head -1 || true)
    [ "${idle:-0}" = "$NODES" ] && break
    sleep 0.2
  done
  if [ "${idle:-0}" != "$NODES" ]; then
    echo "slurm did not come up ($idle of $NODES nodes idle); logs in $S/log" >&2
    sinfo >&2 || true
    KEEP=1
    exit 1
  fi
}

start_slurmd() {
  SLURMD_PIDS=()
  for n in $(seq "$NODES"); do
    slurmd -D -N "n$n" -f "$SLURM_CONF" >>"$S/log/slurmd.n$n.out" 2>&1 &
    SLURMD_PIDS+=($!)
    PIDS+=($!)
  done
}

# Between submission rounds: the thousands of jobs a round left in the sink partition
# go with a fresh controller and fresh slurmd (scancel sends one RPC a job, and the
# controller stalled for minutes on 12,000 of them; a new controller alone waits
# a minute for the old slurmd to register again). munged stays.
restart_slurm() {
  local old=("${SLURMD_PIDS[@]}" "$CTLD_PID") pid
  for pid in "${old[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local any=0
    for pid in "${old[@]}"; do alive "$pid" && any=1; done
    [ $any = 0 ] && break
    sleep 0.2
  done
  for pid in "${old[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=("$MUNGED_PID")
  start_ctld
  start_slurmd
  wait_nodes_idle
}

start_slurm() {
  install_missing
  local p
  for p in $CTLD_PORT $(seq $NODE_PORT0 $((NODE_PORT0 + NODES - 1))); do
    port_free "$p" || { echo "port $p is in use (another Slurm?): stop it first" >&2; exit 1; }
  done
  S=$(mktemp -d /tmp/berth-slurm.XXXXXX)
  chmod 755 "$S"
  mkdir -p "$S"/{munge,state,log,run,gpus}
  chmod 755 "$S/munge"
  local user host last=$((NODE_PORT0 + NODES - 1))
  user=$(id -un)
  host=$(hostname -s)
  for n in $(seq "$NODES"); do mkdir -p "$S/spool/n$n"; done
  for g in $(seq 0 $((GPUS - 1))); do ln -s /dev/null "$S/gpus/gpu$g"; done

  dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$S/munge/munge.key"
  munged -F --key-file="$S/munge/munge.key" --socket="$S/munge/munge.socket" \
    --pid-file="$S/munge/munged.pid" --seed-file="$S/munge/munged.seed" --num-threads=4 \
    >"$S/log/munged.log" 2>&1 &
  MUNGED_PID=$!
  PIDS+=("$MUNGED_PID")
  for _ in $(seq 50); do [ -S "$S/munge/munge.socket" ] && break; sleep 0.1; done

  cat >"$S/slurm.conf" <<EOF
ClusterName=berthbench
SlurmctldHost=$host
SlurmctldPort=$CTLD_PORT
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.%n.log
SlurmctldDebug=${SLURMCTLD_DEBUG:-error}
SlurmdDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$S/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
MinJobAge=2
MaxJobCount=1000000
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
${SCHED_PARAMS:+SchedulerParameters=$SCHED_PARAMS}
NodeName=n[1-$NODES] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$NODE_PORT0-$last] CPUs=$GPUS Sockets=1 CoresPerSocket=$GPUS ThreadsPerCore=1 RealMemory=8000 Gres=gpu:$GPUS State=UNKNOWN
PartitionName=gpu Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP
PartitionName=sink Nodes=n[1-$NODES] MaxTime=INFINITE State=DOWN
EOF
  echo "NodeName=n[1-$NODES] Name=gpu File=$S/gpus/gpu[0-$((GPUS - 1))]" >"$S/gres.conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n' \
    >"$S/cgroup.conf"
  export SLURM_CONF=$S/slurm.conf

  start_ctld
  start_slurmd
  wait_nodes_idle
  log "slurm $(sinfo -V | awk '{print $2}') up in $S: $NODES nodes × $GPUS GPUs (pids ${PIDS[*]})"
  cc -O2 -o "$S/slurm_submit" "$ROOT/bench/slurm_submit.c" -lslurm
}

slurm_measure() {  # JSON [compare_slurm.py slurm flags]
  local pids
  pids=$(IFS=,; echo "${PIDS[*]}")
  python3 "$ROOT/bench/compare_slurm.py" slurm --json "$1" --client "$S/slurm_submit" \
    --pids "$pids" --jobcomp "$S/jobcomp.log" --nodes $NODES --gpus-per-node $GPUS "${@:2}" 2>&1 \
    | tee -a "$OUT/run.log"
}

berth_api() {  # JSON
  log "berth: bench_api.py (DATABASE_URL=${DATABASE_URL:-bench_api.py\'s default})"
  (cd "$ROOT" && "$PYTHON" bench/bench_api.py --duration "$DURATION" --clients "$CLIENTS" \
    --bulk-duration 5 --json "$1") 2>&1 | grep -v -e UserWarning -e mw_instance | tee -a "$OUT/run.log"
}

if [ $RUN_BERTH = 1 ] && [ ! -x "$PYTHON" ]; then
  echo "no python at $PYTHON (make install, or set PYTHON)" >&2
  exit 1
fi
if [ $RUN_SLURM = 1 ]; then
  start_slurm
  slurm_measure "$OUT/slurm.json" --duration 0 --idle-jobs "$IDLE_JOBS" --backlog-jobs "$BACKLOG_JOBS"
fi
# Single submissions alternate, Slurm then Berth, --rounds times: the machine is noisy.
# (Slurm's daemons stay up, idle, while Berth runs.)
for r in $(seq "$ROUNDS"); do
  log "submissions, round $r of $ROUNDS: $(uptime)"
  if [ $RUN_SLURM = 1 ]; then
    slurm_measure "$OUT/slurm_submit_$r.json" --idle-jobs 0 --backlog-jobs 0 \
      --duration "$DURATION" --clients "$CLIENTS"
    [ "$r" -lt "$ROUNDS" ] && restart_slurm
  fi
  [ $RUN_BERTH = 1 ] && berth_api "$OUT/berth_api_$r.json"
done
if [ $RUN_SLURM = 1 ]; then
  log "load after slurm: $(uptime)"
  stop_slurm
fi
if [ $RUN_BERTH = 1 ]; then
  if [ -f "$ROOT/bench/bench_e2e.py" ]; then
    log "berth: bench_e2e.py"
    (cd "$ROOT" && "$PYTHON" bench/bench_e2e.py --json "$OUT/berth_e2e.json" --nodes $NODES \
      --gpus-per-node $GPUS --idle-jobs "$IDLE_JOBS" --backlog-jobs "$BACKLOG_JOBS") 2>&1 \
      | tee -a "$OUT/run.log"
  else
    log "berth: bench/bench_e2e.py is not in this tree: jobs completed/s and submit→running" \
      "are not measured for Berth (the table says 'not measured')"
  fi
  log "load after berth: $(uptime)"
fi

# --- the table --------------------------------------------------------------------

table=(--slurm "$OUT/slurm.json" --e2e "$OUT/berth_e2e.json")
for r in $(seq "$ROUNDS"); do
  table+=(--slurm "$OUT/slurm_submit_$r.json" --api "$OUT/berth_api_$r.json")
done
python3 "$ROOT/bench/compare_slurm.py" table "${table[@]}" | tee "$OUT/table.md"
echo "figures, logs and the table: $OUT"
