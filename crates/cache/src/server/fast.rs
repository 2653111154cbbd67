//! The fast path for plain-TCP connections: `GET`/`HEAD /v1/objects/...` of a whole object
//! or of one `Range` answered without hyper, the body sent with `sendfile(2)` straight from
//! the object's file, whatever its size.
//!
//! Why it exists: a 64 KiB GET through hyper cost more CPU than nginx's (docs/perf.md): hyper
//! writes the body from the memory tier with `writev`, which copies it into the socket's
//! buffers, while nginx's `sendfile` hands the page-cache pages to the socket without a copy.
//! Serving the common request here also skips hyper's request and response maps. Big objects
//! (over 256 KiB, read from disk) were streamed by hyper's path until issue 42, which cost 2.2×
//! nginx's CPU at 4 MiB (copies through 1 MiB zeroed buffers and `writev`); they are sent from
//! their file here too, each window of the body read into the page cache on the blocking pool
//! first when it is not there ([`super::pagecache`]), so the worker never waits for the disk.
//!
//! It only serves what it can answer exactly as the hyper path would: an HTTP/1.1 `GET` or
//! `HEAD` of an object this node owns, with no body, at most one `Range` and one
//! `If-None-Match` header, no `Expect`/`Upgrade` headers, no `Connection` but `keep-alive`,
//! nothing pipelined after it, that the token may read, that is found and whose answer is a
//! 200 or 206. Everything else — other routes and methods, a key another node owns (in a
//! spread bucket: a node-placed bucket's keys are all served here), a refusal or miss, a 304
//! or 416, a head it cannot parse or longer than [`MAX_HEAD`] — goes to the hyper service
//! together with the bytes already read ([`super::guard`]), so hyper sees the request as the
//! client sent it and answers as before; answers decided after the lookup (404, 401, 403,
//! 304, 416) are handed over already made, so that counters move once. A connection once
//! handed over stays with hyper.

use std::io::IoSlice;
use std::sync::Arc;

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, Response, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::objects::{self, Object, Source};
use super::range::{self, Want};
use super::sendfile;
use super::{Body, FORWARDED, Node};
use crate::metrics::NodeCounters;

/// The longest request head served here; a longer one is handed to hyper (whose own limit,
/// ~400 KiB, then applies), so a client can never make this path hold more than this.
pub const MAX_HEAD: usize = 16 * 1024;
/// Header lines parsed here; more go to hyper (which allows 100).
const MAX_HEADERS: usize = 32;
/// Bodies from memory at least this big are sent from their file with `sendfile`; smaller
/// ones are written from memory (the copy then costs less than opening the file).
const SENDFILE_MIN: u64 = 16 * 1024;

/// What the head in front of the buffer asks for.
enum Head {
    /// Not whole yet: read more.
    Partial,
    /// Not for this path.
    Handover,
    /// A read of `target` (the path after `/v1/objects/`), its `Authorization`, `Range` and
    /// `If-None-Match` headers put in the map [`parse`] was given.
    Read { head: bool, len: usize, target: String, forwarded: bool },
}

/// Serves `stream` until the client closes it or a request goes to hyper.
pub async fn serve(node: Arc<Node>, mut stream: TcpStream) {
    let mut buf = BytesMut::with_capacity(4096);
    // kept from one request to the next: its allocation is reused
    let mut headers = HeaderMap::with_capacity(4);
    // whether the send buffer was grown for a big body ([`sendfile::grow_send_buffer`])
    let mut grown = false;
    loop {
        let (head, len, target, forwarded) = loop {
            match parse(&buf, &mut headers) {
                Head::Read { head, len, target, forwarded } => break (head, len, target, forwarded),
                Head::Handover => return handover(node, stream, buf, None).await,
                Head::Partial if buf.len() >= MAX_HEAD => return handover(node, stream, buf, None).await,
                Head::Partial => {}
            }
            buf.reserve(4096);
            match stream.read_buf(&mut buf).await {
                Ok(0) if buf.is_empty() => return,
                // closed in the middle of a head: hyper answers that as it always did
                Ok(0) => return handover(node, stream, buf, None).await,
                Ok(_) => {}
                Err(_) => return,
            }
        };
        // pipelined requests behind this one: hyper keeps their order
        if len != buf.len() {
            return handover(node, stream, buf, None).await;
        }
        let Ok((bucket, key)) = objects::parse_target(&target) else {
            return handover(node, stream, buf, None).await;
        };
        if objects::owner_elsewhere(&node, forwarded, &bucket, &key).is_some() {
            return handover(node, stream, buf, None).await;
        }
        let obj = match objects::read(&node, head, &headers, &bucket, &key) {
            Ok(obj) => obj,
            Err(answer) => return handover(node, stream, buf, Some(*answer)).await,
        };
        let part = match range::parse(headers.get(header::RANGE).and_then(|v| v.to_str().ok()), obj.size) {
            _ if objects::not_modified(&headers, obj.etag) => None,
            Want::All => Some(Part { partial: false, start: 0, len: obj.size }),
            Want::Part { start, end } => Some(Part { partial: true, start, len: end - start + 1 }),
            Want::Unsatisfiable => None,
        };
        // a 304 or a 416: hyper's path makes them
        let Some(part) = part else {
            let answer = objects::get(&node, head, &headers, obj);
            return handover(node, stream, buf, Some(answer)).await;
        };
        NodeCounters::bump(&node.counters.fast_path);
        if !head && !grown && part.len >= sendfile::BIG_BODY {
            sendfile::grow_send_buffer(&stream);
            grown = true;
        }
        if send(&node, &mut stream, head, &bucket, &key, obj, part).await.is_err() {
            return;
        }
        buf.clear();
    }
}

