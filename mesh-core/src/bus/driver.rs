//! The two background tasks of a [`Bus`](super::Bus) and the state they share.
//!
//! - The *event-loop task* is the only one that polls the rumqttc [`EventLoop`] (through
//!   [`next_event`] once connected, which reads without rumqttc's request queue). It routes
//!   incoming publishes to subscriptions, matches SUBACKs to waiting subscribers, reports the
//!   connection state, and reconnects with backoff. It never awaits a client request
//!   (publish, subscribe): that deadlocks once the request queue is full (rumqttc #1025).
//!   It also acknowledges incoming QoS 1 and QoS 2 publishes (rumqttc's manual acks), after
//!   they are handed over rather than before (see [`Driver::acknowledge`]).
//! - The *control task* issues every SUBSCRIBE and UNSUBSCRIBE, in order, including the
//!   re-subscription of every live filter after a reconnect (rumqttc does not re-subscribe:
//!   #250). Because it is the only task that sends SUBSCRIBEs, the order of its pending
//!   entries is the order in which rumqttc assigns packet ids, which lets the event-loop task
//!   match each SUBACK to its subscribers.
//! - [`ResendGuard`] (pure state, no I/O) decides which publish to give up when the broker
//!   keeps closing the connection before acknowledging it.

use crate::sync::MutexExt;
use futures_core::Stream;
use futures_util::FutureExt;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, Outgoing, Packet, PubAck, PubRec, QoS, Request,
    SubscribeFilter, SubscribeReasonCode,
};
use tokio::sync::{mpsc, oneshot, watch};

use super::config::Backoff;
use super::reader::{KeepAlive, flush, next_event};
use super::{BusError, BusMessage, BusStats, ConnectionState, packet_size};
use crate::topic::{rest_matches, split_literal};

/// A subscriber waiting for the SUBACK of its filter.
pub(crate) struct Waiter {
    filter: String,
    tx: oneshot::Sender<Result<(), BusError>>,
}

/// One SUBSCRIBE packet: its filters in order, and who waits for its SUBACK.
struct PendingSub {
    filters: Vec<String>,
    waiters: Vec<Waiter>,
    /// The re-subscription after a reconnect: its SUBACK makes the bus `Connected`.
    resubscribe: bool,
}

/// A local subscription: where the messages matching `filter` go.
struct Route {
    id: u64,
    filter: String,
    /// The filter's literal prefix, compared first, and the rest of it, matched against the
    /// rest of a topic that starts with the prefix ([`split_literal`]).
    literal: String,
    rest: String,
    qos: QoS,
    /// The consumer acknowledges each message ([`Ack`]); otherwise the bus does, once it is
    /// handed over.
    by_consumer: bool,
    tx: mpsc::Sender<BusMessage>,
}

#[derive(Default)]
struct Router {
    routes: Vec<Route>,
    /// SUBSCRIBEs queued to rumqttc, not yet written (oldest first).
    queued: VecDeque<PendingSub>,
    /// SUBSCRIBEs written, by packet id, waiting for their SUBACK.
    sent: HashMap<u16, PendingSub>,
    /// Subscribers whose SUBSCRIBE was written on a connection that then dropped: the
    /// re-subscription after the next CONNACK answers them.
    held: Vec<Waiter>,
    closed: bool,
}

/// The state shared by the bus handle, the subscriptions and the two tasks.
pub(crate) struct BusState {
    router: Mutex<Router>,
    next_id: AtomicU64,
    /// Publishes handed to rumqttc and not yet written: while there is one, the next write
    /// flushes the acknowledgements waiting in the write buffer too.
    queued_publishes: AtomicUsize,
    /// [`BusStats::oversized_dropped`].
    oversized_dropped: AtomicU64,
    /// [`BusStats::publishes_given_up`].
    publishes_given_up: AtomicU64,
    /// Tells who listens what the bus dropped (see [`Bus::dropped`](super::Bus::dropped)).
    pub(crate) dropped: tokio::sync::broadcast::Sender<Dropped>,
    /// Counts the connections: an [`Ack`] made on one is not sent on another (the broker
    /// sends what was not acknowledged again, under other packet ids).
    pub(crate) connection: AtomicU64,
    /// Counts the reconnections on which the broker had no session for this client (see
    /// [`Bus::sessions_lost`](super::Bus::sessions_lost)).
    pub(crate) sessions_lost: AtomicU64,
    /// Whether the broker had a session for this client at the latest CONNACK (see
    /// [`Bus::session_present`](super::Bus::session_present)).
    pub(crate) session_present: AtomicBool,
    /// Which node of the broker's cluster the bus is connected to (or tries) now.
    pub(crate) node: AtomicUsize,
    /// Sends the acknowledgements the consumers give ([`Ack`]).
    pub(crate) acker: std::sync::OnceLock<(AsyncClient, tokio::runtime::Handle)>,
}

/// The acknowledgement of one message received on a subscription whose consumer
/// acknowledges ([`AckMode::ByConsumer`](super::AckMode::ByConsumer)): sent to the broker
/// when the last clone is dropped. Until then the broker holds the message for the session:
/// a process that dies before gets it again on its session (or whoever opens that session
/// next does). A clone held by several consumers acknowledges once all of them let it go.
#[derive(Clone)]
pub struct Ack(Arc<AckInner>);

