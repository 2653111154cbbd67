//! What hyper reads of a connection: first the bytes the fast path (`fast.rs`) already
//! read, if any (so hyper sees the byte stream the client sent, unchanged), and every request
//! head checked for its `Content-Length` before hyper parses it.
//!
//! Why the check is here: hyper answers a `Content-Length` it cannot hold (`2^64 - 1`, `2^64 -
//! 2`) with `431 Request Header Fields Too Large`, and one that is not a number (`-1`, `abc`,
//! `99999999999999999999`) with a bare `400`, both without saying what was wrong and without
//! asking us. So each head is parsed here first (httparse, as hyper does); one whose length is
//! not a whole number below 2^64 is answered `400`, one longer than any route of the node
//! could take (its capacity, or the admin routes' JSON limit if more) `413`, each with a
//! message. The answer must come from hyper, in its place after the answers
//! to earlier requests on the connection: the head is replaced by a short `GET` carrying a
//! per-connection random marker ([`Refusals`]), which the service answers with the refusal, and
//! the connection then ends (`connection: close`, nothing more is read from the client, and
//! hyper never sees its end: it would drop the answer for an end in the middle of a request).
//!
//! To find the next head, bodies are counted through (`Content-Length`); after a chunked body
//! or an upgrade, or a head that does not parse or is very long, the rest of the connection
//! goes to hyper as it is (it answers those as it always did).

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::head::{body_length, has_head_end};
use super::{Body, error};

/// Longest head checked; a longer one goes to hyper as it is (hyper's own limit then applies).
const MAX_HEAD: usize = 64 * 1024;
/// Header lines parsed; a head with more goes to hyper as it is (hyper allows 100).
const MAX_HEADERS: usize = 100;
/// The header that marks a head put in place of a refused one.
const MARKER: &str = "x-berth-refused";

/// Where the guard leaves its refusal for the service to answer.
pub struct Refusals {
    nonce: String,
    answer: Mutex<Option<Response<Body>>>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals").finish_non_exhaustive()
    }
}

impl Refusals {
    /// The refusal to answer `req` with, if `req` is the head the guard put in place of a
    /// refused one (a client cannot make one: it does not know the marker's value).
    pub fn take<B>(&self, req: &Request<B>) -> Option<Response<Body>> {
        let v = req.headers().get(MARKER)?;
        if v.as_bytes() != self.nonce.as_bytes() {
            return None;
        }
        self.answer.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Where the guard is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a head.
    Head,
    /// Inside a body with this many bytes left.
    Body(u64),
    /// Everything left goes to hyper as it is.
    Through,
    /// A head was refused: the connection ends here.
    Refused,
}

/// `inner` as hyper should read it (see the module doc); writes go straight to `inner`.
pub struct Guard<S> {
    inner: S,
    /// Bytes read from `inner` (or handed over) and not yet given to hyper.
    pending: BytesMut,
    /// How many bytes at the front of `pending` hyper may have.
    ready: usize,
    /// Bytes at the front of `pending` (at the start of a head) known to hold no head end, so
    /// that a head sent byte by byte costs one scan, not one parse per byte.
    scanned: usize,
    state: State,
    /// The longest body any route could take: a longer one is refused.
    max_body: u64,
    refusals: Arc<Refusals>,
}

impl<S> Guard<S> {
    /// Guards `inner`, whose first bytes (at the start of a head) are `prefix`, refusing
    /// bodies over `max_body` bytes.
    pub fn new(prefix: BytesMut, inner: S, max_body: u64) -> Guard<S> {
        let refusals =
            Arc::new(Refusals { nonce: format!("{:032x}", rand::random::<u128>()), answer: Mutex::new(None) });
        Guard { inner, pending: prefix, ready: 0, scanned: 0, state: State::Head, max_body, refusals }
    }

    /// Where the service finds the refusals of this connection.
    pub fn refusals(&self) -> Arc<Refusals> {
        self.refusals.clone()
    }

