//! Broker configuration: the listen address, the limits applied to clients, and who may do
//! what.

use crate::Access;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How a [`Broker`](crate::Broker) listens and which limits it applies to clients.
///
/// Build one with [`BrokerConfig::new`] (every limit at its default) and change the
/// fields you need:
///
/// ```
/// use mesh_broker::BrokerConfig;
///
/// let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap());
/// config.max_connections = 100;
/// assert_eq!(config.addr.port(), 0);
///
/// let other = BrokerConfig { max_packet_size: 64 * 1024, ..config.clone() };
/// assert_eq!(other.max_connections, 100);
/// ```
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The TCP address to listen on. Port 0 asks the OS for a free port; the port
    /// really bound is then given by [`Broker::local_addr`](crate::Broker::local_addr).
    pub addr: SocketAddr,
    /// The largest MQTT packet, in bytes, a client may send (default 16 MiB, the mesh's bus
    /// clients' own default `max_packet_size`, so that the broker never closes the
    /// connection on a message a client accepted to publish). A client that sends a larger
    /// one is disconnected.
    pub max_packet_size: u32,
    /// The most clients at once (default 10,000): counted as sessions held, so a
    /// session kept for a client gone with `clean_session = false` counts too. A
    /// client past the limit is refused with CONNACK "server unavailable".
    pub max_connections: usize,
    /// The most CONNECT packets processed at once (default 32); more wait their
    /// turn. Only the processing of a received CONNECT takes a slot, not waiting for
    /// it.
    pub max_concurrent_handshakes: usize,
    /// The most QoS 1/2 messages in flight to one client, awaiting acknowledgement
    /// (default 64; MQTT allows at most 65,535).
    pub max_inflight: u16,
    /// The most messages queued for one client behind its in-flight window
    /// (default 100,000). Retained messages sent on subscribe go through this queue,
    /// so it bounds how many retained messages one subscription can receive at once.
    pub max_queued_messages: usize,
    /// The most retained messages kept (default 100,000). Past it, a retained
    /// publish to a new topic is still delivered but not retained.
    pub max_retained_messages: usize,
    /// How long a connection may take to send its CONNECT packet (default 10 s).
    pub handshake_timeout: Duration,
    /// How long the session of a client that connected with `clean_session = false`
    /// (MQTT 3.1.1) outlives its connection (default 2 h).
    pub session_expiry: Duration,
    /// The accounts and their rights (default none: every client is accepted). With them,
    /// anonymous clients and wrong passwords are refused at CONNECT, and each account may
    /// publish and subscribe only where its ACL says ([`Access`]).
    pub access: Option<Arc<Access>>,
    /// This broker's place in a cluster of brokers (feature `cluster`; default none: a
    /// broker on its own). See [`ClusterConfig`](crate::ClusterConfig).
    #[cfg(feature = "cluster")]
    pub cluster: Option<crate::ClusterConfig>,
}

impl BrokerConfig {
    /// A configuration that listens on `addr` with every limit at its default.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            max_packet_size: 16 * 1024 * 1024,
            max_connections: 10_000,
            max_concurrent_handshakes: 32,
            max_inflight: 64,
            max_queued_messages: 100_000,
            max_retained_messages: 100_000,
            handshake_timeout: Duration::from_secs(10),
            session_expiry: Duration::from_secs(2 * 60 * 60),
            access: None,
            #[cfg(feature = "cluster")]
            cluster: None,
        }
    }
}

impl Default for BrokerConfig {
    /// Listens on `127.0.0.1:1883`, the usual MQTT port, on loopback only.
    fn default() -> Self {
        Self::new(SocketAddr::from(([127, 0, 0, 1], 1883)))
    }
}
