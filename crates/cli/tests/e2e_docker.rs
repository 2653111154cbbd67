//! Container jobs through the real binary: `--image` jobs run through Docker with logs, exit
//! codes, mounts, time limits and cancel like process jobs; `berth images` lists what nodes
//! have; a job whose image no node has waits with an `image:` reason; a killed agent's
//! container is re-adopted by the next agent and its end is recorded.
//!
//! Needs a running dockerd and a static busybox to build the test image
//! (`scripts/test-image.sh`); without them every test prints `SKIPPED: ...`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{Berth, PATIENCE, text};

const IMAGE: &str = "berth-test/busybox:1";

/// Builds the test images; `false` (after a SKIPPED line) when docker cannot run them here.
fn docker_ready(test: &str) -> bool {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-image.sh");
    match std::process::Command::new("bash").arg(script).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!("SKIPPED: {test}: {}", text(&o.stderr).trim());
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: {test}: cannot run scripts/test-image.sh: {e}");
            false
        }
    }
}

/// The containers of agents whose node name starts with `prefix`; removes them on drop, so
/// that a failed test leaves nothing behind either.
struct Containers(String);

impl Containers {
    fn names(&self) -> Vec<String> {
        let o = std::process::Command::new("docker")
            .args(["ps", "-a", "--format", "{{.Names}}", "--filter", &format!("name=berth-{}", self.0)])
            .output()
            .unwrap();
        text(&o.stdout).lines().map(String::from).collect()
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for n in self.names() {
            let _ = std::process::Command::new("docker").args(["rm", "-f", &n]).output();
        }
    }
}

fn node_name(tag: &str) -> String {
    format!("dk{}{tag}", std::process::id())
}

#[test]
fn container_jobs_run_like_processes() {
    if !docker_ready("container_jobs_run_like_processes") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("hello.txt"), "hi from the host\n").unwrap();
    let node = node_name("a");
    let left = Containers(node.clone());
    let allow = data.path().display().to_string();
    let b = Berth::cluster("", &[(&node, &["--allow-mount", &allow])]);

    // The node reports its images.
    let images = b.json(&["images"]);
    let listed = images["images"].as_array().unwrap().iter().any(|i| i["image"] == IMAGE && i["nodes"][0] == node);
    assert!(listed, "{images:#}");
    assert!(b.ok(&["images"]).contains(IMAGE));

    // Exit code and logs.
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo hello; echo oops >&2; exit 3"]);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 3, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "hello\n");

    // A mount from the allow-list, read-only, and the environment.
    let mount = format!("{allow}:/data");
    let id = b.submit(&[
        "--image",
        IMAGE,
        "--mount",
        &mount,
        "--env",
        "GREETING=hey",
        "--workdir",
        "/data",
        "--",
        "sh",
        "-c",
        "cat hello.txt; echo $GREETING $BERTH_JOB_ID; touch x 2>/dev/null || echo read-only",
    ]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(b.ok(&["logs", &id.to_string()]), format!("hi from the host\nhey {id}\nread-only\n"));

    // A mount outside the allow-list fails with the reason.
    let id = b.submit(&["--image", IMAGE, "--mount", "/etc:/host-etc", "--", "true"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("mount `/etc` is not allowed on node"), "{d:#}");

    // Time limit and cancel.
    let id = b.submit(&["--image", IMAGE, "--time-limit", "1s", "--", "sleep", "300"]);
    let d = b.wait_state(id, "TIMEOUT");
    assert!(d["job"]["reason"].as_str().unwrap_or_default().contains("time limit"), "{d:#}");
    let id = b.submit(&["--image", IMAGE, "--", "sleep", "300"]);
    b.wait_state(id, "RUNNING");
    b.ok(&["cancel", &id.to_string()]);
    b.wait_state(id, "CANCELLED");

    // An image no node has: the job waits, saying so.
    let id = b.submit(&["--image", "berth-test/nowhere:1", "--", "true"]);
    let d = b.wait_job(id, "an image reason", |j| j["job"]["pending_reason"]["kind"] == "image");
    assert_eq!(d["job"]["pending_reason"]["message"], "image: berth-test/nowhere:1 not on any node", "{d:#}");
    assert_eq!(b.state(id), "PENDING");
    b.ok(&["cancel", &id.to_string()]);

    // Every container is gone once its job ended.
    let start = Instant::now();
    while !left.names().is_empty() {
        assert!(start.elapsed() < PATIENCE, "containers left behind: {:?}", left.names());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agent is killed (SIGKILL) while a container job runs; the next agent on the same data
/// dir re-adopts the container, the manager keeps the job RUNNING and records its end.
#[test]
fn a_restarted_agent_re_adopts_its_containers() {
    if !docker_ready("a_restarted_agent_re_adopts_its_containers") {
        return;
    }
    let node = node_name("r");
    let left = Containers(node.clone());
    let mut b = Berth::cluster("", &[(&node, &[])]);
    let id = b.submit(&["--image", IMAGE, "--", "sh", "-c", "echo before; sleep 4; echo after"]);
    b.wait_state(id, "RUNNING");
    b.kill_agent(0);
    assert_eq!(left.names().len(), 1, "the container outlives its agent");
    b.add_agent(&node, &[]);
    let d = b.wait_state(id, "SUCCEEDED");
    assert_eq!(d["job"]["exit_code"], 0, "{d:#}");
    assert_eq!(b.ok(&["logs", &id.to_string()]), "before\nafter\n");
    let start = Instant::now();
    while !left.names().is_empty() {
        assert!(start.elapsed() < PATIENCE, "containers left behind: {:?}", left.names());
        std::thread::sleep(Duration::from_millis(100));
    }
}
