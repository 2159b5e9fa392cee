//! Lingering close: a connection the gateway closes while its client may still be sending is
//! read and drained for a moment before the socket goes.
//!
//! The gateway answers some requests without reading their body (a body declared or found
//! larger than the limit, a request refused before its body is read) and closes the
//! connection after the answer (`Connection: close`). Closing a socket with unread bytes in
//! its receive buffer makes the kernel send a reset, and a client still writing its body
//! (Python's `http.client`, most blocking clients) then fails with a broken pipe or a reset
//! instead of reading the answer that is waiting for it: the one clear error turns into a
//! network failure. As web servers do (nginx's `lingering_close`), a connection the server
//! shut down is kept open for reading after its answer went out, and what arrives is
//! dropped, until the client closes its side, for at most [`LINGER`] in all and
//! [`LINGER_BYTES`]; at most [`MAX_LINGERING`] connections linger at once (past it one
//! closes at once, as before).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a closed connection is read at most.
pub const LINGER: Duration = Duration::from_secs(5);

/// How much of a closed connection's input is read and dropped at most.
pub const LINGER_BYTES: usize = 64 << 20;

/// The most connections lingering at once.
pub const MAX_LINGERING: usize = 1024;

/// A listener whose connections linger when the gateway closes them (see the module docs).
pub struct LingeringListener<L> {
    inner: L,
    lingering: Arc<Semaphore>,
}

impl<L> LingeringListener<L> {
    pub fn new(inner: L) -> Self {
        LingeringListener {
            inner,
            lingering: Arc::new(Semaphore::new(MAX_LINGERING)),
        }
    }
}

impl<L> axum::serve::Listener for LingeringListener<L>
where
    L: axum::serve::Listener<Io = TcpStream>,
{
    type Io = LingeringStream;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = self.inner.accept().await;
        let stream = LingeringStream {
            stream: Some(stream),
            shut_down: false,
            lingering: self.lingering.clone(),
        };
        (stream, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A TCP connection that lingers when dropped after the server shut its side down.
pub struct LingeringStream {
    /// Always there until the stream is dropped.
    stream: Option<TcpStream>,
    /// Whether the server shut its writing side down (it closes the connection).
    shut_down: bool,
    lingering: Arc<Semaphore>,
}

impl LingeringStream {
    /// The TCP stream.
    pub fn get_ref(&self) -> &TcpStream {
        self.stream.as_ref().expect("there until dropped")
    }

    fn tcp(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.stream.as_mut().expect("there until dropped"))
    }
}

impl AsyncRead for LingeringStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.tcp().poll_read(cx, buf)
    }
}

impl AsyncWrite for LingeringStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.tcp().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.tcp().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.get_ref().is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shut_down = true;
        self.tcp().poll_shutdown(cx)
    }
}

impl Drop for LingeringStream {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        if !self.shut_down {
            return;
        }
        let Ok(permit) = self.lingering.clone().try_acquire_owned() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(linger(stream, permit));
        }
    }
}

/// Reads and drops what `stream` still brings, until its end, [`LINGER`] or [`LINGER_BYTES`].
async fn linger(mut stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut buffer = vec![0u8; 16 * 1024];
    let mut drained = 0usize;
    while drained <= LINGER_BYTES {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(read)) => drained += read,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_connection_shut_down_by_the_server_is_drained_before_it_closes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = LingeringListener::new(listener);
        let client = tokio::spawn(async move {
            let mut client = TcpStream::connect(addr).await.unwrap();
            // Far more than the socket buffers hold: without the drain, the write fails
            // once the server's socket is closed with unread bytes (a reset).
            let sent = client.write_all(&vec![b'x'; 32 << 20]).await;
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            (sent.is_ok(), answer)
        });
        let (mut server, _) = listener.accept().await;
        let mut head = [0u8; 1024];
        server.read_exact(&mut head).await.unwrap();
        server.write_all(b"refused").await.unwrap();
        server.shutdown().await.unwrap();
        drop(server);
        let (sent, answer) = tokio::time::timeout(Duration::from_secs(10), client)
            .await
            .expect("the client is done")
            .unwrap();
        assert!(sent, "the whole body went out");
        assert_eq!(answer, b"refused");
    }
}
