//! The process runtime through the real binary: time limits, out-of-memory kills, exit codes,
//! and kernels that keep running while the manager restarts.

mod support;

use std::process::{Command, Stdio};

use support::{Berth, PATIENCE, text};

#[test]
fn a_job_past_its_time_limit_ends_in_timeout() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--time-limit", "1s", "--", "sleep", "300"]);
    let d = b.wait_state(id, "TIMEOUT");
    let reason = d["job"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("time limit"), "{reason}");
}

#[test]
fn a_job_over_its_memory_limit_fails_with_out_of_memory() {
    if !support::cgroups_usable() {
        return;
    }
    let b = Berth::up(&[]);
    let id = b.submit(&["--mem", "32MiB", "--", "python3", "-c", "x = bytearray(512 << 20); print(len(x))"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("out of memory"), "{d:#}");
}

#[test]
fn a_failing_job_records_its_exit_code_and_reason() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--", "sh", "-c", "exit 7"]);
    let d = b.wait_state(id, "FAILED");
    assert_eq!(d["job"]["exit_code"], 7);
    assert!(d["job"]["reason"].as_str().unwrap().contains("exit code 7"), "{d:#}");
    let missing = b.submit(&["--", "/definitely/not/a/program"]);
    let d = b.wait_state(missing, "FAILED");
    assert!(d["job"]["reason"].as_str().unwrap().contains("launch failed"), "{d:#}");
}

/// `berth manager` and `berth agent` as separate processes: the manager is killed and
/// restarted while a kernel runs; the kernel keeps running, the agent reconnects, and the job's
/// end is recorded exactly once.
#[test]
fn kernels_keep_running_while_the_manager_restarts() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("manager");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let start_manager = || {
        Command::new(support::BIN)
            .env("HOME", home.path())
            .env_remove("XDG_CONFIG_HOME")
            .args(["manager", "--listen", &listen, "--data-dir"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut manager = KillOnDrop(start_manager());
    let url = format!("http://{listen}");
    let join_path = data.join("join-token");
    let start = std::time::Instant::now();
    while !join_path.exists() || std::fs::read_to_string(&join_path).unwrap().trim().is_empty() {
        assert!(start.elapsed() < PATIENCE, "manager never wrote its join token");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let join = std::fs::read_to_string(&join_path).unwrap().trim().to_string();
    let mut agent = KillOnDrop(
        Command::new(support::BIN)
            .env("HOME", home.path())
            .args(["agent", "--manager", &url, "--join-token", &join, "--name", "n1", "--data-dir"])
            .arg(home.path().join("agent"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let cli = |args: &[&str]| {
        Command::new(support::BIN).env("HOME", home.path()).env_remove("XDG_CONFIG_HOME").args(args).output().unwrap()
    };
    let wait_for = |id: &str, state: &str| {
        let start = std::time::Instant::now();
        loop {
            let o = cli(&["show", id, "-o", "json"]);
            if o.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                if v["job"]["state"] == state {
                    return v;
                }
            }
            assert!(start.elapsed() < PATIENCE, "job {id} never reached {state}: {}", text(&o.stdout));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // Submit only once the agent is registered: before that no node could ever run the job
    // and the submit is refused (this raced under load).
    let start = std::time::Instant::now();
    while !text(&cli(&["nodes", "-o", "json"]).stdout).contains("\"ready\"") {
        assert!(start.elapsed() < PATIENCE, "the agent never registered");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // the job waits for a file the test creates once the manager is back
    let gate = home.path().join("gate");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; echo finished", gate.display());
    let gate_dir = home.path();
    std::fs::set_permissions(gate_dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = cli(&["submit", "-o", "json", "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["id"].to_string();
    wait_for(&id, "RUNNING");

    manager.0.kill().unwrap();
    manager.0.wait().unwrap();
    std::fs::write(&gate, "").unwrap(); // the kernel finishes while the manager is down
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut manager = KillOnDrop(start_manager());

    let d = wait_for(&id, "SUCCEEDED");
    let ends = d["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "SUCCEEDED").count();
    assert_eq!(ends, 1, "completion recorded once: {d:#}");
    let out = cli(&["logs", &id]);
    assert_eq!(text(&out.stdout), "finished\n");

    // queued jobs start after the restart
    let o = cli(&["submit", "--wait", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    for p in [&mut agent.0, &mut manager.0] {
        unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
        support::wait_timeout(p, PATIENCE).expect("stops on SIGINT");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills the daemon if the test fails half-way, so no process outlives the test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
