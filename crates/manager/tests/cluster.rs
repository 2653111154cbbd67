//! Cluster-mode behaviour of the manager with fake agents over the real WebSocket: the
//! multi-node environment (torchrun's variables), `main` ending the job, a failing sub kernel
//! stopping the others, and node drain/undrain.

mod common;

use std::collections::BTreeMap;

use berth_model::protocol::{AgentMessage, KernelEvent, KernelKey, KernelOutcome, ManagerMessage};
use berth_model::{JobSpec, Topology};
use common::*;
use serde_json::json;

fn node() -> Topology {
    Topology::synthetic(1, 4, 16 << 30, 0)
}

fn started() -> KernelEvent {
    KernelEvent::Started { pid: 42, at: jiff::Timestamp::now() }
}

fn two_nodes() -> JobSpec {
    let mut s = spec(1.0, 0.0);
    s.nodes = 2;
    s
}

fn start_env(m: &ManagerMessage) -> (KernelKey, BTreeMap<String, String>, Option<u16>) {
    match m {
        ManagerMessage::StartKernel { key, env, binding, .. } => (*key, env.clone(), binding.port),
        m => panic!("not a start: {m:?}"),
    }
}

/// Starts a 2-node job on agents n1 and n2; returns (job id, [(agent, key, env)] by kernel index).
async fn start_two(
    e: &Env,
    a1: &mut Agent,
    a2: &mut Agent,
) -> (i64, Vec<(String, KernelKey, BTreeMap<String, String>)>) {
    start_two_of(e, a1, a2, two_nodes()).await
}

/// [`start_two`] of `spec` (a 2-node job).
async fn start_two_of(
    e: &Env,
    a1: &mut Agent,
    a2: &mut Agent,
    spec: JobSpec,
) -> (i64, Vec<(String, KernelKey, BTreeMap<String, String>)>) {
    let id = e.admin.submit_ok(&spec).await;
    let (k1, env1, _) = start_env(&a1.expect_start().await);
    let (k2, env2, _) = start_env(&a2.expect_start().await);
    assert_eq!((k1.job_id, k2.job_id), (id, id));
    let mut ks = vec![("n1".to_string(), k1, env1), ("n2".to_string(), k2, env2)];
    ks.sort_by_key(|(_, k, _)| k.index);
    a1.send(AgentMessage::Kernel { key: k1, event: started() }).await;
    a2.send(AgentMessage::Kernel { key: k2, event: started() }).await;
    e.admin.wait_state(id, "RUNNING").await;
    (id, ks)
}

fn agent_of<'a>(name: &str, a1: &'a mut Agent, a2: &'a mut Agent) -> &'a mut Agent {
    if name == "n1" { a1 } else { a2 }
}

