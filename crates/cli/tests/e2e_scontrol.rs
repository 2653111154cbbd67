//! `scontrol` as lab scripts call it, through the link `berth install-slurm-commands` makes:
//! `show hostnames` (from an argument and from `SLURM_JOB_NODELIST` inside a job), `show
//! hostlist`, `show node`, `show partition`, `show job` for a running job, an ended one and an array task, another user's
//! job (invalid, like one that does not exist), `sbatch --hold` and `scontrol release`, and
//! the commands berth refuses. Also
//! `SLURM_SUBMIT_DIR` under `#SBATCH --chdir`: the directory sbatch ran in, not the job's;
//! and sbatch's task options merged with the script's.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{Berth, text};

/// `tool args...` from `dir` with the test's credentials and berth's links first on PATH.
fn tool(b: &Berth, bin: &Path, dir: &Path, name: &str, args: &[&str]) -> Command {
    let mut c = support::base_cmd_at(&bin.join(name), b.home.path());
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    c.env("PATH", path).env_remove("RUST_LOG").current_dir(dir).args(args).stdin(Stdio::null());
    c
}

fn run(b: &Berth, bin: &Path, dir: &Path, name: &str, args: &[&str]) -> Output {
    tool(b, bin, dir, name, args).output().unwrap()
}

