//! Tenancy through the REST API: projects and shared jobs, token lifetimes (revoke, expiry,
//! disabled users) taking effect at once, admin-only routes, and the audit log.

mod common;

use berth_model::JobSpec;
use common::*;
use serde_json::{Value, json};

async fn user(e: &Env, name: &str) -> Client {
    let (s, v) = e.admin.post("/v1/admin/users", json!({"name": name})).await;
    assert_eq!(s, 201, "{v}");
    Client::new(&e.m.url, v["token"].as_str().unwrap())
}

fn in_project(project: &str, shared: bool) -> JobSpec {
    let mut s = JobSpec::command(["true"]);
    s.project = Some(project.into());
    s.shared = shared;
    s
}

#[tokio::test]
async fn project_members_see_shared_jobs_and_nothing_else() {
    let e = start().await;
    let (bob, carol, dave) = (user(&e, "bob").await, user(&e, "carol").await, user(&e, "dave").await);
    assert_eq!(e.admin.post("/v1/admin/projects", json!({"name": "vision"})).await.0, 201);
    assert_eq!(e.admin.post("/v1/admin/projects", json!({"name": "vision"})).await.0, 409);
    assert_eq!(e.admin.post("/v1/admin/projects", json!({"name": "../x"})).await.0, 400);
    for u in ["bob", "carol"] {
        assert_eq!(e.admin.post("/v1/admin/projects/vision/members", json!({"user": u})).await.0, 204);
    }
    // A user that does not exist is bad input (the body's), a missing project is a 404.
    assert_eq!(e.admin.post("/v1/admin/projects/vision/members", json!({"user": "zed"})).await.0, 422);
    assert_eq!(e.admin.post("/v1/admin/projects/nope/members", json!({"user": "bob"})).await.0, 404);
    assert_eq!(bob.get("/v1/whoami").await.1["projects"], json!(["vision"]));

    // dave is not a member: he cannot submit to the project.
    let (s, v) = dave.submit(&in_project("vision", true)).await;
    assert_eq!(s, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("add-member vision dave"), "{v}");
    let (s, _) = bob.submit(&in_project("nope", false)).await;
    assert_eq!(s, 403);

    let shared = bob.submit_ok(&in_project("vision", true)).await;
    let private = bob.submit_ok(&in_project("vision", false)).await;
    // carol sees the shared one (list, show, logs) but may not cancel it; not the private one.
    let seen: Vec<i64> = carol.list("").await.iter().map(|j| j.id).collect();
    assert_eq!(seen, vec![shared]);
    assert_eq!(carol.get(&format!("/v1/jobs/{shared}")).await.0, 200);
    assert_eq!(carol.get(&format!("/v1/jobs/{private}")).await.0, 404);
    let (s, v) = carol.post(&format!("/v1/jobs/{shared}/cancel"), json!({})).await;
    assert_eq!(s, 403, "{v}");
    // dave sees neither; the finished-jobs path (the store's filter) agrees.
    assert!(dave.list("").await.is_empty());
    assert_eq!(dave.get(&format!("/v1/jobs/{shared}")).await.0, 404);
    assert_eq!(bob.post(&format!("/v1/jobs/{shared}/cancel"), json!({})).await.0, 200);
    assert_eq!(bob.post(&format!("/v1/jobs/{private}/cancel"), json!({})).await.0, 200);
    let seen: Vec<i64> = carol.list("?all=true").await.iter().map(|j| j.id).collect();
    assert_eq!(seen, vec![shared]);
    assert!(dave.list("?all=true").await.is_empty());

    // Regression (tasks/cancel answered an ended array's state before asking whose it was):
    // carol may not cancel bob's shared array's tasks, ended or not, and learns nothing more.
    let mut sweep = in_project("vision", true);
    sweep.array = Some("1-3".parse().unwrap());
    let sweep = bob.submit_ok(&sweep).await;
    assert_eq!(bob.post(&format!("/v1/jobs/{sweep}/cancel"), json!({})).await.0, 200);
    for tasks in ["2", "99"] {
        let (s, v) = carol.post(&format!("/v1/jobs/{sweep}/tasks/cancel"), json!({"tasks": tasks})).await;
        assert_eq!(s, 403, "{v}");
    }
    assert_eq!(dave.post(&format!("/v1/jobs/{sweep}/tasks/cancel"), json!({"tasks": "99"})).await.0, 404);

    // Removing carol from the project hides the job from her at once.
    assert_eq!(e.admin.delete("/v1/admin/projects/vision/members/carol").await.0, 204);
    assert_eq!(carol.get(&format!("/v1/jobs/{shared}")).await.0, 404);
    assert_eq!(e.admin.delete("/v1/admin/projects/vision/members/carol").await.0, 404);
    let (_, projects) = bob.get("/v1/projects").await;
    assert_eq!(projects[0]["members"], json!(["bob"]));
    assert_eq!(carol.get("/v1/projects").await.1, json!([]));
    e.m.shutdown().await;
}

