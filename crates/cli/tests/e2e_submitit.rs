//! submitit (Slurm's Python submitter, unchanged from PyPI) on berth: its `SlurmExecutor`
//! calls berth's `sbatch`, `sacct`, `scancel` and, inside each job, `srun` (this binary under
//! those names, first on the PATH) and reads what they print. A function submitted as one job
//! and as an array of 20 returns its results; a failing function raises its exception in the
//! caller; a cancelled job reports CANCELLED; a task of an array cancelled before it was made
//! shows in `sacct` as that task, cancelled, and never runs. Every Slurm command submitit runs
//! is recorded and must be one the test knows (`support::slurm_calls`).
//!
//! Needs a Python with submitit: `BERTH_TEST_SUBMITIT` (scripts/test.sh makes the venv),
//! required on CI. The jobs run that same Python, so the venv must be readable by jobs.

mod support;

use std::path::Path;
use std::process::Command;

use support::{Berth, base_cmd, text};

/// The driver, run by the submitit Python: each check prints `ok NAME`.
const DRIVER: &str = r#"
import subprocess, sys, time
import submitit
from submitit.core.utils import FailedJobError

folder = sys.argv[1]

def add(a, b):
    return a + b

def square(x):
    import os
    return (x * x, os.environ["SLURM_ARRAY_TASK_ID"])

def boom():
    raise ValueError("boom from the job")

def sleepy():
    time.sleep(600)
    return 1

def wait_state(job, wanted, timeout=120):
    deadline = time.time() + timeout
    state = None
    while time.time() < deadline:
        state = job.watcher.get_state(job.job_id, mode="force")
        if state.split()[0] in wanted:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job.job_id} never reached {wanted}: last {state}")

ex = submitit.SlurmExecutor(folder=folder)
ex.update_parameters(time=10, cpus_per_task=1, mem="256M", array_parallelism=4)

job = ex.submit(add, 2, 3)
assert job.job_id.isdigit(), job.job_id
assert job.result() == 5, job.result()
assert wait_state(job, ["COMPLETED"]) == "COMPLETED"
print("ok single", flush=True)

jobs = ex.map_array(square, range(20))
array = jobs[0].job_id.split("_")[0]
assert [j.job_id for j in jobs] == [f"{array}_{i}" for i in range(20)], [j.job_id for j in jobs]
results = [j.result() for j in jobs]
assert results == [(i * i, str(i)) for i in range(20)], results
print("ok array", flush=True)

job = ex.submit(boom)
try:
    job.result()
    raise AssertionError("a failing function returned")
except FailedJobError as e:
    assert "ValueError: boom from the job" in str(e), str(e)
assert wait_state(job, ["FAILED"]) == "FAILED"
print("ok failure", flush=True)

job = ex.submit(sleepy)
wait_state(job, ["RUNNING"])
job.cancel(check=True)
assert wait_state(job, ["CANCELLED"]).startswith("CANCELLED")
print("ok cancel", flush=True)

# An array of 3 with one task at a time: task 2 is cancelled before it is made.
ex.update_parameters(array_parallelism=1)
jobs = ex.map_array(sleepy, range(3))
wait_state(jobs[0], ["RUNNING"])
subprocess.run(["scancel", jobs[2].job_id], check=True)
assert wait_state(jobs[2], ["CANCELLED"]).startswith("CANCELLED")
subprocess.run(["scancel", jobs[0].job_id.split("_")[0]], check=True)
for j in jobs:
    assert wait_state(j, ["CANCELLED"]).startswith("CANCELLED"), j.job_id
print(f"ok cancel-unmade {jobs[0].job_id.split('_')[0]}", flush=True)
"#;

/// The last lines of each job's stderr in submitit's folder, for a failure's message.
fn job_errors(folder: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with("_log.err") {
            let body = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = body.lines().rev().take(15).collect();
            out.push_str(&format!("== {name}\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
        }
    }
    out
}

fn submitit_python() -> Option<String> {
    let py = std::env::var("BERTH_TEST_SUBMITIT").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py).args(["-c", "import submitit"]).output().is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

fn run_driver(b: &Berth, py: &str, bin: &Path, folder: &Path) -> std::process::Output {
    let script = folder.join("driver.py");
    std::fs::write(&script, DRIVER).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    // The driver's environment is the CLI's (HOME holds the credentials); sbatch exports it.
    let mut c = base_cmd(b.home.path());
    c.env("PATH", path).env_remove("RUST_LOG");
    let mut py = Command::new(py);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => py.env(k, v),
            None => py.env_remove(k),
        };
    }
    py.arg(&script).arg(folder.join("jobs")).current_dir(folder);
    py.stdin(std::process::Stdio::null()).output().unwrap()
}

#[test]
fn submitit_runs_jobs_arrays_failures_and_cancels_through_berths_slurm_commands() {
    let Some(py) = submitit_python() else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI needs submitit (scripts/test.sh installs it)");
        eprintln!("SKIPPED: no Python with submitit (run scripts/test.sh, which sets BERTH_TEST_SUBMITIT)");
        return;
    };
    let b = Berth::up(&[]);
    let rec = support::slurm_calls::Recorder::install();
    let dir = &rec.dir;
    let o = run_driver(&b, &py, &rec.path_dir(), dir.path());
    let out = text(&o.stdout);
    let sacct = base_cmd(b.home.path()).args(["ps", "-a"]).output().unwrap();
    assert!(
        o.status.success(),
        "the submitit driver failed\nstdout:\n{out}\nstderr:\n{}\njobs:\n{}\njobs' stderr:\n{}",
        text(&o.stderr),
        text(&sacct.stdout),
        job_errors(&dir.path().join("jobs"))
    );
    for check in ["single", "array", "failure", "cancel", "cancel-unmade"] {
        assert!(out.lines().any(|l| l.split(' ').nth(1) == Some(check)), "no `ok {check}` in:\n{out}");
    }
    // The task cancelled before it was made never ran: no log of its own in submitit's folder.
    let array = out.lines().find_map(|l| l.strip_prefix("ok cancel-unmade ")).unwrap();
    let logs: Vec<String> = std::fs::read_dir(dir.path().join("jobs"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("{array}_2_")) && n.contains("log"))
        .collect();
    assert!(logs.is_empty(), "the task cancelled before it was made wrote {logs:?}");
    // Every Slurm command submitit ran, in the driver and in its jobs, is one this test knows
    // (the step of the job whose function raises exits 1).
    let known: &[(&str, &[i32])] = &[
        ("sbatch", &[0]),
        ("sacct -o --parsable2 -j", &[0]),
        ("srun --unbuffered --output", &[0, 1]),
        ("scancel", &[0]),
    ];
    rec.check(known).unwrap_or_else(|e| panic!("{e}"));
}
