//! Jobs outlive their agent (issue 13): process kernels are forked by the node's kernel
//! supervisor, so stopping (SIGTERM, Ctrl-C) or killing (SIGKILL) `berth up` or `berth agent`
//! leaves them running, and the next start on the same data dir takes them over, through the
//! real binary: jobs stay RUNNING (same attempt), end with their real exit codes (also the
//! ones that ended while no agent ran), keep their time limits, their logs (`berth logs -f`)
//! and can still be cancelled. `--stop-jobs` stops them as before.

mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use support::Berth;

fn small(cmd: &str) -> Vec<String> {
    ["--cpus", "0.25", "--", "sh", "-c", cmd].iter().map(|s| s.to_string()).collect()
}

fn submit(b: &Berth, extra: &[&str], cmd: &str) -> i64 {
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.extend(small(cmd));
    b.submit(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The pid a kernel printed as its first stdout line, once it has.
fn printed_pid(b: &Berth, id: i64) -> u32 {
    b.wait_job(id, "its pid in the log", |_| !b.ok(&["logs", &id.to_string()]).is_empty());
    let log = b.ok(&["logs", &id.to_string()]);
    log.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("job {id} printed no pid: {log:?}"))
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive: its parent (the supervisor) has yet to reap it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

fn wait_dead(pid: u32, what: &str) {
    let t0 = std::time::Instant::now();
    while alive(pid) {
        assert!(t0.elapsed() < support::PATIENCE, "{what}: {pid} still runs");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn runs(b: &Berth, id: i64) -> usize {
    let d = b.job(id);
    d["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "RUNNING").count()
}

/// A job that prints its pid, then waits for `<dir>/<tag>` and exits with `code`.
fn held(dir: &Path, tag: &str, code: i32) -> String {
    let go = dir.join(tag);
    format!("echo $$; while [ ! -e {g} ]; do sleep 0.1; done; echo after; exit {code}", g = go.display())
}

/// `berth logs -f ID` as a running child.
fn follow(b: &Berth, id: i64) -> Child {
    std::process::Command::new(support::BIN)
        .env("HOME", b.home.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("BERTH_URL")
        .env_remove("BERTH_TOKEN")
        .args(["logs", "-f", &id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth logs -f")
}

/// Stops (or kills) `berth up` with `sig` while jobs run, starts it again: the jobs were taken
/// over, not restarted, and end as they would have (exit code, time limit, logs). (Cancel and
/// ends while no agent runs: `a_restarted_agent_takes_over_its_process_kernels`.)
fn survives(sig: i32) {
    let mut b = Berth::up(&[]);
    // The gates live where the jobs see them too (kernels get a private /tmp).
    let gates = support::shared_tempdir();
    let dir = gates.path().to_path_buf();
    // Two: each takes a whole CPU of the 2-CPU test machine.
    let ok = submit(&b, &[], &held(&dir, "ok", 0));
    let limited = submit(&b, &["--time-limit", "6s"], "echo $$; sleep 300");
    let pids: Vec<u32> = [ok, limited].iter().map(|&id| printed_pid(&b, id)).collect();

    b.signal_all(sig);
    for pid in &pids {
        assert!(alive(*pid), "kernel {pid} outlives berth up (signal {sig})");
    }
    b.start_again(&[]);
    assert_eq!(b.state(ok), "RUNNING", "taken over, not restarted");

    let mut logs = follow(&b, ok);
    std::fs::write(dir.join("ok"), "").unwrap();
    let d = b.wait_state(ok, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    let out = support::wait_timeout(&mut logs, support::PATIENCE).expect("logs -f ends with the job");
    assert!(out.success());
    let mut followed = String::new();
    std::io::Read::read_to_string(&mut logs.stdout.take().unwrap(), &mut followed).unwrap();
    assert_eq!(followed, format!("{}\nafter\n", pids[0]), "`logs -f` follows a taken-over job to its end");

    let d = b.wait_state(limited, "TIMEOUT");
    assert!(d["job"]["reason"].as_str().unwrap_or("").contains("time limit"), "{d:#}");
    wait_dead(pids[1], "the kernel past its time limit");

    for id in [ok, limited] {
        assert_eq!(runs(&b, id), 1, "job {id} ran once, never requeued: {:#}", b.job(id));
    }
}

#[test]
fn running_jobs_survive_a_sigterm_of_berth_up_and_the_next_start_takes_them_over() {
    survives(libc::SIGTERM);
}

#[test]
fn running_jobs_survive_a_sigkill_of_berth_up_and_the_next_start_takes_them_over() {
    survives(libc::SIGKILL);
}

#[test]
fn berth_up_with_stop_jobs_cancels_running_jobs_on_ctrl_c() {
    let mut b = Berth::up(&["--stop-jobs"]);
    let plain = submit(&b, &[], "echo $$; sleep 300");
    let requeue = submit(&b, &["--requeue"], "echo $$; sleep 300");
    let pids = [printed_pid(&b, plain), printed_pid(&b, requeue)];
    b.signal_all(libc::SIGINT);
    for pid in pids {
        assert!(!alive(pid), "--stop-jobs stops kernel {pid} before berth up exits");
    }
    b.start_again(&["--stop-jobs"]);
    let d = b.wait_state(plain, "CANCELLED");
    assert!(d["job"]["reason"].as_str().unwrap_or("").contains("agent shut down"), "{d:#}");
}

#[test]
fn a_restarted_agent_takes_over_its_process_kernels() {
    let mut b = Berth::cluster("", &[("n1", &[])]);
    let runs_on = submit(&b, &[], "echo before; sleep 12; echo after");
    let ends_unwatched = submit(&b, &[], "sleep 1; exit 3");
    let limited = submit(&b, &["--time-limit", "4s"], "sleep 60");
    let cancelled = submit(&b, &[], "echo $$; sleep 60");
    for id in [runs_on, ends_unwatched, limited, cancelled] {
        b.wait_state(id, "RUNNING");
    }
    let pid = printed_pid(&b, cancelled);

    b.kill_agent(0);
    // Long enough for the 1-second job to end with nobody watching.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(alive(pid), "the kernel outlives its agent");
    b.add_agent("n1", &[]);
    b.wait_nodes_ready(1);

    let d = b.wait_state(ends_unwatched, "FAILED");
    assert_eq!(d["job"]["exit_code"], 3, "the exit code recorded by the supervisor: {d:#}");
    assert_eq!(b.state(runs_on), "RUNNING", "taken over, not restarted");

    b.ok(&["cancel", &cancelled.to_string()]);
    b.wait_state(cancelled, "CANCELLED");
    wait_dead(pid, "the cancelled kernel");

    let d = b.wait_state(limited, "TIMEOUT");
    assert!(d["job"]["reason"].as_str().unwrap_or("").contains("time limit"), "{d:#}");

    let d = b.wait_state(runs_on, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    assert_eq!(b.ok(&["logs", &runs_on.to_string()]), "before\nafter\n", "one run, the whole output");
    for id in [runs_on, ends_unwatched, limited, cancelled] {
        assert_eq!(runs(&b, id), 1, "job {id} ran once, never requeued: {:#}", b.job(id));
    }
}

/// An agent that stays away longer than its lease: the supervisor fences its kernels before
/// the manager declares the node lost, so a lost node's job never runs on (as when the agent
/// itself fenced them), and the agent's return reports nothing new.
#[test]
fn kernels_of_an_agent_gone_past_its_lease_are_fenced_before_the_node_is_lost() {
    let mut b = Berth::cluster_with("", &["--heartbeat-timeout", "3s"], &[("n1", &[])]);
    let job = submit(&b, &[], "echo $$; sleep 300");
    let pid = printed_pid(&b, job);
    b.signal_all_agents(libc::SIGTERM);
    let d = b.wait_state(job, "LOST");
    assert!(!alive(pid), "the kernel was stopped before the manager gave its job up: {d:#}");
    b.add_agent("n1", &[]);
    b.wait_nodes_ready(1);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.state(job), "LOST", "{:#}", b.job(job));
    assert_eq!(runs(&b, job), 1);
}
