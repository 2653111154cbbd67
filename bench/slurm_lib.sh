# Shared by the bench scripts that run real Slurm beside berth (source it after `set -euo
# pipefail`, needs root): `slurm_start` starts a single-node Slurm 22.05 (Debian's slurm-wlm:
# munged, slurmdbd on a throwaway MariaDB, slurmctld, slurmd) in a temp dir under /var/tmp, all
# on 127.0.0.1, and exports SLURM_CONF; `slurm_stop` stops it and removes the dir (call it from
# an EXIT trap); bench/lib.sh's free_port first. N and ARRAY, when set, size MaxJobCount and MaxArraySize.
#   apt-get install -y slurm-wlm slurmdbd mariadb-server munge

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
MaxJobCount=$((2 * ${N:-1000} + ${ARRAY:-1000} + 1000))
MaxArraySize=$((${ARRAY:-1000} + 1))
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
