#!/usr/bin/env bash
# Runs berth's whole test suite on a fresh machine: installs what the tests need, then runs
# every test in the workspace and lists, last, the tests that printed `SKIPPED:` (with
# CI=true any of them fails the run, except the NVIDIA GPU checks, which are counted).
# CI calls exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }
warn() { printf '\033[1;33mWARNING: %s\033[0m\n' "$*" >&2; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

# --- what the tests need -------------------------------------------------------------------
need_pkgs=()
command -v python3 >/dev/null || need_pkgs+=(python3)
command -v ip >/dev/null || need_pkgs+=(iproute2)
command -v pkill >/dev/null || need_pkgs+=(procps)
# The web dashboard is tested in a real headless Chromium through WebDriver.
command -v chromium >/dev/null || need_pkgs+=(chromium)
command -v chromedriver >/dev/null || need_pkgs+=(chromium-driver)
command -v systemd-analyze >/dev/null || need_pkgs+=(systemd)
# Folder quotas that hold jobs' writes are tested on a loop-mounted btrfs with quotas.
command -v mkfs.btrfs >/dev/null || need_pkgs+=(btrfs-progs)
# `berth man`'s pages are rendered with groff and man (crates/cli/tests/cli_docs.rs).
command -v groff >/dev/null || need_pkgs+=(groff-base)
command -v man >/dev/null || need_pkgs+=(man-db)
# Serving endpoints are called over HTTP/2 with curl (e2e_serve).
command -v curl >/dev/null || need_pkgs+=(curl)
# Container jobs on Podman (e2e_podman, the agent's conformance suite), with the init its
# containers run (catatonit); CI fails without them.
command -v podman >/dev/null || need_pkgs+=(podman)
[ -x /usr/libexec/podman/catatonit ] || need_pkgs+=(catatonit)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]} with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# The process runtime's limits (cpuset, memory, pids, OOM) need root and writable cgroups.
# Without them those tests print SKIPPED lines; say so loudly here too.
if [ "$(id -u)" -ne 0 ]; then
  warn "not running as root: cgroup limits, OOM and run-as-nobody checks will be SKIPPED"
fi
if [ ! -w /sys/fs/cgroup ] && [ ! -w /sys/fs/cgroup/memory ] && [ ! -w /sys/fs/cgroup/unified ]; then
  warn "no writable cgroup hierarchy: cgroup limit checks will be SKIPPED"
fi
if ! ldconfig -p 2>/dev/null | grep -q libnvidia-ml; then
  log "no NVML library: GPU tests use fake GPUs (--fake-gpus / --topology); real-GPU checks print \"SKIPPED: no NVIDIA GPU\" (allowed on CI)"
fi

# The Python tools the tests drive come from PyPI, each in a venv of its own under
# ~/.cache/berth (jobs run some of them, so not under a private /tmp).
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  log "installing python3-venv and python3-pip with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null || true
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/berth"

# pypi_venv NAME VENV CHECK WHAT PACKAGE...: installs PACKAGEs into VENV unless CHECK (a
# command line, `$venv` being VENV) already passes. Returns 0 once CHECK passes; otherwise
# the run fails on CI (CI=true), and elsewhere WHAT is reported as skipped and it returns 1.
pypi_venv() {
  local name=$1 venv=$2 check=$3 what=$4
  shift 4
  if ! eval "$check" >/dev/null 2>&1; then
    log "installing $name from PyPI into $venv"
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q "$@"; } || true
  fi
  eval "$check" >/dev/null 2>&1 && return 0
  if [ "${CI:-}" = true ]; then
    echo "$name could not be installed into $venv (no venv/pip or no PyPI): $what required on CI" >&2
    exit 1
  fi
  warn "SKIPPED: $name could not be installed (no venv/pip or no PyPI): $what SKIPPED"
  return 1
}

# The dataset cache's PFIO tests.
venv="${BERTH_TEST_VENV:-$cache/pfio-venv}"
if pypi_venv pfio "$venv" '"$venv/bin/python" -c "import pfio.v2"' "the PFIO dataset tests are" pfio; then
  export BERTH_TEST_PYTHON="$venv/bin/python"
