//! The HTTP server: the axum router, [`Gateway::start`] and [`RunningGateway`] (its address
//! and graceful shutdown).
//!
//! Starting a gateway subscribes a [`Registry`] (which agents exist, their cards, their
//! instances) and a [`Requester`] (the gateway's response topics) on the bus it is given,
//! waits briefly for the registry's retained state, binds the listener and serves:
//!
//! | route | what |
//! | --- | --- |
//! | `POST /agents/{name}` (and with a trailing slash) | A2A JSON-RPC to that agent |
//! | `POST /` | A2A JSON-RPC to the default agent |
//! | `GET /.well-known/agent-card.json`, `/.well-known/agent.json`, `/agentCard` | the default agent's card |
//! | `GET /agents/{name}/.well-known/agent-card.json` (and the other two) | that agent's card |
//! | `GET /agents` | the agents of the mesh |
//! | `GET /agents/{name}/extendedAgentCard`, `/agents/{name}/a2a/agent/authenticatedExtendedCard` | that agent's extended card (authenticated callers) |
//! | `GET /a2a/agent/authenticatedExtendedCard` | the default agent's extended card (authenticated callers) |
//! | `GET /.well-known/jwks.json` | the key set of the gateway's card signatures (when it signs) |
//! | `GET /healthz`, `GET /readyz` | liveness, readiness |
//! | `GET /metrics` | Prometheus metrics ([`metrics`](crate::metrics)) |
//! | `GET /` | a redirect to the web console |
//! | `GET /ui/…` | the web console: the page, its assets and its feeds (see `console`) |
//!
//! Connections are served by [`http_server`](crate::http_server) (HTTP/1.1 and HTTP/2, the
//! limits on connections and on the time to a request). Every accepted connection has
//! Nagle's algorithm turned off ([`accepting`]). With
//! [`GatewayConfig::tls`] the listener serves HTTPS only ([`TlsListener`]): TLS is a property
//! of the listener, so every route (and whatever is served on the same app later) has it.
//!
//! Layers, outermost first: CORS (when origins are configured; answers preflights), then
//! authentication (when API keys are configured; see [`auth`](crate::auth)).
//!
//! Each handler gets the part of the state it uses ([`AppState`]'s parts, through axum's
//! `FromRef`): the JSON-RPC binding its [`JsonRpc`], the cards their [`Cards`], and so on.
//! The A2A operations themselves live in the transport-free [`A2aService`] the bindings share.

use crate::auth::{Guard, Keys};
use crate::bridge::Bridge;
use crate::card_signer::CardSigner;
use crate::cards::{CardCache, Cards};
use crate::config::{ENVELOPE_ROOM, GATEWAY_ID_FILE, GatewayConfig};
use crate::console::Console;
use crate::health::Health;
use crate::http_server::{self, HttpLimits};
use crate::jsonrpc::JsonRpc;
use crate::linger::LingeringListener;
use crate::metrics::{Exposition, Metrics};
use crate::push::{PushSettings, Pusher};
use crate::rest::Rest;
use crate::service::{A2aService, ServiceSettings};
use crate::store::{MemoryStore, PostgresStore, SqliteStore, StoreError, TaskStore};
use crate::takeover::{Takeover, session_client_id};
use crate::tls::{TlsFiles, TlsListener};
use crate::{auth, cards, console, health, jsonrpc, metrics, rest};
use axum::Router;
use axum::extract::FromRef;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, Method as HttpMethod, StatusCode, header};
use axum::response::Response;
use axum::routing::{any, get, post};
use axum::serve::ListenerExt;
use mesh_core::bus::{AckMode, Bus, BusConfig, BusError, QoS, Subscription, redact_url};
use mesh_core::registry::Registry;
use mesh_core::requester::{Requester, RequesterKind, SendError};
use mesh_core::topic::{TopicError, Topics};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The namespace or gateway id cannot be a topic segment.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The bus refused a subscription.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// The requester could not subscribe to the gateway's response topics.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The durable task store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A setting is not valid (a zero limit or timeout, a CORS origin).
    #[error("{0}")]
    Config(String),
    /// The webhook CA file ([`GatewayConfig::webhook_ca_file`]) cannot be used.
    #[error("webhook CA: {0}")]
    WebhookTls(String),
    /// The listener's certificate or key ([`GatewayConfig::tls`]) cannot be used: a file
    /// that cannot be read or does not parse, or a key that does not match the certificate
    /// (the message names the file).
    #[error("TLS: {0}")]
    Tls(String),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The state of the router: each handler takes the part it uses. The parts sit behind one
