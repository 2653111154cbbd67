#!/usr/bin/env bash
# Foundation benchmarks (issue 2): idle submit→start latency, makespan of 1,000 trivial jobs,
# sustained submissions/s from 8 clients. Each figure runs against a fresh `berth up` on a temp
# data dir with the machine's real CPUs (one local agent). Prints the figures; docs/perf.md
# keeps the ones we report. SUBMIT_SECS=0 skips the third. BERTH_UP_FLAGS passes flags to
# `berth up`. Process kernels are forked by the node's kernel supervisor (docs/perf.md).
#
#   bench/foundation.sh [LATENCY_JOBS=200] [MAKESPAN_JOBS=1000] [SUBMIT_SECS=10]
set -euo pipefail
cd "$(dirname "$0")/.."
LAT_N=${1:-200}
MAKE_N=${2:-1000}
SUB_SECS=${3:-10}

cargo build --release --quiet --bin berth --example loadgen
BIN=target/release/berth
LOADGEN=target/release/examples/loadgen

source bench/lib.sh

echo "== machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F) ${BERTH_UP_FLAGS:-}"
echo "== 1. idle submit->start latency ($LAT_N sequential jobs)"
run_with_berth "$LOADGEN" latency "$LAT_N"
echo "== 2. makespan of $MAKE_N trivial 1-CPU jobs"
run_with_berth "$LOADGEN" makespan "$MAKE_N"
if [ "$SUB_SECS" != 0 ]; then
  echo "== 3. sustained submissions/s, 8 clients, ${SUB_SECS}s, jobs wait in the queue"
  run_with_berth "$LOADGEN" submit-rate "$SUB_SECS" 8
fi
