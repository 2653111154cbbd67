//! An agent (`--kernel-shim`) killed with SIGKILL and started again on the same data dir takes
//! its running process kernels over through their shims (`berth kernel-shim`), through the real
//! binary:
//! jobs stay RUNNING (same attempt), end with their real exit codes (also the ones that ended
//! while no agent ran), keep their time limits, and can still be cancelled.

mod support;

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

/// The pid a kernel printed as its first stdout line.
fn printed_pid(b: &Berth, id: i64) -> u32 {
    let log = b.ok(&["logs", &id.to_string()]);
    log.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("job {id} printed no pid: {log:?}"))
}

#[test]
fn a_restarted_agent_takes_over_its_process_kernels() {
    let mut b = Berth::cluster("", &[("n1", &["--kernel-shim"])]);
    let runs_on = submit(&b, &[], "echo before; sleep 12; echo after");
    let ends_unwatched = submit(&b, &[], "sleep 1; exit 3");
    let limited = submit(&b, &["--time-limit", "4s"], "sleep 60");
    let cancelled = submit(&b, &[], "echo $$; sleep 60");
    for id in [runs_on, ends_unwatched, limited, cancelled] {
        b.wait_state(id, "RUNNING");
    }
    b.wait_job(cancelled, "its pid in the log", |_| b.ok(&["logs", &cancelled.to_string()]).lines().count() == 1);
    let pid = printed_pid(&b, cancelled);

    b.kill_agent(0);
    // Long enough for the 1-second job to end with nobody watching.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the kernel outlives its agent");
    b.add_agent("n1", &["--kernel-shim"]);
    b.wait_nodes_ready(1);

    let d = b.wait_state(ends_unwatched, "FAILED");
    assert_eq!(d["job"]["exit_code"], 3, "the exit code recorded by the shim: {d:#}");
    assert_eq!(b.state(runs_on), "RUNNING", "taken over, not restarted");

    b.ok(&["cancel", &cancelled.to_string()]);
    b.wait_state(cancelled, "CANCELLED");
    let gone = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(gone.elapsed() < support::PATIENCE, "the cancelled kernel {pid} still runs");
        std::thread::sleep(Duration::from_millis(50));
    }

    let d = b.wait_state(limited, "TIMEOUT");
    assert!(d["job"]["reason"].as_str().unwrap_or("").contains("time limit"), "{d:#}");

    let d = b.wait_state(runs_on, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    assert_eq!(b.ok(&["logs", &runs_on.to_string()]), "before\nafter\n", "one run, the whole output");
    for id in [runs_on, ends_unwatched, limited, cancelled] {
        let d = b.job(id);
        let runs = d["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "RUNNING").count();
        assert_eq!(runs, 1, "job {id} ran once, never requeued: {d:#}");
    }
}
