//! The manager's side of the dataset cache, with closures in place of the CLI's (tokens are
//! plain strings, pushes are recorded): agents report their cache node, the manager pushes
//! the members (up, then down once the node is lost) and the buckets, kernels get the cache
//! of their node, and the list and buckets survive a restart.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_manager::cache_env::CacheEnv;
use berth_model::Topology;
use berth_model::protocol::{AgentMessage, ManagerMessage};
use common::*;
use serde_json::{Value, json};

type Pushes = Arc<Mutex<Vec<(String, String, Value)>>>;

fn cache_env(pushes: &Pushes) -> CacheEnv {
    let p = pushes.clone();
    CacheEnv {
        url: Some("http://fallback:7171".into()),
        mint: Arc::new(|sub: &str, projects: &[String], _exp: i64| format!("job-token:{sub}:{}", projects.join(","))),
        mint_admin: Arc::new(|_exp: i64| "admin-token".to_string()),
        push: Arc::new(move |url: String, token: String, body: Vec<u8>| {
            p.lock().unwrap().push((url, token, serde_json::from_slice(&body).unwrap()));
            Box::pin(async { Ok(()) })
        }),
    }
}

/// Waits for a push to `url` whose body satisfies `f`.
async fn pushed(pushes: &Pushes, url: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let (p, url) = (pushes.clone(), url.to_string());
    eventually(what, || {
        let hit = p.lock().unwrap().iter().rev().find(|(u, _, b)| *u == url && f(b)).map(|(_, t, b)| {
            assert_eq!(t, "admin-token");
            b.clone()
        });
        async move { hit }
    })
    .await
}

fn member_state(body: &Value, name: &str) -> Option<String> {
    body["members"].as_array()?.iter().find(|m| m["name"] == name).map(|m| m["state"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn agents_cache_nodes_become_members_and_buckets_reach_them() {
    let dir = tempfile::tempdir().unwrap();
    let pushes: Pushes = Arc::default();
    let mut cfg = config(dir.path(), Duration::from_secs(5));
    cfg.cache = Some(cache_env(&pushes));
    let m = berth_manager::start(cfg).await.unwrap();
    let admin = Client::new(&m.url, &m.bootstrap.clone().unwrap().token);
    let topo = || Topology::synthetic(1, 4, 16 << 30, 0);
    let mut a1 = Agent::connect_with(&m, "n1", topo(), vec![], &[], Some("http://c1:7171/")).await;
    let mut a2 = Agent::connect_with(&m, "n2", topo(), vec![], &[], Some("http://c2:7171")).await;
    let both_up = |b: &Value| {
        member_state(b, "http://c1:7171").as_deref() == Some("up")
            && member_state(b, "http://c2:7171").as_deref() == Some("up")
    };
    pushed(&pushes, "http://c1:7171", "both members up on c1", both_up).await;
    pushed(&pushes, "http://c2:7171", "both members up on c2", both_up).await;

    // buckets: admin only, checked names, pushed to every member
    let put = |token: &str, name: &str, body: Value| {
        let (url, token, name) = (m.url.clone(), token.to_string(), name.to_string());
        async move {
            let r = reqwest::Client::new()
                .put(format!("{url}/v1/admin/cache/buckets/{name}"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    };
    assert_eq!(put(&admin.token, "ds", json!({"quota": 1024, "projects": ["vision"]})).await, 200);
    assert_eq!(put(&admin.token, "Bad_Name", json!({})).await, 400);
    let (_, bob) = admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    assert_eq!(put(bob["token"].as_str().unwrap(), "other", json!({})).await, 403);
    let has_ds = |b: &Value| b["buckets"].as_array().is_some_and(|a| a.iter().any(|x| x["name"] == "ds"));
    let body = pushed(&pushes, "http://c2:7171", "bucket ds pushed", has_ds).await;
    assert_eq!(body["buckets"][0], json!({"name": "ds", "public": false, "quota": 1024, "projects": ["vision"]}));
    let (s, audit) = admin.get("/v1/admin/audit").await;
    assert_eq!(s, 200);
    assert!(audit.to_string().contains("cache.bucket.set"), "{audit}");

    // a kernel gets the cache of the node it runs on and a token of its job
    let id = admin.submit_ok(&spec(1.0, 0.0)).await;
    let (start, cache) = tokio::select! {
        s = a1.expect_start() => (s, "http://c1:7171"),
        s = a2.expect_start() => (s, "http://c2:7171"),
    };
    let ManagerMessage::StartKernel { env, .. } = start else { unreachable!() };
    assert_eq!(env["BERTH_CACHE_URL"], cache);
    assert!(env["BERTH_CACHE_TOKEN"].starts_with(&format!("job-token:job-{id}:")), "{env:?}");

    // n1 goes silent: lost after the timeout, its cache down everywhere; n2 keeps beating
    drop(a1);
    let t0 = std::time::Instant::now();
    loop {
        a2.send(AgentMessage::Heartbeat { at: jiff::Timestamp::now() }).await;
        let last = pushes.lock().unwrap().iter().rev().find(|(u, _, _)| u == "http://c2:7171").map(|p| p.2.clone());
        if last.is_some_and(|b| member_state(&b, "http://c1:7171").as_deref() == Some("down")) {
            break;
        }
        assert!(t0.elapsed() < WAIT, "n1's cache never went down");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (_, v) = admin.get("/v1/cache/members").await;
    assert_eq!(
        v,
        json!([{"node": "n1", "url": "http://c1:7171", "state": "down"}, {"node": "n2", "url": "http://c2:7171", "state": "up"}])
    );

    // a restart keeps the members (n2 is up until the timeout, as for its jobs) and buckets
    m.shutdown().await;
    let mut cfg = config(dir.path(), Duration::from_secs(5));
    cfg.cache = Some(cache_env(&pushes));
    let m = berth_manager::start(cfg).await.unwrap();
    let admin = Client::new(&m.url, &admin.token);
    let (_, v) = admin.get("/v1/cache/members").await;
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    let (_, v) = admin.get("/v1/admin/cache/buckets").await;
    assert_eq!(v[0]["name"], "ds");
    m.shutdown().await;
}
