#!/usr/bin/env bash
# Dataset cache figures (issue 7), all on this machine in one run:
#  1. GET throughput of `berth cache serve` vs nginx (from apt) serving the same files:
#     requests/s, MB/s and each server's CPU time per request for 4 KiB to 64 MiB objects
#     with keep-alive (4 KiB-64 KiB: the memory tier; 256 KiB: the largest object kept in
#     memory; 1 MiB, 4 MiB, 64 MiB: sent from the object's file, issue 42), and one ranged GET
#     (1 MiB from the middle of the 4 MiB object, `4m-range`). Load from wrk (apt) with the
#     same threads/connections/duration for both servers.
#  2. Maglev balance, disruption and build time; eviction hit ratios (examples/cache_figures).
#
#   bench/cache.sh [SECONDS=5] [CONNECTIONS=32] [ROUNDS=5]
#   env: OBJECTS="4k 64k 256k 1m 4m 4m-range 64m" (sizes with k or m; 64m and up use 4
#        connections), NO_FIGURES=1, WORKERS=<nginx worker processes = berth threads,
#        default: the number of CPUs>, BERTH_BIN=<a berth binary to measure instead of building
#        this checkout's (e.g. a copy of an older build, for before/after figures)>,
#        PERF_DIR=<directory: `perf record -g` each server during every object size's first round>,
#        PERF_STAT=<perf events, e.g. 'syscalls:sys_enter_sendfile64,context-switches': counted
#        on each server during every object size's first round, printed per request on stderr>,
#        NGINX_EXTRA=<directives added to nginx's http block, e.g. 'open_file_cache max=1000;'>
# Each round runs both servers back to back, in turns (nginx first in odd rounds, berth first
# in even ones), and gives one ratio; the table shows the medians and every round's ratio, so
# that load from other work on the machine hits both alike and its spread is visible. Also
# printed: the server's CPU time per request (all its threads or worker processes, from
# /proc), which does not depend on how much of the machine other work left to the server,
# and its ratio berth / nginx (the issue-42 target: at most 1 at every size).
# wrk shares the machine's cores with the server under test.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CONNS=${2:-32}
ROUNDS=${3:-5}
WORKERS=${WORKERS:-$(nproc)}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }
need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench/cache.sh needs ${need[*]}: installing with apt (the nginx-light package is enough)" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
    { echo "apt-get update failed: install ${need[*]} yourself (as root: apt-get install ${need[*]})" >&2; exit 1; }
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null ||
    { echo "apt-get install ${need[*]} failed: install them yourself" >&2; exit 1; }
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
OBJECTS=${OBJECTS:-4k 64k 256k 1m 4m 4m-range 64m}
bytes_of() { # 4k, 64m, 4m-range -> bytes of the file
  local n=${1%%-*}
  case $n in *k) echo $((${n%k} << 10)) ;; *m) echo $((${n%m} << 20)) ;; *) echo "$n" ;; esac
}

if [ -n "${BERTH_BIN:-}" ]; then
  BIN=$BERTH_BIN
  [ -n "${NO_FIGURES:-}" ] || cargo build --release --quiet --example cache_figures
else
  cargo build --release --quiet --bin berth --example cache_figures
  BIN=${CARGO_TARGET_DIR:-target}/release/berth
fi
FIG=${CARGO_TARGET_DIR:-target}/release/examples/cache_figures

tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

mkdir -p "$tmp/files"
files=$(for f in $OBJECTS; do echo "${f%%-*}"; done | sort -u)
for f in $files; do head -c "$(bytes_of "$f")" /dev/urandom >"$tmp/files/$f.bin"; done
chmod -R a+rX "$tmp/files"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- nginx: static files, sendfile, keep-alive, no access log --------------------------------
NPORT=$(free_port)
mkdir -p "$tmp/nginx/logs"
cat >"$tmp/nginx/nginx.conf" <<CONF
worker_processes $WORKERS;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000000;
  keepalive_timeout 120s;
  ${NGINX_EXTRA:-}
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  server {
    listen 127.0.0.1:$NPORT;
    root $tmp/files;
  }
}
CONF
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)

# --- berth cache serve: the same files PUT into a private bucket, read with a job token ----
"$BIN" cache serve --data-dir "$tmp/cache" --capacity 1GiB --listen 127.0.0.1:0 --threads "$WORKERS" >"$tmp/cache.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do
  CURL=$(grep -o 'http://[0-9.:]*' "$tmp/cache.log" | head -n1 || true)
  [ -n "$CURL" ] && break
  sleep 0.05
done
[ -n "$CURL" ] || { cat "$tmp/cache.log"; exit 1; }
ADMIN=$("$BIN" cache token --key-file "$tmp/cache/cache.key" --admin)
JOB=$("$BIN" cache token --key-file "$tmp/cache/cache.key" --projects bench --sub job-1)
BERTH_CACHE_URL=$CURL BERTH_CACHE_TOKEN=$ADMIN "$BIN" cache bucket create bench --projects bench >/dev/null
for f in $files; do
  curl -sf -X PUT -H "Authorization: Bearer $ADMIN" --data-binary @"$tmp/files/$f.bin" "$CURL/v1/objects/bench/$f.bin" >/dev/null
done
for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$NPORT/" && break; sleep 0.05; done

