//! A standby manager (a second `berth manager` on the leader's PostgreSQL store, on this
//! machine) is stopped by SIGINT as by SIGTERM: it exits, cleanly, while it stands by, even
//! started as a shell's background job (SIGINT ignored until berth handles it).
//!
//! Skipped (with a `SKIPPED:` line) without PostgreSQL (on CI a missing PostgreSQL fails).

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;

use support::{PATIENCE, base_cmd, wait_timeout};

/// `berth manager` on `store` with its own data dir under `home`, and a channel of the lines it
/// prints (read in a thread, so it never blocks on a full pipe). It starts with SIGINT ignored,
/// as a shell starts a background job (`berth manager ... &`): only a handler of its own makes
/// it heed SIGINT.
fn manager(home: &Path, name: &str, store: &str) -> (Child, mpsc::Receiver<String>) {
    use std::os::unix::process::CommandExt;
    let data = home.join(name);
    let mut cmd = base_cmd(home);
    cmd.args(["manager", "--listen", "127.0.0.1:0", "--lease-timeout", "2s", "--store", store, "--data-dir"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(home.join(format!("{name}.stderr"))).unwrap());
    // SAFETY: signal() is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("run berth manager");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Waits for a line holding `what`; panics with what the manager logged otherwise.
fn wait_line(rx: &mpsc::Receiver<String>, what: &str, log: &Path) {
    let start = std::time::Instant::now();
    while start.elapsed() < PATIENCE {
        match rx.recv_timeout(PATIENCE) {
            Ok(line) if line.contains(what) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no `{what}` line; its log:\n{}", std::fs::read_to_string(log).unwrap_or_default());
}

#[test]
fn a_standby_manager_stops_on_sigint() {
    let Some(pg) = berth_store::test_support::PgCluster::start("a_standby_manager_stops_on_sigint") else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(pg.create_db("berth"));
    let home = tempfile::tempdir().unwrap();
    let (mut leader, out) = manager(home.path(), "leader", &store);
    wait_line(&out, "berth manager is up", &home.path().join("leader.stderr"));
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let (mut standby, out) = manager(home.path(), "standby", &store);
        let log = home.path().join("standby.stderr");
        wait_line(&out, "stands by", &log);
        // SAFETY: signalling a child this test spawned and has not reaped.
        unsafe { libc::kill(standby.id() as i32, sig) };
        let Some(status) = wait_timeout(&mut standby, PATIENCE) else {
            let _ = standby.kill();
            let _ = standby.wait();
            panic!("the standby ignored {name}: {}", std::fs::read_to_string(&log).unwrap_or_default());
        };
        assert!(status.success(), "{name}: {status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(logged.contains("stopping the berth manager"), "{name}: {logged}");
    }
    // The leader led throughout and still stops as it did.
    // SAFETY: as above.
    unsafe { libc::kill(leader.id() as i32, libc::SIGINT) };
    let status = wait_timeout(&mut leader, PATIENCE).expect("the leader stopped after SIGINT");
    let logged = std::fs::read_to_string(home.path().join("leader.stderr")).unwrap_or_default();
    assert!(status.success(), "{status}: {logged}");
}
