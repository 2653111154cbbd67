#!/usr/bin/env bash
# What the kernel shim (`berth kernel-shim`, which lets process kernels survive an agent
# crash) costs a start: idle submit->start latency and the makespan of trivial jobs, with the
# shim and with `--no-kernel-shim`, interleaved ROUNDS times on fresh `berth up`s.
#
#   bench/shim.sh [ROUNDS=3] [LATENCY_JOBS=200] [MAKESPAN_JOBS=500]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
LAT_N=${2:-200}
MAKE_N=${3:-500}

cargo build --release --quiet --bin berth --example loadgen
BIN=target/release/berth
LOADGEN=target/release/examples/loadgen

source bench/lib.sh

echo "== machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
for round in $(seq 1 "$ROUNDS"); do
  for flags in "" "--no-kernel-shim"; do
    echo "== round $round: ${flags:-with the shim}: latency ($LAT_N jobs), makespan ($MAKE_N jobs)"
    BERTH_UP_FLAGS=$flags run_with_berth "$LOADGEN" latency "$LAT_N"
    BERTH_UP_FLAGS=$flags run_with_berth "$LOADGEN" makespan "$MAKE_N"
  done
done
