//! Quotas through the REST API with a fake agent: running limits hold in every pass and never
//! block other projects, pending limits hold under concurrent submits, and submits that could
//! never fit (or ask for too high a priority) are refused at once.

mod common;

use berth_model::protocol::{AgentMessage, KernelEvent, KernelOutcome, KernelReport, ManagerMessage};
use berth_model::{JobSpec, Topology};
use common::*;
use serde_json::json;

async fn user(e: &Env, name: &str) -> Client {
    let (s, v) = e.admin.post("/v1/admin/users", json!({"name": name})).await;
    assert_eq!(s, 201, "{v}");
    Client::new(&e.m.url, v["token"].as_str().unwrap())
}

async fn project(e: &Env, name: &str, members: &[&str]) {
    assert_eq!(e.admin.post("/v1/admin/projects", json!({"name": name})).await.0, 201);
    for m in members {
        assert_eq!(e.admin.post(&format!("/v1/admin/projects/{name}/members"), json!({"user": m})).await.0, 204);
    }
}

async fn put(c: &Client, path: &str, body: serde_json::Value) -> u16 {
    let r = c.http.put(format!("{}{path}", c.url)).bearer_auth(&c.token).json(&body).send().await.unwrap();
    r.status().as_u16()
}

fn gpu_job(project: &str) -> JobSpec {
    let mut s = spec(1.0, 1.0);
    s.project = Some(project.into());
    s
}

#[tokio::test]
async fn a_running_quota_holds_its_project_back_but_not_others() {
    let e = start().await;
    let bob = user(&e, "bob").await;
    let carol = user(&e, "carol").await;
    project(&e, "vision", &["bob"]).await;
    project(&e, "nlp", &["carol"]).await;
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/vision", json!({"gpu_milli": 1000})).await, 204);
    assert_eq!(put(&bob, "/v1/admin/quotas/project/vision", json!({"gpu_milli": 8000})).await, 403);
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/nope", json!({"gpu_milli": 1})).await, 404);
    assert_eq!(put(&e.admin, "/v1/admin/quotas/team/vision", json!({})).await, 400);
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/vision", json!({"gpus": 1})).await, 400, "unknown field");

    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 8, 32 << 30, 4), vec![]).await;
    let first = bob.submit_ok(&gpu_job("vision")).await;
    let second = bob.submit_ok(&gpu_job("vision")).await;
    let other = carol.submit_ok(&gpu_job("nlp")).await;
    let s1 = a.expect_start().await;
    let s2 = a.expect_start().await;
    let mut started = vec![start_key(&s1).job_id, start_key(&s2).job_id];
    started.sort();
    assert_eq!(started, vec![first, other], "the quota holds vision's second job, not nlp's");
    let j = eventually("a quota reason", || async {
        let j = bob.job(second).await;
        (j["job"]["pending_reason"]["kind"] == "quota").then_some(j)
    })
    .await;
    assert_eq!(j["job"]["pending_reason"]["message"], "quota: project vision gpu 1/1 in use");

    let (_, q) = bob.get("/v1/quotas").await;
    assert_eq!(q[0]["name"], "vision");
    assert_eq!((q[0]["used_gpu_milli"].as_u64(), q[0]["pending_jobs"].as_u64()), (Some(1000), Some(1)));
    assert_eq!(carol.get("/v1/quotas").await.1, json!([]), "carol is not in vision");

    // The first job ends: the second starts.
    let k = start_key(&s1);
    let k = if k.job_id == first { k } else { start_key(&s2) };
    let now = jiff::Timestamp::now();
    a.send(AgentMessage::Kernel { key: k, event: KernelEvent::Started { pid: 1, at: now } }).await;
    let end = KernelEvent::Finished {
        outcome: KernelOutcome::Succeeded,
        exit_code: Some(0),
        message: String::new(),
        at: now,
        usage: None,
        signal: None,
    };
    a.send(AgentMessage::Kernel { key: k, event: end }).await;
    assert_eq!(start_key(&a.expect_start().await).job_id, second);

    // Removing the quota is audited; removing it twice is 404.
    let del = |c: &Client| {
        let c = c.clone();
        async move {
            let r = c.http.delete(format!("{}/v1/admin/quotas/project/vision", c.url)).bearer_auth(&c.token).send();
            r.await.unwrap().status().as_u16()
        }
    };
    assert_eq!(del(&e.admin).await, 204);
    assert_eq!(del(&e.admin).await, 404);
    let (_, log) = e.admin.get("/v1/admin/audit").await;
    assert!(log.to_string().contains("quota.set") && log.to_string().contains("quota.remove"), "{log}");
    e.m.shutdown().await;
}

