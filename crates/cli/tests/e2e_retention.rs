//! Retention through the real binary (issue 18): `berth admin store purge --older-than`
//! archives the finished jobs that ended before the cut: they leave `ps -a`, `show` says they
//! were archived, `berth usage` counts them exactly as before, unfinished jobs stay, and new
//! job ids count on past the archived ones. `--retain` and `--older-than` refuse zero and
//! nonsense as usage mistakes (exit 2), and only admins may purge.

mod support;

use std::time::Duration;

use support::{Berth, base_cmd, text};

#[test]
fn purged_jobs_leave_the_lists_and_stay_in_the_accounting() {
    let b = Berth::up(&[]);
    let bob = b.create_user("bob");
    let mut done: Vec<i64> = (0..3).map(|_| b.submit(&["--cpus", "2", "--", "true"])).collect();
    for id in &done {
        b.wait_state(*id, "SUCCEEDED");
    }
    let failed = b.submit(&["--", "sh", "-c", "exit 3"]);
    b.wait_state(failed, "FAILED");
    done.push(failed);
    // Bob's job runs through the purge: unfinished, it stays.
    let running = b.submit_as(&bob, &["--", "sleep", "300"]);
    b.wait_state(running, "RUNNING");
    let usage = |b: &Berth| {
        let lines = b.json(&["usage", "--since", "1h"]);
        lines.as_array().unwrap().iter().find(|l| l["name"] != "bob").cloned().expect("the admin's line")
    };
    let before = usage(&b);
    assert_eq!((before["jobs"].as_u64(), before["succeeded"].as_u64()), (Some(4), Some(3)), "{before}");

    // Only admins purge, and zero or nonsense is a usage mistake.
    let o = b.cli_as(&bob, &["admin", "store", "purge", "--older-than", "1s"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    for bad in ["0s", "soon", "-1d"] {
        let o = b.cli(&["admin", "store", "purge", "--older-than", bad]);
        assert_eq!(o.status.code(), Some(2), "--older-than {bad}: {}", text(&o.stderr));
    }
    assert_eq!(b.listed_ids().len(), 5, "nothing was archived yet");

    // Every finished job ended more than a second ago once this has slept.
    std::thread::sleep(Duration::from_millis(1100));
    let out = b.ok(&["admin", "store", "purge", "--older-than", "1s"]);
    assert!(out.contains("archived 4 finished jobs"), "{out}");
    assert_eq!(b.listed_ids(), vec![running], "ps -a lists only the hot jobs");
    let o = b.cli(&["show", &failed.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains(&format!("job {failed} was archived (FAILED, exit code 3")), "{err}");
    assert!(err.contains("its usage is kept in the accounting"), "{err}");
    // A job bob may not see still answers as if it did not exist.
    let o = b.cli_as(&bob, &["show", &done[0].to_string()]);
    let err = text(&o.stderr);
    assert!(err.contains("not found") && !err.contains("archived"), "{err}");

    assert_eq!(usage(&b), before, "the usage report counts archived jobs as before");
    let audit = b.ok(&["admin", "audit"]);
    assert!(audit.contains("store.purge"), "{audit}");
    let again = b.ok(&["admin", "store", "purge", "--older-than", "1s"]);
    assert!(again.contains("archived 0 finished jobs"), "a second pass moves nothing: {again}");

    let next = b.submit(&["--", "true"]);
    assert!(next > running && done.iter().all(|id| next > *id), "job {next} after archived {done:?}");
}

/// Schemathesis found it: a submit sent again with its Idempotency-Key after the job it made
/// was archived answered 500 `internal error: job 1 not found`.
#[tokio::test(flavor = "current_thread")]
async fn a_submit_sent_again_after_its_job_was_archived_answers_with_that_job() {
    let b = Berth::up(&[]);
    let token = b.admin_token();
    let (status, first) = keyed_submit(&b, &token).await;
    assert_eq!(status, 201, "{first}");
    let id = first["id"].as_i64().unwrap();
    b.wait_state(id, "SUCCEEDED");
    std::thread::sleep(Duration::from_millis(1100));
    let out = b.ok(&["admin", "store", "purge", "--older-than", "1s"]);
    assert!(out.contains("archived 1 finished jobs"), "{out}");
    let (status, again) = keyed_submit(&b, &token).await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(again["id"].as_i64(), Some(id), "the same job, not a new one: {again}");
    assert_eq!(b.listed_ids(), Vec::<i64>::new(), "nothing new was submitted");
}

/// `POST /v1/jobs` of `true` with the Idempotency-Key `once-only`: the status and the body.
async fn keyed_submit(b: &Berth, token: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"spec": {"command": ["true"]}});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/jobs", b.url))
        .bearer_auth(token)
        .header("Idempotency-Key", "once-only")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[test]
fn retain_refuses_zero_nonsense_and_periods_under_an_hour() {
    let home = tempfile::tempdir().unwrap();
    for (cmd, bad) in [("manager", "0"), ("manager", "180"), ("up", "soon"), ("up", "30m")] {
        let o = base_cmd(home.path()).args([cmd, "--retain", bad, "--listen", "127.0.0.1:0"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{cmd} --retain {bad}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("--retain"), "{}", text(&o.stderr));
    }
    let o = base_cmd(home.path()).args(["manager", "--retain", "180"]).output().unwrap();
    assert!(text(&o.stderr).contains("at least 1h"), "a bare number is seconds: {}", text(&o.stderr));
    let o = base_cmd(home.path()).env("BERTH_RETAIN", "0s").args(["manager"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