#[tokio::test]
async fn multi_node_env_and_main_ends_the_job() {
    let e = start().await;
    let mut a1 = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let mut a2 = Agent::connect(&e.m, "n2", node(), vec![]).await;
    let (id, ks) = start_two(&e, &mut a1, &mut a2).await;

    let (main_node, main_key, main_env) = &ks[0];
    let (sub_node, sub_key, sub_env) = &ks[1];
    assert_ne!(main_node, sub_node, "one kernel per node");
    let port: u16 = main_env["MASTER_PORT"].parse().unwrap();
    assert!((29500..30500).contains(&port), "{port}");
    for (i, env) in [main_env, sub_env].into_iter().enumerate() {
        assert_eq!(env["MASTER_ADDR"], format!("{main_node}.addr"), "main's registered address");
        assert_eq!(env["MASTER_PORT"], port.to_string(), "every rank gets the same port");
        assert_eq!(env["WORLD_SIZE"], "2");
        assert_eq!(env["RANK"], i.to_string());
        assert_eq!(env["NODE_RANK"], i.to_string());
        assert_eq!(env["LOCAL_RANK"], "0");
        assert_eq!(env["BERTH_CLUSTER_SIZE"], "2");
        assert_eq!(env["BERTH_CLUSTER_INDEX"], i.to_string());
        assert_eq!(env["BERTH_CLUSTER_HOSTS"], format!("{main_node}.addr,{sub_node}.addr"));
        assert_eq!(env["BERTH_CLUSTER_NODES"], format!("{main_node},{sub_node}"));
    }
    assert_eq!(main_env["BERTH_CLUSTER_ROLE"], "main");
    assert_eq!(sub_env["BERTH_CLUSTER_ROLE"], "sub1");

    // A second job whose main lands on the same node gets another port.
    let id2 = e.admin.submit_ok(&two_nodes()).await;
    let s1 = a1.expect_start().await;
    let s2 = a2.expect_start().await;
    let other_port = [s1, s2]
        .iter()
        .map(start_env)
        .find(|(k, _, _)| k.index == 0 && k.job_id == id2)
        .and_then(|(_, env, _)| env.get("MASTER_PORT").cloned())
        .unwrap();
    assert_ne!(other_port, port.to_string());

    // `main` ends: the job succeeds and the sub kernel still running is stopped.
    let main_key = *main_key;
    let sub_key = *sub_key;
    let (mn, sn) = (main_node.clone(), sub_node.clone());
    agent_of(&mn, &mut a1, &mut a2)
        .send(AgentMessage::Kernel { key: main_key, event: finished(KernelOutcome::Succeeded, Some(0)) })
        .await;
    let d = e.admin.wait_state(id, "SUCCEEDED").await;
    assert_eq!(d["job"]["exit_code"], 0);
    let sub = agent_of(&sn, &mut a1, &mut a2);
    sub.expect("stop of the sub kernel", |m| matches!(m, ManagerMessage::StopKernel { key, .. } if *key == sub_key))
        .await;
    // Its late report is only forgotten; the job stays SUCCEEDED.
    sub.send(AgentMessage::Kernel { key: sub_key, event: finished(KernelOutcome::Stopped, Some(143)) }).await;
    sub.expect("forget", |m| matches!(m, ManagerMessage::Forget { key } if *key == sub_key)).await;
    assert_eq!(e.admin.state(id).await, "SUCCEEDED");
    e.m.shutdown().await;
}

#[tokio::test]
async fn a_failing_sub_kernel_fails_the_job_and_stops_main() {
    let e = start().await;
    let mut a1 = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let mut a2 = Agent::connect(&e.m, "n2", node(), vec![]).await;
    let (id, ks) = start_two(&e, &mut a1, &mut a2).await;
    let (main_node, main_key, _) = ks[0].clone();
    let (sub_node, sub_key, _) = ks[1].clone();
    agent_of(&sub_node, &mut a1, &mut a2)
        .send(AgentMessage::Kernel { key: sub_key, event: finished(KernelOutcome::Failed, Some(3)) })
        .await;
    let d = e.admin.wait_state(id, "FAILED").await;
    assert_eq!(d["job"]["reason"], "exit code 3", "{d}");
    agent_of(&main_node, &mut a1, &mut a2)
        .expect("stop of main", |m| matches!(m, ManagerMessage::StopKernel { key, .. } if *key == main_key))
        .await;

    // A sub kernel that succeeds early does not end the job: main decides.
    let (id, ks) = start_two(&e, &mut a1, &mut a2).await;
    let (sub_node, sub_key, _) = ks[1].clone();
    let sub = agent_of(&sub_node, &mut a1, &mut a2);
    sub.send(AgentMessage::Kernel { key: sub_key, event: finished(KernelOutcome::Succeeded, Some(0)) }).await;
    // The manager tells the agent to forget the kernel once its end is stored: by then it
    // has decided what the end means for the job.
    sub.expect("forget", |m| matches!(m, ManagerMessage::Forget { key } if *key == sub_key)).await;
    assert_eq!(e.admin.state(id).await, "RUNNING");
    let (main_node, main_key, _) = ks[0].clone();
    agent_of(&main_node, &mut a1, &mut a2)
        .send(AgentMessage::Kernel { key: main_key, event: finished(KernelOutcome::Succeeded, Some(0)) })
        .await;
    e.admin.wait_state(id, "SUCCEEDED").await;
    e.m.shutdown().await;
}

