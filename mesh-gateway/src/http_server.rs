//! The gateway's HTTP server: accepts connections and serves each over HTTP/1.1 or HTTP/2
//! (hyper's automatic builder: HTTP/2 by prior knowledge in plain text, or as TLS's ALPN
//! chose), within bounds a hostile client cannot move:
//!
//! - **connections**: at most [`HttpLimits::max_connections`] at once (`--max-connections`);
//!   past it a new connection is closed as soon as it is accepted, and counted
//!   (`mesh_gateway_http_connections_refused_total`), while the open ones carry on;
//! - **request heads**: a connection has [`HttpLimits::header_timeout`] to send its first
//!   byte, and over HTTP/1.1 to send each request head from its first byte (hyper's own
//!   timer); a keep-alive connection that sends no next request within it is closed. Without
//!   it a client that connects and sends nothing (or a head a byte at a time) holds a
//!   connection, and its buffers, for ever;
//! - **HTTP/2**: [`HttpLimits::http2_max_streams`] streams at once on a connection, and a
//!   ping every [`HTTP2_PING_INTERVAL`] that the client must answer within
//!   [`HTTP2_PING_TIMEOUT`], or the connection and its streams close (a vanished client's
//!   streams do not stay open until their next keep-alive write fails).
//!
//! Shutdown: on the token, the server stops accepting, asks every connection to finish
//! (HTTP/1.1 closes once its current answer is written, HTTP/2 sends GOAWAY) and returns when
//! every connection has ended: the connection permits double as the count of open ones.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How often an HTTP/2 connection is pinged.
pub const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(30);

/// How long an HTTP/2 client has to answer a ping.
pub const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The bounds of the HTTP server (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub http2_max_streams: u32,
}

/// Serves `app` on the connections `listener` accepts until `shutdown`, then lets the open
/// connections finish (see the module docs).
pub(crate) async fn serve<L>(
    mut listener: L,
    app: Router,
    limits: HttpLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) where
    L: axum::serve::Listener,
{
    let builder = Arc::new(builder(&limits));
    // `acquire_many` counts in u32 (the configured limit is checked far below it).
    let permits = limits.max_connections.min(u32::MAX as usize);
    let connections = Arc::new(Semaphore::new(permits));
    loop {
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            metrics.connection_refused();
            tracing::debug!(
                max_connections = limits.max_connections,
                "a connection past --max-connections closed"
            );
            continue;
        };
        let io = TokioIo::new(FirstByteDeadline::new(io, limits.header_timeout));
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let shutdown = shutdown.clone();
        let open = metrics.connection_opened();
        tokio::spawn(async move {
            let connection = builder.serve_connection(io, service);
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => Some(ended),
                () = shutdown.cancelled() => None,
            };
            let ended = match ended {
                Some(ended) => ended,
                None => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                tracing::trace!(%error, "an HTTP connection ended with an error");
            }
            drop((open, permit));
        });
    }
    drop(listener);
    // Every connection holds a permit until it ends.
    let _all = connections.acquire_many(permits as u32).await;
}

/// hyper's builder with the gateway's settings.
fn builder(limits: &HttpLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .keep_alive_interval(HTTP2_PING_INTERVAL)
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
    builder
}

/// A connection that fails its reads with `TimedOut` if its first byte does not arrive
/// before a deadline. hyper reads the first bytes to tell HTTP/2's preface from an HTTP/1.1
/// request with no timer of its own; from the first byte on, hyper's timers take over.
struct FirstByteDeadline<I> {
    io: I,
    /// Until the first byte is read.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<I> FirstByteDeadline<I> {
    fn new(io: I, timeout: Duration) -> Self {
        FirstByteDeadline {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstByteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        let Some(deadline) = self.deadline.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.deadline = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                self.deadline = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing within the header timeout",
                )))
            }
            read => read,
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstByteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