struct AckInner {
    pkid: u16,
    qos: QoS,
    connection: u64,
    shared: std::sync::Weak<BusState>,
}

impl std::fmt::Debug for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ack").field("pkid", &self.0.pkid).finish()
    }
}

impl PartialEq for Ack {
    fn eq(&self, other: &Ack) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Ack {}

impl Drop for AckInner {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if shared.connection.load(Ordering::Relaxed) != self.connection {
            return;
        }
        let Some((client, runtime)) = shared.acker.get() else {
            return;
        };
        let mut publish = rumqttc::Publish::new("", self.qos, Vec::new());
        publish.pkid = self.pkid;
        if client.try_ack(&publish).is_err() {
            // The request queue is full: wait for room (on the bus's runtime: the last
            // holder may be any thread).
            let client = client.clone();
            runtime.spawn(async move {
                let _ = client.ack(&publish).await;
            });
        }
    }
}

/// A message the bus dropped rather than let it harm the connection: its topic, its payload,
/// and which way it went.
#[derive(Debug, Clone)]
pub struct Dropped {
    /// Why.
    pub reason: DropReason,
    /// The topic it was published to, or was to go to.
    pub topic: String,
    /// What it carried.
    pub payload: bytes::Bytes,
}

/// Why the bus dropped a message (see [`BusStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// An incoming message larger than the bus's `max_packet_size`.
    Oversized,
    /// A publish of this bus the broker kept closing the connection on.
    GivenUp,
}

impl Default for BusState {
    fn default() -> BusState {
        BusState {
            router: Mutex::default(),
            next_id: AtomicU64::default(),
            queued_publishes: AtomicUsize::default(),
            oversized_dropped: AtomicU64::default(),
            publishes_given_up: AtomicU64::default(),
            // Rare, and possibly large: one waits for a slow listener, which misses the older
            // ones when it lags (nothing is kept when nobody listens).
            dropped: tokio::sync::broadcast::channel(1).0,
            connection: AtomicU64::default(),
            sessions_lost: AtomicU64::default(),
            session_present: AtomicBool::default(),
            node: AtomicUsize::default(),
            acker: std::sync::OnceLock::new(),
        }
    }
}

/// What the control task is asked to do.
pub(crate) enum Command {
    Subscribe {
        filter: String,
        qos: QoS,
        ack: oneshot::Sender<Result<(), BusError>>,
    },
    Unsubscribe {
        filter: String,
    },
    Resubscribe,
}

/// One publish on its way to rumqttc, counted in [`BusState::queued_publishes`] until it is
/// written; taken back from the count when it never reaches rumqttc (dropped unless
/// [`QueuedPublish::handed_over`]).
pub(crate) struct QueuedPublish<'a>(Option<&'a BusState>);

impl<'a> QueuedPublish<'a> {
    pub(crate) fn new(shared: &'a BusState) -> QueuedPublish<'a> {
        shared.queued_publishes.fetch_add(1, Ordering::Relaxed);
        QueuedPublish(Some(shared))
    }

    /// rumqttc has it: the driver takes it from the count once it is written.
    pub(crate) fn handed_over(mut self) {
        self.0 = None;
    }
}

impl Drop for QueuedPublish<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.publish_gone();
        }
    }
}

impl BusState {
    /// A counted publish was written, or never reached rumqttc. Saturates: a publish rumqttc
    /// writes again after a reconnect is seen twice.
    fn publish_gone(&self) {
        let _ = self
            .queued_publishes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub(crate) fn stats(&self) -> BusStats {
        BusStats {
            oversized_dropped: self.oversized_dropped.load(Ordering::Relaxed),
            publishes_given_up: self.publishes_given_up.load(Ordering::Relaxed),
        }
    }

    fn publishes_queued(&self) -> bool {
        self.queued_publishes.load(Ordering::Relaxed) > 0
    }

    fn lock(&self) -> MutexGuard<'_, Router> {
        // A panic elsewhere never makes the bus panic.
        self.router.locked()
    }