    /// Looks at `pending` (at the start of a head) and decides how much of it hyper may have;
    /// false when the head is not whole yet.
    fn check_head(&mut self) -> bool {
        if !has_head_end(&self.pending, self.scanned.saturating_sub(2)) && self.pending.len() < MAX_HEAD {
            self.scanned = self.pending.len();
            return false;
        }
        self.scanned = 0;
        let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut lines);
        let len = match req.parse(&self.pending) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if self.pending.len() < MAX_HEAD => {
                // the empty line seen was a leading one (or in a broken line): scan on from here
                self.scanned = self.pending.len();
                return false;
            }
            Ok(httparse::Status::Partial) | Err(_) => {
                self.through();
                return true;
            }
        };
        let (mut lengths, mut other_framing) = (vec![], req.method == Some("CONNECT"));
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                lengths.push(h.value);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") || h.name.eq_ignore_ascii_case("upgrade") {
                other_framing = true;
            }
        }
        if other_framing {
            self.through();
            return true;
        }
        match body_length(&lengths, self.max_body) {
            Ok(n) => {
                self.ready = len;
                self.state = State::Body(n);
            }
            Err((status, msg)) => {
                let mut answer = error(status, &msg);
                answer.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                *self.refusals.answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
                let stand_in = format!(
                    "GET / HTTP/1.1\r\nhost: refused\r\n{MARKER}: {}\r\nconnection: close\r\n\r\n",
                    self.refusals.nonce
                );
                self.pending.clear();
                self.pending.extend_from_slice(stand_in.as_bytes());
                self.ready = self.pending.len();
                self.state = State::Refused;
            }
        }
        true
    }

    fn through(&mut self) {
        self.ready = self.pending.len();
        self.state = State::Through;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guard<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready > 0 {
                let n = this.ready.min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            let state = this.state;
            match state {
                // nothing more for hyper, and no end either: an end before the answer is written
                // would make hyper drop it (it takes an end mid-request for a broken client)
                State::Refused => return Poll::Pending,
                State::Body(0) => this.state = State::Head,
                State::Body(left) if !this.pending.is_empty() => {
                    let n = (this.pending.len() as u64).min(left);
                    this.ready = n as usize;
                    this.state = State::Body(left - n);
                }
                State::Through if !this.pending.is_empty() => this.ready = this.pending.len(),
                State::Head if !this.pending.is_empty() && this.check_head() => {}
                State::Body(left) => {
                    // body bytes straight into hyper's buffer, never past the body's end (the
                    // next head must be checked): tokio's `Take`, inline
                    let mut part = buf.take(usize::try_from(left).unwrap_or(usize::MAX));
                    let start = part.filled().as_ptr();
                    std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut part))?;
                    if part.filled().as_ptr() != start {
                        return Poll::Ready(Err(std::io::Error::other("a stream swapped the buffer it read into")));
                    }
                    let n = part.filled().len();
                    // SAFETY: the reader filled (so initialized) these `n` bytes of `buf`'s
                    // unfilled part: `part` is a view of that same memory (checked above)
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    this.state = State::Body(left - n as u64);
                    return Poll::Ready(Ok(()));
                }
                State::Through => return Pin::new(&mut this.inner).poll_read(cx, buf),
                State::Head => {
                    // more of the head
                    let mut chunk = [0u8; 4096];
                    let mut rb = ReadBuf::new(&mut chunk);
                    std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
                    if rb.filled().is_empty() {
                        // closed, maybe in the middle of a head: hyper answers that as it always did
                        this.through();
                        if this.ready == 0 {
                            return Poll::Ready(Ok(()));
                        }
                    }
                    this.pending.extend_from_slice(rb.filled());
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guard<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    // forwarded, so that hyper keeps writing a response's head and body in one writev
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn reads_the_prefix_then_the_stream_and_writes_through() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut r = Guard::new(BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]), a, 100);
        b.write_all(b"Host: x\r\n\r\n").await.unwrap();
        let mut got = vec![0u8; 27];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        r.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        let mut back = [0u8; 17];
        b.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"HTTP/1.1 200 OK\r\n");
    }

    /// What hyper reads of `sent` once guarded: everything up to the client's end, or up to
    /// a refusal (after which nothing more comes).
    async fn guarded(sent: &[u8]) -> (Vec<u8>, Arc<Refusals>) {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let mut g = Guard::new(BytesMut::new(), a, 1000);
        let refusals = g.refusals();
        b.write_all(sent).await.unwrap();
        drop(b);
        let mut got = vec![];
        let mut chunk = [0u8; 64];
        loop {
            // a refused connection never ends: stop once nothing more is ready
            match tokio::time::timeout(std::time::Duration::from_millis(200), g.read(&mut chunk)).await {
                Ok(Ok(0)) | Err(_) => return (got, refusals),
                Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => panic!("{e}"),
            }
        }
    }

    #[tokio::test]
    async fn bodies_are_counted_through_and_good_heads_pass_unchanged() {
        // the second head's bytes sit right after the first body, which looks like a head
        let sent = b"PUT /a HTTP/1.1\r\ncontent-length: 18\r\n\r\nGET / HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
        assert_eq!(guarded(sent).await.0, sent);
        // a body longer than one read, made of bytes that look like heads with bad lengths
        let mut sent = b"PUT /a HTTP/1.1\r\ncontent-length: 990\r\n\r\n".to_vec();
        sent.extend(b"GET / HTTP/1.1\r\ncontent-length: -1\r\n\r\n".iter().cycle().take(990));
        sent.extend_from_slice(b"GET /b HTTP/1.1\r\n\r\n");
        assert_eq!(guarded(&sent).await.0, sent);
        sent.extend_from_slice(b"PUT /c HTTP/1.1\r\ncontent-length: 1001\r\n\r\n");
        let (got, refusals) = guarded(&sent).await;
        assert!(got.ends_with(format!("{}\r\nconnection: close\r\n\r\n", refusals.nonce).as_bytes()), "refused");
        // a chunked body is not counted: the rest goes through as it is
        let sent = b"PUT /a HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nPUT /b HTTP/1.1\r\ncontent-length: -1\r\n\r\n";
        assert_eq!(guarded(sent).await.0, sent);
    }

    #[tokio::test]
    async fn a_bad_length_is_replaced_by_a_marked_head_and_ends_the_stream() {
        let sent = b"GET /a HTTP/1.1\r\n\r\nPUT /b HTTP/1.1\r\ncontent-length: 18446744073709551615\r\n\r\nbody";
        let (got, refusals) = guarded(sent).await;
        let text = String::from_utf8(got).unwrap();
        let (first, stand_in) = text.split_at(19);
        assert_eq!(first, "GET /a HTTP/1.1\r\n\r\n");
        assert!(stand_in.contains(&refusals.nonce) && stand_in.ends_with("connection: close\r\n\r\n"), "{stand_in}");
        let req = Request::get("/").header(MARKER, refusals.nonce.as_str()).body(()).unwrap();
        let forged = Request::get("/").header(MARKER, "0").body(()).unwrap();
        assert!(refusals.take(&forged).is_none(), "a client cannot make a refusal answered");
        assert_eq!(refusals.take(&req).unwrap().status(), http::StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn a_head_sent_byte_by_byte_is_checked_once_whole() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut g = Guard::new(BytesMut::new(), a, 1000);
        let sent = b"PUT / HTTP/1.1\r\ncontent-length: -1\r\n\r\n";
        let writer = tokio::spawn(async move {
            for c in sent {
                b.write_all(&[*c]).await.unwrap();
                tokio::task::yield_now().await;
            }
            b
        });
        let mut got = vec![0u8; 64];
        let n = g.read(&mut got).await.unwrap();
        assert!(String::from_utf8_lossy(&got[..n]).starts_with("GET / HTTP/1.1\r\nhost: refused"));
        let _b = writer.await.unwrap();
    }
}
