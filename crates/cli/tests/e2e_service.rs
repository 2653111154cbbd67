//! berth as a system service (issue 18): the systemd units in `deploy/systemd/` pass
//! `systemd-analyze verify` with the real binary; daemons tell a `Type=notify` service manager
//! when they serve and when they stop; the join token comes from a private file, never a
//! world-readable one; `--log-format json` writes one JSON object per line, the access log
//! among them, without query strings (one-time codes travel there).

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Stdio;

use support::{BIN, Berth, base_cmd, text};

fn units() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
    let mut units: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    units.sort();
    units
}

#[test]
fn the_systemd_units_verify_and_keep_secrets_off_command_lines() {
    let units = units();
    assert_eq!(units.len(), 3, "{units:?}");
    let have_analyze = std::process::Command::new("systemd-analyze").arg("--version").output().is_ok();
    let dir = tempfile::tempdir().unwrap();
    for unit in &units {
        let body = std::fs::read_to_string(unit).unwrap();
        assert!(body.contains("Type=notify"), "{}: berth tells systemd when it serves", unit.display());
        assert!(!body.contains("--join-token "), "{}: the join token never on a command line", unit.display());
        if body.contains("berth agent") {
            for key in ["Delegate=yes", "KillMode=process", "LoadCredential=join-token:", "--join-token-file"] {
                assert!(body.contains(key), "{}: {key}", unit.display());
            }
        }
        // The same unit, run from this build's binary.
        let copy = dir.path().join(unit.file_name().unwrap());
        std::fs::write(&copy, body.replace("/usr/bin/berth", BIN)).unwrap();
    }
    if !have_analyze {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "systemd-analyze is missing (apt-get install systemd)");
        eprintln!("SKIPPED: the_systemd_units_verify: no systemd-analyze (apt-get install systemd)");
        return;
    }
    let copies: Vec<_> = units.iter().map(|u| dir.path().join(u.file_name().unwrap())).collect();
    let o = std::process::Command::new("systemd-analyze").arg("verify").args(&copies).output().unwrap();
    // Unknown keys are warnings (exit 0): any word from it is a mistake in a unit.
    assert!(o.status.success() && o.stderr.is_empty(), "{}{}", text(&o.stdout), text(&o.stderr));
}

/// Receives datagrams from `sock` until one holds `want`; returns everything received.
fn wait_notify(sock: &UnixDatagram, want: &str) -> String {
    let mut all = String::new();
    let mut buf = [0u8; 1024];
    sock.set_read_timeout(Some(support::PATIENCE)).unwrap();
    while !all.contains(want) {
        let n = sock.recv(&mut buf).unwrap_or_else(|e| panic!("no `{want}` from berth ({e}); got {all:?}"));
        all.push_str(&String::from_utf8_lossy(&buf[..n]));
        all.push('\n');
    }
    all
}

/// Kills the process if the test fails before it stopped it (a failed assertion left the
/// manager running after the test).
struct KillOnPanic(u32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // SAFETY: kill sends a signal to the manager this test started.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
}

#[test]
fn a_manager_under_systemd_says_ready_then_stopping_and_logs_json_with_an_access_log() {
    let home = tempfile::tempdir().unwrap();
    let sock_path = home.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let mut m = base_cmd(home.path())
        .args(["manager", "--listen", "127.0.0.1:0", "--log-format", "json", "--data-dir"])
        .arg(home.path().join("data"))
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _guard = KillOnPanic(m.id());
    let got = wait_notify(&sock, "READY=1");
    assert!(got.contains("STATUS=serving http://127.0.0.1:"), "{got}");
    // A request with a query: logged without it.
    let url = got.lines().find_map(|l| l.strip_prefix("STATUS=serving ")).unwrap().to_string();
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET /v1/jobs?limit=3&secret-code=abc HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 401"), "{answer}");
    unsafe { libc::kill(m.id() as i32, libc::SIGTERM) };
    wait_notify(&sock, "STOPPING=1");
    let status = m.wait().unwrap();
    assert!(status.success(), "{status}");
    let lines: Vec<String> = BufReader::new(m.stderr.take().unwrap()).lines().map_while(Result::ok).collect();
    let mut access = Vec::new();
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        if v["target"] == "berth::access" {
            access.push(v);
        }
    }
    let jobs = access.iter().find(|v| v["path"] == "/v1/jobs").unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!((jobs["method"].as_str(), jobs["status"].as_u64()), (Some("GET"), Some(401)));
    assert!(lines.iter().all(|l| !l.contains("secret-code")), "no query strings in the log");
}

#[test]
fn the_join_token_comes_from_a_private_file() {
    // A whole cluster whose agent reads its token from a 0600 file (the test support does).
    let node = format!("tf{}", std::process::id());
    let b = Berth::cluster("", &[(&node, &[])]);
    assert_eq!(b.json(&["nodes"])[0]["state"], "ready");
    // A file every user can read is refused, and says how to fix it.
    let file = b.home.path().join("open-token");
    std::fs::write(&file, "x\n").unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o =
        base_cmd(b.home.path()).args(["agent", "--manager", &b.url, "--join-token-file"]).arg(&file).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("chmod 600"), "{}", text(&o.stderr));
    // Both, or neither: usage errors.
    let o = base_cmd(b.home.path())
        .args(["agent", "--manager", &b.url, "--join-token", "a", "--join-token-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o =
        base_cmd(b.home.path()).args(["agent", "--manager", &b.url]).env_remove("BERTH_JOIN_TOKEN").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn the_shipped_manager_config_and_its_example_start_a_manager() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/etc/manager.toml");
    let home = tempfile::tempdir().unwrap();
    // The commented example, switched on, must be a valid config too.
    let example: String = std::fs::read_to_string(&shipped)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("# ") && (l.contains(" = ") || l.starts_with("# [")))
        .map(|l| format!("{}\n", l.trim_start_matches("# ")))
        .collect();
    assert!(example.contains("[[queue]]") && example.contains("idle_timeout"), "{example}");
    let example_file = home.path().join("example.toml");
    std::fs::write(&example_file, example).unwrap();
    for (i, config) in [shipped, example_file].iter().enumerate() {
        let sock_path = home.path().join(format!("notify{i}"));
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        let mut m = base_cmd(home.path())
            .args(["manager", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .arg("--data-dir")
            .arg(home.path().join(format!("data{i}")))
            .env("NOTIFY_SOCKET", &sock_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _guard = KillOnPanic(m.id());
        wait_notify(&sock, "READY=1");
        unsafe { libc::kill(m.id() as i32, libc::SIGTERM) };
        assert!(m.wait().unwrap().success(), "{}", config.display());
    }
}
