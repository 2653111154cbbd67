//! Agent-hub integration tests: a fake agent over the real WebSocket drives kernel events.

mod common;

use std::time::Duration;

use berth_model::protocol::{AgentMessage, KernelEvent, KernelKey, KernelOutcome, KernelReport, ManagerMessage};
use berth_model::{PendingKind, Topology};
use common::*;
use serde_json::json;

fn gpu_node() -> Topology {
    Topology::synthetic(1, 4, 16 << 30, 1)
}

fn started() -> KernelEvent {
    KernelEvent::Started { pid: 42, at: jiff::Timestamp::now() }
}

fn finished(outcome: KernelOutcome, code: Option<i32>, message: &str) -> KernelEvent {
    KernelEvent::Finished {
        outcome,
        exit_code: code,
        message: message.into(),
        at: jiff::Timestamp::now(),
        usage: None,
        signal: None,
    }
}

/// Backend.AI's demo: one GPU, three half-GPU jobs; two run, the third waits for resources;
/// cancelling a running one lets the waiting one start.
#[tokio::test]
async fn fractional_gpu_demo() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let ids = [
        e.admin.submit_ok(&spec(1.0, 0.5)).await,
        e.admin.submit_ok(&spec(1.0, 0.5)).await,
        e.admin.submit_ok(&spec(1.0, 0.5)).await,
    ];
    let s1 = a.expect_start().await;
    let s2 = a.expect_start().await;
    let mut started_ids = vec![start_key(&s1).job_id, start_key(&s2).job_id];
    started_ids.sort();
    assert_eq!(started_ids, vec![ids[0], ids[1]]);
    if let ManagerMessage::StartKernel { env, binding, .. } = &s1 {
        assert_eq!(env["BERTH_JOB_ID"], ids[0].to_string());
        assert_eq!(env["BERTH_USER"], "alice");
        assert_eq!(env["BERTH_CLUSTER_ROLE"], "main");
        assert_eq!(env["BERTH_CLUSTER_SIZE"], "1");
        assert_eq!(env["BERTH_KERNEL_INDEX"], "0");
        assert_eq!(binding.node, "n1");
        assert_eq!(binding.gpus.iter().map(|g| g.milli).sum::<u64>(), 500);
    }
    for s in [&s1, &s2] {
        a.send(AgentMessage::Kernel { key: start_key(s), event: started() }).await;
    }
    e.admin.wait_state(ids[0], "RUNNING").await;
    e.admin.wait_state(ids[1], "RUNNING").await;
    let third = eventually("a resources reason", || async {
        let j = e.admin.job(ids[2]).await;
        (j["job"]["pending_reason"]["kind"] == "resources").then_some(j)
    })
    .await;
    assert_eq!(third["job"]["state"], "PENDING");
    assert_eq!(third["job"]["position"], 1);
    let (_, nodes) = e.admin.get("/v1/nodes").await;
    assert_eq!(nodes[0]["state"], "ready");
    assert_eq!(nodes[0]["gpus"][0]["used_milli"], 1000);
    assert_eq!(nodes[0]["running_jobs"], 2);

    let (s, v) = e.admin.post(&format!("/v1/jobs/{}/cancel", ids[0]), json!({})).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("TERMINATING")));
    let stop = a.expect("stop-kernel", |m| matches!(m, ManagerMessage::StopKernel { .. })).await;
    let ManagerMessage::StopKernel { key, .. } = stop else { unreachable!() };
    assert_eq!(key, start_key(&s1));
    a.send(AgentMessage::Kernel { key, event: finished(KernelOutcome::Stopped, Some(143), "stopped") }).await;
    let forget = a.expect("forget", |m| matches!(m, ManagerMessage::Forget { .. })).await;
    assert_eq!(forget, ManagerMessage::Forget { key });
    let s3 = a.expect_start().await;
    assert_eq!(start_key(&s3).job_id, ids[2]);
    let d = e.admin.wait_state(ids[0], "CANCELLED").await;
    assert_eq!(d["job"]["reason"], "cancelled by alice");
    let states: Vec<_> = d["transitions"].as_array().unwrap().iter().map(|t| t["to"].clone()).collect();
    assert_eq!(
        states,
        vec![json!("PENDING"), json!("SCHEDULED"), json!("RUNNING"), json!("TERMINATING"), json!("CANCELLED")]
    );
    e.m.shutdown().await;
}

