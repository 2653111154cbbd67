#!/usr/bin/env bash
# What measuring usage costs the manager (issue 16), with and without it in one run: AGENTS
# fake agents (crates/cli/examples/swarm.rs) with KERNELS kernels each, heartbeats every
# second (five times the agents' default `--usage-interval`) with a usage sample of every
# kernel (`--usage`) or without: the manager's CPU over HOLD seconds of steady state. A node's
# side (reading 100 kernels' cgroups, the heartbeat's JSON) is `cargo bench -p berth-agent
# --bench usage`.
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

echo "== machine: $(nproc) CPUs, $(uname -r), $(date -u '+%F %H:%M')Z, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== one manager, $AGENTS fake agents x $KERNELS kernels, heartbeats every second, ${HOLD}s"
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