    /// Adds a route; `None` if the bus is closed.
    pub(crate) fn add_route(
        &self,
        filter: &str,
        qos: QoS,
        by_consumer: bool,
        tx: mpsc::Sender<BusMessage>,
    ) -> Option<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (literal, rest) = split_literal(filter);
        let mut r = self.lock();
        if r.closed {
            return None;
        }
        r.routes.push(Route {
            id,
            filter: filter.to_owned(),
            literal: literal.to_owned(),
            rest: rest.to_owned(),
            qos,
            by_consumer,
            tx,
        });
        Some(id)
    }

    /// Removes a route; returns whether it was the last one of its filter.
    pub(crate) fn remove_route(&self, id: u64, filter: &str) -> bool {
        let mut r = self.lock();
        r.routes.retain(|route| route.id != id);
        !r.closed && !r.routes.iter().any(|route| route.filter == filter)
    }

    fn has_route(&self, filter: &str) -> bool {
        self.lock()
            .routes
            .iter()
            .any(|route| route.filter == filter)
    }

    /// Records a SUBSCRIBE about to be queued; `false` (and the waiter told) if closed.
    fn push_queued(&self, pending: PendingSub) -> bool {
        let mut r = self.lock();
        if r.closed {
            for w in pending.waiters {
                let _ = w.tx.send(Err(BusError::Closed));
            }
            return false;
        }
        r.queued.push_back(pending);
        true
    }

    /// The filters to re-subscribe after a reconnect, with the highest QoS asked for each;
    /// queues the entry that will answer the held subscribers.
    /// With nothing left to re-subscribe, the state is `Connected` at once.
    fn prepare_resubscribe(&self, state: &watch::Sender<ConnectionState>) -> Vec<SubscribeFilter> {
        let mut r = self.lock();
        let mut filters: Vec<(String, QoS)> = Vec::new();
        for route in &r.routes {
            match filters.iter_mut().find(|(f, _)| *f == route.filter) {
                Some((_, q)) => *q = max_qos(*q, route.qos),
                None => filters.push((route.filter.clone(), route.qos)),
            }
        }
        let held = std::mem::take(&mut r.held);
        if filters.is_empty() {
            for w in held {
                // Nothing is live any more: whoever waited has gone.
                let _ = w.tx.send(Err(BusError::Closed));
            }
            state.send_if_modified(|s| {
                let connecting = *s == ConnectionState::Connecting;
                if connecting {
                    *s = ConnectionState::Connected;
                }
                connecting
            });
            return Vec::new();
        }
        r.queued.push_back(PendingSub {
            filters: filters.iter().map(|(f, _)| f.clone()).collect(),
            waiters: held,
            resubscribe: true,
        });
        filters
            .into_iter()
            .map(|(f, q)| SubscribeFilter::new(f, q))
            .collect()
    }

    fn sub_written(&self, pkid: u16) {
        let mut r = self.lock();
        if let Some(p) = r.queued.pop_front() {
            r.sent.insert(pkid, p);
        }
    }

    /// Answers the subscribers of a SUBACK; returns whether it answered a re-subscription.
    fn sub_acked(&self, pkid: u16, codes: &[SubscribeReasonCode]) -> bool {
        let Some(p) = self.lock().sent.remove(&pkid) else {
            return false;
        };
        for w in p.waiters {
            let ok = p
                .filters
                .iter()
                .position(|f| *f == w.filter)
                .and_then(|i| codes.get(i))
                .is_some_and(|c| matches!(c, SubscribeReasonCode::Success(_)));
            let result = if ok {
                Ok(())
            } else {
                tracing::warn!(filter = %w.filter, "broker refused subscription");
                Err(BusError::SubscribeRejected {
                    filter: w.filter.clone(),
                })
            };
            let _ = w.tx.send(result);
        }
        p.resubscribe
    }

    /// The connection dropped: SUBSCRIBEs written on it will not be answered.
    fn connection_lost(&self) {
        let mut r = self.lock();
        let sent: Vec<PendingSub> = r.sent.drain().map(|(_, p)| p).collect();
        for p in sent {
            r.held.extend(p.waiters);
        }
    }

    fn has_held(&self) -> bool {
        !self.lock().held.is_empty()
    }

    fn has_routes(&self) -> bool {
        !self.lock().routes.is_empty()
    }

    /// The bus is gone: every subscription ends, every waiter fails.
    pub(crate) fn close(&self) {
        let mut r = self.lock();
        r.closed = true;
        r.routes.clear();
        let mut waiters: Vec<Waiter> = std::mem::take(&mut r.held);
        let r = &mut *r;
        for p in r.queued.drain(..).chain(r.sent.drain().map(|(_, p)| p)) {
            waiters.extend(p.waiters);
        }
        for w in waiters {
            let _ = w.tx.send(Err(BusError::Closed));
        }
    }

    /// The senders of every route whose filter matches `topic`: the first, and the others
    /// (usually none: no allocation).
    /// The subscriptions a message on `topic` goes to (the first apart), and whether any of
    /// them acknowledges it itself.
    fn targets(
        &self,
        topic: &str,
    ) -> (
        Option<mpsc::Sender<BusMessage>>,
        Vec<mpsc::Sender<BusMessage>>,
        bool,
    ) {
        let router = self.lock();
        let mut by_consumer = false;
        let mut matching = router
            .routes
            .iter()
            .filter(|r| {
                topic.starts_with(r.literal.as_str())
                    && rest_matches(&r.rest, &topic[r.literal.len()..])
            })
            .inspect(|r| by_consumer |= r.by_consumer)
            .map(|r| r.tx.clone());
        let first = matching.next();
        let others = matching.collect();
        (first, others, by_consumer)
    }
}

fn max_qos(a: QoS, b: QoS) -> QoS {
    let rank = |q| match q {
        QoS::AtMostOnce => 0,
        QoS::AtLeastOnce => 1,
        QoS::ExactlyOnce => 2,
    };
    if rank(a) >= rank(b) { a } else { b }
}

