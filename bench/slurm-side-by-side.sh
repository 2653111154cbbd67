#!/usr/bin/env bash
# Slurm's commands, berth against real Slurm on one machine (issue 20), in one run:
#   1. a single-node Slurm 22.05 (Debian's slurm-wlm, slurmdbd on a throwaway MariaDB, munged),
#      all of it in a temp dir on 127.0.0.1, daemons started here and stopped at the end;
#   2. a fresh `berth up` (bench/lib.sh's run_with_berth) with its node drained;
#   3. N pending jobs in each, the node drained in both (Slurm: `sbatch --wrap true` from
#      SUBMIT_PARALLEL processes; berth: POST /v1/jobs over as many keep-alive connections),
#      the submit rate measured on both;
#   4. the same commands on both, RUNS times each (median, p90): squeue (default format and
#      `-h -o '%i %t'`), `squeue -u USER`, sacct over every job and `sacct -j ONE`, and berth's
#      own `berth ps` / `berth history`; berth's through `berth install-slurm-commands` links;
#   5. the 10,000-task array of `true` (submit time and makespan): Slurm's side only, until
#      berth has job arrays (ARRAY=0 skips it).
#
#   bench/slurm-side-by-side.sh [N=100000] [RUNS=10] [ARRAY=10000]
#
# Needs root (slurmd, munged, mariadbd run as root here) and
#   apt-get install -y slurm-wlm slurmdbd mariadb-server munge
# BENCH_BIN_DIR=DIR runs a prebuilt release `berth` from DIR. Prints Markdown tables;
# docs/perf.md keeps the figures. SIDES="slurm" or "berth" runs one side only;
# ARRAY_LIMIT (300) caps the array's makespan in seconds;
# SUBMIT_PARALLEL (8) is how many sbatch processes / API connections submit at once.
# Helper: bench/slurm-side-by-side.py.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
RUNS=${2:-10}
ARRAY=${3:-10000}
HELPER=$(realpath bench/slurm-side-by-side.py)

SIDES=${SIDES:-slurm berth}
if [[ $SIDES == *berth* ]]; then
  if [ -n "${BENCH_BIN_DIR:-}" ]; then
    BIN=$BENCH_BIN_DIR/berth
  else
    cargo build --release --quiet --bin berth
    BIN=${CARGO_TARGET_DIR:-target}/release/berth
  fi
  BIN=$(realpath "$BIN")
fi
source bench/lib.sh
for b in slurmctld slurmd slurmdbd munged mungekey mariadbd mariadb-install-db sbatch; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || {
    echo "no $b: apt-get install -y slurm-wlm slurmdbd mariadb-server munge" >&2; exit 1; }
