//! Scaling an endpoint down through the real binary (issue 41): the replica it no longer
//! wants ends as scaled down, typed (`end_cause` and `stop`), shown as `SCALED-DOWN` with its
//! reason in `berth ps` and `berth show`, not as a cancel or a failure that gets restarted;
//! and counts of replicas read `1 replica`.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Berth, PATIENCE, text};

/// A replica: a plain HTTP server on `$PORT`.
const SERVER: &str = r#"
import http.server, os
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), http.server.SimpleHTTPRequestHandler).serve_forever()
"#;

fn replica_jobs(v: &Value) -> Vec<i64> {
    v["replicas"].as_array().unwrap().iter().map(|r| r["job"].as_i64().unwrap()).collect()
}

#[test]
fn scaled_down_replicas_end_as_scaled_down_not_cancelled() {
    // Two nodes: each replica takes a whole CPU, and CI has two.
    let b = Berth::cluster("", &[("n1", &[]), ("n2", &[])]);
    let script = b.home.path().join("submit/server.py");
    std::fs::write(&script, SERVER).unwrap();
    let o = b.cli(&[
        "serve",
        "create",
        "sd",
        "--replicas",
        "2",
        "--cpus",
        "1",
        "--mem",
        "256MiB",
        "--probe-period",
        "1s",
        "--",
        "python3",
        script.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = b.wait_endpoint("sd", "two ready replicas", |v| v["ready"] == 2);
    let jobs = replica_jobs(&before);

    // One wanted: said in the singular.
    let out = b.ok(&["serve", "scale", "sd", "1"]);
    assert!(out.contains("endpoint sd: 1 replica wanted"), "{out}");
    let after = b.wait_endpoint("sd", "one replica", |v| v["replicas"].as_array().unwrap().len() == 1);
    let kept = replica_jobs(&after)[0];
    let gone = *jobs.iter().find(|j| **j != kept).expect("the replica scaled down");

    // Its end: CANCELLED in the API (stopped before its own end), typed as a scale-down.
    let start = Instant::now();
    let j = loop {
        let j = b.job(gone);
        if j["job"]["state"] != "RUNNING" && j["job"]["state"] != "TERMINATING" {
            break j;
        }
        assert!(start.elapsed() < PATIENCE, "replica job {gone} never ended: {j:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(j["job"]["state"], "CANCELLED", "{j:#}");
    assert_eq!(j["job"]["end_cause"], "scaled_down", "{j:#}");
    assert_eq!(j["job"]["stop"]["kind"], "scaled_down", "{j:#}");
    assert_eq!(j["job"]["stop"]["endpoint"], "sd", "{j:#}");
    assert_eq!(j["job"]["reason"], "scaled down (endpoint sd wants 1 replica)", "{j:#}");

    // People read it as what it is, not as a failure.
    let ps = b.ok(&["ps", "-a"]);
    let row = ps.lines().find(|l| l.starts_with(&format!("{gone} "))).unwrap_or_else(|| panic!("{ps}"));
    assert!(row.contains("SCALED-DOWN") && !row.contains("CANCELLED"), "{row}");
    assert!(row.contains("scaled down (endpoint sd wants 1 replica)"), "{row}");
    let show = b.ok(&["show", &gone.to_string()]);
    assert!(show.contains("SCALED-DOWN"), "{show}");
    assert!(show.contains("scaled down: endpoint sd wanted 1 replica"), "{show}");
    let history = b.ok(&["history", "-o", "id,state"]);
    let row = history
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{gone} ")))
        .unwrap_or_else(|| panic!("{history}"));
    assert!(row.contains("SCALED-DOWN"), "{row}");
    // `--state CANCELLED` still finds it (the API's state is unchanged).
    let cancelled = b.ok(&["ps", "--state", "CANCELLED"]);
    assert!(cancelled.lines().any(|l| l.starts_with(&format!("{gone} "))), "{cancelled}");

    // Not a failure: the endpoint restarts nothing and keeps its one replica.
    std::thread::sleep(Duration::from_secs(2));
    let v = b.json(&["serve", "show", "sd"]);
    assert_eq!(v["restarts"], 0, "{v:#}");
    assert_eq!(replica_jobs(&v), [kept], "{v:#}");
    assert_eq!(b.job(kept)["job"]["state"], "RUNNING");
}