/// `Arc`, as axum clones the router's state for every request (one count to move, not one
/// a part).
#[derive(Clone)]
struct AppState(Arc<Parts>);

/// What [`AppState`] shares.
struct Parts {
    jsonrpc: Arc<JsonRpc>,
    rest: Arc<Rest>,
    cards: Arc<Cards>,
    health: Arc<Health>,
    exposition: Arc<Exposition>,
    guard: Arc<Guard>,
    console: Arc<Console>,
}

/// Each part as a handler's `State` (what `#[derive(FromRef)]` makes of plain fields).
macro_rules! state_parts {
    ($($field:ident: $part:ty),* $(,)?) => {$(
        impl FromRef<AppState> for Arc<$part> {
            fn from_ref(state: &AppState) -> Arc<$part> {
                state.0.$field.clone()
            }
        }
    )*};
}

state_parts!(
    jsonrpc: JsonRpc,
    rest: Rest,
    cards: Cards,
    health: Health,
    exposition: Exposition,
    guard: Guard,
    console: Console,
);

/// The HTTP face of the mesh. See [`Gateway::start`].
pub struct Gateway;

impl Gateway {
    /// Starts a gateway on `bus`: with the [`PostgresStore`] at
    /// [`GatewayConfig::store_url`] when one is set, else with the durable [`SqliteStore`] in
    /// [`GatewayConfig::data_dir`] when one is set, else with an in-memory store.
    ///
    /// The bus is connected already, so replies the broker kept for this gateway's session
    /// while it was down may be gone before its requester subscribes: a gateway that should
    /// follow its own earlier run's tasks starts with [`Gateway::connect`] (here they are
    /// failed, with a status that says why).
    pub async fn start(
        mut config: GatewayConfig,
        bus: Bus,
    ) -> Result<RunningGateway, GatewayError> {
        let store = open_store(&mut config).await?;
        Gateway::start_on(config, bus, store, None).await
    }

    /// Connects to the bus with `bus_config` and starts a gateway on it, as
    /// [`Gateway::start`] does. With a durable store (SQLite or PostgreSQL: one that is
    /// [`resumable`](TaskStore::resumable)) the session is persistent and named after the
    /// gateway ([`session_client_id`]), and the gateway's replies are subscribed to before it
    /// connects: the tasks its earlier run left running are followed from the replies the
    /// broker kept meanwhile; with a store shared by several gateways, the gateway can also
    /// open the session of another that is gone to take its tasks over (see
    /// [`takeover`](crate::takeover)).
    pub async fn connect(
        mut config: GatewayConfig,
        bus_config: BusConfig,
    ) -> Result<RunningGateway, GatewayError> {
        let store = open_store(&mut config).await?;
        if !store.resumable() {
            let bus = Bus::connect(bus_config).await?;
            return Gateway::start_on(config, bus, store, None).await;
        }
        let id = config.gateway_id.clone().unwrap_or_default();
        let mut bus_config = bus_config.with_client_id(session_client_id(&config.name, &id));
        bus_config.clean_session = false;
        let topics = Topics::new(&config.namespace)?;
        let filter =
            Requester::response_filter(&topics, RequesterKind::Gateway, &config.name, &id)?;
        let (bus, mut subscriptions) = Bus::connect_subscribed(
            bus_config.clone(),
            // Each reply is acknowledged once the store committed it (see takeover).
            &[(&filter, QoS::AtLeastOnce, AckMode::ByConsumer)],
        )
        .await?;
        let replies = subscriptions.remove(0);
        Gateway::start_on(config, bus, store, Some((replies, bus_config))).await
    }

