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
//! - Every CONNECT asks all peers to drop a session of the same client id and waits for the
//!   first answer (rmqtt's broadcast `Kick`): one live peer answers for all.
//!
//! **A peer that dies.** The plugin's gRPC clients queue a call to a peer that is down
//! until the call times out, and a publish waits for every peer's answer. Two things keep
//! a dead peer from stalling the nodes still up:
//!
//! - every call to a peer times out after [`ClusterConfig::CALL_TIMEOUT`] (the plugin's
//!   default is 60 s), and a circuit breaker per peer ([`breaker`]) opens once half of the
//!   last few calls to it failed: calls then fail at once, and a probe every
//!   [`ClusterConfig::BREAKER_OPEN`] finds out when the peer is back;
//! - every peer is watched ([`watch`]): a peer whose address refuses TCP connections has
//!   its breaker opened at once, one that does not answer pings after a few seconds, and
//!   while the breaker is open the peer is pinged often, so that the breaker's probes are
//!   mostly short pings.
//!
//! So a publish on a live node waits at most [`ClusterConfig::CALL_TIMEOUT`] for a peer
//! that just died, and none once the breaker is open, a few seconds after the death. A
//! CONNECT waits only when no peer at all answers, and then at most as long
//! ([`bounded_kick`]: rmqtt itself waits 15 s). A probe that is a publish rather than a
//! heartbeat waits [`ClusterConfig::CALL_TIMEOUT`] too. What is forwarded to a dead peer
//! is lost, as it would be with the peer's own clients gone.
//!
//! The plugin replaces rmqtt's session registry and router with cluster-aware ones; it
//! leaves the retained-message store and the shared-subscription strategy installed by
//! the broker in place and uses them.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmqtt::context::{
    CircuitBreakerConfig, CountBasedWindowConfig, ServerContext, ServerContextBuilder,
};
use rmqtt::grpc::{GrpcClient, GrpcServer, Message};
use rmqtt::shared::DefaultShared;
use tokio::task::{JoinHandle, JoinSet};

use crate::BrokerError;
use bounded_kick::BoundedKick;

mod bounded_kick;

/// The name the plugin is registered under, which its configuration is read by.
const PLUGIN: &str = "rmqtt-cluster-broadcast";

/// The calls a peer's breaker judges it by.
const BREAKER_WINDOW: usize = 4;

/// The circuit breaker of each peer's gRPC client: opens when at least 2 of the last 4
/// calls failed (rmqtt's default needs 10 failed calls, each a stalled publish), stays
/// open [`ClusterConfig::BREAKER_OPEN`], then lets one call through as a probe. Slow calls
/// do not count: [`ClusterConfig::CALL_TIMEOUT`] bounds them.
fn breaker() -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        failure_rate_threshold: 0.5,
        window: CountBasedWindowConfig {
            sliding_window_size: BREAKER_WINDOW,
        }
        .into(),
        minimum_number_of_calls: 2,
        wait_duration_in_open: ClusterConfig::BREAKER_OPEN,
        slow_call_duration_threshold: ClusterConfig::CALL_TIMEOUT,
        slow_call_rate_threshold: 1.0,
        name: "mesh-cluster-peer".into(),
    }
}

/// The most peers a node takes: a broadcast cluster sends every publish to each of them.
pub const MAX_CLUSTER_PEERS: usize = 32;

/// This node's place in a cluster of brokers: its id, the address its gRPC server listens
/// on for the other nodes, and the ids and gRPC addresses (`host:port`, a name resolved at
/// each connection or an IP address) of those other nodes.
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
///         ClusterConfig::parse_peer("2@127.0.0.1:5364").unwrap(),
///         ClusterConfig::parse_peer("3@broker-3.internal:5363").unwrap(),
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
    /// The other nodes: their ids and the `host:port` their gRPC servers listen on.
    pub peers: Vec<(u64, String)>,
}

impl ClusterConfig {
    /// How long a call to a peer may take (a forwarded publish, a subscription query, …)
    /// before it counts as failed.
    pub const CALL_TIMEOUT: Duration = Duration::from_secs(1);

    /// How often every peer is pinged while it answers.
    pub const HEARTBEAT: Duration = Duration::from_secs(1);

    /// How long a peer's breaker stays open before one call probes the peer again.
    pub const BREAKER_OPEN: Duration = Duration::from_secs(5);

