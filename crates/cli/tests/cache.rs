//! The dataset cache over real HTTP: `berth cache serve` child processes on 127.0.0.1 with
//! ephemeral ports. Object semantics (201/200/206/304/404/411/416, HEAD, DELETE), keys that
//! look like paths, tokens and private buckets, quotas and eviction metrics, several nodes
//! forwarding to the owner, a dead node read as misses, and `kill -9` in the middle of a PUT.

mod cache_support;

use std::io::Write;
use std::time::Duration;

use cache_support::*;
use reqwest::StatusCode;
use serde_json::json;

fn obj(url: &str, bucket: &str, key: &str) -> String {
    format!("{url}/v1/objects/{bucket}/{key}")
}

#[tokio::test]
async fn object_semantics_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("d"), &dir.path().join("key"), 0, &[]);
    let admin = token(&node.key, &["--admin"]);
    let http = client();
    bucket(&http, &node.url, &admin, "ds", json!({})).await;

    // keys with `:`, `//` and `..` are names, not paths
    let key = "s3://host/bucket//train/../../../../etc/passwd:1";
    let u = obj(&node.url, "ds", key);
    let r = http.get(&u).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "a miss is a 404");
    let body: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let r = http.put(&u).bearer_auth(&admin).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();

    let r = http.get(&u).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["etag"], etag.as_str());
    assert_eq!(r.bytes().await.unwrap().as_ref(), &body[..]);

    let r = http.head(&u).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-length"], "1000");

    let r = http.get(&u).bearer_auth(&admin).header("range", "bytes=10-19").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.headers()["content-range"], "bytes 10-19/1000");
    assert_eq!(r.bytes().await.unwrap().as_ref(), &body[10..20]);
    let r = http.get(&u).bearer_auth(&admin).header("range", "bytes=-5").send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), &body[995..]);
    let r = http.get(&u).bearer_auth(&admin).header("range", "bytes=1000-").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.headers()["content-range"], "bytes */1000");

    let r = http.get(&u).bearer_auth(&admin).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    let r = http.get(&u).bearer_auth(&admin).header("if-none-match", "\"other\"").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // overwrite: new content, new etag
    let r = http.put(&u).bearer_auth(&admin).body("v2").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_ne!(r.headers()["etag"], etag.as_str());
    assert_eq!(http.get(&u).bearer_auth(&admin).send().await.unwrap().text().await.unwrap(), "v2");

    // no Content-Length (chunked): 411
    // (reqwest here cannot send a chunked body: a raw socket does)
    let mut s = std::net::TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
    write!(s, "PUT /v1/objects/ds/chunked HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut s, &mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 411");

    // DELETE, then a miss
    assert_eq!(http.delete(&u).bearer_auth(&admin).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(http.get(&u).bearer_auth(&admin).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    assert_eq!(http.delete(&u).bearer_auth(&admin).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    // unknown bucket: 404 naming the fix
    let r = http.put(obj(&node.url, "nope", "k")).bearer_auth(&admin).body("x").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().await.unwrap().contains("berth cache bucket create nope"));

    // nothing was written outside the data dir's objects/ and tmp/
    assert!(!dir.path().join("etc").exists());
    let mut names: Vec<String> =
        std::fs::read_dir(&node.data).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["buckets.json", "objects", "tmp"]);

    // hits and misses per bucket on /metrics
    assert_eq!(metric(&http, &node.url, "berth_cache_hits_total{bucket=\"ds\"}").await, 7);
    assert_eq!(metric(&http, &node.url, "berth_cache_misses_total{bucket=\"ds\"}").await, 2);
}

