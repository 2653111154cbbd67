#!/usr/bin/env bash
# Submit->start as a user measures it through the CLI (issue 15 item 7): a fresh `berth up`
# (release build, or BIN=path), then N jobs `sh -c 'date +%s%N > FILE'` submitted one at a time
# with GAP seconds between them; the figure is the job's own clock minus the clock read just
# before `berth submit` ran. Prints p50/p90 and the wall time of `berth submit` itself.
#
#   bench/idle-start.sh [N=40] [GAP=0.5]      (GAP=0: back to back)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-40}
GAP=${2:-0.5}
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin berth
  BIN=${CARGO_TARGET_DIR:-target}/release/berth
fi
BIN=$(realpath "$BIN")
source bench/lib.sh
tmp=$(mktemp -d /var/tmp/berth-idle.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
export HOME=$tmp XDG_CONFIG_HOME=
cd "$tmp"
"$BIN" up --data-dir "$tmp/data" --listen 127.0.0.1:0 --no-docker --no-cache ${BERTH_UP_FLAGS:-} >"$tmp/up.log" 2>&1 &
pid=$!
berth_url "$tmp/up.log" >/dev/null
for _ in $(seq 1 100); do "$BIN" nodes -o json | grep -q '"ready"' && break; sleep 0.05; done
echo "== $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $N jobs, ${GAP}s apart"
mkdir -p "$tmp/out"
for i in $(seq 1 "$N"); do
  t0=$(date +%s%N)
  "$BIN" submit --cpus 1 --mem 64MiB -- sh -c "date +%s%N > $tmp/out/$i" >/dev/null
  t1=$(date +%s%N)
  echo "$i $t0 $t1" >>"$tmp/out/submits"
  sleep "$GAP"
done
sleep 1
python3 - "$tmp/out" <<'PY'
import os, sys
out = sys.argv[1]
start, cmd = [], []
for line in open(f"{out}/submits"):
    i, t0, t1 = line.split()
    if os.path.exists(f"{out}/{i}"):
        start.append((int(open(f"{out}/{i}").read()) - int(t0)) / 1e6)
        cmd.append((int(t1) - int(t0)) / 1e6)
start.sort(); cmd.sort()
q = lambda a, f: a[min(len(a) - 1, int(len(a) * f))]
print(f"started {len(start)}: submit->job start p50 {q(start, .5):.2f} ms, p90 {q(start, .9):.2f} ms; "
      f"`berth submit` itself p50 {q(cmd, .5):.2f} ms")
PY