    /// Starts a gateway on `bus` keeping its tasks in `store`.
    pub async fn start_with_store(
        config: GatewayConfig,
        bus: Bus,
        store: Arc<dyn TaskStore>,
    ) -> Result<RunningGateway, GatewayError> {
        config.check().map_err(GatewayError::Config)?;
        Gateway::start_on(config, bus, store, None).await
    }

    /// Starts a gateway on `bus` keeping its tasks in `store`; `session`: the subscription
    /// to its replies made before the bus connected, and how it connected (see
    /// [`Gateway::connect`]).
    async fn start_on(
        mut config: GatewayConfig,
        bus: Bus,
        store: Arc<dyn TaskStore>,
        session: Option<(Subscription, BusConfig)>,
    ) -> Result<RunningGateway, GatewayError> {
        let topics = Topics::new(&config.namespace)?;
        let bus_filter = topics.namespace_filter();
        let carried = bus.max_packet_size().saturating_sub(ENVELOPE_ROOM);
        if config.body_limit > carried {
            tracing::warn!(
                body_limit = config.body_limit,
                bus_max_packet_size = bus.max_packet_size(),
                "the request body limit is lowered to what the bus carries with the envelope: {carried} bytes"
            );
            config.body_limit = carried;
        }
        let cors = cors_layer(&config.cors_origins)?;
        let tls = config
            .tls
            .as_ref()
            .map(TlsFiles::acceptor)
            .transpose()
            .map_err(GatewayError::Tls)?;
        let webhook_tls = if config.push_notifications {
            Some(
                crate::push::webhook_tls(config.webhook_ca_file.as_deref())
                    .map_err(GatewayError::WebhookTls)?,
            )
        } else {
            None
        };
        let registry =
            Registry::start_with(&bus, &topics, &config.name, config.trusted_keys.clone()).await?;
        let gateway_id = config
            .gateway_id
            .get_or_insert_with(|| format!("gw-{}", uuid::Uuid::new_v4().simple()))
            .clone();
        // A resumable store: the running tasks this gateway's earlier run left are followed;
        // with a shared store, those of gateways gone meanwhile are taken over.
        let mut orphans = if store.resumable() {
            store
                .claim_orphans(config.takeover_grace)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(%error, "cannot look for tasks left running");
                    Vec::new()
                })
        } else {
            Vec::new()
        };
        if !store.shared() {
            // A store of one gateway: what it left running is this one's.
            for orphan in &mut orphans {
                orphan.gateway.clone_from(&gateway_id);
            }
        }
        let (own, others): (Vec<_>, Vec<_>) =
            orphans.into_iter().partition(|o| o.gateway == gateway_id);
        let takeover_topics = topics.clone();
        let (requester, own_streams, session_config) = match session {
            Some((replies, bus_config)) => {
                let (requester, streams) = Requester::start_on(
                    bus.clone(),
                    replies,
                    topics,
                    RequesterKind::Gateway,
                    &config.name,
                    &gateway_id,
                    crate::takeover::resumed(&own, config.task_timeout),
                )?;
                (requester, streams, Some(bus_config))
            }
            None => {
                let requester = Requester::start(
                    bus.clone(),
                    topics,
                    RequesterKind::Gateway,
                    &config.name,
                    &gateway_id,
                )
                .await?;
                (requester, Vec::new(), None)
            }
        };
        requester.watch_registry(&registry);
        if !registry.wait_loaded(config.registry_wait).await {
            tracing::warn!(
                "the registry's retained state did not arrive yet; /readyz says 503 until it does"
            );
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| GatewayError::Bind {
                addr: config.listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| GatewayError::Bind {
            addr: config.listen,
            source,
        })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{local_addr}"))
            .trim_end_matches('/')
            .to_owned();
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        metrics.watch_store(&store);
        let pusher = webhook_tls.map(|tls| {
            Pusher::start(
                PushSettings {
                    allow_private: config.allow_private_webhooks,
                    timeout: config.webhook_timeout,
                    attempts: config.webhook_attempts,
                    backoff: config.webhook_backoff,
                    queue: config.webhook_queue,
                },
                tls,
                &store,
                metrics.clone(),
                shutdown.clone(),
            )
        });
        watch_reconnects(&bus, &metrics, &shutdown);
        if store.shared() && bus.broker_nodes() > 1 {
            note_broker_nodes(&bus, &store, &shutdown);
        }
        let bridge = Arc::new(Bridge::new(
            store.clone(),
            pusher.clone(),
            Some((requester.clone(), config.cancel_wait)),
        ));
        if store.resumable() {
            let takeover = Arc::new(Takeover {
                store: store.clone(),
                bridge: bridge.clone(),
                bus_config: session_config,
                topics: takeover_topics,
                name: config.name.clone(),
                task_timeout: config.task_timeout,
                grace: config.takeover_grace,
                pusher: pusher.clone(),
            });
            {
                let takeover = takeover.clone();
                tokio::spawn(async move { takeover.follow(own, own_streams).await });
            }
            if store.shared() {
                takeover.adopt_all(others);
                takeover.watch(shutdown.clone());
            }
        }
        let signer = config
            .signing_key
            .clone()
            .map(|key| CardSigner::new(key, &base_url));
        let keys = Keys::new(config.api_keys.clone());
        let cards = Arc::new(Cards {
            registry: registry.clone(),
            base_url: base_url.clone(),
            default_agent: config.default_agent.clone(),
            push_notifications: pusher.is_some(),
            api_keys: keys.enabled(),
            signer,
            cache: CardCache::default(),
        });
        let service = Arc::new(A2aService {
            settings: ServiceSettings {
                task_timeout: config.task_timeout,
                blocking_wait: config.blocking_wait,
                cancel_wait: config.cancel_wait,
                owned_tasks: keys.enabled(),
            },
            bus: bus.clone(),
            registry: registry.clone(),
            requester: requester.clone(),
            bridge,
            pusher,
            cards: cards.clone(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        });
        let state = AppState(Arc::new(Parts {
            jsonrpc: Arc::new(JsonRpc {
                service: service.clone(),
                metrics: metrics.clone(),
                default_agent: config.default_agent.clone(),
                body_limit: config.body_limit,
                max_batch: config.max_batch,
                keep_alive: config.sse_keep_alive,
            }),
            rest: Arc::new(Rest {
                service: service.clone(),
                cards: cards.clone(),
                metrics: metrics.clone(),
                default_agent: config.default_agent.clone(),
                body_limit: config.body_limit,
                keep_alive: config.sse_keep_alive,
            }),
            cards,
            health: Arc::new(Health {
                bus: bus.clone(),
                registry: registry.clone(),
            }),
            exposition: Arc::new(Exposition {
                registry: metrics::registry(&metrics),
                metrics: metrics.clone(),
                bus,
                requester,
                mesh: registry.clone(),
            }),
            guard: Arc::new(Guard {
                keys,
                metrics: metrics.clone(),
            }),
            console: Arc::new(Console {
                service: service.clone(),
                keep_alive: config.sse_keep_alive,
                bus_filter,
                bus_views: Default::default(),
                admins: config.console_admins.clone(),
            }),
        }));
        let grpc = crate::grpc::server::server(
            crate::grpc::server::Grpc {
                service: service.clone(),
                metrics: metrics.clone(),
                default_agent: config.default_agent.clone(),
            },
            config.body_limit,
        );
        let mcp = crate::mcp::service(service.clone(), config.body_limit, shutdown.clone());
        let mut app = router(state, grpc, mcp);
        if let Some(cors) = cors {
            app = app.layer(cors);
        }
        let http_limits = HttpLimits {
            max_connections: config.max_connections,
            header_timeout: config.header_timeout,
            write_timeout: config.write_timeout,
            http2_max_streams: config.http2_max_streams,
        };
        let server = match tls {
            Some(acceptor) => tokio::spawn(http_server::serve(
                TlsListener::new(LingeringListener::new(accepting(listener)), acceptor),
                app,
                http_limits,
                metrics,
                shutdown.clone(),
            )),
            None => tokio::spawn(http_server::serve(
                LingeringListener::new(accepting(listener)),
                app,
                http_limits,
                metrics,
                shutdown.clone(),
            )),
        };
        tracing::info!(
            addr = %local_addr,
            url = %redact_url(&base_url),
            tls = config.tls.is_some(),
            "gateway listening"
        );
        Ok(RunningGateway {
            local_addr,
            base_url,
            service,
            registry,
            shutdown,
            shutdown_grace: config.shutdown_grace,
            server,
        })
    }
}