fi
# The app proxy's browser test runs a real JupyterLab.
venv="${BERTH_JUPYTER_VENV:-$cache/jupyter-venv}"
if pypi_venv jupyterlab "$venv" '"$venv/bin/jupyter-lab" --version' "the JupyterLab app-proxy test is" \
  jupyterlab ipykernel; then
  export BERTH_TEST_JUPYTER="$venv/bin"
fi
# Python environments (docs/environments.md) are built with uv; the nodes then use the system
# python3 (uv downloads no Pythons here).
venv="${BERTH_UV_VENV:-$cache/uv-venv}"
if pypi_venv uv "$venv" '"$venv/bin/uv" --version' "the environment tests are" uv; then
  export BERTH_TEST_UV="$venv/bin/uv"
fi
# submitit (Slurm's Python submitter) drives berth's sbatch/sacct/scancel/srun in
# e2e_submitit; its jobs run the venv's Python too.
venv="${BERTH_SUBMITIT_VENV:-$cache/submitit-venv}"
if pypi_venv submitit "$venv" '"$venv/bin/python" -c "import submitit"' "the submitit test is" submitit; then
  export BERTH_TEST_SUBMITIT="$venv/bin/python"
fi
# Slurm's tool ecosystem (Snakemake's slurm executor, Parsl, dask-jobqueue) drives berth's Slurm
# commands in e2e_slurm_tools; their workers and job steps run the venv's Python too.
venv="${BERTH_SLURM_TOOLS_VENV:-$cache/slurm-tools-venv}"
if pypi_venv "snakemake, parsl and dask-jobqueue" "$venv" \
  '"$venv/bin/python" -c "import snakemake, snakemake_executor_plugin_slurm, parsl, dask_jobqueue"' \
  "the Slurm tool tests are" snakemake snakemake-executor-plugin-slurm parsl dask-jobqueue; then
  export BERTH_TEST_SLURM_TOOLS="$venv/bin/python"
fi
# The API fuzz run (bench/fuzz.sh) needs Schemathesis.
fuzz_venv="${BERTH_FUZZ_VENV:-$cache/fuzz-venv}"
run_fuzz=false
if pypi_venv schemathesis "$fuzz_venv" '"$venv/bin/st" --version' "the API fuzz run (bench/fuzz.sh) is" \
  "${BERTH_SCHEMATHESIS:-schemathesis>=4.32,<5}"; then
  run_fuzz=true
fi

# The metrics tests (crates/cli/tests/e2e_metrics.rs) scrape berth with a real Prometheus and
# check deploy/prometheus with promtool: Debian's `prometheus` package. The tests start the
# binary themselves (never the packaged service; no recommends, so no node exporter either).
# On CI a missing Prometheus fails the run.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  log "installing prometheus with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null || true
fi
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "prometheus could not be installed (apt-get install prometheus): the metrics tests are required on CI" >&2
    exit 1
  fi
  warn "SKIPPED: no prometheus/promtool: the Prometheus metrics tests will be SKIPPED"
fi

# The PostgreSQL store's tests (crates/store/tests/postgres.rs, copy.rs, the manager's and the
# CLI's) start throwaway clusters of their own with initdb and pg_ctl from Debian's
# `postgresql` package (berth_store::test_support; never the packaged service). On CI a
# missing PostgreSQL fails those tests, and so the run.
pg_bin() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }
if ! pg_bin; then
  log "installing postgresql with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null || true
fi
if ! pg_bin; then
  if [ "${CI:-}" = true ]; then
    echo "postgresql could not be installed (apt-get install postgresql): the PostgreSQL store tests are required on CI" >&2
    exit 1
  fi
  warn "SKIPPED: no PostgreSQL (initdb, pg_ctl): the PostgreSQL store tests will be SKIPPED"
fi

# The docker runtime's tests need a running dockerd and a static busybox, from which
# scripts/test-image.sh builds the test images (no registry is reached). dockerd is started
# in the background when it is not running; it keeps running after the tests.
need_pkgs=()
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
# e2e_failover cuts a manager off its PostgreSQL with iptables in its network namespace
command -v iptables >/dev/null || need_pkgs+=(iptables)
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then need_pkgs+=(busybox-static); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]} with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null || true
fi
if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  log "starting dockerd in the background (log: ${TMPDIR:-/tmp}/berth-dockerd.log)"
  as_root sh -c "nohup dockerd >'${TMPDIR:-/tmp}/berth-dockerd.log' 2>&1 </dev/null &" || true
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
if docker info >/dev/null 2>&1; then
  bash scripts/test-image.sh || warn "cannot build the docker test images: docker tests will be SKIPPED"
