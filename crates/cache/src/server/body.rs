//! The one response body type: a buffer, a channel of chunks a blocking reader fills (big
//! objects), or a body streamed through from another node (forwarded requests).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::mpsc;

pub enum Body {
    Full(Option<Bytes>),
    Chunks { rx: mpsc::Receiver<std::io::Result<Bytes>>, left: u64 },
    Proxied(Incoming),
}

impl Body {
    pub fn full(b: Bytes) -> Body {
        Body::Full(Some(b))
    }

    pub fn empty() -> Body {
        Body::Full(None)
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().filter(|b| !b.is_empty()).map(|b| Ok(Frame::data(b)))),
            Body::Chunks { rx, left } => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) => {
                    *left = left.saturating_sub(b.len() as u64);
                    Poll::Ready(Some(Ok(Frame::data(b))))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            Body::Proxied(i) => Pin::new(i).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            Body::Chunks { left, .. } => *left == 0,
            Body::Proxied(i) => i.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Chunks { left, .. } => SizeHint::with_exact(*left),
            Body::Proxied(i) => i.size_hint(),
        }
    }
}
