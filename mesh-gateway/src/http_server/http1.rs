//! An HTTP/1.1 connection: hyper serves it until a long-lived response is parked (see
//! `handoff`), then the connection is taken back and its body written here as chunks, in a
//! task of its own that holds only the connection and the body; when the body ends, hyper
//! serves the connection again in a new task.

use std::future::{Future, poll_fn};
use std::io::{self, Write as _};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use bytes::{Buf, Bytes};
use http_body::Body as _;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

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

/// The most bytes a client may send ahead while its stream is written without hyper (the
/// next request of a pipelining client); past them it is no longer read, and the connection
/// closes once the stream ends.
const SENT_AHEAD_MAX: usize = 8 * 1024;

/// Serves `connection` with hyper until it ends or a long-lived body is parked; then goes on
/// in a task of the body's own ([`write_stream`]). On shutdown the connection finishes what
/// it is answering, then closes.
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
    let resume = handoff.request_read() && !finishing;
    let parts = hyper.into_parts();
    let (io, unread) = parts.io.into_inner().io.into_parts();
    tokio::spawn(write_stream(Stream {
        io,
        ahead: join(parts.read_buf, unread),
        body,
        resume,
        router: parts.service.router,
        server,
        open,
    }));
}

/// A connection taken back from hyper to write a long-lived body.
struct Stream<I> {
    io: I,
    /// Bytes read from the connection that hyper did not serve yet.
    ahead: Bytes,
    body: Body,
    /// Whether hyper serves the connection again once the body ends.
    resume: bool,
    router: Router,
    server: Arc<Http1Server>,
    open: Open,
}

/// What happened next on a connection whose stream is written.
enum Next {
    Frame(Option<Result<http_body::Frame<Bytes>, axum::Error>>),
    ClientGone,
}

/// Writes `stream`'s body as chunks, then its last chunk, and gives the connection back to
/// hyper (or closes it: see [`Stream::resume`]). A client that closes the connection ends the
/// stream at once, as hyper would notice it; a body that fails ends the connection without
/// the last chunk, as hyper would, so that the client sees the answer cut short.
async fn write_stream<I>(stream: Stream<I>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Stream {
        mut io,
        ahead,
        mut body,
        mut resume,
        router,
        server,
        open,
    } = stream;
    let mut sent_ahead = Vec::new();
    let mut watching = true;
    let ended = {
        let mut shutdown = pin!(server.shutdown.cancelled());
        loop {
            let next = poll_fn(|cx| {
                if resume && shutdown.as_mut().poll(cx).is_ready() {
                    resume = false;
                }
                if watching {
                    match poll_client(&mut io, &mut sent_ahead, cx) {
                        Poll::Ready(Client::Gone) => return Poll::Ready(Next::ClientGone),
                        Poll::Ready(Client::TooMuch) => {
                            watching = false;
                            resume = false;
                        }
                        Poll::Pending => {}
                    }
                }
                Pin::new(&mut body).poll_frame(cx).map(Next::Frame)
            })
            .await;
            match next {
                Next::Frame(Some(Ok(frame))) => {
                    // Trailers are not written: no long-lived body has any.
                    if let Ok(data) = frame.into_data()
                        && data.has_remaining()
                        && let Err(error) = write_chunk(&mut io, data).await
                    {
                        tracing::trace!(%error, "a stream's client went away");
                        return;
                    }
                }
                Next::Frame(None) => break write_last_chunk(&mut io).await,
                Next::Frame(Some(Err(error))) => {
                    tracing::debug!(%error, "a stream's body failed: its connection closes");
                    return;
                }
                Next::ClientGone => return,
            }
        }
    };
    drop(body);
    if ended.is_ok() && resume {
        tokio::spawn(serve_again(Http1 {
            io: Rewound::new(io, join(ahead, sent_ahead.into())),
            router,
            server,
            open,
        }));
    } else {
        let _ = io.shutdown().await;
    }
}

/// [`serve`] for a connection whose stream ended, boxed: the two tasks start each other.
fn serve_again<I>(connection: Http1<I>) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(serve(connection))
}

/// What the client did while its stream was written.
enum Client {
    /// It closed the connection (or the connection failed).
    Gone,
    /// It sent more than [`SENT_AHEAD_MAX`] bytes ahead.
    TooMuch,
}

/// Reads what the client sends while its stream is written, into `sent_ahead`: ready once
/// it is gone or sent too much.
fn poll_client<I: AsyncRead + Unpin>(
    io: &mut I,
    sent_ahead: &mut Vec<u8>,
    cx: &mut Context<'_>,
) -> Poll<Client> {
    let mut buf = [0; 512];
    loop {
        let mut read = ReadBuf::new(&mut buf);
        match Pin::new(&mut *io).poll_read(cx, &mut read) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Client::Gone),
            Poll::Ready(Ok(())) if read.filled().is_empty() => return Poll::Ready(Client::Gone),
            Poll::Ready(Ok(())) => {
                if sent_ahead.len() + read.filled().len() > SENT_AHEAD_MAX {
                    *sent_ahead = Vec::new();
                    return Poll::Ready(Client::TooMuch);
                }
                sent_ahead.extend_from_slice(read.filled());
            }
        }
    }
}

/// Writes `data` as one chunk (RFC 9112, section 7.1), in one write where the connection
/// takes several buffers at once.
async fn write_chunk<I: AsyncWrite + Unpin>(io: &mut I, data: Bytes) -> io::Result<()> {
    // The size in hex (at most 16 digits), then CRLF.
    let mut size = [0; 18];
    let free = {
        let mut line = &mut size[..];
        write!(line, "{:x}\r\n", data.len())?;
        line.len()
    };
    let line = size.len() - free;
    let mut chunk = (&size[..line]).chain(data).chain(&b"\r\n"[..]);
    io.write_all_buf(&mut chunk).await?;
    io.flush().await
}

/// Writes the last chunk, without trailers.
async fn write_last_chunk<I: AsyncWrite + Unpin>(io: &mut I) -> io::Result<()> {
    io.write_all(b"0\r\n\r\n").await?;
    io.flush().await
}

/// `first` then `then`, without a copy where one is empty.
fn join(first: Bytes, then: Bytes) -> Bytes {
    if then.is_empty() {
        return first;
    }
    if first.is_empty() {
        return then;
    }
    let mut all = Vec::with_capacity(first.len() + then.len());
    all.extend_from_slice(&first);
    all.extend_from_slice(&then);
    all.into()
}
