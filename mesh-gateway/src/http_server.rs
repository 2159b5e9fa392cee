//! The gateway's HTTP server: accepts connections and serves each over HTTP/1.1 or HTTP/2
//! (by prior knowledge in plain text, or as TLS's ALPN chose: a connection that opens with
//! HTTP/2's preface is HTTP/2), within bounds a hostile client cannot move:
//!
//! - **connections**: at most [`HttpLimits::max_connections`] at once (`--max-connections`);
//!   past it a new connection is closed as soon as it is accepted, and counted
//!   (`mesh_gateway_http_connections_refused_total`), while the open ones carry on;
//! - **request heads**: a connection has [`HttpLimits::header_timeout`] to send the bytes
//!   that tell its version, and over HTTP/1.1 to send each request head from its first byte
//!   (hyper's own timer); a keep-alive connection that sends no next request within it is
//!   closed. Without it a client that connects and sends nothing (or a head a byte at a
//!   time) holds a connection, and its buffers, for ever;
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
    let builders = Arc::new(Builders {
        http1: builder(&limits).http1_only(),
        http2: builder(&limits).http2_only(),
    });
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
        let service = TowerToHyperService::new(app.clone());
        let builders = builders.clone();
        let shutdown = shutdown.clone();
        let open = metrics.connection_opened();
        tokio::spawn(async move {
            serve_connection(io, service, &builders, limits.header_timeout, &shutdown).await;
            drop((open, permit));
        });
    }
    drop(listener);
    // Every connection holds a permit until it ends.
    let _all = connections.acquire_many(permits as u32).await;
}

/// Serves one connection until it ends: first its version is read (within `header_timeout`),
/// then hyper serves it; on `shutdown` a connection not yet read is closed and a served one
/// finishes what it is answering.
async fn serve_connection<I>(
    io: I,
    service: TowerToHyperService<Router>,
    builders: &Builders,
    header_timeout: Duration,
    shutdown: &CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let sniffed = tokio::select! {
        sniffed = tokio::time::timeout(header_timeout, sniff(io)) => sniffed,
        () = shutdown.cancelled() => return,
    };
    let (io, version) = match sniffed {
        Ok(Ok(sniffed)) => sniffed,
        Ok(Err(error)) => {
            tracing::trace!(%error, "an HTTP connection ended before its first request");
            return;
        }
        Err(_) => {
            tracing::trace!("an HTTP connection did not say its version within the header timeout");
            return;
        }
    };
    let builder = match version {
        Version::Http1 => &builders.http1,
        Version::Http2 => &builders.http2,
    };
    let connection = builder.serve_connection(TokioIo::new(io), service);
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

/// The builders of the two versions: a connection is served by the one its first bytes say.
struct Builders {
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
}

/// What a connection speaks.
enum Version {
    Http1,
    Http2,
}

/// The first bytes of an HTTP/2 connection (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The most bytes the first read of a connection takes (a request head and a small body
/// usually arrive whole).
const FIRST_READ: usize = 4096;

/// Reads a connection's first bytes, as many as its first segment brings (at most
/// [`FIRST_READ`]), until they tell HTTP/2's preface from anything else, and gives the
/// connection back with those bytes to be read again. hyper's automatic builder reads at
/// most the preface's 24 bytes to tell: hyper then reads an HTTP/1.1 request's first 24
/// bytes alone and its read buffer, 8 KiB, grows to 16 KiB for the rest, for as long as the
/// connection lasts (an idle SSE stream's among them).
async fn sniff<I: AsyncRead + Unpin>(mut io: I) -> io::Result<(Sniffed<I>, Version)> {
    use tokio::io::AsyncReadExt;
    let mut first = Vec::with_capacity(FIRST_READ);
    let version = loop {
        if io.read_buf(&mut first).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let seen = first.len().min(HTTP2_PREFACE.len());
        if first[..seen] != HTTP2_PREFACE[..seen] {
            break Version::Http1;
        }
        if seen == HTTP2_PREFACE.len() {
            break Version::Http2;
        }
    };
    Ok((Sniffed { io, first, at: 0 }, version))
}

/// A connection whose first bytes were read by [`sniff`]: its reads give them again first
/// (their buffer freed once they are all read), then read the connection.
struct Sniffed<I> {
    io: I,
    first: Vec<u8>,
    /// How many of `first` were read again.
    at: usize,
}

impl<I: AsyncRead + Unpin> AsyncRead for Sniffed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.first.len() {
            let this = &mut *self;
            let n = (this.first.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.first[this.at..this.at + n]);
            this.at += n;
            if this.at == this.first.len() {
                this.first = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Sniffed<I> {
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
