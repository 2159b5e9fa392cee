//! `GET /metrics`: the gateway's counters in the Prometheus text format, written by the
//! official `prometheus-client` crate.
//!
//! Every hot-path update is one or two relaxed atomic increments on a pre-allocated slot
//! (no map lookup, no lock); the exposition is built at scrape time by a collector that
//! reads the atomics (and asks the task store how many tasks are in each state).
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `mesh_gateway_requests_total` | counter | `method` (1.0 names, or `invalid`), `outcome` (`ok`, `error`) |
//! | `mesh_gateway_request_duration_seconds` | histogram | (to the answer: the first event of a stream) |
//! | `mesh_gateway_unauthenticated_requests_total` | counter | |
//! | `mesh_gateway_tasks` | gauge | `state` |
//! | `mesh_gateway_sse_streams_open` | gauge | |
//! | `mesh_gateway_http_connections_open` | gauge | |
//! | `mesh_gateway_http_connections_refused_total` | counter | (closed at accept: `--max-connections` were open) |
//! | `mesh_gateway_bus_reconnects_total` | counter | |
//! | `mesh_gateway_bus_dropped_total` | counter | `reason` (`oversized`: an incoming message over the bus's `max_packet_size`; `given_up`: a publish the broker kept closing the connection on; `unexpected_event`: an event from another instance or out of its stream's window) |
//! | `mesh_gateway_webhook_deliveries_total` | counter | (delivered: a 2xx answer) |
//! | `mesh_gateway_webhook_failures_total` | counter | `reason` (`retry`, `given_up`, `dropped`) |
//! | `mesh_gateway_store_pending_writes` | gauge | (changes not yet written to disk) |
//! | `mesh_gateway_store_bytes` | gauge | (what the task store counts against its byte budget) |
//! | `mesh_gateway_flow_window_lent` | gauge | (events of the streams' shared flow-control budget lent beyond their base windows) |
//! | `mesh_gateway_cards_refused_total` | counter | `reason` (`unsigned`, `unknown_kid`, `bad_signature`, `malformed`, `wrong_name`: card versions the trust store refused) |

use crate::store::TaskStore;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use mesh_core::bus::Bus;
use mesh_core::dialect::Method;
use mesh_core::registry::CARD_REFUSALS;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// The latency histogram's upper bounds, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One slot per method, and one for requests that are not a valid call.
const SLOTS: usize = Method::ALL.len() + 1;

/// The gateway's counters.
pub(crate) struct Metrics {
    /// `[slot][0 = ok, 1 = error]`.
    requests: [[AtomicU64; 2]; SLOTS],
    /// Per bucket (not cumulative), the last one is +Inf.
    latency: [AtomicU64; BUCKETS.len() + 1],
    latency_sum_nanos: AtomicU64,
    unauthenticated: AtomicU64,
    sse_open: AtomicI64,
    connections_open: AtomicI64,
    connections_refused: AtomicU64,
    bus_reconnects: AtomicU64,
    webhook_delivered: AtomicU64,
    webhook_retries: AtomicU64,
    webhook_given_up: AtomicU64,
    webhook_dropped: AtomicU64,
    /// What the bus and the requester dropped: copied in at scrape time.
    bus_oversized: AtomicU64,
    bus_given_up: AtomicU64,
    unexpected_events: AtomicU64,
    /// Events of the requester's flow-control budget lent to streams: copied in at scrape time.
    flow_window_lent: AtomicU64,
    /// Card versions the registry's trust store refused, by reason: copied in at scrape time.
    cards_refused: [AtomicU64; CARD_REFUSALS.len()],
    /// The store whose tasks are counted at scrape time.
    store: OnceLock<Weak<dyn TaskStore>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn slot(method: Option<Method>) -> usize {
    method
        .and_then(|m| Method::ALL.iter().position(|x| *x == m))
        .unwrap_or(SLOTS - 1)
}

fn method_name(slot: usize) -> &'static str {
    match Method::ALL.get(slot) {
        Some(Method::SendMessage) => "SendMessage",
        Some(Method::SendStreamingMessage) => "SendStreamingMessage",
        Some(Method::GetTask) => "GetTask",
        Some(Method::ListTasks) => "ListTasks",
        Some(Method::CancelTask) => "CancelTask",
        Some(Method::SubscribeToTask) => "SubscribeToTask",
        Some(Method::SetPushConfig) => "CreateTaskPushNotificationConfig",
        Some(Method::GetPushConfig) => "GetTaskPushNotificationConfig",
        Some(Method::ListPushConfigs) => "ListTaskPushNotificationConfigs",
        Some(Method::DeletePushConfig) => "DeleteTaskPushNotificationConfig",
        Some(Method::GetExtendedCard) => "GetExtendedAgentCard",
        _ => "invalid",
    }
}

