#!/usr/bin/env bash
# Dataset cache, one object size: nginx and one or more berth servers (builds, or one build
# under different environments) measured in the same rounds, to tell apart changes smaller
# than what one binary moves between runs on a shared machine (issue 42, fifth pass).
#
#   bench/cache_ab.sh [OBJECT=4m] [SECONDS=4] [CONNECTIONS=32] [ROUNDS=6] [NAME=SPEC ...]
#   SPEC: "BINARY [VAR=VALUE ...]" (default: base=target/release/berth); OBJECT as in
#   bench/cache.sh (4m, 1m, 4m-range, 64m, ...).
#   env: WORKERS (default: the number of CPUs), NETNS=1 (run everything in a network namespace
#        made for the run, with its own loopback; NETNS_CC=<congestion control there, e.g.
#        cubic>, NETNS_QDISC=<a root qdisc for its lo, e.g. 'fq'>, neither touching the host),
#        SOFTIRQ=1 (one more round after the others with `perf record -a` of the softirq
#        tracepoints: how long softirqs ran in each task's context, per request).
# Each round runs every server once, the order rotated per round. Printed per server: CPU per
# request from /proc (all its threads; the issue-42 figure), the same for wrk during that run,
# and per round the ratio to nginx's in the same round; then medians and spreads.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${NETNS:-}" ] && [ -z "${IN_NETNS:-}" ]; then
  ns=berth-ab-$$
  ip netns add "$ns"
  trap 'ip netns del "$ns"' EXIT
  ip netns exec "$ns" ip link set lo up
  [ -z "${NETNS_CC:-}" ] || ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_congestion_control="$NETNS_CC"
  [ -z "${NETNS_QDISC:-}" ] || ip netns exec "$ns" tc qdisc replace dev lo root $NETNS_QDISC
  ip netns exec "$ns" env IN_NETNS="$ns" "$0" "$@"
  exit
fi
OBJ=${1:-4m}
SECS=${2:-4}
CONNS=${3:-32}
ROUNDS=${4:-6}
shift $(($# < 4 ? $# : 4))
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=("base=target/release/berth")
WORKERS=${WORKERS:-$(nproc)}
bytes_of() { local n=${1%%-*}; case $n in *k) echo $((${n%k} << 10)) ;; *m) echo $((${n%m} << 20)) ;; *) echo "$n" ;; esac; }
file=${OBJ%%-*}
size=$(bytes_of "$OBJ")
range=""
[ "$OBJ" = "$file" ] || range="Range: bytes=$((size / 4))-$((size / 2 - 1))"
[ "$size" -lt $((64 << 20)) ] || CONNS=4

tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/files" "$tmp/nginx"
head -c "$size" /dev/urandom >"$tmp/files/$file.bin"
chmod -R a+rX "$tmp/files"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NPORT=$(free_port)
cat >"$tmp/nginx/nginx.conf" <<CONF
worker_processes $WORKERS;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; tcp_nopush on;
  keepalive_requests 100000000; keepalive_timeout 120s;
  client_body_temp_path $tmp/nginx/body; proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi; uwsgi_temp_path $tmp/nginx/uwsgi; scgi_temp_path $tmp/nginx/scgi;
  server { listen 127.0.0.1:$NPORT; root $tmp/files; }
}
CONF
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)
NGINX_MASTER=$!

names=(nginx) urls=("http://127.0.0.1:$NPORT/$file.bin") spids=("")
i=0
for s in "${specs[@]}"; do
  name=${s%%=*}
  read -r -a words <<<"${s#*=}"
  bin=${words[0]}
  d="$tmp/b$i"
  env "${words[@]:1}" "$bin" cache serve --data-dir "$d" --capacity 1GiB --listen 127.0.0.1:0 --threads "$WORKERS" >"$d.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do u=$(grep -o 'http://[0-9.:]*' "$d.log" | head -n1 || true); [ -n "$u" ] && break; sleep 0.05; done
  [ -n "$u" ] || { cat "$d.log"; exit 1; }
  admin=$("$bin" cache token --key-file "$d/cache.key" --admin)
  JOB=$("$bin" cache token --key-file "$d/cache.key" --projects bench --sub job-1)
  echo "$JOB" >"$d.job"
  BERTH_CACHE_URL=$u BERTH_CACHE_TOKEN=$admin "$bin" cache bucket create bench --projects bench >/dev/null
  curl -sf -X PUT -H "Authorization: Bearer $admin" --data-binary @"$tmp/files/$file.bin" "$u/v1/objects/bench/$file.bin" >/dev/null
  names+=("$name") urls+=("$u/v1/objects/bench/$file.bin") spids+=("${pids[-1]}")
  i=$((i + 1))
