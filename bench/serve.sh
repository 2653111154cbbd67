#!/usr/bin/env bash
# Serving endpoints' figures (issue 21), side by side in one run on this machine, against a
# fresh `berth up` (temp HOME and data dir). A replica's job takes a whole CPU (fractions round
# up) and berth pins it with a cpuset, so a 2-CPU machine holds 2 replicas per agent; a
# synthetic topology (`--topology` with more CPUs) does not help: the kernel refuses a cpuset
# of CPUs that do not exist. Figure 3 therefore adds a second `berth agent` (node `extra`, same
# machine, same 2 cores) to the same manager so that 4 replicas fit:
#  1. proxy overhead: wrk GETs (3-byte body, keep-alive) at 1, 16 and 64 connections, SECS
#     seconds each, (a) straight to one replica's port, (b) through nginx (our own process on a
#     temp prefix: `upstream` with both replicas' ports, least_conn, keepalive to upstreams)
#     and (c) through berth's endpoint /serve/NAME/ on the app listener (bearer token), then
#     berth's requests/s and p99 as a ratio of nginx's, and each replica's route (issue 42:
#     `direct` where the manager reaches the replica's port, else `tunnel` through its agent);
#     (d) an endpoint whose replicas the manager cannot reach (a third agent, `far`, says its
#     node is at ::1 where the replicas, on IPv4, do not listen), so through the tunnel;
#     (e) with CEILING=path of `cargo build --release -p berth-manager --example proxy_ceiling`:
#     a minimal proxy on the router's crates (axum, hyper, tokio) over the same two replicas,
#     nothing of berth's in it: the ceiling of that stack on this machine, one row per mode in
#     CEILING_MODES (default "mt pool": the stack before issue 42's second pass, and the one
#     berth's router uses now: a current-thread runtime per core and its own HTTP/1.1 pool);
#  2. a replica's death: SIGKILL of one replica's server under steady GET load (wrk,
#     KILL_CONNS connections through the endpoint), seconds until a replacement replica is ready
#     (polling the API every 50 ms) and failed requests seen meanwhile; KILLS times;
#  3. autoscaling under a load step: an endpoint with --min 1 --max 4 --target-inflight 2
#     --scale-up-cooldown 1s gets 16 connections of /slow (200 ms each); seconds until
#     `desired` rises, reaches 4, and until 2, 3, 4 replicas are ready.
# The replicas are berth's own replica jobs running bench/serve_backend.py (asyncio, ~50k
# small GETs/s on one core); (a) and (b) use the same two replicas as (c).
#
#   BERTH=/tmp/berth-bench/berth bench/serve.sh [SECS=10] [KILLS=3]
#
# KILL_CONNS (8) is figure 2's load in connections. The figures run in the order 2, 3, 1;
# FIGURES="1" runs only those named; TUNNEL=0 leaves row (d) out of figure 1 (old/new pairs of
# the direct path in less time). ROUNDS=N measures figure 1's nginx and berth cells N times
# (nginx first in odd rounds, berth first in even ones) and prints the ratios' medians; CONNS
# ("1 16 64") the connection counts. Run it under the shared bench lock on a shared machine
# (`flock /tmp/pc/bench.lock bench/serve.sh`); the load average is printed with each figure.
#
# BERTH defaults to target/release/berth (not built here: build it first). Needs nginx and
# wrk (installed with apt when missing). docs/perf.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
KILLS=${2:-3}
KILL_CONNS=${KILL_CONNS:-8}
FIGURES=${FIGURES:-2 3 1}
want() { [[ " $FIGURES " == *" $1 "* ]]; }
BIN=$(realpath -m "${BERTH:-target/release/berth}")
[ -x "$BIN" ] || { echo "no berth binary at $BIN: cargo build --release --bin berth, or set BERTH" >&2; exit 1; }
if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then
  echo "installing nginx-light and wrk (apt)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk >/dev/null ||
    { echo "needs nginx and wrk: apt-get install nginx-light wrk (as root), then run this again" >&2; exit 1; }
