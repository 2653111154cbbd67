//! Queue policies through the real binary (issue 3): ordering (lifo, drf), backfill with
//! expected starts, binpack vs spread across two agents, preemption, and the queue admin API
//! with its precedence over the config file. No assertion measures time.

mod support;

use serde_json::Value;
use support::{Berth, text};

fn queue(policy: &str) -> String {
    format!("[[queue]]\nname = \"default\"\n{policy}\n")
}

fn ps_row(b: &Berth, id: i64) -> Value {
    let ps = b.json(&["ps"]);
    ps.as_array().unwrap().iter().find(|j| j["id"] == id).cloned().unwrap_or(Value::Null)
}

fn cancel(b: &Berth, ids: &[i64]) {
    let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let mut a = vec!["cancel"];
    a.extend(ids.iter().map(String::as_str));
    let _ = b.cli(&a);
}

fn pending_reason(j: &Value) -> bool {
    j["job"]["pending_reason"]["kind"].as_str().is_some_and(|k| k != "queued")
}

/// lifo: among jobs of one priority, the newest goes first.
#[test]
fn lifo_starts_the_newest_waiting_job_first() {
    let b = Berth::up_with_config(&queue("ordering = \"lifo\""), &["--fake-gpus", "1"]);
    let blocker = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    b.wait_state(blocker, "RUNNING");
    let ids: Vec<i64> = (0..3).map(|_| b.submit(&["--gpus", "1", "--", "sleep", "300"])).collect();
    b.wait_job(ids[0], "a pass", pending_reason);
    b.wait_job(ids[2], "a pass", pending_reason);
    assert_eq!(ps_row(&b, ids[2])["position"], 1, "newest first");
    assert_eq!(ps_row(&b, ids[0])["position"], 3);
    cancel(&b, &[blocker]);
    b.wait_state(ids[2], "RUNNING");
    assert_eq!(b.state(ids[0]), "PENDING");
    assert_eq!(b.state(ids[1]), "PENDING");
    cancel(&b, &ids);
}

/// drf: the user with the smaller dominant share goes next, even if they came later.
#[test]
fn drf_lets_the_user_with_the_smaller_share_go_first() {
    let b = Berth::up_with_config(&queue("ordering = \"drf\""), &["--fake-gpus", "2"]);
    let bob = b.create_user("bob");
    let a1 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    let a2 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    b.wait_state(a1, "RUNNING");
    b.wait_state(a2, "RUNNING");
    let a3 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    let b1 = b.submit_as(&bob, &["--gpus", "1", "--", "sleep", "300"]);
    b.wait_job(b1, "a pass", pending_reason);
    assert_eq!(ps_row(&b, b1)["position"], 1, "bob holds nothing, the admin both GPUs");
    cancel(&b, &[a1]);
    b.wait_state(b1, "RUNNING");
    assert_eq!(b.state(a3), "PENDING");
    cancel(&b, &[a2, a3, b1]);
}

