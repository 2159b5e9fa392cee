//! A long-lived response's body written as chunks (RFC 9112, section 7.1) on a connection
//! taken back from hyper (see `handoff`): the whole state of a waiting stream is this
//! struct, its connection and its body, polled by a task of its own.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::buf::Chain;
use bytes::{Buf, Bytes};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes a client may send ahead while its stream is written (the next request of
/// a pipelining client); past them it is no longer read, and the connection closes once
/// the stream ends.
const SENT_AHEAD_MAX: usize = 8 * 1024;

/// One chunk on the wire: its size line, its data, its CRLF.
type Chunk = Chain<Chain<SizeLine, Bytes>, &'static [u8]>;

/// A body being written as chunks on `io`.
pub(super) struct Chunked<I> {
    pub(super) io: I,
    body: Body,
    /// What is left to write of the current chunk.
    chunk: Option<Chunk>,
    /// The body has ended: the last chunk is (or was) `chunk`.
    ended: bool,
    /// What the client sent ahead, for hyper to read once the stream ends.
    pub(super) ahead: Vec<u8>,
    /// The client is read (for its close, and what it sends ahead).
    watching: bool,
    /// The connection can be served again once the body ends.
    resumable: bool,
}

impl<I: AsyncRead + AsyncWrite + Unpin> Chunked<I> {
    /// `body` to be written on `io`; `ahead` was read from it already; `resumable` says
    /// whether the connection can be served again after the body.
    pub(super) fn new(io: I, body: Body, ahead: Vec<u8>, resumable: bool) -> Chunked<I> {
        Chunked {
            io,
            body,
            chunk: None,
            ended: false,
            ahead,
            watching: true,
            resumable,
        }
    }

    /// Writes the body's chunks as they come, then the last chunk: ready with whether the
    /// connection can be served again. A client that closes the connection (or one that
    /// fails) ends it at once, as hyper would notice; a body that fails ends it without the
    /// last chunk, as hyper would, so that the client sees the answer cut short.
    pub(super) fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        loop {
            if let Some(chunk) = &mut self.chunk {
                while chunk.has_remaining() {
                    match ready!(write_some(&mut self.io, chunk, cx)) {
                        Ok(_) => {}
                        Err(error) => return Poll::Ready(self.failed(&error)),
                    }
                }
                self.chunk = None;
            }
            if let Err(error) = ready!(Pin::new(&mut self.io).poll_flush(cx)) {
                return Poll::Ready(self.failed(&error));
            }
            if self.ended {
                return Poll::Ready(self.resumable);
            }
            if self.watching {
                match self.poll_client(cx) {
                    Poll::Ready(Client::Gone) => return Poll::Ready(false),
                    Poll::Ready(Client::TooMuch) => {
                        self.watching = false;
                        self.resumable = false;
                        self.ahead = Vec::new();
                    }
                    Poll::Pending => {}
                }
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                // Trailers are not written: no long-lived body has any.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && data.has_remaining()
                    {
                        self.chunk = Some(chunk(data));
                    }
                }
                None => {
                    self.ended = true;
                    self.chunk = Some(chunk(Bytes::new()));
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "a stream's body failed: its connection closes");
                    return Poll::Ready(false);
                }
            }
        }
    }

    fn failed(&self, error: &io::Error) -> bool {
        tracing::trace!(%error, "a stream's client went away");
        false
    }

    /// Reads what the client sends while its stream is written, into `ahead`: ready once
    /// it is gone or sent too much.
    fn poll_client(&mut self, cx: &mut Context<'_>) -> Poll<Client> {
        let mut buf = [0; 512];
        loop {
            let mut read = ReadBuf::new(&mut buf);
            match Pin::new(&mut self.io).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(Client::Gone),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    return Poll::Ready(Client::Gone);
                }
                Poll::Ready(Ok(())) => {
                    if self.ahead.len() + read.filled().len() > SENT_AHEAD_MAX {
                        return Poll::Ready(Client::TooMuch);
                    }
                    self.ahead.extend_from_slice(read.filled());
                }
            }
        }
    }
}

/// What the client did while its stream was written.
enum Client {
    /// It closed the connection (or the connection failed).
    Gone,
    /// It sent more than [`SENT_AHEAD_MAX`] bytes ahead.
    TooMuch,
}

/// Writes as much of `chunk` as the connection takes, in one write where it takes several
/// buffers at once.
fn write_some<I: AsyncWrite + Unpin>(
    io: &mut I,
    chunk: &mut Chunk,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    let mut slices = [IoSlice::new(&[]); 3];
    let filled = chunk.chunks_vectored(&mut slices);
    let written = ready!(Pin::new(io).poll_write_vectored(cx, &slices[..filled]))?;
    if written == 0 {
        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
    }
    chunk.advance(written);
    Poll::Ready(Ok(()))
}

/// `data` as one chunk; empty, the last chunk (without trailers).
fn chunk(data: Bytes) -> Chunk {
    SizeLine::new(data.len()).chain(data).chain(&b"\r\n"[..])
}

/// A chunk's size line: the size in hex, then CRLF.
struct SizeLine {
    /// Right-aligned: the line is `line[at..]`.
    line: [u8; SizeLine::MAX],
    at: u8,
}

impl SizeLine {
    /// 16 hex digits and CRLF.
    const MAX: usize = 18;

