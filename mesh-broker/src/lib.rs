//! # mesh-broker
//!
//! An MQTT broker that runs inside the process: the default broker of `mesh up` and the
//! broker each test starts for itself on an ephemeral port.
//!
//! It is [rmqtt](https://crates.io/crates/rmqtt) with the glue an embedded broker
//! needs: `TCP_NODELAY` on accepted sockets (no 40 ms Nagle stall on small replies),
//! an enabled in-memory retained-message store, round-robin shared subscriptions
//! (`$share/{group}/{filter}`), a quicker match of published topics against the
//! subscriptions than rmqtt's own (the router of `router.rs`), typed bind errors, a
//! [`Broker::stop`] that frees the port, and, when asked, authentication and ACLs from
//! Mosquitto's password and ACL files ([`Access`]).
//!
//! With the feature `cluster` (off by default; building it needs `protoc`), a broker can
//! be one node of a cluster of brokers that behave as one, through rmqtt's broadcast
//! cluster plugin: see [`BrokerConfig::cluster`] and `ClusterConfig`.
//!
//! ```
//! use mesh_broker::Broker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), mesh_broker::BrokerError> {
//! // Port 0: the OS picks a free port.
//! let broker = Broker::start("127.0.0.1:0".parse().unwrap()).await?;
//! let addr = broker.local_addr();
//! assert_ne!(addr.port(), 0);
//!
//! // A client can connect now.
//! tokio::net::TcpStream::connect(addr).await.expect("broker listens");
//!
//! broker.stop().await;
//! assert!(tokio::net::TcpStream::connect(addr).await.is_err());
//! # Ok(())
//! # }
//! ```
//!
//! ## Behaviour worth knowing (from rmqtt 0.24)
//!
//! - After a client's DISCONNECT the broker discards its will but leaves closing the
//!   socket to the client (rumqttc: stop polling and drop the event loop).
//! - A client reconnecting with the same client id while the broker still processes
//!   its previous connection may be refused once with CONNACK "server unavailable";
//!   retrying succeeds.
//! - The retained messages matching a new subscription are queued before the SUBACK
//!   is sent, so they reach the subscriber after its SUBACK and before anything
//!   published after it (as with Mosquitto; rmqtt alone sends them from a task that
//!   can run later). A message retained while the subscription is being made can
//!   still arrive twice, live and as retained. A new shared subscription gets no
//!   retained messages.
//! - A subscription whose filter has more than [`MAX_TOPIC_LEVELS`] levels gets a failure
//!   in its SUBACK (rmqtt's trie and matching recurse by level).
//! - A client publish to a topic that starts with `$` (`$SYS/…`, reserved to brokers) is
//!   acknowledged and dropped, never delivered or retained.
//! - [`Broker::stop`] frees the port and every session, but rmqtt keeps one idle
//!   task per stopped broker (about 40 kB with the default
//!   [`BrokerConfig::max_concurrent_handshakes`]) until the Tokio runtime ends.

#![warn(missing_docs)]

mod access;
mod broker;
#[cfg(feature = "cluster")]
mod cluster;
mod config;
mod error;
mod reserved;
mod retain;
mod router;
mod shared;

pub use access::{Access, Acl, HASH_ITERATIONS, Passwords, hash_password, random_password};
pub use broker::{Broker, MAX_TOPIC_LEVELS};
#[cfg(feature = "cluster")]
pub use cluster::{ClusterConfig, ClusterPeer, MAX_CLUSTER_PEERS};
pub use config::BrokerConfig;
pub use error::BrokerError;
