//! Objects bigger than the memory tier takes (over 256 KiB, read from disk) over real HTTP on
//! 127.0.0.1 (issue 42): on plain HTTP the fast path sends them from their file with
//! `sendfile`, whole or one `Range` of them, with hyper's exact answers; over HTTPS they stream
//! through hyper. Either way a file evicted from the page cache is read in first, a file
//! unlinked while it is sent still arrives whole, and a file truncated under the cache ends
//! the answer (the client sees a cut body and a closed connection, never a hang or garbage).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use berth_cache::BucketConfig;
use support::Srv;

const MIB: usize = 1 << 20;

/// One answer: its status, its head with the `date` value blanked, its body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

fn read_head(c: &mut impl Read) -> String {
    let mut head = vec![];
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut b).unwrap(), 1, "closed inside a head: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

fn content_length(head: &str) -> usize {
    head.lines().find_map(|l| l.strip_prefix("content-length: ")).map_or(0, |v| v.trim().parse().unwrap())
}

fn read_answer(c: &mut impl Read, head_request: bool) -> Answer {
    let head = read_head(c);
    let status = head[9..12].parse().unwrap();
    let mut body = vec![0u8; if head_request || status == 304 { 0 } else { content_length(&head) }];
    c.read_exact(&mut body).unwrap();
    let head = head.lines().map(|l| if l.starts_with("date: ") { "date: *" } else { l }).collect::<Vec<_>>().join("\n");
    Answer { status, head, body }
}

fn node() -> (Srv, String, String) {
    let s = Srv::start(1 << 30);
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
    let (admin, reader) = (s.token(&[], true), s.token(&["p"], false));
    (s, admin, reader)
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i / 7) as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn put(s: &Srv, admin: &str, key: &str, obj: &[u8]) {
    let mut c = s.connect();
    let mut req = format!(
        "PUT /v1/objects/ds/{key} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {admin}\r\ncontent-length: {}\r\n\r\n",
        obj.len()
    )
    .into_bytes();
    req.extend_from_slice(obj);
    c.write_all(&req).unwrap();
    assert_eq!(read_answer(&mut c, false).status, 201);
}

fn req(method: &str, key: &str, token: &str, extra: &str) -> String {
    format!("{method} /v1/objects/ds/{key} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n{extra}\r\n")
}

/// The answer on a new connection (the fast path's, when it takes the request).
fn ask(s: &Srv, r: &str) -> Answer {
    let mut c = s.connect();
    c.write_all(r.as_bytes()).unwrap();
    read_answer(&mut c, r.starts_with("HEAD"))
}

/// hyper's answer: two copies pipelined in one write are always handed over.
fn by_hyper(s: &Srv, r: &str) -> Answer {
    let mut c = s.connect();
    c.write_all(format!("{r}{r}").as_bytes()).unwrap();
    let a = read_answer(&mut c, r.starts_with("HEAD"));
    assert_eq!(read_answer(&mut c, r.starts_with("HEAD")), a);
    a
}

fn fast_served(s: &Srv) -> u64 {
    s.node.counters.fast_path.load(Ordering::Relaxed)
}

/// The file holding `key`'s object.
fn file_of(s: &Srv, key: &str) -> std::path::PathBuf {
    let found = s.node.store.lookup("ds", key.as_bytes(), false).expect("the object is in the index");
    s.node.store.path_of(&found)
}

/// Drops the file's pages from the page cache (they are clean: written, then synced).
fn evict_from_page_cache(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    nix::fcntl::posix_fadvise(f.as_raw_fd(), 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED).unwrap();
}

