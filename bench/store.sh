#!/usr/bin/env bash
# The foundation figures on each store (issue 18), side by side in one run: `berth manager`
# (release build) with one local `berth agent`, first on SQLite in its data dir (the default),
# then on PostgreSQL: a throwaway cluster of Debian's `postgresql` (initdb + pg_ctl in a temp
# dir, its default settings: fsync and synchronous_commit on). Figures: idle submit->start
# latency, makespan of N trivial 1-CPU jobs from 8 clients, sustained submissions/s.
#
#   bench/store.sh [LATENCY_JOBS=100] [MAKESPAN_JOBS=1000] [SUBMIT_SECS=10]
#
# BENCH_BIN_DIR=DIR runs prebuilt release `berth` and `loadgen` from DIR. Needs root (the
# cluster runs as the `postgres` user). docs/perf.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
LAT_N=${1:-100}
MAKE_N=${2:-1000}
SUB_SECS=${3:-10}

if [ -n "${BENCH_BIN_DIR:-}" ]; then
  BIN=$BENCH_BIN_DIR/berth LOADGEN=$BENCH_BIN_DIR/loadgen
else
  cargo build --release --quiet --bin berth --example loadgen
  BIN=${CARGO_TARGET_DIR:-target}/release/berth
  LOADGEN=${CARGO_TARGET_DIR:-target}/release/examples/loadgen
fi
BIN=$(realpath "$BIN") LOADGEN=$(realpath "$LOADGEN")
source bench/lib.sh
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
[ -x "$pgbin/initdb" ] || { echo "no PostgreSQL: apt-get install postgresql" >&2; exit 1; }

pg=$(mktemp -d)
chown postgres: "$pg"
pgport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
stop_pg() { runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg/data" -m fast stop >/dev/null 2>&1 || true; rm -rf "$pg"; }
trap stop_pg EXIT
runuser -u postgres -- "$pgbin/initdb" -D "$pg/data" -A trust -U postgres -E UTF8 >/dev/null
runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg/data" -l "$pg/log" -w \
  -o "-p $pgport -k $pg -c listen_addresses=127.0.0.1" start >/dev/null

# Runs TOOL ARGS against a fresh manager on STORE ("" = SQLite) with one local agent.
run_on_store() {
  local store=$1 tool=$2 tmp mpid apid url join token
  shift 2
  tmp=$(mktemp -d)
  local flags=()
  if [ -n "$store" ]; then
    PGOPTIONS="-c client_min_messages=warning" runuser -u postgres -- "$pgbin/psql" -q -h 127.0.0.1 -p "$pgport" -U postgres -c "DROP DATABASE IF EXISTS berth" -c "CREATE DATABASE berth" >/dev/null
    flags=(--store "$store")
  fi
  HOME=$tmp XDG_CONFIG_HOME= RUST_LOG=warn "$BIN" manager --data-dir "$tmp/data" --listen 127.0.0.1:0 "${flags[@]}" \
    >"$tmp/manager.log" 2>&1 &
  mpid=$!
  url=$(berth_url "$tmp/manager.log")
  join=$(sed -n 's/^join token for agents: *//p' "$tmp/manager.log")
  token=$(cat "$tmp/data/admin-token")
  (umask 077 && echo "$join" >"$tmp/join-token")
  HOME=$tmp RUST_LOG=warn "$BIN" agent --manager "$url" --join-token-file "$tmp/join-token" --name bench \
    --data-dir "$tmp/agent" >"$tmp/agent.log" 2>&1 &
  apid=$!
  for _ in $(seq 1 200); do
    BERTH_URL=$url BERTH_TOKEN=$token "$BIN" nodes -o json 2>/dev/null | grep -q '"ready"' && break
    sleep 0.05
  done
  BERTH_URL=$url BERTH_TOKEN=$token BENCH_NODE_CPUS=$(nproc) "$tool" "$@" || true
  kill -INT "$apid"; wait "$apid" || true
  kill -INT "$mpid"; wait "$mpid" || true
  rm -rf "$tmp"
}

echo "== machine: $(nproc) CPUs, $(uname -r), $("$pgbin/postgres" --version), $(date -u '+%F %H:%M')Z"
for store in "" "postgres://postgres@127.0.0.1:$pgport/berth"; do
  echo "== store: ${store:-SQLite (the data dir)}"
  echo "-- 1. idle submit->start latency ($LAT_N sequential jobs)"
  run_on_store "$store" "$LOADGEN" latency "$LAT_N"
  echo "-- 2. makespan of $MAKE_N trivial 1-CPU jobs"
  run_on_store "$store" "$LOADGEN" makespan "$MAKE_N"
  echo "-- 3. sustained submissions/s, 8 clients, ${SUB_SECS}s, jobs wait in the queue"
  run_on_store "$store" "$LOADGEN" submit-rate "$SUB_SECS" 8
done
