//! Starting and stopping a broker: an rmqtt server with one TCP listener.

use std::io;
use std::net::SocketAddr;
use std::num::NonZeroU16;

use rmqtt::context::ServerContext;
use rmqtt::hook::Type;
use rmqtt::net::Builder;
use rmqtt::server::MqttServer;
use rmqtt::types::Id;
use tokio::task::{JoinHandle, JoinSet};

use crate::access::AccessHook;
use crate::reserved::ReservedTopics;
use crate::retain::MemoryRetainStorage;
use crate::router::MeshRouter;

/// The most levels a subscription's filter may have (rmqtt counts them); a
/// deeper one gets a failure in its SUBACK. The mesh's own topics have at most eleven.
pub const MAX_TOPIC_LEVELS: usize = 128;
use crate::shared::RoundRobinShared;
use crate::{BrokerConfig, BrokerError};

/// An MQTT broker (MQTT 3.1.1 and 5) running in this process, listening on one TCP
/// address.
///
/// It supports QoS 0, 1 and 2, retained messages, last wills and shared
/// subscriptions (`$share/{group}/{filter}`). Without [`BrokerConfig::access`] it accepts
/// every client (bind it to loopback unless the network is trusted; a start on another
/// address logs a warning); with it, only the accounts of its password file, each limited to
/// the topics its ACL grants. Client publishes to topics reserved to brokers (`$SYS/…`) are
/// dropped.
///
/// Several brokers can run in one process at once, each with its own sessions and
/// retained messages. Dropping a `Broker` without calling [`Broker::stop`] closes
/// its listening socket but leaves connected clients served until they go or the
/// Tokio runtime shuts down.
pub struct Broker {
    local_addr: SocketAddr,
    scx: ServerContext,
    server: JoinHandle<()>,
    /// The cluster node's gRPC server and heartbeat, if the broker is one.
    #[cfg(feature = "cluster")]
    cluster: Option<crate::cluster::NodeTasks>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Starts a broker on `addr` with every limit at its default; see
    /// [`Broker::start_with`].
    pub async fn start(addr: SocketAddr) -> Result<Broker, BrokerError> {
        Self::start_with(BrokerConfig::new(addr)).await
    }

    /// Starts a broker as `config` says and returns once it listens.
    ///
    /// Must be called within a Tokio runtime (either flavour); the broker's tasks run
    /// on it. Port 0 in `config.addr` binds a free port: [`Broker::local_addr`] tells
    /// which.
    ///
    /// # Errors
    /// [`BrokerError::AddrInUse`] when another socket listens on the address, other
    /// [`BrokerError`] variants when the address cannot be bound or `config` is not
    /// valid.
    pub async fn start_with(config: BrokerConfig) -> Result<Broker, BrokerError> {
        let addr = config.addr;
        let max_inflight = NonZeroU16::new(config.max_inflight)
            .ok_or_else(|| BrokerError::Config("max_inflight must be at least 1".into()))?;
        if config.max_concurrent_handshakes == 0 {
            return Err(BrokerError::Config(
                "max_concurrent_handshakes must be at least 1".into(),
            ));
        }
        if config.max_connections == 0 {
            return Err(BrokerError::Config(
                "max_connections must be at least 1".into(),
            ));
        }

        let listener = Builder::new()
            .name("mesh/tcp")
            .laddr(addr)
            // Accepted sockets get TCP_NODELAY: with Nagle on, every small reply
            // waits for the peer's delayed ACK (about 40 ms on Linux).
            .nodelay(true)
            // Lets a restarted broker bind while connections of the previous one
            // linger in TIME_WAIT; a port someone still listens on stays refused.
            .reuseaddr(Some(true))
            // Bounds the CONNECTs waiting to be processed; the connection limit
            // itself is the context's session limit below.
            .max_connections(config.max_connections)
            // rmqtt never frees the task queue that processes CONNECT packets (its
            // runner holds a sender to itself), about 0.65 kB per worker: a few
            // workers keep what a stopped broker leaks small.
            .max_handshaking_limit(config.max_concurrent_handshakes)
            .max_packet_size(config.max_packet_size)
            // Bounds the depth of the subscription trie, and so of matching a topic
            // against it (rmqtt's insert and the router's walk recurse by level).
            .max_topic_levels(MAX_TOPIC_LEVELS)
            .allow_anonymous(config.access.is_none())
            .max_inflight(max_inflight)
            .max_mqueue_len(config.max_queued_messages)
            .handshake_timeout(config.handshake_timeout)
            .session_expiry_interval(config.session_expiry)
            .bind()
            .map_err(|e| bind_error(addr, e))?
            .tcp()
            .map_err(|e| bind_error(addr, e))?;
        let local_addr = listener.local_addr().map_err(|e| bind_error(addr, e))?;

        // The busy check spawns a load monitor that outlives the broker; a broker
        // for local use and tests has no need of it.
        let builder = ServerContext::new()
            .busy_check_enable(false)
            .mqtt_max_sessions(isize::try_from(config.max_connections).unwrap_or(isize::MAX));
        #[cfg(feature = "cluster")]
        let builder = match &config.cluster {
            Some(cluster) => crate::cluster::configure(builder, cluster)?,
            None => builder,
        };
        let scx = builder.build().await;
        let retained = MemoryRetainStorage::new(config.max_retained_messages);
        let hooks = scx.extends.hook_mgr().register();
        hooks
            .add(Type::ClientSubscribe, Box::new(retained.delivery()))
            .await;
        hooks
            .add(Type::SessionSubscribed, Box::new(retained.delivery()))
            .await;
        hooks
            .add(Type::MessagePublishCheckAcl, Box::new(ReservedTopics))
            .await;
        if let Some(access) = &config.access {
            for hook in [
                Type::ClientAuthenticate,
                Type::MessagePublishCheckAcl,
                Type::ClientSubscribeCheckAcl,
            ] {
                hooks
                    .add(hook, Box::new(AccessHook::new(access.clone())))
                    .await;
            }
        }
        hooks.start().await;
        *scx.extends.retain_mut().await = Box::new(retained);
        *scx.extends.shared_subscription_mut().await = Box::new(RoundRobinShared::default());
        *scx.extends.router_mut().await = Box::new(MeshRouter::new(scx.clone()));
        // The cluster plugin replaces the session registry and the router (with rmqtt's
        // matcher), and uses the retained-message store and shared-subscription strategy
        // installed above.
        #[cfg(feature = "cluster")]
        let cluster = match &config.cluster {
            Some(cluster) => Some(crate::cluster::start(&scx, cluster).await?),
            None => None,
        };

        // `MqttServer::start` exits the process when serving fails: run it ourselves.
        let server = MqttServer::new(scx.clone())
            .listener_by_id(listener, local_addr.port())
            .build();
        let server = tokio::spawn(async move {
            if let Err(e) = server.run().await {
                tracing::error!(error = %e, "MQTT broker stopped serving");
            }
        });
        match &config.access {
            Some(_) => {
                tracing::info!(addr = %local_addr, "MQTT broker listening (authenticated, with ACLs)")
            }
            None if local_addr.ip().is_loopback() => {
                tracing::info!(addr = %local_addr, "MQTT broker listening")
            }
            None => tracing::warn!(addr = %local_addr,
                "MQTT broker listening on a non-loopback address WITHOUT AUTHENTICATION: any \
                 client that reaches it can read and forge all traffic (give it a password \
                 file and an ACL, e.g. from `mesh secure`)"),
        }
        Ok(Broker {
            local_addr,
            scx,
            server,
            #[cfg(feature = "cluster")]
            cluster,
        })
    }