else
  warn "SKIPPED: no running Docker daemon (see ${TMPDIR:-/tmp}/berth-dockerd.log): every docker runtime test will be SKIPPED"
fi

# --- the tests -----------------------------------------------------------------------------
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-always}"
# A CI run builds everything once from a fresh clone: incremental caches only cost time and disk
# there (the lints and the tests are two clean builds of the whole workspace).
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
export RUST_BACKTRACE=1
# A test that cannot run here prints `SKIPPED: why` and passes; they are listed at the end (and
# fail the run on CI unless they need an NVIDIA GPU): scripts/report-skips.py.
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
tests_status=0
# Root agents under test make the node's favordynmods cgroup mount (agent runtime/dynmods.rs)
# where the machine has none; it is meant to outlive them, not the test run.
dynmods=/run/berth/cgroup-dynmods
had_dynmods=false
if grep -q " $dynmods " /proc/self/mountinfo; then had_dynmods=true; fi
remove_dynmods() {
  if [ "$had_dynmods" = false ] && grep -q " $dynmods " /proc/self/mountinfo; then
    umount -l "$dynmods" && rmdir "$dynmods" /run/berth 2>/dev/null
  fi
  true
}
trap remove_dynmods EXIT
# The habits the team keeps are checked before any test runs: formatting and every lint.
for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    log "rustup component add $component"
    rustup component add "$component"
  fi
done
log "cargo fmt --all --check"
if ! cargo fmt --all --check; then
  echo "the code is not formatted: run \`cargo fmt --all\` and commit the result" >&2
  exit 1
fi
log "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  # nextest does not run doctests; run them first so the suite's summary line comes last
  log "cargo test --workspace --doc"
  cargo test --workspace --doc
  # .config/nextest.toml keeps passing tests' output in this JUnit report
  report="$target_dir/nextest/default/junit.xml"
  rm -f "$report"
  log "cargo nextest run --workspace"
  cargo nextest run --workspace --no-fail-fast "$@" || tests_status=$?
else
  log "cargo test --workspace (cargo-nextest not found)"
  report="$target_dir/berth-test.log"
  # --nocapture so that the SKIPPED lines reach the log
  cargo test --workspace --no-fail-fast "$@" -- --nocapture 2>&1 | tee "$report" || tests_status=$?
fi

# Lists the tests that skipped, last thing in the run; on CI, fails on any that is not an
# NVIDIA GPU check.
report_skips() {
  log "tests that skipped"
  local ci_flag=()
  if [ "${CI:-}" = true ]; then ci_flag=(--ci); fi
  if [ ! -f "$report" ]; then
    warn "no test report at $report: cannot tell which tests skipped"
    [ "${CI:-}" != true ]
    return
  fi
  python3 scripts/report-skips.py "${ci_flag[@]}" "$report"
}
if [ "$tests_status" -ne 0 ]; then
  report_skips || true
  exit "$tests_status"
fi

# The Debian package (cargo-deb from crates.io, pinned: its dev-profile builds are what the
# check packs), checked with dpkg-deb (scripts/check-deb.sh).
if ! cargo deb --version 2>/dev/null | grep -q "3.8.0"; then
  log "installing cargo-deb 3.8.0 from crates.io"
  cargo install --quiet --locked cargo-deb --version 3.8.0 || true
fi
if cargo deb --version >/dev/null 2>&1; then
  log "scripts/check-deb.sh (the .deb: control data, files, conffiles, postinst)"
  bash scripts/check-deb.sh "$target_dir"
elif [ "${CI:-}" = true ]; then
  echo "cargo-deb could not be installed (cargo install cargo-deb): the package check is required on CI" >&2
  exit 1
else
  warn "SKIPPED: cargo-deb could not be installed: the package check (scripts/check-deb.sh) did not run"
fi

# The REST API fuzzed from its own /openapi.json against a real `berth up` (bench/fuzz.sh).
if [ "$run_fuzz" = true ]; then
  log "bench/fuzz.sh (Schemathesis, every check)"
  BERTH_FUZZ_VENV="$fuzz_venv" bash bench/fuzz.sh
fi
report_skips
