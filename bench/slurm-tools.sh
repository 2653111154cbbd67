#!/usr/bin/env bash
# Slurm's tool ecosystem on berth and on real Slurm 22.05, side by side in one run (issue 48):
#   1. a single-node Slurm (bench/slurm_lib.sh), then a fresh `berth up` with
#      `berth install-slurm-commands`, each in turn on this machine;
#   2. on each, the tools berth's tests drive (crates/cli/tests/slurm_tools/: Snakemake's slurm
#      executor on a 3-rule workflow, Parsl's SlurmProvider, dask-jobqueue's SLURMCluster), every
#      Slurm command they run recorded (record.sh), and the wall time of each tool;
#   3. on each, the commands and options tools and users run that the tools above do not
#      (PROBES below), exit status and first line of output.
# Prints Markdown tables (docs/slurm.md keeps them): per tool, both sides' result and time; per
# call shape the tools made, how often and with which exit status on each side; per probe, both
# answers.
#
#   bench/slurm-tools.sh
#
# Needs root and `apt-get install -y slurm-wlm slurmdbd mariadb-server munge`, and the tools'
# venv that scripts/test.sh makes (SLURM_TOOLS_VENV, default ~/.cache/berth/slurm-tools-venv).
# BENCH_BIN_DIR=DIR runs a prebuilt `berth` from DIR. SIDES="slurm" or "berth" runs one side.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=$(realpath crates/cli/tests/slurm_tools)
VENV=${SLURM_TOOLS_VENV:-$HOME/.cache/berth/slurm-tools-venv}
SIDES=${SIDES:-slurm berth}
"$VENV/bin/python" -c 'import snakemake, snakemake_executor_plugin_slurm, parsl, dask_jobqueue' || {
  echo "no tools venv at $VENV: run scripts/test.sh (or set SLURM_TOOLS_VENV)" >&2; exit 1; }
source bench/lib.sh
source bench/slurm_lib.sh
[[ $SIDES != *berth* ]] || bench_berth_bin
export PATH=$PATH:/usr/sbin

OUT=$(mktemp -d /var/tmp/slurm-tools.XXXXXX)
chmod 755 "$OUT"
berth_pid=
conf_link=
stop_all() {
  slurm_stop
  if [ -n "$conf_link" ]; then rm -f /etc/slurm/slurm.conf; fi
  [ -n "$berth_pid" ] && { kill -INT "$berth_pid" 2>/dev/null; wait "$berth_pid" || true; }
  if [ -z "${KEEP_OUT:-}" ]; then rm -rf "$OUT"; fi
}
trap stop_all EXIT

# The commands tools and users run beyond the three tools' own calls: LABEL|COMMAND (bash; JOB
# is a held job submitted just before; ARRAY a held 2-task array, one task at a time).
PROBES=(
  "sbatch --version|sbatch --version"
  "squeue --version|squeue --version"
  "scontrol show config (MinJobAge)|scontrol show config | grep -E '^(MinJobAge|MaxArraySize|ClusterName) '"
  "sacct --job prefix|sacct -X -n --job \$JOB -o JobID,State"
  "sacct --clusters all --endtime now|sacct -X -n --clusters all --starttime now-1hours --endtime now -o JobID -j \$JOB"
  "sacct -M all|sacct -X -n -M all -j \$JOB -o JobID"
  "sacct new fields|sacct -X -n -P -j \$JOB -o DerivedExitCode,MaxRSS,TotalCPU,CPUTime,Comment,WorkDir,ReqMem,Account"
  "squeue --part prefix|squeue -h --part \$PART -o %i -j \$JOB"
  "squeue -r (array)|squeue -h -r -o %i -j \$ARRAY"
  "squeue pending array|squeue -h -o %i -j \$ARRAY"
  "squeue -S -i|squeue -h -S -i -o %i"
  "squeue -M all|squeue -h -M all -o %i -j \$JOB"
  "squeue -O JobID|squeue -h -O JobID -j \$JOB"
  "sinfo -s|sinfo -s"
  "sinfo -l|sinfo -l | sed -n 2p"
  "sbatch --test-only|sbatch --test-only -p \$PART --wrap true"
  "sbatch --hold, then release|j=\$(sbatch --parsable --hold -o /dev/null --wrap true) && squeue -h -o '%t %r' -j \$j && scontrol release \$j"
  "sbatch --mem=0|sbatch --parsable --mem=0 -o /dev/null --wrap true"
  "sacctmgr show user|sacctmgr -n -s list user \$(id -un) format=account%256"
  "sshare -U|sshare -U --format Account%256 --noheader"
  "srun options in a job|sbatch --parsable -W -o \$OUT/srun.out --wrap 'srun -n1 -N1 -c 1 --mem=100M --mpi=none --exact --overlap -J x --gres=none --cpu_bind=none --distribution=block --hint=nomultithread -t 1 --quiet --chdir=/tmp true' >/dev/null && cat \$OUT/srun.out"
)

