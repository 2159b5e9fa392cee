//! The MQTT connection shared by agents and gateways: one [`Bus`] per process (or per
//! component), over rumqttc, that publishes, routes incoming messages to [`Subscription`]s,
//! reconnects with backoff and re-subscribes after every reconnect.
//!
//! # Behaviour
//!
//! - **Latency.** TCP_NODELAY is always set on the client socket (rumqttc leaves Nagle on,
//!   which turns a QoS 1 round trip of about 120 µs into about 88 ms).
//! - **One event-loop task** polls rumqttc and dispatches; it never awaits a client request
//!   (rumqttc #1025). Subscribes and unsubscribes go through a second task, in order.
//! - **Batched writes.** The event-loop task takes the client's requests off their queue
//!   itself and writes all those waiting (up to [`WRITE_BATCH`]) with one system call, where
//!   rumqttc writes and flushes each on its own (rumqttc #810): under load a gateway's
//!   requests and an agent's replies leave many to a write; alone, one leaves at once.
//! - **Reconnects** use exponential backoff ([`Backoff`], 50 ms doubling to 2 s by default)
//!   and re-subscribe every live filter after each CONNACK without a session (rumqttc does
//!   not, #250). Requests rumqttc moved out of its queue when the connection dropped
//!   (unacknowledged QoS 1/2 publishes, queued subscribes) are sent again after the
//!   reconnect, also on a clean session where rumqttc would drop them: QoS 1 stays "at least
//!   once" across reconnects. A publish the broker never acknowledges because it closes
//!   the connection on it (a message over the broker's packet size limit) is given up after
//!   [`RESEND_LIMIT`] connections in a row, logged and counted ([`BusStats`]), so
//!   that one message cannot keep a client in a reconnect loop.
//! - **Size.** [`BusConfig::max_packet_size`] bounds both directions: a larger publish fails
//!   with [`BusError::PayloadTooLarge`] before it is queued; a larger incoming message is
//!   read, discarded, logged and counted without dropping the connection (a broker that
//!   redelivers it, a retained message on every re-subscription, would otherwise loop).
//! - **State** is reported through [`Bus::state`] (a `tokio::sync::watch` of
//!   [`ConnectionState`]) and in `tracing` (info on connect, warn on disconnect).
//! - **Publishing** ([`Bus::publish`]) resolves when rumqttc has taken the message into its
//!   request queue, not when the broker acknowledged it (rumqttc does not say which PUBACK
//!   answers which call). While disconnected, messages wait in that queue
//!   ([`BusConfig::request_channel_capacity`]); a publish that cannot even be queued within
//!   [`BusConfig::request_timeout`] fails with [`BusError::Timeout`].
//! - **Subscribing** ([`Bus::subscribe`]) resolves once the broker acknowledged the
//!   SUBSCRIBE, so a message published by anyone after it returns is delivered.
//! - **Acknowledging.** The bus acknowledges each QoS 1 or 2 message once it is handed over,
//!   unless the subscription leaves it to its consumer ([`AckMode::ByConsumer`]): then the
//!   message carries an [`Ack`], sent when dropped, so that on a persistent session a message
//!   the process had not finished with when it died comes again. Subscriptions made with
//!   [`Bus::connect_subscribed`] exist before the connection, so they also get what a kept
//!   session delivers right after the CONNACK.
//! - **Routing.** Every incoming message goes to every subscription whose filter matches its
//!   topic (`+`, `#`, and a `$share/<group>/` prefix stripped for matching). MQTT 3.1.1 does
//!   not say which subscription a message came through, so routing is by topic: a topic that
//!   matches both a shared and a plain subscription of the same connection reaches both, and
//!   re-subscribing (a new subscription to a filter, or after a reconnect) makes the broker
//!   send retained messages again (they carry `retain = true`). When two subscriptions of one
//!   connection overlap, a broker may send a message once per matching subscription (MQTT
//!   3.1.1, section 3.3.5: the embedded broker does, Mosquitto does not), and each of them
//!   then gets every copy: the mesh's own components never overlap their filters on one
//!   connection, and every receiver of the protocol de-duplicates (docs/protocol.md).
//! - **Backpressure.** Each subscription buffers [`BusConfig::subscription_capacity`]
//!   messages. When one is full, the dispatcher waits for room: the bus stops reading from
//!   the socket and the broker holds the rest (bounded memory, no silent loss). A consumer
//!   that stops reading therefore stalls every subscription of its bus, and if it stalls for
//!   longer than about 1.5 × keep-alive the broker drops the connection. Consumers should
//!   hand long work to other tasks; a consumer must not block on [`Bus::publish`] while
//!   holding back its own subscription under sustained overload, since the request queue
//!   only drains while the dispatcher runs.
//! - **Shutdown.** [`Bus::disconnect`] sends a clean MQTT DISCONNECT, so the broker does
//!   **not** publish the last will: a component that announces its presence publishes its
//!   own "offline" before disconnecting. Dropping the last handle of a bus without
//!   disconnecting closes the socket abruptly, and the broker publishes the will.

