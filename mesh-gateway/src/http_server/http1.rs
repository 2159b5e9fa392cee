//! An HTTP/1.1 connection: hyper serves it until a long-lived response is parked (see
//! `handoff`), then the connection is taken back and its body written as chunks
//! (`chunked`), in a task of its own that holds little more than the connection and the
//! body; when the body ends, hyper serves the connection again in a new task.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;

use axum::Router;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::chunked::Chunked;
use super::handoff::{HandingOff, Handoff, Watched};
use super::rewound::Rewound;
use crate::metrics::ConnectionGuard;

/// What every HTTP/1.1 connection of a server shares.
pub(super) struct Http1Server {
    pub(super) builder: Builder,
    pub(super) shutdown: CancellationToken,
}

/// One HTTP/1.1 connection, between its tasks.
pub(super) struct Http1<I> {
    pub(super) io: Rewound<I>,
    pub(super) router: Router,
    pub(super) server: Arc<Http1Server>,
    pub(super) open: Open,
}

/// Held while a connection is open: its count in the metrics and its place under
/// `--max-connections`.
pub(super) struct Open {
    pub(super) _counted: ConnectionGuard,
    pub(super) _permit: OwnedSemaphorePermit,
}

/// Serves `connection` with hyper until it ends or a long-lived body is parked; then goes on
/// in a task of the body's own, and closes after it on shutdown (or when hyper could not
/// have gone on: see `handoff`). On shutdown the connection finishes what it is answering,
/// then closes.
pub(super) async fn serve<I>(connection: Http1<I>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Http1 {
        io,
        router,
        server,
        open,
    } = connection;
    let handoff = Arc::new(Handoff::default());
    let service = HandingOff {
        router,
        handoff: handoff.clone(),
    };
    let watched = Watched {
        io,
        handoff: handoff.clone(),
    };
    let mut hyper = server
        .builder
        .serve_connection(TokioIo::new(watched), service);
    let mut finishing = false;
    let ended = {
        let mut shutdown = pin!(server.shutdown.cancelled());
        poll_fn(|cx| {
            if !finishing && shutdown.as_mut().poll(cx).is_ready() {
                finishing = true;
                Pin::new(&mut hyper).graceful_shutdown();
            }
            match Pin::new(&mut hyper).poll(cx) {
                Poll::Ready(ended) => Poll::Ready(Some(ended)),
                Poll::Pending if handoff.ready() => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    };
    if let Some(ended) = ended {
        if let Err(error) = ended {
            tracing::trace!(%error, "an HTTP/1.1 connection ended with an error");
        }
        return;
    }
    let Some(body) = handoff.take() else {
        return;
    };
    let resumable = handoff.request_read() && !finishing;
    let parts = hyper.into_parts();
    let (io, unread) = parts.io.into_inner().io.into_parts();
    // hyper's read buffer (8 KiB) comes back whole behind the bytes it read ahead: they are
    // kept in an allocation of their own (none where there are none, as a rule).
    let ahead = [parts.read_buf, unread].concat();
    let router = parts.service.router;
    let stream = Chunked::new(io, body, ahead, resumable);
    tokio::spawn(write_then_serve(stream, router, server, open));
}

/// The task of a stream taken back from hyper: writes it, then gives the connection back to
/// hyper, or closes it. (A block, not an `async fn`, whose arguments would take room twice in
/// every waiting stream's task: 400 bytes instead of 208.)
#[allow(clippy::manual_async_fn)]
fn write_then_serve<I>(
    mut stream: Chunked<I>,
    router: Router,
    server: Arc<Http1Server>,
    open: Open,
) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    async move {
        let resume = poll_fn(|cx| stream.poll_write(cx)).await && !server.shutdown.is_cancelled();
        if resume {
            tokio::spawn(serve_again(Http1 {
                io: Rewound::new(stream.io, stream.ahead.into()),
                router,
                server,
                open,
            }));
        } else {
            let _ = stream.io.shutdown().await;
        }
    }
}

/// [`serve`] for a connection whose stream ended, boxed: the two tasks start each other.
fn serve_again<I>(connection: Http1<I>) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(serve(connection))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiting stream's task holds its connection (with its write deadline), its body,
    /// what the client sent ahead and what hyper needs to go on: 240 bytes in a debug build
    /// (216 before the write deadline), where hyper's connection held 16 KiB of buffers and
    /// a 2.4 KiB task.
    #[tokio::test]
    async fn a_waiting_streams_task_stays_small() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (io, _) = accepted.unwrap();
        let body = axum::body::Body::from_stream(futures_util::stream::pending::<
            Result<bytes::Bytes, std::convert::Infallible>,
        >());
        let permits = Arc::new(tokio::sync::Semaphore::new(1));
        let open = Open {
            _counted: Arc::new(crate::metrics::Metrics::new()).connection_opened(),
            _permit: permits.try_acquire_owned().unwrap(),
        };
        let server = Arc::new(Http1Server {
            builder: Builder::new(),
            shutdown: CancellationToken::new(),
        });
        let io = crate::http_server::WriteDeadline::new(io, std::time::Duration::from_secs(60));
        let task = write_then_serve(
            Chunked::new(io, body, Vec::new(), true),
            Router::new(),
            server,
            open,
        );
        let size = std::mem::size_of_val(&task);
        assert!(size <= 256, "a waiting stream's task holds {size} bytes");
        drop(client);
    }
}
