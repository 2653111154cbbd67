//! The fast path for object GETs (`server/fast.rs`) over real HTTP on 127.0.0.1: its
//! answers are byte for byte hyper's (same status line and headers in the same order, same
//! body), whatever it hands over to hyper is answered as before on the same connection, the
//! counters move once per request, and broken or hostile clients cost nothing but their own
//! connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use berth_cache::server::{self, Node, NodeTls};
use berth_cache::token::{Claims, Key, unix_now};
use berth_cache::{BucketConfig, Member, Store};

/// A node with its workers on an ephemeral port, its store and tokens.
struct Srv {
    addr: SocketAddr,
    node: Arc<Node>,
    admin: String,
    reader: String,
    other: String,
    _dir: tempfile::TempDir,
}

fn token(key: &Key, projects: &[&str], admin: bool) -> String {
    let projects = projects.iter().map(|p| p.to_string()).collect();
    key.sign(&Claims { sub: "test".into(), projects, admin, exp: unix_now() + 3600 })
}

/// Starts nodes sharing one key, each knowing all of them as members.
fn start(n: usize) -> Vec<Srv> {
    let key = Key::random();
    let reserved: Vec<_> = (0..n).map(|_| server::reserve("127.0.0.1:0".parse().unwrap()).unwrap()).collect();
    let members: Vec<Member> = reserved.iter().map(|(_, a)| Member::up(format!("http://{a}"))).collect();
    reserved
        .iter()
        .map(|(_, addr)| {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(Store::open(dir.path(), 1 << 30).unwrap());
            store
                .put_bucket(BucketConfig {
                    name: "ds".into(),
                    public: false,
                    quota: None,
                    projects: vec!["p".into()],
                    ..Default::default()
                })
                .unwrap();
            let node =
                Arc::new(Node::new(store, key.clone(), format!("http://{addr}"), members.clone(), NodeTls::default()));
            let addr = server::spawn_workers(*addr, node.clone(), 1).unwrap();
            Srv {
                addr,
                node,
                admin: token(&key, &[], true),
                reader: token(&key, &["p"], false),
                other: token(&key, &["q"], false),
                _dir: dir,
            }
        })
        .collect()
}

fn put(s: &Srv, key: &str, data: &[u8]) {
    let mut c = connect(s);
    let mut req = format!(
        "PUT /v1/objects/ds/{key} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n",
        s.admin,
        data.len()
    )
    .into_bytes();
    req.extend_from_slice(data);
    c.write_all(&req).unwrap();
    assert_eq!(read_answer(&mut c, false).status, 201);
}

