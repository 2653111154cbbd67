//! Absurd `Content-Length` values get a 400 (not a whole number of bytes below 2^64) or a 413
//! (more than the node can hold) with a message saying what was wrong (issue 13, item 12),
//! not hyper's bare 431 or 400: as the first request of a connection (which the fast path
//! reads first), after a request the fast path served, and on a connection hyper already owns
//! (after a PUT), and over HTTPS (no fast path). Raw bytes over a `TcpStream`.

mod support;

use std::io::{Read, Write};
use std::sync::Arc;

use berth_cache::BucketConfig;
use support::Srv;

/// Capacity of the node: 1 MiB.
const CAPACITY: u64 = 1 << 20;

/// One answer read off `c`: status, head (lowercase) and body.
fn read_one(c: &mut impl Read) -> (u16, String, String) {
    let mut head = vec![];
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut b).unwrap(), 1, "closed inside a head: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let len = head.lines().find_map(|l| l.strip_prefix("content-length: ")).map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    (status, head, String::from_utf8(body).unwrap())
}

fn put_head(token: &str, key: &str, length: &str) -> String {
    format!(
        "PUT /v1/objects/ds/{key} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// Sends `head` on `c` and checks the refusal: `status`, a message naming the value, and the
/// end of the connection.
fn refused<C: Read + Write>(c: &mut C, head: &str, length: &str, status: u16) {
    c.write_all(head.as_bytes()).unwrap();
    let (st, h, body) = read_one(c);
    assert_eq!(st, status, "Content-Length {length:?}: {h}{body}");
    assert!(body.contains(length.trim()) && body.contains("Content-Length"), "{length:?}: {body}");
    assert!(h.contains("connection: close"), "{h}");
    let mut rest = vec![];
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "nothing after the refusal: {}", String::from_utf8_lossy(&rest));
}

/// Each absurd length and the status it must get.
const CASES: &[(&str, u16)] = &[
    ("18446744073709551615", 413), // u64::MAX: hyper answered 431
    ("18446744073709551614", 413), // u64::MAX - 1: hyper answered 431
    ("9223372036854775808", 413),  // 2^63
    ("2097152", 413),              // twice the node's capacity
    ("18446744073709551616", 400), // 2^64: overflows
    ("99999999999999999999999", 400),
    ("-1", 400),
    ("abc", 400),
    ("1e9", 400),
    ("0x10", 400),
];

fn node() -> (Srv, String) {
    let s = Srv::start(CAPACITY);
    s.node
        .store
        .put_bucket(BucketConfig {
            name: "ds".into(),
            public: false,
            quota: None,
            projects: vec!["p".into()],
            ..Default::default()
        })
        .unwrap();
    let admin = s.token(&[], true);
    (s, admin)
}

#[test]
fn absurd_content_lengths_get_400_or_413_with_a_message_on_a_new_connection() {
    let (s, admin) = node();
    for &(length, status) in CASES {
        refused(&mut s.connect(), &put_head(&admin, "k", length), length, status);
        // without a token, and on a GET: the length is refused all the same
        let anon = format!("PUT /v1/objects/ds/k HTTP/1.1\r\nhost: x\r\ncontent-length: {length}\r\n\r\n");
        refused(&mut s.connect(), &anon, length, status);
        let get = format!("GET /v1/objects/ds/k HTTP/1.1\r\nhost: x\r\ncontent-length: {length}\r\n\r\n");
        refused(&mut s.connect(), &get, length, status);
    }
    // two different lengths
    let mut c = s.connect();
    c.write_all(b"PUT /v1/objects/ds/k HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n").unwrap();
    let (st, _, body) = read_one(&mut c);
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("several Content-Length"), "{body}");
}

#[test]
fn absurd_content_lengths_are_refused_on_a_connection_already_in_use() {
    let (s, admin) = node();
    for &(length, status) in CASES {
        // hyper owns the connection after a PUT (kept alive)
        let mut c = s.connect();
        let mut put = put_head(&admin, "ok", "5").into_bytes();
        put.extend_from_slice(b"hello");
        c.write_all(&put).unwrap();
        assert_eq!(read_one(&mut c).0, 201);
        refused(&mut c, &put_head(&admin, "k", length), length, status);

        // the fast path served a GET first
        let mut c = s.connect();
        c.write_all(
            format!("GET /v1/objects/ds/ok HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {admin}\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let (st, _, body) = read_one(&mut c);
        assert_eq!((st, body.as_str()), (200, "hello"));
        refused(&mut c, &put_head(&admin, "k", length), length, status);
    }
    // nothing was stored by the refused requests, and the GETs were the fast path's
    assert!(s.node.store.lookup("ds", b"k", false).is_none());
    assert!(s.node.counters.fast_path.load(std::sync::atomic::Ordering::Relaxed) >= CASES.len() as u64);
}

#[test]
fn a_member_push_longer_than_a_small_nodes_capacity_is_taken() {
    // what the guard refuses is more than any route takes: a node of 64 KiB still takes a
    // member list of up to 1 MiB (the admin routes' limit)
    let s = Srv::start(64 << 10);
    let admin = s.token(&[], true);
    let list = format!(r#"[{{"name":"{}","weight":2}}{}]"#, s.node.name, " ".repeat(200 << 10));
    let (st, body) = s.request("PUT", "/v1/members", Some(&admin), list.as_bytes());
    assert_eq!(st, 200, "{body}");
    let head = format!(
        "PUT /v1/members HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {admin}\r\ncontent-length: 2097152\r\n\r\n"
    );
    refused(&mut s.connect(), &head, "2097152", 413);
}

/// A node serving HTTPS with a self-signed certificate for `localhost`, and a client config
/// trusting it.
fn tls_node() -> (Srv, Arc<rustls::ClientConfig>) {
    let (tls, client) = support::self_signed_tls();
    let s = Srv::start_tls(CAPACITY, tls);
    s.node
        .store
        .put_bucket(BucketConfig {
            name: "ds".into(),
            public: false,
            quota: None,
            projects: vec!["p".into()],
            ..Default::default()
        })
        .unwrap();
    (s, client)
}

#[test]
fn absurd_content_lengths_are_refused_over_https_too() {
    let (s, client) = tls_node();
    let admin = s.token(&[], true);
    let connect = || {
        let conn = rustls::ClientConnection::new(client.clone(), "localhost".try_into().unwrap()).unwrap();
        rustls::StreamOwned::new(conn, s.connect())
    };
    for &(length, status) in CASES {
        refused(&mut connect(), &put_head(&admin, "k", length), length, status);
        // after a PUT on the same connection
        let mut c = connect();
        let mut put = put_head(&admin, "ok", "5").into_bytes();
        put.extend_from_slice(b"hello");
        c.write_all(&put).unwrap();
        assert_eq!(read_one(&mut c).0, 201);
        refused(&mut c, &put_head(&admin, "k", length), length, status);
    }
}
