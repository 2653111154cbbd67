//! Slurm batch scripts on berth, through the real binary: a script with `#SBATCH` lines runs
//! once (launch = first) on a two-node job whose second kernel only holds its node, sees the
//! `SLURM_*` variables, and its `srun` (the binary called as `srun`) starts the step's tasks in
//! both kernels with their ranks; labels (`-l`), output files (`--output=...%t`), a failing
//! task (srun and the job fail), Slurm's own options (Snakemake's step line, `-c`, `--chdir`,
//! the tuning ones srun ignores), and the job's step token, which opens streams into its own
//! job only and only while it runs. Outside a job, srun asks for one and runs its step there.
//!
//! Two agents on this host (`Berth::cluster`); files the test shares with the jobs live in a
//! `shared_tempdir()` (process kernels of a root agent have a private `/tmp`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{Berth, base_cmd, text};

/// Two nodes, n1 and n2.
fn cluster() -> Berth {
    Berth::cluster("", &[("n1", &[]), ("n2", &[])])
}

/// `berth submit -o json SCRIPT` with `bin` first on the PATH the job exports → the job id.
fn submit_script(b: &Berth, bin: &Path, script: &Path) -> i64 {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let o = base_cmd(b.home.path())
        .env("PATH", path)
        .args(["submit", "-o", "json"])
        .arg(script)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "submit failed: {}", text(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].as_i64().unwrap()
}

/// Submits a script `name` of two nodes with 2 tasks each (`#SBATCH -N 2 -n 4`, a CPU per
/// kernel) running `body`.
fn submit_two_by_two(b: &Berth, dir: &Path, bin: &Path, name: &str, body: &str) -> i64 {
    let text = format!("#!/bin/sh\n#SBATCH -N 2 -n 4\n#BERTH --cpus 1 --mem 256MiB\n{body}");
    submit_script(b, bin, &write_script(dir, name, &text))
}

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// `key=value` lines a job printed.
fn value(log: &str, key: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= line in:\n{log}"))
        .to_string()
}

fn exec_with(b: &Berth, token: &str, id: i64) -> Output {
    b.cli_as(token, &["exec", &id.to_string(), "--", "true"])
}