#[tokio::test]
async fn revoked_expired_and_disabled_tokens_stop_working_at_once() {
    let e = start_manual().await;
    let bob = user(&e, "bob").await;
    assert_eq!(bob.get("/v1/whoami").await.0, 200);

    let (s, t) = bob.post("/v1/tokens", json!({"label": "laptop", "expires_in": "30d"})).await;
    assert_eq!(s, 201, "{t}");
    let laptop = Client::new(&e.m.url, t["token"].as_str().unwrap());
    assert_eq!(laptop.get("/v1/whoami").await.1["user"], "bob");
    let (_, list) = bob.get("/v1/tokens").await;
    let ids: Vec<&str> = list.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&t["id"].as_str().unwrap()), "{list}");
    assert!(!list.to_string().contains(t["token"].as_str().unwrap()), "the secret is never listed");
    assert_eq!(list.as_array().unwrap().iter().filter(|t| t["current"] == true).count(), 1);

    // Revoke: the very next request fails, with the same answer as an unknown token.
    let (s, v) = bob.delete(&format!("/v1/tokens/{}", t["id"].as_str().unwrap())).await;
    assert_eq!(s, 200, "{v}");
    assert!(v["revoked_at"].is_string());
    let (s, v) = laptop.get("/v1/whoami").await;
    assert_eq!(s, 401);
    assert_eq!(v, Client::new(&e.m.url, "made-up").get("/v1/whoami").await.1);
    // Another user's token id is not found (not forbidden).
    let carol = user(&e, "carol").await;
    let (_, ct) = carol.post("/v1/tokens", json!({})).await;
    assert_eq!(bob.delete(&format!("/v1/tokens/{}", ct["id"].as_str().unwrap())).await.0, 404);
    assert_eq!(bob.delete("/v1/tokens/zz").await.0, 404);
    assert_eq!(bob.get("/v1/tokens?all=true").await.0, 403);
    assert_eq!(e.admin.get("/v1/tokens?all=true").await.0, 200);

    // Expiry: a token that expires in a second works, then stops.
    let (_, short) = bob.post("/v1/tokens", json!({"expires_in": "1s"})).await;
    let short = Client::new(&e.m.url, short["token"].as_str().unwrap());
    assert_eq!(short.get("/v1/whoami").await.0, 200);
    e.clock.advance(std::time::Duration::from_millis(999));
    assert_eq!(short.get("/v1/whoami").await.0, 200, "a millisecond before its expiry");
    e.clock.advance(std::time::Duration::from_millis(1));
    let (s, v) = short.get("/v1/whoami").await;
    assert_eq!(s, 401);
    assert!(v["error"].as_str().unwrap().contains("expired"), "{v}");
    assert_eq!(bob.post("/v1/tokens", json!({"expires_in": "soon"})).await.0, 400);

    // Disabling a user stops all their tokens at once; enabling brings them back.
    assert_eq!(bob.post("/v1/admin/users/carol/disable", json!({})).await.0, 403);
    assert_eq!(e.admin.post("/v1/admin/users/bob/disable", json!({})).await.0, 204);
    assert_eq!(bob.get("/v1/whoami").await.0, 401);
    assert_eq!(e.admin.post("/v1/admin/users/bob/enable", json!({})).await.0, 204);
    assert_eq!(bob.get("/v1/whoami").await.0, 200);
    assert_eq!(e.admin.post("/v1/admin/users/alice/disable", json!({})).await.0, 400, "not yourself");
    assert_eq!(e.admin.post("/v1/admin/users/zed/disable", json!({})).await.0, 404);

    let (_, users) = e.admin.get("/v1/admin/users").await;
    let names: Vec<&str> = users.as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob", "carol"]);

    // The audit log has the admin actions and token events, newest first; users cannot read it.
    assert_eq!(bob.get("/v1/admin/audit").await.0, 403);
    let (_, log) = e.admin.get("/v1/admin/audit?limit=100").await;
    let actions: Vec<&str> = log.as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    for a in [
        "user.create",
        "token.create",
        "token.revoke",
        "auth.revoked-token",
        "auth.expired-token",
        "user.disable",
        "user.enable",
    ] {
        assert!(actions.contains(&a), "{a} missing from {actions:?}");
    }
    assert_eq!(actions[0], "user.enable", "newest first");
    assert_eq!(e.admin.get("/v1/admin/audit?since=1h").await.1.as_array().unwrap().len(), actions.len());
    assert_eq!(e.admin.get("/v1/admin/audit?since=later").await.0, 400);
    e.m.shutdown().await;
}

