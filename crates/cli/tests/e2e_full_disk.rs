//! berth on a full disk, through the real binary (issue 13): writes the store cannot commit are
//! refused with 507 naming the data dir and never acknowledged; reads keep working; `/v1/health`
//! says so; a job that ends meanwhile is recorded once space is back, without a restart; ids
//! are never given out twice.
//!
//! The data dir is a 20 MiB tmpfs of the test's own (root only; `CI=true` without root fails).
//! `disk` is declared before `b`, so berth stops before it is unmounted.

mod support;

use std::io::{Read, Write};

use support::{Berth, Tmpfs, text};

/// `GET /v1/health` as JSON (no token needed).
fn health(url: &str) -> serde_json::Value {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("health is not JSON ({e}): {out}"))
}

fn job_ids(b: &Berth) -> Vec<i64> {
    b.json(&["ps", "--all"]).as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

/// Regression (issue 13): on a full disk submits were answered 201 with ids that were never
/// stored (and given out again after a restart), tokens were printed that never worked, and a
/// job whose end could not be recorded stayed RUNNING for good.
#[test]
fn a_full_disk_refuses_writes_with_507_and_berth_recovers_without_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&home.path().join("data"), "size=20m,mode=0700") else { return };
    let mut b = Berth::up_in(home, &["--no-cache", "--no-docker"]);
    let data = b.data.clone();
    let running = b.submit(&["--", "sleep", "3"]);
    b.wait_state(running, "RUNNING");

    let filler = disk.fill_blocks();
    let pad = format!("PAD={}", "x".repeat(16 << 10));
    let mut acknowledged = vec![running];
    let mut refused = 0;
    for _ in 0..12 {
        let o = b.cli(&["submit", "--env", &pad, "--", "true"]);
        if o.status.success() {
            let out = text(&o.stdout);
            acknowledged.push(out.trim().rsplit(' ').next().unwrap().parse().unwrap());
            continue;
        }
        let err = text(&o.stderr);
        assert!(
            err.contains("507") && err.contains(data.to_str().unwrap()),
            "a refused write names the data dir: {err}"
        );
        refused += 1;
    }
    assert!(refused > 0, "the disk never filled up: the test proves nothing");
    let o = b.cli(&["admin", "user", "create", "bob"]);
    assert!(!o.status.success(), "a user was reported created on a full disk: {}", text(&o.stdout));

    // Reads work, and health tells what is wrong and where.
    let h = health(&b.url);
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(h["problems"][0].as_str().unwrap().contains(data.to_str().unwrap()), "{h}");
    assert!(job_ids(&b).contains(&running));
    assert_eq!(b.state(running), "RUNNING");
    // The job ends (sleep 3) while nothing can be recorded ...
    std::thread::sleep(std::time::Duration::from_secs(4));

    // ... and once space is back it is, without a restart.
    std::fs::remove_file(&filler).unwrap();
    // Its end is recorded: SUCCEEDED, or FAILED because the agent saw its logs' disk full
    // when it ended (it cannot tell whether output was lost), saying so.
    let d = b.wait_job(running, "its end recorded", |d| d["job"]["state"] != "RUNNING");
    let (state, reason) = (d["job"]["state"].as_str().unwrap(), d["job"]["reason"].as_str().unwrap_or_default());
    assert!(
        state == "SUCCEEDED" || (state == "FAILED" && reason.contains("no space left on device")),
        "{state}: {reason}"
    );
    assert_eq!(health(&b.url)["status"], "ok");
    let after = b.submit(&["--", "true"]);
    assert!(acknowledged.iter().all(|a| *a < after), "id {after} was given out before: {acknowledged:?}");
    acknowledged.push(after);
    let token = b.create_user("bob");
    assert!(!token.is_empty());

    // Everything acknowledged survives a restart, and ids go on.
    b.restart();
    let ids = job_ids(&b);
    for a in &acknowledged {
        assert!(ids.contains(a), "job {a} was acknowledged and is gone after a restart: {ids:?}");
    }
    let next = b.submit(&["--", "true"]);
    assert!(next > after, "id {next} reused after a restart");
    b.stop();
}
