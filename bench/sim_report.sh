#!/usr/bin/env bash
# The scheduling report of docs/scheduling.md: every `berth sim` policy on both real traces
# (Philly; SDSC Blue Horizon) at both cluster sizes (80 x 8 GPUs and the overloaded 56 x 8;
# SDSC at its real 144 nodes and at 101, the same 70%), with a plot per run. One process per
# trace and size runs every policy in turn, so each policy's wall time is its own.
#
#   bench/sim_report.sh [OUT_DIR] [extra berth sim flags...]
#
# SDSC replays take minutes per policy (232,536 jobs on an overloaded queue), so SDSC runs
# the policies in $SDSC_POLICIES (default below; `all` for every one).
#
# Writes OUT_DIR/{philly-80,philly-56,sdsc-144,sdsc-101}.{json,svg}; prints the tables
# (bench/sim_report.py). Needs a release build (`cargo build --release --bin berth`).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/sim-report}"
shift || true
berth="${BERTH:-target/release/berth}"
mkdir -p "$out"
sdsc_policies="${SDSC_POLICIES:-fifo,backfill,drf,fair-share,qssf}"
run() {
    local name=$1 policies=$2
    shift 2
    "$berth" sim "$@" --policy "$policies" -o json --plot "$out/$name.svg" "${extra[@]}" > "$out/$name.json"
}
extra=("$@")
philly=(--trace traces/philly.csv --gpus-per-node 8 --cpus-per-node 64 --checkpoint-interval 30m)
sdsc=(--trace traces/SDSC-BLUE-2000-4.2-cln.swf.gz --cpus-per-node 8 --mem-per-node 4GiB --checkpoint-interval 30m)
run philly-80 all "${philly[@]}" --nodes 80 &
run philly-56 all "${philly[@]}" --nodes 56 &
wait
run sdsc-144 "$sdsc_policies" "${sdsc[@]}" --nodes 144 &
run sdsc-101 "$sdsc_policies" "${sdsc[@]}" --nodes 101 &
wait
python3 bench/sim_report.py "$out"/philly-80.json "$out"/philly-56.json "$out"/sdsc-144.json "$out"/sdsc-101.json