async fn handover(node: Arc<Node>, stream: TcpStream, buf: BytesMut, first: Option<Response<Body>>) {
    super::serve_connection(node, buf, stream, first).await
}

/// Parses the head at the front of `buf`, the headers the object route reads put in `asks`.
fn parse(buf: &[u8], asks: &mut HeaderMap) -> Head {
    if buf.is_empty() {
        return Head::Partial;
    }
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut lines);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Handover,
    };
    let head = match req.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Head::Handover,
    };
    let Some(target) = req.path.and_then(|p| p.strip_prefix("/v1/objects/")) else { return Head::Handover };
    if req.version != Some(1) || !target.bytes().all(plain_path_byte) {
        return Head::Handover;
    }
    asks.clear();
    let mut forwarded = false;
    for h in req.headers.iter() {
        let name = h.name;
        let kept = KEPT.iter().find(|k| name.eq_ignore_ascii_case(k.as_str()));
        if let Some(k) = kept {
            // the one header of its name: hyper's path would read the first of several
            if asks.contains_key(k) {
                return Head::Handover;
            }
            match HeaderValue::from_bytes(h.value) {
                Ok(v) => asks.insert(k.clone(), v),
                Err(_) => return Head::Handover,
            };
        } else if name.eq_ignore_ascii_case(FORWARDED) {
            forwarded = true;
        } else if name.eq_ignore_ascii_case("connection") {
            // what HTTP/1.1 means anyway, and hyper's answer is the same without it; Python's
            // `requests` (PFIO's client) sends it with every request
            if !h.value.eq_ignore_ascii_case(b"keep-alive") {
                return Head::Handover;
            }
        } else if HANDED_OVER.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            return Head::Handover;
        }
    }
    Head::Read { head, len, target: target.to_string(), forwarded }
}

/// Request headers the object route reads, kept for it: the token, a part of the object, a
/// conditional answer.
const KEPT: [HeaderName; 3] = [header::AUTHORIZATION, header::RANGE, header::IF_NONE_MATCH];

/// Request headers that change what hyper or the object route answer: a body, the
/// connection's life.
const HANDED_OVER: &[&str] =
    &["content-length", "transfer-encoding", "expect", "upgrade", "te", "trailer", "keep-alive"];

/// Bytes of a path served here: RFC 3986 `pchar` and `/`, all of which `http::Uri` (hyper's
/// parser) takes as they are; a query, fragment or anything unusual goes to hyper.
fn plain_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b)
}

/// What of the object to send: all of it (200) or `len` bytes from `start` (206).
#[derive(Clone, Copy)]
struct Part {
    partial: bool,
    start: u64,
    len: u64,
}

/// Writes the 200 or 206 answer to a GET or HEAD: the head hyper would write (same headers in
/// the same order, its `date`), then the body.
async fn send(
    node: &Node,
    stream: &mut TcpStream,
    head: bool,
    bucket: &str,
    key: &[u8],
    obj: Object,
    part: Part,
) -> std::io::Result<()> {
    let Part { partial, start, len } = part;
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(if partial { b"HTTP/1.1 206 Partial Content" } else { b"HTTP/1.1 200 OK" });
    h.extend_from_slice(b"\r\naccept-ranges: bytes\r\nx-berth-cache: hit\r\netag: ");
    h.extend_from_slice(&objects::etag_bytes(obj.etag));
    if partial {
        let mut n = itoa::Buffer::new();
        h.extend_from_slice(b"\r\ncontent-range: bytes ");
        h.extend_from_slice(n.format(start).as_bytes());
        h.push(b'-');
        h.extend_from_slice(n.format(start + len - 1).as_bytes());
        h.push(b'/');
        h.extend_from_slice(n.format(obj.size).as_bytes());
    }
    h.extend_from_slice(b"\r\ncontent-type: application/octet-stream\r\ncontent-length: ");
    h.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    h.extend_from_slice(b"\r\ndate: ");
    super::date::extend(&mut h);
    h.extend_from_slice(b"\r\n\r\n");
    if head {
        return stream.write_all(&h).await;
    }
    match &obj.source {
        Source::Memory(d) => {
            let data = &d[start as usize..(start + len) as usize];
            if len >= SENDFILE_MIN && sendfile::send_object(node, stream, &h, bucket, key, &obj, start, len).await? {
                return Ok(());
            }
            write_two(stream, &h, data).await
        }
        // kept open by the store, which closes it when the object changes (`crate::files`)
        Source::File(f) => sendfile::send_file(stream, &h, f, start, len).await,
    }
}

/// `head` then `body`, in one `writev` when the socket takes it.
async fn write_two(stream: &mut TcpStream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < head.len() {
        let n = stream.write_vectored(&[IoSlice::new(&head[done..]), IoSlice::new(body)]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    stream.write_all(&body[done - head.len()..]).await
}