/// The control task: every SUBSCRIBE and UNSUBSCRIBE, in order.
pub(crate) async fn control(
    client: AsyncClient,
    shared: Arc<BusState>,
    mut rx: mpsc::UnboundedReceiver<Command>,
    state: watch::Sender<ConnectionState>,
) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Subscribe { filter, qos, ack } => {
                let pending = PendingSub {
                    filters: vec![filter.clone()],
                    waiters: vec![Waiter {
                        filter: filter.clone(),
                        tx: ack,
                    }],
                    resubscribe: false,
                };
                if shared.push_queued(pending) && client.subscribe(filter, qos).await.is_err() {
                    // The event loop is gone; it closes the shared state as it ends.
                    shared.close();
                }
            }
            Command::Unsubscribe { filter } => {
                // A new subscription to the same filter may have come since.
                if !shared.has_route(&filter) {
                    tracing::debug!(%filter, "unsubscribing");
                    let _ = client.unsubscribe(filter).await;
                }
            }
            Command::Resubscribe => {
                let filters = shared.prepare_resubscribe(&state);
                if !filters.is_empty() {
                    tracing::debug!(count = filters.len(), "re-subscribing after reconnect");
                    if client.subscribe_many(filters).await.is_err() {
                        shared.close();
                    }
                }
            }
        }
    }
}

/// How many of the client's requests (publishes, acknowledgements, subscribes) the driver
/// writes at most before it flushes them to the socket together.
pub const WRITE_BATCH: usize = 64;

/// The event-loop task (see the module documentation).
pub(crate) struct Driver {
    pub(crate) eventloop: EventLoop,
    /// The client's requests, in order; rumqttc's own queue stays empty.
    pub(crate) requests: flume::Receiver<Request>,
    /// The driver's wait for the next request (a stream of `requests`): it keeps its place in
    /// the queue's waiters while the network wins the driver's `select!`, instead of a
    /// waiter allocated, queued and removed again on every turn of the loop.
    pub(crate) next_request: flume::r#async::RecvStream<'static, Request>,
    pub(crate) shared: Arc<BusState>,
    pub(crate) control: mpsc::UnboundedSender<Command>,
    pub(crate) state: watch::Sender<ConnectionState>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) backoff: Backoff,
    /// The node connected to (or tried) now, as it may be shown.
    pub(crate) url: String,
    /// Every node of the broker's cluster, as it may be shown and with its options
    /// ([`BusConfig::failover`](super::BusConfig::failover)).
    pub(crate) nodes: Vec<(String, rumqttc::MqttOptions)>,
    /// Which of `nodes` is connected to (or tried) now.
    pub(crate) node: usize,
    /// The acknowledgements (PUBACK, PUBREC) of incoming publishes routed and not yet
    /// acknowledged.
    pub(crate) acks: Vec<Packet>,
    /// The runtime has one worker thread (see [`Driver::acknowledge`]).
    pub(crate) one_worker: bool,
    /// [`BusConfig::max_packet_size`](super::BusConfig::max_packet_size): larger incoming
    /// messages are dropped.
    pub(crate) max_packet_size: usize,
    /// Which publish to give up when the broker keeps closing the connection on it.
    pub(crate) resend_guard: ResendGuard,
    /// When the connection's next ping is due ([`next_event`]).
    pub(crate) keep_alive: KeepAlive,
}

/// How many connections in a row may drop before the broker acknowledged the same publish
/// before that publish is given up.
pub const RESEND_LIMIT: u32 = 3;

/// Identifies one publish across reconnects: its payload's buffer (rumqttc keeps the same
/// `Bytes`) and its packet id (kept too).
type PublishKey = (usize, usize, u16);

/// Counts, for every publish waiting to be sent again after a reconnect, how many
/// connections in a row dropped with it unacknowledged; gives up the oldest one that reached
/// [`RESEND_LIMIT`]. Pure state: the driver calls it with the requests rumqttc handed back.
#[derive(Debug, Default)]
pub(crate) struct ResendGuard {
    strikes: HashMap<PublishKey, u32>,
}

impl ResendGuard {
    /// The connection dropped after its CONNACK with `stash` (oldest first) not yet
    /// acknowledged: counts a strike for each publish in it, and takes out and returns the
    /// oldest one that reached the limit. The others then start counting again, so that a
    /// publish queued behind a poisonous one is not given up with it.
    pub(crate) fn connection_lost(&mut self, stash: &mut VecDeque<Request>) -> Option<Request> {
        let mut strikes = HashMap::with_capacity(stash.len());
        let mut given_up = None;
        for (index, request) in stash.iter().enumerate() {
            let Some(key) = publish_key(request) else {
                continue;
            };
            let count = self.strikes.get(&key).copied().unwrap_or(0) + 1;
            if count >= RESEND_LIMIT && given_up.is_none() {
                given_up = Some(index);
                continue;
            }
            strikes.insert(key, count);
        }
        self.strikes = strikes;
        let index = given_up?;
        self.strikes.clear();
        stash.remove(index)
    }
}

fn publish_key(request: &Request) -> Option<PublishKey> {
    match request {
        Request::Publish(p) if p.qos != QoS::AtMostOnce => {
            Some((p.payload.as_ptr() as usize, p.payload.len(), p.pkid))
        }
        _ => None,
    }
}