/// The gateway's listener as it serves: every accepted connection has Nagle's algorithm
/// turned off. With it on, a small write (an SSE event, the second piece of an answer) waits
/// while the previous one is not acknowledged, and a client that only reads delays its ACK
/// by up to 40 ms: a stream of events stalled for 40 ms every so often (`mesh-bench`'s
/// "largest gap between events" measures it).
fn accepting(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    listener.tap_io(|stream: &mut tokio::net::TcpStream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot turn Nagle's algorithm off on an HTTP connection");
        }
    })
}

/// A running gateway.
pub struct RunningGateway {
    local_addr: SocketAddr,
    base_url: String,
    service: Arc<A2aService>,
    registry: Registry,
    shutdown: CancellationToken,
    shutdown_grace: std::time::Duration,
    server: JoinHandle<()>,
}

impl RunningGateway {
    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL written into agent cards (the public URL, else `http://<local_addr>`, or
    /// `https://<local_addr>` with TLS).
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// The task store.
    pub fn store(&self) -> Arc<dyn TaskStore> {
        self.service.store().clone()
    }

    /// The registry the gateway routes by.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Stops taking connections, ends open event streams (their tasks keep running on the
    /// bus), and waits up to the configured grace for open requests to finish.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let grace = self.shutdown_grace;
        let mut server = self.server;
        if tokio::time::timeout(grace, &mut server).await.is_err() {
            tracing::warn!("open requests outlasted the shutdown grace; closing them");
            server.abort();
        }
        let store = self.service.store().clone();
        let flushed = tokio::task::spawn_blocking(move || store.flush(grace)).await;
        if !matches!(flushed, Ok(true)) {
            tracing::warn!("the task store did not finish writing within the shutdown grace");
        }
    }
}