NGINX_MASTER=${pids[0]}
BERTH_PID=${pids[1]}
TCK=$(getconf CLK_TCK)
cpu_ticks() { # pids... -> user+system ticks of all their threads
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

# wrk prints "N requests in", "Requests/sec: N" and "Transfer/sec: X[KMG]B"
wrk_run() { # url conns perf-name extra-header pids... -> "req/s bytes/s cpu_us_per_request"
  local url=$1 conns=$2 name=$3 extra=$4 out c0 c1 perf="" stat=""
  shift 4
  if [ -n "${PERF_DIR:-}" ] && [ -n "$name" ]; then
    mkdir -p "$PERF_DIR"
    perf record -q -g -F 1999 -p "$(echo "$@" | tr ' ' ',')" -o "$PERF_DIR/$name.data" -- sleep "$SECS" 2>/dev/null &
    perf=$!
  fi
  if [ -n "${PERF_STAT:-}" ] && [ -n "$name" ]; then
    perf stat -x, -e "$PERF_STAT" -p "$(echo "$@" | tr ' ' ',')" -o "$tmp/$name.stat" -- sleep "$SECS" 2>/dev/null &
    stat=$!
  fi
  c0=$(cpu_ticks "$@")
  out=$(wrk -t2 -c"$conns" -d"${SECS}s" -H "Authorization: Bearer $JOB" ${extra:+-H "$extra"} "$url")
  c1=$(cpu_ticks "$@")
  [ -z "$perf" ] || wait "$perf" || true
  if [ -n "$stat" ]; then
    wait "$stat" || true
    # perf stat -x, lines: count,unit,event,...
    echo "$out" | awk -v name="$name" -v f="$tmp/$name.stat" '/requests in/ {n=$1} END {
      line = "perf stat " name " per request:"
      while ((getline l < f) > 0) { split(l, a, ","); if (a[3] != "" && n > 0) line = line sprintf(" %s %.2f", a[3], a[1] / n) }
      print line > "/dev/stderr" }'
  fi
  echo "$out" | awk -v d=$((c1 - c0)) -v tck="$TCK" '/requests in/ {n=$1} /Requests\/sec/ {r=$2} /Transfer\/sec/ {v=$2; m=1; if (v ~ /KB$/) m=1024; if (v ~ /MB$/) m=1048576; if (v ~ /GB$/) m=1073741824; sub(/[KMG]?B$/, "", v); b=v*m} END {printf "%.0f %.0f %.1f\n", r, b, (n > 0 ? d / tck * 1e6 / n : 0)}'
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "## GET: berth cache vs nginx ($("$NGINX" -v 2>&1 | sed 's/.*version: //')), $(nproc) cores, $WORKERS nginx workers = $WORKERS berth threads, wrk -t2, $ROUNDS rounds of ${SECS}s, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo
echo "| object | connections | nginx req/s | berth req/s | nginx MB/s | berth MB/s | berth / nginx (median) | each round | CPU per request nginx / berth | CPU berth / nginx |"
echo "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
for f in $OBJECTS; do
  file=${f%%-*}
  c=$CONNS
  [ "$(bytes_of "$f")" -lt $((64 << 20)) ] || c=4
  extra=""
  # a ranged GET: the second quarter of the object
  if [ "$f" != "$file" ]; then
    q=$(($(bytes_of "$f") / 4))
    extra="Range: bytes=$q-$((2 * q - 1))"
  fi
  : >"$tmp/n.txt"
  : >"$tmp/b.txt"
  for r in $(seq 1 "$ROUNDS"); do
    nworkers=$(pgrep -P "$NGINX_MASTER" | tr '\n' ' ')
    pn="" pb=""
    [ "$r" -gt 1 ] || { pn="nginx-$f"; pb="berth-$f"; }
    # shellcheck disable=SC2086
    if [ $((r % 2)) -eq 1 ]; then
      wrk_run "http://127.0.0.1:$NPORT/$file.bin" "$c" "$pn" "$extra" $nworkers >>"$tmp/n.txt"
      wrk_run "$CURL/v1/objects/bench/$file.bin" "$c" "$pb" "$extra" "$BERTH_PID" >>"$tmp/b.txt"
    else
      wrk_run "$CURL/v1/objects/bench/$file.bin" "$c" "$pb" "$extra" "$BERTH_PID" >>"$tmp/b.txt"
      wrk_run "http://127.0.0.1:$NPORT/$file.bin" "$c" "$pn" "$extra" $nworkers >>"$tmp/n.txt"
    fi
  done
  ratios=$(paste -d' ' "$tmp/n.txt" "$tmp/b.txt" | awk '{printf "%.2f ", ($1 > 0 ? $4 / $1 : 0)}')
  rmed=$(echo "$ratios" | tr ' ' '\n' | grep . | median)
  n=$(cut -d' ' -f1 "$tmp/n.txt" | median)
  b=$(cut -d' ' -f1 "$tmp/b.txt" | median)
  nb=$(cut -d' ' -f2 "$tmp/n.txt" | median)
  bb=$(cut -d' ' -f2 "$tmp/b.txt" | median)
  ncpu=$(cut -d' ' -f3 "$tmp/n.txt" | median)
  bcpu=$(cut -d' ' -f3 "$tmp/b.txt" | median)
  awk -v f="$f" -v c="$c" -v n="$n" -v b="$b" -v nb="$nb" -v bb="$bb" -v r="$rmed" -v rs="$ratios" -v nc="$ncpu" -v bc="$bcpu" \
    'BEGIN {printf "| %s | %s | %.0f | %.0f | %.0f | %.0f | **%.2f** | %s| %.1f / %.1f µs | **%.2f** |\n", f, c, n, b, nb/1e6, bb/1e6, r, rs, nc, bc, (nc > 0 ? bc / nc : 0)}'
done
echo
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
hits=$(curl -s "$CURL/metrics" | awk '/^berth_cache_hits_total\{bucket="bench"\}/ {print $2}')
echo "(berth served $hits hits; every request carried a job token checked with HMAC-SHA256)"
echo
[ -n "${NO_FIGURES:-}" ] || "$FIG"