fn connect(s: &Srv) -> TcpStream {
    let c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

/// One answer: its status, its head with the `date` value blanked, its body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

fn read_answer(c: &mut TcpStream, head_request: bool) -> Answer {
    let mut head = vec![];
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            c.read(&mut b).unwrap(),
            1,
            "the connection closed inside a head: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let len =
        head.lines().find_map(|l| l.strip_prefix("content-length: ")).map_or(0, |v| v.trim().parse::<usize>().unwrap());
    let mut body = vec![0u8; if head_request || status == 304 { 0 } else { len }];
    c.read_exact(&mut body).unwrap();
    let head = head.lines().map(|l| if l.starts_with("date: ") { "date: *" } else { l }).collect::<Vec<_>>().join("\n");
    Answer { status, head, body }
}

fn get_req(method: &str, key: &str, token: &str, extra: &str) -> String {
    format!("{method} /v1/objects/ds/{key} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{extra}\r\n")
}

/// The answer through the fast path (alone on a new connection).
fn fast(s: &Srv, req: &str, head_request: bool) -> Answer {
    let mut c = connect(s);
    c.write_all(req.as_bytes()).unwrap();
    read_answer(&mut c, head_request)
}

/// The answer hyper gives: two copies pipelined in one write are always handed over.
fn by_hyper(s: &Srv, req: &str, head_request: bool) -> Answer {
    let mut c = connect(s);
    c.write_all(format!("{req}{req}").as_bytes()).unwrap();
    let a = read_answer(&mut c, head_request);
    assert_eq!(read_answer(&mut c, head_request), a);
    a
}

/// Requests the node's fast path answered itself.
fn fast_served(s: &Srv) -> u64 {
    s.node.counters.fast_path.load(std::sync::atomic::Ordering::Relaxed)
}

/// A connection whose receive buffer (and so the window it offers) is a few KiB from the
/// handshake on, so that a server sending it a big body must wait for it to read.
fn connect_small_window(s: &Srv) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let c = rt.block_on(sock.connect(s.addr)).unwrap().into_std().unwrap();
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn whole_object_answers_equal_hypers_byte_for_byte() {
    let s = &start(1)[0];
    // memory (written), memory (sendfile from the file), a big file (sendfile too, issue 42;
    // more of those in large_objects.rs)
    let sizes = [("empty", 0), ("small", 100), ("4k", 4096), ("64k", 65536), ("256k", 256 * 1024), ("big", 300 * 1024)];
    for (key, size) in sizes {
        let obj = data(size, size as u8);
        put(s, key, &obj);
        for method in ["GET", "HEAD"] {
            let head = method == "HEAD";
            let req = get_req(method, key, &s.reader, "");
            // the first read goes to the file, later ones to memory
            let served = fast_served(s);
            let first = fast(s, &req, head);
            let again = fast(s, &req, head);
            assert_eq!(fast_served(s) - served, 2, "{method} {key}: answered by the fast path");
            let hyper = by_hyper(s, &req, head);
            assert_eq!(fast_served(s) - served, 2, "pipelined requests are hyper's");
            assert_eq!(first, hyper, "{method} {key}: the fast path's first answer differs from hyper's");
            assert_eq!(again, hyper, "{method} {key}: the fast path's answer from memory differs from hyper's");
            assert_eq!(first.status, 200);
            assert!(first.head.contains(&format!("content-length: {size}")), "{}", first.head);
            if !head {
                assert!(first.body == obj && again.body == obj, "{key}: the body is not the object");
            }
        }
    }
    // what Python's `requests` (PFIO's client) sends is served here and answered alike
    let py = "User-Agent: python-requests/2.32.3\r\nAccept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\n";
    let req = get_req("GET", "64k", &s.reader, py);
    let served = fast_served(s);
    assert_eq!(fast(s, &req, false), by_hyper(s, &req, false));
    assert_eq!(fast_served(s), served + 1, "`Connection: keep-alive` stays on the fast path");
    // `Connection: close` is hyper's, which says so and closes
    let mut c = connect(s);
    c.write_all(get_req("GET", "64k", &s.reader, "Connection: close\r\n").as_bytes()).unwrap();
    let a = read_answer(&mut c, false);
    assert!(a.head.contains("connection: close") && a.body.len() == 65536, "{}", a.head);
    assert_eq!(c.read(&mut [0u8; 1]).unwrap(), 0, "closed after the answer");
    assert_eq!(fast_served(s), served + 1);

    // keys with `:`, `//`, percent-escapes and every other byte the fast path takes read the
    // same object on both paths
    for key in ["s3:%2F%2Fh/b//k%20x", "a!$&'()*+,;=:@~.-_%41/Z9"] {
        put(s, key, b"odd key");
        let req = get_req("GET", key, &s.reader, "");
        let served = fast_served(s);
        assert_eq!(fast(s, &req, false).body, b"odd key", "{key}");
        assert_eq!(fast_served(s), served + 1, "{key}");
        assert_eq!(fast(s, &req, false), by_hyper(s, &req, false), "{key}");
    }
}

#[test]
fn one_connection_mixes_fast_and_handed_over_requests() {
    let s = &start(1)[0];
    let obj = data(65536, 7);
    put(s, "k", &obj);
    let before = s.node.store.stats()[0].clone();
    let mut c = connect(s);
    let mut ask = |req: String, head: bool| {
        c.write_all(req.as_bytes()).unwrap();
        read_answer(&mut c, head)
    };
    for _ in 0..3 {
        assert_eq!(ask(get_req("GET", "k", &s.reader, ""), false).body, obj);
    }
    assert_eq!(ask(get_req("HEAD", "k", &s.reader, ""), true).status, 200);
    let etag = ask(get_req("HEAD", "k", &s.reader, ""), true)
        .head
        .lines()
        .find_map(|l| l.strip_prefix("etag: ").map(str::to_string))
        .unwrap();
    assert_eq!(fast_served(s), 5, "three GETs and two HEADs on the fast path");
    // a Range: the fast path's too (issue 42)
    let r = ask(get_req("GET", "k", &s.reader, "Range: bytes=10-19\r\n"), false);
    assert_eq!((r.status, &r.body[..]), (206, &obj[10..20]));
    assert!(r.head.contains("content-range: bytes 10-19/65536"), "{}", r.head);
    assert_eq!(fast_served(s), 6);
    // an unsatisfiable one: handed to hyper, which then keeps the connection
    assert_eq!(ask(get_req("GET", "k", &s.reader, "Range: bytes=70000-\r\n"), false).status, 416);
    assert_eq!(ask(get_req("GET", "k", &s.reader, &format!("If-None-Match: {etag}\r\n")), false).status, 304);
    assert_eq!(ask(get_req("GET", "k", &s.reader, "If-None-Match: \"nope\"\r\n"), false).body, obj);
    assert_eq!(ask(get_req("GET", "k", &s.reader, ""), false).body, obj);
    let miss = ask(get_req("GET", "nothing", &s.reader, ""), false);
    assert_eq!(miss.status, 404);
    assert!(miss.head.contains("x-berth-cache: miss"), "{}", miss.head);

    assert_eq!(fast_served(s), 6, "after a handover the connection is hyper's");
    // a 304 and a 206 on fresh connections, where they are the first request (the 206 the
    // fast path's)
    let r = fast(s, &get_req("GET", "k", &s.reader, &format!("If-None-Match: {etag}\r\n")), false);
    assert_eq!(r.status, 304);
    assert_eq!(fast(s, &get_req("GET", "k", &s.reader, "Range: bytes=-5\r\n"), false).body, &obj[obj.len() - 5..]);
    assert_eq!(fast_served(s), 7);
    let after = s.node.store.stats()[0].clone();
    assert_eq!(after.hits - before.hits, 10, "every GET that found the object counts one hit");
    assert_eq!(s.node.store.memory_stats().hits, 11, "every lookup after the first GET found the object in memory");
    assert_eq!(after.misses - before.misses, 1, "the miss counts once");
}

#[test]
fn refusals_and_misses_are_answered_once_as_before() {
    let s = &start(1)[0];
    put(s, "k", b"secret");
    let failures = || s.node.counters.auth_failures.load(std::sync::atomic::Ordering::Relaxed);
    let cases = [
        ("GET /v1/objects/ds/k HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), 401, 1),
        (get_req("GET", "k", "bct1.forged", ""), 401, 1),
        (get_req("GET", "k", &s.other, ""), 403, 0),
        (get_req("GET", "k", "bct1.forged", "").replace("/ds/", "/nobucket/"), 404, 0),
        (get_req("GET", "missing", &s.reader, ""), 404, 0),
        (get_req("HEAD", "missing", &s.reader, ""), 404, 0),
    ];
    for (req, status, failed) in cases {
        let before = failures();
        let head = req.starts_with("HEAD");
        let a = fast(s, &req, head);
        assert_eq!(a.status, status, "{req}");
        assert_eq!(fast_served(s), 0, "{req}: refusals and misses are answered by hyper's code");
        assert_eq!(failures() - before, failed, "auth failures counted once for {req}");
        assert_eq!(a, by_hyper(s, &req, head), "{req}");
        // the connection stays usable after a handed-over answer
        let mut c = connect(s);
        c.write_all(req.as_bytes()).unwrap();
        assert_eq!(read_answer(&mut c, head).status, status);
        c.write_all(get_req("GET", "k", &s.reader, "").as_bytes()).unwrap();
        assert_eq!(read_answer(&mut c, false).body, b"secret");
    }
    let served = fast_served(s);
    let st = &s.node.store.stats()[0];
    // each case's request was sent 4 times (fast, 2 pipelined, then again): 2 GET misses
    assert_eq!(st.misses, 4, "GET misses are counted once per request, HEADs not at all");
    // other routes, methods and versions are hyper's
    let a = fast(s, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert_eq!((a.status, &a.body[..]), (200, &b"ok\n"[..]));
    let a = fast(s, &get_req("GET", "k", &s.reader, "").replace("HTTP/1.1", "HTTP/1.0"), false);
    assert_eq!((a.status, &a.body[..]), (200, &b"secret"[..]));
    assert!(a.head.starts_with("HTTP/1.0 200 OK"), "{}", a.head);
    assert_eq!(fast_served(s), served, "other routes and HTTP/1.0 are hyper's");
}

#[test]
fn a_key_owned_by_another_node_is_forwarded() {
    let nodes = start(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let key = (0..1000)
        .map(|i| format!("k{i}"))
        .find(|k| a.node.maglev().owner("ds", k.as_bytes()).unwrap().name == b.node.name)
        .unwrap();
    put(a, &key, b"owned by b");
    let r = fast(a, &get_req("GET", &key, &a.reader, ""), false);
    assert_eq!((r.status, &r.body[..]), (200, &b"owned by b"[..]));
    assert_eq!(a.node.counters.forwarded.load(std::sync::atomic::Ordering::Relaxed), 2, "the PUT and the GET");
    assert_eq!(b.node.store.stats()[0].hits, 1, "the owner served the GET");
    assert!(a.node.store.stats()[0].objects == 0, "the node that forwarded keeps nothing");
}

#[test]
fn heads_in_pieces_oversized_heads_and_cut_connections() {
    let s = &start(1)[0];
    let obj = data(200 * 1024, 3);
    put(s, "k", &obj);
    // a head sent a few bytes at a time
    let mut c = connect(s);
    c.set_nodelay(true).unwrap();
    for piece in get_req("GET", "k", &s.reader, "").as_bytes().chunks(3) {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(read_answer(&mut c, false).body, obj);
    assert_eq!(fast_served(s), 1, "a head in pieces is still the fast path's");

    // a head past the fast path's limit is hyper's: served when hyper takes it...
    let pad = format!("X-Pad: {}\r\n", "a".repeat(20 * 1024));
    let r = fast(s, &get_req("GET", "k", &s.reader, &pad), false);
    assert_eq!((r.status, r.body == obj), (200, true));
    // ...and refused well past hyper's own (~400 KiB, which its last read may overshoot)
    let huge = format!("X-Pad: {}\r\n", "a".repeat(2 << 20));
    let mut c = connect(s);
    let _ = c.write_all(get_req("GET", "k", &s.reader, &huge).as_bytes());
    let mut got = vec![];
    let _ = c.read_to_end(&mut got);
    // (an empty read: the reset for the unread rest of the head overtook the answer)
    assert!(
        got.is_empty() || got.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );

    // clients that stop reading (a small window, and one request after another, more than a
    // loopback socket buffers: tcp_wmem's maximum is 4 MiB) leave the server waiting for room
    // to send; they hold only their own connections: the one worker answers others meanwhile,
    // and then those clients leave with answers half sent
    let mut stalled: Vec<TcpStream> = (0..4).map(|_| connect_small_window(s)).collect();
    for _ in 0..30 {
        for c in &mut stalled {
            c.write_all(get_req("GET", "k", &s.reader, "").as_bytes()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    for _ in 0..3 {
        assert_eq!(fast(s, &get_req("GET", "k", &s.reader, ""), false).body, obj);
    }
    drop(stalled);

    // clients that leave in the middle of a body, or of a head
    for _ in 0..20 {
        let mut c = connect_small_window(s);
        c.write_all(get_req("GET", "k", &s.reader, "").as_bytes()).unwrap();
        let mut some = [0u8; 100];
        c.read_exact(&mut some).unwrap();
        drop(c);
        let mut c = connect(s);
        c.write_all(b"GET /v1/objects/ds/k HTTP/1.1\r\nHost").unwrap();
        drop(c);
    }
    // the single worker still serves
    let served = fast_served(s);
    let r = fast(s, &get_req("GET", "k", &s.reader, ""), false);
    assert_eq!(r.body, obj);
    assert_eq!(fast_served(s), served + 1);
}
