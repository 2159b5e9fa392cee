//! A broker as one node of a cluster (feature `cluster`): rmqtt's broadcast cluster plugin
//! (`rmqtt-cluster-broadcast`), with the nodes talking gRPC to each other.
//!
//! Each node keeps its own sessions, subscriptions and retained messages; the plugin makes
//! the nodes behave as one broker:
//!
//! - A publish is delivered to the matching subscribers of its own node and broadcast to
//!   every other node, which delivers it to its own subscribers. Wills take the same path.
//! - For a shared subscription (`$share/{group}/{filter}`) the node the message was
//!   published on asks every peer for its members, picks one member of each group with the
//!   broker's own strategy ([`RoundRobinShared`](crate::shared::RoundRobinShared), the same
//!   as without a cluster) and sends the message to that member's node only.
//! - A retained message is stored on the node it was published on (in the broker's
//!   [`MemoryRetainStorage`](crate::retain::MemoryRetainStorage)) and sent to every peer,
//!   which stores it in its own store: every node holds all retained messages and delivers
//!   them to its new subscribers itself. A node that starts later copies the retained
//!   messages of its peers about 2 s after it starts.
//! - A persistent session is not moved: a client that reconnects to another node starts a
//!   new session there.
//! - Every CONNECT asks all peers to drop a session of the same client id and waits for an
//!   answer (rmqtt's broadcast `Kick`, 15 s timeout): while a peer is down, each new
//!   connection waits 15 s for its CONNACK (clients that give up sooner cannot connect),
//!   and so does [`Broker::stop`](crate::Broker::stop). A node started before its peers
//!   makes its first clients wait about 3 s, until its gRPC clients reconnect.
//!
//! The plugin replaces rmqtt's session registry and router with cluster-aware ones; it
//! leaves the retained-message store and the shared-subscription strategy installed by
//! the broker in place and uses them.

use std::collections::HashSet;
use std::net::SocketAddr;

use rmqtt::context::{ServerContext, ServerContextBuilder};
use rmqtt::grpc::GrpcServer;
use tokio::task::JoinHandle;

use crate::BrokerError;

/// The name the plugin is registered under, which its configuration is read by.
const PLUGIN: &str = "rmqtt-cluster-broadcast";

/// This node's place in a cluster of brokers: its id, the address its gRPC server listens
/// on for the other nodes, and the ids and gRPC addresses of those other nodes.
///
/// Every node of a cluster must be started with the same set of nodes (itself plus its
/// peers), each with a different id. The nodes may start in any order; a node's messages
/// reach a peer once that peer is up (a message published before is not delivered there).
///
/// ```
/// use mesh_broker::{BrokerConfig, ClusterConfig};
///
/// let mut config = BrokerConfig::new("127.0.0.1:1883".parse().unwrap());
/// config.cluster = Some(ClusterConfig {
///     node_id: 1,
///     grpc_addr: "127.0.0.1:5363".parse().unwrap(),
///     peers: vec![
///         (2, "127.0.0.1:5364".parse().unwrap()),
///         (3, "127.0.0.1:5365".parse().unwrap()),
///     ],
/// });
/// ```
///
/// The gRPC traffic between nodes is neither encrypted nor authenticated: bind `grpc_addr`
/// to a network only the nodes can reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This node's id, unique in the cluster.
    pub node_id: u64,
    /// The address this node's gRPC server listens on (port 0 is not allowed: the peers
    /// must know it in advance).
    pub grpc_addr: SocketAddr,
    /// The other nodes: their ids and the gRPC addresses they listen on.
    pub peers: Vec<(u64, SocketAddr)>,
}

impl ClusterConfig {
    /// Checks that the ids are distinct and the addresses usable.
    fn validate(&self) -> Result<(), BrokerError> {
        if self.grpc_addr.port() == 0 {
            return Err(BrokerError::Config(
                "cluster.grpc_addr needs a fixed port: its peers must know it".into(),
            ));
        }
        let mut ids = HashSet::from([self.node_id]);
        for (id, addr) in &self.peers {
            if !ids.insert(*id) {
                return Err(BrokerError::Config(format!(
                    "cluster node id {id} is given twice"
                )));
            }
            if addr.port() == 0 {
                return Err(BrokerError::Config(format!(
                    "cluster peer {id} has no port in {addr}"
                )));
            }
        }
        Ok(())
    }

