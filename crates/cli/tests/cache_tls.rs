//! TLS on the cache port: `berth cache serve --tls-cert/--tls-key` serves HTTPS, the cache
//! commands and other nodes (forwarding) trust it with `BERTH_CA_FILE`/`--ca-file` and refuse
//! it without, with a hint; `berth up` with TLS runs its cache on HTTPS and the manager pushes
//! buckets to it over TLS.

mod cache_support;
mod support;

use std::time::{Duration, Instant};

use cache_support::{Node, cli_env, ok, token};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::pki::Pki;
use support::{Berth, PATIENCE};

/// A client trusting the test CA.
fn trusting(pki: &Pki) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.path("ca.pem")).unwrap()).unwrap();
    reqwest::Client::builder().add_root_certificate(ca).timeout(Duration::from_secs(60)).build().unwrap()
}

#[tokio::test]
async fn https_nodes_forward_to_each_other_and_clients_need_the_ca() {
    let pki = Pki::new(&["localhost", "127.0.0.1"]);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let mut flags: Vec<String> = pki.serve_flags().to_vec();
    flags.extend(["--ca-file".to_string(), pki.path("ca.pem")]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let nodes: Vec<Node> = (0..2).map(|i| Node::start(&dir.path().join(format!("d{i}")), &key, 0, &flags)).collect();
    assert!(nodes.iter().all(|n| n.url.starts_with("https://127.0.0.1:")), "{}", nodes[0].url);
    let admin = token(&key, &["--admin"]);
    let http = trusting(&pki);
    let list = json!([{"name": nodes[0].url}, {"name": nodes[1].url}]);
    for n in &nodes {
        let r = http.put(format!("{}/v1/members", n.url)).bearer_auth(&admin).json(&list).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    }
    let ca = pki.path("ca.pem");
    ok(cli_env(&nodes[0].url, &admin, &[("BERTH_CA_FILE", &ca)], &["bucket", "create", "ds"]));

    // every key through node 0: node 1's are forwarded to it over https
    for i in 0..20 {
        let u = format!("{}/v1/objects/ds/k{i}", nodes[0].url);
        let r = http.put(&u).bearer_auth(&admin).body(format!("v{i}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(http.get(&u).bearer_auth(&admin).send().await.unwrap().text().await.unwrap(), format!("v{i}"));
    }
    let per_node: Vec<u64> = {
        let mut v = vec![];
        for n in &nodes {
            let s: Value = http.get(format!("{}/v1/stats", n.url)).send().await.unwrap().json().await.unwrap();
            v.push(s["buckets"][0]["objects"].as_u64().unwrap());
        }
        v
    };
    assert_eq!(per_node.iter().sum::<u64>(), 20);
    assert!(per_node[1] > 0, "nothing was forwarded to node 1: {per_node:?}");

    // the CLI with the CA works; without it, it says what to do
    let out = ok(cli_env(&nodes[0].url, &admin, &[("BERTH_CA_FILE", &ca)], &["stats"]));
    assert_eq!(out.lines().filter(|l| l.contains(" ds ")).count(), 2, "{out}");
    let o = cli_env(&nodes[0].url, &admin, &[], &["stats"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not trusted") && err.contains("BERTH_CA_FILE"), "{err}");
    // nor does a plain-http client get anything from the TLS port
    let plain = nodes[0].url.replace("https://", "http://");
    assert!(reqwest::get(format!("{plain}/v1/members")).await.is_err());
}

#[test]
fn berth_up_with_tls_serves_its_cache_on_https_and_the_manager_pushes_to_it() {
    let pki = Pki::new(&["localhost", "127.0.0.1"]);
    let flags = pki.serve_flags();
    let b = Berth::up(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let t0 = Instant::now();
    let url = loop {
        let out = std::fs::read_to_string(b.home.path().join("up.stdout")).unwrap_or_default();
        if let Some(l) = out.lines().find(|l| l.starts_with("dataset cache: ")) {
            break l["dataset cache: ".len()..].split_whitespace().next().unwrap().to_string();
        }
        assert!(t0.elapsed() < PATIENCE, "no dataset cache line:\n{out}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(url.starts_with("https://"), "{url}");
    b.ok(&["cache", "bucket", "create", "pushed", "--public"]);
    let admin = token(&b.data.join("cache").join("cache.key"), &["--admin"]);
    let ca = pki.path("ca.pem");
    let t0 = Instant::now();
    loop {
        let o = cli_env(&url, &admin, &[("BERTH_CA_FILE", &ca)], &["bucket", "list"]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        if out.lines().any(|l| l.contains("pushed") && l.contains("public")) {
            break;
        }
        assert!(
            t0.elapsed() < PATIENCE,
            "the manager never pushed the bucket: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
