#!/usr/bin/env bash
# Scale of one manager (issue 4), on each store (issue 18): a fresh `berth manager` (the default
# strict-FIFO queue), AGENTS fake agents from crates/cli/examples/swarm.rs (one process, real
# protocol, a runtime that only sleeps RUN_MS), JOBS 1-CPU jobs submitted by CLIENTS REST
# clients as fast as the API takes them. One run per store, one after the other: SQLite (a temp
# data dir), then PostgreSQL (a throwaway cluster of Debian's `postgresql` in a temp dir, its
# default settings: fsync and synchronous_commit on). Prints, for each, submissions/s, jobs
# started/s, submit->start, the manager's CPU time and peak RSS (and on PostgreSQL the server's
# CPU time), the store's size (SQLite: berth.db + WAL; PostgreSQL: pg_database_size), then a
# table of both. docs/perf.md keeps the figures we report.
#
#   bench/scale.sh [AGENTS=500] [JOBS=50000] [RUN_MS=1000] [CLIENTS=8]
#
# STORES="sqlite postgres" (the default) picks the stores and their order; STORES=sqlite needs
# neither root nor PostgreSQL (which needs root: its cluster runs as the `postgres` user). The
# environment reaches `berth manager` (e.g. BERTH_LEASE_TIMEOUT); both stores run with its
# default 5 s leader lease (issue 42: the lease renews over a connection of its own). On
# PostgreSQL, `pg_stat_activity` is sampled every 0.5 s and summarised (`pg_sample` in
# bench/lib.sh). BIN_DIR=DIR runs the `berth` and `swarm` binaries in DIR instead
# of building this tree's (to compare builds side by side: copy each build's
# target/release/berth and target/release/examples/swarm into a directory of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTS=${1:-500}
JOBS=${2:-50000}
RUN_MS=${3:-1000}
CLIENTS=${4:-8}
STORES=${STORES:-sqlite postgres}

source bench/lib.sh
swarm_bins

tmp=
pid=
sampler=
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -z "$tmp" ] || rm -rf "$tmp"
  pg_stop
}
trap cleanup EXIT

pg_version=
case " $STORES " in *" postgres "*)
  pg_start
  pg_version=", $("$pg_bin/postgres" --version)"
esac

echo "== machine: $(nproc) CPUs, $(uname -r)$pg_version, $(date -u '+%F %H:%M')Z, load average $(cut -d' ' -f1-3 /proc/loadavg)"
summary=()
for s in $STORES; do
  tmp=$(mktemp -d)
  case $s in
    sqlite) store= ;;
    postgres) store=$(pg_fresh_db berth); pg_cpu0=$(pg_cpu_s); pg_sample berth "$tmp/pg_activity" & sampler=$! ;;
    *) echo "unknown store $s (sqlite, postgres)" >&2; exit 2 ;;
  esac
  start_manager "$tmp" "$store"
  echo "== $s: one manager ($url), $AGENTS agents, $JOBS jobs of 1 CPU running ${RUN_MS} ms, $CLIENTS clients"
  BERTH_URL=$url BERTH_TOKEN=$token BERTH_JOIN_TOKEN=$join "$SWARM" --agents "$AGENTS" --jobs "$JOBS" \
    --run-ms "$RUN_MS" --clients "$CLIENTS" --manager-pid "$pid" 2>&1 | tee "$tmp/swarm.out" || {
    echo "swarm failed; manager $(kill -0 "$pid" 2>/dev/null && echo running || echo exited), its log's last 20 lines:"
    tail -n 20 "$tmp/manager.log"
  }
  server=
  if [ "$s" = sqlite ]; then
    size=$(du -cb "$tmp"/data/berth.db* | tail -n1 | awk '{printf "%.1f MiB", $1 / 1048576}')
    echo "store: $size ($(ls "$tmp"/data | grep berth.db | tr '\n' ' '))"
  else
    size=$(pg_sql berth "SELECT pg_database_size('berth')" | awk '{printf "%.1f MiB", $1 / 1048576}')
    server=$(awk -v a="$pg_cpu0" -v b="$(pg_cpu_s)" 'BEGIN { printf "%.1f s", b - a }')
    kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=
    echo "store: $size (pg_database_size); PostgreSQL server CPU during the run: $server"
    pg_sample_summary "$tmp/pg_activity"
    # issue 42: how many of the rows' updates were HOT (no new index entries; 0011_hot_job_moves.sql)
    echo "updates (of them HOT): $(pg_sql berth "SELECT string_agg(relname || ' ' || n_tup_upd || ' (' ||
      n_tup_hot_upd || ')', ', ' ORDER BY relname) FROM pg_stat_user_tables WHERE relname IN ('jobs', 'kernels')")"
  fi
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  lines=$(wc -l <"$tmp/manager.log")
  kill -INT "$pid"; wait "$pid" || true
  pid=
  # The manager's warnings and errors, counted by message (without colours, times, node names,
  # SQL text): during the run, then while it shut down.
  for part in "during the run:head -n $lines" "at shutdown:tail -n +$((lines + 1))"; do
    w=$(${part#*:} "$tmp/manager.log" | sed -E 's/\x1b\[[0-9;]*m//g' | grep -iE ' (warn|error) ' |
      sed -E 's/^[0-9TZ:.-]+ +//; s/ (node|db\.statement|elapsed|epoch)=.*//' | sort | uniq -c | sort -rn || true)
    [ -z "$w" ] || { echo "manager warnings and errors ${part%%:*}"; echo "$w" | head -n 10; }
  done
  # One row of the table: the swarm's figures, picked from its output.
  o=$tmp/swarm.out
  row=$(awk -v store="$s" -v size="$size" -v server="${server:-—}" '
    /^submitted .* jobs in/ { sub(/.*= /, ""); subs = $0 }
    /^started [0-9]+\// { split($2, a, "/"); started = a[1] "/" a[2]; for (i = 1; i <= NF; i++) if ($i == "lost") lost = $(i + 1); sub(/,$/, "", lost) }
    /^jobs started\/s:/ { overall = $4; for (i = 1; i <= NF; i++) if ($i == "steady") steady = $(i + 1) }
    /^submit->start:/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
    /^manager: CPU/ { cpu = $3; for (i = 1; i <= NF; i++) if ($i == "RSS" && $(i - 1) == "peak") rss = $(i + 1) " MiB" }
    END { if (subs == "" || started == "") { printf "| %s | swarm failed: see above | | | | | %s | | %s | |\n", store, server, size; exit }
      printf "| %s | %s | %s | %s (%s) | %s / %s / %s | %s | %s | %s | %s | %s |\n", store, subs, started, overall, steady, v["p50"], v["p99"], v["max"], cpu, server, rss, size, lost }
  ' "$o")
  summary+=("$row")
  rm -rf "$tmp"
  tmp=
done
echo "== summary"
echo "| store | submissions/s | started | started/s overall (steady) | submit->start p50 / p99 / max | manager CPU | PostgreSQL CPU | manager peak RSS | store size | connections lost |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