impl Driver {
    /// Runs until the bus is disconnected or dropped, or the first connection fails (told
    /// through `ready`).
    pub(crate) async fn run(mut self, ready: oneshot::Sender<Result<(), ConnectionError>>) {
        let mut ready = Some(ready);
        let mut connected = false;
        let mut attempt = 0u32;
        // Requests rumqttc moved out of its queue when a connection dropped; given back after
        // the next CONNACK (rumqttc drops them on a clean session).
        let mut stash: VecDeque<Request> = VecDeque::new();
        let reason = loop {
            let polled = if connected && let Some(event) = self.eventloop.state.events.pop_front() {
                // The events of the last read (or write) are handled before the requests are
                // looked at again: on one worker no other task can have queued one meanwhile,
                // and on several it waits for at most a read's few packets to be routed.
                Ok(event)
            } else if connected {
                tokio::select! {
                    // The requests first: a batch empties the queue, so the network has its
                    // turn next, and a poll is not started only to be dropped.
                    biased;
                    request = std::future::poll_fn(|cx| std::pin::Pin::new(&mut self.next_request).poll_next(cx)),
                        if may_write(&self.eventloop) => match request {
                        Some(first) => match write_requests(&mut self.eventloop, &self.requests, &mut self.acks, first).await {
                            Ok(()) => continue,
                            Err(e) => {
                                // As rumqttc does after a failed poll: what was in flight is
                                // sent again after the reconnect.
                                self.eventloop.clean();
                                Err(e)
                            }
                        },
                        None => break "every handle of the bus dropped".to_owned(),
                    },
                    polled = next_event(&mut self.eventloop, &mut self.keep_alive) => polled,
                }
            } else {
                let mut shutdown = self.shutdown.clone();
                tokio::select! {
                    biased;
                    _ = shutdown.wait_for(|s| *s) => break "disconnected by the client".to_owned(),
                    polled = self.eventloop.poll() => polled,
                }
            };
            match polled {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    connected = true;
                    self.keep_alive = KeepAlive::start(&self.eventloop);
                    // Acknowledgements made on the last connection are not sent on this one.
                    let earlier = self.shared.connection.fetch_add(1, Ordering::Relaxed);
                    self.shared
                        .session_present
                        .store(ack.session_present, Ordering::Relaxed);
                    if earlier > 0 && !ack.session_present {
                        // Counted before `Connected` is said (below, or once re-subscribed).
                        self.shared.sessions_lost.fetch_add(1, Ordering::Relaxed);
                    }
                    // A publish rumqttc dropped with the last connection would keep the count
                    // up for good (acknowledgements then wait for the next write or read);
                    // counting too few only flushes them sooner.
                    self.shared.queued_publishes.store(0, Ordering::Relaxed);
                    attempt = 0;
                    if !stash.is_empty() {
                        stash.extend(self.eventloop.pending.drain(..));
                        self.eventloop.pending = std::mem::take(&mut stash);
                    }
                    let resubscribe = (!ack.session_present && self.shared.has_routes())
                        || self.shared.has_held();
                    tracing::info!(url = %self.url, session_present = ack.session_present, resubscribe, "bus connected");
                    if resubscribe {
                        // `Connected` once the re-subscription is acknowledged.
                        let _ = self.control.send(Command::Resubscribe);
                    } else {
                        self.state.send_replace(ConnectionState::Connected);
                    }
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(Ok(()));
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    // rumqttc noted a QoS 2 publish in its state as it read it, and answers
                    // the PUBREL itself: the PUBREC is all that is left to write.
                    let ack = match p.qos {
                        QoS::AtMostOnce => None,
                        QoS::AtLeastOnce => Some(Packet::PubAck(PubAck::new(p.pkid))),
                        QoS::ExactlyOnce => Some(Packet::PubRec(PubRec::new(p.pkid))),
                    };
                    let size = packet_size(p.topic.len(), p.payload.len(), p.qos);
                    if size > self.max_packet_size {
                        self.acks.extend(ack);
                        // Acknowledged all the same: the broker must not send it again.
                        self.shared
                            .oversized_dropped
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(topic = %p.topic, size, max = self.max_packet_size, retain = p.retain,
                            "dropped an incoming message larger than the bus's max_packet_size");
                        let _ = self.shared.dropped.send(Dropped {
                            reason: DropReason::Oversized,
                            topic: p.topic,
                            payload: p.payload,
                        });
                    } else if !route(&self.shared, p).await {
                        self.acks.extend(ack);
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(ack))) => {
                    if self.shared.sub_acked(ack.pkid, &ack.return_codes) {
                        tracing::info!(url = %self.url, "bus re-subscribed");
                        self.state.send_replace(ConnectionState::Connected);
                    }
                }
                Ok(Event::Outgoing(Outgoing::Subscribe(pkid))) => self.shared.sub_written(pkid),
                Ok(Event::Outgoing(Outgoing::Publish(_))) => self.shared.publish_gone(),
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    break "disconnected by the client".to_owned();
                }
                Ok(_) => {}
                Err(e) => {
                    if ready.is_some() && self.node + 1 < self.nodes.len() {
                        // The first connection: every node is tried once before it fails.
                        tracing::warn!(url = %self.url, error = %e, "cannot connect to this broker node: trying the next");
                        self.next_node();
                        continue;
                    }
                    if let Some(ready) = ready.take() {
                        let reason = e.to_string();
                        let _ = ready.send(Err(e));
                        break reason;
                    }
                    self.acks.clear();
                    stash.extend(self.eventloop.pending.drain(..));
                    keep_for_next_connection(&self.requests, &mut stash);
                    if connected {
                        self.give_up_poison(&mut stash);
                    }
                    connected = false;
                    self.keep_alive = KeepAlive::stopped();
                    self.shared.connection_lost();
                    let reason = e.to_string();
                    let delay = self.backoff.delay(attempt);
                    attempt = attempt.saturating_add(1);
                    tracing::warn!(url = %self.url, error = %reason, retry_in = ?delay, "bus disconnected");
                    // The next attempt goes to the next node of the cluster, if there is one.
                    self.next_node();
                    self.state
                        .send_replace(ConnectionState::Disconnected { reason });
                    let mut shutdown = self.shutdown.clone();
                    tokio::select! {
                        _ = shutdown.wait_for(|s| *s) => break "disconnected by the client".to_owned(),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    self.state.send_replace(ConnectionState::Connecting);
                }
            }
            // Once every packet of the last read is handed over.
            if !self.acks.is_empty() && self.eventloop.state.events.is_empty() {
                self.acknowledge().await;
            }
        };
        tracing::info!(url = %self.url, %reason, "bus closed");
        self.shared.close();
        self.state.send_replace(ConnectionState::Closed);
    }

    /// Points the event loop at the next node of the broker's cluster (round the list); a
    /// broker of one node stays where it is.
    fn next_node(&mut self) {
        if self.nodes.len() < 2 {
            return;
        }
        self.node = (self.node + 1) % self.nodes.len();
        self.shared.node.store(self.node, Ordering::Relaxed);
        let (url, options) = &self.nodes[self.node];
        self.url.clone_from(url);
        self.eventloop.mqtt_options = options.clone();
    }

    /// The connection dropped after its CONNACK: gives up the publish the broker keeps
    /// closing connections on, if there is one (see [`ResendGuard`]).
    fn give_up_poison(&mut self, stash: &mut VecDeque<Request>) {
        if let Some(Request::Publish(p)) = self.resend_guard.connection_lost(stash) {
            self.shared
                .publishes_given_up
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(topic = %p.topic, size = p.payload.len(), attempts = RESEND_LIMIT,
                "gave up a publish: the broker closed the connection before acknowledging it, every time");
            let _ = self.shared.dropped.send(Dropped {
                reason: DropReason::GivenUp,
                topic: p.topic,
                payload: p.payload,
            });
        }
    }

    /// Acknowledges the QoS 1 and 2 publishes of the last read, after they were handed over:
    /// the PUBACKs (PUBRECs) go into the write buffer and leave with the next publish when one is queued (a
    /// reply the consumer just made), at once otherwise. On a runtime with one worker, the
    /// consumers first get their turn, so that what they publish in answer is queued by then.
    ///
    /// rumqttc's own acknowledgements are written, one system call, before the publish is
    /// handed over: on the critical path of every request an agent serves.
    async fn acknowledge(&mut self) {
        // Only on one worker: on several, the yield wakes another one (a futex call each way)
        // and the consumers may run there anyway.
        if self.one_worker {
            for _ in 0..ANSWER_TURNS {
                if self.shared.publishes_queued() {
                    break;
                }
                after_the_queued_tasks().await;
            }
        }
        let flush = !self.shared.publishes_queued();
        let (acks, network) = (&mut self.acks, self.eventloop.network.as_mut());
        let Some(network) = network else {
            acks.clear();
            return;
        };
        let mut write = std::pin::pin!(async {
            for ack in acks.drain(..) {
                network.write(ack).await?;
            }
            if flush {
                network.flush().await?;
            }
            Ok::<(), rumqttc::StateError>(())
        });
        // A failure or a timeout means a broken or stuck connection, which the next poll
        // reports; the acknowledgements die with it (the drain drops what it did not write).
        // No timer is made when the socket takes them at once.
        if write.as_mut().now_or_never().is_none() {
            let timeout = Duration::from_secs(self.eventloop.network_options.connection_timeout());
            let _ = tokio::time::timeout(timeout, write).await;
        }
    }
}