# Runs the tools and the probes on SIDE, whose Slurm commands are in REAL, PART its partition.
run_side() {
  local side=$1 real=$2 part=$3 dir rec t0 t1 ok tool
  dir=$OUT/$side
  rec=$dir/rec
  mkdir -p "$rec"
  chmod -R 777 "$dir"
  install -m 755 "$TOOLS/record.sh" "$rec/record.sh"
  echo "$real" >"$rec/real"
  for c in sbatch squeue sacct scancel scontrol sinfo srun sacctmgr sshare; do ln -s record.sh "$rec/$c"; done
  : >"$dir/calls.log"
  chmod 666 "$dir/calls.log"
  for tool in snakemake parsl dask; do
    mkdir -p "$dir/$tool"
    chmod 777 "$dir/$tool"
    t0=$(date +%s.%N)
    ok=ok
    case $tool in
      snakemake)
        cp "$TOOLS/Snakefile" "$dir/$tool/"
        (cd "$dir/$tool" && PATH=$rec:$VENV/bin:$PATH timeout 300 snakemake --executor slurm -j 3 --latency-wait 10 \
          --slurm-init-seconds-before-status-checks 1 --seconds-between-status-checks 1 \
          >"$dir/$tool.log" 2>&1) || ok=failed
        [ "$(cat "$dir/$tool/c.txt" 2>/dev/null)" = "$(printf 'a\nb\nc')" ] || ok=failed ;;
      parsl)
        (cd "$dir/$tool" && PATH=$rec:$VENV/bin:$PATH timeout 300 python "$TOOLS/parsl_driver.py" "$dir/$tool/run" "$part" \
          >"$dir/$tool.log" 2>&1) || ok=failed
        grep -q "results \[0, 2, 4\]" "$dir/$tool.log" || ok=failed ;;
      dask)
        (cd "$dir/$tool" && PATH=$rec:$VENV/bin:$PATH timeout 300 python "$TOOLS/dask_driver.py" "$dir/$tool/logs" "$part" \
          >"$dir/$tool.log" 2>&1) || ok=failed
        grep -qx "after 0" "$dir/$tool.log" || ok=failed ;;
    esac
    t1=$(date +%s.%N)
    echo "$side|$tool|$ok|$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")" \
      >>"$OUT/tools"
  done
  # The probes, through the same links (not recorded).
  local JOB ARRAY label cmd out rc
  JOB=$("$real/sbatch" --parsable --hold -o /dev/null --wrap true)
  ARRAY=$("$real/sbatch" --parsable --hold -o /dev/null --array=3-4%1 --wrap true)
  sleep 1
  for p in "${PROBES[@]}"; do
    label=${p%%|*}
    cmd=${p#*|}
    out=$(cd "$dir" && JOB=$JOB ARRAY=$ARRAY PART=$part OUT=$dir PATH=$real:$PATH \
      timeout 60 bash -c "$cmd" 2>&1) && rc=0 || rc=$?
    printf '%s\x1f%s\x1f%s\x1f%s\n' "$side" "$label" "$rc" "$(printf '%s' "$out" | head -n 2 | tr '\n' ' ' | cut -c1-90)" \
      >>"$OUT/probes"
  done
  "$real/scancel" "$JOB" "$ARRAY" >/dev/null 2>&1 || true
}

if [[ $SIDES == *slurm* ]]; then
  echo "== Slurm $(dpkg-query -W -f '${Version}' slurm-wlm 2>/dev/null), $(nproc) CPUs" >&2
  slurm_start
  # srun inside a batch job finds no SLURM_CONF there (slurmd does not pass it on): it reads
  # /etc/slurm/slurm.conf, linked to ours while this runs when no Slurm is configured there.
  if [ ! -e /etc/slurm/slurm.conf ]; then
    mkdir -p /etc/slurm
    ln -s "$SLURM_CONF" /etc/slurm/slurm.conf
    conf_link=1
  fi
  run_side slurm "$(dirname "$(command -v sbatch)")" debug
  slurm_stop
  if [ -n "$conf_link" ]; then rm -f /etc/slurm/slurm.conf; fi
  conf_link=
fi
if [[ $SIDES == *berth* ]]; then
  echo "== berth $("$BIN" --version)" >&2
  home=$OUT/berth-home
  mkdir -p "$home" "$OUT/berth-bin"
  HOME=$home XDG_CONFIG_HOME= "$BIN" up --data-dir "$OUT/berth-data" --listen 127.0.0.1:0 >"$OUT/up.log" 2>&1 &
  berth_pid=$!
  berth_url "$OUT/up.log" >/dev/null
  for _ in $(seq 1 100); do
    HOME=$home XDG_CONFIG_HOME= "$BIN" nodes -o json 2>/dev/null | grep -q '"ready"' && break
    sleep 0.1
  done
  cp "$BIN" "$OUT/berth-bin/berth"
  "$OUT/berth-bin/berth" install-slurm-commands "$OUT/berth-bin" >/dev/null 2>&1
  HOME=$home XDG_CONFIG_HOME= run_side berth "$OUT/berth-bin" default
fi
python3 bench/slurm_tools_report.py "$OUT"
