//! The gateway's HTTP server: accepts connections and serves each over HTTP/1.1 or HTTP/2
//! (by prior knowledge in plain text, or as TLS's ALPN chose: a connection that opens with
//! HTTP/2's preface is HTTP/2; see `rewound`). Over HTTP/1.1 a long-lived response (an SSE
//! stream: [`LongLived`]) is written by the server itself once hyper has written its head,
//! without hyper's 16 KiB of buffers (see `handoff` and `http1`). Within bounds a hostile
//! client cannot move:
//!
//! - **connections**: at most [`HttpLimits::max_connections`] at once (`--max-connections`);
//!   past it a new connection is closed as soon as it is accepted, and counted
//!   (`mesh_gateway_http_connections_refused_total`), while the open ones carry on;
//! - **request heads**: a connection has [`HttpLimits::header_timeout`] to send the bytes
//!   that tell its version, and over HTTP/1.1 to send each request head from its first byte
//!   (hyper's own timer); a keep-alive connection that sends no next request within it is
//!   closed. Without it a client that connects and sends nothing (or a head a byte at a
//!   time) holds a connection, and its buffers, for ever;
//! - **writes**: a connection whose client accepts no byte for
//!   [`HttpLimits::write_timeout`] while an answer waits to be written is closed (see
//!   `write_deadline`); a slow reader that keeps accepting bytes is not. Over HTTP/2 the
//!   client's flow-control window keeps what is written small, and a client that stops
//!   reading stops answering pings (below) too;
//! - **HTTP/2**: [`HttpLimits::http2_max_streams`] streams at once on a connection, and a
//!   ping every [`HTTP2_PING_INTERVAL`] that the client must answer within
//!   [`HTTP2_PING_TIMEOUT`], or the connection and its streams close (a vanished client's
//!   streams do not stay open until their next keep-alive write fails).
//!
//! Shutdown: on the token, the server stops accepting, asks every connection to finish
//! (HTTP/1.1 closes once its current answer is written, HTTP/2 sends GOAWAY) and returns when
//! every connection has ended: the connection permits double as the count of open ones.

mod chunked;
mod handoff;
mod http1;
mod rewound;
mod write_deadline;

pub(crate) use handoff::LongLived;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use http1::{Http1, Http1Server, Open};
use rewound::{Rewound, Version, sniff};
use write_deadline::WriteDeadline;

/// How often an HTTP/2 connection is pinged.
pub const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(30);

/// How long an HTTP/2 client has to answer a ping.
pub const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The bounds of the HTTP server (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub write_timeout: Duration,
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
    let http1 = Arc::new(Http1Server {
        builder: http1_builder(&limits),
        shutdown: shutdown.clone(),
    });
    let http2 = Arc::new(http2_builder(&limits));
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
        let open = Open {
            _counted: metrics.connection_opened(),
            _permit: permit,
        };
        tokio::spawn(serve_connection(
            WriteDeadline::new(io, limits.write_timeout),
            app.clone(),
            open,
            (http1.clone(), http2.clone()),
            limits.header_timeout,
        ));
    }
    drop(listener);
    // Every connection holds a permit until it ends.
    let _all = connections.acquire_many(permits as u32).await;
}

/// Serves one connection until it ends: first its version is read (within `header_timeout`),
/// then it is served over HTTP/1.1 (`http1`) or by hyper's HTTP/2; on shutdown a connection
/// not yet read is closed and a served one finishes what it is answering.
async fn serve_connection<I>(
    io: I,
    router: Router,
    open: Open,
    (http1, http2): (Arc<Http1Server>, Arc<Builder<TokioExecutor>>),
    header_timeout: Duration,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let sniffed = tokio::select! {
        sniffed = tokio::time::timeout(header_timeout, sniff(io)) => sniffed,
        () = http1.shutdown.cancelled() => return,
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
    match version {
        Version::Http1 => {
            http1::serve(Http1 {
                io,
                router,
                server: http1,
                open,
            })
            .await;
        }
        Version::Http2 => serve_http2(io, router, &http2, &http1.shutdown).await,
    }
}

/// Serves an HTTP/2 connection until it ends; on `shutdown` it sends GOAWAY and finishes
/// the streams it has.
async fn serve_http2<I>(
    io: Rewound<I>,
    router: Router,
    builder: &Builder<TokioExecutor>,
    shutdown: &CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router);
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
        tracing::trace!(%error, "an HTTP/2 connection ended with an error");
    }
}

/// hyper's HTTP/1.1 builder with the gateway's settings.
fn http1_builder(limits: &HttpLimits) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
}

/// hyper's HTTP/2 builder with the gateway's settings.
fn http2_builder(limits: &HttpLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new()).http2_only();
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .keep_alive_interval(HTTP2_PING_INTERVAL)
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
    builder
}