mod config;
mod driver;
mod reader;
#[cfg(test)]
mod scripted_peer;

use crate::sync::MutexExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub use config::{
    Backoff, BrokerUrl, BusConfig, DEFAULT_MAX_PACKET_SIZE, LastWill, MIN_MAX_PACKET_SIZE,
    MQTT_MAX_PACKET_SIZE, TlsRoots, UrlError, redact_url,
};
pub use rumqttc::QoS;

pub use driver::{Ack, DropReason, Dropped, RESEND_LIMIT, WRITE_BATCH};
use driver::{BusState, Command, Driver, QueuedPublish, ResendGuard};
use reader::KeepAlive;

/// Every way a bus operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The broker URL could not be parsed (the URL is shown without its password).
    #[error("invalid broker URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, password redacted.
        url: String,
        /// Why.
        reason: UrlError,
    },
    /// A configuration value is out of range.
    #[error("invalid bus configuration: {0}")]
    InvalidConfig(String),
    /// The TLS configuration could not be built (CA file, system roots).
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The first connection attempt failed (refused, unreachable, TLS, bad credentials).
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The broker URL, without user info.
        url: String,
        /// What rumqttc reported (boxed: it is large).
        #[source]
        source: Box<rumqttc::ConnectionError>,
    },
    /// No CONNACK within [`BusConfig::connect_timeout`].
    #[error("no answer from {url} within {after:?}")]
    ConnectTimeout {
        /// The broker URL, without user info.
        url: String,
        /// How long it waited.
        after: Duration,
    },
    /// A topic name that cannot be published to (empty, wildcards, NUL, too long).
    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic {
        /// The topic.
        topic: String,
        /// Why.
        reason: &'static str,
    },
    /// A topic filter that cannot be subscribed to.
    #[error("invalid topic filter {filter:?}: {reason}")]
    InvalidFilter {
        /// The filter.
        filter: String,
        /// Why.
        reason: &'static str,
    },
    /// A message larger than [`BusConfig::max_packet_size`] allows: refused before it is
    /// queued, so it never reaches the broker.
    #[error("a message of {size} bytes exceeds the bus's maximum packet size of {max} bytes")]
    PayloadTooLarge {
        /// The size of the packet it would make (fixed header included).
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The broker refused a subscription (SUBACK failure).
    #[error("the broker refused the subscription to {filter:?}")]
    SubscribeRejected {
        /// The filter.
        filter: String,
    },
    /// An operation did not complete in time.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        what: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// The bus was disconnected or dropped.
    #[error("the bus is closed")]
    Closed,
}

/// The state of the connection to the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionState {
    /// Connecting (first attempt or reconnecting).
    Connecting,
    /// Connected: CONNACK received and, after a reconnect, every live subscription
    /// re-subscribed (acknowledged by the broker).
    Connected,
    /// The connection dropped; a reconnect follows after the backoff.
    Disconnected {
        /// What went wrong.
        reason: String,
    },
    /// The bus was disconnected or dropped: no more reconnects.
    Closed,
}