#[test]
fn big_objects_whole_and_ranged_are_sent_by_the_fast_path_as_hyper_would() {
    let (s, admin, reader) = node();
    // just over the memory tier's limit, an odd size, and one over two page-cache windows
    let sizes = [("300k", 300 * 1024 + 5), ("1m", MIB + 3), ("9m", 9 * MIB + 1)];
    for (key, size) in sizes {
        let obj = data(size, size as u8);
        put(&s, &admin, key, &obj);
        let etag = ask(&s, &req("HEAD", key, &reader, ""))
            .head
            .lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .unwrap()
            .to_string();
        let tail = format!("Range: bytes={}-\r\n", size - 300_000);
        let mut cases = vec![
            ("", 200, 0..size),
            ("Range: bytes=100-400000\r\n", 206, 100..400_001.min(size)),
            (&tail as &str, 206, size - 300_000..size),
            ("Range: bytes=-262145\r\n", 206, size - 262_145..size),
            ("Range: bytes=0-0\r\n", 206, 0..1),
            ("Range: bytes=0-1,5-6\r\n", 200, 0..size),
            ("If-None-Match: \"other\"\r\n", 200, 0..size),
        ];
        if size > 5 * MIB {
            // across the first page-cache window's end
            cases.push(("Range: bytes=4194000-4194999\r\n", 206, 4_194_000..4_195_000));
        }
        for (extra, status, want) in cases {
            for method in ["GET", "HEAD"] {
                let r = req(method, key, &reader, extra);
                let served = fast_served(&s);
                let a = ask(&s, &r);
                assert_eq!(fast_served(&s), served + 1, "{method} {key} {extra}: answered by the fast path");
                assert_eq!(a, by_hyper(&s, &r), "{method} {key} {extra}: the fast path's answer differs from hyper's");
                assert_eq!(a.status, status, "{method} {key} {extra}");
                assert!(a.head.contains(&format!("content-length: {}", want.len())), "{}", a.head);
                if method == "GET" {
                    assert!(a.body == obj[want.clone()], "{key} {extra}: not the object's bytes");
                }
            }
        }
        // 304 and 416: made by hyper's code, which keeps the connection
        let served = fast_served(&s);
        let a = ask(&s, &req("GET", key, &reader, &format!("If-None-Match: {etag}\r\nRange: bytes=0-9\r\n")));
        assert_eq!((a.status, a.body.len()), (304, 0));
        let a = ask(&s, &req("GET", key, &reader, &format!("Range: bytes={size}-\r\n")));
        assert_eq!(a.status, 416);
        assert!(a.head.contains(&format!("content-range: bytes */{size}")), "{}", a.head);
        assert_eq!(fast_served(&s), served);
    }

    // one keep-alive connection: whole, ranged and HEAD requests one after another
    let obj = data(9 * MIB + 1, (9 * MIB + 1) as u8);
    let mut c = s.connect();
    let served = fast_served(&s);
    for extra in ["", "Range: bytes=5000000-5999999\r\n", "", "Range: bytes=-10\r\n"] {
        c.write_all(req("GET", "9m", &reader, extra).as_bytes()).unwrap();
        let a = read_answer(&mut c, false);
        let start = obj.len() - a.body.len();
        let want = if extra.contains("5000000") { &obj[5_000_000..6_000_000] } else { &obj[start..] };
        assert!(a.body == want, "{extra}");
        c.write_all(req("HEAD", "9m", &reader, "").as_bytes()).unwrap();
        assert_eq!(read_answer(&mut c, true).status, 200);
    }
    assert_eq!(fast_served(&s), served + 8, "the connection stayed with the fast path");
    assert_eq!(s.node.store.stats()[0].misses, 0);
}

#[test]
fn a_big_object_not_in_the_page_cache_is_read_in_and_sent_whole() {
    let (s, admin, reader) = node();
    let obj = data(9 * MIB + 1, 1);
    put(&s, &admin, "k", &obj);
    for extra in ["", "Range: bytes=4000000-8500000\r\n"] {
        evict_from_page_cache(&file_of(&s, "k"));
        let a = ask(&s, &req("GET", "k", &reader, extra));
        let want = if extra.is_empty() { &obj[..] } else { &obj[4_000_000..8_500_001] };
        assert!(a.body == want, "{extra}: not the object's bytes");
    }
}