done
for _ in $(seq 1 100); do curl -sf -o /dev/null "${urls[0]}" && break; sleep 0.05; done
TCK=$(getconf CLK_TCK)
server_pids() { if [ "$1" -eq 0 ]; then pgrep -P "$NGINX_MASTER" | tr '\n' ' '; else echo "${spids[$1]}"; fi; }
token() { if [ "$1" -eq 0 ]; then echo x; else cat "$tmp/b$(($1 - 1)).job"; fi; }
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }

run_one() { # index -> "requests server_ticks wrk_seconds"
  local k=$1 c0 c1 out
  # shellcheck disable=SC2046
  c0=$(ticks $(server_pids "$k"))
  out=$(/usr/bin/time -f 'WRKCPU %U %S' wrk -t2 -c"$CONNS" -d"${SECS}s" -H "Authorization: Bearer $(token "$k")" ${range:+-H "$range"} "${urls[$k]}" 2>&1)
  # shellcheck disable=SC2046
  c1=$(ticks $(server_pids "$k"))
  echo "$out" | awk -v d=$((c1 - c0)) '/requests in/ {n=$1} /WRKCPU/ {w=$2+$3} END {print n, d, w}'
}

echo "## $OBJ, $CONNS connections, ${SECS}s x $ROUNDS rounds, $WORKERS workers each, $(nproc) cores${IN_NETNS:+, in netns $IN_NETNS}"
echo "cc $(sysctl -n net.ipv4.tcp_congestion_control), qdisc on lo: $(tc qdisc show dev lo | head -n1), tcp_wmem $(sysctl -n net.ipv4.tcp_wmem | tr '\t' ' '), notsent_lowat $(sysctl -n net.ipv4.tcp_notsent_lowat), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
for k in "${!names[@]}"; do [ "$k" -eq 0 ] || echo "${names[$k]}: ${specs[$((k - 1))]#*=}"; done
n=${#names[@]}
for r in $(seq 1 "$ROUNDS"); do
  for j in $(seq 0 $((n - 1))); do
    k=$(((j + r - 1) % n))
    echo "$r $k $(run_one "$k")" >>"$tmp/runs"
  done
done
if [ -n "${SOFTIRQ:-}" ]; then
  for k in "${!names[@]}"; do
    perf record -q -a -e irq:softirq_entry,irq:softirq_exit -o "$tmp/sirq.data" -- sleep "$SECS" 2>/dev/null &
    p=$!
    res=$(run_one "$k")
    wait "$p" || true
    # time between a CPU's softirq_entry and its exit, summed per task (comm) and vector
    perf script -i "$tmp/sirq.data" -F comm,cpu,time,event,trace 2>/dev/null | awk -v reqs="${res%% *}" -v who="${names[$k]}" '
      { if (!match($0, /\[[0-9]+\] +[0-9.]+:/)) next
        f=substr($0, RSTART, RLENGTH); split(f, g, /[][ :]+/); cpu=g[2]; t=g[3] + 0
        comm=substr($0, 1, RSTART - 1); sub(/^ +/, "", comm); sub(/ +$/, "", comm)
        v=$0; sub(/^.*action=/, "", v); sub(/[^A-Z_].*$/, "", v) }
      /softirq_entry/ { st[cpu]=t; c[cpu]=comm }
      /softirq_exit/ && (cpu in st) { key=c[cpu] "/" v; s[key]+=t-st[cpu]; delete st[cpu] }
      END { line="softirq time per request, " who "\x27s run (" reqs " requests), µs:"
            for (x in s) if (s[x] * 1e6 / reqs >= 1) line=line sprintf(" %s %.0f", x, s[x] * 1e6 / reqs); print line }'
    echo "  (that run: $res)"
  done
fi
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
echo
echo "| server | CPU µs/request, median (min-max) | wrk CPU µs/request, median | server / nginx per round | median | server+wrk / nginx+wrk, median |"
echo "|---|---:|---:|---|---:|---:|"
awk -v tck="$TCK" -v names="${names[*]}" '
  function med(a, m,   i, j, t) { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
  { r=$1; k=$2; cpu[r, k]=$4 / tck * 1e6 / $3; w[r, k]=$5 * 1e6 / $3; R=(r > R ? r : R); K=(k > K ? k : K) }
  END { split(names, nm, " ")
    for (k = 0; k <= K; k++) { line=""; lo=1e18; hi=0
      for (r = 1; r <= R; r++) { a[r]=cpu[r, k]; b[r]=w[r, k]; q[r]=cpu[r, k] / cpu[r, 0]; t[r]=(cpu[r, k] + w[r, k]) / (cpu[r, 0] + w[r, 0])
        line=line sprintf("%.2f ", q[r]); lo=(a[r] < lo ? a[r] : lo); hi=(a[r] > hi ? a[r] : hi) }
      printf "| %s | %.0f (%.0f-%.0f) | %.0f | %s| **%.2f** | %.2f |\n", nm[k + 1], med(a, R), lo, hi, med(b, R), line, med(q, R), med(t, R) } }' "$tmp/runs"
