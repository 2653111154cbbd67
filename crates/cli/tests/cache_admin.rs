//! An admin's cache commands on the real binary: `berth cache bucket delete` takes the
//! bucket's objects off every node's disk, memory and `/metrics` (straight on the nodes with
//! a cache admin token, or through the manager's pushes), a node killed with a deletion half
//! done finishes it when it starts again, and `berth cache members` / `member set|remove|add`
//! weigh members and take them out of (and back into) the list the cache nodes route by; a
//! bucket placed per node, with an origin, is created, listed and warmed onto one node.

mod cache_support;
mod support;

use std::path::Path;
use std::time::Instant;

use cache_support::{Node, bucket, cli, client, ok, routed, token, wait_routed};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Berth, PATIENCE};

fn obj(url: &str, bucket: &str, key: &str) -> String {
    format!("{url}/v1/objects/{bucket}/{key}")
}

/// Object files on a node's disk.
fn object_files(data: &Path) -> usize {
    std::fs::read_dir(data.join("objects"))
        .unwrap()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).map(|f| f.count()).unwrap_or(0))
        .sum()
}

async fn metrics(http: &reqwest::Client, url: &str) -> String {
    http.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap()
}

async fn put_objects(http: &reqwest::Client, via: &str, admin: &str, bucket: &str, n: usize) {
    for i in 0..n {
        let key = format!("s3://host/{bucket}//train/{i:03}.jpg");
        let r = http.put(obj(via, bucket, &key)).bearer_auth(admin).body(key.clone()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED, "{}", r.text().await.unwrap());
    }
}