fn router(
    state: AppState,
    grpc: crate::grpc::proto::a2a_service_server::A2aServiceServer<crate::grpc::server::Grpc>,
    mcp: rmcp::transport::streamable_http_server::StreamableHttpService<
        crate::mcp::handler::McpTools,
        rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
    >,
) -> Router {
    let router = Router::new()
        .route("/", post(jsonrpc::post_default).get(console::root))
        .route("/agents/{name}", post(jsonrpc::post_agent))
        .route("/agents/{name}/", post(jsonrpc::post_agent))
        .route("/.well-known/agent-card.json", get(cards::default_card))
        .route("/.well-known/agent.json", get(cards::default_card))
        .route("/agentCard", get(cards::default_card))
        .route(
            "/agents/{name}/.well-known/agent-card.json",
            get(cards::agent_card),
        )
        .route(
            "/agents/{name}/.well-known/agent.json",
            get(cards::agent_card),
        )
        .route("/agents/{name}/agentCard", get(cards::agent_card))
        .route(crate::card_signer::JWKS_PATH, get(cards::jwks))
        .route("/agents", get(health::agents))
        .route("/agents/", get(health::agents))
        // The HTTP+JSON binding of each agent (its extended card included).
        .route("/agents/{name}/{*path}", any(rest::agent))
        // Where the 0.2-era clients fetch it.
        .route(
            "/agents/{name}/a2a/agent/authenticatedExtendedCard",
            get(cards::extended_card_http),
        )
        .route(
            "/a2a/agent/authenticatedExtendedCard",
            get(cards::default_extended_card_http),
        )
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::serve))
        // The web console ([`console`]).
        .route("/ui", get(console::ui_no_slash))
        .route("/ui/", get(console::index))
        .route("/ui/app.js", get(console::app_js))
        .route("/ui/style.css", get(console::style_css))
        .route("/ui/api/agents/events", get(console::agents_events))
        .route("/ui/api/tasks", get(console::tasks))
        .route("/ui/api/tasks/{id}/events", get(console::task_events))
        .route("/ui/api/bus", get(console::bus))
        // The gRPC binding, on the same port (HTTP/2).
        .route_service("/lf.a2a.v1.A2AService/{*method}", grpc)
        // The agents as MCP tools ([`crate::mcp`]).
        .route_service("/mcp", mcp)
        // The HTTP+JSON binding of the default agent, and of `/{tenant}/…`.
        .fallback(root_fallback);
    // Without API keys nothing is checked: no middleware (it would box every request's
    // future once more).
    let router = if state.0.guard.keys.enabled() {
        router.layer(axum::middleware::from_fn_with_state(
            state.0.guard.clone(),
            auth::require,
        ))
    } else {
        router
    };
    router.with_state(state)
}

