//! A connection's first bytes: read once to tell its version ([`sniff`]), then read again by
//! whoever serves it ([`Rewound`]); the same wrapper gives hyper back the bytes a connection
//! sent ahead while its stream was written without hyper (see `handoff`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
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
/// connection lasts.
pub(super) async fn sniff<I: AsyncRead + Unpin>(mut io: I) -> io::Result<(Rewound<I>, Version)> {
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
    Ok((Rewound::new(io, first.into()), version))
}

/// A connection with bytes already read from it: its reads give them again first (their
/// buffer freed once they are all read), then read the connection.
pub(super) struct Rewound<I> {
    io: I,
    ahead: Bytes,
}

impl<I> Rewound<I> {
    pub(super) fn new(io: I, ahead: Bytes) -> Rewound<I> {
        Rewound { io, ahead }
    }

    /// The connection and the bytes read from it that were not read again yet.
    pub(super) fn into_parts(self) -> (I, Bytes) {
        (self.io, self.ahead)
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewound<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.ahead.has_remaining() {
            let n = self.ahead.len().min(buf.remaining());
            buf.put_slice(&self.ahead[..n]);
            self.ahead.advance(n);
            if !self.ahead.has_remaining() {
                self.ahead = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewound<I> {
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