/// A message received on a [`Subscription`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusMessage {
    /// The topic it was published to.
    pub topic: String,
    /// The payload (shared, not copied, between overlapping subscriptions).
    pub payload: Bytes,
    /// Whether the broker sent it as a retained message (to a new subscriber).
    pub retain: bool,
    /// On a subscription whose consumer acknowledges ([`AckMode::ByConsumer`]), a QoS 1 or
    /// 2 message's acknowledgement: sent when it (and every clone) is dropped.
    pub ack: Option<Ack>,
}

/// Who acknowledges the QoS 1 and 2 messages of a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// The bus, as soon as the message is handed over.
    #[default]
    OnReceipt,
    /// The consumer, by dropping the message's [`Ack`] once it is done with it (written
    /// where it must survive a crash): with a persistent session, a message the process
    /// received but had not finished with when it died is delivered again. An [`Ack`] kept
    /// holds the broker's flow window for the session: keep it only as long as needed.
    ByConsumer,
}

/// What the handles hold; dropping the last one ends the connection abruptly.
struct Inner {
    client: rumqttc::AsyncClient,
    shared: Arc<BusState>,
    control: mpsc::UnboundedSender<Command>,
    state: watch::Receiver<ConnectionState>,
    shutdown: watch::Sender<bool>,
    /// Set by [`Bus::abort`] before the driver is stopped: from then on nothing more is
    /// queued, even while the driver's current poll (on another worker) still runs.
    aborted: AtomicBool,
    tasks: Mutex<Option<(JoinHandle<()>, JoinHandle<()>)>>,
    default_qos: QoS,
    clean_session: bool,
    max_packet_size: usize,
    subscription_capacity: usize,
    request_timeout: Duration,
    /// The nodes of a broker cluster the bus may connect to ([`BusConfig::failover`] and
    /// the first), as they may be shown (no user info).
    nodes: Vec<String>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let tasks = self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((event_loop, control)) = tasks {
            // Dropping the event loop closes the socket without DISCONNECT: the broker
            // publishes the last will.
            event_loop.abort();
            control.abort();
        }
        self.shared.close();
    }
}

