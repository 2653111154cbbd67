//! `PUT|GET|HEAD|DELETE /v1/objects/{bucket}/{key}`.
//!
//! GET of a small object is answered from memory when the store's memory tier holds it
//! ([`crate::hot`]); otherwise it is read inline on the async worker (a page-cache read of a
//! few KiB costs less than a hop to the blocking pool) and then kept in memory. Bigger objects
//! are sent from their file by the fast path (`fast.rs`, plain HTTP); here (HTTPS, whose bytes
//! must pass through rustls, and connections handed to hyper) they are streamed by a blocking
//! reader in 1 MiB chunks, read into buffers that are not zeroed first, through a small
//! channel, so a slow client holds back the reader instead of filling memory. PUT bodies are
//! buffered in memory up to 1 MiB and written in one blocking task; bigger ones are written in
//! 4 MiB steps as they arrive.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use berth_model::api::BucketPlacement;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;

use super::forward::ForwardError;
use super::range::{self, Want};
use super::{Body, FORWARDED, Node, auth, error};
use crate::StoreError;
use crate::files::OpenFile;
use crate::metrics::NodeCounters;
use crate::store::{Checked, Found};

/// Objects up to this size are read inline; larger ones are streamed.
const INLINE_READ: u64 = 256 * 1024;
const CHUNK: usize = 1024 * 1024;
/// PUT bodies up to this size are buffered and written in one go.
const BUFFERED_PUT: u64 = 1024 * 1024;
const PUT_STEP: usize = 4 * 1024 * 1024;

/// Splits `{bucket}/{key}` (still percent-encoded) into the bucket name and the key bytes.
pub fn parse_target(rest: &str) -> Result<(String, Vec<u8>), String> {
    let Some((b, k)) = rest.split_once('/') else {
        return Err("the path names no key: use /v1/objects/BUCKET/KEY".into());
    };
    let bucket = percent_decode_str(b)
        .decode_utf8()
        .map_err(|_| "the bucket name is not UTF-8: use lowercase letters, digits, `.`, `_` or `-`".to_string())?
        .into_owned();
    let key: Vec<u8> = percent_decode_str(k).collect();
    crate::bucket::validate_key(&key).map_err(|e| e.to_string())?;
    Ok((bucket, key))
}

fn status_of(e: &StoreError) -> StatusCode {
    match e {
        StoreError::BadRequest(_) => StatusCode::BAD_REQUEST,
        StoreError::NoBucket(_) => StatusCode::NOT_FOUND,
        StoreError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        StoreError::Corrupt(_) | StoreError::Io { .. } | StoreError::Private { .. } => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

fn store_error(e: StoreError) -> Response<Body> {
    if matches!(e, StoreError::Io { .. } | StoreError::Corrupt(_) | StoreError::Private { .. }) {
        tracing::error!(error = %e, "cache store error");
    }
    error(status_of(&e), &e.to_string())
}

/// `"<16 hex digits>"` as a header value, without the formatting machinery (every GET sends one).
fn etag_value(v: u64) -> HeaderValue {
    HeaderValue::from_bytes(&etag_bytes(v)).expect("hex digits and quotes are a valid header value")
}

static X_BERTH_CACHE: HeaderName = HeaderName::from_static("x-berth-cache");

fn miss(why: &'static str) -> Response<Body> {
    let mut r = error(StatusCode::NOT_FOUND, "not in the cache: read it from the source (and PUT it here)");
    r.headers_mut().insert("x-berth-cache", HeaderValue::from_static(why));
    r
}

/// The node a request for `bucket/key` must be forwarded to: the key's owner when that is
/// another node and the request was not already forwarded here (it is then served here, so
/// that two nodes briefly disagreeing on the member list never bounce it between them). A
/// bucket placed per node (`placement: node`) is never forwarded: each node serves its own
/// copies. Its placement is looked up only for keys owned elsewhere, so an owned key of a
/// spread bucket costs no extra lock.
pub(super) fn owner_elsewhere(node: &Node, forwarded: bool, bucket: &str, key: &[u8]) -> Option<String> {
    if forwarded {
        return None;
    }
    let maglev = node.maglev();
    let owner = maglev.owner(bucket, key).filter(|o| o.name != node.name)?;
    if node.store.placement(bucket) == Some(BucketPlacement::Node) {
        return None;
    }
    Some(owner.name.clone())
}

pub async fn handle(node: &Arc<Node>, req: Request<Incoming>, bucket: String, key: Vec<u8>) -> Response<Body> {
    if let Some(owner) = owner_elsewhere(node, req.headers().contains_key(FORWARDED), &bucket, &key) {
        let method = req.method().clone();
        NodeCounters::bump(&node.counters.forwarded);
        return match node.forwarder.forward(&owner, req).await {
            Ok(r) => r,
            Err(e) => {
                NodeCounters::bump(&node.counters.forward_errors);
                if let ForwardError::Failed(why) = &e {
                    tracing::warn!(%owner, %why, "cache owner did not answer; serving a miss");
                }
                if method == Method::GET || method == Method::HEAD {
                    miss("owner-unreachable")
                } else {
                    error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!(
                            "the key's owner {owner} is unreachable, nothing was changed: retry later, or read from the source meanwhile"
                        ),
                    )
                }
            }
        };
    }
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return match read(node, req.method() == Method::HEAD, req.headers(), &bucket, &key) {
            Ok(obj) => get(node, req.method() == Method::HEAD, req.headers(), obj),
            Err(r) => *r,
        };
    }
    let Some(cfg) = node.store.bucket(&bucket) else {
        return store_error(StoreError::NoBucket(bucket));
    };
    if let Err(r) = auth::bucket_access(node, req.headers(), &cfg, true) {
        return *r;
    }
    match *req.method() {
        Method::PUT => put(node, req, bucket, key).await,
        Method::DELETE => {
            let store = node.store.clone();
            match tokio::task::spawn_blocking(move || store.delete(&bucket, &key)).await {
                Ok(true) => Response::builder().status(StatusCode::NO_CONTENT).body(Body::empty()).expect("response"),
                Ok(false) => miss("miss"),
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("delete failed: {e}")),
            }
        }
        _ => {
            let mut r = error(StatusCode::METHOD_NOT_ALLOWED, "objects support GET, HEAD, PUT and DELETE");
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, PUT, DELETE"));
            r
        }
    }
}