/// The CORS layer for `origins` (`None` when there are none).
fn cors_layer(origins: &[String]) -> Result<Option<tower_http::cors::CorsLayer>, GatewayError> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return Ok(None);
    }
    let allow_origin = if origins.iter().any(|o| o.trim() == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| {
                let o = o.trim().trim_end_matches('/');
                HeaderValue::from_str(o)
                    .ok()
                    .filter(|_| o.starts_with("http://") || o.starts_with("https://"))
                    .ok_or_else(|| {
                        GatewayError::Config(format!(
                            "CORS origin {o:?} is not an origin like https://app.example.com (or *)"
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([HttpMethod::GET, HttpMethod::POST, HttpMethod::OPTIONS])
            .allow_headers([
                HeaderName::from_static("a2a-version"),
                HeaderName::from_static("a2a-extensions"),
                header::AUTHORIZATION,
                HeaderName::from_static(auth::API_KEY_HEADER),
                header::CONTENT_TYPE,
                HeaderName::from_static("traceparent"),
            ])
            .expose_headers([header::WWW_AUTHENTICATE, header::ETAG])
            .max_age(std::time::Duration::from_secs(600)),
    ))
}

/// Resolves the gateway's id (kept in the data directory when there is one) and opens its
/// task store: PostgreSQL, SQLite or memory (see [`Gateway::start`]).
async fn open_store(config: &mut GatewayConfig) -> Result<Arc<dyn TaskStore>, GatewayError> {
    // Before the store opens with the settings' bounds (`start_with_store` checks them
    // itself).
    config.check().map_err(GatewayError::Config)?;
    if let (None, Some(dir)) = (&config.gateway_id, &config.data_dir) {
        config.gateway_id = Some(kept_gateway_id(dir)?);
    }
    let gateway_id = config
        .gateway_id
        .get_or_insert_with(|| format!("gw-{}", uuid::Uuid::new_v4().simple()))
        .clone();
    let limits = config.store_limits();
    Ok(match (&config.store_url, config.data_dir.clone()) {
        (Some(url), _) => Arc::new(PostgresStore::open(url, limits, &gateway_id).await?),
        (None, Some(dir)) => {
            let opened = tokio::task::spawn_blocking(move || SqliteStore::open(&dir, limits))
                .await
                .map_err(|e| GatewayError::Store(StoreError::Storage(e.to_string())))??;
            Arc::new(opened)
        }
        (None, None) => Arc::new(MemoryStore::new(limits)),
    })
}

/// The gateway id kept in `dir` ([`GATEWAY_ID_FILE`]), or a new one written there (the
/// directory is made if missing). A kept id that is not a safe topic segment is refused.
fn kept_gateway_id(dir: &std::path::Path) -> Result<String, GatewayError> {
    let path = dir.join(GATEWAY_ID_FILE);
    let storage = |e: std::io::Error| {
        GatewayError::Store(StoreError::Storage(format!("{}: {e}", path.display())))
    };
    match std::fs::read_to_string(&path) {
        Ok(kept) => {
            let id = kept.trim().to_owned();
            mesh_core::topic::check_segment(&id).map_err(|problem| {
                GatewayError::Store(StoreError::Storage(format!(
                    "{}: the kept gateway id {id:?} is not a safe topic segment ({problem})",
                    path.display()
                )))
            })?;
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = format!("gw-{}", uuid::Uuid::new_v4().simple());
            std::fs::create_dir_all(dir).map_err(storage)?;
            std::fs::write(&path, format!("{id}\n")).map_err(storage)?;
            Ok(id)
        }
        Err(e) => Err(storage(e)),
    }
}

/// Counts every time the bus comes back after a loss.
fn watch_reconnects(bus: &Bus, metrics: &Arc<Metrics>, shutdown: &CancellationToken) {
    let mut state = bus.state();
    let metrics = metrics.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut was_connected = bus_connected(&state.borrow_and_update());
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = state.changed() => if changed.is_err() { return },
            }
            let connected = bus_connected(&state.borrow_and_update());
            if connected && !was_connected {
                metrics.bus_reconnected();
            }
            was_connected = connected;
        }
    });
}

