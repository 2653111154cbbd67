//! The fast path for plain-TCP connections: whole-object `GET`/`HEAD /v1/objects/...`
//! answered without hyper, the body sent with `sendfile(2)` straight from the object's file.
//!
//! Why it exists: a 64 KiB GET through hyper cost more CPU than nginx's (docs/perf.md): hyper
//! writes the body from the memory tier with `writev`, which copies it into the socket's
//! buffers, while nginx's `sendfile` hands the page-cache pages to the socket without a copy.
//! Serving the common request here also skips hyper's request and response maps.
//!
//! It only serves what it can answer exactly as the hyper path would: an HTTP/1.1 `GET` or
//! `HEAD` of an object this node owns, with no body, no `Range`, no `If-None-Match`, no
//! `Expect`/`Upgrade` headers, no `Connection` but `keep-alive`, nothing pipelined after it,
//! that the token may
//! read and that is found. Everything else — other routes and methods, a key another node
//! owns (in a spread bucket: a node-placed bucket's keys are all served here), a refusal or
//! miss, a head it cannot parse or longer than [`MAX_HEAD`] — goes to the
//! hyper service together with the bytes already read ([`super::guard`]), so hyper sees the
//! request as the client sent it and answers as before; answers decided after the lookup
//! (404, 401, 403) are handed over already made, so that counters move once. A connection
//! once handed over stays with hyper.

use std::io::IoSlice;
use std::sync::Arc;

use bytes::BytesMut;
use http::{HeaderMap, HeaderValue, Response, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::objects::{self, Object, Source};
use super::sendfile;
use super::{Body, FORWARDED, Node};
use crate::metrics::NodeCounters;

/// The longest request head served here; a longer one is handed to hyper (whose own limit,
/// ~400 KiB, then applies), so a client can never make this path hold more than this.
pub const MAX_HEAD: usize = 16 * 1024;
/// Header lines parsed here; more go to hyper (which allows 100).
const MAX_HEADERS: usize = 32;
/// Objects from memory at least this big are sent from their file with `sendfile`; smaller
/// ones are written from memory (the copy then costs less than opening the file).
const SENDFILE_MIN: u64 = 16 * 1024;

/// What the head in front of the buffer asks for.
enum Head {
    /// Not whole yet: read more.
    Partial,
    /// Not for this path.
    Handover,
    /// A whole-object read of `target` (the path after `/v1/objects/`).
    Read { head: bool, len: usize, target: String, auth: Option<HeaderValue>, forwarded: bool },
}

/// Serves `stream` until the client closes it or a request goes to hyper.
pub async fn serve(node: Arc<Node>, mut stream: TcpStream) {
    let mut buf = BytesMut::with_capacity(4096);
    let mut headers = HeaderMap::with_capacity(1);
    loop {
        let (head, len, target, forwarded) = loop {
            match parse(&buf) {
                Head::Read { head, len, target, auth, forwarded } => {
                    headers.clear();
                    if let Some(a) = auth {
                        headers.insert(header::AUTHORIZATION, a);
                    }
                    break (head, len, target, forwarded);
                }
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
        // a big object: streamed by hyper's path from a blocking reader, so that a file not in
        // the page cache never stalls this worker's other connections
        if !head && matches!(obj.source, Source::File(_)) {
            let answer = objects::get(&node, head, &headers, obj);
            return handover(node, stream, buf, Some(answer)).await;
        }
        NodeCounters::bump(&node.counters.fast_path);
        if send(&node, &mut stream, head, &bucket, &key, obj).await.is_err() {
            return;
        }
        buf.clear();
    }
}

async fn handover(node: Arc<Node>, stream: TcpStream, buf: BytesMut, first: Option<Response<Body>>) {
    super::serve_connection(node, buf, stream, first).await
}

/// Parses the head at the front of `buf`.
fn parse(buf: &[u8]) -> Head {
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
    let (mut auth, mut forwarded) = (None, false);
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("authorization") {
            if auth.is_some() {
                return Head::Handover;
            }
            match HeaderValue::from_bytes(h.value) {
                Ok(v) => auth = Some(v),
                Err(_) => return Head::Handover,
            }
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
    Head::Read { head, len, target: target.to_string(), auth, forwarded }
}

/// Request headers that change what hyper or the object route answer: a body, the
/// connection's life, a part of the object or a conditional answer.
const HANDED_OVER: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "expect",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "range",
    "if-none-match",
];

/// Bytes of a path served here: RFC 3986 `pchar` and `/`, all of which `http::Uri` (hyper's
/// parser) takes as they are; a query, fragment or anything unusual goes to hyper.
fn plain_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b)
}

/// Writes the 200 answer to a whole-object GET or HEAD: the head hyper would write (same
/// headers in the same order, its `date`), then the body.
async fn send(
    node: &Node,
    stream: &mut TcpStream,
    head: bool,
    bucket: &str,
    key: &[u8],
    obj: Object,
) -> std::io::Result<()> {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(b"HTTP/1.1 200 OK\r\naccept-ranges: bytes\r\nx-berth-cache: hit\r\netag: ");
    h.extend_from_slice(&objects::etag_bytes(obj.etag));
    h.extend_from_slice(b"\r\ncontent-type: application/octet-stream\r\ncontent-length: ");
    h.extend_from_slice(itoa::Buffer::new().format(obj.size).as_bytes());
    h.extend_from_slice(b"\r\ndate: ");
    super::date::extend(&mut h);
    h.extend_from_slice(b"\r\n\r\n");
    if head {
        return stream.write_all(&h).await;
    }
    let data = match &obj.source {
        Source::File(o) => return sendfile::send_file(stream, &h, &o.file, o.data_offset, obj.size).await,
        Source::Memory(d) => d,
    };
    if obj.size >= SENDFILE_MIN && sendfile::send_object(node, stream, &h, bucket, key, &obj).await? {
        return Ok(());
    }
    write_two(stream, &h, data).await
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