/// EASY backfill: a blocked big job gets a reservation (shown as its expected start); a
/// short job that ends before it starts now, a long one that would delay it waits.
#[test]
fn backfill_starts_short_jobs_that_cannot_delay_the_reservation() {
    // EASY backfill in fifo order (the recommended policy orders by expected service and
    // reserves for several jobs).
    let easy = "ordering = \"fifo\"\nhead_of_line = \"backfill\"\nreservations = 1";
    let b = Berth::up_with_config(&queue(easy), &["--fake-gpus", "1"]);
    let mem_total = b.json(&["nodes"])[0]["mem_total"].as_u64().unwrap();
    let big_mem = format!("{}B", mem_total - (128 << 20));
    let long = b.submit(&["--gpus", "1", "--mem", "256MiB", "--time-limit", "1h", "--", "sleep", "300"]);
    let running = b.wait_state(long, "RUNNING");
    let big = b.submit(&["--gpus", "1", "--mem", &big_mem, "--", "sleep", "300"]);
    let waiting = b.wait_job(big, "an expected start", |j| !j["job"]["expected_start"].is_null());
    let started: jiff::Timestamp = running["job"]["started_at"].as_str().unwrap().parse().unwrap();
    let expected: jiff::Timestamp = waiting["job"]["expected_start"].as_str().unwrap().parse().unwrap();
    let after = expected.as_second() - started.as_second();
    assert!((3540..=3660).contains(&after), "reserved at the running job's time limit: {after}s after its start");

    // would hold memory the big job needs past its reserved start
    let too_long = b.submit(&["--mem", "256MiB", "--time-limit", "2h", "--", "sleep", "300"]);
    b.wait_job(too_long, "a pass", pending_reason);
    let short = b.submit(&["--mem", "256MiB", "--time-limit", "10m", "--", "sleep", "300"]);
    b.wait_state(short, "RUNNING");
    assert_eq!(b.state(too_long), "PENDING");
    assert_eq!(b.state(big), "PENDING");
    let table = b.ok(&["ps"]);
    assert!(table.contains("EXPECTED START"), "{table}");
    let shown = b.ok(&["show", &big.to_string()]);
    assert!(shown.contains("expected:") && shown.contains("to start in"), "{shown}");
    cancel(&b, &[long, big, too_long, short]);
}

