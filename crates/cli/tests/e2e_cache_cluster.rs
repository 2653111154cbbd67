//! The dataset cache run by a manager: each agent reports the cache node on its machine
//! (`berth agent --cache-url`, here separate `berth cache serve` processes on ephemeral
//! ports), the manager pushes the member list and the buckets to every cache node; a lost
//! node's cache goes down on the others and its keys read as misses; a bucket created before a
//! cache node joins reaches it (origin and placement too), and a cache node restarted empty
//! gets both back; a job gets the cache node of the node it runs on.

mod cache_support;
mod support;

use berth_cache::{Maglev, Member};
use cache_support::{Node, wait_bucket};
use reqwest::StatusCode;
use serde_json::Value;
use support::Berth;

/// Waits until the node at `url` routes by exactly `want` (all of weight 1).
async fn wait_members(http: &reqwest::Client, url: &str, want: &[(&str, &str)]) {
    let want: Vec<(&str, &str, u32)> = want.iter().map(|(n, s)| (*n, *s, 1)).collect();
    cache_support::wait_routed(http, url, &want).await
}

fn obj(url: &str, key: &str) -> String {
    format!("{url}/v1/objects/ds/{key}")
}

#[tokio::test]
async fn the_manager_pushes_members_and_buckets_and_a_lost_nodes_keys_are_misses() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cache.key");
    let mut caches: Vec<Node> = (0..3).map(|i| Node::start(&dir.path().join(format!("c{i}")), &key, 0, &[])).collect();
    let urls: Vec<String> = caches.iter().map(|c| c.url.clone()).collect();
    let admin = cache_support::token(&key, &["--admin"]);
    let key_arg = key.display().to_string();
    let mut b = Berth::cluster_with(
        "",
        &["--cache-key-file", &key_arg, "--heartbeat-timeout", "4s"],
        &[("n1", &["--cache-url", &urls[0]]), ("n2", &["--cache-url", &urls[1]])],
    );
    let http = cache_support::client();
    for u in &urls[..2] {
        wait_members(&http, u, &[(&urls[0], "up"), (&urls[1], "up")]).await;
    }

    // a bucket made through the manager (the admin's berth credentials, no cache token)
    let out = b.ok(&["cache", "bucket", "create", "ds", "--projects", "vision", "--quota", "1GiB"]);
    assert!(out.contains("bucket `ds` on the manager"), "{out}");
    let out = b.ok(&["cache", "bucket", "list"]);
    assert!(out.lines().any(|l| l.contains("ds") && l.contains("vision") && l.contains("private")), "{out}");
    for u in &urls[..2] {
        wait_bucket(&http, u, &admin, "ds").await;
    }
    // a bucket placed per node, with an origin, through the manager too
    let out = b.ok(&["cache", "bucket", "create", "local", "--origin", "/shared/ds", "--placement", "node"]);
    assert!(out.contains("placement node") && out.contains("origin /shared/ds"), "{out}");
    let out = b.ok(&["cache", "bucket", "list"]);
    assert!(out.lines().any(|l| l.starts_with("local ") && l.contains(" node ") && l.contains("/shared/ds")), "{out}");
    // a user who is not an admin may not
    let alice = b.create_user("alice");
    let o = b.cli_as(&alice, &["cache", "bucket", "create", "mine"]);
    assert!(!o.status.success(), "a user created a bucket");

    // a third node joins later: it gets the members and the bucket made before it
    b.add_agent("n3", &["--cache-url", &urls[2]]);
    b.wait_nodes_ready(3);
    let all_up: Vec<(&str, &str)> = urls.iter().map(|u| (u.as_str(), "up")).collect();
    for u in &urls {
        wait_members(&http, u, &all_up).await;
    }
    let ds = wait_bucket(&http, &urls[2], &admin, "ds").await;
    assert_eq!(ds["quota"], 1u64 << 30);
    assert_eq!(ds["projects"], serde_json::json!(["vision"]));
    let local = wait_bucket(&http, &urls[2], &admin, "local").await;
    assert_eq!((&local["placement"], &local["origin"]), (&Value::from("node"), &Value::from("/shared/ds")));

    // a job gets the cache node on its own node
    let id = b.submit(&["--", "sh", "-c", "echo cache=$BERTH_CACHE_URL"]);
    let detail = b.wait_state(id, "SUCCEEDED");
    let node = detail["job"]["nodes"][0].as_str().unwrap().to_string();
    let i: usize = node[1..].parse::<usize>().unwrap() - 1;
    let log = b.ok(&["logs", &id.to_string()]);
    assert!(log.contains(&format!("cache={}", urls[i])), "job on {node}: {log}");

    // objects through node 0, spread over the three owners
    let keys: Vec<String> = (0..60).map(|i| format!("s3://host/ds//train/{i:03}.jpg")).collect();
    for k in &keys {
        let r = http.put(obj(&urls[0], k)).bearer_auth(&admin).body(k.clone()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    // route with the table the nodes use (the manager numbers members by join order)
    let v: Value = http.get(format!("{}/v1/members", urls[0])).send().await.unwrap().json().await.unwrap();
    let before = Maglev::new(serde_json::from_value::<Vec<Member>>(v["members"].clone()).unwrap());
    let on_n2: Vec<&String> =
        keys.iter().filter(|k| before.owner("ds", k.as_bytes()).unwrap().name == urls[1]).collect();
    assert!(!on_n2.is_empty(), "no key landed on n2's cache");

    // n2's machine dies (agent and cache node): lost after the heartbeat timeout, its cache
    // goes down on the others
    b.kill_agent(1);
    caches[1].kill9();
    for u in [&urls[0], &urls[2]] {
        wait_members(&http, u, &[(&urls[0], "up"), (&urls[1], "down"), (&urls[2], "up")]).await;
    }
    let v: Value = http
        .get(format!("{}/v1/cache/members", b.url))
        .bearer_auth(b.admin_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let n2 = v.as_array().unwrap().iter().find(|m| m["node"] == "n2").unwrap().clone();
    assert_eq!(n2["state"], "down", "{v}");
    assert_eq!(n2["url"], urls[1].as_str());

    // its keys are misses through either node, the rest still hit; never an error
    for via in [&urls[0], &urls[2]] {
        for k in &keys {
            let r = http.get(obj(via, k)).bearer_auth(&admin).send().await.unwrap();
            let want = if on_n2.contains(&k) { StatusCode::NOT_FOUND } else { StatusCode::OK };
            assert_eq!(r.status(), want, "{k} through {via}");
        }
    }
    // and its keys have new owners: a write is stored, then read back
    let k = on_n2[0];
    let r = http.put(obj(&urls[2], k)).bearer_auth(&admin).body("again").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = http.get(obj(&urls[0], k)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "again");

    // n2's cache node comes back empty (new disk, same address): the manager's periodic
    // reconcile gives it the list (itself down while its agent is) and the buckets
    let port = caches[1].port();
    caches[1] = Node::start(&dir.path().join("c1-new"), &key, port, &[]);
    wait_members(&http, &urls[1], &[(&urls[0], "up"), (&urls[1], "down"), (&urls[2], "up")]).await;
    wait_bucket(&http, &urls[1], &admin, "ds").await;
}
