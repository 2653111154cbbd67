//! The process runtime through the real binary: time limits, out-of-memory kills, exit codes,
//! kernels that keep running while the manager restarts, each kernel's private `/dev/shm` and
//! `/tmp`, and an agent whose data dir is full.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
/// Regression: kernels inherited the kernel supervisor's blocked SIGCHLD (and Rust's ignored
/// SIGPIPE), so a script's `cmd & wait` under dash hung forever. A kernel now starts with no
/// signal blocked or ignored, like a login shell.
#[test]
fn a_kernel_starts_with_no_signal_blocked_or_ignored() {
    let b = Berth::up(&[]);
    let id = b.submit(&["--", "sh", "-c", "sleep 0.2 & wait; grep -E '^Sig(Blk|Ign)' /proc/$$/status"]);
    b.wait_state(id, "SUCCEEDED");
    let out = b.ok(&["logs", &id.to_string()]);
    let mask = |name: &str| {
        let line = out.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("no {name} in {out}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    // Bits 0..31: the standard signals (the real-time ones above are the C library's).
    assert_eq!(mask("SigBlk:") & 0x7fff_ffff, 0, "{out}");
    assert_eq!(mask("SigIgn:") & 0x7fff_ffff, 0, "{out}");
}

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
    // the job waits for a file the test creates once the manager is back (outside /tmp, which
    // is the kernel's own)
    let gate_dir = support::shared_tempdir();
    let gate = gate_dir.path().join("gate");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; echo finished", gate.display());
    std::fs::set_permissions(gate_dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
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

/// Files of a test's jobs in the node's `/dev/shm` and `/tmp`, removed on drop (they exist only
/// when a kernel wrote to the node's own, the defect these tests pin).
struct HostFiles(Vec<PathBuf>);

impl HostFiles {
    fn named(tag: &str) -> HostFiles {
        HostFiles(["/dev/shm", "/tmp"].iter().map(|d| Path::new(d).join(tag)).collect())
    }

    fn existing(&self) -> Vec<&PathBuf> {
        self.0.iter().filter(|p| p.exists()).collect()
    }
}

impl Drop for HostFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Waits until the job's stdout holds `what`; returns it.
fn wait_logs(b: &Berth, id: i64, what: &str) -> String {
    let start = Instant::now();
    loop {
        let out = text(&b.cli(&["logs", &id.to_string()]).stdout);
        if out.contains(what) {
            return out;
        }
        assert!(start.elapsed() < PATIENCE, "job {id} never printed `{what}`: {out}\n{:#}", b.job(id));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A kernel writes to `/dev/shm` and `/tmp`: it sees its own files, the node and another job
/// see none of them while it runs nor after it ends, and both are tmpfs of its memory limit.
#[test]
fn a_kernels_dev_shm_and_tmp_are_its_own_and_go_with_it() {
    if !support::cgroups_usable() {
        return;
    }
    let b = Berth::up(&[]);
    let tag = format!("berth-private-{}", std::process::id());
    let host = HostFiles::named(&tag);
    let script = format!(
        "echo secret > /dev/shm/{tag} && echo secret > /tmp/{tag} && cat /dev/shm/{tag} /tmp/{tag} && \
         grep -E ' (/dev/shm|/tmp) ' /proc/self/mountinfo; echo ready; sleep 300"
    );
    let writer = b.submit(&["--mem", "96MiB", "--", "sh", "-c", &script]);
    let out = wait_logs(&b, writer, "ready");
    assert!(out.starts_with("secret\nsecret\n"), "the kernel reads its own files: {out}");
    for point in ["/dev/shm", "/tmp"] {
        // the last mount on a point is the one the kernel sees
        let line = out.lines().rfind(|l| l.split(' ').nth(4) == Some(point)).unwrap_or_default();
        assert!(line.contains(" - tmpfs ") && line.contains("size=98304k"), "{point} is a tmpfs of --mem: {out}");
    }
    assert!(host.existing().is_empty(), "the node sees the kernel's files: {:?}", host.existing());
    let look = format!("test ! -e /dev/shm/{tag} && test ! -e /tmp/{tag} && echo unseen");
    let other = b.submit(&["--", "sh", "-c", &look]);
    b.wait_state(other, "SUCCEEDED");
    assert_eq!(text(&b.cli(&["logs", &other.to_string()]).stdout), "unseen\n");
    b.ok(&["cancel", &writer.to_string()]);
    b.wait_state(writer, "CANCELLED");
    assert!(host.existing().is_empty(), "the kernel's files outlived it: {:?}", host.existing());
}

/// `--mem 64MiB` and 200 MiB written into `/dev/shm`: the job does not succeed (OOM-killed, or
/// ENOSPC at the tmpfs's size) and leaves nothing behind on the node.
#[test]
fn a_job_filling_dev_shm_past_its_memory_limit_fails_and_leaves_nothing() {
    if !support::cgroups_usable() {
        return;
    }
    let b = Berth::up(&[]);
    let tag = format!("berth-shm-fill-{}", std::process::id());
    let host = HostFiles::named(&tag);
    let fill = format!("dd if=/dev/zero of=/dev/shm/{tag} bs=1M count=200");
    let id = b.submit(&["--mem", "64MiB", "--", "sh", "-c", &fill]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("out of memory") || reason.contains("exit code"), "{d:#}");
    assert!(host.existing().is_empty(), "the job left {:?}", host.existing());
}

/// The agent's data dir on a small tmpfs that fills up: a job whose logs cannot be written
/// fails with a reason naming the full disk and the data dir, a start that cannot make its
/// dirs fails with `launch failed: no space left on device ...`, and once space is freed jobs
/// run again without a restart; the agent never panics.
#[test]
fn an_agent_on_a_full_disk_ends_jobs_with_a_reason_and_recovers() {
    if !support::cgroups_usable() {
        return;
    }
    let mut b = Berth::cluster("", &[]);
    let data = b.home.path().join("agent-n1");
    let Some(disk) = support::Tmpfs::mount(&data, "size=8m,nr_inodes=512") else { return };
    b.add_agent("n1", &[]);
    b.wait_nodes_ready(1);
    let ok = b.submit(&["--", "echo", "before"]);
    b.wait_state(ok, "SUCCEEDED");

    // The logs' blocks go while the job runs: its writes fail and it ends with the reason.
    let shared = support::shared_tempdir();
    let gate = shared.path().join("gate");
    let script = format!("while [ ! -e {} ]; do sleep 0.1; done; seq 1 100000; echo done", gate.display());
    let id = b.submit(&["--", "sh", "-c", &script]);
    b.wait_state(id, "RUNNING");
    let filler = disk.fill_blocks();
    std::fs::write(&gate, "").unwrap();
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    let want = format!("node n1: no space left on device writing logs under {}", data.display());
    assert!(reason.starts_with(&want), "{d:#}");

    // A start on the full disk fails to write the kernel's record (a launch failure) or, if
    // the blocks the last kernel gave back were enough for that, runs without its logs: either
    // way it fails, saying where space is missing.
    let id = b.submit(&["--", "true"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no space left on device") && reason.contains("node n1"), "{d:#}");
    assert!(reason.contains(&data.display().to_string()), "{d:#}");

    // No inode either: the kernel's dirs cannot be made.
    let inodes = disk.fill_inodes();
    let id = b.submit(&["--", "true"]);
    let d = b.wait_state(id, "FAILED");
    let reason = d["job"]["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("launch failed: no space left on device on node n1 creating"), "{d:#}");
    assert!(reason.contains(&data.display().to_string()), "{d:#}");

    // Space is back: jobs run again, with their logs, without a restart.
    for f in inodes.iter().chain([&filler]) {
        std::fs::remove_file(f).unwrap();
    }
    let id = b.submit(&["--", "echo", "after"]);
    b.wait_state(id, "SUCCEEDED");
    assert_eq!(text(&b.cli(&["logs", &id.to_string()]).stdout), "after\n");
    let log = std::fs::read_to_string(b.home.path().join("n1.stderr")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}

/// With the data dir closed to the run user, work dirs go under the node's `/tmp`, which the
/// kernel does not see: its work dir (HOME) and its kernel dir are bound back into its
/// private `/tmp`, so it works in HOME and reads its cache token file there.
#[test]
fn a_kernels_home_under_tmp_stays_reachable_in_its_private_tmp() {
    if !support::cgroups_usable() {
        return;
    }
    let b = Berth::up_private(&[]);
    let script = "cd && echo kept > f && cat f && pwd && test -s \"$BERTH_CACHE_TOKEN_FILE\" && echo token";
    // A berth user without a Unix account runs as a mapped uid (the admin's own jobs run as
    // its submitter, root).
    let token = b.create_user("mapped");
    let id = b.submit_as(&token, &["--", "sh", "-c", script]);
    b.wait_state(id, "SUCCEEDED");
    let out = text(&b.cli(&["logs", &id.to_string()]).stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!((lines[0], lines[2]), ("kept", "token"), "{out}");
    assert!(lines[1].starts_with("/tmp/berth-work-"), "the fallback work dir: {out}");
}