/// The backfill window (Slurm's bf_max_job_test): with a window of 1, the job right behind
/// the reserved one is tried and the next waits untried, with a reason that says so; the
/// window is shown by `berth queues` and changed by an admin (0 is refused, naming the key).
#[test]
fn backfill_tries_only_the_window_of_jobs_behind_a_blocked_one() {
    let easy = "ordering = \"fifo\"\nhead_of_line = \"backfill\"\nreservations = 1\nbackfill_window = 1";
    let b = Berth::up_with_config(&queue(easy), &["--fake-gpus", "1"]);
    let table = b.ok(&["queues"]);
    assert!(table.contains("WINDOW"), "{table}");
    assert_eq!(b.json(&["queues"])[0]["policy"]["backfill_window"], 1);

    let holder = b.submit(&["--gpus", "1", "--mem", "64MiB", "--time-limit", "1h", "--", "sleep", "300"]);
    b.wait_state(holder, "RUNNING");
    let reserved = b.submit(&["--gpus", "1", "--mem", "64MiB", "--", "sleep", "300"]);
    let tried = b.submit(&["--gpus", "1", "--mem", "64MiB", "--time-limit", "2h", "--", "sleep", "300"]);
    let untried = b.submit(&["--mem", "64MiB", "--time-limit", "1m", "--", "sleep", "300"]);
    let j = b.wait_job(untried, "a pass", |j| {
        j["job"]["pending_reason"]["message"].as_str().is_some_and(|m| m.contains("backfill window"))
    });
    let message = j["job"]["pending_reason"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("tries 1 job past") && message.contains("position 1"), "{message}");
    assert_eq!(b.state(untried), "PENDING", "a job beyond the window is not started, even one that fits");
    let t = b.wait_job(tried, "a pass", pending_reason);
    assert!(!t["job"]["pending_reason"]["message"].as_str().unwrap().contains("window"), "{t}");

    let o = b.cli(&["admin", "queue", "set", "default", "--backfill-window", "0"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("backfill_window"), "{}", text(&o.stderr));
    b.ok(&["admin", "queue", "set", "default", "--backfill-window", "3"]);
    assert_eq!(b.json(&["queues"])[0]["policy"]["backfill_window"], 3);
    b.wait_state(untried, "RUNNING");
    cancel(&b, &[holder, reserved, tried, untried]);
}

fn node_of(b: &Berth, id: i64) -> String {
    b.wait_state(id, "RUNNING")["kernels"][0]["binding"]["node"].as_str().unwrap().to_string()
}

/// Scoring picks the node: `binpack` fills the fuller node first, `spread` the emptier one.
/// Two agents (n1, n2) of one manager, two GPUs each; spread is set live by the admin.
#[test]
fn binpack_fills_one_node_and_spread_uses_both() {
    let b = Berth::cluster(
        &queue("scoring = \"binpack\""),
        &[("n1", &["--fake-gpus", "2"]), ("n2", &["--fake-gpus", "2"])],
    );
    let p1 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    let n = node_of(&b, p1);
    let p2 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    assert_eq!(node_of(&b, p2), n, "binpack puts the second job next to the first");
    cancel(&b, &[p1, p2]);
    b.wait_state(p1, "CANCELLED");
    b.wait_state(p2, "CANCELLED");

    b.ok(&["admin", "queue", "set", "default", "--scoring", "spread"]);
    let s1 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    let n1 = node_of(&b, s1);
    let s2 = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    assert_ne!(node_of(&b, s2), n1, "spread puts the second job on the other node");
    cancel(&b, &[s1, s2]);
}

fn history(d: &Value) -> Vec<String> {
    d["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("{} {}", t["to"].as_str().unwrap(), t["reason"]))
        .collect()
}

/// A higher-priority job preempts a preemptible one on the only GPU: the victim is stopped
/// and requeued (new attempt), the preemptor runs, and the victim runs again afterwards.
#[test]
fn preemption_requeues_the_victim_and_it_runs_again() {
    let b =
        Berth::up_with_config(&queue("preemption = \"requeue\"\npreempt_min_runtime = \"0s\""), &["--fake-gpus", "1"]);
    let low = b.submit(&["--gpus", "1", "--preemptible", "--", "sleep", "300"]);
    b.wait_state(low, "RUNNING");
    let high = b.submit(&["--gpus", "1", "--priority", "5", "--", "sleep", "300"]);
    b.wait_state(high, "RUNNING");
    let d = b.wait_job(low, "a requeue", |j| {
        j["transitions"].as_array().unwrap().iter().any(|t| t["to"] == "PENDING" && t["from"] == "TERMINATING")
    });
    let h = history(&d);
    let preempted = format!("preempted by job {high} (priority 5)");
    assert!(h.iter().any(|t| t.starts_with("TERMINATING") && t.contains(&preempted)), "{h:#?}");
    assert!(h.iter().any(|t| t.contains(&format!("requeued: preempted by job {high}"))), "{h:#?}");
    let shown = b.ok(&["show", &low.to_string()]);
    assert!(shown.contains(&preempted) && shown.contains("preemptible:"), "{shown}");

    cancel(&b, &[high]);
    let again = b.wait_state(low, "RUNNING");
    let starts = again["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "RUNNING").count();
    assert_eq!(starts, 2, "the victim ran again: {again:#}");
    cancel(&b, &[low]);
}

/// With `preemption = "cancel"` the victim ends CANCELLED; a job not marked preemptible is
/// never a victim.
#[test]
fn preemption_cancel_and_non_preemptible_jobs() {
    let b =
        Berth::up_with_config(&queue("preemption = \"cancel\"\npreempt_min_runtime = \"0s\""), &["--fake-gpus", "1"]);
    let keep = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    b.wait_state(keep, "RUNNING");
    let high = b.submit(&["--gpus", "1", "--priority", "5", "--", "sleep", "300"]);
    b.wait_job(high, "a pass", pending_reason);
    assert_eq!(b.state(keep), "RUNNING", "not preemptible");
    cancel(&b, &[keep]);
    b.wait_state(high, "RUNNING");

    cancel(&b, &[high]);
    b.wait_state(high, "CANCELLED");
    let low = b.submit(&["--gpus", "1", "--preemptible", "--", "sleep", "300"]);
    b.wait_state(low, "RUNNING");
    let higher = b.submit(&["--gpus", "1", "--priority", "9", "--", "sleep", "300"]);
    b.wait_state(higher, "RUNNING");
    let d = b.wait_state(low, "CANCELLED");
    assert!(d["job"]["reason"].as_str().unwrap().contains(&format!("cancelled: preempted by job {higher}")), "{d:#}");
    cancel(&b, &[higher]);
}

/// `GET /v1/queues` for everyone, `PUT` for admins only, bad values name the key, and an
/// admin's change survives a restart until the queue's config entry changes.
#[test]
fn queue_admin_api_and_config_precedence() {
    // Strict order named in the file: keys left out would take the recommended policy.
    let mut b = Berth::up_with_config(&queue("ordering = \"fifo\"\nhead_of_line = \"strict\""), &["--fake-gpus", "1"]);
    let bob = b.create_user("bob");
    let o = b.cli_as(&bob, &["queues", "-o", "json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let qs: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(qs[0]["name"], "default");
    assert_eq!(qs[0]["nodes"], 1);
    assert_eq!(qs[0]["policy"]["head_of_line"], "strict");

    let o = b.cli_as(&bob, &["admin", "queue", "set", "default", "--ordering", "lifo"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("admin"), "403 says why: {}", text(&o.stderr));

    let o = b.cli(&["admin", "queue", "set", "default", "--ordering", "random"]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("ordering `random`") && e.contains("fair-share") && e.contains("qssf"), "{e}");
    let o = b.cli(&["admin", "queue", "set", "default", "--default-time-limit", "soon"]);
    assert!(text(&o.stderr).contains("default_time_limit"), "{}", text(&o.stderr));

    b.ok(&["admin", "queue", "set", "default", "--head-of-line", "backfill", "--preemption", "requeue"]);
    b.ok(&["admin", "queue", "set", "cpu", "--scoring", "spread"]);
    let table = b.ok(&["queues"]);
    assert!(table.contains("backfill") && table.contains("requeue (after 10m)") && table.contains("cpu"), "{table}");

    b.restart();
    let qs = b.json(&["queues"]);
    assert_eq!(qs[0]["name"], "cpu", "queues created through the API are stored");
    assert_eq!(qs[1]["policy"]["head_of_line"], "backfill", "an admin's change survives a restart");
    assert_eq!(qs[1]["policy"]["ordering"], "fifo");

    b.write_config(&queue("ordering = \"lifo\"\nhead_of_line = \"strict\""));
    b.restart();
    let qs = b.json(&["queues"]);
    assert_eq!(qs[1]["policy"]["ordering"], "lifo", "a changed config entry wins");
    assert_eq!(qs[1]["policy"]["head_of_line"], "strict");
}

#[test]
fn a_bad_config_file_names_the_key() {
    let e = start_error(&queue("head_of_line = \"sometimes\""));
    assert!(e.contains("head_of_line `sometimes`") && e.contains("berth.toml"), "{e}");
}

/// What `berth manager` says when it refuses to start with this config file.
fn start_error(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("berth.toml");
    std::fs::write(&cfg, config).unwrap();
    let o = std::process::Command::new(support::BIN)
        .env("HOME", dir.path())
        .args(["manager", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "{config}: it started");
    text(&o.stderr)
}

/// `reservations = 2`: of three jobs blocked on two one-GPU nodes, the first two each hold a
/// reservation (a later reservation never takes an earlier one's node), shown as their
/// expected start by `berth ps`; the third has none.
#[test]
fn each_reserved_job_shows_its_expected_start() {
    let b = Berth::cluster(
        &queue("ordering = \"fifo\"\nreservations = 2"),
        &[("n1", &["--fake-gpus", "1"]), ("n2", &["--fake-gpus", "1"])],
    );
    assert_eq!(b.json(&["queues"])[0]["policy"]["reservations"], 2);
    assert!(b.ok(&["queues"]).contains("RESERVATIONS"));
    let holders: Vec<i64> = (0..2)
        .map(|_| b.submit(&["--gpus", "1", "--mem", "64MiB", "--time-limit", "1h", "--", "sleep", "300"]))
        .collect();
    for &h in &holders {
        b.wait_state(h, "RUNNING");
    }
    let blocked: Vec<i64> = (0..3)
        .map(|_| b.submit(&["--gpus", "1", "--mem", "64MiB", "--time-limit", "1h", "--", "sleep", "300"]))
        .collect();
    b.wait_job(blocked[1], "an expected start", |j| !j["job"]["expected_start"].is_null());
    b.wait_job(blocked[2], "a pass", pending_reason);
    let rows: Vec<Value> = blocked.iter().map(|&id| ps_row(&b, id)).collect();
    assert!(!rows[0]["expected_start"].is_null() && !rows[1]["expected_start"].is_null(), "{rows:#?}");
    assert!(rows[2]["expected_start"].is_null(), "only two reservations: {rows:#?}");
    let table = b.ok(&["ps"]);
    // The column by its characters (a reason may hold non-ASCII text).
    let header = table.lines().next().unwrap();
    let col = header[..header.find("EXPECTED START").unwrap_or_else(|| panic!("{table}"))].chars().count();
    let shown = |id: i64| {
        let line = table.lines().find(|l| l.split_whitespace().next() == Some(&id.to_string())).unwrap();
        line.chars().skip(col).collect::<String>().split_whitespace().next().unwrap_or("").to_string()
    };
    assert!(shown(blocked[0]).starts_with("in") && shown(blocked[1]).starts_with("in"), "{table}");
    assert_eq!(shown(blocked[2]), "-", "{table}");
    let mut all = blocked.clone();
    all.extend(holders);
    cancel(&b, &all);
}

/// Bad `reservations`, `ordering` and `las_thresholds` values fail the start, naming the key.
#[test]
fn bad_reservation_and_ordering_keys_fail_the_start() {
    for (body, want) in [
        ("reservations = 0", "reservations = 0"),
        ("ordering = \"sjf\"", "ordering `sjf`"),
        ("las_thresholds = [\"10h\", \"1h\"]", "las_thresholds [10h, 1h] are not ascending"),
    ] {
        let e = start_error(&queue(body));
        assert!(e.contains(want) && e.contains("queue `default`"), "{body}: {e}");
    }
}

/// Two runs of a job teach the manager how long it runs: a third of the same name shows an
/// expected run time, and runs past it to its end (only a time limit stops a job). A restarted
/// manager predicts from the finished jobs in its store.
#[test]
fn a_predicted_run_time_is_shown_and_never_stops_the_job() {
    let mut b = Berth::up_with_config(&queue("ordering = \"fifo\""), &[]);
    for _ in 0..2 {
        let id = b.submit(&["--name", "pred", "--mem", "64MiB", "--", "sleep", "1"]);
        b.wait_state(id, "SUCCEEDED");
    }
    let id = b.submit(&["--name", "pred", "--mem", "64MiB", "--time-limit", "1h", "--", "sleep", "8"]);
    let d = b.wait_state(id, "RUNNING");
    let predicted = d["job"]["expected_run_secs"].as_u64().unwrap_or_else(|| panic!("no prediction: {d:#}"));
    assert!(predicted < 3600, "capped by the limit: {predicted}");
    let shown = b.ok(&["show", &id.to_string()]);
    assert!(shown.contains("expected run time: ") && shown.contains("(predicted from earlier runs)"), "{shown}");
    let done = b.wait_state(id, "SUCCEEDED");
    assert_eq!(done["job"]["end_cause"], "exited", "{done:#}");
    let at = |k: &str| done["job"][k].as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_second();
    assert!(at("ended_at") - at("started_at") >= 8, "it ran its 8 s: {done:#}");

    b.restart();
    let id = b.submit(&["--name", "pred", "--mem", "64MiB", "--", "sleep", "300"]);
    let d = b.wait_state(id, "RUNNING");
    assert!(d["job"]["expected_run_secs"].as_u64().is_some(), "predicted after a restart: {d:#}");
    cancel(&b, &[id]);
}