    /// The address the broker listens on, with the port really bound when it was
    /// started on port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The other nodes of the cluster this broker is a node of (feature `cluster`), and
    /// whether each answers now; empty when the broker is not a cluster node. Every peer
    /// answering is what a cluster that has formed looks like from this node.
    #[cfg(feature = "cluster")]
    pub fn cluster_peers(&self) -> Vec<crate::ClusterPeer> {
        self.cluster
            .as_ref()
            .map(crate::cluster::NodeTasks::peers)
            .unwrap_or_default()
    }

    /// How many clients are connected now.
    pub fn connection_count(&self) -> usize {
        usize::try_from(self.scx.connections.count()).unwrap_or(0)
    }

    /// How many sessions the broker holds: those of connected clients, plus those kept
    /// for clients that connected with `clean_session = false` and went away. A
    /// session is released only after its will, if any, has been handled.
    pub fn session_count(&self) -> usize {
        usize::try_from(self.scx.sessions.count()).unwrap_or(0)
    }

    /// Stops the broker: closes the listening socket, then disconnects every client
    /// and drops its session. The port is free again when this returns.
    ///
    /// Clients are disconnected as if their connections dropped, so their wills are
    /// published (to the clients not yet disconnected). A connection accepted but
    /// still before its CONNECT packet is closed at the latest when its handshake
    /// timeout runs out.
    ///
    /// A cluster node (feature `cluster`) also stops its gRPC server: the other nodes
    /// stop reaching it, and what they forward to it meanwhile is lost.
    pub async fn stop(mut self) {
        self.server.abort();
        // Waiting for the aborted task drops the listener, freeing the port.
        let _ = (&mut self.server).await;
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.cluster.take() {
            cluster.stop().await;
        }

        let ids: Vec<Id> = self
            .scx
            .extends
            .shared()
            .await
            .iter()
            .map(|e| e.id())
            .collect();
        let mut kicks = JoinSet::new();
        for id in ids {
            let mut entry = self.scx.extends.shared().await.entry(id);
            kicks.spawn(async move {
                if let Err(e) = entry.kick(true, true, true).await {
                    tracing::debug!(error = %e, "kicking a session at broker stop failed");
                }
            });
        }
        while kicks.join_next().await.is_some() {}
        tracing::info!(addr = %self.local_addr, "MQTT broker stopped");
    }
}

impl Drop for Broker {
    /// Stops listening (if [`Broker::stop`] has not already).
    fn drop(&mut self) {
        self.server.abort();
        #[cfg(feature = "cluster")]
        if let Some(cluster) = &mut self.cluster {
            cluster.abort();
        }
    }
}

/// Turns rmqtt's error from binding `addr` into a [`BrokerError`].
fn bind_error(addr: SocketAddr, error: rmqtt::Error) -> BrokerError {
    match error.downcast::<io::Error>() {
        Ok(io_error) => BrokerError::from_bind(addr, io_error),
        Err(other) => BrokerError::Bind {
            addr,
            source: io::Error::other(other.to_string()),
        },
    }
}