/// Where a GET's bytes come from.
pub(super) enum Source {
    Memory(Bytes),
    /// The object's file, kept open by the store ([`crate::files`]) or opened for this GET.
    File(Arc<OpenFile>),
}

/// An object a GET or HEAD found and may read.
pub(super) struct Object {
    pub source: Source,
    pub size: u64,
    pub etag: u64,
    pub found: Found,
}

/// The part of a GET or HEAD that both the hyper path and the fast path (`fast.rs`) run:
/// access check, lookup (a GET's hit or miss counted), and the object's bytes, from memory,
/// read whole (small objects, then kept in memory) or an open file; or the response to answer
/// instead (miss, unknown bucket, refused token, read error).
pub(super) fn read(
    node: &Node,
    head: bool,
    headers: &HeaderMap,
    bucket: &str,
    key: &[u8],
) -> Result<Object, auth::Refusal> {
    let check = |cfg: &crate::BucketConfig| auth::bucket_access(node, headers, cfg, false);
    let mut found = match node.store.lookup_checked(bucket, key, !head, check) {
        Ok(Some(found)) => found,
        Ok(None) => return Err(Box::new(miss("miss"))),
        Err(Checked::NoBucket) => return Err(Box::new(store_error(StoreError::NoBucket(bucket.to_string())))),
        Err(Checked::Refused(r)) => return Err(r),
    };
    // taken, not cloned: every clone of a shared buffer is an atomic on a cache line that the
    // other worker threads serving the same object also write
    if let Some(h) = found.hot.take() {
        return Ok(Object { size: h.data.len() as u64, etag: h.etag, source: Source::Memory(h.data), found });
    }
    if let Some(f) = found.file.take() {
        return Ok(Object { size: f.size, etag: f.etag, source: Source::File(f), found });
    }
    match node.store.open_object(bucket, key, &found, if head { 0 } else { INLINE_READ }) {
        Ok(Some(o)) => {
            node.store.keep_in_memory(&found, &o);
            let (size, etag) = (o.header.size, o.header.etag);
            let source = match o.data {
                Some(d) => Source::Memory(d),
                None => {
                    let f = Arc::new(OpenFile::new(o.file, o.data_offset, etag, size));
                    node.store.keep_open(&found, &f);
                    Source::File(f)
                }
            };
            Ok(Object { source, size, etag, found })
        }
        Ok(None) => Err(Box::new(miss("miss"))),
        Err(e) => Err(Box::new(store_error(StoreError::io(&node.store.path_of(&found), e)))),
    }
}

/// Bytes of an ETag value: a quoted 64-bit hash in hex.
pub(super) const ETAG_LEN: usize = 18;