/// Counts an SSE stream open while it lives.
pub(crate) struct StreamGuard(Arc<Metrics>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.sse_open.fetch_sub(1, Relaxed);
    }
}

/// Counts an HTTP connection open while it lives.
pub(crate) struct ConnectionGuard(Arc<Metrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Relaxed);
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        Metrics {
            requests: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_sum_nanos: AtomicU64::new(0),
            unauthenticated: AtomicU64::new(0),
            sse_open: AtomicI64::new(0),
            connections_open: AtomicI64::new(0),
            connections_refused: AtomicU64::new(0),
            bus_reconnects: AtomicU64::new(0),
            webhook_delivered: AtomicU64::new(0),
            webhook_retries: AtomicU64::new(0),
            webhook_given_up: AtomicU64::new(0),
            webhook_dropped: AtomicU64::new(0),
            bus_oversized: AtomicU64::new(0),
            bus_given_up: AtomicU64::new(0),
            unexpected_events: AtomicU64::new(0),
            flow_window_lent: AtomicU64::new(0),
            cards_refused: Default::default(),
            store: OnceLock::new(),
        }
    }

    pub(crate) fn watch_store(&self, store: &Arc<dyn TaskStore>) {
        let _ = self.store.set(Arc::downgrade(store));
    }

    /// One answered request.
    pub(crate) fn request(&self, method: Option<Method>, ok: bool, took: Duration) {
        self.requests[slot(method)][usize::from(!ok)].fetch_add(1, Relaxed);
        let seconds = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        self.latency[bucket].fetch_add(1, Relaxed);
        self.latency_sum_nanos
            .fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    pub(crate) fn unauthenticated(&self) {
        self.unauthenticated.fetch_add(1, Relaxed);
    }

    pub(crate) fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        self.sse_open.fetch_add(1, Relaxed);
        StreamGuard(self.clone())
    }

    pub(crate) fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        self.connections_open.fetch_add(1, Relaxed);
        ConnectionGuard(self.clone())
    }

    /// A connection closed at accept: the limit of open connections was reached.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn bus_reconnected(&self) {
        self.bus_reconnects.fetch_add(1, Relaxed);
    }

    /// Takes the bus's and the requester's drop counts in (before a scrape).
    pub(crate) fn bus_dropped(&self, stats: mesh_core::bus::BusStats, unexpected_events: u64) {
        self.bus_oversized.store(stats.oversized_dropped, Relaxed);
        self.bus_given_up.store(stats.publishes_given_up, Relaxed);
        self.unexpected_events.store(unexpected_events, Relaxed);
    }

    /// Takes in how much of the requester's flow-control budget its streams borrowed (before
    /// a scrape).
    pub(crate) fn flow_window_lent(&self, lent: u64) {
        self.flow_window_lent.store(lent, Relaxed);
    }

    /// Takes the registry's counts of refused cards in (before a scrape).
    pub(crate) fn cards_refused(&self, counts: [(&'static str, u64); CARD_REFUSALS.len()]) {
        for (slot, (_, count)) in self.cards_refused.iter().zip(counts) {
            slot.store(count, Relaxed);
        }
    }

    pub(crate) fn webhook_delivered(&self) {
        self.webhook_delivered.fetch_add(1, Relaxed);
    }

    pub(crate) fn webhook_retry(&self) {
        self.webhook_retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn webhook_given_up(&self) {
        self.webhook_given_up.fetch_add(1, Relaxed);
    }

    pub(crate) fn webhook_dropped(&self) {
        self.webhook_dropped.fetch_add(1, Relaxed);
    }
}

/// The collector that writes [`Metrics`] at scrape time.
#[derive(Debug)]
struct Scrape(Arc<Metrics>);

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = &self.0;
        {
            let mut family = encoder.encode_descriptor(
                "mesh_gateway_requests",
                "JSON-RPC requests answered, by method and outcome",
                None,
                MetricType::Counter,
            )?;
            for (slot, outcomes) in m.requests.iter().enumerate() {
                for (i, outcome) in ["ok", "error"].iter().enumerate() {
                    let value = outcomes[i].load(Relaxed);
                    let labels = [("method", method_name(slot)), ("outcome", *outcome)];
                    family
                        .encode_family(&labels)?
                        .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
                }
            }
        }
        {
            let mut buckets = Vec::with_capacity(BUCKETS.len() + 1);
            let mut count = 0;
            for (i, bound) in BUCKETS.iter().chain(std::iter::once(&f64::MAX)).enumerate() {
                let n = m.latency[i].load(Relaxed);
                count += n;
                buckets.push((*bound, n));
            }
            let sum = m.latency_sum_nanos.load(Relaxed) as f64 / 1e9;
            encoder
                .encode_descriptor(
                    "mesh_gateway_request_duration_seconds",
                    "Time to answer a JSON-RPC request (to the first event of a stream)",
                    None,
                    MetricType::Histogram,
                )?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        counter(
            &mut encoder,
            "mesh_gateway_unauthenticated_requests",
            "Requests refused with 401",
            m.unauthenticated.load(Relaxed),
        )?;
        if let Some(store) = m.store.get().and_then(Weak::upgrade) {
            let mut family = encoder.encode_descriptor(
                "mesh_gateway_tasks",
                "Tasks in the gateway's store, by state",
                None,
                MetricType::Gauge,
            )?;
            for (state, n) in store.state_counts() {
                let name = mesh_core::model::state_name(&state);
                let labels = [("state", name)];
                family.encode_family(&labels)?.encode_gauge(&(n as i64))?;
            }
            gauge(
                &mut encoder,
                "mesh_gateway_store_pending_writes",
                "Task changes not yet written to the durable store",
                store.pending_writes() as i64,
            )?;
            gauge(
                &mut encoder,
                "mesh_gateway_store_bytes",
                "Bytes the task store holds (tasks and event logs, estimated) against its budget",
                i64::try_from(store.bytes()).unwrap_or(i64::MAX),
            )?;
        }
        gauge(
            &mut encoder,
            "mesh_gateway_sse_streams_open",
            "Server-sent event streams open now",
            m.sse_open.load(Relaxed),
        )?;
        gauge(
            &mut encoder,
            "mesh_gateway_http_connections_open",
            "HTTP connections open now",
            m.connections_open.load(Relaxed),
        )?;
        gauge(
            &mut encoder,
            "mesh_gateway_flow_window_lent",
            "Events of the shared flow-control budget that streams borrowed beyond their base windows (docs/protocol.md, section 3.4)",
            i64::try_from(m.flow_window_lent.load(Relaxed)).unwrap_or(i64::MAX),
        )?;
        counter(
            &mut encoder,
            "mesh_gateway_http_connections_refused",
            "HTTP connections closed as soon as they were accepted because --max-connections were open",
            m.connections_refused.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "mesh_gateway_bus_reconnects",
            "Times the gateway's bus connection came back after a loss",
            m.bus_reconnects.load(Relaxed),
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "mesh_gateway_bus_dropped",
                "Messages the bus or the requester dropped rather than let them harm the gateway: incoming messages over max_packet_size, publishes given up, unexpected events",
                None,
                MetricType::Counter,
            )?;
            for (reason, value) in [
                ("oversized", m.bus_oversized.load(Relaxed)),
                ("given_up", m.bus_given_up.load(Relaxed)),
                ("unexpected_event", m.unexpected_events.load(Relaxed)),
            ] {
                let labels = [("reason", reason)];
                family
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "mesh_gateway_cards_refused",
                "Agent card versions refused because they do not verify with the trust store (--trusted-keys)",
                None,
                MetricType::Counter,
            )?;
            for (reason, value) in CARD_REFUSALS.iter().zip(&m.cards_refused) {
                let labels = [("reason", *reason)];
                family
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&value.load(Relaxed), None)?;
            }
        }
        counter(
            &mut encoder,
            "mesh_gateway_webhook_deliveries",
            "Push notifications delivered (the webhook answered 2xx)",
            m.webhook_delivered.load(Relaxed),
        )?;
        let mut family = encoder.encode_descriptor(
            "mesh_gateway_webhook_failures",
            "Failed push-notification attempts: retried, given up after the last attempt, or dropped because the delivery queue was full",
            None,
            MetricType::Counter,
        )?;
        for (reason, value) in [
            ("retry", m.webhook_retries.load(Relaxed)),
            ("given_up", m.webhook_given_up.load(Relaxed)),
            ("dropped", m.webhook_dropped.load(Relaxed)),
        ] {
            let labels = [("reason", reason)];
            family
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
        }
        Ok(())
    }
}

/// The registry that writes the exposition.
pub(crate) fn registry(metrics: &Arc<Metrics>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(metrics.clone())));
    registry
}

/// What `GET /metrics` reads: the gateway's counters and the parts that count on their own.
pub(crate) struct Exposition {
    pub metrics: Arc<Metrics>,
    pub registry: Registry,
    pub bus: Bus,
    pub requester: mesh_core::requester::Requester,
    pub mesh: mesh_core::registry::Registry,
}

/// `GET /metrics`.
pub(crate) async fn serve(State(gw): State<Arc<Exposition>>) -> Response {
    gw.metrics
        .bus_dropped(gw.bus.stats(), gw.requester.unexpected_events());
    gw.metrics.cards_refused(gw.mesh.cards_refused());
    gw.metrics.flow_window_lent(gw.requester.flow_window_lent());
    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &gw.registry) {
        tracing::warn!(%error, "could not write the metrics");
    }
    let mut response = Response::new(Body::from(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}