#[tokio::test]
async fn infeasible_job_is_422_and_outcomes_map_to_states() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let (s, v) = e.admin.submit(&spec(1.0, 2.0)).await;
    assert_eq!(s, 422, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("no node can ever run this: "), "{v}");
    assert!(e.admin.list("?all=true").await.is_empty());

    let cases = [
        (KernelOutcome::Succeeded, Some(0), "", "SUCCEEDED", "exit code 0"),
        (KernelOutcome::Failed, Some(3), "", "FAILED", "exit code 3"),
        (KernelOutcome::Failed, Some(137), "killed by signal 9", "FAILED", "killed by signal 9"),
        (KernelOutcome::OutOfMemory, Some(137), "oom", "FAILED", "out of memory"),
        (KernelOutcome::Timeout, Some(143), "time limit 10s reached", "TIMEOUT", "time limit 10s reached"),
        (KernelOutcome::LaunchFailed, None, "no such program", "FAILED", "launch failed: no such program"),
    ];
    for (outcome, code, msg, state, reason) in cases {
        let id = e.admin.submit_ok(&spec(4.0, 1.0)).await;
        let key = start_key(&a.expect_start().await);
        assert_eq!(key.job_id, id);
        a.send(AgentMessage::Kernel { key, event: started() }).await;
        a.send(AgentMessage::Kernel { key, event: finished(outcome, code, msg) }).await;
        // A duplicate report is harmless.
        a.send(AgentMessage::Kernel { key, event: finished(outcome, code, msg) }).await;
        let d = e.admin.wait_state(id, state).await;
        assert_eq!(d["job"]["reason"], reason);
        assert_eq!(d["job"]["exit_code"], json!(code));
        assert_eq!(d["kernels"][0]["exit_code"], json!(code));
    }
    let (_, nodes) = e.admin.get("/v1/nodes").await;
    assert_eq!((nodes[0]["cpus_used"].as_u64(), nodes[0]["running_jobs"].as_u64()), (Some(0), Some(0)));
    e.m.shutdown().await;
}

#[tokio::test]
async fn reconcile_after_reconnect() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let running = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let scheduled = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let done = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let mut keys = std::collections::HashMap::new();
    for _ in 0..3 {
        let k = start_key(&a.expect_start().await);
        keys.insert(k.job_id, k);
    }
    a.send(AgentMessage::Kernel { key: keys[&running], event: started() }).await;
    a.send(AgentMessage::Kernel { key: keys[&done], event: started() }).await;
    e.admin.wait_state(running, "RUNNING").await;
    e.admin.wait_state(done, "RUNNING").await;
    drop(a);

    // The agent comes back: it lost `running`, never got `scheduled`, saw `done` finish, and
    // runs a kernel the manager never asked for.
    let stray = KernelKey { job_id: 99, attempt: 0, index: 0 };
    let old = KernelKey { job_id: 98, attempt: 0, index: 0 };
    let reports = vec![
        KernelReport { key: keys[&done], last: finished(KernelOutcome::Succeeded, Some(0), "") },
        KernelReport { key: stray, last: started() },
        KernelReport { key: old, last: finished(KernelOutcome::Failed, Some(1), "") },
    ];
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), reports).await;
    let mut saw = (false, false, false, false);
    while !(saw.0 && saw.1 && saw.2 && saw.3) {
        match a.recv().await {
            ManagerMessage::StopKernel { key, .. } if key == stray => saw.0 = true,
            ManagerMessage::Forget { key } if key == old => saw.1 = true,
            ManagerMessage::StartKernel { key, .. } if key == keys[&scheduled] => saw.2 = true,
            ManagerMessage::Forget { key } if key == keys[&done] => saw.3 = true,
            m => panic!("unexpected {m:?}"),
        }
    }
    let d = e.admin.wait_state(running, "FAILED").await;
    assert_eq!(d["job"]["reason"], "kernel lost: not running on n1 after agent reconnect");
    e.admin.wait_state(done, "SUCCEEDED").await;
    assert_eq!(e.admin.state(scheduled).await, "SCHEDULED");
    a.send(AgentMessage::Kernel { key: keys[&scheduled], event: started() }).await;
    e.admin.wait_state(scheduled, "RUNNING").await;
    e.m.shutdown().await;
}