done
export PATH=$PATH:/usr/sbin

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- Slurm: munged, mariadbd, slurmdbd, slurmctld, slurmd in SL (a temp dir) ----------------
SL=
slurm_pids=()
munge_link=
slurm_stop() {
  local p s
  # Job steps still running (an interrupted run): slurmstepd daemonizes, so find ours by the
  # spool dir they hold open.
  if [ -n "$SL" ]; then
    for s in $(ps -eo pid=,comm= | awk '$2 == "slurmstepd" { print $1 }'); do
      [ -n "$(ls -l "/proc/$s/fd" 2>/dev/null | grep -F "$SL/")" ] && kill -KILL "$s" 2>/dev/null || true
    done
  fi
  # newest first: slurmd, slurmctld, slurmdbd, mariadbd, munged
  for ((i = ${#slurm_pids[@]} - 1; i >= 0; i--)); do
    p=${slurm_pids[$i]}
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  slurm_pids=()
  if [ -n "$munge_link" ]; then
    rm -f /run/munge/munge.socket.2
    [ "$munge_link" = dir ] && rmdir /run/munge 2>/dev/null || true
    munge_link=
  fi
  [ -n "$SL" ] && [ -z "${KEEP_SLURM_DIR:-}" ] && rm -rf "$SL"
  SL=
}
trap slurm_stop EXIT

# Waits up to 30 s for CMD to succeed.
wait_for() {
  for _ in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timed out waiting for: $*" >&2
  return 1
}

slurm_start() {
  SL=$(mktemp -d /var/tmp/slurm-bench.XXXXXX)
  chmod 755 "$SL"
  local host mem dbport dbdport ctldport slurmdport
  host=$(hostname -s)
  mem=$(awk '/MemTotal/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
  dbport=$(free_port) dbdport=$(free_port) ctldport=$(free_port) slurmdport=$(free_port)
  mkdir -p "$SL"/{munge,db,state,spool,log}
  chmod 700 "$SL/munge"

  mungekey --create --keyfile="$SL/munge/munge.key" --force
  chmod 600 "$SL/munge/munge.key"
  munged --foreground --force --socket="$SL/munge/munge.sock" --key-file="$SL/munge/munge.key" \
    --pid-file="$SL/munge/munged.pid" --seed-file="$SL/munge/munge.seed" --log-file="$SL/log/munged.log" \
    >>"$SL/log/munged.out" 2>&1 &
  slurm_pids+=($!)
  wait_for test -S "$SL/munge/munge.sock"
  # slurmd, slurmctld and squeue take AuthInfo=socket=...; sacct and sacctmgr (talking to
  # slurmdbd) use libmunge's default socket whatever it says: link that one to ours while
  # this runs, when no munged owns it.
  if [ ! -e /run/munge/munge.socket.2 ]; then
    if [ -d /run/munge ]; then munge_link=link; else mkdir -p /run/munge; munge_link=dir; fi
    ln -s "$SL/munge/munge.sock" /run/munge/munge.socket.2
  elif ! munge -n | unmunge >/dev/null 2>&1; then
    echo "/run/munge/munge.socket.2 exists and does not answer: stop that munged first" >&2
    return 1
  else
    echo "a system munged answers on /run/munge/munge.socket.2 with another key: sacct will fail" >&2
    return 1
  fi

  mariadb-install-db --datadir="$SL/db" --user=root --auth-root-authentication-method=normal \
    --skip-test-db >"$SL/log/mariadb-install.log" 2>&1
  mariadbd --no-defaults --datadir="$SL/db" --socket="$SL/mysql.sock" --port="$dbport" \
    --bind-address=127.0.0.1 --user=root --pid-file="$SL/mariadb.pid" --log-error="$SL/log/mariadb.log" \
    --innodb-buffer-pool-size=1G --innodb-lock-wait-timeout=900 --max-allowed-packet=64M &
  slurm_pids+=($!)
  wait_for mariadb --no-defaults -S "$SL/mysql.sock" -u root -e 'SELECT 1'

  cat >"$SL/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$SL/munge/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbdport
SlurmUser=root
LogFile=$SL/log/slurmdbd.log
PidFile=$SL/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=root
StorageLoc=slurm_acct_db
CONF
  chmod 600 "$SL/slurmdbd.conf"
  cat >"$SL/slurm.conf" <<CONF
ClusterName=bench
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctldport
SlurmdPort=$slurmdport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SL/munge/munge.sock
StateSaveLocation=$SL/state
SlurmdSpoolDir=$SL/spool/%n
SlurmctldPidFile=$SL/slurmctld.pid
SlurmdPidFile=$SL/slurmd.pid
SlurmctldLogFile=$SL/log/slurmctld.log
SlurmdLogFile=$SL/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MaxJobCount=$((2 * N + ARRAY + 1000))
MaxArraySize=$((ARRAY + 1))
MinJobAge=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbdport
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$SL/slurm.conf
  slurmdbd -D >>"$SL/log/slurmdbd.out" 2>&1 &
  slurm_pids+=($!)
  wait_for sacctmgr -n list cluster
  sacctmgr -i add cluster bench >/dev/null 2>&1 || true
  slurmctld -D -i >>"$SL/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  wait_for squeue -h
  slurmd -D -N "$host" >>"$SL/log/slurmd.out" 2>&1 &
  slurm_pids+=($!)
  wait_for bash -c "sinfo -h -o %t | grep -q idle"
}

RESULTS=$(mktemp /var/tmp/slurm-side-by-side.XXXXXX)
trap 'slurm_stop; rm -f "$RESULTS" "$RESULTS.submit" "$RESULTS.array"' EXIT
SACCT_ALL=(-X -n -S 2026-01-01 --parsable2 -o JobID,State)
# Times CMD on SYSTEM (slurm or berth) under LABEL, the same label on both sides.
t() { python3 "$HELPER" time "$RESULTS" "$@"; }
P=${SUBMIT_PARALLEL:-8}

# ---- the 10,000-task array of `true` ---------------------------------------------------------
# Slurm's side: submit time, and the makespan from the submit until squeue lists none of the
# tasks; berth's the same through its own sbatch, until the array has ended.
slurm_array() {
  local t0 t1 t2 jid left
  t0=$(date +%s.%N)
  jid=$(sbatch --parsable --array=1-"$ARRAY" -J array -o /dev/null --wrap true)
  t1=$(date +%s.%N)
  [ -n "$jid" ]
  # ARRAY_LIMIT seconds at most: then the tasks left are cancelled and counted.
  left=0
  while :; do
    left=$(squeue -h -r -t PD,CF,R,CG -o %i | wc -l)
    [ "$left" -eq 0 ] && break
    if python3 -c "import sys, time; sys.exit(time.time() - float(sys.argv[1]) < float(sys.argv[2]))" "$t0" "${ARRAY_LIMIT:-300}"; then
      scancel "$jid"
      while [ "$(squeue -h -o %i | wc -l)" -gt 0 ]; do sleep 0.5; done
      break
    fi
    sleep 0.2
  done
  t2=$(date +%s.%N)
  python3 -c "import sys; t0, t1, t2 = map(float, sys.argv[1:4]); n, left = int(sys.argv[4]), int(sys.argv[5]); \
print('slurm: %d-task array of true: submit %.2f s, ' % (n, t1 - t0) + ('makespan %.1f s (%.0f tasks/s)' % (t2 - t0, n / (t2 - t0)) if left == 0 else \
'not done after %.0f s: %d of %d tasks ran (%.1f tasks/s), the rest cancelled' % (t2 - t0, n - left, n, (n - left) / (t2 - t0))))" \
    "$t0" "$t1" "$t2" "$ARRAY" "$left" | tee -a "$RESULTS.array"
}
berth_array() {
  local links=$1 t0 t1 t2 jid state made
  t0=$(date +%s.%N)
  jid=$("$links/sbatch" --parsable --array=1-"$ARRAY" -J array --wrap true)
  t1=$(date +%s.%N)
  [ -n "$jid" ]
  # ARRAY_LIMIT seconds at most, as Slurm's: then the array is cancelled and its tasks counted.
  while :; do
    state=$("$BIN" show "$jid" -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["job"]["state"])')
    [ "$state" != PENDING ] && break
    if python3 -c "import sys, time; sys.exit(time.time() - float(sys.argv[1]) < float(sys.argv[2]))" "$t0" "${ARRAY_LIMIT:-300}"; then
      "$BIN" cancel "$jid" >/dev/null
      break
    fi
    sleep 0.2
  done
  t2=$(date +%s.%N)
  made=$("$BIN" ps -a -o json --limit 100000 | python3 -c "import json, sys; \
print(sum(1 for j in json.load(sys.stdin) if (j.get('array_task') or {}).get('array_id') == $jid and j['state'] == 'SUCCEEDED'))")
  python3 -c "import sys; t0, t1, t2 = map(float, sys.argv[1:4]); n, done = int(sys.argv[4]), int(sys.argv[5]); \
print('berth: %d-task array of true: submit %.2f s, ' % (n, t1 - t0) + ('makespan %.1f s (%.0f tasks/s)' % (t2 - t0, n / (t2 - t0)) if done == n else \
'not done after %.0f s: %d of %d tasks ran (%.1f tasks/s), the rest cancelled' % (t2 - t0, done, n, done / (t2 - t0))))" \
    "$t0" "$t1" "$t2" "$ARRAY" "$made" | tee -a "$RESULTS.array"
}

# ---- Slurm ------------------------------------------------------------------------------------
if [[ $SIDES == *slurm* ]]; then
echo "== Slurm $(dpkg-query -W -f '${Version}' slurm-wlm 2>/dev/null), $(nproc) CPUs, N=$N" >&2
slurm_start
[ "$ARRAY" -gt 0 ] && slurm_array
t0=$(date +%s.%N)
# The node drained, as berth's below: the jobs stay PENDING and eligible (sacct's time window
# leaves held jobs out: they were never eligible).
scontrol update NodeName="$(hostname -s)" State=DRAIN Reason=slurm-side-by-side
seq 1 "$N" | xargs -P "$P" -I{} sbatch -J b{} -o /dev/null --wrap true >/dev/null
t1=$(date +%s.%N)
python3 -c "import sys; dt = float(sys.argv[2]) - float(sys.argv[1]); \
print('slurm: submitted %d jobs in %.1f s (%.0f/s, sbatch from %s parallel processes)' % (int(sys.argv[3]), dt, int(sys.argv[3]) / dt, sys.argv[4]))" \
  "$t0" "$t1" "$N" "$P" | tee -a "$RESULTS.submit"
# Let slurmdbd catch up (sdiag's DBD agent queue) before timing anything.
for _ in $(seq 1 600); do
  q=$(sdiag | sed -n 's/^DBD Agent queue size: *//p')
  [ "${q:-0}" -eq 0 ] && break
  sleep 1
done
for _ in $(seq 1 300); do
  [ "$(sacct "${SACCT_ALL[@]}" | wc -l)" -ge "$N" ] && break
  sleep 1
done
one=$(squeue -h -o %i | sort -n | sed -n "$(( (N + 1) / 2 ))p")
me=$(id -un)
t slurm "squeue" "$RUNS" squeue
t slurm "squeue -h -o '%i %t'" "$RUNS" squeue -h -o '%i %t'
t slurm "squeue -u USER" "$RUNS" squeue -u "$me"
t slurm "sacct ${SACCT_ALL[*]}" "$RUNS" sacct "${SACCT_ALL[@]}"
t slurm "sacct -j ONE_ID" "$RUNS" sacct -j "$one"
slurm_stop
fi

# ---- berth ------------------------------------------------------------------------------------
berth_side() {
  local links node one me
  links=$(mktemp -d)
  "$BIN" install-slurm-commands "$links" >/dev/null
  # The array first: the node is drained for the pending-jobs figures below.
  [ "$ARRAY" -gt 0 ] && { berth_array "$links" || true; }
  node=$(curl -fsS -H "Authorization: Bearer $BERTH_TOKEN" "$BERTH_URL/v1/nodes" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["name"])')
  curl -fsS -X POST -H "Authorization: Bearer $BERTH_TOKEN" -H 'Content-Type: application/json' \
    -d '{"reason": "slurm-side-by-side: jobs stay pending"}' "$BERTH_URL/v1/nodes/$node/drain" >/dev/null
  python3 "$HELPER" submit-berth "$N" "$P" | tee -a "$RESULTS.submit"
  sleep 2
  one=$("$links/squeue" -h -o %i | sort -n | sed -n "$(( (N + 1) / 2 ))p")
  me=$("$links/squeue" -h -o %u | head -n1)
  t berth "squeue" "$RUNS" "$links/squeue"
  t berth "squeue -h -o '%i %t'" "$RUNS" "$links/squeue" -h -o '%i %t'
  t berth "squeue -u USER" "$RUNS" "$links/squeue" -u "$me"
  t berth "sacct ${SACCT_ALL[*]}" "$RUNS" "$links/sacct" "${SACCT_ALL[@]}"
  t berth "sacct -j ONE_ID" "$RUNS" "$links/sacct" -j "$one"
  t berth "berth ps" "$RUNS" "$BIN" ps
  t berth "berth history --since 2026-01-01" "$RUNS" "$BIN" history --since 2026-01-01
  rm -rf "$links"
}
if [[ $SIDES == *berth* ]]; then
  echo "== berth ($("$BIN" --version)), N=$N" >&2
  BERTH_UP_FLAGS="--no-docker --no-cache" run_with_berth berth_side
fi

# ---- the figures --------------------------------------------------------------------------------
echo
echo "Submit, $N jobs:"
sed 's/^/- /' "$RESULTS.submit"
[ -f "$RESULTS.array" ] && { echo; echo "Arrays:"; sed 's/^/- /' "$RESULTS.array"; }
echo
echo "Response time, $RUNS runs each, $N pending jobs in each store:"
echo
python3 "$HELPER" table "$RESULTS"
