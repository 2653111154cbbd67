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

source bench/lib.sh

echo "== machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
echo "== 1. submissions/s without quotas, then with quotas (10 projects, 100 users, $CLIENTS clients, ${SECS}s)"
run_with_berth "$TB" submit "$SECS" "$CLIENTS" no-quotas
run_with_berth "$TB" submit "$SECS" "$CLIENTS" quotas
echo "== 2. cost of one authenticated request ($AUTH_N sequential requests each)"
run_with_berth "$TB" auth "$AUTH_N"
