#!/usr/bin/env bash
# Slurm's commands, berth against real Slurm on one machine (issue 20), in one run:
#   1. a single-node Slurm 22.05 (Debian's slurm-wlm, slurmdbd on a throwaway MariaDB, munged),
#      all of it in a temp dir on 127.0.0.1, daemons started here and stopped at the end;
#   2. a fresh `berth up` (bench/lib.sh's run_with_berth) with its node drained;
#   3. N pending jobs in each, the node drained in both (Slurm: `sbatch --wrap true` from
#      SUBMIT_PARALLEL processes; berth: POST /v1/jobs over as many keep-alive connections),
#      the submit rate measured on both;
#   4. the same commands on both, RUNS times each (median, p90): squeue (default format and
#      `-h -o '%i %t'`), `squeue -u USER`, sacct over every job and `sacct -j ONE`, and berth's
#      own `berth ps` / `berth history`; berth's through `berth install-slurm-commands` links;
#   5. the 10,000-task array of `true` (submit time and makespan): Slurm's side only, until
#      berth has job arrays (ARRAY=0 skips it).
#
#   bench/slurm-side-by-side.sh [N=100000] [RUNS=10] [ARRAY=10000]
#
# Needs root (slurmd, munged, mariadbd run as root here) and
#   apt-get install -y slurm-wlm slurmdbd mariadb-server munge
# BENCH_BIN_DIR=DIR runs a prebuilt release `berth` from DIR. Prints Markdown tables;
# docs/perf.md keeps the figures. SIDES="slurm" or "berth" runs one side only;
# ARRAY_LIMIT (300) caps the array's makespan in seconds;
# SUBMIT_PARALLEL (8) is how many sbatch processes / API connections submit at once.
# Helper: bench/slurm-side-by-side.py.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
RUNS=${2:-10}
ARRAY=${3:-10000}
HELPER=$(realpath bench/slurm-side-by-side.py)

SIDES=${SIDES:-slurm berth}
source bench/lib.sh
source bench/slurm_lib.sh
[[ $SIDES != *berth* ]] || bench_berth_bin
for b in slurmctld slurmd slurmdbd munged mungekey mariadbd mariadb-install-db sbatch; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || {
    echo "no $b: apt-get install -y slurm-wlm slurmdbd mariadb-server munge" >&2; exit 1; }
done
export PATH=$PATH:/usr/sbin

RESULTS=$(mktemp /var/tmp/slurm-side-by-side.XXXXXX)
trap 'slurm_stop; rm -f "$RESULTS" "$RESULTS.submit" "$RESULTS.array"' EXIT
SACCT_ALL=(-X -n -S 2026-01-01 --parsable2 -o JobID,State)
# Times CMD on SYSTEM (slurm or berth) under LABEL, the same label on both sides.
t() { python3 "$HELPER" time "$RESULTS" "$@"; }
P=${SUBMIT_PARALLEL:-8}

# ---- the 10,000-task array of `true` ---------------------------------------------------------
# Slurm's side: submit time, and the makespan from the submit until squeue lists none of the
# tasks; berth's the same through its own sbatch, until the array has ended.
slurm_array() {
  local t0 t1 t2 jid left
  t0=$(date +%s.%N)
  jid=$(sbatch --parsable --array=1-"$ARRAY" -J array -o /dev/null --wrap true)
  t1=$(date +%s.%N)
  [ -n "$jid" ]
  # ARRAY_LIMIT seconds at most: then the tasks left are cancelled and counted.
  left=0
  while :; do
    left=$(squeue -h -r -t PD,CF,R,CG -o %i | wc -l)
    [ "$left" -eq 0 ] && break
    if python3 -c "import sys, time; sys.exit(time.time() - float(sys.argv[1]) < float(sys.argv[2]))" "$t0" "${ARRAY_LIMIT:-300}"; then
      scancel "$jid"
      while [ "$(squeue -h -o %i | wc -l)" -gt 0 ]; do sleep 0.5; done
      break
    fi
    sleep 0.2
  done
  t2=$(date +%s.%N)
  python3 -c "import sys; t0, t1, t2 = map(float, sys.argv[1:4]); n, left = int(sys.argv[4]), int(sys.argv[5]); \
print('slurm: %d-task array of true: submit %.2f s, ' % (n, t1 - t0) + ('makespan %.1f s (%.0f tasks/s)' % (t2 - t0, n / (t2 - t0)) if left == 0 else \
'not done after %.0f s: %d of %d tasks ran (%.1f tasks/s), the rest cancelled' % (t2 - t0, n - left, n, (n - left) / (t2 - t0))))" \
    "$t0" "$t1" "$t2" "$ARRAY" "$left" | tee -a "$RESULTS.array"
}
berth_array() {
  local links=$1 t0 t1 t2 jid state made
  t0=$(date +%s.%N)
  jid=$("$links/sbatch" --parsable --array=1-"$ARRAY" -J array --wrap true)
  t1=$(date +%s.%N)
  [ -n "$jid" ]
  # ARRAY_LIMIT seconds at most, as Slurm's: then the array is cancelled and its tasks counted.
  while :; do
    state=$("$BIN" show "$jid" -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["job"]["state"])')
    [ "$state" != PENDING ] && break
    if python3 -c "import sys, time; sys.exit(time.time() - float(sys.argv[1]) < float(sys.argv[2]))" "$t0" "${ARRAY_LIMIT:-300}"; then
      "$BIN" cancel "$jid" >/dev/null
      break
    fi
    sleep 0.2
  done
  t2=$(date +%s.%N)
  made=$("$BIN" ps -a -o json --limit 100000 | python3 -c "import json, sys; \
print(sum(1 for j in json.load(sys.stdin) if (j.get('array_task') or {}).get('array_id') == $jid and j['state'] == 'SUCCEEDED'))")
  python3 -c "import sys; t0, t1, t2 = map(float, sys.argv[1:4]); n, done = int(sys.argv[4]), int(sys.argv[5]); \
print('berth: %d-task array of true: submit %.2f s, ' % (n, t1 - t0) + ('makespan %.1f s (%.0f tasks/s)' % (t2 - t0, n / (t2 - t0)) if done == n else \
'not done after %.0f s: %d of %d tasks ran (%.1f tasks/s), the rest cancelled' % (t2 - t0, done, n, done / (t2 - t0))))" \
    "$t0" "$t1" "$t2" "$ARRAY" "$made" | tee -a "$RESULTS.array"
}