#[tokio::test]
async fn pending_limits_hold_under_concurrent_submits() {
    let e = start().await;
    let bob = user(&e, "bob").await;
    project(&e, "vision", &["bob"]).await;
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/vision", json!({"pending_jobs": 5})).await, 204);
    // No node: every accepted job stays pending.
    let submits = (0..40).map(|_| {
        let bob = bob.clone();
        tokio::spawn(async move { bob.submit(&gpu_job("vision")).await })
    });
    let mut codes = Vec::new();
    for s in submits {
        codes.push(s.await.unwrap());
    }
    let accepted = codes.iter().filter(|(c, _)| *c == 201).count();
    assert_eq!(accepted, 5, "{codes:?}");
    let refused = codes.iter().find(|(c, _)| *c != 201).unwrap();
    assert_eq!(refused.0, 429);
    assert_eq!(refused.1["error"], "quota: project vision pending jobs 5/5: wait for some to start or cancel some");
    // Jobs outside the project are not limited.
    assert_eq!(bob.submit(&spec(1.0, 0.0)).await.0, 201);
    e.m.shutdown().await;
}

#[tokio::test]
async fn hopeless_and_too_urgent_submits_are_refused_at_once() {
    let e = start().await;
    let bob = user(&e, "bob").await;
    let _a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 8, 32 << 30, 4), vec![]).await;
    assert_eq!(put(&e.admin, "/v1/admin/quotas/user/bob", json!({"gpu_milli": 2000, "max_priority": 5})).await, 204);
    let (s, v) = bob.submit(&spec(1.0, 4.0)).await;
    assert_eq!(s, 422, "{v}");
    assert!(v["error"].as_str().unwrap().contains("could never start within the quota of user bob"), "{v}");
    let mut urgent = spec(1.0, 0.0);
    urgent.priority = 9;
    let (s, v) = bob.submit(&urgent).await;
    assert_eq!(s, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--priority 5"), "{v}");
    urgent.priority = 5;
    assert_eq!(bob.submit(&urgent).await.0, 201);
    e.m.shutdown().await;
}

#[tokio::test]
async fn borrowed_capacity_is_reclaimed_for_a_job_within_its_quota() {
    borrowed_capacity_is_reclaimed(false).await;
}

/// Regression: the borrowed mark lived only in the manager's memory, so after a restart the
/// borrower counted as within its quota and was never preempted for the job that was.
#[tokio::test]
async fn borrowed_capacity_is_reclaimed_after_a_manager_restart() {
    borrowed_capacity_is_reclaimed(true).await;
}

