#!/usr/bin/env bash
# Failover time of the control plane (issue 18): two `berth manager`s on one throwaway
# PostgreSQL (Debian's `postgresql`: initdb + pg_ctl in a temp dir, as the `postgres` user), one
# `berth agent` given both URLs. ROUNDS times, the leader is SIGKILLed and a job is submitted at
# once through both URLs (the CLI follows the leader); the figures are kill -> a standby leads
# (`GET /v1/leader`, polled every 50 ms) and kill -> that job RUNNING (its transition time, on
# the new leader's clock, which is this machine's). The killed manager comes back as a
# standby for the next round. Prints every round and the medians; docs/perf.md keeps them.
#
# Each manager runs in a PID namespace of its own (`unshare --pid`), as on separate machines: a
# standby cannot tell that the leader's process is gone and waits for its lease to run out.
# SAME_MACHINE=1 runs them side by side instead, where a standby sees the dead leader's pid
# and takes over at once (what a manager restarted after a crash does).
#
#   bench/ha.sh [ROUNDS=5] [LEASE_TIMEOUT=5s]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
LEASE=${2:-5s}

cargo build --release --quiet --bin berth
BIN=$(realpath target/release/berth)
source bench/lib.sh
tmp=$(mktemp -d)
declare -A mpid
apid=
cleanup() {
  [ -n "$apid" ] && { kill -INT "$apid" 2>/dev/null || true; wait "$apid" 2>/dev/null || true; }
  for k in "${!mpid[@]}"; do kill -9 "${mpid[$k]}" 2>/dev/null || true; wait "${mpid[$k]}" 2>/dev/null || true; done
  pg_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
pg_start
store=$(pg_fresh_db berth)
port=([0]=$(free_port) [1]=$(free_port))
urls=http://127.0.0.1:${port[0]},http://127.0.0.1:${port[1]}

# Starts manager K (0 or 1) and waits until it serves (as the leader or a standby).
start() {
  local k=$1 wrap=(unshare --pid --fork --kill-child --mount-proc)
  [ "${SAME_MACHINE:-0}" = 1 ] && wrap=()
  HOME=$tmp XDG_CONFIG_HOME= RUST_LOG=warn "${wrap[@]}" "$BIN" manager --data-dir "$tmp/m$k" --listen "127.0.0.1:${port[$k]}" \
    --no-apps --store "$store" --lease-timeout "$LEASE" >>"$tmp/m$k.log" 2>&1 &
  mpid[$k]=$!
  berth_url "$tmp/m$k.log" >/dev/null
}
# The index of the manager that leads now, or nothing.
leader() {
  for k in 0 1; do
    curl -s --max-time 1 "http://127.0.0.1:${port[$k]}/v1/leader" | grep -q '"role":"leader"' && { echo "$k"; return; }
  done
}

start 0
start 1
token=$(cat "$tmp/m0/admin-token")
(umask 077 && cat "$tmp/m0/join-token" >"$tmp/join-token")
HOME=$tmp RUST_LOG=warn "$BIN" agent --manager "$urls" --join-token-file "$tmp/join-token" --name bench \
  --data-dir "$tmp/agent" >"$tmp/agent.log" 2>&1 &
apid=$!
export BERTH_URL=$urls BERTH_TOKEN=$token
for _ in $(seq 1 200); do "$BIN" nodes -o json 2>/dev/null | grep -q '"ready"' && break; sleep 0.05; done

echo "== machine: $(nproc) CPUs, $(uname -r), $("$pg_bin/postgres" --version), $(date -u '+%F %H:%M')Z, load $(cut -d' ' -f1-3 /proc/loadavg)"
where="each in its own PID namespace (as on two machines)"
[ "${SAME_MACHINE:-0}" = 1 ] && where="side by side (one machine: a dead leader's pid is seen)"
echo "== two managers on PostgreSQL, $where, --lease-timeout $LEASE, one agent; $ROUNDS rounds of SIGKILL to the leader"
leads=() starts=()
for r in $(seq 1 "$ROUNDS"); do
  old=$(leader)
  [ -n "$old" ] || { echo "nobody leads before round $r" >&2; exit 1; }
  killed=$(date +%s.%N)
  kill -9 "${mpid[$old]}"; wait "${mpid[$old]}" 2>/dev/null || true
  "$BIN" submit -o json -- true >"$tmp/submit.json" &
  sub=$!
  until [ -n "$(leader)" ]; do sleep 0.05; done
  led=$(date +%s.%N)
  wait "$sub"
  id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$tmp/submit.json")
  for _ in $(seq 1 600); do
    at=$("$BIN" show "$id" -o json | python3 -c '
import json, sys, datetime
t = [t["at"] for t in json.load(sys.stdin)["transitions"] if t["to"] == "RUNNING"]
print(datetime.datetime.fromisoformat(t[0].replace("Z", "+00:00")).timestamp() if t else "")')
    [ -n "$at" ] && break
    sleep 0.05
  done
  l=$(python3 -c "print(f'{$led - $killed:.2f}')")
  s=$(python3 -c "print(f'{$at - $killed:.2f}')")
  leads+=("$l") starts+=("$s")
  echo "round $r: manager $old killed; a standby leads after ${l}s; job $id RUNNING after ${s}s"
  start "$old"
done
median() { printf '%s\n' "$@" | sort -n | python3 -c 'import sys, statistics; print(f"{statistics.median(float(x) for x in sys.stdin):.2f}")'; }
echo "median: a standby leads after $(median "${leads[@]}")s, the first new job RUNNING after $(median "${starts[@]}")s (of $ROUNDS)"
if grep -iE 'error|panic' "$tmp"/m*.log | grep -v 'lost the leadership' >&2; then echo "(errors above in the managers' logs)" >&2; fi
