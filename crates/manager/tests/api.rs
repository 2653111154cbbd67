//! REST API integration tests: a real manager on an ephemeral port, driven with reqwest.

mod common;

use std::time::Duration;

use berth_model::JobSpec;
use common::*;
use serde_json::json;

#[tokio::test]
async fn health_and_openapi_need_no_token() {
    let e = start().await;
    let anon = Client::new(&e.m.url, "");
    let (s, v) = anon.get("/v1/health").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("ok")));
    let (s, v) = anon.get("/openapi.json").await;
    assert_eq!(s, 200);
    for p in ["/v1/jobs", "/v1/jobs/{id}", "/v1/jobs/{id}/cancel", "/v1/jobs/{id}/logs", "/v1/nodes", "/v1/whoami"] {
        assert!(v["paths"][p].is_object(), "openapi lacks {p}");
    }
    assert!(v["components"]["schemas"]["JobView"].is_object());
    e.m.shutdown().await;
}

#[tokio::test]
async fn auth_401_and_whoami() {
    let e = start().await;
    let (s, v) = Client::new(&e.m.url, "").get("/v1/whoami").await;
    assert_eq!(s, 401);
    assert!(v["error"].as_str().unwrap().contains("missing API token"), "{v}");
    assert_eq!(v["reason"], "token_missing", "{v}");
    let (s, v) = Client::new(&e.m.url, "nope").get("/v1/jobs").await;
    assert_eq!(s, 401);
    assert!(v["error"].as_str().unwrap().contains("invalid API token"), "{v}");
    assert_eq!(v["reason"], "token_invalid", "{v}");
    let (_, v) = e.admin.get("/v1/no/such/route").await;
    assert_eq!(v.get("reason"), None, "no reason where no caller needs one: {v}");
    let (s, v) = e.admin.get("/v1/whoami").await;
    assert_eq!((s, v["user"].as_str(), v["role"].as_str()), (200, Some("alice"), Some("admin")));
    let (s, _) = e.admin.get("/v1/no/such/route").await;
    assert_eq!(s, 404);
    e.m.shutdown().await;
}