# ---- Slurm ------------------------------------------------------------------------------------
if [[ $SIDES == *slurm* ]]; then
echo "== Slurm $(dpkg-query -W -f '${Version}' slurm-wlm 2>/dev/null), $(nproc) CPUs, N=$N" >&2
slurm_start
[ "$ARRAY" -gt 0 ] && slurm_array
t0=$(date +%s.%N)
# The node drained, as berth's below: the jobs stay PENDING and eligible (sacct's time window
# leaves held jobs out: they were never eligible).
scontrol update NodeName="$(hostname -s)" State=DRAIN Reason=slurm-side-by-side
seq 1 "$N" | xargs -P "$P" -I{} sbatch -J b{} -o /dev/null --wrap true >/dev/null
t1=$(date +%s.%N)
python3 -c "import sys; dt = float(sys.argv[2]) - float(sys.argv[1]); \
print('slurm: submitted %d jobs in %.1f s (%.0f/s, sbatch from %s parallel processes)' % (int(sys.argv[3]), dt, int(sys.argv[3]) / dt, sys.argv[4]))" \
  "$t0" "$t1" "$N" "$P" | tee -a "$RESULTS.submit"
# Let slurmdbd catch up (sdiag's DBD agent queue) before timing anything.
for _ in $(seq 1 600); do
  q=$(sdiag | sed -n 's/^DBD Agent queue size: *//p')
  [ "${q:-0}" -eq 0 ] && break
  sleep 1
done
for _ in $(seq 1 300); do
  [ "$(sacct "${SACCT_ALL[@]}" | wc -l)" -ge "$N" ] && break
  sleep 1
done
one=$(squeue -h -o %i | sort -n | sed -n "$(( (N + 1) / 2 ))p")
me=$(id -un)
t slurm "squeue" "$RUNS" squeue
t slurm "squeue -h -o '%i %t'" "$RUNS" squeue -h -o '%i %t'
t slurm "squeue -u USER" "$RUNS" squeue -u "$me"
t slurm "sacct ${SACCT_ALL[*]}" "$RUNS" sacct "${SACCT_ALL[@]}"
t slurm "sacct -j ONE_ID" "$RUNS" sacct -j "$one"
slurm_stop
fi

# ---- berth ------------------------------------------------------------------------------------
berth_side() {
  local links node one me
  links=$(mktemp -d)
  "$BIN" install-slurm-commands "$links" >/dev/null
  # The array first: the node is drained for the pending-jobs figures below.
  [ "$ARRAY" -gt 0 ] && { berth_array "$links" || true; }
  node=$(curl -fsS -H "Authorization: Bearer $BERTH_TOKEN" "$BERTH_URL/v1/nodes" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["name"])')
  curl -fsS -X POST -H "Authorization: Bearer $BERTH_TOKEN" -H 'Content-Type: application/json' \
    -d '{"reason": "slurm-side-by-side: jobs stay pending"}' "$BERTH_URL/v1/nodes/$node/drain" >/dev/null
  python3 "$HELPER" submit-berth "$N" "$P" | tee -a "$RESULTS.submit"
  sleep 2
  one=$("$links/squeue" -h -o %i | sort -n | sed -n "$(( (N + 1) / 2 ))p")
  me=$("$links/squeue" -h -o %u | head -n1)
  t berth "squeue" "$RUNS" "$links/squeue"
  t berth "squeue -h -o '%i %t'" "$RUNS" "$links/squeue" -h -o '%i %t'
  t berth "squeue -u USER" "$RUNS" "$links/squeue" -u "$me"
  t berth "sacct ${SACCT_ALL[*]}" "$RUNS" "$links/sacct" "${SACCT_ALL[@]}"
  t berth "sacct -j ONE_ID" "$RUNS" "$links/sacct" -j "$one"
  t berth "berth ps" "$RUNS" "$BIN" ps
  t berth "berth history --since 2026-01-01" "$RUNS" "$BIN" history --since 2026-01-01
  rm -rf "$links"
}
if [[ $SIDES == *berth* ]]; then
  echo "== berth ($("$BIN" --version)), N=$N" >&2
  BERTH_UP_FLAGS="--no-docker --no-cache" run_with_berth berth_side
fi

# ---- the figures --------------------------------------------------------------------------------
echo
echo "Submit, $N jobs:"
sed 's/^/- /' "$RESULTS.submit"
[ -f "$RESULTS.array" ] && { echo; echo "Arrays:"; sed 's/^/- /' "$RESULTS.array"; }
echo
echo "Response time, $RUNS runs each, $N pending jobs in each store:"
echo
python3 "$HELPER" table "$RESULTS"