#[tokio::test]
async fn queues_limited_to_projects_and_a_maximum_time_limit() {
    let e = start().await;
    let bob = user(&e, "bob").await;
    let carol = user(&e, "carol").await;
    assert_eq!(e.admin.post("/v1/admin/projects", json!({"name": "vision"})).await.0, 201);
    assert_eq!(e.admin.post("/v1/admin/projects/vision/members", json!({"user": "bob"})).await.0, 204);
    let put = |body: serde_json::Value| {
        let c = e.admin.clone();
        async move {
            let r = c.http.put(format!("{}/v1/queues/gpu", c.url)).bearer_auth(&c.token).json(&body).send().await;
            let r = r.unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (s, v) = put(json!({"projects": ["vision"], "max_time_limit": "2h", "default_time_limit": "3h"})).await;
    assert_eq!(s, 400, "a default above the maximum: {v}");
    let (s, v) = put(json!({"projects": ["vision"], "max_time_limit": "2h", "default_time_limit": "1h"})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        (v["policy"]["projects"].clone(), v["policy"]["max_time_limit_secs"].as_u64()),
        (json!(["vision"]), Some(7200))
    );

    let in_gpu = |project: Option<&str>, limit: Option<u64>| {
        let mut s = JobSpec::command(["true"]);
        s.queue = Some("gpu".into());
        s.project = project.map(Into::into);
        s.time_limit_secs = limit;
        s
    };
    let (s, v) = bob.submit(&in_gpu(None, None)).await;
    assert_eq!(s, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("submit with --project vision"), "{v}");
    let (s, v) = carol.submit(&in_gpu(None, None)).await;
    assert!(s == 403 && v["error"].as_str().unwrap().contains("ask an admin"), "{v}");
    let (s, v) = bob.submit(&in_gpu(Some("vision"), Some(3 * 3600))).await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("use --time-limit 2h or less"), "{v}");
    // No limit given: the queue's default (1 h) becomes the job's real limit.
    let id = bob.submit_ok(&in_gpu(Some("vision"), None)).await;
    assert_eq!(bob.job(id).await["spec"]["time_limit_secs"], 3600);
    // Opening the queue again.
    let (s, v) = put(json!({"projects": [], "max_time_limit": "none"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(carol.submit(&in_gpu(None, Some(10 * 3600))).await.0, 201);
    e.m.shutdown().await;
}

/// Regression (issue 13): a pending reason said `priority: waiting behind job 3`, where job 3
/// was another user's private job. Reasons name the job ahead by its queue position.
#[tokio::test]
async fn pending_reasons_never_name_a_job_the_user_cannot_see() {
    use berth_model::Topology;
    let e = start().await;
    strict_fifo(&e.admin).await;
    let (carol, bob) = (user(&e, "carol").await, user(&e, "bob").await);
    let mut a = Agent::connect(&e.m, "n1", Topology::synthetic(1, 8, 32 << 30, 0), vec![]).await;
    e.admin.submit_ok(&spec(8.0, 0.0)).await;
    a.expect_start().await;
    let head = carol.submit_ok(&spec(8.0, 0.0)).await;
    let behind = bob.submit_ok(&spec(1.0, 0.0)).await;
    let j = eventually("a priority reason", || async {
        let j = bob.job(behind).await;
        (j["job"]["pending_reason"]["kind"] == "priority").then_some(j)
    })
    .await;
    let message = j["job"]["pending_reason"]["message"].as_str().unwrap().to_string();
    assert!(!message.contains(&head.to_string()), "bob's reason names carol's private job {head}: {message}");
    assert_eq!(message, "priority: waiting behind the job at position 1");
    assert_eq!(bob.get(&format!("/v1/jobs/{head}")).await.0, 404, "carol's job stays invisible to bob");
}

#[tokio::test]
async fn a_flood_with_a_dead_token_writes_one_audit_row_per_minute_with_the_count() {
    let e = start_manual().await;
    let bob = user(&e, "bob").await;
    let (_, t) = bob.post("/v1/tokens", json!({"label": "laptop"})).await;
    let revoked = Client::new(&e.m.url, t["token"].as_str().unwrap());
    assert_eq!(bob.delete(&format!("/v1/tokens/{}", t["id"].as_str().unwrap())).await.0, 200);
    let (_, t) = bob.post("/v1/tokens", json!({"expires_in": "1s"})).await;
    let expired = Client::new(&e.m.url, t["token"].as_str().unwrap());
    e.clock.advance(std::time::Duration::from_secs(1));
    for _ in 0..300 {
        assert_eq!(revoked.get("/v1/whoami").await.0, 401);
        assert_eq!(expired.get("/v1/whoami").await.0, 401);
    }
    let rows = |log: &Value, action: &str| -> Vec<String> {
        let rows = log.as_array().unwrap().iter().filter(|a| a["action"] == action);
        rows.map(|a| a["detail"].as_str().unwrap().to_string()).collect()
    };
    // Every use wrote a row before (600 here): now one row opens the token's minute (a second
    // one only if this loop spanned a minute's end).
    let (_, log) = e.admin.get("/v1/admin/audit?limit=1000").await;
    for action in ["auth.revoked-token", "auth.expired-token"] {
        let r = rows(&log, action);
        assert!((1..=2).contains(&r.len()), "{action}: {r:?}");
    }
    // Nothing is lost: at shutdown the counted uses are written, and the rows add up to 300.
    let dir = e.dir;
    e.m.shutdown().await;
    let m = berth_manager::start(common::config(dir.path(), std::time::Duration::from_secs(60))).await.unwrap();
    let admin = Client::new(&m.url, &e.admin.token);
    let (_, log) = admin.get("/v1/admin/audit?limit=1000").await;
    for action in ["auth.revoked-token", "auth.expired-token"] {
        let r = rows(&log, action);
        let counted: u64 =
            r.iter().map(|d| d.split_whitespace().find_map(|w| w.parse::<u64>().ok()).map_or(1, |n| n)).sum();
        assert_eq!(counted, 300, "{action}: {r:?}");
    }
    m.shutdown().await;
}