/// A connection to the broker; cheap to clone (all clones share the connection).
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("state", &*self.inner.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Bus {
    /// Connects to the broker and waits for the first CONNACK, at most
    /// [`BusConfig::connect_timeout`]. A broker that refuses or cannot be reached fails with
    /// [`BusError::Connect`]; one that does not answer in time with
    /// [`BusError::ConnectTimeout`]. After the first connection, the bus reconnects by itself.
    ///
    /// Must be called within a Tokio runtime.
    pub async fn connect(config: BusConfig) -> Result<Bus, BusError> {
        Bus::connect_subscribed(config, &[])
            .await
            .map(|(bus, _)| bus)
    }

    /// [`Bus::connect`] with subscriptions made before the connection: every message that
    /// arrives from the first CONNACK on reaches them. A persistent session
    /// ([`BusConfig::clean_session`] off) that the broker kept delivers its queued messages
    /// right after the CONNACK; subscriptions made after [`Bus::connect`] would miss them.
    /// Without a session at the broker, the filters are subscribed as after any reconnect.
    pub async fn connect_subscribed(
        config: BusConfig,
        filters: &[(&str, QoS, AckMode)],
    ) -> Result<(Bus, Vec<Subscription>), BusError> {
        for (filter, _, _) in filters {
            check_filter(filter)?;
        }
        let nodes = config.nodes()?;
        let url = nodes
            .iter()
            .map(|(url, _)| url.as_str())
            .collect::<Vec<_>>()
            .join(",");
        // The client's requests go to a queue the driver reads itself, so that it writes
        // every request waiting there with one system call (rumqttc flushes each on its own:
        // rumqttc #810); rumqttc's own queue stays empty.
        let (requests_tx, requests) = flume::bounded(config.request_channel_capacity);
        let client = rumqttc::AsyncClient::from_senders(requests_tx);
        let mut eventloop = rumqttc::EventLoop::new(nodes[0].1.clone(), 1);
        let mut net = rumqttc::NetworkOptions::new();
        net.set_tcp_nodelay(true);
        let secs = config.connect_timeout.as_secs_f64().ceil().max(1.0) as u64;
        net.set_connection_timeout(secs);
        eventloop.set_network_options(net);

        let shared = Arc::new(BusState::default());
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let mut subscriptions = Vec::with_capacity(filters.len());
        let _ = shared
            .acker
            .set((client.clone(), tokio::runtime::Handle::current()));
        for (filter, qos, acks) in filters {
            let (tx, rx) = mpsc::channel(config.subscription_capacity);
            let id = shared
                .add_route(filter, *qos, *acks == AckMode::ByConsumer, tx)
                .ok_or(BusError::Closed)?;
            subscriptions.push(Subscription {
                id,
                filter: (*filter).to_owned(),
                rx,
                shared: shared.clone(),
                control: control_tx.clone(),
            });
        }
        let (state_tx, state_rx) = watch::channel(ConnectionState::Connecting);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = oneshot::channel();
        let driver = Driver {
            eventloop,
            next_request: requests.clone().into_stream(),
            requests,
            shared: shared.clone(),
            control: control_tx.clone(),
            state: state_tx.clone(),
            shutdown: shutdown_rx,
            backoff: config.backoff,
            url: nodes[0].0.clone(),
            nodes,
            node: 0,
            acks: Vec::new(),
            max_packet_size: config.max_packet_size,
            resend_guard: ResendGuard::default(),
            keep_alive: KeepAlive::stopped(),
            one_worker: tokio::runtime::Handle::current().metrics().num_workers() == 1,
        };
        let event_loop = tokio::spawn(driver.run(ready_tx));
        let control = tokio::spawn(driver::control(
            client.clone(),
            shared.clone(),
            control_rx,
            state_tx,
        ));
        let bus = Bus {
            inner: Arc::new(Inner {
                client,
                shared,
                control: control_tx,
                state: state_rx,
                shutdown: shutdown_tx,
                aborted: AtomicBool::new(false),
                tasks: Mutex::new(Some((event_loop, control))),
                default_qos: config.default_qos,
                clean_session: config.clean_session,
                max_packet_size: config.max_packet_size,
                subscription_capacity: config.subscription_capacity,
                request_timeout: config.request_timeout,
                nodes: url.split(',').map(str::to_owned).collect(),
            }),
        };
        // Each node may take the connect timeout before the next is tried.
        let nodes = u32::try_from(config.failover.len() + 1).unwrap_or(u32::MAX);
        let connect_timeout = config.connect_timeout.saturating_mul(nodes);
        match tokio::time::timeout(connect_timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => Ok((bus, subscriptions)),
            Ok(Ok(Err(source))) => Err(BusError::Connect {
                url,
                source: Box::new(source),
            }),
            Ok(Err(_)) => Err(BusError::Closed),
            Err(_) => Err(BusError::ConnectTimeout {
                url,
                after: connect_timeout,
            }),
        }
        // On error `bus` is dropped here, which stops both tasks.
    }

    /// Publishes `payload` to `topic` with the given QoS and retain flag.
    ///
    /// Resolves once rumqttc has queued the message (see the module documentation). An empty
    /// retained payload clears the retained message of the topic.
    pub async fn publish(
        &self,
        topic: &str,
        payload: impl Into<Bytes>,
        qos: QoS,
        retain: bool,
    ) -> Result<(), BusError> {
        check_topic(topic)?;
        if self.inner.aborted.load(Ordering::Acquire) {
            return Err(BusError::Closed);
        }
        let payload = payload.into();
        let size = packet_size(topic.len(), payload.len(), qos);
        if size > self.inner.max_packet_size {
            return Err(BusError::PayloadTooLarge {
                size,
                max: self.inner.max_packet_size,
            });
        }
        let after = self.inner.request_timeout;
        // Counted as queued until rumqttc has it; a failure or a caller that gives up (drops
        // this future) takes it back.
        let counted = QueuedPublish::new(&self.inner.shared);
        let queued = self.inner.client.publish_bytes(topic, qos, retain, payload);
        match tokio::time::timeout(after, queued).await {
            Ok(Ok(())) => {
                counted.handed_over();
                Ok(())
            }
            Ok(Err(_)) => Err(BusError::Closed),
            Err(_) => Err(BusError::Timeout {
                what: "queueing a publish",
                after,
            }),
        }
    }

    /// The QoS to subscribe with to messages addressed to this client alone (replies to its
    /// requests): QoS 0 on a clean session, QoS 1 on a persistent one.
    ///
    /// Publishers still publish with QoS 1, so the broker has acknowledged each message. On the
    /// way to a clean-session subscriber QoS 1 would cost a PUBACK per message and buy
    /// nothing: the broker discards an unacknowledged message with the session when the
    /// connection drops. A persistent session keeps them while the client reconnects, so
    /// there QoS 1 is worth its acknowledgements.
    pub fn inbox_qos(&self) -> QoS {
        if self.inner.clean_session {
            QoS::AtMostOnce
        } else {
            QoS::AtLeastOnce
        }
    }

    /// Publishes with the default QoS ([`BusConfig::default_qos`], QoS 1), not retained.
    pub async fn send(&self, topic: &str, payload: impl Into<Bytes>) -> Result<(), BusError> {
        self.publish(topic, payload, self.inner.default_qos, false)
            .await
    }

    /// Subscribes to `filter` (which may be `$share/<group>/...`) and waits for the broker's
    /// SUBACK, at most [`BusConfig::request_timeout`] (while the broker is unreachable, the
    /// subscription is answered by the re-subscription after the reconnect).
    pub async fn subscribe(&self, filter: &str, qos: QoS) -> Result<Subscription, BusError> {
        self.subscribe_with(filter, qos, AckMode::OnReceipt).await
    }

    /// [`Bus::subscribe`], saying who acknowledges the messages ([`AckMode`]).
    pub async fn subscribe_with(
        &self,
        filter: &str,
        qos: QoS,
        acks: AckMode,
    ) -> Result<Subscription, BusError> {
        check_filter(filter)?;
        let (tx, rx) = mpsc::channel(self.inner.subscription_capacity);
        let id = self
            .inner
            .shared
            .add_route(filter, qos, acks == AckMode::ByConsumer, tx)
            .ok_or(BusError::Closed)?;
        // Made now so that any failure below unsubscribes as it is dropped.
        let subscription = Subscription {
            id,
            filter: filter.to_owned(),
            rx,
            shared: self.inner.shared.clone(),
            control: self.inner.control.clone(),
        };
        let (ack, acked) = oneshot::channel();
        self.inner
            .control
            .send(Command::Subscribe {
                filter: filter.to_owned(),
                qos,
                ack,
            })
            .map_err(|_| BusError::Closed)?;
        let after = self.inner.request_timeout;
        match tokio::time::timeout(after, acked).await {
            Ok(Ok(Ok(()))) => Ok(subscription),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(BusError::Closed),
            Err(_) => Err(BusError::Timeout {
                what: "waiting for SUBACK",
                after,
            }),
        }
    }

    /// Ends a subscription (the same as dropping it): the broker is told to unsubscribe when
    /// no other subscription of this bus has the same filter.
    pub fn unsubscribe(&self, subscription: Subscription) {
        drop(subscription);
    }

    /// The connection state, as a watch: `borrow()` for now, `changed()` / `wait_for()` to
    /// follow it.
    pub fn state(&self) -> watch::Receiver<ConnectionState> {
        self.inner.state.clone()
    }

    /// Whether the bus is connected right now.
    pub fn is_connected(&self) -> bool {
        *self.inner.state.borrow() == ConnectionState::Connected
    }

    /// How many times the bus reconnected to a broker that had no session for it (a
    /// persistent session the broker lost: it restarted without persistence, or expired
    /// it), counted before the bus says [`ConnectionState::Connected`] again: what the
    /// broker kept for the session meanwhile (replies addressed to it) is gone. On a clean
    /// session every reconnection counts (the broker keeps nothing for it).
    pub fn sessions_lost(&self) -> u64 {
        self.inner.shared.sessions_lost.load(Ordering::Relaxed)
    }

    /// Whether the broker had kept a session for this client when the bus last connected
    /// (MQTT's `session_present`): always false on a clean session, and on the first
    /// connection of a persistent one the broker did not know (or lost: a cluster keeps a
    /// session on its node only). Set before the bus says [`ConnectionState::Connected`].
    pub fn session_present(&self) -> bool {
        self.inner.shared.session_present.load(Ordering::Relaxed)
    }

    /// How many nodes of a broker cluster the bus may connect to (1: one broker).
    pub fn broker_nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    /// The broker node the bus is connected to, or tries now, as its URL without user
    /// info (`mqtt://host:port`): what [`BusConfig::starting_at`] takes.
    pub fn node(&self) -> &str {
        let node = self.inner.shared.node.load(Ordering::Relaxed);
        self.inner.nodes.get(node).map_or("", String::as_str)
    }

    /// [`Bus::sessions_lost`] for a watcher that must not keep the bus open.
    pub(crate) fn sessions_lost_reader(&self) -> impl Fn() -> u64 + Send + 'static {
        let shared = self.inner.shared.clone();
        move || shared.sessions_lost.load(Ordering::Relaxed)
    }

    /// The largest packet this bus publishes or takes in ([`BusConfig::max_packet_size`]).
    pub fn max_packet_size(&self) -> usize {
        self.inner.max_packet_size
    }

    /// The messages this bus drops from now on (see [`BusStats`]): a publish given up, so
    /// that whoever waits for an answer to it can stop waiting; an incoming message too large
    /// to take, so that a receiver can still answer its sender. The latest one waits for a
    /// listener that lags; older ones are then missed.
    pub fn dropped(&self) -> tokio::sync::broadcast::Receiver<Dropped> {
        self.inner.shared.dropped.subscribe()
    }

    /// What the bus has discarded so far (see [`BusStats`]).
    pub fn stats(&self) -> BusStats {
        self.inner.shared.stats()
    }

    /// Drops the connection at once, with no MQTT DISCONNECT: the broker sees what it sees
    /// when a process crashes, and publishes the last will. Every clone of this bus is closed.
    pub fn abort(&self) {
        self.inner.aborted.store(true, Ordering::Release);
        let tasks = self.inner.tasks.locked().take();
        if let Some((event_loop, control)) = tasks {
            event_loop.abort();
            control.abort();
        }
        let _ = self.inner.shutdown.send(true);
    }

    /// Disconnects cleanly: queued requests are sent first, then an MQTT DISCONNECT, so the
    /// broker does **not** publish the last will (publish your own "offline" before). Waits
    /// at most [`BusConfig::request_timeout`], then closes the socket anyway. Every clone of
    /// this bus is closed; their operations fail with [`BusError::Closed`].
    pub async fn disconnect(&self) -> Result<(), BusError> {
        let tasks = self.inner.tasks.locked().take();
        let Some((mut event_loop, control)) = tasks else {
            return Ok(());
        };
        let after = self.inner.request_timeout;
        let _ = self.inner.shutdown.send(true);
        let client = self.inner.client.clone();
        let clean = async {
            // Queue the DISCONNECT and wait for the event loop to end, whichever way: it also
            // ends at once, through `shutdown`, while it is not connected.
            let send = async move {
                let _ = client.disconnect().await;
                std::future::pending::<()>().await
            };
            tokio::select! {
                _ = &mut event_loop => {}
                _ = send => {}
            }
        };
        let result = tokio::time::timeout(after, clean).await;
        event_loop.abort();
        control.abort();
        self.inner.shared.close();
        result.map_err(|_| BusError::Timeout {
            what: "disconnecting",
            after,
        })
    }
}

