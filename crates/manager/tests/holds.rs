//! Holds by people (issue 48: `sbatch --hold`, `scontrol hold/uhold/release`) and the signal
//! that ended a job (issue 43), with a fake agent over the real WebSocket: a held job is never
//! started while the scheduler starts the jobs behind it, keeps its hold across a restart, and
//! runs once released; who may hold and release what; a kernel killed by a signal ends a job
//! whose view carries that signal.

mod common;

use std::time::Duration;

use berth_model::protocol::{AgentMessage, KernelEvent, KernelOutcome, ManagerMessage};
use berth_model::{JobSpec, Topology};
use common::*;
use serde_json::{Value, json};

fn node() -> Topology {
    Topology::synthetic(1, 8, 16 << 30, 0)
}

fn held(spec: JobSpec) -> JobSpec {
    JobSpec { hold: true, ..spec }
}

async fn reason(c: &Client, id: i64) -> Value {
    c.job(id).await["job"]["pending_reason"]["kind"].clone()
}

#[tokio::test]
async fn a_held_job_is_skipped_by_the_scheduler_survives_a_restart_and_runs_once_released() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let first = e.admin.submit_ok(&held(spec(1.0, 0.0))).await;
    assert_eq!(reason(&e.admin, first).await, "held-user", "held from its submit, before any pass");
    let behind = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    assert_eq!(start_key(&a.expect_start().await).job_id, behind, "the pass skips the held job");
    assert_eq!(e.admin.state(first).await, "PENDING");
    assert_eq!(reason(&e.admin, first).await, "held-user");
    drop(a);
    let dir = e.dir;
    e.m.shutdown().await;

    let m = berth_manager::start(config(dir.path(), Duration::from_secs(60))).await.unwrap();
    let admin = Client::new(&m.url, &e.admin.token);
    let mut a = Agent::connect(&m, "n1", node(), vec![]).await;
    assert_eq!(reason(&admin, first).await, "held-user", "the hold is stored");
    let (s, v) = admin.post(&format!("/v1/jobs/{first}/release"), json!({})).await;
    assert_eq!((s, &v), (200, &json!({"id": first, "jobs": [first]})));
    let released = |m: &ManagerMessage| matches!(m, ManagerMessage::StartKernel { key, .. } if key.job_id == first);
    a.expect("the released job's start", released).await;
    let (s, v) = admin.post(&format!("/v1/jobs/{first}/hold"), json!({})).await;
    assert_eq!((s, v["reason"].as_str()), (409, Some("job_not_pending")), "{v}");
    m.shutdown().await;
}

#[tokio::test]
async fn owners_hold_with_a_user_hold_and_only_admins_release_an_admin_hold() {
    let e = start().await;
    let (_, bob) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    let (_, carol) = e.admin.post("/v1/admin/users", json!({"name": "carol"})).await;
    let bob = Client::new(&e.m.url, bob["token"].as_str().unwrap());
    let carol = Client::new(&e.m.url, carol["token"].as_str().unwrap());
    // No node: every job stays pending.
    let id = bob.submit_ok(&JobSpec::command(["x"])).await;
    let (s, v) = bob.post(&format!("/v1/jobs/{id}/hold"), json!({})).await;
    assert_eq!((s, &v), (200, &json!({"id": id, "hold": "user", "jobs": [id]})));
    assert_eq!(reason(&bob, id).await, "held-user");
    assert_eq!(carol.post(&format!("/v1/jobs/{id}/release"), json!({})).await.0, 404, "not hers: missing");
    let (s, _) = bob.post(&format!("/v1/jobs/{id}/hold"), json!({"hold": "admin"})).await;
    assert_eq!(s, 403, "a user cannot put an admin hold");
    let (s, v) = e.admin.post(&format!("/v1/jobs/{id}/hold"), json!({})).await;
    assert_eq!((s, v["hold"].as_str()), (200, Some("admin")), "an admin's hold by default: {v}");
    assert_eq!(reason(&bob, id).await, "held-admin");
    let (s, v) = bob.post(&format!("/v1/jobs/{id}/release"), json!({})).await;
    assert_eq!(s, 403, "{v}");
    let (s, _) = bob.post(&format!("/v1/jobs/{id}/hold"), json!({})).await;
    assert_eq!((s, reason(&bob, id).await), (200, json!("held-admin")), "a user's hold never weakens an admin's");
    let (s, v) = e.admin.post(&format!("/v1/jobs/{id}/release"), json!({})).await;
    assert_eq!((s, &v["jobs"]), (200, &json!([id])));
    let (s, v) = bob.post(&format!("/v1/jobs/{id}/release"), json!({})).await;
    assert_eq!((s, &v["jobs"]), (200, &json!([])), "released again: nothing to do");
    bob.post(&format!("/v1/jobs/{id}/cancel"), json!({})).await;
    let (s, v) = bob.post(&format!("/v1/jobs/{id}/hold"), json!({})).await;
    assert_eq!((s, v["reason"].as_str()), (409, Some("job_ended")), "{v}");
    e.m.shutdown().await;
}

#[tokio::test]
async fn a_kernel_killed_by_a_signal_ends_a_job_that_carries_the_signal() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let id = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let key = start_key(&a.expect_start().await);
    a.send(AgentMessage::Kernel { key, event: KernelEvent::Started { pid: 7, at: jiff::Timestamp::now() } }).await;
    let end = KernelEvent::Finished {
        outcome: KernelOutcome::Failed,
        exit_code: Some(137),
        message: "killed by signal 9 (SIGKILL)".into(),
        at: jiff::Timestamp::now(),
        usage: None,
        signal: Some(9),
    };
    a.send(AgentMessage::Kernel { key, event: end }).await;
    let j = e.admin.wait_state(id, "FAILED").await;
    assert_eq!((&j["job"]["exit_code"], &j["job"]["end_signal"]), (&json!(137), &json!(9)));
    e.m.shutdown().await;
}

/// Regression: an array held from its submit was shown with its spec (`3-4%1`) instead of the
/// tasks it still has to make, so `squeue` listed it as nothing at all.
#[tokio::test]
async fn a_held_array_is_shown_with_the_tasks_it_has_still_to_make() {
    let e = start().await;
    let array = JobSpec { array: Some("3-4%1".parse().unwrap()), ..held(JobSpec::command(["x"])) };
    let id = e.admin.submit_ok(&array).await;
    let job = e.admin.job(id).await;
    // Two indices read `3,4` here; `squeue` prints them as Slurm does (`1_[3-4%1]`).
    assert_eq!(job["job"]["array"], "[3,4%1]", "{job}");
    assert_eq!(job["job"]["pending_reason"]["kind"], "held-user");
    e.m.shutdown().await;
}
