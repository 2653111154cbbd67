#!/usr/bin/env bash
# berth sim wall time on an overloaded cluster (deep queues), two builds side by side: each
# policy runs on the old build, then on the new one, so both see the same machine load. The
# WALL column of each row is the figure; results (JCT, waits) must match where the backfill
# window is not reached. docs/perf.md keeps the figures we report.
#
#   bench/sim-depth.sh OLD_BERTH NEW_BERTH [NODES=56] [POLICIES=fifo,lifo,skip] [LIMIT=all]
#
# OLD_BERTH: e.g. a release build of an earlier commit (`git worktree add` + `cargo build
# --release`); NEW_BERTH: target/release/berth.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/sim-depth.sh OLD_BERTH NEW_BERTH [NODES] [POLICIES] [LIMIT]}
new=${2:?usage: bench/sim-depth.sh OLD_BERTH NEW_BERTH [NODES] [POLICIES] [LIMIT]}
nodes=${3:-56}
policies=${4:-fifo,lifo,skip}
limit=()
if [[ ${5:-all} != all ]]; then limit=(--limit "$5"); fi
echo "philly.csv, $nodes x 8 GPUs x 64 CPUs, ${5:-all} jobs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for p in ${policies//,/ }; do
    for build in "$old" "$new"; do
        row=$("$build" sim --trace traces/philly.csv --nodes "$nodes" --gpus-per-node 8 --cpus-per-node 64 \
            --policy "$p" "${limit[@]}" 2>/dev/null | tail -1)
        printf '%-8s %s\n' "$([[ $build == "$old" ]] && echo old || echo new)" "$row"
    done
done