    /// Reads one peer as `id@host:port` (`2@10.0.0.2:5363`, `3@broker-3:5363`).
    pub fn parse_peer(peer: &str) -> Result<(u64, String), BrokerError> {
        let bad = |why: &str| {
            BrokerError::Config(format!(
                "cluster peer {peer:?}: {why} (expected id@host:port, e.g. 2@broker-2:5363)"
            ))
        };
        let (id, addr) = peer.split_once('@').ok_or_else(|| bad("no '@'"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| bad("the id is not a number"))?;
        let addr = addr.trim();
        check_host_port(addr).map_err(bad)?;
        Ok((id, addr.to_string()))
    }

    /// Checks that the ids are distinct and the addresses usable.
    fn validate(&self) -> Result<(), BrokerError> {
        if self.grpc_addr.port() == 0 {
            return Err(BrokerError::Config(
                "cluster.grpc_addr needs a fixed port: its peers must know it".into(),
            ));
        }
        if self.peers.len() > MAX_CLUSTER_PEERS {
            return Err(BrokerError::Config(format!(
                "{} cluster peers: at most {MAX_CLUSTER_PEERS}",
                self.peers.len()
            )));
        }
        let mut ids = HashSet::from([self.node_id]);
        for (id, addr) in &self.peers {
            if !ids.insert(*id) {
                return Err(BrokerError::Config(format!(
                    "cluster node id {id} is given twice"
                )));
            }
            check_host_port(addr).map_err(|why| {
                BrokerError::Config(format!("cluster peer {id} at {addr:?}: {why}"))
            })?;
        }
        Ok(())
    }

    /// The plugin's configuration (TOML): every node, this one included, as `id@addr`.
    fn plugin_toml(&self) -> String {
        let nodes: Vec<String> =
            std::iter::once(format!("\"{}@{}\"", self.node_id, self.grpc_addr))
                .chain(
                    self.peers
                        .iter()
                        .map(|(id, addr)| format!("\"{id}@{addr}\"")),
                )
                .collect();
        format!(
            "node_grpc_addrs = [{}]\nnode_grpc_client_timeout = \"{}ms\"\n",
            nodes.join(", "),
            Self::CALL_TIMEOUT.as_millis()
        )
    }
}

/// Checks a peer's `host:port`: a port from 1 to 65535 and a host name (letters, digits,
/// `-`, `.`, `_`), an IPv4 address or a bracketed IPv6 one; nothing else reaches the
/// plugin's configuration, which is TOML.
fn check_host_port(addr: &str) -> Result<(), &'static str> {
    let (host, port) = addr.rsplit_once(':').ok_or("no port")?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err("the port is not a number from 1 to 65535"),
    }
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    };
    if host_ok {
        Ok(())
    } else {
        Err("the host is not a name or an IP address")
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
        .circuit_breaker_config(breaker())
        .plugins_config_map_add(PLUGIN, config.plugin_toml()))
}

/// The tasks a cluster node runs besides the broker's own: its gRPC server and the pings
/// of its peers. Aborted when the broker stops or is dropped.
pub(crate) struct NodeTasks {
    grpc: JoinHandle<()>,
    heartbeat: JoinSet<()>,
    peers: Vec<Arc<PeerWatch>>,
}

/// What this node knows of one peer, as of now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPeer {
    /// The peer's node id.
    pub id: u64,
    /// Its gRPC address, as configured.
    pub addr: String,
    /// Whether it answers: its last ping was answered and its breaker is closed, so what
    /// this node forwards to it now reaches it. False until it first answered.
    pub answering: bool,
}

/// One peer as its watcher sees it, shared with [`NodeTasks::peers`].
struct PeerWatch {
    id: u64,
    addr: String,
    client: GrpcClient,
    answered: AtomicBool,
}

impl PeerWatch {
    fn state(&self) -> ClusterPeer {
        ClusterPeer {
            id: self.id,
            addr: self.addr.clone(),
            answering: self.answered.load(Ordering::Relaxed)
                && !self.client.circuit_breaker_is_open(),
        }
    }
}

impl NodeTasks {
    /// Every peer, in the order of the configuration.
    pub(crate) fn peers(&self) -> Vec<ClusterPeer> {
        self.peers.iter().map(|p| p.state()).collect()
    }

