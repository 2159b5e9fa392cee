//! The errors a broker reports when it cannot start.

use std::io;
use std::net::SocketAddr;

/// Why a [`Broker`](crate::Broker) could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// Another socket already listens on the address: choose another port.
    #[error("address {addr} is already in use: choose another port")]
    AddrInUse {
        /// The address that was asked for.
        addr: SocketAddr,
    },
    /// The address is not one of this machine's addresses.
    #[error("address {addr} is not available on this machine")]
    AddrNotAvailable {
        /// The address that was asked for.
        addr: SocketAddr,
    },
    /// The process may not listen on the address (e.g. a port below 1024).
    #[error("permission denied to listen on {addr}")]
    PermissionDenied {
        /// The address that was asked for.
        addr: SocketAddr,
    },
    /// Any other failure to set up the listening socket.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address that was asked for.
        addr: SocketAddr,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// The configuration is not valid.
    #[error("invalid broker configuration: {0}")]
    Config(String),
}

impl BrokerError {
    /// Classifies an I/O error from binding `addr`.
    pub(crate) fn from_bind(addr: SocketAddr, source: io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::AddrInUse => Self::AddrInUse { addr },
            io::ErrorKind::AddrNotAvailable => Self::AddrNotAvailable { addr },
            io::ErrorKind::PermissionDenied => Self::PermissionDenied { addr },
            _ => Self::Bind { addr, source },
        }
    }
}