#[tokio::test]
async fn submit_list_show_cancel() {
    let e = start().await;
    let mut sp = JobSpec::command(["echo", "hi"]);
    sp.name = Some("hello".into());
    let id = e.admin.submit_ok(&sp).await;
    assert_eq!(id, 1);
    let list = e.admin.list("").await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].state, berth_model::JobState::Pending);
    assert!(list[0].pending_reason.is_some());

    let d = e.admin.job(id).await;
    assert_eq!(d["spec"]["name"], "hello");
    assert_eq!(d["transitions"][0]["to"], "PENDING");
    assert_eq!(d["transitions"][0]["reason"], "submitted");

    let (s, v) = e.admin.post(&format!("/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("CANCELLED")), "{v}");
    let (s, v) = e.admin.post(&format!("/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(s, 409);
    assert_eq!(v["error"], "job 1 already finished (CANCELLED)");
    assert!(e.admin.list("").await.is_empty(), "finished jobs are hidden by default");
    let all = e.admin.list("?all=true").await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].reason.as_deref(), Some("cancelled by alice"));
    let d = e.admin.job(id).await;
    assert_eq!(d["transitions"].as_array().unwrap().len(), 2);
    assert!(d["job"]["ended_at"].is_string());

    // Newest first, state filter, limit.
    let a = e.admin.submit_ok(&sp).await;
    let b = e.admin.submit_ok(&sp).await;
    let ids: Vec<_> = e.admin.list("").await.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![b, a]);
    assert_eq!(e.admin.list("?limit=1").await.len(), 1);
    assert_eq!(e.admin.list("?state=cancelled").await.len(), 1);
    assert_eq!(e.admin.list("?state=PENDING").await.len(), 2);
    // Several states, ids, and a time window (sacct's): in memory and in the store alike.
    assert_eq!(e.admin.list("?state=PENDING,CANCELLED&all=true").await.len(), 3);
    let listed: Vec<_> = e.admin.list("?ids=1,3,99").await.iter().map(|j| j.id).collect();
    assert_eq!(listed, vec![b]);
    let listed: Vec<_> = e.admin.list("?ids=1,3,99&all=true").await.iter().map(|j| j.id).collect();
    assert_eq!(listed, vec![b, id]);
    let now = jiff::Timestamp::now().as_second();
    let later = format!("?all=true&since={}", now + 3600);
    assert_eq!(e.admin.list(&later).await.len(), 2, "unfinished jobs have not ended before any time");
    let before = format!("?all=true&until={}", now - 3600);
    assert!(e.admin.list(&before).await.is_empty(), "nothing was submitted before an hour ago");
    assert!(e.admin.list("?until=2000-01-01T00:00:00Z").await.is_empty());
    assert_eq!(e.admin.list("?all=true&since=2000-01-01T00:00:00Z").await.len(), 3);
    e.m.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_400_json_and_store_untouched() {
    let e = start().await;
    let http = &e.admin.http;
    let r = http
        .post(format!("{}/v1/jobs", e.m.url))
        .bearer_auth(&e.admin.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("malformed JSON"), "{v}");

    // An oversized body is 413, with a JSON error and nothing stored.
    let big = json!({"spec": {"command": ["echo", "x".repeat(2 << 20)]}});
    let (s, v) = e.admin.post("/v1/jobs", big).await;
    assert_eq!(s, 413, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("request body too large"), "{v}");
    // A tampered token is 401 and says nothing about why.
    let (s, v) = Client::new(&e.m.url, &format!("{}x", e.admin.token)).get("/v1/jobs").await;
    assert_eq!((s, v["error"].as_str()), (401, Some("invalid API token: check BERTH_TOKEN or your credentials file")));

    let (s, v) = e.admin.post("/v1/jobs", json!({"spec": {"command": []}})).await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("empty command"), "{v}");
    let (s, v) = e.admin.post("/v1/jobs", json!({"spec": {"command": ["x"], "nodes": "two"}})).await;
    assert_eq!(s, 400, "{v}");
    let mut sp = JobSpec::command(["x"]);
    sp.queue = Some("gpu".into());
    let (s, v) = e.admin.submit(&sp).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"], "unknown queue `gpu`: known queues are default");
    let (s, _) = e.admin.get("/v1/jobs?state=sleeping").await;
    assert_eq!(s, 400);
    let (s, _) = e.admin.get("/v1/jobs/abc").await;
    assert_eq!(s, 400);
    let (s, v) = e.admin.get("/v1/jobs/7").await;
    assert_eq!((s, v["error"].as_str()), (404, Some("job 7 not found")));
    let (s, _) = e.admin.post("/v1/jobs/7/cancel", json!({})).await;
    assert_eq!(s, 404);

    assert!(e.admin.list("?all=true").await.is_empty(), "rejected submits leave no job");
    assert_eq!(e.admin.submit_ok(&JobSpec::command(["ok"])).await, 1, "rejected submits use no id");
    e.m.shutdown().await;
}

