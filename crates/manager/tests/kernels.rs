//! Several kernels of one job on one node (`--kernels N`) and host-mount allow-lists, with
//! fake agents over the real WebSocket: placement (all kernels on one node, disjoint
//! devices), their environment, a failing sub kernel failing the job, and mounts refused at
//! submit or kept away from nodes that do not allow them.

mod common;

use std::collections::BTreeMap;

use berth_model::protocol::{AgentMessage, ContainerInfo, KernelEvent, KernelKey, KernelOutcome, ManagerMessage};
use berth_model::{Binding, JobSpec, Topology};
use common::*;
use serde_json::json;

/// 8 CPUs, 16 GiB, 2 GPUs.
fn node() -> Topology {
    Topology::synthetic(1, 8, 16 << 30, 2)
}

fn docker(allow_mounts: &[&str]) -> ContainerInfo {
    ContainerInfo {
        docker_ok: true,
        error: None,
        images: vec!["busybox:latest".into()],
        allow_mounts: allow_mounts.iter().map(|s| s.to_string()).collect(),
    }
}

async fn docker_agent(e: &Env, name: &str, allow_mounts: &[&str]) -> Agent {
    let mut a = Agent::connect(&e.m, name, node(), vec![]).await;
    a.send(AgentMessage::Containers { info: docker(allow_mounts) }).await;
    a
}

fn kernels_spec(kernels: u32) -> JobSpec {
    let mut s = spec(2.0, 1.0);
    s.image = Some("busybox".into());
    s.kernels = kernels;
    s
}

fn start_parts(m: &ManagerMessage) -> (KernelKey, Binding, BTreeMap<String, String>) {
    match m {
        ManagerMessage::StartKernel { key, binding, env, .. } => (*key, binding.clone(), env.clone()),
        m => panic!("not a start: {m:?}"),
    }
}

#[tokio::test]
async fn kernels_of_one_job_run_on_one_node_with_their_own_devices_and_env() {
    let e = start().await;
    let mut a = docker_agent(&e, "n1", &[]).await;
    let id = e.admin.submit_ok(&kernels_spec(2)).await;
    let mut ks: Vec<_> = vec![start_parts(&a.expect_start().await), start_parts(&a.expect_start().await)];
    ks.sort_by_key(|(k, _, _)| k.index);
    let (b0, b1) = (&ks[0].1, &ks[1].1);
    assert!(ks.iter().all(|(k, b, _)| k.job_id == id && b.node == "n1"));
    assert_eq!((b0.cpus.len(), b1.cpus.len()), (2, 2), "the request is per kernel");
    assert!(b0.cpus.iter().all(|c| !b1.cpus.contains(c)), "disjoint cpusets: {b0:?} {b1:?}");
    assert_ne!(b0.gpus[0].uuid, b1.gpus[0].uuid, "a GPU each");
    for (i, (_, _, env)) in ks.iter().enumerate() {
        assert_eq!(env["MASTER_ADDR"], "main");
        assert_eq!(env["BERTH_CLUSTER_HOSTS"], "main,sub1");
        assert_eq!(env["BERTH_CLUSTER_SIZE"], "2");
        assert_eq!(env["WORLD_SIZE"], "2");
        assert_eq!(env["RANK"], i.to_string());
        assert_eq!(env["LOCAL_RANK"], i.to_string());
        assert_eq!(env["LOCAL_WORLD_SIZE"], "2");
        assert_eq!(env["NODE_RANK"], "0");
        assert_eq!(env["BERTH_CLUSTER_INDEX"], i.to_string());
        assert_eq!(env["MASTER_PORT"], ks[0].2["MASTER_PORT"]);
    }
    assert_eq!((ks[0].2["BERTH_CLUSTER_ROLE"].as_str(), ks[1].2["BERTH_CLUSTER_ROLE"].as_str()), ("main", "sub1"));

    // The node has no room for a second such job (both GPUs taken): it waits, whole.
    let waiting = e.admin.submit_ok(&kernels_spec(2)).await;
    let j = eventually("a reason", || async {
        let j = e.admin.job(waiting).await;
        (j["job"]["pending_reason"]["kind"] == "resources").then_some(j)
    })
    .await;
    assert!(j["job"]["pending_reason"]["message"].as_str().unwrap().contains("needs 2 kernels"), "{j}");

    // A failing sub kernel fails the job and stops main; then the waiting job starts.
    for (k, _, _) in &ks {
        a.send(AgentMessage::Kernel { key: *k, event: KernelEvent::Started { pid: 1, at: jiff::Timestamp::now() } })
            .await;
    }
    e.admin.wait_state(id, "RUNNING").await;
    a.send(AgentMessage::Kernel { key: ks[1].0, event: finished(KernelOutcome::Failed, Some(3)) }).await;
    let d = e.admin.wait_state(id, "FAILED").await;
    assert_eq!(d["job"]["reason"], "exit code 3", "{d}");
    let main = ks[0].0;
    a.expect("stop of main", |m| matches!(m, ManagerMessage::StopKernel { key, .. } if *key == main)).await;
    a.send(AgentMessage::Kernel { key: main, event: finished(KernelOutcome::Stopped, Some(143)) }).await;
    let next = start_parts(&a.expect_start().await).0;
    assert_eq!(next.job_id, waiting);
    e.m.shutdown().await;
}

