//! The manager's side of the dataset cache, with closures in place of the CLI's (tokens are
//! plain strings, pushes are recorded): agents report their cache node, the manager pushes
//! the members (up, then down once the node is lost) and the buckets, kernels get the cache
//! of their node, and the list and buckets survive a restart. Admins delete buckets (gone from
//! the next push), weigh members over their agents' weights, and remove members for good; each
//! member is pushed with a join sequence number that only goes up and survives restarts.

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
        usage: Arc::new(|_: String, _: String, _: String, _: Vec<u8>| {
            Box::pin(async { Ok(berth_model::api::CachePrefixUsage::default()) })
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

/// A manager on `dir` whose cache pushes go to `pushes`.
async fn start_cached(dir: &std::path::Path, pushes: &Pushes) -> berth_manager::ManagerHandle {
    let mut cfg = config(dir, Duration::from_secs(5));
    cfg.cache = Some(cache_env(pushes));
    berth_manager::start(cfg).await.unwrap()
}

fn member_state(body: &Value, name: &str) -> Option<String> {
    body["members"].as_array()?.iter().find(|m| m["name"] == name).map(|m| m["state"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn agents_cache_nodes_become_members_and_buckets_reach_them() {
    let dir = tempfile::tempdir().unwrap();
    let pushes: Pushes = Arc::default();
    let m = start_cached(dir.path(), &pushes).await;
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
    let ds = json!({"quota": 1024, "projects": ["vision"], "origin": "/shared/ds", "placement": "node"});
    assert_eq!(put(&admin.token, "ds", ds).await, 200);
    assert_eq!(put(&admin.token, "Bad_Name", json!({})).await, 400);
    for origin in ["shared/ds", "/shared/../ds", "/shared/ds/", "/shared/./ds"] {
        assert_eq!(put(&admin.token, "bad-origin", json!({"origin": origin})).await, 400, "{origin}");
    }
    assert_eq!(put(&admin.token, "bad-placement", json!({"placement": "everywhere"})).await / 100, 4);
    let (_, bob) = admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    assert_eq!(put(bob["token"].as_str().unwrap(), "other", json!({})).await, 403);
    let has_ds = |b: &Value| b["buckets"].as_array().is_some_and(|a| a.iter().any(|x| x["name"] == "ds"));
    let body = pushed(&pushes, "http://c2:7171", "bucket ds pushed", has_ds).await;
    let want = json!({"name": "ds", "public": false, "quota": 1024, "projects": ["vision"], "origin": "/shared/ds",
        "placement": "node"});
    assert_eq!(body["buckets"][0], want);
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
    // Regression (issue 13): a job without --project got a token for a project named like its
    // user (user `vision` then read project `vision`'s private bucket).
    assert_eq!(env["BERTH_CACHE_TOKEN"], format!("job-token:job-{id}:"), "a job without a project names none");

    // n1 goes silent: lost after the timeout, its cache down everywhere; n2 keeps beating
    drop(a1);
    let t0 = std::time::Instant::now();
    loop {
        a2.send(AgentMessage::Heartbeat { at: jiff::Timestamp::now(), usage: Vec::new(), gpus: Vec::new() }).await;
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
        json!([{"node": "n1", "url": "http://c1:7171", "state": "down", "weight": 1, "weight_set": false, "seq": 1},
            {"node": "n2", "url": "http://c2:7171", "state": "up", "weight": 1, "weight_set": false, "seq": 2}])
    );

    // a restart keeps the members (n2 is up until the timeout, as for its jobs) and buckets
    m.shutdown().await;
    let m = start_cached(dir.path(), &pushes).await;
    let admin = Client::new(&m.url, &admin.token);
    let (_, v) = admin.get("/v1/cache/members").await;
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    let (_, v) = admin.get("/v1/admin/cache/buckets").await;
    assert_eq!(v, json!([want]), "origin and placement survive a restart");
    m.shutdown().await;
}

async fn put(c: &Client, path: &str, body: Value) -> (u16, Value) {
    let r = c.http.put(format!("{}{path}", c.url)).bearer_auth(&c.token).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn bucket_names(body: &Value) -> Vec<String> {
    body["buckets"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap().to_string()).collect()
}

/// The pushed members as (name, weight, seq), in the order sent.
fn pushed_members(body: &Value) -> Vec<(String, u64, u64)> {
    body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_string(), m["weight"].as_u64().unwrap(), m["seq"].as_u64().unwrap()))
        .collect()
}

async fn audited(admin: &Client, action: &str, target: &str) {
    let (_, audit) = admin.get("/v1/admin/audit").await;
    let hit = audit.as_array().unwrap().iter().any(|e| e["action"] == action && e["target"] == target);
    assert!(hit, "no {action} {target} in {audit}");
}

#[tokio::test]
async fn a_deleted_bucket_leaves_the_pushes_and_stays_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let pushes: Pushes = Arc::default();
    let m = start_cached(dir.path(), &pushes).await;
    let admin = Client::new(&m.url, &m.bootstrap.clone().unwrap().token);
    let _a = Agent::connect_with(&m, "n1", Topology::synthetic(1, 4, 16 << 30, 0), vec![], &[], Some("http://c1:7171"))
        .await;
    for name in ["ds", "keep"] {
        assert_eq!(put(&admin, &format!("/v1/admin/cache/buckets/{name}"), json!({})).await.0, 200);
    }
    let both = |b: &Value| bucket_names(b) == ["ds", "keep"];
    pushed(&pushes, "http://c1:7171", "both buckets pushed", both).await;

    let (_, bob) = admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    let bob = Client::new(&m.url, bob["token"].as_str().unwrap());
    assert_eq!(bob.delete("/v1/admin/cache/buckets/ds").await.0, 403);
    let (s, _) = admin.delete("/v1/admin/cache/buckets/ds").await;
    assert_eq!(s, 204);
    let (s, v) = admin.delete("/v1/admin/cache/buckets/ds").await;
    assert_eq!(s, 404);
    assert!(v["error"].as_str().unwrap().contains("no bucket `ds`"), "{v}");
    // the nodes are told to delete it by name (they delete nothing the push merely omits)
    let gone = |b: &Value| bucket_names(b) == ["keep"] && b["deleted_buckets"] == json!(["ds"]);
    pushed(&pushes, "http://c1:7171", "the push naming ds as deleted", gone).await;
    audited(&admin, "cache.bucket.delete", "ds").await;
    let (_, v) = admin.get("/v1/admin/cache/buckets").await;
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    let (_, api) = admin.get("/openapi.json").await;
    for (path, method) in [
        ("/v1/admin/cache/buckets/{name}", "delete"),
        ("/v1/admin/cache/members/{node}", "put"),
        ("/v1/admin/cache/members/{node}", "delete"),
        ("/v1/admin/cache/members/{node}/add", "post"),
    ] {
        assert!(api["paths"][path][method].is_object(), "openapi lacks {method} {path}");
    }

    m.shutdown().await;
    let m = start_cached(dir.path(), &pushes).await;
    let admin = Client::new(&m.url, &admin.token);
    let (_, v) = admin.get("/v1/admin/cache/buckets").await;
    assert_eq!(v, json!([{"name": "keep", "public": false, "quota": null, "projects": [], "placement": "spread"}]));
    // the deletion is remembered across the restart, and forgotten when ds is created again
    let _a = Agent::connect_with(&m, "n1", Topology::synthetic(1, 4, 16 << 30, 0), vec![], &[], Some("http://c1:7171"))
        .await;
    pushed(&pushes, "http://c1:7171", "ds still deleted after a restart", gone).await;
    assert_eq!(put(&admin, "/v1/admin/cache/buckets/ds", json!({})).await.0, 200);
    let back = |b: &Value| bucket_names(b) == ["ds", "keep"] && b["deleted_buckets"] == json!([]);
    pushed(&pushes, "http://c1:7171", "ds created again", back).await;
    m.shutdown().await;
}

#[tokio::test]
async fn members_are_weighed_removed_for_good_and_numbered_in_join_order() {
    let dir = tempfile::tempdir().unwrap();
    let pushes: Pushes = Arc::default();
    let m = start_cached(dir.path(), &pushes).await;
    let admin = Client::new(&m.url, &m.bootstrap.clone().unwrap().token);
    let topo = || Topology::synthetic(1, 4, 16 << 30, 0);
    let _a1 = Agent::connect_cache(&m, "n1", topo(), vec![], &[], Some("http://c1:7171"), Some(3)).await;
    let a2 = Agent::connect_cache(&m, "n2", topo(), vec![], &[], Some("http://c2:7171"), None).await;

    // the agents' weights, and seq in join order: the list is sent in that order
    let body = pushed(&pushes, "http://c1:7171", "both members", |b| pushed_members(b).len() == 2).await;
    let first = pushed_members(&body);
    assert_eq!((first[0].0.as_str(), first[0].1), ("http://c1:7171", 3));
    assert_eq!((first[1].0.as_str(), first[1].1), ("http://c2:7171", 1));
    let (s1, s2) = (first[0].2, first[1].2);
    assert!(s2 > s1, "{first:?}");

    // an admin's weight wins over the agent's; checked, admin only, audited
    let (s, v) = put(&admin, "/v1/admin/cache/members/n2", json!({"weight": 5})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["weight"].as_u64(), v["weight_set"].as_bool(), v["state"].as_str()),
        (Some(5), Some(true), Some("up"))
    );
    for bad in [0, 1001] {
        let (s, v) = put(&admin, "/v1/admin/cache/members/n2", json!({"weight": bad})).await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(v["error"].as_str().unwrap().contains("from 1 to 1000"), "{v}");
    }
    let (s, v) = put(&admin, "/v1/admin/cache/members/nope", json!({"weight": 2})).await;
    assert_eq!(s, 404);
    assert!(v["error"].as_str().unwrap().contains("berth cache members"), "{v}");
    let (_, bob) = admin.post("/v1/admin/users", json!({"name": "bob"})).await;
    let bob = Client::new(&m.url, bob["token"].as_str().unwrap());
    assert_eq!(put(&bob, "/v1/admin/cache/members/n2", json!({"weight": 2})).await.0, 403);
    assert_eq!(bob.delete("/v1/admin/cache/members/n2").await.0, 403);
    let weighed = |b: &Value| pushed_members(b).iter().any(|m| m.0 == "http://c2:7171" && m.1 == 5);
    pushed(&pushes, "http://c1:7171", "n2's cache pushed with weight 5", weighed).await;
    audited(&admin, "cache.member.set", "n2").await;

    // removed: pushed as `removed` (its place kept, its slots served by the others) and sent
    // nothing, and stays so when its agent registers again (with another URL, recorded)
    let (s, v) = admin.delete("/v1/admin/cache/members/n2").await;
    assert_eq!((s, v["state"].as_str(), v["seq"].as_u64()), (200, Some("removed"), Some(s2)));
    audited(&admin, "cache.member.remove", "n2").await;
    let only_c1 = |b: &Value| {
        let ms = b["members"].as_array().unwrap();
        ms.len() == 2 && ms[0]["state"] == "up" && ms[1]["state"] == "removed"
    };
    pushed(&pushes, "http://c1:7171", "n2's cache pushed as removed", only_c1).await;
    drop(a2);
    let a2 = Agent::connect_cache(&m, "n2", topo(), vec![], &[], Some("http://c2b:7171"), Some(2)).await;
    let (_, v) = admin.get("/v1/cache/members").await;
    assert_eq!(v[1]["state"], "removed", "{v}");
    assert_eq!(v[1]["url"], "http://c2b:7171", "{v}");
    let n = pushes.lock().unwrap().len();
    put(&admin, "/v1/admin/cache/buckets/poke", json!({})).await;
    let body =
        pushed(&pushes, "http://c1:7171", "a push after the re-registration", |b| bucket_names(b) == ["poke"]).await;
    assert!(only_c1(&body), "{body}");
    assert!(pushes.lock().unwrap()[n..].iter().all(|(u, _, _)| u == "http://c1:7171"), "pushed to a removed member");
    drop(a2);

    // a restart keeps weights, removal and seq
    m.shutdown().await;
    let m = start_cached(dir.path(), &pushes).await;
    let admin = Client::new(&m.url, &admin.token);
    let (_, v) = admin.get("/v1/cache/members").await;
    assert_eq!((v[0]["node"].as_str(), v[0]["weight"].as_u64(), v[0]["seq"].as_u64()), (Some("n1"), Some(3), Some(s1)));
    assert_eq!((v[1]["state"].as_str(), v[1]["weight"].as_u64()), (Some("removed"), Some(5)), "{v}");
    let _a2 = Agent::connect_cache(&m, "n2", topo(), vec![], &[], Some("http://c2b:7171"), Some(2)).await;
    let (_, v) = admin.get("/v1/cache/members").await;
    assert_eq!(v[1]["state"], "removed", "a re-registration after a restart does not add it back: {v}");

    // added back at the URL last reported (a new URL: a new seq, given when it was first
    // reported); a new node comes after it
    let (s, v) = admin.post("/v1/admin/cache/members/n2/add", json!({})).await;
    assert_eq!((s, v["state"].as_str(), v["url"].as_str()), (200, Some("up"), Some("http://c2b:7171")), "{v}");
    let s_back = v["seq"].as_u64().unwrap();
    assert!(s_back > s2, "a new URL, a new seq: {v}");
    audited(&admin, "cache.member.add", "n2").await;
    let _a3 = Agent::connect_with(&m, "n3", topo(), vec![], &[], Some("http://c3:7171")).await;
    let body = pushed(&pushes, "http://c2b:7171", "three members", |b| pushed_members(b).len() == 3).await;
    let list = pushed_members(&body);
    let names: Vec<&str> = list.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(names, ["http://c1:7171", "http://c2b:7171", "http://c3:7171"], "in seq order: {list:?}");
    assert_eq!(list[1], ("http://c2b:7171".to_string(), 5, s_back), "the admin's weight is kept");
    assert!(list[2].2 > s_back, "{list:?}");

    // removed and added back at the same URL: same seq, so its keys move back exactly
    admin.delete("/v1/admin/cache/members/n1").await;
    let (_, v) = admin.post("/v1/admin/cache/members/n1/add", json!({})).await;
    assert_eq!((v["state"].as_str(), v["seq"].as_u64()), (Some("up"), Some(s1)), "{v}");
    m.shutdown().await;
}
