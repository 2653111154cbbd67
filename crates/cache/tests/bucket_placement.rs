//! Buckets placed per node (`placement: node`) and the usage endpoint, over HTTP with two real
//! nodes: a node bucket's objects stay on the node that was sent them (no forwarding, on the
//! fast path and hyper's), a spread bucket still forwards to each key's owner, and `GET
//! /v1/buckets/{b}/usage?prefix=P` counts what one node holds, with the bucket's read access.

mod support;

use serde_json::Value;
use support::Srv;

fn usage(s: &Srv, bucket: &str, query: &str, token: Option<&str>) -> (u16, Value) {
    let (st, body) = s.request("GET", &format!("/v1/buckets/{bucket}/usage{query}"), token, b"");
    (st, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn counts(s: &Srv, bucket: &str, query: &str, token: &str) -> (u64, u64) {
    let (st, v) = usage(s, bucket, query, Some(token));
    assert_eq!(st, 200, "{v}");
    (v["objects"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
}

fn forwarded(s: &Srv) -> u64 {
    s.node.counters.forwarded.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn a_node_buckets_objects_stay_on_the_node_they_were_sent_to() {
    let nodes = Srv::start_cluster(2, 1 << 30);
    let (a, b) = (&nodes[0], &nodes[1]);
    let admin = a.token(&[], true);
    let vision = a.token(&["vision"], false);
    for s in &nodes {
        let cfg = br#"{"projects":["vision"],"placement":"node","origin":"/shared/ds"}"#;
        assert_eq!(s.request("PUT", "/v1/buckets/local", Some(&admin), cfg).0, 200);
        assert_eq!(s.request("PUT", "/v1/buckets/spread", Some(&admin), br#"{"projects":["vision"]}"#).0, 200);
    }
    let (_, listed) = a.request("GET", "/v1/buckets", Some(&admin), b"");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let local = listed.as_array().unwrap().iter().find(|x| x["name"] == "local").unwrap();
    assert_eq!((local["placement"].as_str(), local["origin"].as_str()), (Some("node"), Some("/shared/ds")));

    // 40 keys to the node bucket through A: all on A, whichever node Maglev would pick
    let keys: Vec<String> = (0..40).map(|i| format!("train/{i:03}.jpg")).collect();
    for k in &keys {
        let (st, body) = a.request("PUT", &format!("/v1/objects/local/{k}"), Some(&vision), k.as_bytes());
        assert_eq!(st, 201, "{body}");
    }
    assert_eq!(forwarded(a), 0, "a node bucket's PUTs are not forwarded");
    let bytes: u64 = keys.iter().map(|k| k.len() as u64).sum();
    assert_eq!(counts(a, "local", "", &vision), (40, bytes));
    assert_eq!(counts(b, "local", "", &vision), (0, 0), "B holds none of A's copies");
    for k in &keys {
        // GET (the fast path), HEAD and a Range GET (hyper's path) on A; misses on B
        assert_eq!(a.request("GET", &format!("/v1/objects/local/{k}"), Some(&vision), b""), (200, k.clone()));
        assert_eq!(a.request("HEAD", &format!("/v1/objects/local/{k}"), Some(&vision), b"").0, 200);
        assert_eq!(b.request("GET", &format!("/v1/objects/local/{k}"), Some(&vision), b"").0, 404);
        assert_eq!(b.request("HEAD", &format!("/v1/objects/local/{k}"), Some(&vision), b"").0, 404);
    }
    // B gets its own copy of one key; a DELETE through B removes only B's
    let k0 = format!("/v1/objects/local/{}", keys[0]);
    assert_eq!(b.request("PUT", &k0, Some(&vision), b"b's copy").0, 201);
    assert_eq!(b.request("GET", &k0, Some(&vision), b""), (200, "b's copy".to_string()));
    assert_eq!(a.request("GET", &k0, Some(&vision), b""), (200, keys[0].clone()));
    assert_eq!(b.request("DELETE", &k0, Some(&vision), b"").0, 204);
    assert_eq!(b.request("DELETE", &k0, Some(&vision), b"").0, 404);
    assert_eq!(a.request("GET", &k0, Some(&vision), b"").0, 200);
    assert_eq!((forwarded(a), forwarded(b)), (0, 0), "nothing of a node bucket was forwarded");

    // the spread bucket still forwards: its keys end up on both nodes, readable through either
    for k in &keys {
        assert_eq!(a.request("PUT", &format!("/v1/objects/spread/{k}"), Some(&vision), k.as_bytes()).0, 201);
    }
    let (on_a, on_b) = (counts(a, "spread", "", &vision).0, counts(b, "spread", "", &vision).0);
    assert_eq!(on_a + on_b, 40);
    assert!(on_a > 0 && on_b > 0, "40 keys all on one node: {on_a} on A, {on_b} on B");
    assert_eq!(forwarded(a), on_b, "A forwarded exactly B's keys");
    for k in &keys {
        assert_eq!(b.request("GET", &format!("/v1/objects/spread/{k}"), Some(&vision), b""), (200, k.clone()));
    }
}

#[test]
fn usage_counts_by_prefix_with_the_buckets_read_access() {
    let s = Srv::start(1 << 30);
    let admin = s.token(&[], true);
    let vision = s.token(&["vision"], false);
    let other = s.token(&["speech"], false);
    assert_eq!(s.request("PUT", "/v1/buckets/ds", Some(&admin), br#"{"projects":["vision"]}"#).0, 200);
    assert_eq!(s.request("PUT", "/v1/buckets/pub", Some(&admin), br#"{"public":true}"#).0, 200);
    for (key, body) in [("train/a", "1"), ("train/b", "22"), ("train%2Fc%26d", "333"), ("val/a", "4444")] {
        assert_eq!(s.request("PUT", &format!("/v1/objects/ds/{key}"), Some(&vision), body.as_bytes()).0, 201);
    }
    assert_eq!(s.request("PUT", "/v1/objects/pub/train/x", Some(&admin), b"55555").0, 201);

    assert_eq!(counts(&s, "ds", "", &vision), (4, 10));
    assert_eq!(counts(&s, "ds", "?prefix=", &vision), (4, 10));
    assert_eq!(counts(&s, "ds", "?prefix=train%2F", &vision), (3, 6));
    assert_eq!(counts(&s, "ds", "?prefix=train/", &vision), (3, 6));
    assert_eq!(counts(&s, "ds", "?prefix=train%2Fc%26", &vision), (1, 3), "an encoded & is part of the key");
    assert_eq!(counts(&s, "ds", "?prefix=val/a", &admin), (1, 4));
    assert_eq!(counts(&s, "ds", "?prefix=test/", &vision), (0, 0));
    // the model's URL builder encodes what the node decodes
    let url = berth_model::api::prefix_usage_url("http://x", "ds", b"train/c&");
    let query = &url[url.find('?').unwrap()..];
    assert_eq!(counts(&s, "ds", query, &vision), (1, 3));

    // reading a private bucket's usage needs one of its projects or admin; a public one, nothing
    assert_eq!(usage(&s, "ds", "", None).0, 401);
    assert_eq!(usage(&s, "ds", "", Some("bct1.forged.token")).0, 401);
    let (st, v) = usage(&s, "ds", "", Some(&other));
    assert_eq!(st, 403, "{v}");
    assert_eq!(usage(&s, "pub", "?prefix=train/", None), (200, serde_json::json!({"objects": 1, "bytes": 5})));

    // unknown bucket, bad encoding
    let (st, v) = usage(&s, "nope", "", Some(&admin));
    assert_eq!(st, 404);
    assert!(v["error"].as_str().unwrap().contains("berth cache bucket create nope"), "{v}");
    assert_eq!(s.request("GET", "/v1/buckets/usage", Some(&admin), b"").0, 404, "no bucket named");
    assert_eq!(s.request("GET", "/v1/buckets//usage", Some(&admin), b"").0, 404);
    let (st, v) = usage(&s, "ds", "?prefix=train%zz", Some(&admin));
    assert_eq!(st, 400);
    assert!(v["error"].as_str().unwrap().contains("percent-encoded"), "{v}");
}

#[test]
fn a_bucket_with_a_bad_origin_or_placement_is_refused() {
    let s = Srv::start(1 << 30);
    let admin = s.token(&[], true);
    for body in [&br#"{"origin":"relative/ds"}"#[..], br#"{"origin":"/a/../b"}"#, br#"{"placement":"everywhere"}"#] {
        let (st, answer) = s.request("PUT", "/v1/buckets/ds", Some(&admin), body);
        assert_eq!(st, 400, "{answer}");
    }
    let (_, listed) = s.request("GET", "/v1/buckets", Some(&admin), b"");
    assert_eq!(listed, "[]", "nothing was created");
}