/// Tells the store which broker node the bus is connected to, now and at each reconnect
/// ([`TaskStore::note_broker_node`]): a gateway that takes this one's tasks over opens its
/// session there.
fn note_broker_nodes(bus: &Bus, store: &Arc<dyn TaskStore>, shutdown: &CancellationToken) {
    let mut state = bus.state();
    let (bus, store, shutdown) = (bus.clone(), store.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            if bus_connected(&state.borrow_and_update())
                && let Err(error) = store.note_broker_node(bus.node()).await
            {
                tracing::warn!(%error, "cannot note the broker node in the store");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = state.changed() => if changed.is_err() { return },
            }
        }
    });
}

fn bus_connected(state: &mesh_core::bus::ConnectionState) -> bool {
    matches!(state, mesh_core::bus::ConnectionState::Connected)
}

/// A path no route has: an operation of the HTTP+JSON binding at the root, else 404.
async fn root_fallback(State(rest): State<Arc<Rest>>, request: axum::extract::Request) -> Response {
    if rest::is_operation_path(request.method(), request.uri().path()) {
        return rest::root(State(rest), request).await;
    }
    not_found().await
}

async fn not_found() -> Response {
    crate::http::json_status(
        StatusCode::NOT_FOUND,
        serde_json::json!({"error": "not found"}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = accepting(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) =
            tokio::time::timeout(std::time::Duration::from_secs(5), listener.accept())
                .await
                .expect("the connection is accepted");
        assert!(
            stream.nodelay().unwrap(),
            "TCP_NODELAY is set on the accepted stream"
        );
        // The kernel's default is the opposite, so the assertion above tests `accepting`.
        let plain = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(!plain.nodelay().unwrap());
    }
}
