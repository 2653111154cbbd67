#!/usr/bin/env bash
# The retention figure (issue 18): store size per N finished jobs before and after they are
# archived (`Retention::archive_finished`, batches of 1,000), on SQLite and on a throwaway
# PostgreSQL (Debian's `postgresql`: initdb + pg_ctl in a temp dir on a free port, default
# settings). The store is filled through the `Store` trait with jobs shaped like real ones
# (crates/store/examples/retention_fill.rs); sizes are taken after `VACUUM` (SQLite: the file)
# and `VACUUM FULL` (PostgreSQL: pg_database_size), so free pages do not count.
#
#   bench/retention.sh [JOBS=100000]
#
# BENCH_PROFILE=debug uses a debug build (faster to build; the sizes are the same). Needs
# root for PostgreSQL (the cluster runs as the `postgres` user). docs/perf.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
PROFILE=${BENCH_PROFILE:-release}
if [ "$PROFILE" = release ]; then
  cargo build --release --quiet -p berth-store --example retention_fill
else
  cargo build --quiet -p berth-store --example retention_fill
fi
FILL=$(realpath "${CARGO_TARGET_DIR:-target}/$PROFILE/examples/retention_fill")
source bench/lib.sh

tmp=$(mktemp -d)
cleanup() {
  pg_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
pg_start
pg_url=$(pg_fresh_db berth)

echo "== machine: $(nproc) CPUs, $(uname -r), $("$pg_bin/postgres" --version), $PROFILE build, $(date -u '+%F %H:%M')Z"
echo "== SQLite: $N finished jobs"
"$FILL" "sqlite:$tmp/berth.db" "$N"
echo "== PostgreSQL: $N finished jobs"
"$FILL" "$pg_url" "$N"
