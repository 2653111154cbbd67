//! A connection handed from the fast path ([`super::fast`]) to hyper: the bytes the fast path
//! already read (a request it does not serve itself, and anything after it) are read again
//! first, then the socket, so hyper sees the byte stream the client sent, unchanged.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner` with `prefix` in front of what it reads; writes go straight to `inner`.
pub struct Replay<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Replay<S> {
    pub fn new(prefix: BytesMut, inner: S) -> Replay<S> {
        Replay { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.has_remaining() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
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
        let mut r = Replay::new(BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]), a);
        b.write_all(b"Host: x\r\n\r\n").await.unwrap();
        let mut got = vec![0u8; 27];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        r.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        let mut back = [0u8; 17];
        b.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"HTTP/1.1 200 OK\r\n");
    }
}
