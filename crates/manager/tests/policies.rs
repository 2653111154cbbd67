//! Queue policies at the manager (issue 3): the queue API, preemption driven through a fake
//! agent over the real WebSocket, and fair-share usage that survives a restart.

mod common;

use std::time::Duration;

use berth_manager::ManagerConfig;
use berth_model::Topology;
use berth_model::protocol::{AgentMessage, KernelEvent, KernelOutcome, KernelReport, ManagerMessage};
use berth_store::{SqliteStore, Store};
use common::*;
use serde_json::json;

async fn start_config(toml: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.toml");
    std::fs::write(&path, toml).unwrap();
    start_in(dir, |c| ManagerConfig { config_file: Some(path), ..c }, Clock::system()).await
}

/// Scheduling passes that had pending jobs so far (`/metrics`).
async fn passes(url: &str) -> u64 {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix("berth_scheduler_pass_seconds_count "));
    line.map_or(0, |n| n.trim().parse().unwrap())
}

fn started() -> KernelEvent {
    KernelEvent::Started { pid: 42, at: jiff::Timestamp::now() }
}

#[tokio::test]
async fn queue_api_lists_validates_and_is_admin_only() {
    let e = start().await;
    let (s, v) = e.admin.get("/v1/queues").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v[0]["name"], "default");
    // The default queue has the recommended policy.
    let recommended = berth_manager::config::to_policy(&berth_sched::QueueConfig::recommended("default"));
    assert_eq!(v[0]["policy"], serde_json::to_value(&recommended).unwrap());
    assert_eq!(v[0]["policy"]["head_of_line"], "backfill", "{v}");
    assert_eq!(v[0]["policy"]["preemption"], "off");

    let (s, u) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    assert_eq!(s, 201, "{u}");
    let bob = Client::new(&e.m.url, u["token"].as_str().unwrap());
    let (s, _) = bob.get("/v1/queues").await;
    assert_eq!(s, 200, "everyone may list queues");
    let (s, v) = bob.put("/v1/queues/default", json!({"ordering": "lifo"})).await;
    assert_eq!(s, 403, "{v}");

    let (s, v) = e.admin.put("/v1/queues/default", json!({"ordering": "random"})).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("ordering `random`"), "{v}");
    let (s, v) = e.admin.put("/v1/queues/default", json!({"preempt_min_runtime": "later"})).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("preempt_min_runtime"), "{v}");
    let (s, v) = e.admin.put("/v1/queues/default", json!({"reservations": 0})).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().starts_with("reservations = 0"), "{v}");
    let (s, v) = e.admin.put("/v1/queues/default", json!({"las_thresholds": ["10h", "1h"]})).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("not ascending"), "{v}");
    let body = json!({"ordering": "las", "reservations": 2, "reserve_after": "off", "las_thresholds": ["2h", "20h"]});
    let (s, v) = e.admin.put("/v1/queues/las", body).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!((v["policy"]["ordering"].as_str(), v["policy"]["reservations"].as_u64()), (Some("las"), Some(2)));
    assert!(v["policy"]["reserve_after_secs"].is_null(), "{v}");
    assert_eq!(v["policy"]["las_thresholds_secs"], json!([7200, 72_000]));
    let (s, v) = e.admin.put("/v1/queues/default", json!({"orderin": "lifo"})).await;
    assert_eq!(s, 400, "unknown keys are refused: {v}");
    let (s, v) = e.admin.put("/v1/queues/a%20b", json!({})).await;
    assert_eq!(s, 400, "{v}");

    let (s, v) = e.admin.put("/v1/queues/default", json!({"head_of_line": "backfill", "scoring": "spread"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["policy"]["head_of_line"], "backfill");
    assert_eq!(v["policy"]["ordering"], recommended.ordering, "keys left out keep their value");
    let (s, v) = e.admin.put("/v1/queues/gpu", json!({"preemption": "cancel", "default_time_limit": "2h"})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["policy"]["default_time_limit_secs"], 7200);
    let mut sp = spec(1.0, 0.0);
    sp.queue = Some("gpu".into());
    e.admin.submit_ok(&sp).await;
    let (_, v) = e.admin.get("/v1/queues").await;
    assert_eq!(v[1]["name"], "gpu");
    assert_eq!(v[1]["pending"], 1);
    assert_eq!(v[2]["name"], "las");

    let (_, api) = e.admin.get("/openapi.json").await;
    assert!(api["paths"]["/v1/queues"]["get"].is_object(), "openapi lists GET /v1/queues");
    assert!(api["paths"]["/v1/queues/{name}"]["put"].is_object(), "openapi lists PUT /v1/queues/{{name}}");
    e.m.shutdown().await;
}

/// A preemptible job on the only GPU is stopped for a higher-priority one: TERMINATING with
/// the reason first, then `StopKernel`; once the agent reports it stopped, it is PENDING
/// again (new attempt) and the preemptor starts.
#[tokio::test]
async fn preemption_stops_the_victim_then_requeues_it() {
    let e =
        start_config("[[queue]]\nname = \"default\"\npreemption = \"requeue\"\npreempt_min_runtime = \"0s\"\n").await;
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 4, 16 << 30, 1), vec![]).await;
    let mut low = spec(1.0, 1.0);
    low.preemptible = true;
    let low_id = e.admin.submit_ok(&low).await;
    let s = a.expect_start().await;
    a.send(AgentMessage::Kernel { key: start_key(&s), event: started() }).await;
    e.admin.wait_state(low_id, "RUNNING").await;

    let mut high = spec(1.0, 1.0);
    high.priority = 5;
    let high_id = e.admin.submit_ok(&high).await;
    let stop = a.expect("stop-kernel", |m| matches!(m, ManagerMessage::StopKernel { .. })).await;
    let ManagerMessage::StopKernel { key, .. } = stop else { unreachable!() };
    assert_eq!(key, start_key(&s));
    let d = e.admin.job(low_id).await;
    assert_eq!(d["job"]["state"], "TERMINATING");
    assert_eq!(d["job"]["reason"], format!("preempted by job {high_id} (priority 5)"));

    let end = KernelEvent::Finished {
        outcome: KernelOutcome::Stopped,
        exit_code: Some(143),
        message: "stopped".into(),
        at: jiff::Timestamp::now(),
        usage: None,
        signal: None,
    };
    a.send(AgentMessage::Kernel { key, event: end }).await;
    let s2 = a.expect_start().await;
    assert_eq!(start_key(&s2).job_id, high_id, "the preemptor starts next");
    let d = e.admin.job(low_id).await;
    assert_eq!(d["job"]["state"], "PENDING");
    assert_eq!(d["job"]["reason"], format!("requeued: preempted by job {high_id}"));
    // A later pass must not pick another victim or stop the job again: two passes, each
    // asked for by a queue update (the first may be the one that started the preemptor).
    for _ in 0..2 {
        let before = passes(&e.m.url).await;
        assert_eq!(e.admin.put("/v1/queues/default", json!({"preemption": "requeue"})).await.0, 200);
        eventually("a scheduling pass", || async { (passes(&e.m.url).await > before).then_some(()) }).await;
    }
    let d = e.admin.job(low_id).await;
    let stops = d["transitions"].as_array().unwrap().iter().filter(|t| t["to"] == "TERMINATING").count();
    assert_eq!(stops, 1);
    e.m.shutdown().await;
}

