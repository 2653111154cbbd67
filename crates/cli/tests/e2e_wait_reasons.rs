//! How a waiting job's start is described, through the real binary (issue 41): behind a job
//! with no earlier runs, the reserved start says it only assumes the queue's default limit;
//! behind one whose kind ran before, it is the predicted start, marked as a prediction; and
//! `berth run` and `submit --wait` say the scheduler's reason while their job waits, never
//! the bare state. One fake GPU makes the node one job wide. No assertion measures time.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};

use serde_json::Value;
use support::{Berth, PATIENCE, base_cmd, text};

fn reason(j: &Value) -> String {
    j["job"]["pending_reason"]["message"].as_str().unwrap_or_default().to_string()
}

/// Waits until job `id` has a backfill reservation; returns its reason.
fn reserved(b: &Berth, id: i64) -> String {
    let j = b.wait_job(id, "a reservation", |j| reason(j).contains("reserved to start"));
    assert!(!j["job"]["expected_start"].is_null(), "a reserved job has an expected start: {j:#}");
    reason(&j)
}

fn cancel(b: &Berth, ids: &[i64]) {
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    let mut args = vec!["cancel"];
    args.extend(ids.iter().map(String::as_str));
    b.ok(&args);
}

#[test]
fn a_reserved_start_behind_a_short_job_is_its_prediction_not_the_default_limit() {
    let b = Berth::up(&["--fake-gpus", "1"]);
    // No earlier runs: the running job's end is only the queue's 1 h default, and the reason
    // says so rather than promise a start in 59 minutes.
    let holder = b.submit(&["--gpus", "1", "--name", "short", "--", "sleep", "300"]);
    b.wait_state(holder, "RUNNING");
    let waiter = b.submit(&["--gpus", "1", "--", "true"]);
    let r = reserved(&b, waiter);
    assert!(
        r.contains("assumes the queue's default limit, 1h, for jobs with no time limit and no earlier runs"),
        "{r}"
    );
    assert!(!r.contains("predicted"), "{r}");
    // Cancelled runs say nothing about run times: still no history.
    cancel(&b, &[holder, waiter]);
    b.wait_state(waiter, "CANCELLED");

    // One run that ended by itself: the job of its kind after it has a predicted run time
    // (even one submitted before that run ended: it is predicted again as it starts), and
    // the start of the job behind it is that prediction.
    let first = b.submit(&["--gpus", "1", "--name", "short", "--", "sleep", "1"]);
    let holder = b.submit(&["--gpus", "1", "--name", "short", "--", "sleep", "300"]);
    b.wait_state(first, "SUCCEEDED");
    let running = b.wait_state(holder, "RUNNING");
    assert!(!running["job"]["expected_run_secs"].is_null(), "predicted from the earlier run: {running:#}");
    let waiter = b.submit(&["--gpus", "1", "--", "true"]);
    let r = reserved(&b, waiter);
    assert!(r.contains("reserved to start in ~") && r.contains("(backfill; predicted from earlier runs)"), "{r}");
    assert!(!r.contains("default limit"), "{r}");
    let shown = b.ok(&["show", &waiter.to_string()]);
    assert!(shown.contains("predicted from earlier runs") && shown.contains("expected:"), "{shown}");
    cancel(&b, &[holder, waiter]);
}

/// `berth ARGS` with its stderr read line by line into a channel as it comes.
fn spawn(b: &Berth, args: &[&str]) -> (Child, Receiver<String>) {
    let mut child = base_cmd(b.home.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth");
    let (tx, rx) = channel();
    let stderr = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// The lines read until one holds `want`, which is the last.
fn lines_until(rx: &Receiver<String>, want: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(PATIENCE) {
            Ok(line) => {
                let done = line.contains(want);
                seen.push(line);
                if done {
                    return seen;
                }
            }
            Err(_) => panic!("no stderr line with {want:?}; saw {seen:#?}"),
        }
    }
}

/// Regression (issue 41): `berth run` printed `berth: job 42 is waiting: PENDING` for as
/// long as its job waited, without the reason the README promises (it, and `submit --wait`,
/// read the last transition's reason instead of the scheduler's).
#[test]
fn berth_run_and_submit_wait_say_why_their_job_waits() {
    let b = Berth::up(&["--fake-gpus", "1"]);
    let holder = b.submit(&["--gpus", "1", "--", "sleep", "300"]);
    b.wait_state(holder, "RUNNING");
    let (run, run_err) = spawn(&b, &["run", "--gpus", "1", "--", "echo", "ran"]);
    let (submit, submit_err) = spawn(&b, &["submit", "--wait", "--gpus", "1", "--", "echo", "waited"]);
    // `run` keeps its line up to date: it reaches the reservation whatever it saw first.
    let seen = lines_until(&run_err, "reserved to start");
    assert!(seen.last().is_some_and(|l| l.contains("is waiting: ")), "{seen:#?}");
    assert!(!seen.iter().any(|l| l.ends_with("PENDING") || l.ends_with("submitted")), "{seen:#?}");
    // `submit --wait` says it once, a second in: the reason of the pass that saw the job.
    let seen = lines_until(&submit_err, "queued and waiting");
    let said = seen.last().expect("a line");
    assert!(
        ["resources: ", "backfill: ", "queued: "].iter().any(|k| said.contains(&format!("waiting: {k}"))),
        "{said}"
    );
    cancel(&b, &[holder]);
    for (name, child, out) in [("run", run, "ran"), ("submit --wait", submit, "waited")] {
        let o = child.wait_with_output().expect("berth ends");
        assert!(o.status.success(), "{name}: {}", o.status);
        assert!(text(&o.stdout).contains(out), "{name}: {}", text(&o.stdout));
    }
}
