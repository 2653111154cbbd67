//! `berth port-forward` through the real binary (issue 17): local connections reach a port
//! on a kernel's loopback, 50 at once and byte-exact, for process kernels and for a container
//! on its job's private network (another network namespace); errors are told, not hidden, and
//! another user gets the 404 of a missing job.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Instant;

use support::{Berth, base_cmd, text};

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `berth port-forward` with `args` and returns it with the local port it listens on.
fn forward(home: &Path, args: &[&str]) -> (Child, u16) {
    let mut child = base_cmd(home)
        .args([&["port-forward"], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    // "Forwarding from 127.0.0.1:PORT -> REMOTE (job N, kernel K)"
    let port = line
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no listening line: {line:?}"));
    (child, port)
}

/// `GET path` over HTTP/1.0 on `port`: the status line and the body.
fn get(port: u16, path: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no head: {all:?}"));
    let head = String::from_utf8_lossy(&all[..split]).to_string();
    (head.lines().next().unwrap_or_default().to_string(), all[split + 4..].to_vec())
}

/// Waits until a GET through the forward answers (the server in the job is up).
fn wait_served(port: u16, path: &str) {
    let start = Instant::now();
    loop {
        let ok = std::panic::catch_unwind(|| get(port, path)).is_ok_and(|(status, _)| status.contains("200"));
        if ok {
            return;
        }
        assert!(start.elapsed() < support::PATIENCE, "the server in the job never answered");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Established TCP connections to local port `port` (from `ss`).
fn established(port: u16) -> usize {
    let o = std::process::Command::new("ss")
        .args(["-Htn", "state", "established", &format!("( dport = :{port} )")])
        .output()
        .expect("ss (iproute2)");
    text(&o.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

/// Bytes nobody could guess, so a mix-up of connections shows.
fn payload(seed: u8, len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9 ^ seed as u32;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn port_forward_carries_fifty_connections_byte_exact_into_a_process_kernel() {
    let b = Berth::up(&[]);
    // In the job's work dir (where `berth` is run from): process kernels have a private
    // `/tmp`, into which only their own dirs are bound back.
    let dir = tempfile::tempdir_in(b.home.path().join("submit")).unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let files: Vec<Vec<u8>> = (0..5u8).map(|i| payload(i, 300_000 + i as usize * 1000)).collect();
    for (i, f) in files.iter().enumerate() {
        std::fs::write(dir.path().join(format!("f{i}")), f).unwrap();
    }
    let remote = free_port();
    let serve = format!("exec python3 -m http.server {remote} --bind 127.0.0.1 --directory {}", dir.path().display());
    let id = b.submit(&["--", "sh", "-c", &serve]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();

    let (mut fwd, local) = forward(b.home.path(), &[&ids, &format!(":{remote}")]);
    wait_served(local, "/f0");
    let threads: Vec<_> = (0..50)
        .map(|n| {
            std::thread::spawn(move || {
                let i = n % 5;
                (i, get(local, &format!("/f{i}")))
            })
        })
        .collect();
    for t in threads {
        let (i, (status, body)) = t.join().unwrap();
        assert!(status.contains("200"), "{status}");
        assert!(body == files[i], "file {i}: {} bytes back, {} sent", body.len(), files[i].len());
    }

    // Nothing listens: that connection is closed and the reason told; the forward goes on.
    let (mut bad, bad_port) = forward(b.home.path(), &[&ids, &format!(":{}", free_port())]);
    let mut s = TcpStream::connect(("127.0.0.1", bad_port)).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.is_empty());
    bad.kill().unwrap();
    let mut err = String::new();
    bad.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("nothing listens on port"), "{err}");
    assert_eq!(get(local, "/f1").1, files[1], "the first forward still works");

    // Another user learns nothing; bad ports are usage errors.
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["port-forward", &ids, "80"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains(&format!("job {id} not found")), "{}", text(&o.stderr));
    let o = b.cli(&["port-forward", &ids, "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));

    // A forward whose client goes away leaves no connection behind: not to the app, not
    // through the manager.
    let (mut gone, gone_port) = forward(b.home.path(), &[&ids, &format!(":{remote}")]);
    let mut held = TcpStream::connect(("127.0.0.1", gone_port)).unwrap();
    held.write_all(b"GET /f0 HTTP/1.0\r\n").unwrap(); // the head never ends: the app waits
    let to_app = || established(remote);
    let start = std::time::Instant::now();
    while to_app() == 0 {
        assert!(start.elapsed() < support::PATIENCE, "the held connection never reached the app");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    gone.kill().unwrap();
    let _ = gone.wait();
    while to_app() > 0 {
        assert!(start.elapsed() < support::PATIENCE, "a connection to the app outlived its forward");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(held);

    // The job ending ends the forward, with a word.
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");
    let status = fwd.wait().unwrap();
    assert!(status.success());
    let mut err = String::new();
    fwd.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("CANCELLED") && err.contains("the forward stops"), "{err}");
    let o = b.cli(&["port-forward", &ids, "80"]);
    assert!(text(&o.stderr).contains("port-forward needs a running job"), "{}", text(&o.stderr));
}

#[test]
fn port_forward_reaches_a_container_on_its_jobs_private_network() {
    if !support::docker_ready("port_forward_reaches_a_container_on_its_jobs_private_network") {
        return;
    }
    let node = format!("pf{}", std::process::id());
    let b = Berth::cluster("", &[(&node, &[])]);
    // Two kernels: containers on the job's own network, each in a namespace of its own.
    let serve =
        "mkdir -p /www && echo \"kernel $BERTH_KERNEL_INDEX\" > /www/who && exec httpd -f -p 127.0.0.1:8000 -h /www";
    let id = b.submit(&["--image", "berth-test/busybox:1", "--kernels", "2", "--", "sh", "-c", serve]);
    b.wait_state(id, "RUNNING");
    let ids = id.to_string();
    let (mut fwd, local) = forward(b.home.path(), &[&ids, ":8000", "--kernel", "1"]);
    wait_served(local, "/who");
    assert_eq!(get(local, "/who").1, b"kernel 1\n");
    fwd.kill().unwrap();
    let _ = fwd.wait();
    b.ok(&["cancel", &ids]);
    b.wait_state(id, "CANCELLED");
    support::remove_containers(&node);
}
