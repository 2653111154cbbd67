#!/usr/bin/env bash
# Tenancy benchmarks (issue 6): submissions/s with quotas on 10 projects and 100 users against
# the same without quotas, and the cost of one authenticated request. Each run gets a fresh
# `berth up` on a temp data dir. Prints the figures; docs/perf.md keeps the ones we report.
#
#   bench/tenancy.sh [SUBMIT_SECS=10] [CLIENTS=8] [AUTH_REQUESTS=2000]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
CLIENTS=${2:-8}
AUTH_N=${3:-2000}

cargo build --release --quiet --bin berth --example tenancy_bench
T=${CARGO_TARGET_DIR:-target}
BIN=$T/release/berth
TB=$T/release/examples/tenancy_bench

run_with_berth() {
  local tmp pid url token
  tmp=$(mktemp -d)
  HOME=$tmp XDG_CONFIG_HOME= "$BIN" up --data-dir "$tmp/data" --listen 127.0.0.1:0 >"$tmp/up.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do
    url=$(grep -o 'http://[0-9.:]*' "$tmp/up.log" | head -n1 || true)
    [ -n "$url" ] && break
    sleep 0.05
  done
  [ -n "$url" ] || { cat "$tmp/up.log"; kill "$pid"; exit 1; }
  for _ in $(seq 1 100); do
    HOME=$tmp XDG_CONFIG_HOME= "$BIN" nodes -o json | grep -q '"ready"' && break
    sleep 0.05
  done
  token=$(sed -n 's/^token *= *"\(.*\)"/\1/p' "$tmp/.config/berth/credentials")
  BERTH_URL=$url BERTH_TOKEN=$token BENCH_NODE_CPUS=$(nproc) "$TB" "$@" || true
  kill -INT "$pid"; wait "$pid" || true
  rm -rf "$tmp"
}

echo "== machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
echo "== 1. submissions/s without quotas, then with quotas (10 projects, 100 users, $CLIENTS clients, ${SECS}s)"
run_with_berth submit "$SECS" "$CLIENTS" no-quotas
run_with_berth submit "$SECS" "$CLIENTS" quotas
echo "== 2. cost of one authenticated request ($AUTH_N sequential requests each)"
run_with_berth auth "$AUTH_N"
