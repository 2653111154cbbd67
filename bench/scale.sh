#!/usr/bin/env bash
# Scale of one manager (issue 4): a fresh `berth manager` (SQLite store on a temp data dir, the
# default strict-FIFO queue), AGENTS fake agents from crates/cli/examples/swarm.rs (one
# process, real protocol, a runtime that only sleeps RUN_MS), JOBS 1-CPU jobs submitted by
# CLIENTS REST clients as fast as the API takes them. Prints submissions/s, jobs started/s,
# submit->start, the manager's CPU time and peak RSS, and the store's size. docs/perf.md keeps
# the figures we report.
#
#   bench/scale.sh [AGENTS=500] [JOBS=50000] [RUN_MS=1000] [CLIENTS=8]
#
# BIN_DIR=DIR runs the `berth` and `swarm` binaries in DIR instead of building this tree's
# (to compare builds side by side: copy each build's target/release/berth and
# target/release/examples/swarm into a directory of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTS=${1:-500}
JOBS=${2:-50000}
RUN_MS=${3:-1000}
CLIENTS=${4:-8}

source bench/lib.sh
swarm_bins

tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start_manager "$tmp"

echo "== machine: $(nproc) CPUs, $(uname -r), $(date -u '+%F %H:%M')Z, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== one manager ($url), $AGENTS agents, $JOBS jobs of 1 CPU running ${RUN_MS} ms, $CLIENTS clients"
BERTH_URL=$url BERTH_TOKEN=$token BERTH_JOIN_TOKEN=$join "$SWARM" --agents "$AGENTS" --jobs "$JOBS" \
  --run-ms "$RUN_MS" --clients "$CLIENTS" --manager-pid "$pid"
echo "store: $(du -cb "$tmp"/data/berth.db* | tail -n1 | awk '{printf "%.1f MiB", $1 / 1048576}') ($(ls "$tmp"/data | grep berth.db | tr '\n' ' '))"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if grep -qiE 'warn|error' "$tmp/manager.log"; then
  echo "manager warnings (first 10):"
  grep -iE 'warn|error' "$tmp/manager.log" | head -n 10
fi
