#!/usr/bin/env bash
# Cost of a Prometheus scrape of the manager (issue 16): a fresh `berth manager`, AGENTS fake
# agents and JOBS 1-CPU jobs from crates/cli/examples/swarm.rs whose kernels "run" RUN_MS (long
# by default, so that the jobs stay in memory, running or pending, while we scrape), then
# SCRAPES sequential `GET /metrics`. Prints the scrape time (p50, p90, max, as curl measures
# it: connect to last byte), the exposition's size, and the jobs the scrape counted.
#
#   bench/metrics-scrape.sh [AGENTS=500] [JOBS=50000] [SCRAPES=50] [RUN_MS=600000]
#
# BIN_DIR=DIR runs the `berth` and `swarm` binaries in DIR instead of building this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTS=${1:-500}
JOBS=${2:-50000}
SCRAPES=${3:-50}
RUN_MS=${4:-600000}

source bench/lib.sh
swarm_bins

tmp=$(mktemp -d)
pid=
swarm=
cleanup() {
  if [ -n "$swarm" ]; then kill -INT "$swarm" 2>/dev/null || true; wait "$swarm" 2>/dev/null || true; fi
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start_manager "$tmp"

echo "== machine: $(nproc) CPUs, $(uname -r), $(date -u '+%F %H:%M')Z, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== one manager ($url), $AGENTS agents, $JOBS jobs of 1 CPU running ${RUN_MS} ms, $SCRAPES scrapes"
BERTH_URL=$url BERTH_TOKEN=$token BERTH_JOIN_TOKEN=$join "$SWARM" --agents "$AGENTS" --jobs "$JOBS" \
  --run-ms "$RUN_MS" --timeout-s 3600 >"$tmp/swarm.log" 2>&1 &
swarm=$!

# Every job submitted and the scheduler settled: the scrape counts JOBS unfinished jobs and
# two scrapes in a row agree.
jobs_in() { curl -sf "$url/metrics" | awk '/^berth_jobs\{/ { n += $2 } END { print n + 0 }'; }
started() { curl -sf "$url/metrics" | awk '/^berth_scheduler_starts_total/ { n += $2 } END { print n + 0 }'; }
for _ in $(seq 1 600); do
  if [ "$(jobs_in)" -ge "$JOBS" ]; then
    a=$(started); sleep 2; b=$(started)
    [ "$a" = "$b" ] && break
  fi
  sleep 1
done
curl -sf "$url/metrics" >"$tmp/metrics.txt"
echo "scrape sees: $(awk '/^berth_jobs\{/ { s[$0 ~ /running/ ? "running" : $0 ~ /pending/ ? "pending" : "other"] += $2 } END { printf "running %d, pending %d, other %d", s["running"], s["pending"], s["other"] }' "$tmp/metrics.txt") jobs; $(awk '/^berth_nodes\{state="ready"\}/ { print $2 }' "$tmp/metrics.txt") nodes ready"
echo "exposition: $(wc -c <"$tmp/metrics.txt") bytes, $(grep -vc '^#' "$tmp/metrics.txt") samples"
# Each path SCRAPES times in a row: /metrics, then, for scale, the cheapest request of the API
# (no state lock, no store) on the same loaded manager.
timed() {
  for _ in $(seq 1 "$SCRAPES"); do
    curl -sf -o /dev/null -w '%{time_total}\n' "$url$1"
  done | sort -n | awk -v what="$2" '{ t[NR] = $1 * 1000 } END {
    printf "%s: n=%d p50=%.1fms p90=%.1fms max=%.1fms\n", what, NR, t[int(NR * 0.5) + 1], t[int(NR * 0.9) + 1], t[NR] }'
}
timed /metrics "scrape time (GET /metrics)"
timed /v1/health "GET /v1/health, same load"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if grep -qiE 'warn|error' "$tmp/manager.log"; then
  echo "manager warnings (first 10):"
  grep -iE 'warn|error' "$tmp/manager.log" | head -n 10
fi