#[tokio::test]
async fn a_batch_jobs_holding_kernel_ending_fails_it_and_main_ends_it() {
    let e = start().await;
    let mut a1 = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let mut a2 = Agent::connect(&e.m, "n2", node(), vec![]).await;
    let batch = || {
        let mut s = two_nodes();
        s.launch = berth_model::Launch::First;
        s.tasks_per_node = 4;
        s
    };
    let (id, ks) = start_two_of(&e, &mut a1, &mut a2, batch()).await;
    for (_, _, env) in &ks {
        assert!(env["BERTH_STEP_TOKEN"].starts_with(&format!("bstep_{id}_")), "{env:?}");
        assert_eq!(env["SLURM_NTASKS"], "8");
        assert_eq!(env["SLURM_JOB_ID"], id.to_string());
    }
    assert_eq!(ks[0].2["BERTH_STEP_TOKEN"], ks[1].2["BERTH_STEP_TOKEN"], "one token per run of the job");
    let (d, _) = e.admin.get(&format!("/v1/jobs/{id}")).await;
    assert!(!d.to_string().contains("bstep_"), "the token is never shown: {d}");
    // A holding kernel never ends by itself: when it does, its node is gone and the job fails.
    let (main_node, main_key, _) = ks[0].clone();
    let (sub_node, sub_key, _) = ks[1].clone();
    agent_of(&sub_node, &mut a1, &mut a2)
        .send(AgentMessage::Kernel { key: sub_key, event: finished(KernelOutcome::Succeeded, Some(0)) })
        .await;
    let d = e.admin.wait_state(id, "FAILED").await;
    assert!(d["job"]["reason"].as_str().unwrap().contains("which held node"), "{d}");
    agent_of(&main_node, &mut a1, &mut a2)
        .expect("stop of main", |m| matches!(m, ManagerMessage::StopKernel { key, .. } if *key == main_key))
        .await;

    // Main's end is the job's; the holding kernel is stopped.
    let (id, ks) = start_two_of(&e, &mut a1, &mut a2, batch()).await;
    let (main_node, main_key, _) = ks[0].clone();
    let (sub_node, sub_key, _) = ks[1].clone();
    agent_of(&main_node, &mut a1, &mut a2)
        .send(AgentMessage::Kernel { key: main_key, event: finished(KernelOutcome::Failed, Some(3)) })
        .await;
    let d = e.admin.wait_state(id, "FAILED").await;
    assert_eq!(d["job"]["exit_code"], 3, "{d}");
    agent_of(&sub_node, &mut a1, &mut a2)
        .expect(
            "stop of the holding kernel",
            |m| matches!(m, ManagerMessage::StopKernel { key, .. } if *key == sub_key),
        )
        .await;
    e.m.shutdown().await;
}