/// A finished job's resource-time is added to its user's usage, in the store.
#[tokio::test]
async fn usage_is_recorded_when_a_job_ends() {
    let e = start_manual().await;
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 4, 16 << 30, 1), vec![]).await;
    let id = e.admin.submit_ok(&spec(2.0, 1.0)).await;
    let s = a.expect_start().await;
    a.send(AgentMessage::Kernel { key: start_key(&s), event: started() }).await;
    e.admin.wait_state(id, "RUNNING").await;
    e.clock.advance(Duration::from_secs(10));
    let end = KernelEvent::Finished {
        outcome: KernelOutcome::Succeeded,
        exit_code: Some(0),
        message: String::new(),
        at: jiff::Timestamp::now(),
        usage: None,
        signal: None,
    };
    a.send(AgentMessage::Kernel { key: start_key(&s), event: end }).await;
    e.admin.wait_state(id, "SUCCEEDED").await;
    let Env { dir, m, .. } = e;
    m.shutdown().await;
    let store = SqliteStore::open(dir.path().join("berth.db")).await.unwrap();
    let rows = store.usage().await.unwrap();
    let user = rows.iter().find(|r| r.kind == "user" && r.name == "alice").expect("usage of alice");
    // (2 CPUs + 10 per GPU) for the 10 s the clock moved while it ran.
    assert!((user.value - 120.0).abs() < 1e-9, "{user:?}");
    assert!(
        rows.iter().any(|r| r.kind == "project" && r.name == "user:alice"),
        "a job without a project is charged to its user's own account: {rows:?}"
    );
    store.close().await;
}