/// How many turns of the run queue the event-loop task gives the consumers of a read to
/// queue an answer before it writes their acknowledgements alone: an agent's answer takes
/// four (its request loop, the request's task, the handler, the request's task again).
const ANSWER_TURNS: usize = 6;

/// Lets every task already woken on this worker run before the caller goes on: the caller
/// wakes itself and so goes to the back of the run queue. Unlike `tokio::task::yield_now`,
/// which defers the caller until the runtime has polled its I/O driver (an `epoll_wait` with
/// a zero timeout each time, on the path of every request an agent answers), nothing else
/// happens in between; the runtime still polls the driver every so many tasks.
async fn after_the_queued_tasks() {
    let mut woken = false;
    std::future::poll_fn(|cx| {
        if woken {
            return std::task::Poll::Ready(());
        }
        woken = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

/// Whether the client's requests may be written now: connected, nothing from the last
/// connection left to send again first, and room for another publish in flight (as rumqttc's
/// own loop decides).
fn may_write(eventloop: &EventLoop) -> bool {
    let state = &eventloop.state;
    eventloop.network.is_some()
        && eventloop.pending.is_empty()
        && state.collision.is_none()
        && state.inflight() < eventloop.mqtt_options.inflight()
}

/// Writes `first` and every request queued behind it in `requests` (up to [`WRITE_BATCH`],
/// while [`may_write`]), then the acknowledgements waiting in `acks`, and flushes them
/// together: one system call. The events rumqttc notes for them (`Outgoing::Publish`, ...)
/// come out of the next polls.
async fn write_requests(
    eventloop: &mut EventLoop,
    requests: &flume::Receiver<Request>,
    acks: &mut Vec<Packet>,
    first: Request,
) -> Result<(), ConnectionError> {
    let mut next = Some(first);
    let mut written = 0;
    while let Some(request) = next.take() {
        // rumqttc's state handles only what a client sends (it panics on the rest).
        if matches!(
            request,
            Request::Publish(_)
                | Request::PubAck(_)
                | Request::PubRec(_)
                | Request::PubRel(_)
                | Request::Subscribe(_)
                | Request::Unsubscribe(_)
                | Request::Disconnect(_)
        ) && let Some(packet) = eventloop.state.handle_outgoing_packet(request)?
            && let Some(network) = eventloop.network.as_mut()
        {
            network.write(packet).await?;
        }
        written += 1;
        if written < WRITE_BATCH && may_write(eventloop) {
            next = requests.try_recv().ok();
        }
    }
    let Some(network) = eventloop.network.as_mut() else {
        return Ok(());
    };
    for ack in acks.drain(..) {
        network.write(ack).await?;
    }
    flush(eventloop).await
}

/// Moves the requests queued in `requests` behind what was in flight (in `stash`) at a
/// connection loss, so that they wait for the next connection, except the acknowledgements:
/// the packet ids they answer belong to the lost connection (the broker sends those publishes
/// again on the next one).
fn keep_for_next_connection(requests: &flume::Receiver<Request>, stash: &mut VecDeque<Request>) {
    stash.extend(
        requests
            .drain()
            .filter(|r| !matches!(r, Request::PubAck(_) | Request::PubRec(_))),
    );
}

/// Hands an incoming message to every subscription whose filter matches its topic; true
/// when a consumer acknowledges it (see [`Ack`]), false when the bus is to.
async fn route(shared: &Arc<BusState>, p: rumqttc::Publish) -> bool {
    let (first, others, by_consumer) = shared.targets(&p.topic);
    let by_consumer = by_consumer && p.qos != QoS::AtMostOnce && first.is_some();
    let ack = by_consumer.then(|| {
        Ack(Arc::new(AckInner {
            pkid: p.pkid,
            qos: p.qos,
            connection: shared.connection.load(Ordering::Relaxed),
            shared: Arc::downgrade(shared),
        }))
    });
    let msg = BusMessage {
        topic: p.topic,
        payload: p.payload,
        retain: p.retain,
        ack,
    };
    // Backpressure: wait for room in each subscription (see `Subscription`).
    if let Some(first) = first {
        for tx in &others {
            let _ = tx.send(msg.clone()).await;
        }
        let _ = first.send(msg).await;
    }
    by_consumer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(payload: &bytes::Bytes, pkid: u16) -> Request {
        let mut p = rumqttc::Publish::from_bytes("t", QoS::AtLeastOnce, payload.clone());
        p.pkid = pkid;
        Request::Publish(p)
    }

    #[test]
    fn the_guard_gives_up_the_oldest_publish_after_the_limit_and_spares_the_others() {
        let poison = bytes::Bytes::from(vec![0u8; 64]);
        let queued = bytes::Bytes::from(vec![1u8; 8]);
        let mut guard = ResendGuard::default();
        for round in 1..RESEND_LIMIT {
            let mut stash: VecDeque<Request> = [publish(&poison, 1), publish(&queued, 2)].into();
            assert!(guard.connection_lost(&mut stash).is_none(), "round {round}");
        }
        let mut stash: VecDeque<Request> = [publish(&poison, 1), publish(&queued, 2)].into();
        let given_up = guard.connection_lost(&mut stash);
        assert!(
            matches!(&given_up, Some(Request::Publish(p)) if p.pkid == 1),
            "{given_up:?}"
        );
        assert_eq!(stash.len(), 1, "the publish queued behind it stays");
        // It starts counting again.
        for _ in 1..RESEND_LIMIT {
            assert!(guard.connection_lost(&mut stash).is_none());
        }
        assert!(guard.connection_lost(&mut stash).is_some());
    }

    #[test]
    fn the_guard_forgets_publishes_that_were_acknowledged() {
        let a = bytes::Bytes::from(vec![0u8; 4]);
        let b = bytes::Bytes::from(vec![1u8; 4]);
        let mut guard = ResendGuard::default();
        for _ in 0..10 {
            // Each time a different publish is unacknowledged: nothing is given up.
            let mut stash: VecDeque<Request> = [publish(&a, 1)].into();
            assert!(guard.connection_lost(&mut stash).is_none());
            let mut stash: VecDeque<Request> = [publish(&b, 2)].into();
            assert!(guard.connection_lost(&mut stash).is_none());
        }
        let qos0 = Request::Publish(rumqttc::Publish::new("t", QoS::AtMostOnce, vec![1]));
        for _ in 0..10 {
            let mut stash: VecDeque<Request> = [qos0.clone()].into();
            assert!(guard.connection_lost(&mut stash).is_none());
        }
    }

    /// An event loop with `inflight` publishes in flight at most, connected to a peer that
    /// only reads after the CONNACK.
    async fn connected_eventloop(inflight: u16) -> (EventLoop, mpsc::UnboundedReceiver<Vec<u8>>) {
        super::super::scripted_peer::connected(
            |o| {
                o.set_inflight(inflight);
            },
            &[],
        )
        .await
    }

    /// Reads `len` bytes off the listener's channel.
    async fn received(rx: &mut mpsc::UnboundedReceiver<Vec<u8>>, len: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        while bytes.len() < len {
            let chunk = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
            bytes.extend(chunk.expect("the bytes in time").expect("the listener"));
        }
        assert_eq!(bytes.len(), len);
        bytes
    }

    fn fresh_publish(payload: u8) -> Request {
        Request::Publish(rumqttc::Publish::new(
            "t",
            QoS::AtLeastOnce,
            vec![payload; 100],
        ))
    }

    /// A QoS 1 publish of `fresh_publish` on the wire: header 2, topic 3, packet id 2,
    /// payload 100.
    const PUBLISH_LEN: usize = 107;

    #[tokio::test]
    async fn the_requests_queued_together_leave_in_order_with_the_acknowledgements() {
        let (mut eventloop, mut rx) = connected_eventloop(100).await;
        let (tx, requests) = flume::bounded(100);
        for payload in 1..10 {
            tx.send(fresh_publish(payload)).unwrap();
        }
        let mut acks = vec![Packet::PubAck(PubAck::new(5))];
        write_requests(&mut eventloop, &requests, &mut acks, fresh_publish(0))
            .await
            .unwrap();
        assert!(requests.is_empty() && acks.is_empty());
        assert_eq!(eventloop.state.inflight(), 10);
        let bytes = received(&mut rx, 10 * PUBLISH_LEN + 4).await;
        for (index, publish) in bytes.chunks(PUBLISH_LEN).take(10).enumerate() {
            assert_eq!(publish[0], 0x32, "publish {index} is a QoS 1 PUBLISH");
            assert_eq!(publish[6], index as u8 + 1, "packet ids in order");
            assert_eq!(publish[7], index as u8, "payloads in order");
        }
        assert_eq!(
            &bytes[10 * PUBLISH_LEN..],
            &[0x40, 0x02, 0x00, 0x05],
            "the PUBACK last"
        );
    }

    #[tokio::test]
    async fn a_batch_stops_where_the_publishes_in_flight_reach_the_limit() {
        let (mut eventloop, mut rx) = connected_eventloop(4).await;
        let (tx, requests) = flume::bounded(100);
        for payload in 1..10 {
            tx.send(fresh_publish(payload)).unwrap();
        }
        write_requests(&mut eventloop, &requests, &mut Vec::new(), fresh_publish(0))
            .await
            .unwrap();
        assert_eq!(requests.len(), 6, "the rest wait for acknowledgements");
        assert!(!may_write(&eventloop));
        received(&mut rx, 4 * PUBLISH_LEN).await;
    }

    #[tokio::test]
    async fn a_batch_is_at_most_write_batch_requests() {
        let (mut eventloop, mut rx) = connected_eventloop(100).await;
        let (tx, requests) = flume::bounded(1000);
        for pkid in 1..=WRITE_BATCH + 10 {
            tx.send(Request::PubAck(PubAck::new(pkid as u16))).unwrap();
        }
        let first = requests.try_recv().unwrap();
        write_requests(&mut eventloop, &requests, &mut Vec::new(), first)
            .await
            .unwrap();
        assert_eq!(requests.len(), 10);
        received(&mut rx, WRITE_BATCH * 4).await;
    }

    #[test]
    fn a_connection_loss_keeps_the_queued_publishes_and_drops_the_acknowledgements() {
        let (tx, requests) = flume::bounded(10);
        tx.send(fresh_publish(1)).unwrap();
        tx.send(Request::PubAck(PubAck::new(7))).unwrap();
        tx.send(Request::PubRec(PubRec::new(8))).unwrap();
        tx.send(fresh_publish(2)).unwrap();
        let mut stash: VecDeque<Request> = [fresh_publish(0)].into();
        keep_for_next_connection(&requests, &mut stash);
        assert!(requests.is_empty(), "the queue is emptied");
        let payloads: Vec<u8> = stash
            .iter()
            .map(|request| match request {
                Request::Publish(p) => p.payload[0],
                other => panic!("only publishes wait for the next connection: {other:?}"),
            })
            .collect();
        assert_eq!(
            payloads,
            [0, 1, 2],
            "behind what was in flight, in the order queued"
        );
    }

    #[test]
    fn a_publish_that_never_reaches_rumqttc_leaves_the_count() {
        let shared = BusState::default();
        let dropped = QueuedPublish::new(&shared);
        let handed = QueuedPublish::new(&shared);
        assert!(shared.publishes_queued());
        // A caller that gives up (its future dropped while the queue was full).
        drop(dropped);
        handed.handed_over();
        assert!(
            shared.publishes_queued(),
            "a handed-over publish waits to be written"
        );
        shared.publish_gone();
        assert!(!shared.publishes_queued());
        // Seen written twice (rewritten after a reconnect): the count does not wrap.
        shared.publish_gone();
        assert!(!shared.publishes_queued());
    }
}