#[tokio::test]
async fn heartbeat_timeout_loses_node_and_requeues() {
    let e = start_with(Duration::from_millis(400)).await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let plain = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let mut sp = spec(1.0, 0.0);
    sp.requeue = true;
    let requeue = e.admin.submit_ok(&sp).await;
    for _ in 0..2 {
        let k = start_key(&a.expect_start().await);
        a.send(AgentMessage::Kernel { key: k, event: started() }).await;
    }
    e.admin.wait_state(plain, "RUNNING").await;
    e.admin.wait_state(requeue, "RUNNING").await;
    // No heartbeats from here on.
    let d = e.admin.wait_state(plain, "LOST").await;
    assert!(d["job"]["reason"].as_str().unwrap().starts_with("node n1 lost: no heartbeat"), "{d}");
    let d = e.admin.wait_state(requeue, "PENDING").await;
    assert!(d["job"]["reason"].as_str().unwrap().starts_with("requeued: node n1 lost"), "{d}");
    let (_, nodes) = e.admin.get("/v1/nodes").await;
    assert_eq!(nodes[0]["state"], "lost");
    drop(a);

    // Reconnect: ready again; the requeued job starts as attempt 1.
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let k = start_key(&a.expect_start().await);
    assert_eq!((k.job_id, k.attempt), (requeue, 1));
    let (_, nodes) = e.admin.get("/v1/nodes").await;
    assert_eq!(nodes[0]["state"], "ready");
    e.m.shutdown().await;
}

#[tokio::test]
async fn logs_come_from_the_agent() {
    let e = start().await;
    let pending = e.admin.submit_ok(&spec(64.0, 0.0)).await; // no node yet: accepted, waits
    let r = e.admin.http.get(format!("{}/v1/jobs/{pending}/logs", e.m.url)).bearer_auth(&e.admin.token).send().await;
    let r = r.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["berth-next-offset"], "0");
    assert!(r.bytes().await.unwrap().is_empty());

    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    e.admin.post(&format!("/v1/jobs/{pending}/cancel"), json!({})).await;
    let id = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let key = start_key(&a.expect_start().await);
    let url = format!("{}/v1/jobs/{id}/logs?stream=stderr&offset=3", e.m.url);
    let req = e.admin.http.get(url).bearer_auth(&e.admin.token).send();
    let fetch = tokio::spawn(req);
    let ask = a.expect("fetch-logs", |m| matches!(m, ManagerMessage::FetchLogs { .. })).await;
    let ManagerMessage::FetchLogs { req_id, key: k, stream, offset, .. } = ask else { unreachable!() };
    assert_eq!((k, stream, offset), (key, berth_model::protocol::LogStream::Stderr, 3));
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(b"hello\n");
    a.send(AgentMessage::LogData { req_id, data, next_offset: 9, found: true }).await;
    let r = fetch.await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["berth-next-offset"], "9");
    assert_eq!(r.headers()["berth-job-done"], "false");
    assert_eq!(r.headers()["berth-attempt"], "0");
    assert_eq!(&r.bytes().await.unwrap()[..], b"hello\n");

    drop(a);
    eventually("node disconnect", || async {
        let r = e.admin.http.get(format!("{}/v1/jobs/{id}/logs", e.m.url)).bearer_auth(&e.admin.token).send();
        (r.await.unwrap().status() == 503).then_some(())
    })
    .await;
    e.m.shutdown().await;
}

