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
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
[ -x "$pgbin/initdb" ] || { echo "no PostgreSQL: apt-get install postgresql" >&2; exit 1; }

tmp=$(mktemp -d)
pg=$(mktemp -d)
chown postgres: "$pg"
pgport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
  runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$pg" "$tmp"
}
trap cleanup EXIT
runuser -u postgres -- "$pgbin/initdb" -D "$pg/data" -A trust -U postgres -E UTF8 >/dev/null
runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg/data" -l "$pg/log" -w \
  -o "-p $pgport -k $pg -c listen_addresses=127.0.0.1" start >/dev/null
PGOPTIONS="-c client_min_messages=warning" runuser -u postgres -- "$pgbin/psql" -q -h 127.0.0.1 -p "$pgport" \
  -U postgres -c "CREATE DATABASE berth" >/dev/null

echo "== machine: $(nproc) CPUs, $(uname -r), $("$pgbin/postgres" --version), $PROFILE build, $(date -u '+%F %H:%M')Z"
echo "== SQLite: $N finished jobs"
"$FILL" "sqlite:$tmp/berth.db" "$N"
echo "== PostgreSQL: $N finished jobs"
"$FILL" "postgres://postgres@127.0.0.1:$pgport/berth" "$N"