#[tokio::test]
async fn tokens_and_private_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("d"), &dir.path().join("key"), 0, &[]);
    let admin = token(&node.key, &["--admin"]);
    let vision = token(&node.key, &["--projects", "vision,nlp"]);
    let other = token(&node.key, &["--projects", "speech"]);
    let http = client();
    bucket(&http, &node.url, &admin, "priv", json!({"projects": ["vision"]})).await;
    bucket(&http, &node.url, &admin, "pub", json!({"public": true})).await;

    let p = obj(&node.url, "priv", "a");
    assert_eq!(http.put(&p).body("x").send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(http.put(&p).bearer_auth(&vision).body("x").send().await.unwrap().status(), StatusCode::CREATED);
    let r = http.get(&p).bearer_auth(&other).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("private to projects [vision]"));
    assert_eq!(http.get(&p).bearer_auth(&vision).send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(http.get(&p).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);

    // a token signed with another key, or tampered with, is refused
    let foreign = tempfile::tempdir().unwrap();
    let fk = foreign.path().join("k");
    std::fs::write(&fk, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff").unwrap();
    let forged = token(&fk, &["--admin"]);
    let r = http.get(&p).bearer_auth(&forged).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.text().await.unwrap().contains("signature"));

    // public: anyone reads; writes need a token of the bucket's projects (or an admin's)
    let q = obj(&node.url, "pub", "b");
    assert_eq!(http.put(&q).body("y").send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(http.put(&q).bearer_auth(&other).body("y").send().await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(http.put(&q).bearer_auth(&admin).body("y").send().await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(http.get(&q).send().await.unwrap().text().await.unwrap(), "y");

    // only admins create buckets
    let r =
        http.put(format!("{}/v1/buckets/mine", node.url)).bearer_auth(&vision).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(metric(&http, &node.url, "berth_cache_auth_failures_total").await >= 4);
}

#[tokio::test]
async fn quotas_evict_within_the_bucket_and_metrics_count_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("d"), &dir.path().join("key"), 0, &["--capacity", "100KiB"]);
    let admin = token(&node.key, &["--admin"]);
    let http = client();
    bucket(&http, &node.url, &admin, "small", json!({"quota": 20 * 1024})).await;
    bucket(&http, &node.url, &admin, "big", json!({})).await;
    let chunk = vec![7u8; 10 * 1024];
    for i in 0..5 {
        let r = http
            .put(obj(&node.url, "big", &format!("k{i}")))
            .bearer_auth(&admin)
            .body(chunk.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    for i in 0..6 {
        let r = http
            .put(obj(&node.url, "small", &format!("k{i}")))
            .bearer_auth(&admin)
            .body(chunk.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    assert_eq!(metric(&http, &node.url, "berth_cache_bytes{bucket=\"small\"}").await, 20 * 1024);
    assert_eq!(metric(&http, &node.url, "berth_cache_evictions_total{bucket=\"small\"}").await, 4);
    assert_eq!(metric(&http, &node.url, "berth_cache_evicted_bytes_total{bucket=\"small\"}").await, 40 * 1024);
    assert_eq!(
        metric(&http, &node.url, "berth_cache_evictions_total{bucket=\"big\"}").await,
        0,
        "small's quota never evicts big"
    );
    // the evicted objects are gone from disk too
    let files = walk_count(&node.data.join("objects"));
    assert_eq!(files, 7);
    // an object larger than the quota is refused up front
    let r =
        http.put(obj(&node.url, "small", "huge")).bearer_auth(&admin).body(vec![0u8; 30 * 1024]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

fn walk_count(d: &std::path::Path) -> usize {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() { walk_count(&e.path()) } else { 1 }
        })
        .sum()
}

#[tokio::test]
async fn any_node_serves_any_key_and_a_dead_owner_is_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let mut nodes: Vec<Node> = (0..3).map(|i| Node::start(&dir.path().join(format!("n{i}")), &key, 0, &[])).collect();
    let admin = token(&key, &["--admin"]);
    let http = client();
    let members: Vec<_> = nodes.iter().map(|n| json!({"name": n.url, "weight": 1})).collect();
    for n in &nodes {
        let r = http.put(format!("{}/v1/members", n.url)).bearer_auth(&admin).json(&members).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    // the CLI creates the bucket on every member
    ok(cli(&nodes[0].url, &admin, &["bucket", "create", "ds", "--projects", "vision"]));

    let keys: Vec<String> = (0..60).map(|i| format!("s3://h/b//img/{i:04}.jpg")).collect();
    for (i, k) in keys.iter().enumerate() {
        let r = http.put(obj(&nodes[i % 3].url, "ds", k)).bearer_auth(&admin).body(k.clone()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    for (i, k) in keys.iter().enumerate() {
        let r = http.get(obj(&nodes[(i + 1) % 3].url, "ds", k)).bearer_auth(&admin).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), *k);
    }
    // each object is stored once, on its owner; every node owns some
    let mut per_node = vec![];
    for n in &nodes {
        let s: serde_json::Value = http.get(format!("{}/v1/stats", n.url)).send().await.unwrap().json().await.unwrap();
        per_node.push(s["buckets"][0]["objects"].as_u64().unwrap());
    }
    assert_eq!(per_node.iter().sum::<u64>(), 60);
    assert!(per_node.iter().all(|&c| c > 5), "{per_node:?}");
    // /v1/members says who owns what
    let m: serde_json::Value =
        http.get(format!("{}/v1/members", nodes[1].url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(m["members"].as_array().unwrap().len(), 3);
    assert_eq!(m["hash"], "maglev-xxh3-v3");

    // node 2 dies: its keys are misses through the others, the rest still hits
    nodes[2].kill9();
    let mut hits = 0;
    let mut misses = 0;
    for k in &keys {
        let r = http.get(obj(&nodes[0].url, "ds", k)).bearer_auth(&admin).send().await.unwrap();
        match r.status() {
            StatusCode::OK => hits += 1,
            StatusCode::NOT_FOUND => misses += 1,
            s => panic!("a dead node must read as a miss, got {s}"),
        }
    }
    assert_eq!(misses as u64, per_node[2]);
    assert_eq!(hits as u64, per_node[0] + per_node[1]);
    // a write to a dead owner says so instead of pretending
    let dead_key = keys.iter().find(|k| {
        let mg = berth_cache::Maglev::new(nodes.iter().map(|n| berth_cache::Member::up(n.url.clone())).collect());
        mg.owner("ds", k.as_bytes()).unwrap().name == nodes[2].url
    });
    let r = http.put(obj(&nodes[0].url, "ds", dead_key.unwrap())).bearer_auth(&admin).body("z").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);

    // stats lists every member, the dead one as unreachable
    let out = ok(cli(&nodes[0].url, &admin, &["stats"]));
    assert!(out.contains("unreachable"), "{out}");
}

#[tokio::test]
async fn kill_9_mid_put_leaves_no_half_object_and_a_restart_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let key = dir.path().join("key");
    let mut node = Node::start(&data, &key, 0, &[]);
    let admin = token(&key, &["--admin"]);
    let http = client();
    bucket(&http, &node.url, &admin, "ds", json!({"quota": 1 << 30})).await;
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 % 256) as u8).collect();
    for k in ["kept-small", "kept-big"] {
        let body = if k == "kept-big" { big.clone() } else { b"small".to_vec() };
        let r = http.put(obj(&node.url, "ds", k)).bearer_auth(&admin).body(body).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    // an overwrite of kept-big and a new object, both cut off half way
    let mut socks = vec![];
    for k in ["kept-big", "half"] {
        let mut s = std::net::TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
        write!(
            s,
            "PUT /v1/objects/ds/{k} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\nContent-Length: {}\r\n\r\n",
            8 << 20
        )
        .unwrap();
        s.write_all(&vec![1u8; 5 << 20]).unwrap();
        socks.push(s);
    }
    // wait until the server has the PUTs' temp files, then kill it
    let tmp = data.join("tmp");
    for _ in 0..600 {
        if std::fs::read_dir(&tmp).unwrap().count() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 2, "both PUTs were in flight");
    let port = node.port();
    node.kill9();
    drop(socks);

    let node = Node::start(&data, &key, port, &[]);
    let http = client(); // the old pool's connections died with the old process
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "cut-off PUTs are cleaned up at start");
    let r = http.get(obj(&node.url, "ds", "kept-small")).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "small");
    let r = http.get(obj(&node.url, "ds", "kept-big")).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &big[..], "the old version, whole");
    let r = http.get(obj(&node.url, "ds", "half")).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "no half object");
    // settings and usage survived
    assert_eq!(metric(&http, &node.url, "berth_cache_quota_bytes{bucket=\"ds\"}").await, 1 << 30);
    assert_eq!(metric(&http, &node.url, "berth_cache_bytes{bucket=\"ds\"}").await, 5 + (3 << 20));
}

