#!/usr/bin/env bash
# What measuring usage costs (issue 16), both ends, with and without it in one run:
#
# 1. A node: `berth up` (manager and agent in one process) with KERNELS real process kernels
#    (`sleep`), measuring every second (`--usage-interval 1s`, five times the default rate)
#    against not measuring (`--usage-interval 0`): the process's CPU over HOLD seconds.
# 2. The manager: AGENTS fake agents (crates/cli/examples/swarm.rs) with KERNELS kernels each,
#    heartbeats every second with a usage sample of every kernel (`--usage`) or without: the
#    manager's CPU over HOLD seconds of steady state.
#
#   bench/usage-cost.sh [KERNELS=100] [AGENTS=50] [HOLD=20]
#
# BIN_DIR=DIR runs the `berth` and `swarm` binaries in DIR instead of building this tree's.
# docs/perf.md keeps the figures we report.
set -euo pipefail
cd "$(dirname "$0")/.."
KERNELS=${1:-100}
AGENTS=${2:-50}
HOLD=${3:-20}

source bench/lib.sh
swarm_bins

# CPU seconds (user + system) of process $1 so far.
cpu_s() {
  awk -v t="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"
}

echo "== machine: $(nproc) CPUs, $(uname -r), $(date -u '+%F %H:%M')Z, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 1. one node, $KERNELS process kernels, ${HOLD}s"
for interval in 0 1s; do
  tmp=$(mktemp -d)
  HOME=$tmp XDG_CONFIG_HOME= "$BIN" up --data-dir "$tmp/data" --listen 127.0.0.1:0 --usage-interval "$interval" \
    --stop-jobs >"$tmp/up.log" 2>&1 &
  pid=$!
  url=$(berth_url "$tmp/up.log") || { kill "$pid"; exit 1; }
  for _ in $(seq 1 100); do
    HOME=$tmp XDG_CONFIG_HOME= "$BIN" nodes -o json 2>/dev/null | grep -q '"ready"' && break
    sleep 0.05
  done
  cpus=$(awk -v n="$KERNELS" -v c="$(nproc)" 'BEGIN { printf "%.3f", c / n }')
  for _ in $(seq 1 "$KERNELS"); do
    HOME=$tmp XDG_CONFIG_HOME= "$BIN" submit --cpus "$cpus" --mem 16MiB -- sleep 600 >/dev/null
  done
  for _ in $(seq 1 600); do
    n=$(HOME=$tmp XDG_CONFIG_HOME= "$BIN" ps --state RUNNING -o json | grep -c '"id"' || true)
    [ "$n" -ge "$KERNELS" ] && break
    sleep 0.1
  done
  sleep 3
  c0=$(cpu_s "$pid")
  sleep "$HOLD"
  c1=$(cpu_s "$pid")
  awk -v a="$c0" -v b="$c1" -v h="$HOLD" -v i="$interval" -v n="$n" \
    'BEGIN { printf "usage-interval %-3s %d kernels running: berth up CPU %.2fs over %ds = %.2f%% of one core\n", i, n, b - a, h, 100 * (b - a) / h }'
  kill -INT "$pid"; wait "$pid" || true
  rm -rf "$tmp"
done

echo "== 2. one manager, $AGENTS fake agents x $KERNELS kernels, heartbeats every second, ${HOLD}s"
for usage in "" --usage; do
  tmp=$(mktemp -d)
  pid=
  start_manager "$tmp"
  BERTH_URL=$url BERTH_TOKEN=$token BERTH_JOIN_TOKEN=$join "$SWARM" --agents "$AGENTS" --cpus "$KERNELS" \
    --jobs $((AGENTS * KERNELS)) --run-ms $(((HOLD + 30) * 1000)) --hold-s "$HOLD" --manager-pid "$pid" $usage \
    | grep -E 'steady state|submitted'
  kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  rm -rf "$tmp"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