/// `"<16 hex digits>"`, the object's ETag.
pub(super) fn etag_bytes(v: u64) -> [u8; ETAG_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b = [b'"'; ETAG_LEN];
    for (i, d) in b[1..17].iter_mut().enumerate() {
        *d = HEX[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    b
}

/// Whether the request's `If-None-Match` names the object's ETag `etag` (or is `*`): the
/// answer is then a 304.
pub(super) fn not_modified(req_headers: &HeaderMap, etag: u64) -> bool {
    let Some(inm) = req_headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) else { return false };
    let tag = etag_bytes(etag);
    inm.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/").as_bytes() == tag)
}

/// The answer to a GET or HEAD of `obj`: the whole object, the part `Range` asks for, or a
/// 304 when `If-None-Match` names its ETag.
pub(super) fn get(node: &Node, head: bool, req_headers: &HeaderMap, obj: Object) -> Response<Body> {
    let Object { source, size, etag, found } = obj;
    let tag = etag_value(etag);
    // built by hand, not with `Response::builder()`: the builder parses every name and value
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(X_BERTH_CACHE.clone(), HeaderValue::from_static("hit"));
    if not_modified(req_headers, etag) {
        headers.insert(header::ETAG, tag);
        return response(StatusCode::NOT_MODIFIED, headers, Body::empty());
    }
    headers.insert(header::ETAG, tag);
    let (status, start, len) = match range::parse(req_headers.get(header::RANGE).and_then(|v| v.to_str().ok()), size) {
        Want::All => (StatusCode::OK, 0, size),
        Want::Part { start, end } => {
            let v = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}")).expect("ascii");
            headers.insert(header::CONTENT_RANGE, v);
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        Want::Unsatisfiable => {
            let mut r = error(StatusCode::RANGE_NOT_SATISFIABLE, &format!("the object has {size} bytes"));
            r.headers_mut()
                .insert(header::CONTENT_RANGE, HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"));
            return r;
        }
    };
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if head {
        return response(status, headers, Body::empty());
    }
    let body = match source {
        Source::Memory(d) if len == size => Body::full(d),
        Source::Memory(d) => Body::full(d.slice(start as usize..(start + len) as usize)),
        Source::File(opened) if len <= INLINE_READ => match read_new(&opened, len as usize, start) {
            Ok(b) => Body::full(b),
            Err(e) => return store_error(StoreError::io(&node.store.path_of(&found), e)),
        },
        Source::File(opened) => stream(opened, start, len),
    };
    response(status, headers, body)
}

fn response(status: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

/// `n` bytes of the object's data from `start`, read into a new buffer that is not zeroed
/// first (zeroing 1 MiB chunks was 13 % of a big GET's time, issue 42); a file that ends
/// before them is an `UnexpectedEof` error.
fn read_new(o: &OpenFile, n: usize, start: u64) -> std::io::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(n);
    let spare = buf.spare_capacity_mut();
    let mut done = 0;
    while done < n {
        // SAFETY: `pread` writes at most `n - done` bytes from `spare[done]` on, all within
        // the buffer's capacity, and reads none
        let r = unsafe {
            nix::libc::pread(
                o.file.as_raw_fd(),
                spare[done..].as_mut_ptr().cast(),
                n - done,
                (o.data_offset + start + done as u64) as nix::libc::off_t,
            )
        };
        match r {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            r if r > 0 => done += r as usize,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    // SAFETY: the loop above wrote all `n` bytes
    unsafe { buf.set_len(n) };
    Ok(buf.freeze())
}

/// Streams `len` bytes from `start` by a blocking reader; a read error ends the body with an
/// error, so the client sees a cut connection, never a short object passed off as whole.
fn stream(o: Arc<OpenFile>, start: u64, len: u64) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        let mut off = start;
        let end = start + len;
        while off < end {
            let n = CHUNK.min((end - off) as usize);
            let r = read_new(&o, n, off);
            let failed = r.is_err();
            if tx.blocking_send(r).is_err() || failed {
                return; // client gone, or the error is sent
            }
            off += n as u64;
        }
    });
    Body::Chunks { rx, left: len }
}

async fn put(node: &Arc<Node>, req: Request<Incoming>, bucket: String, key: Vec<u8>) -> Response<Body> {
    let Some(size) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    else {
        return error(
            StatusCode::LENGTH_REQUIRED,
            "PUT needs a Content-Length header: send the object's size (no chunked uploads)",
        );
    };
    let store = node.store.clone();
    let mut body = req.into_body();
    let result = if size <= BUFFERED_PUT {
        let mut buf = Vec::with_capacity(size as usize);
        while let Some(f) = body.frame().await {
            match f {
                Ok(f) => {
                    if let Some(d) = f.data_ref() {
                        buf.extend_from_slice(d);
                    }
                }
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("reading the body failed: {e}")),
            }
        }
        tokio::task::spawn_blocking(move || {
            let mut p = store.begin_put(&bucket, &key, size)?;
            p.write(&buf)?;
            store.commit(p)
        })
        .await
    } else {
        let s = store.clone();
        let mut p = match tokio::task::spawn_blocking(move || s.begin_put(&bucket, &key, size)).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return store_error(e),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &format!("put failed: {e}")),
        };
        let mut buf = BytesMut::with_capacity(PUT_STEP);
        loop {
            let frame = body.frame().await;
            let done = frame.is_none();
            match frame {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        buf.extend_from_slice(d);
                    }
                }
                Some(Err(e)) => return error(StatusCode::BAD_REQUEST, &format!("reading the body failed: {e}")),
                None => {}
            }
            if buf.len() >= PUT_STEP || (done && !buf.is_empty()) {
                let chunk: Bytes = buf.split().freeze();
                p = match tokio::task::spawn_blocking(move || p.write(&chunk).map(|()| p)).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => return store_error(e),
                    Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &format!("put failed: {e}")),
                };
            }
            if done {
                break;
            }
        }
        tokio::task::spawn_blocking(move || store.commit(p)).await
    };
    match result {
        Ok(Ok(h)) => Response::builder()
            .status(StatusCode::CREATED)
            .header(header::ETAG, etag_value(h.etag))
            .body(Body::empty())
            .expect("response"),
        Ok(Err(e)) => store_error(e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("put failed: {e}")),
    }
}