#[test]
fn a_batch_script_runs_once_and_its_sruns_start_tasks_on_both_nodes() {
    let b = cluster();
    let (dir, bin) = support::berth_bin_dir();
    let d = dir.path().display().to_string();
    let script = write_script(
        dir.path(),
        "step.sh",
        &format!(
            r#"#!/bin/sh
#SBATCH --nodes=2 --ntasks-per-node=4
#SBATCH --job-name=steps
#BERTH --cpus 1 --mem 256MiB
echo ran >> {d}/script.count
echo "job=$SLURM_JOB_ID/$SLURM_JOBID ntasks=$SLURM_NTASKS nodelist=$SLURM_JOB_NODELIST"
echo "nnodes=$SLURM_NNODES per=$SLURM_TASKS_PER_NODE name=$SLURM_JOB_NAME procid=$SLURM_PROCID"
echo "$BERTH_STEP_TOKEN" > {d}/token
srun sh -c 'echo task $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $BERTH_KERNEL_INDEX $SLURM_STEP_NUM_TASKS'
echo "srun=$?"
srun -l -n 3 sh -c 'echo hi from $SLURM_PROCID'
srun --output={d}/out-%j-%t.txt sh -c 'echo file $SLURM_PROCID $SLURM_STEP_ID; echo err $SLURM_PROCID >&2'
# Slurm's own options, as Snakemake's job step and lab scripts write them.
srun -n1 --cpu-bind=q --cpus-per-task=1 --nodes=1 python3 -c 'print("snakemake", 1)'
mkdir -p {d}/sub
srun -n1 -N1 -c 1 -J x -t 1 --mem=100M --mpi=none --exact --overlap --gres=none --cpu_bind=none \
  --distribution=block --hint=nomultithread --quiet --chdir={d}/sub sh -c 'echo "opts=$SLURM_CPUS_PER_TASK $(pwd)"'
srun -n2 -c 64 true
echo "toomany=$?"
# Wait for the test to try the token while the job runs.
while [ ! -e {d}/tried ]; do sleep 0.1; done
"#
        ),
    );
    let id = submit_script(&b, &bin, &script);
    // Another job of the same user, which the first job's token must not open.
    let other = b.submit(&["--", "sleep", "300"]);
    let start = std::time::Instant::now();
    while !dir.path().join("token").exists() || std::fs::read_to_string(dir.path().join("token")).unwrap().is_empty() {
        assert!(start.elapsed() < support::PATIENCE, "the job never wrote its token: {:#}", b.job(id));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap().trim().to_string();
    assert!(token.starts_with("bstep_"), "{token}");
    b.wait_state(other, "RUNNING");
    let o = exec_with(&b, &token, other);
    assert!(!o.status.success(), "another job's exec with this job's token must fail");
    assert!(text(&o.stderr).contains("not found") || text(&o.stderr).contains("404"), "{}", text(&o.stderr));
    let o = b.cli_as(&token, &["ps"]);
    assert!(!o.status.success(), "a step token is no API token: {}", text(&o.stdout));
    // The last character changed (to another one whatever it was: a fixed `0` left a token
    // ending in `0` unforged, a flaky pass of the real token).
    let last = if token.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{last}", &token[..token.len() - 1]);
    let o = exec_with(&b, &forged, id);
    assert!(!o.status.success() && text(&o.stderr).contains("invalid step token"), "{}", text(&o.stderr));
    std::fs::write(dir.path().join("tried"), "").unwrap();

    let done = b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["exit_code"], 0, "{done:#}");
    let shown = b.ok(&["show", &id.to_string()]);
    assert!(shown.contains("4 per node; the first kernel runs the command"), "{shown}");
    assert!(!shown.contains("bstep_") && !done.to_string().contains("bstep_"), "the token is never shown");
    assert_eq!(std::fs::read_to_string(dir.path().join("script.count")).unwrap(), "ran\n", "the script ran once");
    let log = b.ok(&["logs", &id.to_string()]);
    assert_eq!(value(&log, "srun"), "0", "{log}");
    let nodes: Vec<String> = done["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["binding"]["node"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(sorted, ["n1", "n2"], "{done:#}");
    let env_line = log.lines().find(|l| l.starts_with("job=")).unwrap();
    let expect_list = if nodes[0] == "n1" { "n[1-2]" } else { "n2,n1" };
    assert_eq!(env_line, format!("job={id}/{id} ntasks=8 nodelist={expect_list}"), "{log}");
    assert!(log.contains("nnodes=2 per=4(x2) name=steps procid=0"), "{log}");

    // 8 tasks: ranks 0..7, 0-3 on kernel 0, 4-7 on kernel 1, each run in its own kernel.
    let mut tasks: Vec<Vec<u32>> = log
        .lines()
        .filter_map(|l| l.strip_prefix("task "))
        .map(|l| l.split(' ').map(|v| v.parse().unwrap()).collect())
        .collect();
    tasks.sort();
    let want: Vec<Vec<u32>> = (0..8).map(|r| vec![r, r % 4, r / 4, r / 4, 8]).collect();
    assert_eq!(tasks, want, "{log}");

    let mut labelled: Vec<&str> = log.lines().filter(|l| l.contains("hi from")).collect();
    labelled.sort();
    assert_eq!(labelled, ["0: hi from 0", "1: hi from 1", "2: hi from 2"], "{log}");
    assert!(log.lines().any(|l| l == "snakemake 1"), "Snakemake's srun line ran:\n{log}");
    assert_eq!(value(&log, "opts"), format!("1 {d}/sub"), "-c and --chdir took effect:\n{log}");
    assert_eq!(value(&log, "toomany"), "2", "a step bigger than the job is refused:\n{log}");
    for t in 0..8 {
        let f = dir.path().join(format!("out-{id}-{t}.txt"));
        let got = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}\n{log}", f.display()));
        // The third srun of the job is its step 2; stderr goes with the output.
        let mut lines: Vec<&str> = got.lines().collect();
        lines.sort();
        assert_eq!(lines, [format!("err {t}"), format!("file {t} 2")], "{}", f.display());
    }
    // The token died with the job.
    let o = exec_with(&b, &token, id);
    assert!(!o.status.success(), "a finished job's token must not open streams");
    assert!(text(&o.stderr).contains("no longer valid"), "{}", text(&o.stderr));
    b.ok(&["cancel", &other.to_string()]);
}

#[test]
fn a_failing_task_fails_srun_and_the_job() {
    let b = cluster();
    let (dir, bin) = support::berth_bin_dir();
    let body = r#"srun sh -c 'if [ "$SLURM_PROCID" = 3 ]; then echo bad >&2; exit 3; fi; echo ok $SLURM_PROCID'
rc=$?
echo "srun=$rc"
exit $rc
"#;
    let id = submit_two_by_two(&b, dir.path(), &bin, "fail.sh", body);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 3, "{d:#}");
    let log = b.ok(&["logs", &id.to_string()]);
    assert_eq!(value(&log, "srun"), "3", "{log}");
    let mut oks: Vec<&str> = log.lines().filter(|l| l.starts_with("ok ")).collect();
    oks.sort();
    assert_eq!(oks, ["ok 0", "ok 1", "ok 2"], "the others ran to their end:\n{log}");
    let err = b.ok(&["logs", &id.to_string(), "--stderr"]);
    assert!(err.contains("bad") && err.contains("task 3: exited with exit code 3"), "{err}");

    // With -K the others are stopped (they would sleep past the test's patience).
    let body = "srun -K sh -c 'if [ \"$SLURM_PROCID\" = 0 ]; then exit 2; fi; exec sleep 300'\n";
    let id = submit_two_by_two(&b, dir.path(), &bin, "kill.sh", body);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 2, "{d:#}");
    let err = b.ok(&["logs", &id.to_string(), "--stderr"]);
    assert!(err.contains("--kill-on-bad-exit"), "{err}");
}