/// A connection whose receive buffer is a few KiB, so that the server must wait to send.
fn connect_small_window(s: &Srv) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let c = rt.block_on(sock.connect(s.addr)).unwrap().into_std().unwrap();
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

#[test]
fn a_big_object_deleted_or_replaced_while_it_is_sent_still_arrives_whole() {
    let (s, admin, reader) = node();
    let obj = data(8 * MIB, 2);
    for (i, change) in ["DELETE", "PUT"].into_iter().enumerate() {
        let key = format!("k{i}");
        put(&s, &admin, &key, &obj);
        let mut c = connect_small_window(&s);
        c.write_all(req("GET", &key, &reader, "").as_bytes()).unwrap();
        let head = read_head(&mut c);
        let mut first = vec![0u8; 100_000];
        c.read_exact(&mut first).unwrap();
        // the file is unlinked (DELETE) or replaced by a rename (PUT) meanwhile
        if change == "DELETE" {
            let (status, _) = s.request("DELETE", &format!("/v1/objects/ds/{key}"), Some(&admin), b"");
            assert_eq!(status, 204);
        } else {
            put(&s, &admin, &key, &data(MIB, 3));
        }
        let mut rest = vec![0u8; content_length(&head) - first.len()];
        c.read_exact(&mut rest).unwrap();
        first.extend_from_slice(&rest);
        assert!(first == obj, "{change}: the answer begun is the old object, whole");
    }
}

/// Truncates `key`'s object file to its header and `keep` bytes of data.
fn truncate(s: &Srv, key: &str, size: usize, keep: usize) {
    let path = file_of(s, key);
    let len = std::fs::metadata(&path).unwrap().len();
    let header = len - size as u64;
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(header + keep as u64).unwrap();
}

/// Reads what follows a head on `c` until the server closes: the body, cut short.
fn cut_body(c: &mut impl Read, what: &str) -> Vec<u8> {
    let mut got = vec![];
    let _ = c.read_to_end(&mut got);
    assert!(!got.is_empty(), "{what}: nothing of the body was sent");
    got
}

#[test]
fn a_truncated_object_file_ends_the_answer_instead_of_hanging() {
    let (s, admin, reader) = node();
    let (size, keep) = (6 * MIB, 5 * MIB + 1000);
    let obj = data(size, 4);
    for (key, extra, from) in [("whole", "", 0), ("ranged", "Range: bytes=4000000-\r\n", 4_000_000)] {
        put(&s, &admin, key, &obj);
        truncate(&s, key, size, keep);
        for evicted in [false, true] {
            if evicted {
                evict_from_page_cache(&file_of(&s, key));
            }
            let mut c = s.connect();
            c.write_all(req("GET", key, &reader, extra).as_bytes()).unwrap();
            let head = read_head(&mut c);
            assert_eq!(content_length(&head), size - from, "{head}");
            let got = cut_body(&mut c, key);
            assert!(got.len() < size - from, "{key}: the body must be cut, not padded");
            assert!(got == obj[from..from + got.len()], "{key}: the bytes sent are the object's");
        }
    }
    // a HEAD still answers from the header, and the worker goes on serving
    let a = ask(&s, &req("HEAD", "whole", &reader, ""));
    assert!(a.status == 200 && a.head.contains(&format!("content-length: {size}")), "{}", a.head);
    put(&s, &admin, "after", &obj);
    assert!(ask(&s, &req("GET", "after", &reader, "")).body == obj);
}

