//! HTTPS on the gateway's listener: [`TlsFiles`] (the PEM certificate chain and private key
//! of [`GatewayConfig::tls`](crate::GatewayConfig::tls)) and [`TlsListener`], which wraps the
//! TCP listener so that everything served on it (every route of the axum app, and whatever
//! later shares the app) speaks TLS only.
//!
//! Each accepted connection's handshake runs in a task of its own, bounded by
//! [`HANDSHAKE_TIMEOUT`]; at most [`MAX_PENDING_HANDSHAKES`] run at once (past that, new
//! connections wait in the kernel's backlog). A handshake that fails (a plain-HTTP request,
//! garbage, a client that does not trust the certificate, a timeout) closes that connection
//! and nothing else. ALPN offers `h2` and `http/1.1`; the server
//! ([`http_server`](crate::http_server)) reads which one the client speaks.

use axum::serve::Listener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most TLS handshakes in progress at once.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

/// The protocols offered by ALPN, preferred first.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The certificate and key a listener serves (`--tls-cert`, `--tls-key`). Only the paths:
/// the key is read when the gateway starts, and never kept in a config or printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// A PEM file: the server's certificate, then the intermediate CAs, if any.
    pub cert_file: PathBuf,
    /// A PEM file: the private key of the certificate (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key_file: PathBuf,
}

impl TlsFiles {
    /// Reads and checks both files: a TLS acceptor offering [`ALPN_PROTOCOLS`], or why not
    /// (the message names the file, and never quotes the key).
    pub fn acceptor(&self) -> Result<TlsAcceptor, String> {
        let mut config = mesh_core::tls::server_config(&self.cert_file, &self.key_file)?;
        config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// A listener that hands axum only connections whose TLS handshake succeeded (see the module
/// docs). Dropping it (axum does when it stops accepting, at shutdown) abandons the
/// handshakes in progress.
pub struct TlsListener<L: Listener> {
    inner: L,
    acceptor: TlsAcceptor,
    timeout: Duration,
    handshakes: JoinSet<Option<Handshaken<L>>>,
}

/// A connection whose handshake succeeded, and its peer's address.
type Handshaken<L> = (TlsStream<<L as Listener>::Io>, <L as Listener>::Addr);

impl<L: Listener> TlsListener<L> {
    /// Serves TLS with `acceptor` on the connections `inner` accepts, each handshake bounded
    /// by [`HANDSHAKE_TIMEOUT`].
    pub fn new(inner: L, acceptor: TlsAcceptor) -> Self {
        TlsListener::with_timeout(inner, acceptor, HANDSHAKE_TIMEOUT)
    }

    /// The same with another handshake timeout.
    pub fn with_timeout(inner: L, acceptor: TlsAcceptor, timeout: Duration) -> Self {
        TlsListener {
            inner,
            acceptor,
            timeout,
            handshakes: JoinSet::new(),
        }
    }
}

impl<L> Listener for TlsListener<L>
where
    L: Listener,
    L::Addr: std::fmt::Debug + 'static,
{
    type Io = TlsStream<L::Io>;
    type Addr = L::Addr;

    /// The next connection whose handshake succeeded. Cancel-safe: accepted connections and
    /// handshakes in progress stay in the listener.
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                done = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Some(Ok(Some(connection))) = done {
                        return connection;
                    }
                }
                (io, addr) = self.inner.accept(),
                    if self.handshakes.len() < MAX_PENDING_HANDSHAKES =>
                {
                    let handshake = self.acceptor.accept(io);
                    let timeout = self.timeout;
                    self.handshakes.spawn(async move {
                        match tokio::time::timeout(timeout, handshake).await {
                            Ok(Ok(stream)) => Some((stream, addr)),
                            Ok(Err(error)) => {
                                tracing::debug!(peer = ?addr, %error, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!(peer = ?addr, "TLS handshake timed out");
                                None
                            }
                        }
                    });
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
