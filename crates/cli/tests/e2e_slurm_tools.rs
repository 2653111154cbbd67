//! Slurm's tool ecosystem, unchanged from PyPI, drives berth as it drives Slurm: Snakemake's
//! slurm executor runs a three-rule workflow (each rule a job whose step is `srun`), Parsl's
//! `SlurmProvider` runs apps on a block and scales it in, dask-jobqueue's `SLURMCluster` scales
//! to two workers and back. Every Slurm command a tool runs is recorded
//! ([`support::slurm_calls`]) and must be one the test knows, with the status Slurm gives: a
//! new tool version that calls something new fails here with the command named.
//!
//! Needs a Python with snakemake, snakemake-executor-plugin-slurm, parsl and dask-jobqueue:
//! `BERTH_TEST_SLURM_TOOLS` (scripts/test.sh makes the venv), required on CI. The jobs run
//! that same Python (workers, job steps), so the venv must be readable by jobs.

mod support;

use std::path::{Path, PathBuf};

use support::slurm_calls::{Recorder, tool_command};
use support::{Berth, base_cmd, text};

/// The venv's `bin/` with the tools, or `None` after a SKIPPED line (an error on CI).
fn tools_bin() -> Option<PathBuf> {
    let py = std::env::var("BERTH_TEST_SLURM_TOOLS").map(PathBuf::from).unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import snakemake, snakemake_executor_plugin_slurm, parsl, dask_jobqueue"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI needs the Slurm tools (scripts/test.sh installs them)"
        );
        eprintln!(
            "SKIPPED: no Python with snakemake, parsl and dask-jobqueue (run scripts/test.sh, which sets BERTH_TEST_SLURM_TOOLS)"
        );
        return None;
    }
    Some(py.parent().unwrap().to_path_buf())
}

/// Runs `program args` in `dir` under `timeout`, with the recorder and the venv on the PATH.
fn run_tool(b: &Berth, rec: &Recorder, venv_bin: &Path, dir: &Path, program: &str, args: &[&str]) -> (bool, String) {
    let mut c = tool_command(b.home.path(), Path::new("timeout"), &rec.path(venv_bin));
    c.arg("300").arg(venv_bin.join(program)).args(args).current_dir(dir);
    let o = c.output().unwrap();
    (o.status.success(), format!("stdout:\n{}\nstderr:\n{}", text(&o.stdout), text(&o.stderr)))
}

/// What went wrong, for a failed assertion: the tool's output, the calls and berth's jobs.
fn explain(b: &Berth, rec: &Recorder, out: &str) -> String {
    let calls: Vec<String> =
        rec.calls().iter().map(|c| format!("{} => {} {}", c.line(), c.status, c.stderr.trim())).collect();
    let ps = base_cmd(b.home.path()).args(["ps", "-a"]).output().unwrap();
    format!("{out}\ncalls:\n{}\njobs:\n{}", calls.join("\n"), text(&ps.stdout))
}

/// A directory jobs can read and write (the tools keep their files next to the workflow).
fn workdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::shared_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

#[test]
fn snakemake_runs_a_three_rule_workflow_through_berths_slurm_commands() {
    let Some(venv) = tools_bin() else { return };
    let b = Berth::up(&[]);
    let rec = Recorder::install();
    let dir = workdir();
    std::fs::write(dir.path().join("Snakefile"), include_str!("slurm_tools/Snakefile")).unwrap();
    let (ok, out) = run_tool(
        &b,
        &rec,
        &venv,
        dir.path(),
        "snakemake",
        &[
            "--executor",
            "slurm",
            "-j",
            "3",
            "--latency-wait",
            "10",
            // The plugin waits 40 s before its first poll by default.
            "--slurm-init-seconds-before-status-checks",
            "1",
            "--seconds-between-status-checks",
            "1",
        ],
    );
    assert!(ok, "snakemake failed\n{}", explain(&b, &rec, &out));
    let c = std::fs::read_to_string(dir.path().join("c.txt")).unwrap();
    assert_eq!(c, "a\nb\nc\n", "the workflow's output");
    let calls = rec
        .check(&[
            ("scontrol show config", &[0]),
            // The plugin's guess of an account passes `| tail -1` to sacct as arguments: Slurm's
            // sacct refuses them (exit 1), so does berth's (clap's exit 2).
            ("sacct -nu -o tail -1", &[1, 2]),
            ("sinfo -o", &[0]),
            (
                "sbatch --parsable --job-name --output --export --comment -p PART --ntasks --cpus-per-task -D --wrap",
                &[0],
            ),
            (
                "sbatch --parsable --job-name --output --export --comment -p PART -t --mem --ntasks --cpus-per-task -D --wrap",
                &[0],
            ),
            ("srun -n1 --cpu-bind --cpus-per-task --nodes", &[0]),
            (
                "sacct -X --parsable2 --clusters all --noheader --format --starttime --endtime now --name",
                &[0],
            ),
        ])
        .unwrap_or_else(|e| panic!("{e}\n{}", explain(&b, &rec, &out)));
    // One job per rule but `all`, each with its step run by srun inside the job.
    let count = |cmd: &str| calls.iter().filter(|c| c.argv[0] == cmd).count();
    assert_eq!(count("sbatch"), 3, "{}", explain(&b, &rec, &out));
    assert_eq!(count("srun"), 3, "{}", explain(&b, &rec, &out));
    assert!(count("sacct") >= 1, "snakemake never polled the jobs' states\n{}", explain(&b, &rec, &out));
}