/// What a bus has discarded rather than let it take the connection down; each is also logged
/// at warn level as it happens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusStats {
    /// Incoming messages larger than [`BusConfig::max_packet_size`], read and dropped.
    pub oversized_dropped: u64,
    /// Publishes given up after the connection dropped before the broker acknowledged them,
    /// [`RESEND_LIMIT`] connections in a row (a broker that closes the connection
    /// on a message, for example one over its packet size limit, instead of looping).
    pub publishes_given_up: u64,
}

/// The size of the MQTT 3.1.1 PUBLISH packet for a topic and payload of these lengths: fixed
/// header (type byte and remaining length), topic (length-prefixed), packet id (QoS 1 and 2),
/// payload. What rumqttc compares with its limit and brokers with theirs.
pub fn packet_size(topic_len: usize, payload_len: usize, qos: QoS) -> usize {
    let packet_id = if qos == QoS::AtMostOnce { 0 } else { 2 };
    let remaining = 2 + topic_len + packet_id + payload_len;
    let length_bytes = match remaining {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    1 + length_bytes + remaining
}

/// Checks a topic name for publishing.
fn check_topic(topic: &str) -> Result<(), BusError> {
    let bad = |reason| {
        Err(BusError::InvalidTopic {
            topic: topic.to_owned(),
            reason,
        })
    };
    if topic.is_empty() {
        return bad("empty");
    }
    if topic.len() > usize::from(u16::MAX) {
        return bad("longer than 65535 bytes");
    }
    // One vectorised pass over the bytes (on every publish); the three are ASCII, so a byte
    // match is a character match.
    match memchr::memchr3(b'+', b'#', b'\0', topic.as_bytes()).map(|i| topic.as_bytes()[i]) {
        Some(b'\0') => bad("contains NUL"),
        Some(_) => bad("wildcards are not allowed in a topic name"),
        None => Ok(()),
    }
}

/// Checks a topic filter for subscribing.
fn check_filter(filter: &str) -> Result<(), BusError> {
    let bad = |reason| {
        Err(BusError::InvalidFilter {
            filter: filter.to_owned(),
            reason,
        })
    };
    if filter.len() > usize::from(u16::MAX) {
        return bad("longer than 65535 bytes");
    }
    if filter.contains('\0') {
        return bad("contains NUL");
    }
    let body = if let Some(rest) = filter.strip_prefix("$share/") {
        let Some((group, body)) = rest.split_once('/') else {
            return bad("a shared subscription needs $share/<group>/<filter>");
        };
        if group.is_empty() || group.contains(['+', '#']) {
            return bad("invalid share group name");
        }
        body
    } else {
        filter
    };
    if body.is_empty() {
        return bad("empty");
    }
    let levels: Vec<&str> = body.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        if level.contains('#') && (*level != "#" || i + 1 != levels.len()) {
            return bad("'#' must be the whole last level");
        }
        if level.contains('+') && *level != "+" {
            return bad("'+' must be a whole level");
        }
    }
    Ok(())
}

