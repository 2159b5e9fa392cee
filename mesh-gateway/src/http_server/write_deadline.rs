//! A connection whose writes must make progress: a write (or flush, or shutdown) that the
//! client leaves waiting for room longer than the write timeout fails with `TimedOut`, and
//! whoever serves the connection (hyper, or the writer of a handed-off stream) closes it.
//! Without it a client that stops reading holds its connection, its place under
//! `--max-connections` and the kernel's send buffer (up to megabytes) for as long as it
//! keeps the TCP connection open. Slow progress is not a stall: the clock starts again with
//! every write that is accepted, as nginx's `send_timeout` does.
//!
//! Nothing is added to a write that goes through at once (the common case): the timer is
//! made when a write first has to wait, and dropped with the first one accepted after it.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A connection (`io`) whose writes fail once they have waited `timeout` for room.
pub(super) struct WriteDeadline<I> {
    io: I,
    timeout: Duration,
    /// Running while a write waits for room (since the first that had to wait and none was
    /// accepted): once it fires, the write fails.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteDeadline<I> {
    pub(super) fn new(io: I, timeout: Duration) -> WriteDeadline<I> {
        WriteDeadline {
            io,
            timeout,
            stalled: None,
        }
    }

    /// `polled` (a write's outcome) passed on, except that a write still waiting once the
    /// stall has lasted the timeout fails.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.timeout;
        let stall = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stall.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client accepted no byte for {} s (the write timeout)",
                    timeout.as_secs_f64()
                ),
            ))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A write that waits for room fails once it has waited the timeout; writes that go
    /// through, however many, never start the clock.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_past_the_timeout_fails_and_progress_resets_the_clock() {
        let (client, server) = tokio::io::duplex(64);
        let (mut client_read, _client_write) = tokio::io::split(client);
        let mut server = WriteDeadline::new(server, Duration::from_secs(5));

        // Accepted at once, for longer than the timeout in all: no failure.
        for _ in 0..3 {
            server.write_all(&[1; 64]).await.unwrap();
            let mut read = [0; 64];
            client_read.read_exact(&mut read).await.unwrap();
            tokio::time::advance(Duration::from_secs(4)).await;
        }
        assert!(server.stalled.is_none());

        // The buffer full and nobody reading: the next write waits, then fails at 5 s.
        server.write_all(&[1; 64]).await.unwrap();
        let started = tokio::time::Instant::now();
        let error = server.write_all(&[2; 1]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    /// A write that waits less than the timeout goes through, and the wait after it has the
    /// whole timeout again.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_keeps_its_connection() {
        let (client, server) = tokio::io::duplex(16);
        let (mut client_read, _client_write) = tokio::io::split(client);
        let mut server = WriteDeadline::new(server, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut read = [0; 16];
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                client_read.read_exact(&mut read).await.unwrap();
            }
        });
        // 64 bytes through a 16-byte pipe read 16 bytes every 4 s: 12 s in all, never 5 s
        // without progress.
        server.write_all(&[3; 64]).await.unwrap();
        reader.await.unwrap();
        assert!(server.stalled.is_none());
    }
}
