# Shared by the bench scripts (source it): `run_with_berth TOOL ARGS...` starts a fresh
# `berth up` ($BIN) on a temp data dir and an ephemeral port, waits for its local agent, runs
# TOOL ARGS with BERTH_URL, BERTH_TOKEN (the admin's) and BENCH_NODE_CPUS set, then stops berth
# with Ctrl-C and removes the temp dir. Extra variables for TOOL can be set on the call;
# BERTH_UP_FLAGS adds flags to `berth up` (e.g. --stop-jobs).

# Sets BIN to `berth` in $BENCH_BIN_DIR, or to this tree's release build (built here).
bench_berth_bin() {
  if [ -n "${BENCH_BIN_DIR:-}" ]; then
    BIN=$BENCH_BIN_DIR/berth
  else
    cargo build --release --quiet --bin berth
    BIN=${CARGO_TARGET_DIR:-target}/release/berth
  fi
  BIN=$(realpath "$BIN")
}

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Prints the URL a starting `berth up` or `berth manager` writes to its log LOG, waiting up to
# 30 s; prints the log and fails when none comes.
berth_url() {
  local log=$1 url
  for _ in $(seq 1 600); do
    url=$(grep -o 'http://[0-9.:]*' "$log" | head -n1 || true)
    [ -n "$url" ] && { echo "$url"; return 0; }
    sleep 0.05
  done
  cat "$log" >&2
  return 1
}

run_with_berth() {
  local tool=$1 tmp pid url token
  shift
  tmp=$(mktemp -d)
  HOME=$tmp XDG_CONFIG_HOME= "$BIN" up --data-dir "$tmp/data" --listen 127.0.0.1:0 ${BERTH_UP_FLAGS:-} >"$tmp/up.log" 2>&1 &
  pid=$!
  url=$(berth_url "$tmp/up.log") || { kill "$pid"; exit 1; }
  # wait for the local agent to register
  for _ in $(seq 1 100); do
    HOME=$tmp XDG_CONFIG_HOME= "$BIN" nodes -o json | grep -q '"ready"' && break
    sleep 0.05
  done
  token=$(sed -n 's/^token *= *"\(.*\)"/\1/p' "$tmp/.config/berth/credentials")
  BERTH_URL=$url BERTH_TOKEN=$token BENCH_NODE_CPUS=$(nproc) "$tool" "$@" || true
  kill -INT "$pid"; wait "$pid" || true
  rm -rf "$tmp"
}

# Sets BIN and SWARM: the `berth` and `swarm` binaries in $BIN_DIR, or this tree's release
# build (built here).
swarm_bins() {
  if [ -n "${BIN_DIR:-}" ]; then
    BIN=$BIN_DIR/berth
    SWARM=$BIN_DIR/swarm
  else
    cargo build --release --quiet --bin berth --example swarm
    local target=${CARGO_TARGET_DIR:-target}
    BIN=$target/release/berth
    SWARM=$target/release/examples/swarm
  fi
}

# `start_manager TMP [STORE]`: starts a fresh `berth manager` ($BIN) on TMP/data and an
# ephemeral port, logging to TMP/manager.log; sets pid, url, join (the agents' join token) and
# token (the admin's). STORE (or, without it, the STORE variable) is passed as `--store`, e.g.
# a postgres:// URL; empty or unset: the default SQLite store in TMP/data.
start_manager() {
  local tmp=$1 store=${2:-${STORE:-}} flags=()
  [ -n "$store" ] && flags=(--store "$store")
  HOME=$tmp XDG_CONFIG_HOME= RUST_LOG=${RUST_LOG:-warn} "$BIN" manager --data-dir "$tmp/data" --listen 127.0.0.1:0 \
    ${flags[@]+"${flags[@]}"} >"$tmp/manager.log" 2>&1 &
  pid=$!
  url=$(berth_url "$tmp/manager.log")
  join=$(sed -n 's/^join token for agents: *//p' "$tmp/manager.log")
  token=$(cat "$tmp/data/admin-token")
}

# A throwaway PostgreSQL cluster (Debian's `postgresql`, the newest installed; needs root, the
# cluster runs as the `postgres` user): `pg_start` runs initdb + pg_ctl in a temp dir on a free
# port with the default settings (fsync and synchronous_commit on) and sets pg_bin, pg_dir and
# pg_port; `pg_stop` stops it and removes the dir (safe to call twice, or before pg_start: put
# it in the caller's EXIT trap). `pg_fresh_db NAME` (re)creates an empty database and prints
# its postgres:// URL; `pg_sql DB SQL` prints SQL's result unaligned; `pg_cpu_s` prints the CPU
# seconds (user + system) the cluster's processes used so far, ended backends included.
pg_dir=
pg_start() {
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || { echo "no PostgreSQL: apt-get install postgresql" >&2; return 1; }
  pg_dir=$(mktemp -d)
  chown postgres: "$pg_dir"
  pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  runuser -u postgres -- "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres -E UTF8 >/dev/null
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1" start >/dev/null
}
pg_stop() {
  [ -n "$pg_dir" ] || return 0
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$pg_dir"
  pg_dir=
}
pg_sql() {
  PGOPTIONS="-c client_min_messages=warning" runuser -u postgres -- "$pg_bin/psql" -qAt -h 127.0.0.1 \
    -p "$pg_port" -U postgres -d "$1" -c "$2"
}
pg_fresh_db() {
  pg_sql postgres "DROP DATABASE IF EXISTS $1" >/dev/null
  pg_sql postgres "CREATE DATABASE $1" >/dev/null
  echo "postgres://postgres@127.0.0.1:$pg_port/$1"
}
pg_cpu_s() {
  local pm kids
  pm=$(head -n1 "$pg_dir/data/postmaster.pid")
  kids=$(ps --ppid "$pm" -o pid= | tr -d ' ')
  # the postmaster's own time and its reaped children's (fields 14-17), live children's (14-15)
  { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat"
    for k in $kids; do awk '{ print $14 + $15 }' "/proc/$k/stat" 2>/dev/null || true; done
  } | awk -v hz="$(getconf CLK_TCK)" '{ t += $1 } END { printf "%.1f", t / hz }'
}

# `pg_sample DB FILE &`: every 0.5 s until killed, one line per connection to DB other than
# the sampler's own: `state|wait_event_type:wait_event|seconds its transaction has been open`
# (`-` for none), then a `--` line. `pg_sample_summary FILE` prints how often each state and
# wait was seen, and the longest open transaction (issue 42: where a batch's time went).
pg_sample() {
  while :; do
    pg_sql "$1" "SELECT state || '|' || COALESCE(wait_event_type || ':' || wait_event, '-') || '|' ||
      COALESCE(round(EXTRACT(EPOCH FROM clock_timestamp() - xact_start)::numeric, 1)::text, '-')
      FROM pg_stat_activity WHERE datname = '$1' AND pid <> pg_backend_pid()" 2>/dev/null || true
    echo --
    sleep 0.5
  done >"$2"
}
pg_sample_summary() {
  local n
  n=$(grep -c '^--$' "$1" || true)
  echo "pg_stat_activity, $n samples every 0.5 s (state | wait: times seen):"
  grep -v '^--$' "$1" | cut -d'|' -f1,2 | sort | uniq -c | sort -rn | head -n 8
  awk -F'|' '$3 != "-" && $1 != "idle" && $3 + 0 > m { m = $3 + 0 } END { printf "longest open transaction seen: %.1f s\n", m }' "$1"
}