#[test]
fn parsl_runs_apps_on_a_block_and_scales_it_in_through_berths_slurm_commands() {
    let Some(venv) = tools_bin() else { return };
    let b = Berth::up(&[]);
    let rec = Recorder::install();
    let dir = workdir();
    std::fs::write(dir.path().join("driver.py"), include_str!("slurm_tools/parsl_driver.py")).unwrap();
    let runinfo = dir.path().join("runinfo");
    let (ok, out) = run_tool(&b, &rec, &venv, dir.path(), "python", &["driver.py", runinfo.to_str().unwrap()]);
    assert!(ok, "the Parsl driver failed\n{}", explain(&b, &rec, &out));
    assert!(out.contains("results [0, 2, 4]"), "{}", explain(&b, &rec, &out));
    assert!(out.contains("blocks ['SCALED_IN']"), "the block was not scaled in\n{}", explain(&b, &rec, &out));
    let calls = rec
        .check(&[
            ("sacct -X", &[0]),
            ("sbatch", &[0]),
            ("sacct -X --noheader --format --job", &[0]),
            ("scancel", &[0, 1]),
        ])
        .unwrap_or_else(|e| panic!("{e}\n{}", explain(&b, &rec, &out)));
    // The block's job was cancelled by id when it was scaled in; Parsl's last `scancel` with
    // no ids at cleanup fails as Slurm's does.
    assert!(
        calls.iter().any(|c| c.argv[0] == "scancel" && c.argv.len() == 2 && c.status == 0),
        "{}",
        explain(&b, &rec, &out)
    );
    assert!(calls.iter().any(|c| c.argv[0] == "sacct" && c.argv.contains(&"--job".to_string())), "Parsl never polled");
}

#[test]
fn dask_jobqueue_scales_to_two_workers_and_back_through_berths_slurm_commands() {
    let Some(venv) = tools_bin() else { return };
    let b = Berth::up(&[]);
    let rec = Recorder::install();
    let dir = workdir();
    std::fs::write(dir.path().join("driver.py"), include_str!("slurm_tools/dask_driver.py")).unwrap();
    let logs = dir.path().join("logs");
    let (ok, out) = run_tool(&b, &rec, &venv, dir.path(), "python", &["driver.py", logs.to_str().unwrap()]);
    assert!(ok, "the dask-jobqueue driver failed\n{}", explain(&b, &rec, &out));
    // Two workers joined (a worker's nanny may briefly register a third while it restarts one
    // on a loaded machine), the task ran, and none was left after `scale(0)`.
    let workers = out.lines().find_map(|l| l.strip_prefix("workers ")?.parse::<u32>().ok());
    assert!(workers.is_some_and(|n| n >= 2), "fewer than 2 workers\n{}", explain(&b, &rec, &out));
    for line in ["sum 42", "after 0"] {
        assert!(out.lines().any(|l| l == line), "no `{line}`\n{}", explain(&b, &rec, &out));
    }
    let calls = rec
        .check(&[("sbatch", &[0]), ("scancel", &[0])])
        .unwrap_or_else(|e| panic!("{e}\n{}", explain(&b, &rec, &out)));
    assert_eq!(calls.iter().filter(|c| c.argv[0] == "sbatch").count(), 2, "{}", explain(&b, &rec, &out));
    assert_eq!(calls.iter().filter(|c| c.argv[0] == "scancel").count(), 2, "{}", explain(&b, &rec, &out));
    // `-o dask-worker-%J.out` names a batch job's log by its id alone, as Slurm does.
    let mut names: Vec<String> =
        std::fs::read_dir(&logs).unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    let ids: Vec<String> = calls.iter().filter(|c| c.argv[0] == "scancel").map(|c| c.argv[1].clone()).collect();
    for id in ids {
        for ext in ["out", "err"] {
            let want = format!("dask-worker-{id}.{ext}");
            assert!(names.contains(&want), "no {want} in {names:?}");
        }
    }
}
