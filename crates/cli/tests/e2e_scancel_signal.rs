//! `scancel --signal` and `berth cancel --signal` through the real binary: a signal sent now
//! reaches the step `srun` runs (its `trap` fires) and, with `-b`, the batch shell's `trap`;
//! the job runs on, then is cancelled as usual. A pending job, another user's job and a bad
//! signal are refused, each in its own words.
//!
//! Only files the job writes are asserted: a signal that never came leaves them missing.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{Berth, base_cmd, text};

/// `tool args...` through its link in `bin`, as the admin `berth up` made.
fn slurm(b: &Berth, bin: &Path, tool: &str, args: &[&str]) -> Output {
    let base = base_cmd(b.home.path());
    let mut c = Command::new(bin.join(tool));
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.args(args).stdin(Stdio::null()).output().expect("run the slurm command")
}

/// Waits until `file` in `dir` has `lines` lines; returns its text.
fn wait_lines(b: &Berth, id: i64, dir: &Path, file: &str, lines: usize) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let t = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        if t.lines().count() >= lines {
            return t;
        }
        assert!(
            t0.elapsed() < support::PATIENCE,
            "job {id} never wrote {lines} lines to {file} ({t:?}): {:#}",
            b.job(id)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn scancel_signal_reaches_the_steps_or_the_batch_shell_and_the_job_runs_on() {
    let b = Berth::up(&[]);
    let (dir, bin) = support::slurm_bin_dir();
    let d = dir.path().display().to_string();
    // The batch shell and the step each count the USR1s they get; sh runs a trap once its
    // foreground `sleep` ends.
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
#SBATCH --time=5
#BERTH --cpus 1 --mem 256MiB
trap 'echo batch >> {d}/batch.txt' USR1
srun sh -c 'trap "echo step >> {d}/step.txt" USR1; echo up > {d}/step-up; while :; do sleep 0.1; done' &
while :; do sleep 0.1; done
"#
        ),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let o = base_cmd(b.home.path())
        .env("PATH", path)
        .args(["submit", "-o", "json"])
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "submit failed: {}", text(&o.stderr));
    let job = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap();
    let id = job.to_string();
    wait_lines(&b, job, dir.path(), "step-up", 1);

    // Default: the steps only, silently as scancel is.
    let o = slurm(&b, &bin, "scancel", &["--signal=USR1", &id]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    assert_eq!(wait_lines(&b, job, dir.path(), "step.txt", 1), "step\n");

    // -b: the batch shell only.
    let o = slurm(&b, &bin, "scancel", &["-b", "--signal=SIGUSR1", &id]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(wait_lines(&b, job, dir.path(), "batch.txt", 1), "batch\n");

    // berth's own spelling says what it reached (a number works as well as a name).
    let said = b.ok(&["cancel", "--signal", "10", &id]);
    assert!(said.starts_with(&format!("sent SIGUSR1 to the steps of job {job}: kernel 0 on ")), "{said}");
    assert_eq!(wait_lines(&b, job, dir.path(), "step.txt", 2), "step\nstep\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("batch.txt")).unwrap(), "batch\n", "-b went to the shell once");
    assert_eq!(b.state(job), "RUNNING", "a signal does not cancel");

    // Refusals: a bad signal, another user's job (as if it did not exist).
    let o = slurm(&b, &bin, "scancel", &["--signal=FOO", &id]);
    assert_eq!((o.status.code(), text(&o.stderr)), (Some(1), "scancel: error: Invalid job signal: FOO\n".into()));
    let o = b.cli(&["cancel", "--signal", "FOO", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("unknown signal `FOO`"), "{}", text(&o.stderr));
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["cancel", "--signal", "USR1", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("not found"), "{}", text(&o.stderr));

    // A pending job: Slurm's words, exit 1.
    let later = b.submit(&["--begin", "now+1hour", "--cpus", "0.1", "--", "true"]);
    let o = slurm(&b, &bin, "scancel", &["-s", "USR1", &later.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        format!("scancel: error: Kill job error on job id {later}: Job is pending execution\n")
    );

    // Then cancelled as usual.
    assert!(slurm(&b, &bin, "scancel", &[&id, &later.to_string()]).status.success());
    b.wait_state(job, "CANCELLED");

    // An ended job: Slurm's words (by the manager's reason `job_ended`), silent with -Q.
    let o = slurm(&b, &bin, "scancel", &[&later.to_string()]);
    assert_eq!(
        (o.status.code(), text(&o.stderr)),
        (
            Some(1),
            format!("scancel: error: Kill job error on job id {later}: Job/step already completing or completed\n")
        )
    );
    let o = slurm(&b, &bin, "scancel", &["-Q", &later.to_string()]);
    assert_eq!((o.status.code(), text(&o.stderr)), (Some(0), String::new()));
}
