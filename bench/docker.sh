#!/usr/bin/env bash
# Container figures (issue 5), on this machine in one run, each against a fresh `berth up`
# (one local agent with the machine's CPUs, Docker through its API):
#  1. idle submit->start latency of container jobs (manager's clock: submitted_at -> RUNNING,
#     i.e. the agent's `Started` after the container started), vs. the same for process jobs;
#  2. makespan of N trivial 1-CPU container jobs (`true`), 8 clients submitting, vs. process
#     jobs;
#  3. plain `docker run --rm` of the same image: per-run latency and N runs, NPROC at a time.
#
#   bench/docker.sh [LATENCY_JOBS=50] [MAKESPAN_JOBS=200]
# The image is berth-test/busybox:1 from scripts/test-image.sh (no registry needed).
set -euo pipefail
cd "$(dirname "$0")/.."
LAT_N=${1:-50}
MAKE_N=${2:-200}
IMAGE=berth-test/busybox:1

bash scripts/test-image.sh
# BENCH_BIN_DIR: a directory holding prebuilt release `berth` and `loadgen` (skips the build).
if [ -n "${BENCH_BIN_DIR:-}" ]; then
  BIN=$BENCH_BIN_DIR/berth LOADGEN=$BENCH_BIN_DIR/loadgen
else
  cargo build --release --quiet --bin berth --example loadgen
  BIN=${CARGO_TARGET_DIR:-target}/release/berth
  LOADGEN=${CARGO_TARGET_DIR:-target}/release/examples/loadgen
fi

source bench/lib.sh

# Percentiles (ms) of the numbers on stdin.
pct() { python3 -c 'import sys
v=sorted(float(x) for x in sys.stdin if x.strip())
p=lambda q: v[min(len(v)-1, round((len(v)-1)*q))]
print(f"n={len(v)} p50 {p(.5):.1f} ms, p90 {p(.9):.1f} ms, p99 {p(.99):.1f} ms")'; }

echo "== machine: $(nproc) CPUs, $(uname -r), docker $(docker version -f '{{.Server.Version}}'), $(date -u +%F)"
echo "== 1. idle submit->start, $LAT_N sequential jobs"
echo "-- container jobs ($IMAGE)"
BENCH_IMAGE=$IMAGE run_with_berth "$LOADGEN" latency "$LAT_N"
echo "-- process jobs"
run_with_berth "$LOADGEN" latency "$LAT_N"
echo "== 2. makespan of $MAKE_N trivial 1-CPU jobs"
echo "-- container jobs ($IMAGE)"
BENCH_IMAGE=$IMAGE run_with_berth "$LOADGEN" makespan "$MAKE_N"
echo "-- process jobs"
run_with_berth "$LOADGEN" makespan "$MAKE_N"
echo "== 3. plain docker run --rm --network host $IMAGE true"
for _ in $(seq 1 "$LAT_N"); do
  s=$(date +%s%N); docker run --rm --network host "$IMAGE" true; e=$(date +%s%N)
  echo "($e - $s) / 1000000" | bc -l
done | pct | sed 's/^/one run, start to exit: /'
s=$(date +%s%N)
seq 1 "$MAKE_N" | xargs -P "$(nproc)" -I{} docker run --rm --network host "$IMAGE" true
e=$(date +%s%N)
echo "$MAKE_N runs, $(nproc) at a time: $(echo "($e - $s) / 1000000000" | bc -l | cut -c1-5)s"
