#!/usr/bin/env bash
# Failover figure (issue 4): a manager and two agents, each in its own network namespace
# (crates/cli/tests/support/netns.rs); a `--requeue` job runs on a1, a1's agent is SIGKILLed,
# and the figure is the time from the kill to the job's PENDING and RUNNING-on-a2 transitions
# (the manager's recorded times). Needs root. docs/perf.md ("Failover") keeps the figures.
#
#   bench/failover.sh [ROUNDS=3] [HEARTBEAT_TIMEOUT]     (default: the manager's default, 30s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
export BERTH_BENCH_HEARTBEAT_TIMEOUT=${2:-}
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/failover.sh needs root: it creates network namespaces" >&2
  exit 1
fi
cargo build --quiet -p berth-cli --bin berth --tests
for _ in $(seq 1 "$ROUNDS"); do
  cargo test --quiet -p berth-cli --test e2e_cluster -- --ignored --exact failover_figure --nocapture 2>&1 |
    grep -E '^(failover|SKIPPED)'
done
