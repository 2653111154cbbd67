//! Slurm's `--signal` through the real binary: `#SBATCH --signal=B:USR1@55` reaches the batch
//! shell's `trap` before the time limit, and `--signal=USR2@...` reaches the step `srun` runs
//! (its `trap` fires) while the batch shell, which has no trap, lives on and goes on with the
//! script, as submitit relies on. A signal without a time limit is refused at submit.
//!
//! Only files the jobs write are asserted, never times: a signal that never came leaves the
//! job running into its limit (TIMEOUT) without the file.

mod support;

use std::path::Path;

use support::{Berth, base_cmd, text};

/// Writes script `name` into `dir` and submits it with `bin` first on the PATH the job
/// exports → the job id.
fn submit_script(b: &Berth, dir: &Path, bin: &Path, name: &str, body: &str) -> i64 {
    let script = dir.join(name);
    std::fs::write(&script, body).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let o = base_cmd(b.home.path())
        .env("PATH", path)
        .args(["submit", "-o", "json"])
        .arg(&script)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "submit failed: {}", text(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap()
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| format!("(no {file}: {e})"))
}

#[test]
fn the_warning_signal_reaches_the_batch_shell_with_b_and_the_steps_without() {
    let b = Berth::up(&[]);
    let (dir, bin) = support::berth_bin_dir();
    let d = dir.path().display().to_string();
    // Due 5 s after the start. sh runs a trap once its foreground `sleep 1` ends; a signal
    // that never comes lets the loop run into the one-minute limit.
    let batch = submit_script(
        &b,
        dir.path(),
        &bin,
        "batch.sh",
        &format!(
            r#"#!/bin/sh
#SBATCH --time=1
#SBATCH --signal=B:USR1@55
#BERTH --cpus 1 --mem 256MiB
trap 'echo got USR1 > {d}/batch.txt; exit 0' USR1
i=0; while [ $i -lt 100 ]; do sleep 1; i=$((i+1)); done
echo no signal > {d}/batch.txt
"#
        ),
    );
    // Due 20 s after the start, long after srun has started its step. The step's sh traps
    // it; the batch shell has no trap and would die of USR2 if it got it.
    let steps = submit_script(
        &b,
        dir.path(),
        &bin,
        "steps.sh",
        &format!(
            r#"#!/bin/sh
#SBATCH --time=2
#SBATCH --signal=USR2@100
#BERTH --cpus 1 --mem 256MiB
srun sh -c 'trap "echo got USR2 > {d}/step.txt; exit 0" USR2; i=0; while [ $i -lt 200 ]; do sleep 1; i=$((i+1)); done; echo no signal > {d}/step.txt'
echo "srun=$? after the step" > {d}/after.txt
"#
        ),
    );
    let done = b.wait_state(batch, "SUCCEEDED");
    assert_eq!(read(dir.path(), "batch.txt"), "got USR1\n", "{done:#}");
    let shown = b.ok(&["show", &batch.to_string()]);
    assert!(shown.contains("B:USR1@55: to the batch shell, 55 s before the time limit"), "{shown}");

    let done = b.wait_state(steps, "SUCCEEDED");
    assert_eq!(read(dir.path(), "step.txt"), "got USR2\n", "{done:#}");
    assert_eq!(read(dir.path(), "after.txt"), "srun=0 after the step\n", "the batch shell lives on: {done:#}");
    assert_eq!(done["spec"]["signal"], serde_json::json!({"signal": 12, "before_secs": 100}), "{done:#}");

    // Nothing to count back from: refused, saying how to fix it.
    let o = b.cli(&["submit", "--signal", "USR1@30", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("add --time-limit"), "{}", text(&o.stderr));
    let o = b.cli(&["submit", "--time-limit", "1m", "--signal", "USR9", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "a usage mistake: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains("unknown signal `USR9`"), "{}", text(&o.stderr));
}

/// Waits until the job wrote `file` in `dir`; returns its text.
fn wait_file(b: &Berth, id: i64, dir: &Path, file: &str) -> String {
    let t0 = std::time::Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(dir.join(file))
            && !t.is_empty()
        {
            return t;
        }
        assert!(t0.elapsed() < support::PATIENCE, "job {id} never wrote {file}: {:#}", b.job(id));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// An agent restarted while its kernels run: a kernel whose signal is due later still gets it
/// from the agent that took it over, and one that got it already does not get it again.
#[test]
fn a_taken_over_kernel_gets_its_signal_once() {
    let mut b = Berth::cluster("", &[("n1", &[])]);
    let gates = support::shared_tempdir();
    let d = gates.path().display().to_string();
    // Counts the USR1s it gets until its gate opens.
    let job = |tag: &str, signal: &str| {
        let cmd = format!(
            "trap 'echo got >> {d}/{tag}.txt' USR1; while [ ! -e {d}/{tag}.gate ]; do sleep 0.1; done; \
             cat {d}/{tag}.txt"
        );
        b.submit(&["--cpus", "0.25", "--time-limit", "1m", "--signal", signal, "--", "sh", "-c", &cmd])
    };
    let later = job("later", "B:USR1@45");
    let early = job("early", "B:USR1@59");
    assert_eq!(wait_file(&b, early, gates.path(), "early.txt"), "got\n");
    b.wait_state(later, "RUNNING");

    b.kill_agent(0);
    b.add_agent("n1", &[]);
    b.wait_nodes_ready(1);
    assert_eq!(wait_file(&b, later, gates.path(), "later.txt"), "got\n", "the new agent sent it");
    assert_eq!(b.state(later), "RUNNING", "taken over, not restarted");
    for tag in ["later", "early"] {
        std::fs::write(gates.path().join(format!("{tag}.gate")), "").unwrap();
    }
    for id in [later, early] {
        let done = b.wait_state(id, "SUCCEEDED");
        assert_eq!(b.ok(&["logs", &id.to_string()]), "got\n", "one signal each: {done:#}");
    }
}
