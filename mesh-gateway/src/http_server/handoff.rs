//! The service side of an HTTP/1.1 stream's hand-off: hyper writes a long-lived response's
//! head, then gives the connection up and the server writes the body itself (`chunked`),
//! without hyper's buffers.
//!
//! hyper keeps 8 KiB to read and 8 KiB to write for each HTTP/1.1 connection for as long as
//! it serves it: an SSE stream that waits for its task's next event holds both for nothing.
//! A response marked [`LongLived`] (every SSE stream is) is parked by [`HandingOff`]: hyper
//! gets the same head and a body that never yields ([`Parked`]), writes the head (`chunked`,
//! since the length is unknown) and waits. The connection's driver (`http1`) sees the parked
//! body once hyper has written everything it holds ([`Watched`] tells), takes the connection
//! back from hyper with the bytes hyper read ahead, and writes the parked body as chunks.
//! When the body ends, hyper serves the connection again, if the request was read to its end
//! ([`ReadToEnd`]): otherwise its unread rest would be read as the next request, so the
//! connection closes.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Version, header};
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tower::ServiceExt;
use tower::util::Oneshot;

/// Marks a response whose body may stay open long (a stream of events): over HTTP/1.1 the
/// server writes its body itself, without hyper's buffers (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LongLived;

/// What an HTTP/1.1 connection's driver, its service and its io share.
#[derive(Default)]
pub(super) struct Handoff {
    /// The body of the long-lived response hyper is holding the head of.
    parked: Mutex<Option<Body>>,
    is_parked: AtomicBool,
    /// The current request's body was read to its end (or it had none).
    request_read: AtomicBool,
    /// The connection's last write was not taken whole: hyper holds bytes not yet written.
    unwritten: AtomicBool,
}

impl Handoff {
    fn park(&self, body: Body) {
        *self.parked.lock().unwrap_or_else(|e| e.into_inner()) = Some(body);
        self.is_parked.store(true, Relaxed);
    }

    /// A body is parked and hyper has written everything it was given: the connection can
    /// be taken back from hyper.
    pub(super) fn ready(&self) -> bool {
        self.is_parked.load(Relaxed) && !self.unwritten.load(Relaxed)
    }

    /// The parked body, if any.
    pub(super) fn take(&self) -> Option<Body> {
        self.is_parked.store(false, Relaxed);
        self.parked.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether the request of the parked body was read to its end.
    pub(super) fn request_read(&self) -> bool {
        self.request_read.load(Relaxed)
    }
}

/// The service hyper calls on an HTTP/1.1 connection: the router, with long-lived responses
/// parked (see the module docs).
#[derive(Clone)]
pub(super) struct HandingOff {
    pub(super) router: Router,
    pub(super) handoff: Arc<Handoff>,
}

impl hyper::service::Service<Request<Incoming>> for HandingOff {
    type Response = Response;
    type Error = Infallible;
    type Future = Answering;

    fn call(&self, request: Request<Incoming>) -> Answering {
        // A long-lived answer is written without hyper only where hyper would frame it in
        // chunks and could go on with the connection after it.
        let handoff = (request.version() == Version::HTTP_11
            && request.method() != Method::HEAD
            && !asks_to_close(request.headers()))
        .then(|| self.handoff.clone());
        let request = match &handoff {
            Some(handoff) if !request.body().is_end_stream() => {
                handoff.request_read.store(false, Relaxed);
                let handoff = handoff.clone();
                request.map(|body| Body::new(ReadToEnd { body, handoff }))
            }
            Some(handoff) => {
                handoff.request_read.store(true, Relaxed);
                request.map(Body::new)
            }
            None => request.map(Body::new),
        };
        Answering {
            answer: self.router.clone().oneshot(request),
            handoff,
        }
    }
}

/// The request says `Connection: close`.
fn asks_to_close(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

pin_project_lite::pin_project! {
    /// The router's answer to one request, its body parked when it is long-lived.
    pub(super) struct Answering {
        #[pin]
        answer: Oneshot<Router, Request<Body>>,
        handoff: Option<Arc<Handoff>>,
    }
}

impl Future for Answering {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.answer.poll(cx))?;
        if response.extensions().get::<LongLived>().is_none() {
            return Poll::Ready(Ok(response));
        }
        let Some(handoff) = this.handoff.take() else {
            return Poll::Ready(Ok(response));
        };
        let (head, body) = response.into_parts();
        handoff.park(body);
        Poll::Ready(Ok(Response::from_parts(head, Body::new(Parked))))
    }
}

/// The body hyper is given for a parked one: of unknown length (`http_body`'s default size
/// hint, so hyper writes the head with `Transfer-Encoding: chunked`), and never a frame.
struct Parked;

impl http_body::Body for Parked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Pending
    }
}

/// A request body that tells the connection once it was read to its end.
struct ReadToEnd {
    body: Incoming,
    handoff: Arc<Handoff>,
}

impl http_body::Body for ReadToEnd {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if frame.is_none() || self.body.is_end_stream() {
            self.handoff.request_read.store(true, Relaxed);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection as hyper sees it: tells [`Handoff`] whether hyper's last write was taken
/// whole.
pub(super) struct Watched<I> {
    pub(super) io: I,
    pub(super) handoff: Arc<Handoff>,
}

impl<I> Watched<I> {
    fn wrote<T>(&self, written: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.handoff.unwritten.store(written.is_pending(), Relaxed);
        written
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        self.wrote(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