/// Who preempted a stopping job, and what then happens to it, are typed in the store: a
/// restarted manager finishes the preemption as it was decided, even after the queue's policy
/// changed, and a cancel keeps who asked. (Before, both were read back out of the reason
/// text, and the action came from the queue's policy at restart.)
#[tokio::test]
async fn a_preemption_and_a_cancel_in_progress_survive_a_restart_typed() {
    let toml = |action: &str| {
        format!("[[queue]]\nname = \"default\"\npreemption = \"{action}\"\npreempt_min_runtime = \"0s\"\n")
    };
    let e = start_config(&toml("requeue")).await;
    let node = || Topology::synthetic(1, 4, 16 << 30, 2);
    let mut a = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let mut low = spec(1.0, 1.0);
    low.preemptible = true;
    let victim = e.admin.submit_ok(&low).await;
    let s1 = a.expect_start().await;
    let cancelled = e.admin.submit_ok(&spec(1.0, 1.0)).await;
    let s2 = a.expect_start().await;
    for s in [&s1, &s2] {
        a.send(AgentMessage::Kernel { key: start_key(s), event: started() }).await;
    }
    e.admin.wait_state(cancelled, "RUNNING").await;
    let (status, _) = e.admin.post(&format!("/v1/jobs/{cancelled}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    let mut high = spec(1.0, 1.0);
    high.priority = 5;
    let boss = e.admin.submit_ok(&high).await;
    let d = e.admin.wait_state(victim, "TERMINATING").await;
    assert_eq!(d["job"]["stop"], json!({"kind": "preempted", "by_job": boss, "action": "requeue"}));
    let d = e.admin.job(cancelled).await;
    assert_eq!(d["job"]["stop"], json!({"kind": "cancelled", "by": "alice"}));

    // The manager goes down while both stop; the queue's file entry now says `cancel`.
    drop(a);
    e.m.shutdown().await;
    let path = e.dir.path().join("berth.toml");
    std::fs::write(&path, toml("cancel")).unwrap();
    let mut c = config(e.dir.path(), Duration::from_secs(60));
    c.config_file = Some(path);
    let m = berth_manager::start(c).await.unwrap();
    let admin = Client::new(&m.url, &e.admin.token);
    let running = [&s1, &s2].map(|s| KernelReport { key: start_key(s), last: started() }).to_vec();
    let mut a = Agent::connect(&m, "n1", node(), running).await;
    let stopped = KernelEvent::Finished {
        outcome: KernelOutcome::Stopped,
        exit_code: Some(143),
        message: String::new(),
        at: jiff::Timestamp::now(),
        usage: None,
        signal: None,
    };
    for s in [&s1, &s2] {
        a.send(AgentMessage::Kernel { key: start_key(s), event: stopped.clone() }).await;
    }
    // Requeued as decided (it may be scheduled again at once, beside the boss: look at its
    // history, not its state).
    let requeued = format!("requeued: preempted by job {boss}");
    let d = eventually("the victim's requeue", || async {
        let d = admin.job(victim).await;
        let ts = d["transitions"].as_array().cloned().unwrap_or_default();
        // The row and the history are two reads: wait until the row has caught up too.
        let requeue = ts.iter().any(|t| t["to"] == "PENDING" && t["reason"] == requeued.as_str());
        (requeue && d["job"]["state"] != "TERMINATING").then_some(d)
    })
    .await;
    assert_eq!(d["job"]["stop"], json!(null), "a new attempt has no stop cause: {d}");
    assert_ne!(d["job"]["state"], "CANCELLED", "{d}");
    let d = admin.wait_state(cancelled, "CANCELLED").await;
    assert_eq!(d["job"]["reason"], "cancelled by alice");
    assert_eq!(d["job"]["stop"], json!({"kind": "cancelled", "by": "alice"}));
    assert_eq!(d["job"]["end_cause"], "cancelled");
    m.shutdown().await;
}