#[tokio::test]
async fn warm_loads_a_directory_once_and_stats_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("d"), &dir.path().join("key"), 0, &[]);
    let admin = token(&node.key, &["--admin"]);
    ok(cli(&node.url, &admin, &["bucket", "create", "ds", "--quota", "1GiB"]));
    let ds = dir.path().join("dataset");
    std::fs::create_dir_all(ds.join("sub")).unwrap();
    for i in 0..5 {
        std::fs::write(ds.join("sub").join(format!("{i}.bin")), vec![i as u8; 1000 + i]).unwrap();
    }
    let out = ok(cli(&node.url, &admin, &["warm", ds.to_str().unwrap(), "--bucket", "ds"]));
    assert!(out.contains("5 files stored"), "{out}");
    let out = ok(cli(&node.url, &admin, &["warm", ds.to_str().unwrap(), "--bucket", "ds"]));
    assert!(out.contains("0 files stored") && out.contains("5 already cached"), "{out}");
    // keys are PFIO's names for local files: file:/ + the absolute path
    let k = format!("file:/{}", ds.join("sub/3.bin").display());
    let http = client();
    let r = http.get(obj(&node.url, "ds", &k)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), &vec![3u8; 1003][..]);
    let out = ok(cli(&node.url, &admin, &["stats"]));
    let row = out.lines().find(|l| l.contains(" ds ")).unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[2], "5", "objects: {row}");
}

/// Regression: `cache warm` read each whole file into memory (a 256 MiB file took 256 MiB);
/// it streams them now.
#[tokio::test]
async fn warm_streams_big_files_instead_of_reading_them_whole() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("d"), &dir.path().join("key"), 0, &[]);
    let admin = token(&node.key, &["--admin"]);
    ok(cli(&node.url, &admin, &["bucket", "create", "big", "--quota", "1GiB"]));
    let ds = dir.path().join("dataset");
    std::fs::create_dir_all(&ds).unwrap();
    let size = 256u64 << 20;
    std::fs::File::create(ds.join("shard.bin")).unwrap().set_len(size).unwrap();
    let out = ok(cli(&node.url, &admin, &["warm", ds.to_str().unwrap(), "--bucket", "big"]));
    assert!(out.contains("1 files stored"), "{out}");
    // The largest resident set of the commands this test ran and waited for (the node still
    // runs, so it is not counted): far below the file's size.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0);
    let peak = usage.ru_maxrss as u64 * 1024;
    assert!(peak < size / 4, "berth cache warm peaked at {} MiB for a {} MiB file", peak >> 20, size >> 20);
    let k = format!("file:/{}", ds.join("shard.bin").display());
    let r = client().head(obj(&node.url, "big", &k)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(r.headers()["content-length"], size.to_string().as_str());
}