async fn borrowed_capacity_is_reclaimed(restart: bool) {
    let e = start().await;
    let bob = user(&e, "bob").await;
    let carol = user(&e, "carol").await;
    project(&e, "vision", &["bob"]).await;
    project(&e, "nlp", &["carol"]).await;
    let borrow = json!({"gpu_milli": 1000, "borrow_gpu_milli": 1000});
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/vision", borrow).await, 204);
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/nlp", json!({"gpu_milli": 1000})).await, 204);
    let node = || Topology::synthetic(1, 8, 32 << 30, 2);
    let mut a = Agent::connect(&e.m, "n1", node(), vec![]).await;
    let first = bob.submit_ok(&gpu_job("vision")).await;
    let s1 = a.expect_start().await;
    assert_eq!(start_key(&s1).job_id, first);
    let second = bob.submit_ok(&gpu_job("vision")).await;
    let s2 = a.expect_start().await;
    assert_eq!(start_key(&s2).job_id, second, "the idle GPU is borrowed");
    let now = jiff::Timestamp::now();
    let started = |s: &ManagerMessage| KernelEvent::Started {
        pid: 1,
        at: if start_key(s).job_id == first { now - jiff::SignedDuration::from_secs(1) } else { now },
    };
    for s in [&s1, &s2] {
        a.send(AgentMessage::Kernel { key: start_key(s), event: started(s) }).await;
    }
    e.admin.wait_state(second, "RUNNING").await;

    let (m, bob, carol) = if restart {
        drop(a);
        e.m.shutdown().await;
        let m = berth_manager::start(config(e.dir.path(), std::time::Duration::from_secs(60))).await.unwrap();
        let running = [&s1, &s2].map(|s| KernelReport { key: start_key(s), last: started(s) }).to_vec();
        a = Agent::connect(&m, "n1", node(), running).await;
        let (bob, carol) = (Client::new(&m.url, &bob.token), Client::new(&m.url, &carol.token));
        (m, bob, carol)
    } else {
        (e.m, bob, carol)
    };

    // nlp's job is within its quota: vision's borrowed job is stopped for it and requeued.
    let theirs = carol.submit_ok(&gpu_job("nlp")).await;
    let stop = a.expect("the borrowed job's stop", |m| matches!(m, ManagerMessage::StopKernel { .. })).await;
    let ManagerMessage::StopKernel { key, .. } = stop else { panic!("not a stop: {stop:?}") };
    assert_eq!(key.job_id, second, "the borrower goes, never the job within its quota");
    let end = KernelEvent::Finished {
        outcome: KernelOutcome::Stopped,
        exit_code: Some(143),
        message: String::new(),
        at: now,
        usage: None,
        signal: None,
    };
    a.send(AgentMessage::Kernel { key, event: end }).await;
    assert_eq!(start_key(&a.expect_start().await).job_id, theirs);
    let d = bob.wait_state(second, "PENDING").await;
    assert!(d["job"]["reason"].as_str().unwrap().contains(&format!("preempted by job {theirs}")), "{d}");
    assert_eq!(bob.state(first).await, "RUNNING");
    m.shutdown().await;
}

/// Regression (issue 13): user names and project names shared one namespace. User `vision`,
/// not a member of project `vision`, had its jobs without `--project` held to project
/// `vision`'s quota and counted in its usage.
#[tokio::test]
async fn a_user_named_like_a_project_is_never_taken_for_it() {
    let e = start().await;
    let vision = user(&e, "vision").await;
    project(&e, "vision", &[]).await;
    assert_eq!(put(&e.admin, "/v1/admin/quotas/project/vision", json!({"gpu_milli": 1000})).await, 204);
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 8, 32 << 30, 4), vec![]).await;
    // The project's quota is in use by the project's own job ...
    let theirs = e.admin.submit_ok(&gpu_job("vision")).await;
    assert_eq!(start_key(&a.expect_start().await).job_id, theirs);
    // ... and user vision's job, which has no project, starts beside it.
    let mine = vision.submit_ok(&spec(1.0, 1.0)).await;
    let s = a.expect_start().await;
    assert_eq!(start_key(&s).job_id, mine, "user vision's job was held by project vision's quota");

    let (_, q) = e.admin.get("/v1/quotas").await;
    let line = q.as_array().unwrap().iter().find(|l| l["name"] == "vision" && l["kind"] == "project").unwrap();
    assert_eq!(line["used_gpu_milli"], 1000, "only the project's own job counts: {q}");
    let (_, u) = e.admin.get("/v1/usage?by=project").await;
    let names: Vec<&str> = u.as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["user:vision", "vision"], "jobs without a project count for their user's account: {u}");
    let (_, mine_only) = vision.get("/v1/usage?by=project").await;
    assert_eq!(
        mine_only.as_array().unwrap().len(),
        1,
        "user vision sees its own account, not project vision: {mine_only}"
    );
    assert_eq!(mine_only[0]["name"], "user:vision");
}