    fn new(size: usize) -> SizeLine {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut line = [0; SizeLine::MAX];
        let mut at = SizeLine::MAX - 2;
        line[at..].copy_from_slice(b"\r\n");
        let mut rest = size;
        loop {
            at -= 1;
            line[at] = HEX[rest & 0xf];
            rest >>= 4;
            if rest == 0 {
                break;
            }
        }
        SizeLine { line, at: at as u8 }
    }
}

impl Buf for SizeLine {
    fn remaining(&self) -> usize {
        SizeLine::MAX - self.at as usize
    }

    fn chunk(&self) -> &[u8] {
        &self.line[self.at as usize..]
    }

    fn advance(&mut self, n: usize) {
        assert!(n <= self.remaining(), "advanced past a chunk's size line");
        self.at += n as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const WAIT: Duration = Duration::from_secs(10);

    fn wire(mut chunk: Chunk) -> Vec<u8> {
        let mut bytes = Vec::new();
        while chunk.has_remaining() {
            let part = chunk.chunk().to_vec();
            chunk.advance(part.len());
            bytes.extend_from_slice(&part);
        }
        bytes
    }

    #[test]
    fn a_chunk_is_its_size_in_hex_its_data_and_crlf() {
        assert_eq!(
            wire(chunk(Bytes::from_static(b"data: x\n\n"))),
            b"9\r\ndata: x\n\n\r\n"
        );
        let big = Bytes::from(vec![b'a'; 0x1a3f]);
        assert!(wire(chunk(big)).starts_with(b"1a3f\r\naaa"));
        assert_eq!(wire(chunk(Bytes::new())), b"0\r\n\r\n");
        let line = SizeLine::new(usize::MAX);
        assert_eq!(line.chunk(), b"ffffffffffffffff\r\n");
    }

    type Receiver = tokio::sync::mpsc::Receiver<&'static str>;

    /// A body fed through a channel, and its sender.
    fn fed_body() -> (tokio::sync::mpsc::Sender<&'static str>, Body) {
        let (send, receive) = tokio::sync::mpsc::channel(4);
        let frames = futures_util::stream::unfold(receive, |mut receive: Receiver| async move {
            let event = receive.recv().await?;
            Some((
                Ok::<_, io::Error>(Bytes::from_static(event.as_bytes())),
                receive,
            ))
        });
        (send, Body::from_stream(frames))
    }

    /// Reads `client` until the last chunk has come.
    async fn read_until_last_chunk(client: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
        let mut read = Vec::new();
        while !read.ends_with(b"0\r\n\r\n") {
            let mut buf = [0; 64];
            let n = client.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the connection ended: {:?}",
                String::from_utf8_lossy(&read)
            );
            read.extend_from_slice(&buf[..n]);
        }
        read
    }

    // Through a connection that takes 7 bytes at a time, every chunk arrives whole and in
    // order, then the last chunk; what the client sent meanwhile is kept for hyper.
    #[tokio::test]
    async fn a_body_is_written_whole_however_little_the_connection_takes() {
        let (server, client) = tokio::io::duplex(7);
        let (mut client_reads, mut client_writes) = tokio::io::split(client);
        let (events, body) = fed_body();
        let mut stream = Chunked::new(server, body, b"GET".to_vec(), true);
        let writing = tokio::spawn(async move {
            let resumable = poll_fn(|cx| stream.poll_write(cx)).await;
            (resumable, stream.ahead)
        });
        let reading = tokio::spawn(async move { read_until_last_chunk(&mut client_reads).await });
        events.send("data: one\n\n").await.unwrap();
        client_writes
            .write_all(b" /next HTTP/1.1\r\n")
            .await
            .unwrap();
        events.send("data: two\n\n").await.unwrap();
        drop(events);
        let read = tokio::time::timeout(WAIT, reading)
            .await
            .expect("the stream ends")
            .unwrap();
        assert_eq!(
            String::from_utf8(read).unwrap(),
            "b\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n"
        );
        let (resumable, ahead) = tokio::time::timeout(WAIT, writing).await.unwrap().unwrap();
        assert!(resumable);
        assert_eq!(ahead, b"GET /next HTTP/1.1\r\n");
    }

    // A client that closes its connection ends its stream while the body waits, and the
    // connection is not served again.
    #[tokio::test]
    async fn a_client_that_goes_away_ends_its_waiting_stream() {
        let (server, client) = tokio::io::duplex(64);
        let (_events, body) = fed_body();
        let mut stream = Chunked::new(server, body, Vec::new(), true);
        drop(client);
        let resumable = tokio::time::timeout(WAIT, poll_fn(|cx| stream.poll_write(cx)))
            .await
            .expect("the stream ends when its client goes");
        assert!(!resumable);
    }

    // A client that sends more than the stream keeps for hyper is no longer read, and its
    // connection closes after the stream.
    #[tokio::test]
    async fn a_client_that_sends_too_much_ahead_is_closed_after_its_stream() {
        let (server, mut client) = tokio::io::duplex(64 * 1024);
        let (events, body) = fed_body();
        let mut stream = Chunked::new(server, body, Vec::new(), true);
        client.write_all(&[b'x'; SENT_AHEAD_MAX + 1]).await.unwrap();
        let writing = tokio::spawn(async move {
            let resumable = poll_fn(|cx| stream.poll_write(cx)).await;
            (resumable, stream.ahead)
        });
        events.send("data: one\n\n").await.unwrap();
        drop(events);
        tokio::time::timeout(WAIT, read_until_last_chunk(&mut client))
            .await
            .expect("the stream ends");
        let (resumable, ahead) = tokio::time::timeout(WAIT, writing).await.unwrap().unwrap();
        assert!(!resumable);
        assert!(ahead.is_empty());
    }
}