/// Opens `/v1/jobs/{id}/exec` with `token` and sends `req`; the upgrade's refusal as its status.
async fn exec_with(
    url: &str,
    token: &str,
    id: i64,
    req: serde_json::Value,
) -> Result<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>, u16> {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/v1/jobs/{id}/exec", url.replacen("http://", "ws://", 1));
    let mut r = url.into_client_request().unwrap();
    r.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::connect_async(r).await {
        Ok((mut ws, _)) => {
            ws.send(tokio_tungstenite::tungstenite::Message::Text(req.to_string().into())).await.unwrap();
            Ok(ws)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

/// Regression (submitit on CI: `srun: error: job 1 is SCHEDULED: exec needs a running job`):
/// a batch script runs on its node before the manager has heard that its kernel started, so
/// the `srun` in it waits for RUNNING instead of being refused.
#[tokio::test]
async fn a_step_token_exec_sent_before_the_manager_saw_the_start_waits_for_running() {
    let e = start().await;
    let mut a1 = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let id = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let (k0, env, _) = start_env(&a1.expect_start().await);
    let token = env["BERTH_STEP_TOKEN"].clone();
    let req = json!({"kernel": 0, "command": ["true"]});
    let url = e.m.url.clone();
    let exec = tokio::spawn(async move { exec_with(&url, &token, id, req).await.map(|_| ()) });
    let early = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        a1.expect("open-stream", |m| matches!(m, ManagerMessage::OpenStream { .. })),
    )
    .await;
    assert!(early.is_err(), "no stream before the job runs: {early:?}");
    assert!(!exec.is_finished(), "the exec waits, it is not refused");
    a1.send(AgentMessage::Kernel { key: k0, event: started() }).await;
    let opened = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        a1.expect("open-stream", |m| matches!(m, ManagerMessage::OpenStream { .. })),
    )
    .await;
    assert!(opened.is_ok(), "the exec goes on once the job runs");
    exec.abort();
    e.m.shutdown().await;
}

#[tokio::test]
async fn a_step_token_opens_its_jobs_kernels_once_they_started_and_no_other_job() {
    let e = start().await;
    let mut a1 = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let mut a2 = Agent::connect(&e.m, "n2", node(), vec![]).await;
    let mut batch = two_nodes();
    batch.launch = berth_model::Launch::First;
    let id = e.admin.submit_ok(&batch).await;
    let mut starts = [start_env(&a1.expect_start().await), start_env(&a2.expect_start().await)];
    starts.sort_by_key(|(k, _, _)| k.index);
    let token = starts[0].1["BERTH_STEP_TOKEN"].clone();
    let (k0, k1) = (starts[0].0, starts[1].0);
    // Only kernel 0 runs: the job is RUNNING, kernel 1 is still being set up.
    for a in [&mut a1, &mut a2] {
        a.send(AgentMessage::Kernel { key: k0, event: started() }).await;
    }
    e.admin.wait_state(id, "RUNNING").await;
    let req = json!({"kernel": 1, "command": ["true"], "env": {"RANK": "1"}});
    let _ws = exec_with(&e.m.url, &token, id, req.clone()).await.expect("the job's own token opens its exec");
    // The stream waits for kernel 1 to start: no OpenStream before its Started.
    for a in [&mut a1, &mut a2] {
        let early = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            a.expect("open-stream", |m| matches!(m, ManagerMessage::OpenStream { .. })),
        )
        .await;
        assert!(early.is_err(), "no stream into a kernel that has not started: {early:?}");
    }
    for a in [&mut a1, &mut a2] {
        a.send(AgentMessage::Kernel { key: k1, event: started() }).await;
    }
    let mut opened = None;
    for a in [&mut a1, &mut a2] {
        if let Ok(m) = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            a.expect("open-stream", |m| matches!(m, ManagerMessage::OpenStream { .. })),
        )
        .await
        {
            opened = Some(m);
            break;
        }
    }
    match opened.expect("an OpenStream once kernel 1 started") {
        ManagerMessage::OpenStream { key, open: berth_model::protocol::StreamOpen::Exec { env, .. }, .. } => {
            assert_eq!(key, k1);
            assert_eq!(env["RANK"], "1", "the request's variables reach the agent");
        }
        m => panic!("{m:?}"),
    }
    // Another job of the same owner answers as a missing one; a forged token is refused.
    let other = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    assert_eq!(exec_with(&e.m.url, &token, other, req.clone()).await.err(), Some(404));
    assert_eq!(exec_with(&e.m.url, &format!("{token}0"), id, req.clone()).await.err(), Some(401));
    assert_eq!(e.admin.get("/v1/jobs").await.0, 200);
    assert_eq!(Client::new(&e.m.url, &token).get("/v1/jobs").await.0, 401, "no API token");
    // Once the job ends the token is worth nothing.
    e.admin.post(&format!("/v1/jobs/{id}/cancel"), json!({})).await;
    for a in [&mut a1, &mut a2] {
        for k in [k0, k1] {
            a.send(AgentMessage::Kernel { key: k, event: finished(KernelOutcome::Stopped, Some(143)) }).await;
        }
    }
    e.admin.wait_state(id, "CANCELLED").await;
    assert_eq!(exec_with(&e.m.url, &token, id, req).await.err(), Some(401));
    e.m.shutdown().await;
}

async fn node_json(e: &Env, name: &str) -> serde_json::Value {
    let (_, nodes) = e.admin.get("/v1/nodes").await;
    nodes.as_array().unwrap().iter().find(|n| n["name"] == name).cloned().unwrap()
}