#[tokio::test]
async fn users_see_and_touch_only_their_jobs() {
    let e = start().await;
    let (s, bob) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    assert_eq!(s, 201, "{bob}");
    assert_eq!(bob["role"], "user");
    let (s, _) = e.admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    assert_eq!(s, 409);
    let (s, carol) = e.admin.post("/v1/admin/users", json!({"name": "carol"})).await;
    assert_eq!(s, 201);
    let bob = Client::new(&e.m.url, bob["token"].as_str().unwrap());
    let carol = Client::new(&e.m.url, carol["token"].as_str().unwrap());

    let id = bob.submit_ok(&JobSpec::command(["x"])).await;
    assert_eq!(bob.list("").await.len(), 1);
    assert!(carol.list("").await.is_empty());
    assert_eq!(e.admin.list("").await.len(), 1, "admins see all jobs");
    // Someone else's job answers exactly like a job that does not exist.
    let (s, v) = carol.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(s, 404);
    assert_eq!(v["error"], "job 1 not found");
    assert_eq!(carol.get("/v1/jobs/99").await, (404, json!({"error": "job 99 not found"})));
    let (s, v) = carol.post(&format!("/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(s, 404);
    assert_eq!(v["error"], "job 1 not found");
    let (s, _) = carol.get(&format!("/v1/jobs/{id}/logs")).await;
    assert_eq!(s, 404);
    let (s, _) = carol.post("/v1/admin/users", json!({"name": "dave"})).await;
    assert_eq!(s, 403);
    let (s, _) = carol.post("/v1/admin/join-tokens", json!({})).await;
    assert_eq!(s, 403);
    let (s, v) = e.admin.post("/v1/admin/join-tokens", json!({})).await;
    assert_eq!(s, 200);
    assert_eq!(v["token"].as_str().unwrap().len(), 64);
    let (s, v) = e.admin.post(&format!("/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("CANCELLED")));
    assert_eq!(bob.job(id).await["job"]["reason"], "cancelled by alice");
    e.m.shutdown().await;
}

#[tokio::test]
async fn restart_keeps_jobs_history_tokens() {
    let e = start().await;
    let first_join = e.m.join_token.clone();
    let a = e.admin.submit_ok(&JobSpec::command(["a"])).await;
    let b = e.admin.submit_ok(&JobSpec::command(["b"])).await;
    e.admin.post(&format!("/v1/jobs/{a}/cancel"), json!({})).await;
    let dir = e.dir;
    e.m.shutdown().await;

    let m = berth_manager::start(config(dir.path(), Duration::from_secs(60))).await.unwrap();
    assert!(m.bootstrap.is_none(), "bootstrap only on the first start");
    assert_eq!(m.join_token, first_join, "join token survives restarts");
    let admin = Client::new(&m.url, &e.admin.token);
    let live: Vec<_> = admin.list("").await.iter().map(|j| j.id).collect();
    assert_eq!(live, vec![b]);
    let d = admin.job(a).await;
    let reasons: Vec<_> = d["transitions"].as_array().unwrap().iter().map(|t| t["reason"].clone()).collect();
    assert_eq!(reasons, vec![json!("submitted"), json!("cancelled by alice")]);
    assert_eq!(admin.submit_ok(&JobSpec::command(["c"])).await, 3);
    let (s, v) = admin.post(&format!("/v1/jobs/{b}/cancel"), json!({})).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("CANCELLED")));
    m.shutdown().await;
}

#[tokio::test]
async fn config_file_queues_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[queue]]\nname = \"default\"\nhead_of_line = \"sometimes\"\n").unwrap();
    let mut c = config(&dir.path().join("data"), Duration::from_secs(60));
    c.config_file = Some(bad);
    let err = format!("{:#}", berth_manager::start(c.clone()).await.err().expect("bad config fails"));
    assert!(err.contains("skip-after-N"), "{err}");

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[[queue]]\nname = \"default\"\n[[queue]]\nname = \"gpu\"\nhead_of_line = \"skip-after-3\"\n",
    )
    .unwrap();
    c.config_file = Some(good);
    let m = berth_manager::start(c).await.unwrap();
    let admin = Client::new(&m.url, &m.bootstrap.clone().unwrap().token);
    let mut sp = JobSpec::command(["x"]);
    sp.queue = Some("gpu".into());
    admin.submit_ok(&sp).await;
    sp.queue = Some("cpu".into());
    let (s, v) = admin.submit(&sp).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"], "unknown queue `cpu`: known queues are default, gpu");
    m.shutdown().await;
}