#[tokio::test]
async fn agent_auth_and_version() {
    let e = start().await;
    assert!(Agent::dial(&e.m.url, "wrong").await.is_err(), "bad join token is refused");
    let ws = Agent::dial(&e.m.url, &e.m.join_token).await.unwrap();
    let mut a = Agent { ws, node: "n1".into() };
    a.send(AgentMessage::Register {
        protocol_version: 999,
        node: "n1".into(),
        agent_version: "x".into(),
        queue: "default".into(),
        topology: gpu_node(),
        kernels: vec![],
        address: None,
        containers: Default::default(),
        labels: Default::default(),
        cache_url: None,
        cache_weight: None,
        folder_mounts: true,
    })
    .await;
    match a.recv().await {
        ManagerMessage::Refused { reason } => assert!(reason.contains("protocol version 999"), "{reason}"),
        m => panic!("expected refusal, got {m:?}"),
    }
    // A pending reason tells why nothing runs without nodes.
    let id = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let j = eventually("a no-nodes reason", || async {
        let j = e.admin.job(id).await;
        (j["job"]["pending_reason"]["kind"] != "queued").then_some(j)
    })
    .await;
    let kind: PendingKind = serde_json::from_value(j["job"]["pending_reason"]["kind"].clone()).unwrap();
    assert_eq!(kind, PendingKind::NoNodes, "{j}");
    e.m.shutdown().await;
}

/// Image jobs go only to nodes that report the image: one whose image no node has waits with
/// an `image:` reason naming the nodes whose Docker is down, and starts once a node reports
/// the image; `GET /v1/images` lists what nodes have. Process jobs are unaffected.
#[tokio::test]
async fn image_jobs_wait_for_a_node_with_the_image() {
    use berth_model::protocol::ContainerInfo;
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let down = ContainerInfo {
        docker_ok: false,
        error: Some("cannot reach the Docker daemon".into()),
        images: vec![],
        ..Default::default()
    };
    a.send(AgentMessage::Containers { info: down }).await;
    let mut s = spec(1.0, 0.0);
    s.image = Some("pytorch:2.4".into());
    let id = e.admin.submit_ok(&s).await;
    // A pass may run between the registration (Docker state not yet known) and the report of
    // the error: wait for the reason that names it.
    let j = eventually("an image reason naming the docker error", || async {
        let j = e.admin.job(id).await;
        let named = j["job"]["pending_reason"]["message"].as_str().is_some_and(|m| m.contains("(cannot reach"));
        (j["job"]["pending_reason"]["kind"] == "image" && named).then_some(j)
    })
    .await;
    assert_eq!(
        j["job"]["pending_reason"]["message"],
        "image: pytorch:2.4 not on any node; docker is not usable on n1 (cannot reach the Docker daemon)",
        "{j}"
    );
    let (_, v) = e.admin.get("/v1/images").await;
    assert_eq!(v["docker_down"][0]["node"], "n1", "{v}");

    // A process job runs meanwhile.
    let p = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    assert_eq!(start_key(&a.expect_start().await).job_id, p);

    let up = ContainerInfo {
        docker_ok: true,
        error: None,
        images: vec!["busybox:latest".into(), "pytorch:2.4".into()],
        ..Default::default()
    };
    a.send(AgentMessage::Containers { info: up }).await;
    let m = a.expect_start().await;
    assert_eq!(start_key(&m).job_id, id);
    if let ManagerMessage::StartKernel { spec, .. } = &m {
        assert_eq!(spec.image.as_deref(), Some("pytorch:2.4"));
    }
    let (_, v) = e.admin.get("/v1/images").await;
    assert_eq!(v["images"][1], json!({"image": "pytorch:2.4", "nodes": ["n1"]}), "{v}");
    e.m.shutdown().await;
}

