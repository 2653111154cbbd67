#!/usr/bin/env bash
# Interactive sessions' figures (issue 17), side by side in one run on this machine, against
# a fresh `berth up` (release build):
#  1. `berth exec ID -- true` round trip into a process kernel and into a container kernel,
#     vs. `docker exec CONTAINER true` into the same container (both are a CLI process each);
#  2. `berth port-forward` throughput (a download) and 1-byte round trips, vs. the kernel's
#     port directly over loopback and vs. `ssh -L` (OpenSSH, installed with apt if missing);
#  3. the app proxy: keep-alive GETs through `/apps/<job>/<app>/`, vs. the app directly.
#
#   bench/sessions.sh [EXECS=50] [MIB=512] [REQUESTS=2000]
#
# BENCH_BIN_DIR=DIR runs a prebuilt release `berth` from DIR. docs/perf.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
EXECS=${1:-50}
MIB=${2:-512}
REQUESTS=${3:-2000}
IMAGE=berth-test/busybox:1

bash scripts/test-image.sh
source bench/lib.sh
bench_berth_bin
if ! command -v sshd >/dev/null && [ ! -x /usr/sbin/sshd ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
fi
PY="python3 $PWD/bench/sessions.py"

job_id() { sed -n 's/^submitted job \([0-9]*\).*/\1/p'; }
wait_state() {
  for _ in $(seq 1 600); do
    "$BIN" show "$1" -o json | grep -q "\"state\": \"$2\"" && return 0
    sleep 0.05
  done
  echo "job $1 never got $2" >&2
  return 1
}
wait_running() { wait_state "$1" RUNNING; }
# The local port a `berth port-forward`/ssh forward listens on, from its log.
forward_port() {
  for _ in $(seq 1 200); do
    p=$(sed -n 's/^Forwarding from [0-9.]*:\([0-9]*\).*/\1/p' "$1")
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.05
  done
  cat "$1" >&2
  return 1
}

sessions() {
  local tcp http pid cid ctr fwd lport sshdir sport sshd_pid ssh_pid url
  tcp=$(free_port)
  http=$(free_port)
  pid=$("$BIN" submit --cpus 1 --app "web=$http" -- $PY serve "$tcp" "$http" | job_id)
  cid=$("$BIN" submit --cpus 0.5 --image "$IMAGE" -- sleep 3600 | job_id)
  wait_running "$pid"
  wait_running "$cid"
  # berth-<scope>-<job>.<attempt>.<kernel>; the newest first
  ctr=$(docker ps --format '{{.Names}}' | grep -E -- "-$cid\.0\.0\$" | head -n1)

  echo "== 1. exec round trip ($EXECS sequential runs of \`true\`)"
  echo "-- berth exec into a process kernel:   $($PY runs "$EXECS" "$BIN" exec "$pid" -- true)"
  echo "-- berth exec into a container kernel: $($PY runs "$EXECS" "$BIN" exec "$cid" -- true)"
  echo "-- docker exec into the same container: $($PY runs "$EXECS" docker exec "$ctr" true)"

  echo "== 2. port forwarding ($MIB MiB download; 2000 1-byte round trips)"
  fwd=$(mktemp)
  "$BIN" port-forward "$pid" ":$tcp" >"$fwd" 2>&1 &
  local fwd_pid=$!
  lport=$(forward_port "$fwd")
  sshdir=$(mktemp -d)
  ssh-keygen -q -t ed25519 -N '' -f "$sshdir/host"
  ssh-keygen -q -t ed25519 -N '' -f "$sshdir/user"
  cp "$sshdir/user.pub" "$sshdir/authorized_keys"
  mkdir -p /run/sshd
  local sshport
  sshport=$(free_port)
  /usr/sbin/sshd -D -p "$sshport" -h "$sshdir/host" -o ListenAddress=127.0.0.1 -o UsePAM=no -o StrictModes=no \
    -o "AuthorizedKeysFile=$sshdir/authorized_keys" -o PermitRootLogin=prohibit-password -o "PidFile=$sshdir/pid" &
  sshd_pid=$!
  sport=$(free_port)
  sleep 0.5
  ssh -N -q -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -i "$sshdir/user" \
    -p "$sshport" -L "$sport:127.0.0.1:$tcp" "$(id -un)@127.0.0.1" &
  ssh_pid=$!
  echo "-- direct loopback:    $($PY tcp "$tcp" "$MIB")"
  echo "-- berth port-forward: $($PY tcp "$lport" "$MIB")"
  echo "-- ssh -L:             $($PY tcp "$sport" "$MIB")"
  kill "$fwd_pid" "$ssh_pid" "$sshd_pid" 2>/dev/null || true
  wait "$fwd_pid" "$ssh_pid" "$sshd_pid" 2>/dev/null || true
  rm -rf "$sshdir" "$fwd"

  echo "== 3. app proxy ($REQUESTS GETs on one keep-alive connection)"
  url=$("$BIN" apps "$pid" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["url"])')
  echo "-- the app directly:      $($PY http "http://127.0.0.1:$http/" "$REQUESTS")"
  echo "-- through the app proxy: $($PY http "$url" "$REQUESTS" "Authorization: Bearer $BERTH_TOKEN")"
  # Stopped before berth is: kernels outlive a `berth up` stopped without --stop-jobs.
  "$BIN" cancel "$pid" "$cid" >/dev/null
  wait_state "$pid" CANCELLED
  wait_state "$cid" CANCELLED
}

echo "== machine: $(nproc) CPUs, $(uname -r), docker $(docker version -f '{{.Server.Version}}'), $(ssh -V 2>&1), $(date -u '+%F %H:%M')Z"
run_with_berth sessions