fi
# shellcheck source=bench/lib.sh
source bench/lib.sh
BACKEND=$PWD/bench/serve_backend.py


# Everything this run starts lives under $tmp (berth's HOME and data dirs, nginx's prefix) and
# $ports (the replicas write "PID PORT" files there: a job's /tmp is private, so it is under
# /var/tmp). The EXIT trap stops what we started, by PID only.
tmp=$(mktemp -d)
ports=$(mktemp -d /var/tmp/berth-serve-bench.XXXXXX)
chmod 755 "$ports"
berth_pid='' nginx_pid='' agent_pid='' far_pid=''
cleanup() {
  set +e
  # a panic in berth explains most failures: show it
  grep -q panicked "$tmp/up.log" 2>/dev/null && { echo "berth panicked:" >&2; grep -A1 -m1 panicked "$tmp/up.log" >&2; }
  [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  for a in "$agent_pid" "$far_pid"; do
    [ -n "$a" ] || continue
    kill -INT "$a" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$a" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$a" 2>/dev/null
  done
  if [ -n "$berth_pid" ]; then
    # --stop-jobs: Ctrl-C stops the replicas' jobs too
    kill -INT "$berth_pid" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$berth_pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$berth_pid" 2>/dev/null
  fi
  # any replica server still alive (only those that wrote a file here: ours)
  for f in "$ports"/*/*; do
    [ -f "$f" ] || continue
    read -r p _ <"$f"
    grep -q serve_backend "/proc/$p/cmdline" 2>/dev/null && kill -KILL "$p"
  done
  rm -rf "$tmp" "$ports"
}
trap cleanup EXIT
trap "exit 130" INT TERM

export HOME=$tmp BERTH_DATA_DIR=$tmp/data XDG_CONFIG_HOME=
berth() { "$BIN" "$@"; }

api=$(free_port)
apps=$(free_port)
RUST_LOG=${RUST_LOG:-warn} "$BIN" up --no-cache --stop-jobs --listen "127.0.0.1:$api" --apps-listen "127.0.0.1:$apps" >"$tmp/up.log" 2>&1 &
berth_pid=$!
BERTH_URL=$(berth_url "$tmp/up.log")
for _ in $(seq 1 200); do
  berth nodes -o json 2>/dev/null | grep -q '"ready"' && break
  sleep 0.05
done
BERTH_TOKEN=$(sed -n 's/^token *= *"\(.*\)"/\1/p' "$tmp/.config/berth/credentials")
# serve_load.py polls the API over HTTP with the admin's token. The CLI is not given
# BERTH_URL: over the local socket the kernel vouches for our Unix user, so the replicas run
# as us (over TCP they would run as a mapped uid that cannot write to $ports).
LOAD="env BERTH_URL=$BERTH_URL BERTH_TOKEN=$BERTH_TOKEN python3 $PWD/bench/serve_load.py"

# `create NAME FLAGS...`: an endpoint of serve_backend.py replicas writing to $ports/NAME;
# waits until `desired` replicas are ready and sets secret (a token of the endpoint).
create() {
  local name=$1
  shift
  mkdir -m 777 "$ports/$name"
  berth serve create "$name" --cpus 0.1 --mem 128MiB --health /healthz --env "BENCH_PORT_DIR=$ports/$name" "$@" \
    -- python3 "$BACKEND" >/dev/null
  local ok=
  for _ in $(seq 1 300); do
    berth serve show "$name" -o json | python3 -c 'import json,sys; e=json.load(sys.stdin); sys.exit(0 if e["desired"] > 0 and sum(r["state"] == "ready" for r in e["replicas"]) >= e["desired"] else 1)' &&
      { ok=1; break; }
    sleep 0.1
  done
  [ -n "$ok" ] || { echo "endpoint $name never got ready:" >&2; berth serve show "$name" >&2; berth ps -a >&2; berth serve logs "$name" --stderr >&2; exit 1; }
  secret=$(berth serve token create "$name" 2>/dev/null)
}
# The listening ports of the replica servers of endpoint NAME that are alive.
replica_ports() {
  local f p port
  for f in "$ports/$1"/*; do
    read -r p port <"$f"
    [ -d "/proc/$p" ] && echo "$port"
  done
}
# "RPS P50 P99 ERRORS" as a table row's cells, with CPU µs per request ($3, or -).
row() { awk -v what="$1" -v c="$2" -v cpu="${3:--}" '{ printf "| %s | %s | %.0f | %.2f | %.2f | %d | %s |\n", what, c, $1, $2, $3, $4, cpu }'; }
# CPU time (clock ticks, user + system, all threads) of the given processes.
ticks() {
  local p
  for p in "$@"; do
    [ -n "$p" ] && sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }'
  done | awk '{ s += $1 } END { print s + 0 }'
}
# `measure OUT PIDS... -- wrk args`: runs a wrk cell, sets OUT to its "RPS P50 P99 ERRORS" and
# cpu_us to the CPU µs per request that PIDS spent meanwhile.
# PERF_STAT=1: also counts PIDS' system calls and context switches (perf stat) during the
# cell, per request, into stat_rows (printed after figure 1).
measure() {
  local out=$1 pids=() t0 t1 r stat='' sp=''
  shift
  while [ "$1" != -- ]; do pids+=("$1"); shift; done
  shift
  t0=$(ticks "${pids[@]}")
  if [ -n "${PERF_STAT:-}" ]; then
    stat=$(mktemp -p "$tmp")
    perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$(IFS=,; echo "${pids[*]}")" -o "$stat" -- sleep "$SECS" 2>/dev/null &
    sp=$!
  fi
  r=$($LOAD wrk "$@")
  t1=$(ticks "${pids[@]}")
  printf -v "$out" '%s' "$r"
  if [ -n "$sp" ]; then
    wait "$sp" || true
    stat_rows+=("$(awk -F, -v r="$r" -v s="$SECS" -v who="$(ps -o comm= -p "${pids[0]}")" -v c="$2" 'BEGIN { split(r, a, " "); n = a[1] * s }
      /raw_syscalls/ { sc = $1 } /context-switches/ { cs = $1 }
      END { printf "| %s | %s | %.1f | %.2f |", who, c, (n > 0 ? sc / n : 0), (n > 0 ? cs / n : 0) }' "$stat")")
  fi
  cpu_us=$(awk -v r="$r" -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v s="$SECS" 'BEGIN { split(r, a, " "); printf "%.1f", (a[1] > 0 ? d * 1e6 / hz / (a[1] * s) : 0) }')
}

echo "== machine: $(nproc) CPUs, $(uname -r), Debian $(cat /etc/debian_version), $(nginx -v 2>&1 | sed 's/.*: //'), wrk $(dpkg-query -W -f '${Version}' wrk), $(date -u '+%F %H:%M')Z"

if want 2; then
echo "== 2. a replica's death (SIGKILL of its server; 2 replicas, probes every 2 s), under $KILL_CONNS connection(s) of GETs; load $(cut -d' ' -f1-3 /proc/loadavg)"
create web --replicas 2 --no-autoscale --drain-grace 1s
echo "| kill | to a new replica ready, s | killed one out of rotation, s | failed requests | requests |"
echo "|---:|---:|---:|---:|---:|"
all=()
for i in $(seq 1 "$KILLS"); do
  r=$($LOAD kill web "$ports/web" "http://127.0.0.1:$apps/serve/web/" "$secret" "$KILL_CONNS")
  read -r t out failed total <<<"$r"
  all+=("$t")
  echo "| $i | $t | $out | $failed | $total |"
  sleep 1
done
echo "median: $(printf '%s\n' "${all[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }') s"
berth serve rm web >/dev/null
fi
# a second agent on the same machine: two more CPUs' worth of replica slots
mkdir "$tmp/agent2"
env -u BERTH_DATA_DIR RUST_LOG="${RUST_LOG:-warn}" "$BIN" agent --manager "$BERTH_URL" --join-token-file "$tmp/data/join-token" \
  --name extra --data-dir "$tmp/agent2" --stop-jobs --no-docker >"$tmp/agent2.log" 2>&1 &
agent_pid=$!
for _ in $(seq 1 200); do
  berth nodes -o json 2>/dev/null | grep -q '"extra"' && break
  sleep 0.05
done
# the removed endpoint's replicas gone (their CPUs free)
for _ in $(seq 1 200); do
  berth ps -o json | grep -q '"RUNNING"' || break
  sleep 0.1
done

if want 3; then
echo "== 3. autoscaling: --min 1 --max 4 --target-inflight 2 --scale-up-cooldown 1s, a step to 16 connections of /slow (200 ms); load $(cut -d' ' -f1-3 /proc/loadavg)"
create auto --min 1 --max 4 --target-inflight 2 --scale-up-cooldown 1s
$LOAD step auto "http://127.0.0.1:$apps/serve/auto/" "$secret" 16 4
berth serve show auto | sed -n '/^#/,$p'
berth serve rm auto >/dev/null
for _ in $(seq 1 200); do
  berth ps -o json | grep -q '"RUNNING"' || break
  sleep 0.1
done
fi
want 1 || exit 0
echo "== 1. proxy overhead: GETs of a 3-byte body, keep-alive, ${SECS} s per cell"
# a fresh endpoint of 2 replicas (placed on either node: both agents run on this machine)
create proxied --replicas 2 --no-autoscale --drain-grace 1s
mapfile -t web_ports < <(replica_ports proxied)
echo "replicas of the endpoint (ROUTE: how berth's router reaches each):"
berth serve show proxied | sed -n '/^#/,$p'
# (d): a third agent whose node address the replicas do not listen on, and an endpoint placed
# there only (its label), its replicas on every IPv4 address
if [ "${TUNNEL:-1}" != 0 ]; then
  mkdir "$tmp/agent3"
  env -u BERTH_DATA_DIR RUST_LOG="${RUST_LOG:-warn}" "$BIN" agent --manager "$BERTH_URL" --join-token-file "$tmp/data/join-token" \
    --name far --address ::1 --label route=tunnel --data-dir "$tmp/agent3" --stop-jobs --no-docker >"$tmp/agent3.log" 2>&1 &
  far_pid=$!
  for _ in $(seq 1 200); do
    berth nodes -o json 2>/dev/null | grep -q '"far"' && break
    sleep 0.05
  done
  proxied_secret=$secret
  create tunneled --replicas 2 --no-autoscale --drain-grace 1s --constraint route=tunnel --env BENCH_BIND=0.0.0.0
  tunnel_secret=$secret
  secret=$proxied_secret
  echo "replicas of the tunneled endpoint:"
  berth serve show tunneled | sed -n '/^#/,$p'
fi

# nginx as a reverse proxy over the same two replicas, run as our own process on a temp prefix
mkdir -p "$tmp/nginx/logs"
nginx_port=$(free_port)
{
  echo "worker_processes auto; error_log $tmp/nginx/logs/error.log; pid $tmp/nginx/nginx.pid;"
  echo "events { worker_connections 4096; }"
  echo "http {"
  echo "  access_log off;"
  echo "  upstream replicas { least_conn; keepalive 64;"
  for p in "${web_ports[@]}"; do echo "    server 127.0.0.1:$p;"; done
  echo "  }"
  echo "  server { listen 127.0.0.1:$nginx_port;"
  echo "    location / { proxy_pass http://replicas; proxy_http_version 1.1; proxy_set_header Connection \"\"; }"
  echo "  }"
  echo "}"
} >"$tmp/nginx/nginx.conf"
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$nginx_port/" >/dev/null && break; sleep 0.05; done
declare -A ceiling_pid ceiling_port
CEILING_MODES=${CEILING_MODES:-mt pool}
if [ -n "${CEILING:-}" ]; then
  for mode in $CEILING_MODES; do
    ceiling_port[$mode]=$(free_port)
    "$CEILING" --mode "$mode" "${ceiling_port[$mode]}" "${web_ports[@]}" &
    ceiling_pid[$mode]=$!
    for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:${ceiling_port[$mode]}/" >/dev/null && break; sleep 0.05; done
  done
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# What berth's processes spend with no request at all (probes, heartbeats, usage samples,
# passes): the per-request CPU below includes it, spread over the cell's requests.
t0=$(ticks "$berth_pid" "$agent_pid")
sleep 5
echo "berth's CPU with no requests (manager, its agent and the second agent): $(awk -v d=$(($(ticks "$berth_pid" "$agent_pid") - t0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f ms/s", d * 1000 / hz / 5 }')"
# CPU per request: nginx's master and workers; berth's `up` (manager and its agent) and the
# second agent (on the tunnel path, replicas there are reached through it).
echo "| path | connections | requests/s | p50 ms | p99 ms | failed | proxy CPU µs/request |"
echo "|---|---:|---:|---:|---:|---:|---:|"
ratios=() ceilings=() perf_pids=() stat_rows=()
# nginx's cell and berth's at C connections, each setting n / e (wrk's figures) and its CPU.
nginx_cell() {
  local c=$1
  # shellcheck disable=SC2046 # nginx's master and its workers
  measure n "$nginx_pid" $(pgrep -P "$nginx_pid") -- "http://127.0.0.1:$nginx_port/" "$c" "$SECS"
  ncpu=$cpu_us
  row "nginx, 2 replicas" "$c" "$ncpu" <<<"$n"
}
berth_cell() {
  local c=$1
  # PERF=FILE: a perf profile of berth's process during the cells of PERF_CONNS (default 64)
  # connections (FILE-C.data, summed up in FILE-C.txt), and of each CEILING mode's process
  # (FILE-ceiling-MODE-C.data)
  if [ -n "${PERF:-}" ] && [[ " ${PERF_CONNS:-64} " == *" $c "* ]]; then
    perf record -F 499 -g -p "$berth_pid" -o "$PERF-$c.data" -- sleep "$SECS" >/dev/null 2>&1 &
    perf_pids+=("$!")
  fi
  measure e "$berth_pid" "$agent_pid" -- "http://127.0.0.1:$apps/serve/proxied/" "$c" "$SECS" "Authorization: Bearer $secret"
  ecpu=$cpu_us
  row "berth endpoint, 2 replicas" "$c" "$ecpu" <<<"$e"
}
# ROUNDS (1) rounds of every connection count; odd rounds measure nginx first, even rounds
# berth first, so a machine that gets busier or quieter during a run favours neither; the
# ratios are printed per round and as medians.
for round in $(seq 1 "${ROUNDS:-1}"); do
for c in ${CONNS:-1 16 64}; do
  [ "$round" = 1 ] && $LOAD wrk "http://127.0.0.1:${web_ports[0]}/" "$c" "$SECS" | row "direct to one replica" "$c"
  if [ $((round % 2)) = 1 ]; then nginx_cell "$c"; berth_cell "$c"; else berth_cell "$c"; nginx_cell "$c"; fi
  if [ "$round" = 1 ] && [ "${TUNNEL:-1}" != 0 ]; then
    measure t "$berth_pid" "$far_pid" -- "http://127.0.0.1:$apps/serve/tunneled/" "$c" "$SECS" "Authorization: Bearer $tunnel_secret"
    row "berth endpoint through the agent (tunnel), 2 replicas" "$c" "$cpu_us" <<<"$t"
  fi
  if [ -n "${CEILING:-}" ]; then
    for mode in $CEILING_MODES; do
      if [ -n "${PERF:-}" ] && [[ " ${PERF_CONNS:-64} " == *" $c "* ]]; then
        perf record -F 499 -g -p "${ceiling_pid[$mode]}" -o "$PERF-ceiling-$mode-$c.data" -- sleep "$SECS" >/dev/null 2>&1 &
        perf_pids+=("$!")
      fi
      measure x "${ceiling_pid[$mode]}" -- "http://127.0.0.1:${ceiling_port[$mode]}/" "$c" "$SECS"
      row "minimal hyper proxy ($mode: the stack's ceiling), 2 replicas" "$c" "$cpu_us" <<<"$x"
      ceilings+=("$(awk -v r="$round" -v c="$c" -v m="$mode" -v n="$n" -v x="$x" -v nc="$ncpu" -v xc="$cpu_us" 'BEGIN { split(n, a, " "); split(x, b, " ");
        printf "| %s | %s | %s | %.2f | %.2f | %.2f |", r, c, m, (a[1] > 0 ? b[1] / a[1] : 0), (a[3] > 0 ? b[3] / a[3] : 0), (nc > 0 ? xc / nc : 0) }')")
    done
  fi
  ratios+=("$(awk -v r="$round" -v c="$c" -v n="$n" -v e="$e" -v nc="$ncpu" -v ec="$ecpu" 'BEGIN { split(n, a, " "); split(e, b, " ");
    printf "| %s | %s | %.2f | %.2f | %.2f |", r, c, (a[1] > 0 ? b[1] / a[1] : 0), (a[3] > 0 ? b[3] / a[3] : 0), (nc > 0 ? ec / nc : 0) }')")
  # a panic in the manager's router shows as failed requests above; say so
  if grep -q panicked "$tmp/up.log"; then
    echo "berth's manager panicked during the last row:" >&2
    grep -A1 -m1 panicked "$tmp/up.log" >&2
    break 2
  fi
done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "berth's endpoint against nginx (target: requests/s >= 0.9, p99 <= 1.2):"
echo "| round | connections | requests/s, berth / nginx | p99, berth / nginx | CPU per request, berth / nginx |"
echo "|---:|---:|---:|---:|---:|"
printf '%s\n' "${ratios[@]}"
if [ "${ROUNDS:-1}" -gt 1 ]; then
  echo
  echo "medians over ${ROUNDS} rounds:"
  echo "| connections | requests/s, berth / nginx | p99, berth / nginx | CPU per request, berth / nginx |"
  echo "|---:|---:|---:|---:|"
  printf '%s\n' "${ratios[@]}" | python3 -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    f = [x.strip() for x in line.strip().strip("|").split("|")]
    rows.setdefault(f[1], []).append([float(x) for x in f[2:5]])
for c, rs in rows.items():
    print("| %s | %s |" % (c, " | ".join("%.2f" % statistics.median(col) for col in zip(*rs))))'
fi
if [ ${#ceilings[@]} -gt 0 ]; then
  echo
  echo "the minimal hyper proxy (the stack's ceiling) against nginx, per round and mode:"
  echo "| round | connections | mode | requests/s, ceiling / nginx | p99, ceiling / nginx | CPU per request, ceiling / nginx |"
  echo "|---:|---:|---|---:|---:|---:|"
  printf '%s\n' "${ceilings[@]}"
fi
if [ ${#stat_rows[@]} -gt 0 ]; then
  echo
  echo "system calls and context switches per request (perf stat, PERF_STAT=1):"
  echo "| process | connections | system calls | context switches |"
  echo "|---|---:|---:|---:|"
  printf '%s\n' "${stat_rows[@]}"
fi
if [ -n "${PERF:-}" ] && [ ${#perf_pids[@]} -gt 0 ]; then
  for p in "${perf_pids[@]}"; do wait "$p" || true; done
  for c in ${PERF_CONNS:-64}; do
    perf report -i "$PERF-$c.data" --no-children -g none --sort dso,symbol --percent-limit 0.7 --stdio 2>/dev/null | grep -v '^$' | grep '%' | head -40 >"$PERF-$c.txt" || true
    echo "perf profile of berth at $c connections: $PERF-$c.txt"
  done
fi
kill "$nginx_pid"; wait "$nginx_pid" 2>/dev/null || true
nginx_pid=
for p in "${ceiling_pid[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done

berth serve rm proxied >/dev/null
[ "${TUNNEL:-1}" = 0 ] || berth serve rm tunneled >/dev/null