    /// Stops the tasks without waiting.
    pub(crate) fn abort(&mut self) {
        self.grpc.abort();
        self.heartbeat.abort_all();
    }

    /// Stops the tasks and waits until they are gone (the gRPC port is then free).
    pub(crate) async fn stop(mut self) {
        self.abort();
        let _ = self.grpc.await;
        while self.heartbeat.join_next().await.is_some() {}
    }
}

/// Starts this node's gRPC server, the cluster plugin and the heartbeat; returns their
/// tasks, which the broker aborts when it stops.
///
/// Call it after the broker's retained-message store and shared-subscription strategy
/// are installed and before it serves clients.
pub(crate) async fn start(
    scx: &ServerContext,
    config: &ClusterConfig,
) -> Result<NodeTasks, BrokerError> {
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
    // The plugin has installed its session registry: bound the wait of its kicks.
    {
        let mut shared = scx.extends.shared_mut().await;
        let plugin = std::mem::replace(&mut *shared, Box::new(DefaultShared::new(None)));
        let peers = plugin.get_grpc_clients();
        *shared = Box::new(BoundedKick::new(plugin, peers, ClusterConfig::CALL_TIMEOUT));
    }
    let clients = scx.extends.shared().await.get_grpc_clients();
    let peers: Vec<Arc<PeerWatch>> = config
        .peers
        .iter()
        .filter_map(|(id, addr)| {
            let (_, client) = clients.get(id)?;
            Some(Arc::new(PeerWatch {
                id: *id,
                addr: addr.clone(),
                client: client.clone(),
                answered: AtomicBool::new(false),
            }))
        })
        .collect();
    let mut heartbeat = JoinSet::new();
    for peer in &peers {
        heartbeat.spawn(watch(peer.clone()));
    }
    tracing::info!(node = config.node_id, grpc = %addr, peers = ?config.peers,
        "broker is a cluster node");
    Ok(NodeTasks {
        grpc,
        heartbeat,
        peers,
    })
}

