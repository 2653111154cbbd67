#!/usr/bin/env bash
# Dataset prefetch rate (docs/datasets.md): a job with `--dataset ds/` on `berth up` (its
# in-process cache, a `node` bucket whose origin is a directory here) waits in PREPARING while
# the agent copies the origin into the cache; the rate is the setup log's "prefetched N in S".
# Beside it, the same files read straight from disk (`cat` of every file, by 8 readers like the
# prefetch), both with the page cache dropped first (cold: the disk's speed) and not (warm:
# memory's). Then a second job with the same dataset, which finds everything cached and sends
# nothing: its PREPARING time. Each run starts a fresh `berth up`.
#
#   bench/datasets.sh [RUNS=3] [LARGE_FILES=64] [LARGE_MIB=16] [SMALL_FILES=2000] [SMALL_KIB=64]
#
# Dropping the page cache needs root (`/proc/sys/vm/drop_caches`); without it the cold rows are
# left out. BIN=path picks the berth binary (default: this tree's release build, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
LARGE=${2:-64}
LARGE_MIB=${3:-16}
SMALL=${4:-2000}
SMALL_KIB=${5:-64}
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin berth
  BIN=${CARGO_TARGET_DIR:-target}/release/berth
fi
BIN=$(realpath "$BIN")
source bench/lib.sh
pid=
work=
cleanup() {
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -n "$work" ] && rm -rf "$work"
  pid=
}
trap cleanup EXIT
can_drop=false
if [ -w /proc/sys/vm/drop_caches ]; then can_drop=true; fi
drop() { if $can_drop; then sync; echo 3 >/proc/sys/vm/drop_caches; fi; }

# one dataset, made once: large files then small ones
origin=$(mktemp -d /var/tmp/berth-ds-origin.XXXXXX)
trap 'cleanup; rm -rf "$origin"' EXIT
mkdir -p "$origin/large" "$origin/small"
for i in $(seq 1 "$LARGE"); do head -c $((LARGE_MIB << 20)) /dev/urandom >"$origin/large/$i.bin"; done
for i in $(seq 1 "$SMALL"); do head -c $((SMALL_KIB << 10)) /dev/urandom >"$origin/small/$i.bin"; done
total=$(du -sb "$origin" | cut -f1)
echo "== $(nproc) CPUs, $(uname -r), $(df -h --output=source "$origin" | tail -1) ($(findmnt -no FSTYPE -T "$origin")),"\
  "dataset: $LARGE x $LARGE_MIB MiB + $SMALL x $SMALL_KIB KiB = $((total >> 20)) MiB, $RUNS runs, drop caches: $can_drop"

# seconds to read every file of the origin with 8 readers
read_all() {
  local t0 t1
  t0=$(date +%s.%N)
  find "$origin" -type f -print0 | xargs -0 -n 64 -P 8 cat >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)"
}

# the setup log's "prefetched ... in Xs" of job $1 (after it ended), in seconds
prefetch_secs() {
  "$BIN" logs --setup "$1" | python3 -c '
import re, sys
m = re.search(r"prefetched .* in ([0-9.]+)s", sys.stdin.read())
print(m.group(1) if m else "nan")'
}

# seconds job $1 spent PREPARING, from its transitions
preparing_secs() {
  "$BIN" show "$1" -o json | python3 -c '
import json, sys
from datetime import datetime
d = json.load(sys.stdin)
at = {t["to"]: datetime.fromisoformat(t["at"].replace("Z", "+00:00")) for t in d["transitions"]}
print((at["RUNNING"] - at["PREPARING"]).total_seconds() if "PREPARING" in at else 0.0)'
}

wait_done() {
  for _ in $(seq 1 6000); do
    st=$("$BIN" show "$1" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["state"])')
    case $st in SUCCEEDED) return 0 ;; FAILED|CANCELLED|LOST) echo "job $1 $st" >&2; "$BIN" show "$1" >&2; return 1 ;; esac
    sleep 0.1
  done
  return 1
}

results=$(mktemp)
for run in $(seq 1 "$RUNS"); do
  work=$(mktemp -d /var/tmp/berth-ds.XXXXXX)
  export HOME=$work XDG_CONFIG_HOME=
  cd "$work"
  "$BIN" up --data-dir "$work/data" --listen 127.0.0.1:0 --no-docker --cache-capacity 16GiB >"$work/up.log" 2>&1 &
  pid=$!
  berth_url "$work/up.log" >/dev/null
  for _ in $(seq 1 100); do "$BIN" nodes -o json | grep -q '"ready"' && break; sleep 0.05; done
  "$BIN" cache bucket create ds --public --origin "$origin" --placement node >/dev/null
  sleep 1 # the bucket reaches the cache node with the manager's push
  cold_disk=nan
  if $can_drop; then drop; cold_disk=$(read_all); fi
  warm_disk=$(read_all)
  drop
  submit() { "$BIN" submit -o json --dataset ds/ -- true | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
  first=$(submit)
  wait_done "$first"
  cold_prefetch=$(prefetch_secs "$first")
  second=$(submit)
  wait_done "$second"
  again=$(preparing_secs "$second")
  echo "run $run: prefetch (origin cold) ${cold_prefetch}s, read from disk cold ${cold_disk}s warm ${warm_disk}s, second job PREPARING ${again}s"
  echo "$cold_prefetch $cold_disk $warm_disk $again" >>"$results"
  cd /
  cleanup
done
python3 - "$results" "$total" <<'PY'
import math, statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
total = int(sys.argv[2])
def med(i):
    v = [r[i] for r in rows if not math.isnan(r[i])]
    return statistics.median(v) if v else float("nan")
for i, name in enumerate(["prefetch into the cache (origin cold)", "read straight from disk, cold", "read straight from disk, warm"]):
    s = med(i)
    print(f"{name:>38}: {s:7.2f} s  {total / s / 1e9 if s == s else float('nan'):6.2f} GB/s")
print(f"{'second job, all cached: PREPARING':>38}: {med(3):7.2f} s")
PY
rm -f "$results"