#[test]
fn tasks_see_their_own_kernels_gpus() {
    let b = Berth::cluster("", &[("n1", &["--fake-gpus", "2"]), ("n2", &["--fake-gpus", "2"])]);
    let (dir, bin) = support::berth_bin_dir();
    let script = write_script(
        dir.path(),
        "gpus.sh",
        r#"#!/bin/sh
#SBATCH -N 2 --ntasks-per-node=2 --gpus-per-task=1
#BERTH --cpus 1 --mem 256MiB
echo "gpus=$SLURM_GPUS_ON_NODE"
srun sh -c 'echo dev $SLURM_NODEID $CUDA_VISIBLE_DEVICES'
"#,
    );
    let id = submit_script(&b, &bin, &script);
    let d = b.wait_state(id, "SUCCEEDED");
    let log = b.ok(&["logs", &id.to_string()]);
    assert_eq!(value(&log, "gpus"), "2", "{log}");
    for k in d["kernels"].as_array().unwrap() {
        let mut uuids: Vec<&str> =
            k["binding"]["gpus"].as_array().unwrap().iter().map(|g| g["uuid"].as_str().unwrap()).collect();
        uuids.sort();
        let index = k["index"].as_u64().unwrap();
        let seen: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix(&format!("dev {index} "))).collect();
        assert_eq!(seen.len(), 2, "two tasks in kernel {index}:\n{log}");
        // #SBATCH --gpus-per-task=1: one of the kernel's GPUs each, not srun's, not shared.
        let mut got: Vec<&str> = seen.iter().flat_map(|s| s.split(',')).collect();
        got.sort();
        assert_eq!(got, uuids, "kernel {index}'s tasks share out its GPUs:\n{log}");
    }
}

#[test]
fn srun_outside_a_job_asks_for_one_and_runs_its_step_there() {
    let b = cluster();
    let (dir, bin) = support::berth_bin_dir();
    let run = |args: &[&str]| {
        support::base_cmd_at(&bin.join("berth"), b.home.path())
            .current_dir(dir.path())
            .arg("srun")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let o = run(&["-N", "2", "-n", "4", "-l", "sh", "-c", "echo $SLURM_PROCID $SLURM_NODEID $BERTH_KERNEL_INDEX"]);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["0: 0 0 0", "1: 1 0 0", "2: 2 1 1", "3: 3 1 1"], "{out}\n{}", text(&o.stderr));
    let o = run(&["-n", "2", "sh", "-c", "exit $((SLURM_PROCID + 4))"]);
    assert_eq!(o.status.code(), Some(5), "the worst task's code: {}", text(&o.stderr));
    let o = run(&["--pty", "-n", "2", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--pty runs one task"), "{}", text(&o.stderr));
    let o = run(&["-N", "2", "-n", "3", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("does not split evenly"), "{}", text(&o.stderr));
}

#[test]
fn gpus_per_task_gives_each_task_its_own_gpus() {
    let b = Berth::cluster("", &[("n1", &["--fake-gpus", "2"])]);
    let (dir, bin) = support::berth_bin_dir();
    let script = write_script(
        dir.path(),
        "pertask.sh",
        r#"#!/bin/sh
#SBATCH -N 1 --ntasks-per-node=2 --gpus-per-task=1
#BERTH --cpus 1 --mem 256MiB
srun --gpus-per-task=1 sh -c 'echo "dev$SLURM_LOCALID=$CUDA_VISIBLE_DEVICES"'
srun -n 1 --gpus-per-task=3 true
echo "wide=$?"
"#,
    );
    let id = submit_script(&b, &bin, &script);
    let d = b.wait_state(id, "SUCCEEDED");
    let log = b.ok(&["logs", &id.to_string()]);
    let kernel: Vec<&str> =
        d["kernels"][0]["binding"]["gpus"].as_array().unwrap().iter().map(|g| g["uuid"].as_str().unwrap()).collect();
    assert_eq!(kernel.len(), 2, "{d:#}");
    let (t0, t1) = (value(&log, "dev0"), value(&log, "dev1"));
    assert_eq!([t0.as_str(), t1.as_str()], [kernel[0], kernel[1]], "one GPU each, in local order:\n{log}");
    assert_eq!(value(&log, "wide"), "1", "a task cannot ask for more than the kernel has:\n{log}");
    let err = b.ok(&["logs", &id.to_string(), "--stderr"]);
    assert!(err.contains("GPU 2 is not the kernel's"), "{err}");
}
