#!/usr/bin/env bash
# Fuzzes berth's REST API from its own /openapi.json with Schemathesis (issue 13): a fresh
# `berth up` on a temp data dir and an ephemeral port on 127.0.0.1, the admin's token, every
# check Schemathesis has (`--checks all`: no 5xx, answers and status codes as the spec says,
# schema-violating requests refused, schema-valid ones accepted, auth enforced, ...), every
# phase (examples, coverage, fuzzing, stateful), a bounded number of examples per operation
# (about 20 s with the default on 2 shared cores, 30 s with 100). Exits non-zero on any
# failure. One worker: Hypothesis on Python 3.11 with several worker threads sometimes dies
# inside `ast` ("AST constructor recursion depth mismatch"), which is no finding about berth.
#
#   bench/fuzz.sh [EXAMPLES=50]
#
# Environment: BERTH_FUZZ_VENV (where Schemathesis is installed from PyPI; default
# ~/.cache/berth/fuzz-venv), BERTH_BIN (default: a debug build of this checkout), ST_FLAGS
# (more `st run` flags, e.g. `--seed 7` or `--max-failures 1`), BERTH_SCHEMATHESIS (the pip
# requirement; default `schemathesis>=4.32,<5`). Settings of the checks: bench/fuzz.toml. Reports (NDJSON, JUnit) go to
# $BERTH_FUZZ_REPORTS (default: a temp dir, printed at the end).
#
# The jobs it submits run (as the unprivileged uid berth maps its user to, without Docker):
# mostly random program names that fail to start. Run it on a machine where that is fine.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
EXAMPLES=${1:-50}

venv=${BERTH_FUZZ_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/fuzz-venv}
# The CLI's options differ between major versions: stay on 4.x.
SCHEMATHESIS=${BERTH_SCHEMATHESIS:-schemathesis>=4.32,<5}
if ! "$venv/bin/st" --version >/dev/null 2>&1; then
  echo "==> installing $SCHEMATHESIS from PyPI into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "$SCHEMATHESIS"
fi
"$venv/bin/st" --version

if [ -z "${BERTH_BIN:-}" ]; then
  cargo build --quiet --bin berth
  BERTH_BIN=${CARGO_TARGET_DIR:-target}/debug/berth
fi

tmp=$(mktemp -d)
reports=$(realpath -m "${BERTH_FUZZ_REPORTS:-$tmp/reports}")
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid"
    wait "$pid" || true
  fi
  # keep the reports when they live in the temp dir and something failed
  if [ "${status:-1}" -eq 0 ] || [ -n "${BERTH_FUZZ_REPORTS:-}" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT

HOME=$tmp XDG_CONFIG_HOME= "$BERTH_BIN" up --data-dir "$tmp/data" --listen 127.0.0.1:0 --no-docker --fake-gpus 2 \
  >"$tmp/up.log" 2>&1 &
pid=$!
url=$(berth_url "$tmp/up.log")
token=$(sed -n 's/^token *= *"\(.*\)"/\1/p' "$tmp/.config/berth/credentials")
for _ in $(seq 1 100); do
  HOME=$tmp XDG_CONFIG_HOME= "$BERTH_BIN" nodes -o json | grep -q '"ready"' && break
  sleep 0.1
done

echo "==> fuzzing $url/openapi.json ($EXAMPLES examples per operation)"
status=0
# From the temp dir: Hypothesis and Schemathesis keep caches (.hypothesis, .schemathesis) in
# the working directory, which must not be the checkout. --generation-database none: runs that
# depend only on the seed.
config=$PWD/bench/fuzz.toml
(cd "$tmp" && "$venv/bin/st" --no-color --config-file "$config" run "$url/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks all \
  --max-examples "$EXAMPLES" \
  --workers 1 \
  --request-timeout 20 \
  --generation-database none \
  --report junit,ndjson --report-dir "$reports" \
  ${ST_FLAGS:-}) || status=$?
if ! kill -0 "$pid" 2>/dev/null; then
  echo "berth up died during the fuzz run:" >&2
  tail -n 50 "$tmp/up.log" >&2
  status=1
fi
if grep -q 'panicked' "$tmp/up.log"; then
  echo "berth up panicked during the fuzz run:" >&2
  grep -A5 'panicked' "$tmp/up.log" >&2
  status=1
fi
[ "$status" -eq 0 ] || echo "fuzz run failed; reports in $reports, berth's log in $tmp/up.log" >&2
exit "$status"