#[tokio::test]
async fn kernels_that_can_never_fit_or_need_an_image_are_refused_at_submit() {
    let e = start().await;
    let _a = docker_agent(&e, "n1", &[]).await;
    let (code, body) = e.admin.submit(&kernels_spec(3)).await;
    assert_eq!(code, 422, "3 kernels of 1 GPU on a 2-GPU node: {body}");
    assert!(body["error"].as_str().unwrap().contains("needs 3 kernels with 1 GPU"), "{body}");
    let mut s = kernels_spec(2);
    s.image = None;
    let (code, body) = e.admin.submit(&s).await;
    assert_eq!(code, 400);
    assert!(body["error"].as_str().unwrap().starts_with("--kernels needs --image"), "{body}");
    let mut s = kernels_spec(2);
    s.nodes = 2;
    assert_eq!(e.admin.submit(&s).await.0, 400);
    e.m.shutdown().await;
}

#[tokio::test]
async fn mounts_are_checked_at_submit_and_placed_only_where_allowed() {
    let e = start().await;
    let mut a1 = docker_agent(&e, "n1", &["/data"]).await;
    let _a2 = docker_agent(&e, "n2", &[]).await;
    let mounting = |src: &str| {
        let mut s = spec(1.0, 0.0);
        s.image = Some("busybox".into());
        s.mounts.push(format!("{src}:/mnt").parse().unwrap());
        s
    };
    // Until n1's report arrives both nodes allow nothing (registered with no list): also 422.
    let body = eventually("n1's allow-list to be known", || async {
        let (code, body) = e.admin.submit(&mounting("/home/alice")).await;
        assert_eq!(code, 422, "{body}");
        body["error"].as_str().unwrap().contains("(allowed: /data)").then_some(body)
    })
    .await;
    let msg = body["error"].as_str().unwrap();
    assert!(msg.starts_with("mount: /home/alice not allowed on any node of queue default (allowed: /data)"), "{msg}");
    assert!(msg.contains("berth agent --allow-mount"), "{msg}");

    // Binpack would prefer either empty node; only n1 allows /data.
    for _ in 0..3 {
        let id = e.admin.submit_ok(&mounting("/data/imagenet")).await;
        let (k, b, _) = start_parts(&a1.expect_start().await);
        assert_eq!((k.job_id, b.node.as_str()), (id, "n1"));
    }

    // With n1 drained no ready node allows it: the job waits with a `mount` reason.
    let (code, n) = e.admin.post("/v1/nodes/n1/drain", json!({"reason": "maintenance"})).await;
    assert_eq!(code, 200, "{n}");
    let id = e.admin.submit_ok(&mounting("/data/imagenet")).await;
    let j = eventually("a mount reason", || async {
        let j = e.admin.job(id).await;
        (j["job"]["pending_reason"]["kind"] == "mount").then_some(j)
    })
    .await;
    assert_eq!(j["job"]["pending_reason"]["message"], "mount: /data/imagenet not allowed on any node", "{j}");
    e.m.shutdown().await;
}

/// An agent that dies while starting a job's kernels comes back without the one it never
/// ran: that kernel is started again and the job goes on; a kernel that had run and is gone
/// still loses the job.
#[tokio::test]
async fn a_kernel_that_never_started_is_started_again_after_a_reconnect() {
    use berth_model::protocol::KernelReport;
    let e = start().await;
    let mut a = docker_agent(&e, "n1", &[]).await;
    let id = e.admin.submit_ok(&kernels_spec(2)).await;
    let mut keys = [start_parts(&a.expect_start().await).0, start_parts(&a.expect_start().await).0];
    keys.sort_by_key(|k| k.index);
    let started = || KernelEvent::Started { pid: 1, at: jiff::Timestamp::now() };
    a.send(AgentMessage::Kernel { key: keys[0], event: started() }).await;
    e.admin.wait_state(id, "RUNNING").await;

    // The agent restarts having run main only.
    drop(a);
    let mut a = Agent::connect(&e.m, "n1", node(), vec![KernelReport { key: keys[0], last: started() }]).await;
    let (k, _, env) = start_parts(&a.expect_start().await);
    assert_eq!(k, keys[1], "sub1 is started again");
    assert_eq!(env["BERTH_CLUSTER_ROLE"], "sub1");
    assert_eq!(e.admin.state(id).await, "RUNNING");

    // Now both run (reported when the agent registers, before its welcome); an agent that
    // comes back without sub1 after that loses the job.
    drop(a);
    let both = keys.iter().map(|&key| KernelReport { key, last: started() }).collect();
    let a = Agent::connect(&e.m, "n1", node(), both).await;
    drop(a);
    let _a = Agent::connect(&e.m, "n1", node(), vec![KernelReport { key: keys[0], last: started() }]).await;
    let d = e.admin.wait_state(id, "FAILED").await;
    assert!(d["job"]["reason"].as_str().unwrap().starts_with("kernel lost"), "{d}");
    e.m.shutdown().await;
}
