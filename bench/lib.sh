# Shared by the bench scripts (source it): `run_with_berth TOOL ARGS...` starts a fresh
# `berth up` ($BIN) on a temp data dir and an ephemeral port, waits for its local agent, runs
# TOOL ARGS with BERTH_URL, BERTH_TOKEN (the admin's) and BENCH_NODE_CPUS set, then stops berth
# with Ctrl-C and removes the temp dir. Extra variables for TOOL can be set on the call;
# BERTH_UP_FLAGS adds flags to `berth up` (e.g. --stop-jobs).

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

# Starts a fresh `berth manager` ($BIN) on TMP/data and an ephemeral port, logging to
# TMP/manager.log; sets pid, url, join (the agents' join token) and token (the admin's).
start_manager() {
  local tmp=$1
  HOME=$tmp XDG_CONFIG_HOME= RUST_LOG=${RUST_LOG:-warn} "$BIN" manager --data-dir "$tmp/data" --listen 127.0.0.1:0 \
    >"$tmp/manager.log" 2>&1 &
  pid=$!
  url=$(berth_url "$tmp/manager.log")
  join=$(sed -n 's/^join token for agents: *//p' "$tmp/manager.log")
  token=$(cat "$tmp/data/admin-token")
}