#[tokio::test]
async fn drain_lets_running_jobs_finish_and_takes_no_new_ones() {
    let e = start().await;
    let mut a = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let running = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let k = start_key(&a.expect_start().await);
    a.send(AgentMessage::Kernel { key: k, event: started() }).await;
    e.admin.wait_state(running, "RUNNING").await;

    // Only admins drain; unknown nodes are 404 with the known ones listed.
    let (_, user) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    let bob = Client::new(&e.m.url, user["token"].as_str().unwrap());
    assert_eq!(bob.post("/v1/nodes/n1/drain", json!({})).await.0, 403);
    let (code, body) = e.admin.post("/v1/nodes/nope/drain", json!({})).await;
    assert_eq!(code, 404);
    assert!(body["error"].as_str().unwrap().contains("known nodes are n1"), "{body}");

    let (code, n) = e.admin.post("/v1/nodes/n1/drain", json!({"reason": "disk swap"})).await;
    assert_eq!(code, 200, "{n}");
    assert_eq!((n["state"].as_str(), n["drain_reason"].as_str()), (Some("draining"), Some("disk swap")));
    let waiting = e.admin.submit_ok(&spec(1.0, 0.0)).await;
    let j = eventually("the new job to be looked at", || async {
        let j = e.admin.job(waiting).await;
        (j["job"]["pending_reason"]["kind"] != "queued").then_some(j)
    })
    .await;
    assert_eq!(j["job"]["state"], "PENDING", "a drained node takes no new job: {j}");

    // The agent reconnecting does not undo the drain.
    drop(a);
    let mut a =
        Agent::connect(&e.m, "n1", node(), vec![berth_model::protocol::KernelReport { key: k, last: started() }]).await;
    assert_eq!(node_json(&e, "n1").await["state"], "draining");

    // The running job ends: the node is drained.
    a.send(AgentMessage::Kernel { key: k, event: finished(KernelOutcome::Succeeded, Some(0)) }).await;
    e.admin.wait_state(running, "SUCCEEDED").await;
    eventually("drained", || async { (node_json(&e, "n1").await["state"] == "drained").then_some(()) }).await;
    assert_eq!(e.admin.state(waiting).await, "PENDING");

    // Undrain: the waiting job starts.
    let (code, n) = e.admin.post("/v1/nodes/n1/undrain", json!({})).await;
    assert_eq!((code, n["state"].as_str()), (200, Some("ready")), "{n}");
    assert_eq!(n["drain_reason"], serde_json::Value::Null);
    let k = start_key(&a.expect_start().await);
    assert_eq!(k.job_id, waiting);
    e.m.shutdown().await;
}

async fn put_queue(e: &Env, name: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let c = &e.admin;
    let r = c.http.put(format!("{}/v1/queues/{name}", c.url)).bearer_auth(&c.token).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn queues_select_their_nodes_by_label_or_name() {
    let e = start().await;
    let (s, v) = put_queue(&e, "gpu", json!({"node_labels": {"gpu": "a100"}})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(put_queue(&e, "gpu", json!({"node_labels": {"gpu": "a 100"}})).await.0, 400);
    let mut a1 = Agent::connect_labelled(&e.m, "n1", node(), vec![], &[("gpu", "a100")]).await;
    let mut a2 = Agent::connect(&e.m, "n2", node(), vec![]).await;
    let n1 = node_json(&e, "n1").await;
    assert_eq!((n1["queue"].as_str(), n1["labels"]["gpu"].as_str()), (Some("gpu"), Some("a100")));
    assert_eq!(node_json(&e, "n2").await["queue"], "default");

    let mut to_gpu = spec(1.0, 0.0);
    to_gpu.queue = Some("gpu".into());
    let id = e.admin.submit_ok(&to_gpu).await;
    let k = start_key(&a1.expect_start().await);
    assert_eq!(k.job_id, id, "the labelled node serves gpu");

    // Select by name instead: n2 moves to gpu, n1 back to the queue its agent asked for.
    let (s, v) = put_queue(&e, "gpu", json!({"node_labels": {}, "nodes": ["n2"]})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(node_json(&e, "n1").await["queue"], "default");
    assert_eq!(node_json(&e, "n2").await["queue"], "gpu");
    let id2 = e.admin.submit_ok(&to_gpu).await;
    assert_eq!(start_key(&a2.expect_start().await).job_id, id2);
    let (_, qs) = e.admin.get("/v1/queues").await;
    let gpu = qs.as_array().unwrap().iter().find(|q| q["name"] == "gpu").unwrap();
    assert_eq!((gpu["nodes"].as_u64(), gpu["policy"]["nodes"].clone()), (Some(1), json!(["n2"])));
    e.m.shutdown().await;
}