/// The messages of one subscription, in order; an async stream.
///
/// Dropping it stops the routing at once, and unsubscribes at the broker when no other
/// subscription of the bus has the same filter. `recv` returns `None` once the bus is
/// closed.
pub struct Subscription {
    id: u64,
    filter: String,
    rx: mpsc::Receiver<BusMessage>,
    shared: Arc<BusState>,
    control: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// The next message; `None` when the bus is closed.
    pub async fn recv(&mut self) -> Option<BusMessage> {
        self.rx.recv().await
    }

    /// The next message if one is already buffered.
    pub fn try_recv(&mut self) -> Option<BusMessage> {
        self.rx.try_recv().ok()
    }

    /// The filter this subscription was made with.
    pub fn filter(&self) -> &str {
        &self.filter
    }
}

impl futures_core::Stream for Subscription {
    type Item = BusMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BusMessage>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.shared.remove_route(self.id, &self.filter) {
            let _ = self.control.send(Command::Unsubscribe {
                filter: std::mem::take(&mut self.filter),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_filters_are_checked() {
        assert!(check_topic("a/b").is_ok());
        for bad in ["", "a/+", "a/#", "a\0"] {
            assert!(
                matches!(check_topic(bad), Err(BusError::InvalidTopic { .. })),
                "{bad:?}"
            );
        }
        for good in ["a/+/c", "#", "a/#", "$share/g/a/+", "$SYS/#"] {
            assert!(check_filter(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "a/#/c",
            "a+",
            "a/b#",
            "$share/g",
            "$share//a",
            "$share/g+/a",
            "$share/g/",
        ] {
            assert!(
                matches!(check_filter(bad), Err(BusError::InvalidFilter { .. })),
                "{bad:?}"
            );
        }
    }
}