#[test]
fn big_objects_over_https_stream_whole_ranged_and_cut_when_truncated() {
    let (tls, client) = support::self_signed_tls();
    let s = Srv::start_tls(1 << 30, tls);
    s.node
        .store
        .put_bucket(BucketConfig { name: "ds".into(), projects: vec!["p".into()], ..Default::default() })
        .unwrap();
    let (admin, reader) = (s.token(&[], true), s.token(&["p"], false));
    let connect = || {
        let conn = rustls::ClientConnection::new(client.clone(), "localhost".try_into().unwrap()).unwrap();
        rustls::StreamOwned::new(conn, s.connect())
    };
    let obj = data(3 * MIB + 7, 5);
    let mut c = connect();
    let mut put = format!(
        "PUT /v1/objects/ds/k HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {admin}\r\ncontent-length: {}\r\n\r\n",
        obj.len()
    )
    .into_bytes();
    put.extend_from_slice(&obj);
    c.write_all(&put).unwrap();
    assert_eq!(read_answer(&mut c, false).status, 201);
    for (extra, status, want) in
        [("", 200, 0..obj.len()), ("Range: bytes=1000000-2500000\r\n", 206, 1_000_000..2_500_001)]
    {
        c.write_all(req("GET", "k", &reader, extra).as_bytes()).unwrap();
        let a = read_answer(&mut c, false);
        assert_eq!(a.status, status);
        assert!(a.body == obj[want], "{extra}: not the object's bytes");
    }
    truncate(&s, "k", obj.len(), 2 * MIB);
    let mut c = connect();
    c.write_all(req("GET", "k", &reader, "").as_bytes()).unwrap();
    let head = read_head(&mut c);
    assert_eq!(content_length(&head), obj.len());
    let got = cut_body(&mut c, "https");
    assert!(got.len() < obj.len() && got == obj[..got.len()], "the body is cut, its bytes the object's");
}

/// Descriptors of this process (the node runs in it) open on a deleted file of `s`'s objects:
/// a replaced, deleted or evicted object's file kept open would hold its disk space.
fn deleted_files_held(s: &Srv) -> usize {
    let objects = s.node.store.root().join("objects");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|p| p.starts_with(&objects) && p.to_string_lossy().ends_with(" (deleted)"))
        .count()
}

#[test]
fn a_kept_open_file_never_serves_a_replaced_deleted_or_evicted_object() {
    let (s, admin, reader) = node();
    let (old, new) = (data(2 * MIB + 1, 6), data(MIB + 5, 7));
    put(&s, &admin, "k", &old);
    for _ in 0..2 {
        assert!(ask(&s, &req("GET", "k", &reader, "")).body == old);
    }
    assert_eq!(s.node.store.open_files(), 1, "the big object's file is kept open for the next GET");
    // replaced: every later answer, fast path or hyper's, whole or ranged, is the new object
    put(&s, &admin, "k", &new);
    assert_eq!(deleted_files_held(&s), 0, "the replaced file was closed, its space freed");
    for _ in 0..2 {
        for (extra, want) in [("", &new[..]), ("Range: bytes=1000-\r\n", &new[1000..])] {
            let r = req("GET", "k", &reader, extra);
            assert!(ask(&s, &r).body == want, "{extra}: the fast path sent the replaced object");
            assert!(by_hyper(&s, &r).body == want, "{extra}: hyper's path sent the replaced object");
        }
    }
    // deleted: a miss, its file closed
    let (status, _) = s.request("DELETE", "/v1/objects/ds/k", Some(&admin), b"");
    assert_eq!(status, 204);
    for r in [req("GET", "k", &reader, ""), req("HEAD", "k", &reader, "")] {
        assert_eq!(ask(&s, &r).status, 404, "{r}");
        assert_eq!(by_hyper(&s, &r).status, 404, "{r}");
    }
    assert_eq!((s.node.store.open_files(), deleted_files_held(&s)), (0, 0));
    // evicted by a quota set below what the bucket holds: a miss, its file closed
    put(&s, &admin, "e", &old);
    assert!(ask(&s, &req("GET", "e", &reader, "")).body == old);
    assert_eq!(s.node.store.open_files(), 1);
    let cfg = s.node.store.bucket("ds").unwrap();
    s.node.store.put_bucket(BucketConfig { quota: Some(MIB as u64), ..cfg }).unwrap();
    assert_eq!(ask(&s, &req("GET", "e", &reader, "")).status, 404);
    assert_eq!((s.node.store.open_files(), deleted_files_held(&s)), (0, 0));
}