/// GET and PUT of a deleted bucket answer 404 naming the fix, and its counters are gone.
async fn assert_gone(http: &reqwest::Client, url: &str, admin: &str, name: &str) {
    let key = format!("s3://host/{name}//train/000.jpg");
    let r = http.get(obj(url, name, &key)).bearer_auth(admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let msg = r.text().await.unwrap();
    assert!(msg.contains(&format!("berth cache bucket create {name}")), "{msg}");
    let r = http.put(obj(url, name, &key)).bearer_auth(admin).body("x").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let m = metrics(http, url).await;
    assert!(!m.contains(&format!("bucket=\"{name}\"")), "{url} still counts bucket {name}:\n{m}");
}

#[tokio::test]
async fn a_bucket_deleted_on_the_nodes_takes_its_objects_and_counters_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let mut nodes: Vec<Node> = (0..2).map(|i| Node::start(&dir.path().join(format!("d{i}")), &key, 0, &[])).collect();
    let admin = token(&key, &["--admin"]);
    let user = token(&key, &["--projects", "vision"]);
    let http = client();
    let members: Vec<Value> = nodes.iter().map(|n| json!({"name": n.url})).collect();
    for n in &nodes {
        let r = http.put(format!("{}/v1/members", n.url)).bearer_auth(&admin).json(&members).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    ok(cli(&nodes[0].url, &admin, &["bucket", "create", "ds"]));
    ok(cli(&nodes[0].url, &admin, &["bucket", "create", "other"]));
    put_objects(&http, &nodes[0].url, &admin, "ds", 40).await;
    put_objects(&http, &nodes[0].url, &admin, "other", 10).await;
    // read through both nodes, so small objects are in their memory tiers too
    for n in &nodes {
        let key = "s3://host/ds//train/001.jpg";
        assert_eq!(http.get(obj(&n.url, "ds", key)).bearer_auth(&admin).send().await.unwrap().status(), 200);
    }
    assert_eq!(nodes.iter().map(|n| object_files(&n.data)).sum::<usize>(), 50);
    assert!(metrics(&http, &nodes[1].url).await.contains("bucket=\"ds\""));
    // only buckets named as deleted are deleted: a plain list, the manager's form without
    // buckets, or with a list that omits one (a manager on a fresh database) deletes none
    let only_ds = json!({"members": members, "buckets": [{"name": "ds"}]});
    for body in [json!(members), json!({"members": members}), only_ds] {
        let r = http.put(format!("{}/v1/members", nodes[0].url)).bearer_auth(&admin).json(&body).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(routed_buckets(&http, &nodes[0].url, &admin).await.len(), 2);
    }
    assert_eq!(nodes.iter().map(|n| object_files(&n.data)).sum::<usize>(), 50);

    // only admins delete
    let o = cli(&nodes[0].url, &user, &["bucket", "delete", "ds"]);
    assert!(!o.status.success(), "a project token deleted a bucket");
    assert!(String::from_utf8_lossy(&o.stderr).contains("admin"), "{}", String::from_utf8_lossy(&o.stderr));

    let out = ok(cli(&nodes[1].url, &admin, &["bucket", "delete", "ds"]));
    assert!(out.contains("bucket `ds` deleted on 2 cache nodes: 40 objects"), "{out}");
    assert_eq!(nodes.iter().map(|n| object_files(&n.data)).sum::<usize>(), 10, "only `other`'s files are left");
    for n in &nodes {
        assert_gone(&http, &n.url, &admin, "ds").await;
    }
    let o = cli(&nodes[0].url, &admin, &["bucket", "delete", "ds"]);
    assert!(!o.status.success(), "deleted twice");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("bucket `ds` does not exist: create it with `berth cache bucket create ds`"), "{err}");
    let list = ok(cli(&nodes[0].url, &admin, &["bucket", "list"]));
    assert!(!list.contains("ds") && list.contains("other"), "{list}");
    let r = http.delete(format!("{}/v1/buckets/nope", nodes[0].url)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // created again: empty, and usable
    bucket(&http, &nodes[0].url, &admin, "ds", json!({})).await;
    let key0 = "s3://host/ds//train/000.jpg";
    let r = http.get(obj(&nodes[0].url, "ds", key0)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "an object of the deleted bucket came back");

    // node 1 is killed after a deletion of `other` was marked but before its files went (the
    // state a kill -9 between the two steps leaves): its restart finishes the deletion
    let port = nodes[1].port();
    let data = nodes[1].data.clone();
    nodes[1].kill9();
    let left = object_files(&data);
    assert!(left > 0, "node 1 holds none of `other`'s objects");
    std::fs::write(data.join("deleting.json"), br#"["other"]"#).unwrap();
    nodes[1] = Node::start(&data, &key, port, &[]);
    let http = client(); // none of the dead node's pooled connections
    assert_eq!(object_files(&data), 0, "the restart left files of the deleted bucket");
    let v = routed_buckets(&http, &nodes[1].url, &admin).await;
    assert!(v.iter().all(|b| b["name"] != "other"), "{v:?}");
    assert!(!metrics(&http, &nodes[1].url).await.contains("bucket=\"other\""));
}

async fn wait_no_bucket(http: &reqwest::Client, url: &str, admin: &str, name: &str) {
    let t0 = Instant::now();
    loop {
        let v: Value =
            http.get(format!("{url}/v1/buckets")).bearer_auth(admin).send().await.unwrap().json().await.unwrap();
        if v.as_array().unwrap().iter().all(|b| b["name"] != name) {
            return;
        }
        assert!(t0.elapsed() < PATIENCE, "{url} still has bucket {name}: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `berth cache members` as a table: node → its row's columns.
fn members_table(b: &Berth) -> Vec<Vec<String>> {
    let out = b.ok(&["cache", "members"]);
    out.lines().skip(1).map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

#[tokio::test]
async fn the_manager_deletes_buckets_and_weighs_and_removes_members_on_real_cache_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cache.key");
    let caches: Vec<Node> = (0..2).map(|i| Node::start(&dir.path().join(format!("c{i}")), &key, 0, &[])).collect();
    let urls: Vec<String> = caches.iter().map(|c| c.url.clone()).collect();
    let admin = token(&key, &["--admin"]);
    let key_arg = key.display().to_string();
    let mut b = Berth::cluster_with(
        "",
        &["--cache-key-file", &key_arg],
        &[("n1", &["--cache-url", &urls[0], "--cache-weight", "3"]), ("n2", &["--cache-url", &urls[1]])],
    );
    let http = client();
    let both = [(urls[0].as_str(), "up", 3), (urls[1].as_str(), "up", 1)];
    for u in &urls {
        wait_routed(&http, u, &both).await;
    }
    let rows = members_table(&b);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][..4], ["n1", urls[0].as_str(), "up", "3"], "{rows:?}");
    assert_eq!(rows[1][..4], ["n2", urls[1].as_str(), "up", "1"], "{rows:?}");
    // the agents registered in either order
    let (seq1, seq2): (u64, u64) = (rows[0][4].parse().unwrap(), rows[1][4].parse().unwrap());
    assert_ne!(seq1, seq2, "{rows:?}");

    // a bucket deleted through the manager: gone from every node, objects and all
    b.ok(&["cache", "bucket", "create", "ds"]);
    b.ok(&["cache", "bucket", "create", "keep"]);
    for u in &urls {
        let t0 = Instant::now();
        while routed_buckets(&http, u, &admin).await.len() < 2 {
            assert!(t0.elapsed() < PATIENCE, "{u} never got both buckets");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    put_objects(&http, &urls[0], &admin, "ds", 30).await;
    put_objects(&http, &urls[1], &admin, "keep", 5).await;
    assert_eq!(caches.iter().map(|c| object_files(&c.data)).sum::<usize>(), 35);
    let alice = b.create_user("alice");
    assert!(!b.cli_as(&alice, &["cache", "bucket", "delete", "ds"]).status.success(), "a user deleted a bucket");
    let out = b.ok(&["cache", "bucket", "delete", "ds"]);
    assert!(out.contains("bucket `ds` deleted on the manager"), "{out}");
    for u in &urls {
        wait_no_bucket(&http, u, &admin, "ds").await;
        assert_gone(&http, u, &admin, "ds").await;
    }
    // a pushed deletion drops the index first and unlinks the files after: wait for them
    let t0 = Instant::now();
    while caches.iter().map(|c| object_files(&c.data)).sum::<usize>() != 5 {
        assert!(t0.elapsed() < PATIENCE, "ds's files are never unlinked");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let o = b.cli(&["cache", "bucket", "delete", "ds"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no bucket `ds`"), "{}", String::from_utf8_lossy(&o.stderr));

    // weights: the admin's wins over the agent's; out of range is refused with the range
    let o = b.cli(&["cache", "member", "set", "n2", "--weight", "0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 to 1000"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = b.cli(&["cache", "member", "set", "n9", "--weight", "2"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no cache member `n9`"));
    let out = b.ok(&["cache", "member", "set", "n2", "--weight", "2"]);
    assert!(out.contains("weight 2"), "{out}");
    for u in &urls {
        wait_routed(&http, u, &[(urls[0].as_str(), "up", 3), (urls[1].as_str(), "up", 2)]).await;
    }
    assert_eq!(members_table(&b)[1][3..5], ["2", "(set)"]);

    // removed: its slots go to the others (it keeps its place in the table), also after its
    // agent registers again
    let before_removal = table(&http, &urls[0]).await;
    let out = b.ok(&["cache", "member", "remove", "n2"]);
    assert!(out.contains("removed"), "{out}");
    let removed = [(urls[0].as_str(), "up", 3), (urls[1].as_str(), "removed", 2)];
    wait_routed(&http, &urls[0], &removed).await;
    b.kill_agent(1);
    b.add_agent("n2", &["--cache-url", &urls[1]]);
    // the manager says so once the new agent has registered
    let t0 = Instant::now();
    loop {
        let log = std::fs::read_to_string(b.home.path().join("manager.stderr")).unwrap();
        if log.contains("berth cache member add n2") {
            break;
        }
        assert!(t0.elapsed() < PATIENCE, "no warning about the removed member:\n{log}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(members_table(&b)[1][2], "removed");
    let mut want: Vec<_> = removed.iter().map(|(n, s, w)| (n.to_string(), s.to_string(), *w)).collect();
    want.sort();
    assert_eq!(routed(&http, &urls[0]).await, want);

    // added back with its weight and its seq (same URL): exactly its keys move back
    b.ok(&["cache", "member", "add", "n2"]);
    for u in &urls {
        wait_routed(&http, u, &[(urls[0].as_str(), "up", 3), (urls[1].as_str(), "up", 2)]).await;
    }
    let rows = members_table(&b);
    let seq_back: u64 = rows[1][5].parse().unwrap();
    assert_eq!(seq_back, seq2, "{rows:?}");
    let restored = table(&http, &urls[0]).await;
    assert_eq!(moved(&before_removal, &restored), 0, "adding n2 back did not restore the table");

    // a brand-new cache node joins (a later seq): exactly its weighted share of the table
    // moves, all of it to the newcomer
    let c3 = Node::start(&dir.path().join("c2"), &key, 0, &[]);
    b.add_agent("n3", &["--cache-url", &c3.url]);
    let three = [(urls[0].as_str(), "up", 3), (urls[1].as_str(), "up", 2), (c3.url.as_str(), "up", 1)];
    for u in urls.iter().chain([&c3.url]) {
        wait_routed(&http, u, &three).await;
    }
    let grown = table(&http, &urls[0]).await;
    let mine = grown.slot_owners().filter(|o| *o == c3.url).count();
    assert_eq!(moved(&restored, &grown), mine);
    assert!(restored.slot_owners().zip(grown.slot_owners()).all(|(a, b)| a == b || b == c3.url));
    let share = grown.table_size() as f64 / 6.0;
    assert!((mine as f64 - share).abs() <= 1.0, "{mine} slots vs a share of {share}");
    let audit = b.ok(&["admin", "audit"]);
    for action in ["cache.bucket.delete", "cache.member.set", "cache.member.remove", "cache.member.add"] {
        assert!(audit.contains(action), "{action} not audited:\n{audit}");
    }
}

/// The routing table of the node at `url`, built from its own member list.
async fn table(http: &reqwest::Client, url: &str) -> berth_cache::Maglev {
    let v: Value = http.get(format!("{url}/v1/members")).send().await.unwrap().json().await.unwrap();
    berth_cache::Maglev::new(serde_json::from_value(v["members"].clone()).unwrap())
}

/// How many slots of two tables of one size have different owners.
fn moved(a: &berth_cache::Maglev, b: &berth_cache::Maglev) -> usize {
    a.slot_owners().zip(b.slot_owners()).filter(|(x, y)| x != y).count()
}

async fn routed_buckets(http: &reqwest::Client, url: &str, admin: &str) -> Vec<Value> {
    let v: Value = http.get(format!("{url}/v1/buckets")).bearer_auth(admin).send().await.unwrap().json().await.unwrap();
    v.as_array().unwrap().clone()
}

/// `bucket create --origin --placement` straight on the nodes, `bucket list` showing both,
/// a relative origin refused before anything is sent, and `warm` of a node-placed bucket
/// loading everything onto the node `--url` names.
#[tokio::test]
async fn a_node_placed_bucket_with_an_origin_is_created_listed_and_warmed_on_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let nodes: Vec<Node> = (0..2).map(|i| Node::start(&dir.path().join(format!("d{i}")), &key, 0, &[])).collect();
    let admin = token(&key, &["--admin"]);
    let http = client();
    let members: Vec<Value> = nodes.iter().map(|n| json!({"name": n.url})).collect();
    for n in &nodes {
        let r = http.put(format!("{}/v1/members", n.url)).bearer_auth(&admin).json(&members).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }

    let o = cli(&nodes[0].url, &admin, &["bucket", "create", "ds", "--origin", "relative/path"]);
    assert_eq!(o.status.code(), Some(2), "a usage mistake");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("relative/path") && err.contains("absolute directory path"), "{err}");
    let o = cli(&nodes[0].url, &admin, &["bucket", "create", "ds", "--placement", "everywhere"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("spread"), "names the placements");
    assert!(ok(cli(&nodes[0].url, &admin, &["bucket", "list"])).lines().count() <= 1, "nothing was created");

    let out =
        ok(cli(&nodes[0].url, &admin, &["bucket", "create", "ds", "--origin", "/shared/ds", "--placement", "node"]));
    assert!(out.contains("on 2 cache nodes") && out.contains("placement node"), "{out}");
    for n in &nodes {
        let out = ok(cli(&n.url, &admin, &["bucket", "list"]));
        assert!(out.contains("PLACEMENT") && out.contains("ORIGIN"), "{out}");
        let row = out.lines().find(|l| l.starts_with("ds ")).unwrap_or_else(|| panic!("{out}"));
        assert!(row.contains("node") && row.contains("/shared/ds"), "{row}");
    }

    let ds = dir.path().join("dataset");
    std::fs::create_dir_all(&ds).unwrap();
    for i in 0..20 {
        std::fs::write(ds.join(format!("{i}.bin")), vec![i as u8; 100]).unwrap();
    }
    let out = ok(cli(&nodes[1].url, &admin, &["warm", ds.to_str().unwrap(), "--bucket", "ds"]));
    assert!(out.contains("20 files stored") && out.contains(&nodes[1].url), "{out}");
    let usage = |url: String| {
        let (http, admin) = (http.clone(), admin.clone());
        async move {
            let r = http.get(format!("{url}/v1/buckets/ds/usage")).bearer_auth(&admin).send().await.unwrap();
            let v: Value = r.json().await.unwrap();
            (v["objects"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
        }
    };
    assert_eq!(usage(nodes[1].url.clone()).await, (20, 2000), "all on the node --url named");
    assert_eq!(usage(nodes[0].url.clone()).await, (0, 0));
    let out = ok(cli(&nodes[1].url, &admin, &["warm", ds.to_str().unwrap(), "--bucket", "ds"]));
    assert!(out.contains("20 already cached"), "{out}");
    let o = cli(&nodes[1].url, &admin, &["warm", ds.to_str().unwrap(), "--bucket", "nope"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("berth cache bucket create nope"), "{o:?}");
}