    /// The plugin's configuration (TOML): every node, this one included, as `id@addr`.
    fn plugin_toml(&self) -> String {
        let nodes: Vec<String> = std::iter::once((self.node_id, self.grpc_addr))
            .chain(self.peers.iter().copied())
            .map(|(id, addr)| format!("\"{id}@{addr}\""))
            .collect();
        format!("node_grpc_addrs = [{}]\n", nodes.join(", "))
    }
}

/// Gives the context builder this node's id and the plugin's configuration.
pub(crate) fn configure(
    builder: ServerContextBuilder,
    config: &ClusterConfig,
) -> Result<ServerContextBuilder, BrokerError> {
    config.validate()?;
    Ok(builder
        .node_id(config.node_id)
        .plugins_config_map_add(PLUGIN, config.plugin_toml()))
}

/// Starts this node's gRPC server and the cluster plugin; returns the server's task,
/// which the broker aborts when it stops.
///
/// Call it after the broker's retained-message store and shared-subscription strategy
/// are installed and before it serves clients.
pub(crate) async fn start(
    scx: &ServerContext,
    config: &ClusterConfig,
) -> Result<JoinHandle<()>, BrokerError> {
    let addr = config.grpc_addr;
    // rmqtt's gRPC server retries a failed bind every 3 s and only logs it: try the
    // address first so that a taken port is an error of `start_with`.
    std::net::TcpListener::bind(addr).map_err(|e| BrokerError::from_bind(addr, e))?;
    let server = GrpcServer::new(scx.clone());
    let grpc = tokio::spawn(async move {
        // Reuse the address (a restarted node binds while old connections linger in
        // TIME_WAIT), not the port (a second node on the same port would share it).
        if let Err(e) = server.listen_and_serve(addr, true, false).await {
            tracing::error!(%addr, error = %e, "cluster gRPC server stopped");
        }
    });
    if let Err(e) = rmqtt_cluster_broadcast::register(scx, true, false).await {
        grpc.abort();
        return Err(BrokerError::Config(format!(
            "the cluster plugin did not start: {e}"
        )));
    }
    tracing::info!(node = config.node_id, grpc = %addr, peers = ?config.peers,
        "broker is a cluster node");
    Ok(grpc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig {
            node_id: 1,
            grpc_addr: "127.0.0.1:5363".parse().unwrap(),
            peers: vec![
                (2, "127.0.0.1:5364".parse().unwrap()),
                (3, "10.0.0.3:5363".parse().unwrap()),
            ],
        }
    }

    #[test]
    fn plugin_config_lists_every_node() {
        assert_eq!(
            config().plugin_toml(),
            "node_grpc_addrs = [\"1@127.0.0.1:5363\", \"2@127.0.0.1:5364\", \"3@10.0.0.3:5363\"]\n"
        );
    }

    #[test]
    fn ids_must_be_distinct() {
        assert!(config().validate().is_ok());
        let mut twice = config();
        twice.peers.push((2, "127.0.0.1:5366".parse().unwrap()));
        assert!(matches!(twice.validate(), Err(BrokerError::Config(_))));
        let mut self_as_peer = config();
        self_as_peer.peers[0].0 = 1;
        assert!(matches!(
            self_as_peer.validate(),
            Err(BrokerError::Config(_))
        ));
    }

    #[test]
    fn ports_must_be_fixed() {
        let mut zero = config();
        zero.grpc_addr.set_port(0);
        assert!(matches!(zero.validate(), Err(BrokerError::Config(_))));
        let mut peer_zero = config();
        peer_zero.peers[1].1.set_port(0);
        assert!(matches!(peer_zero.validate(), Err(BrokerError::Config(_))));
    }
}
