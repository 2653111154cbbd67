//! `berth exec` through the real binary (issue 17): a command runs inside a running kernel
//! as its own processes do (same cgroups, cpuset, user, directory and environment; containers
//! through `docker exec`), its stdout and stderr come back apart, stdin goes in with `-i`, and
//! its exit code is `berth`'s; bad requests fail with a message, and another user gets the 404
//! of a missing job.

mod support;

use std::process::Output;

use support::{Berth, base_cmd, text};

/// What a process prints about where it runs (the same lines from the job and from exec).
const WHERE: &str = "id -u; pwd; grep Cpus_allowed_list /proc/self/status; \
                     grep -E ':(memory|cpuset|pids):|^0::' /proc/self/cgroup; echo job=$BERTH_JOB_ID";

fn exec(b: &Berth, args: &[&str]) -> Output {
    b.cli(&[&["exec"], args].concat())
}

/// Runs `berth exec` with `input` on its stdin.
fn exec_with_input(b: &Berth, args: &[&str], input: &str) -> Output {
    b.cli_with_input(&[&["exec"], args].concat(), input)
}

/// The job's own lines, printed before it sleeps.
fn job_lines(b: &Berth, id: i64) -> String {
    let start = std::time::Instant::now();
    loop {
        let out = b.ok(&["logs", &id.to_string()]);
        if out.contains("job=") {
            return out;
        }
        assert!(start.elapsed() < support::PATIENCE, "job {id} printed nothing: {out}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn exec_runs_inside_a_process_kernel() {
    if !support::cgroups_usable() {
        return;
    }
    let b = Berth::up(&[]);
    let id = b.submit(&["--cpus", "1", "--", "sh", "-c", &format!("{WHERE}; sleep 120")]);
    b.wait_state(id, "RUNNING");
    let own = job_lines(&b, id);
    let ids = id.to_string();

    // Where it runs: the same user, directory, cpuset, cgroups and environment.
    let o = exec(&b, &[&ids, "--", "sh", "-c", WHERE]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), own, "exec runs where the job's own processes run");
    assert!(own.contains(&format!("job={id}")), "{own}");

    // Output apart, the exit code as berth's own.
    let o = exec(&b, &[&ids, "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!((o.status.code(), text(&o.stdout), text(&o.stderr)), (Some(7), "out\n".into(), "err\n".into()));

    // Standard input with -i; without it the command reads nothing.
    let o = exec_with_input(&b, &["-i", &ids, "--", "wc", "-c"], "hello\n");
    assert_eq!(text(&o.stdout).trim(), "6", "{}", text(&o.stderr));
    let o = exec_with_input(&b, &[&ids, "--", "wc", "-c"], "hello\n");
    assert_eq!(text(&o.stdout).trim(), "0");

    // Bad requests: a missing program, a missing kernel, another user.
    let o = exec(&b, &[&ids, "--", "no-such-program-berth"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("cannot run `no-such-program-berth`"), "{}", text(&o.stderr));
    let o = exec(&b, &[&ids, "--kernel", "3", "--", "true"]);
    assert!(text(&o.stderr).contains("has no kernel 3: use --kernel 0 to 0"), "{}", text(&o.stderr));
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["exec", &ids, "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains(&format!("job {id} not found")), "{}", text(&o.stderr));
    let o = b.cli(&["exec", &ids]);
    assert_eq!(o.status.code(), Some(2), "no command: a usage error");

    // A client that goes away takes its command with it.
    let mut cli = base_cmd(b.home.path()).args(["exec", &ids, "--", "sleep", "301"]).spawn().unwrap();
    let running = || {
        let o = std::process::Command::new("pgrep").args(["-f", "^sleep 301$"]).output().unwrap();
        !text(&o.stdout).trim().is_empty()
    };
    let start = std::time::Instant::now();
    while !running() {
        assert!(start.elapsed() < support::PATIENCE, "the exec'd command never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    cli.kill().unwrap();
    let _ = cli.wait();
    while running() {
        assert!(start.elapsed() < support::PATIENCE, "the exec'd command outlived its client");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A job that is not running.
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");
    let o = exec(&b, &[&ids, "--", "true"]);
    assert!(text(&o.stderr).contains("is not running") || text(&o.stderr).contains("exec needs a running job"));
}

#[test]
fn exec_runs_inside_a_container_kernel() {
    if !support::docker_ready("exec_runs_inside_a_container_kernel") {
        return;
    }
    let node = format!("ex{}", std::process::id());
    let b = Berth::cluster("", &[(&node, &[])]);
    let id = b.submit(&["--image", "berth-test/busybox:1", "--", "sh", "-c", "echo mine > /tmp/mark; sleep 120"]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();
    let o = exec(&b, &[&ids, "--", "sh", "-c", "cat /tmp/mark; echo job=$BERTH_JOB_ID; echo err >&2; exit 5"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("mine\njob={id}\n"), "inside the job's own container");
    assert_eq!(text(&o.stderr), "err\n");
    let o = exec_with_input(&b, &["-i", &ids, "--", "wc", "-c"], "hello\n");
    assert_eq!(text(&o.stdout).trim(), "6", "{}", text(&o.stderr));
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");
    support::remove_containers(&node);
}