/// `--signal` counts back from the time limit: a job without one (on a queue that sets none)
/// is refused saying how to fix it; with one, the spec keeps the signal.
#[tokio::test]
async fn a_warning_signal_needs_a_time_limit() {
    let e = start().await;
    let mut sp = JobSpec::command(["x"]);
    sp.signal = Some("USR2@90".parse().unwrap());
    let (s, v) = e.admin.submit(&sp).await;
    assert_eq!(s, 400, "{v}");
    let err = v["error"].as_str().unwrap();
    assert!(err.contains("--signal USR2@90") && err.contains("add --time-limit"), "{v}");
    let (s, v) = e
        .admin
        .post("/v1/jobs", json!({"spec": {"command": ["x"], "time_limit_secs": 60, "signal": {"signal": 0}}}))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("out of range"), "{v}");
    sp.time_limit_secs = Some(600);
    let id = e.admin.submit_ok(&sp).await;
    let (s, v) = e.admin.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["spec"]["signal"], json!({"signal": 12, "before_secs": 90}), "{v}");
    e.m.shutdown().await;
}

#[tokio::test]
async fn what_the_spec_refuses_is_refused() {
    let e = start().await;
    // A struct body given as an array: serde reads `[]` as a struct with every field defaulted,
    // and `POST /v1/tokens` created a token from it.
    let (s, v) = e.admin.post("/v1/tokens", json!([])).await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("a JSON object"), "{v}");
    assert_eq!(e.admin.post("/v1/admin/users", json!(["bob"])).await.0, 400);
    // Integer ranges the spec states: int32 query parameters, int64 body numbers.
    for q in ["/v1/jobs?limit=2147483648", "/v1/admin/audit?limit=10001", "/v1/admin/audit?limit=0"] {
        let (s, v) = e.admin.get(q).await;
        assert_eq!(s, 400, "{q}: {v}");
        assert!(v["error"].as_str().unwrap().contains("`limit`"), "{v}");
    }
    assert_eq!(e.admin.get("/v1/jobs?limit=2147483647").await.0, 200);
    assert_eq!(e.admin.get("/v1/jobs/1/logs?offset=9223372036854775808").await.0, 400);
    let (s, v) = e
        .admin
        .post("/v1/jobs", json!({"spec": {"command": ["true"], "time_limit_secs": 9223372036854775808u64}}))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("int64"), "{v}");
    // `50.0` is an integer in JSON: accepted where an integer is wanted.
    let (s, v) = e.admin.put("/v1/admin/quotas/user/alice", json!({"gpu_milli": 2000.0})).await;
    assert_eq!(s, 204, "{v}");
    assert_eq!(e.admin.put("/v1/admin/quotas/user/alice", json!({"gpu_milli": 2000.5})).await.0, 400);
    // An empty state is no state.
    assert_eq!(e.admin.get("/v1/jobs?state=").await.0, 400);
    assert_eq!(e.admin.get("/v1/jobs?state=PENDING,").await.0, 400);
    for q in ["since=yesterday", "until=2026-13-01T00:00:00Z", "since=99999999999999999", "ids=1,x", "ids=0", "ids="] {
        let (s, v) = e.admin.get(&format!("/v1/jobs?{q}")).await;
        assert_eq!(s, 400, "{q}: {v}");
    }
    let many = (1..=1001).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let (s, v) = e.admin.get(&format!("/v1/jobs?ids={many}")).await;
    assert_eq!((s, v["error"].as_str()), (400, Some("`ids` names 1001 jobs: at most 1000 at once")));
    // Regression (the fuzz run): a drain body of whitespace alone is no JSON and was accepted.
    let drain = |body: &'static str| {
        e.admin
            .http
            .post(format!("{}/v1/nodes/nowhere/drain", e.admin.url))
            .bearer_auth(&e.admin.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    assert_eq!(drain("\r").await.unwrap().status().as_u16(), 400);
    assert_eq!(drain("null").await.unwrap().status().as_u16(), 404, "a null body is no body: on to the node");
    assert_eq!(e.admin.get("/v1/jobs?state=pending").await.0, 200);
    e.m.shutdown().await;
}
