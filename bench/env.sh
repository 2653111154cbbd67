#!/usr/bin/env bash
# Start time of a job with a Python environment (docs/environments.md): submit -> RUNNING as the
# manager records it, for (1) the first job, which builds the environment with uv (cold: a fresh
# data dir, so uv's own cache is empty and the packages come from PyPI), (2) the next job with the
# same inputs, which reuses it, (3) a job after `berth env rm`, a rebuild with uv's cache warm,
# and (4) a job without an environment, for reference. Each run starts a fresh `berth up`.
#
#   bench/env.sh [RUNS=5] [REQUIREMENTS="six==1.16.0 idna==3.7 packaging==24.1"]
#
# Needs uv (BERTH_UV, else the venv scripts/test.sh makes, else `uv` on PATH) and PyPI.
# BIN=path picks the berth binary (default: this tree's release build, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
REQS=${2:-six==1.16.0 idna==3.7 packaging==24.1}
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin berth
  BIN=${CARGO_TARGET_DIR:-target}/release/berth
fi
BIN=$(realpath "$BIN")
UV=${BERTH_UV:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/uv-venv/bin/uv}
[ -x "$UV" ] || UV=$(command -v uv) || { echo "no uv: set BERTH_UV or run scripts/test.sh" >&2; exit 1; }
PY=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
source bench/lib.sh
pid=
tmp=
cleanup() {
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -n "$tmp" ] && rm -rf "$tmp"
  pid=
}
trap cleanup EXIT
echo "== $(nproc) CPUs, $(uname -r), uv $("$UV" --version | cut -d' ' -f2), python $PY, requirements: $REQS, $RUNS runs"

# ms from submit to RUNNING of job $1, from its transitions
start_ms() {
  local id=$1
  for _ in $(seq 1 1200); do
    st=$("$BIN" show "$id" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["state"])')
    case $st in RUNNING|SUCCEEDED) break ;; FAILED|CANCELLED|LOST) echo "job $id $st" >&2; "$BIN" show "$id" >&2; return 1 ;; esac
    sleep 0.05
  done
  "$BIN" show "$id" -o json | python3 -c '
import json, sys
from datetime import datetime
d = json.load(sys.stdin)
at = {t["to"]: datetime.fromisoformat(t["at"].replace("Z", "+00:00")) for t in d["transitions"]}
print(round((at["RUNNING"] - at["PENDING"]).total_seconds() * 1000, 1))'
}

results=$(mktemp)
for run in $(seq 1 "$RUNS"); do
  tmp=$(mktemp -d /var/tmp/berth-env.XXXXXX)
  export HOME=$tmp XDG_CONFIG_HOME=
  cd "$tmp"
  printf '%s\n' $REQS >requirements.txt
  "$BIN" up --data-dir "$tmp/data" --listen 127.0.0.1:0 --no-docker --no-cache --uv "$UV" >"$tmp/up.log" 2>&1 &
  pid=$!
  berth_url "$tmp/up.log" >/dev/null
  for _ in $(seq 1 100); do "$BIN" nodes -o json | grep -q '"ready"' && break; sleep 0.05; done
  env_job() { "$BIN" submit -o json --python "$PY" --requirements requirements.txt -- python -c 'import six' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
  cold=$(start_ms "$(env_job)")
  cached=$(start_ms "$(env_job)")
  key=$("$BIN" env ls -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["envs"][0]["key"])')
  "$BIN" env rm "$key" >/dev/null
  warm=$(start_ms "$(env_job)")
  plain=$(start_ms "$("$BIN" submit -o json -- true | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
  echo "run $run: first build ${cold} ms, cached ${cached} ms, rebuild (uv cache warm) ${warm} ms, no environment ${plain} ms"
  echo "$cold $cached $warm $plain" >>"$results"
  cd /
  cleanup
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
for i, name in enumerate(["first build (cold)", "cached environment", "rebuild, uv cache warm", "no environment"]):
    v = sorted(r[i] for r in rows)
    print(f"{name:>24}: median {statistics.median(v):8.1f} ms  min {v[0]:8.1f}  max {v[-1]:8.1f}")
PY
rm -f "$results"