/// A kernel set up before it runs: its first `Preparing` moves the job SCHEDULED → PREPARING
/// (stored, with a reason), later ones only update the progress the job view shows, `Started`
/// moves it on to RUNNING; a failed setup fails the job with the agent's message.
#[tokio::test]
async fn preparing_shows_progress_and_a_failed_setup_fails_the_job() {
    use berth_model::SetupStep;
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let since = jiff::Timestamp::now();
    let preparing = |done: u64, detail: &str| KernelEvent::Preparing {
        step: SetupStep::Environment,
        done,
        total: 4,
        detail: Some(detail.into()),
        since,
    };
    let id = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let key = start_key(&a.expect_start().await);
    a.send(AgentMessage::Kernel { key, event: preparing(0, "waiting for uv") }).await;
    a.send(AgentMessage::Kernel { key, event: preparing(2, "resolved 5 packages in 12ms") }).await;
    let d = eventually("progress 2/4", || async {
        let d = e.admin.job(id).await;
        (d["job"]["setup"]["done"] == 2).then_some(d)
    })
    .await;
    assert_eq!(d["job"]["state"], "PREPARING");
    assert_eq!(d["job"]["setup"]["step"], "environment");
    assert_eq!(d["job"]["setup"]["detail"], "resolved 5 packages in 12ms");
    let listed = e.admin.list("").await;
    assert_eq!(listed[0].setup.as_ref().map(|s| s.short()), Some("env build 2/4".to_string()));
    a.send(AgentMessage::Kernel { key, event: started() }).await;
    let d = e.admin.wait_state(id, "RUNNING").await;
    assert!(d["job"].get("setup").is_none(), "{d:#}");
    let states: Vec<_> = d["transitions"].as_array().unwrap().iter().map(|t| t["to"].clone()).collect();
    assert_eq!(states, vec![json!("PENDING"), json!("SCHEDULED"), json!("PREPARING"), json!("RUNNING")]);
    assert_eq!(d["transitions"][2]["reason"], "preparing on n1: env build");
    a.send(AgentMessage::Kernel { key, event: finished(KernelOutcome::Succeeded, Some(0), "") }).await;

    let id = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let key = start_key(&a.expect_start().await);
    a.send(AgentMessage::Kernel { key, event: preparing(1, "created the venv") }).await;
    let message = "environment build failed: No solution found when resolving dependencies";
    a.send(AgentMessage::Kernel { key, event: finished(KernelOutcome::SetupFailed, None, message) }).await;
    let d = e.admin.wait_state(id, "FAILED").await;
    assert_eq!((d["job"]["reason"].as_str(), d["job"]["end_cause"].as_str()), (Some(message), Some("launch_failed")));
    e.m.shutdown().await;
}

/// The nodes' environment caches as their agents report them; removal is for admins, refused
/// while in use, and forwarded to the nodes that have it.
#[tokio::test]
async fn env_caches_are_listed_and_removed_on_their_nodes() {
    use berth_model::environment::{EnvEntry, EnvKind};
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", gpu_node(), vec![]).await;
    let entry = |key: &str, in_use: u32| EnvEntry {
        key: key.repeat(64),
        python: "3.11".into(),
        kind: EnvKind::Requirements,
        size_bytes: 1 << 20,
        last_used: jiff::Timestamp::now(),
        in_use,
    };
    a.send(AgentMessage::Envs { envs: vec![entry("a", 1), entry("b", 0)] }).await;
    let listed = eventually("two environments", || async {
        let (_, v) = e.admin.get("/v1/envs").await;
        (v[0]["envs"].as_array().map(Vec::len) == Some(2)).then_some(v)
    })
    .await;
    assert_eq!(listed[0]["node"], "n1");
    let (_, bob) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    let bob = Client::new(&e.admin.url, bob["token"].as_str().unwrap());
    let (s, v) = bob.get("/v1/envs").await;
    assert_eq!((s, v[0]["envs"].as_array().map(Vec::len)), (200, Some(2)));
    assert_eq!(bob.delete("/v1/envs/bbbb").await.0, 403);
    let (s, v) = e.admin.delete("/v1/envs/aaaa").await;
    assert_eq!(s, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("in use by 1 kernels on n1"), "{v}");
    assert_eq!(e.admin.delete("/v1/envs/cccc").await.0, 404);
    assert_eq!(e.admin.delete("/v1/envs/xyz!").await.0, 400);
    let (s, v) = e.admin.delete("/v1/envs/bbbb").await;
    assert_eq!((s, v["key"].as_str(), v["nodes"].clone()), (200, Some("b".repeat(64).as_str()), json!(["n1"])));
    let m = a.expect("remove-env", |m| matches!(m, ManagerMessage::RemoveEnv { .. })).await;
    assert_eq!(m, ManagerMessage::RemoveEnv { key: "b".repeat(64) });
    let (_, v) = e.admin.get("/v1/envs").await;
    assert_eq!(v[0]["envs"].as_array().map(Vec::len), Some(1));
    e.m.shutdown().await;
}