/// Watches one peer for as long as the node runs, and keeps its breaker (see [`breaker`])
/// in step with it:
///
/// - While the breaker is closed, a TCP connection to the peer's gRPC address is tried
///   every [`WATCH_EVERY`]. Refused (the peer's process is gone) or unanswered within
///   [`PROBE_TIMEOUT`] (its host is), the peer is down: a few calls that give up after
///   1 ms open its breaker at once, instead of after the first calls waited their
///   timeouts. Every [`ClusterConfig::HEARTBEAT`] a ping also goes through the plugin's
///   client (an answer may take [`PING_TIMEOUT`]), for a peer that listens but does not
///   answer.
/// - While the breaker is open, the peer is pinged every [`WATCH_EVERY`], so that when the
///   breaker lets a probe through, the probe is most likely a ping rather than a client's
///   CONNECT or publish. The breaker lets every call through until its probe has its
///   answer, so the probe must be short: 1 ms when the peer's address refuses connections,
///   [`PROBE_TIMEOUT`] when it accepts them (time for a live peer to answer).
/// - The client's fire-and-forget calls (a retained message copied to the peer, an
///   acknowledgement) go through a breaker of their own, whose state cannot be read: it is
///   opened and probed the same way, from the peer's going down until a breaker-open time
///   after it is back. Left alone, it would open only after calls waited out their
///   timeouts, and let every call through while its probe waited.
/// - A peer not known to answer (at start, or after it went silent) is pinged at every
///   round while its breaker is closed, so that it counts as answering as soon as it does.
///
/// Logs the peer answering (at first and again) and going silent, once each time, and
/// keeps what it last saw for [`Broker::cluster_peers`](crate::Broker::cluster_peers).
async fn watch(peer: Arc<PeerWatch>) {
    let (id, client) = (peer.id, &peer.client);
    let mut last_ping = tokio::time::Instant::now();
    let mut probe_notify_until = last_ping;
    loop {
        let answering = peer.answered.load(Ordering::Relaxed);
        let listening = listens(&peer.addr).await;
        let ping = |timeout| {
            let mut client = client.clone();
            async move {
                client
                    .send_message(
                        PLUGIN_MESSAGE_TYPE,
                        Message::NumberOfSessions,
                        Some(timeout),
                    )
                    .await
                    .is_ok()
            }
        };
        // The same through the client's other breaker: fire-and-forget calls (retained
        // messages copied to the peer, acknowledgements) have one of their own.
        let notify = |timeout| {
            let mut client = client.clone();
            async move {
                let _ = client
                    .notify(
                        PLUGIN_MESSAGE_TYPE,
                        Message::NumberOfSessions,
                        Some(timeout),
                    )
                    .await;
            }
        };
        let probe = if listening { PROBE_TIMEOUT } else { QUICK_FAIL };
        if !listening || client.circuit_breaker_is_open() {
            probe_notify_until =
                tokio::time::Instant::now() + ClusterConfig::BREAKER_OPEN + 2 * WATCH_EVERY;
        }
        let answered = if client.circuit_breaker_is_open() {
            ping(probe).await
        } else if !listening {
            for _ in 0..BREAKER_WINDOW {
                ping(QUICK_FAIL).await;
                notify(QUICK_FAIL).await;
            }
            false
        } else if !answering || last_ping.elapsed() >= ClusterConfig::HEARTBEAT {
            // A peer not known to answer yet is pinged at every round, not every heartbeat.
            last_ping = tokio::time::Instant::now();
            ping(PING_TIMEOUT).await
        } else {
            answering
        };
        // Until a breaker-open time after the peer is back, the other breaker is probed
        // too (its state cannot be read): short calls keep it open while the peer is down
        // and close it once the peer answers, so that its probes are never a retained copy
        // waiting out its timeout.
        if tokio::time::Instant::now() < probe_notify_until {
            notify(probe).await;
        }
        if answered != answering {
            peer.answered.store(answered, Ordering::Relaxed);
            if answered {
                tracing::info!(peer = id, "cluster peer answers");
            } else {
                tracing::warn!(peer = id, listening, "cluster peer does not answer");
            }
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// Whether something accepts TCP connections at `addr` (within [`PROBE_TIMEOUT`]).
async fn listens(addr: &str) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// How often a peer's address is tried, and a peer whose breaker is open pinged.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The timeout of a call meant to fail: to a peer known to be down.
const QUICK_FAIL: Duration = Duration::from_millis(1);

/// The gRPC message type the plugin answers (its default `message_type`).
const PLUGIN_MESSAGE_TYPE: u64 = 98;

/// How long a ping waits for a peer whose breaker is closed.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a ping that probes a peer (its breaker open) waits: a live peer answers in
/// about a millisecond.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig {
            node_id: 1,
            grpc_addr: "127.0.0.1:5363".parse().unwrap(),
            peers: vec![(2, "127.0.0.1:5364".into()), (3, "10.0.0.3:5363".into())],
        }
    }

    #[test]
    fn plugin_config_lists_every_node() {
        assert_eq!(
            config().plugin_toml(),
            "node_grpc_addrs = [\"1@127.0.0.1:5363\", \"2@127.0.0.1:5364\", \"3@10.0.0.3:5363\"]\n\
             node_grpc_client_timeout = \"1000ms\"\n"
        );
    }

    #[test]
    fn ids_must_be_distinct() {
        assert!(config().validate().is_ok());
        let mut twice = config();
        twice.peers.push((2, "127.0.0.1:5366".into()));
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
        peer_zero.peers[1].1 = "10.0.0.3:0".into();
        assert!(matches!(peer_zero.validate(), Err(BrokerError::Config(_))));
    }

    #[test]
    fn peers_are_read_as_id_at_host_port() {
        assert_eq!(
            ClusterConfig::parse_peer("2@broker-2:5363").unwrap(),
            (2, "broker-2:5363".to_string())
        );
        assert_eq!(
            ClusterConfig::parse_peer(" 3@[::1]:5363").unwrap(),
            (3, "[::1]:5363".to_string())
        );
        for bad in [
            "broker-2:5363",
            "x@broker-2:5363",
            "2@broker-2",
            "2@broker-2:0",
            "2@:5363",
            "2@bro\"ker:5363",
            "2@a b:5363",
            "2@[zz]:5363",
        ] {
            assert!(
                matches!(ClusterConfig::parse_peer(bad), Err(BrokerError::Config(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn peers_are_bounded() {
        let mut many = config();
        many.peers = (2..=(MAX_CLUSTER_PEERS as u64 + 2))
            .map(|id| (id, format!("10.0.0.{id}:5363")))
            .collect();
        assert!(matches!(many.validate(), Err(BrokerError::Config(_))));
    }
}
