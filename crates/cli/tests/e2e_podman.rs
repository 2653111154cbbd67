//! Container jobs on Podman through the real binary (`berth agent --container-runtime
//! podman`): the same `--image` jobs as on Docker (`e2e_docker.rs`): exit codes and logs,
//! memory, CPU and pids limits, `berth exec` into a running kernel, the node's images listed,
//! and a container taken over by the next agent after the agent is killed.
//!
//! Needs the `podman` package and a static busybox, from which `scripts/test-image.sh podman`
//! builds the test image (`podman import`, no registry). Without them every test prints
//! `SKIPPED: ...`; with `CI=true` a missing podman fails them instead.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{Berth, PATIENCE, text};

const IMAGE: &str = "berth-test/busybox:1";

/// Builds the test image in Podman's store; `false` (after a SKIPPED line naming `test`) when
/// podman cannot run it here. On CI a missing podman is a failure, not a skip.
fn podman_ready(test: &str) -> bool {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-image.sh");
    let why = match Command::new("bash").arg(script).arg("podman").output() {
        Ok(o) if o.status.success() => return true,
        Ok(o) => text(&o.stderr).trim().to_string(),
        Err(e) => format!("cannot run scripts/test-image.sh podman: {e}"),
    };
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{test} cannot run on CI: {why}");
    eprintln!("SKIPPED: {test}: {why}");
    false
}

/// The Podman containers of agents whose node name starts with a prefix; removed on drop, so
/// that a failed test leaves nothing behind either.
struct Containers(String);

impl Containers {
    fn names(&self) -> Vec<String> {
        let filter = format!("name=berth-{}", self.0);
        let o = Command::new("podman").args(["ps", "-a", "--format", "{{.Names}}", "--filter", &filter]).output();
        o.map(|o| text(&o.stdout).lines().map(String::from).collect()).unwrap_or_default()
    }

    fn wait_gone(&self) {
        let start = Instant::now();
        while !self.names().is_empty() {
            assert!(start.elapsed() < PATIENCE, "containers left behind: {:?}", self.names());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for n in self.names() {
            let _ = Command::new("podman").args(["rm", "-f", &n]).output();
        }
    }
}

fn node_name(tag: &str) -> String {
    format!("pm{}{tag}", std::process::id())
}

const PODMAN: [&str; 2] = ["--container-runtime", "podman"];

#[test]
fn podman_runs_container_jobs_like_docker() {
    if !podman_ready("podman_runs_container_jobs_like_docker") {
        return;
    }
    let node = node_name("a");
    let left = Containers(node.clone());
    let b = Berth::cluster("", &[(&node, &PODMAN)]);

    // The node reports the images Podman has, named as jobs name them.
    let images = b.json(&["images"]);
    let listed = images["images"].as_array().unwrap().iter().any(|i| i["image"] == IMAGE && i["nodes"][0] == node);
    assert!(listed, "{images:#}");

    // Exit code and logs.
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo hello; echo oops >&2; exit 3"]);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 3, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "hello\n");

    // The binding's limits, as the container's own cgroup files say (v1 or v2).
    let id = b.submit(&[
        "--image",
        IMAGE,
        "--mem",
        "64MiB",
        "--",
        "sh",
        "-c",
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null; \
         cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; true",
    ]);
    b.wait_state(id, "SUCCEEDED");
    let limits = b.ok(&["logs", &id.to_string()]);
    let mut lines = limits.lines();
    assert_eq!(lines.next(), Some((64u64 << 20).to_string().as_str()), "memory: {limits}");
    assert_eq!(lines.next(), Some("4096"), "pids (the agent's default): {limits}");

    // Time limit and cancel.
    let id = b.submit(&["--image", IMAGE, "--time-limit", "1s", "--", "sleep", "300"]);
    let d = b.wait_state(id, "TIMEOUT");
    assert!(d["job"]["reason"].as_str().unwrap_or_default().contains("time limit"), "{d:#}");

    // `berth exec` runs inside the job's own container.
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo mine > /tmp/mark; sleep 120"]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();
    let start = Instant::now();
    let o = loop {
        let o = b.cli(&["exec", &ids, "--", "sh", "-c", "cat /tmp/mark && echo job=$BERTH_JOB_ID; exit 5"]);
        // The job's first line may not be written yet.
        if text(&o.stdout).contains("mine") || start.elapsed() > PATIENCE {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("mine\njob={id}\n"));
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");

    // Every container is gone once its job ended.
    left.wait_gone();
}

/// The agent is killed (SIGKILL) while a Podman job runs; the next agent on the same data dir
/// takes the container over, the manager keeps the job RUNNING and records its end.
#[test]
fn a_restarted_agent_takes_over_its_podman_containers() {
    if !podman_ready("a_restarted_agent_takes_over_its_podman_containers") {
        return;
    }
    let node = node_name("r");
    let left = Containers(node.clone());
    let mut b = Berth::cluster("", &[(&node, &PODMAN)]);
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo before; sleep 4; echo after; exit 7"]);
    b.wait_state(id, "RUNNING");
    b.kill_agent(0);
    assert_eq!(left.names().len(), 1, "the container outlives its agent");
    b.add_agent(&node, &PODMAN);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 7, "{d:#}");
    let runs = d["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "RUNNING").count();
    assert_eq!(runs, 1, "taken over, not started again: {d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "before\nafter\n");
    left.wait_gone();
}