fn ok(b: &Berth, bin: &Path, dir: &Path, name: &str, args: &[&str]) -> String {
    let o = run(b, bin, dir, name, args);
    assert!(o.status.success(), "{name} {args:?}: {}\n{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn sbatch(b: &Berth, bin: &Path, dir: &Path, args: &[&str]) -> i64 {
    let mut a = vec!["--parsable"];
    a.extend(args);
    ok(b, bin, dir, "sbatch", &a).trim().parse().unwrap()
}

/// A directory any job user may write.
fn open_dir(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
}

#[test]
fn scontrol_shows_hosts_and_jobs_and_refuses_what_berth_cannot_do() {
    let b = Berth::up(&[]);
    let (dir, bin) = support::slurm_bin_dir();
    let root = dir.path().join("lab");
    open_dir(&root);

    // Host lists, both ways, zero padding kept.
    let names = ok(&b, &bin, &root, "scontrol", &["show", "hostnames", "n[1-3,05],gpu01"]);
    assert_eq!(names, "n1\nn2\nn3\nn05\ngpu01\n");
    assert_eq!(ok(&b, &bin, &root, "scontrol", &["show", "hostlist", "n1,n2,n3,gpu01,gpu02"]), "n[1-3],gpu[01-02]\n");
    let o = run(&b, &bin, &root, "scontrol", &["show", "hostnames", "n[1-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("unbalanced brackets"), "{}", text(&o.stderr));

    // Inside a job: its own node list, expanded.
    std::fs::write(
        root.join("hosts.sh"),
        "#!/bin/sh\n#SBATCH --output=hosts.out\nscontrol show hostnames > hosts.txt\necho \"$SLURM_JOB_NODELIST\"\n",
    )
    .unwrap();
    let hosts = sbatch(&b, &bin, &root, &["hosts.sh"]);
    let done = b.wait_state(hosts, "SUCCEEDED");
    let node = done["job"]["nodes"][0].as_str().unwrap().to_string();
    assert_eq!(std::fs::read_to_string(root.join("hosts.txt")).unwrap(), format!("{node}\n"));

    // show job: an ended job, in Slurm's layout.
    let shown = ok(&b, &bin, &root, "scontrol", &["show", "job", &hosts.to_string()]);
    assert!(shown.starts_with(&format!("JobId={hosts} JobName=hosts.sh\n   UserId=")), "{shown}");
    for want in [
        "JobState=COMPLETED",
        "ExitCode=0:0",
        &format!("NodeList={node}"),
        "NumNodes=1",
        "TRES=cpu=",
        &format!("WorkDir={}", root.display()),
        &format!("StdOut={}", root.join("hosts.out").display()),
    ] {
        assert!(shown.contains(want), "{want} in {shown}");
    }
    let one = ok(&b, &bin, &root, "scontrol", &["-o", "show", "job", &hosts.to_string()]);
    assert_eq!(one.lines().count(), 1, "{one}");
    assert!(one.contains(" JobState=COMPLETED "), "{one}");

    // A running job and an array task.
    let running = sbatch(&b, &bin, &root, &["--wrap", "sleep 60"]);
    b.wait_state(running, "RUNNING");
    let shown = ok(&b, &bin, &root, "scontrol", &["show", "job", &running.to_string()]);
    assert!(shown.contains("JobState=RUNNING") && shown.contains("EndTime=Unknown"), "{shown}");
    let array = sbatch(&b, &bin, &root, &["--array=0-1", "--wrap", "true"]);
    let task = format!("{array}_1");
    let start = std::time::Instant::now();
    while !run(&b, &bin, &root, "scontrol", &["show", "job", &task]).status.success() {
        assert!(start.elapsed() < support::PATIENCE, "task {task} never made");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let shown = ok(&b, &bin, &root, "scontrol", &["show", "job", &task]);
    assert!(shown.contains(&format!("ArrayJobId={array} ArrayTaskId=1 ")), "{shown}");

    // Unknown ids and other users' jobs are invalid alike.
    let o = run(&b, &bin, &root, "scontrol", &["show", "job", "999999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("slurm_load_jobs error: Invalid job id specified"), "{}", text(&o.stderr));
    let token = b.create_user("mallory");
    let o = tool(&b, &bin, &root, "scontrol", &["show", "job", &running.to_string()])
        .env("BERTH_URL", &b.url)
        .env("BERTH_TOKEN", &token)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("Invalid job id specified"), "{}", text(&o.stderr));

    // Nodes and queues, briefly.
    let shown = ok(&b, &bin, &root, "scontrol", &["show", "node", &node]);
    assert!(shown.starts_with(&format!("NodeName={node}\n")) && shown.contains(" CPUTot="), "{shown}");
    let o = run(&b, &bin, &root, "scontrol", &["show", "node", "nosuchnode"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("Node nosuchnode not found"), "{}", text(&o.stderr));
    let shown = ok(&b, &bin, &root, "scontrol", &["-o", "show", "partition"]);
    assert!(shown.contains(&format!("Nodes={node} State=UP")), "{shown}");

    // sbatch --hold: PENDING as JobHeldUser and skipped by the passes that start the jobs
    // after it; holding a running job is refused as Slurm does; scontrol release: it runs.
    let held = sbatch(&b, &bin, &root, &["--hold", "--wrap", "true"]);
    let squeue = |id: i64| ok(&b, &bin, &root, "squeue", &["-h", "-j", &id.to_string(), "-o", "%t %r"]);
    assert_eq!(squeue(held).trim(), "PD JobHeldUser");
    let after = sbatch(&b, &bin, &root, &["--wrap", "true"]);
    b.wait_state(after, "SUCCEEDED");
    assert_eq!(squeue(held).trim(), "PD JobHeldUser", "still held after a pass started a later job");
    let o = run(&b, &bin, &root, "scontrol", &["hold", &running.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    let want = format!("scontrol: error: Job is no longer pending execution for job {running}");
    assert!(text(&o.stderr).contains(&want), "{}", text(&o.stderr));
    ok(&b, &bin, &root, "scontrol", &["release", &held.to_string()]);
    b.wait_state(held, "SUCCEEDED");

    // What berth cannot do says what to use instead.
    for cmd in [&["update", "JobId=1", "TimeLimit=5"][..], &["requeuehold", "1"]] {
        let o = run(&b, &bin, &root, "scontrol", cmd);
        assert_eq!(o.status.code(), Some(1), "{cmd:?}");
        assert!(text(&o.stderr).contains("not supported"), "{cmd:?}: {}", text(&o.stderr));
    }
    b.ok(&["cancel", &running.to_string()]);
}

/// `scontrol requeue $SLURM_JOB_ID` from inside the job (its step token is the credential; the
/// user's are hidden from it):
/// the job stops, waits in its queue and runs again as attempt 2 with `SLURM_RESTART_COUNT=1`,
/// its `--open-mode=append` output keeping the first run's lines. `berth requeue` from
/// outside does the same for its owner; another user's job is invalid, an ended one refused.
#[test]
fn a_job_requeues_itself_and_runs_again_with_its_output_appended() {
    let b = Berth::up(&[]);
    let (dir, bin) = support::slurm_bin_dir();
    let root = dir.path().join("lab");
    open_dir(&root);
    let script = root.join("ckpt.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH -o run.log --open-mode=append\necho \"run $SLURM_RESTART_COUNT\"\n\
         if [ \"$SLURM_RESTART_COUNT\" = 0 ]; then HOME=/nonexistent XDG_CONFIG_HOME= BERTH_TOKEN= BERTH_SOCKET= scontrol requeue $SLURM_JOB_ID || echo requeue failed; sleep 60; fi\n",
    )
    .unwrap();
    let id = sbatch(&b, &bin, &root, &[script.to_str().unwrap()]);
    let done = b.wait_state(id, "SUCCEEDED");
    let log = std::fs::read_to_string(root.join("run.log")).unwrap();
    assert_eq!(log, "run 0\nrun 1\n", "{done:#}");
    let reasons: Vec<&str> =
        done["transitions"].as_array().unwrap().iter().filter_map(|t| t["reason"].as_str()).collect();
    assert!(reasons.iter().any(|r| r.starts_with("requeued by ")), "{reasons:?}");

    // An ended job is refused, in Slurm's words.
    let o = run(&b, &bin, &root, "scontrol", &["requeue", &id.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    let e = text(&o.stderr);
    assert!(e.contains(&format!("Requeue of JobId={id} failed")) && e.contains("already finished"), "{e}");

    // From outside: the owner's `berth requeue`; another user's is told the job does not exist.
    let gate = root.join("gate");
    let gated = format!("echo start; while [ ! -e {} ]; do sleep 0.05; done", gate.display());
    let running = sbatch(&b, &bin, &root, &["-o", "gated.log", "--open-mode=append", "--wrap", &gated]);
    b.wait_state(running, "RUNNING");
    let token = b.create_user("mallory");
    let o = tool(&b, &bin, &root, "scontrol", &["requeue", &running.to_string()])
        .env("BERTH_URL", &b.url)
        .env("BERTH_TOKEN", &token)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("Invalid job id specified"), "{}", text(&o.stderr));
    assert!(b.ok(&["requeue", &running.to_string()]).contains("requeued"));
    // It runs again (a second `start`), then the gate lets it end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(root.join("gated.log")).unwrap_or_default() != "start\nstart\n" {
        assert!(std::time::Instant::now() < deadline, "the requeued job never ran again");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::write(&gate, "").unwrap();
    b.wait_state(running, "SUCCEEDED");
}

#[test]
fn submit_dir_is_where_sbatch_ran_even_with_chdir() {
    let b = Berth::up(&[]);
    let (dir, bin) = support::slurm_bin_dir();
    let root = dir.path().join("lab");
    open_dir(&root);
    open_dir(&root.join("sub"));
    std::fs::write(
        root.join("dirs.sh"),
        "#!/bin/sh\n#SBATCH --chdir=sub\necho \"$SLURM_SUBMIT_DIR\" > dirs.txt\npwd >> dirs.txt\n",
    )
    .unwrap();
    let id = sbatch(&b, &bin, &root, &["dirs.sh"]);
    b.wait_state(id, "SUCCEEDED");
    let dirs = std::fs::read_to_string(root.join("sub/dirs.txt")).unwrap();
    assert_eq!(dirs, format!("{}\n{}\n", root.display(), root.join("sub").display()));

    // sbatch's task options merge with the script's before translation: the script's
    // `-c 2` still counts under the command line's --ntasks-per-node.
    std::fs::write(root.join("tasks.sh"), "#!/bin/sh\n#SBATCH -c 2\necho \"$SLURM_CPUS_ON_NODE\" > cpus.txt\n")
        .unwrap();
    let id = sbatch(&b, &bin, &root, &["--ntasks-per-node=1", "tasks.sh"]);
    let job = b.wait_state(id, "SUCCEEDED");
    assert_eq!(job["spec"]["resources"]["cpu_milli"], 2000, "{job}");
    assert_eq!(std::fs::read_to_string(root.join("cpus.txt")).unwrap(), "2\n");
}
