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
//! | `GET /healthz`, `GET /readyz` | liveness, readiness |

use crate::bridge::Bridge;
use crate::cards::CardCache;
use crate::config::GatewayConfig;
use crate::store::{MemoryStore, TaskStore};
use crate::{cards, health, jsonrpc};
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mesh_core::bus::{Bus, BusError};
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
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What every handler shares.
pub(crate) struct Shared {
    pub config: GatewayConfig,
    pub bus: Bus,
    pub registry: Registry,
    pub requester: Requester,
    pub bridge: Arc<Bridge>,
    /// The gateway's public base URL, without a trailing slash.
    pub base_url: String,
    pub shutdown: CancellationToken,
    pub cards: CardCache,
}

impl Shared {
    pub(crate) fn store(&self) -> &Arc<dyn TaskStore> {
        self.bridge.store()
    }
}

/// The HTTP face of the mesh. See [`Gateway::start`].
pub struct Gateway;

impl Gateway {
    /// Starts a gateway on `bus` with an in-memory task store.
    pub async fn start(config: GatewayConfig, bus: Bus) -> Result<RunningGateway, GatewayError> {
        let store = Arc::new(MemoryStore::new(
            config.retention_age,
            config.retention_count,
        ));
        Gateway::start_with_store(config, bus, store).await
    }

    /// Starts a gateway on `bus` keeping its tasks in `store`.
    pub async fn start_with_store(
        config: GatewayConfig,
        bus: Bus,
        store: Arc<dyn TaskStore>,
    ) -> Result<RunningGateway, GatewayError> {
        let topics = Topics::new(&config.namespace)?;
        let registry = Registry::start(&bus, &topics).await?;
        let requester = Requester::start(
            bus.clone(),
            topics,
            RequesterKind::Gateway,
            &config.gateway_id,
        )
        .await?;
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
        let base_url = config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{local_addr}"))
            .trim_end_matches('/')
            .to_owned();
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            config,
            bus,
            registry,
            requester,
            bridge: Arc::new(Bridge::new(store)),
            base_url,
            shutdown: shutdown.clone(),
            cards: CardCache::default(),
        });
        let app = router(shared.clone());
        let signal = shutdown.clone();
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app)
                .with_graceful_shutdown(async move { signal.cancelled().await });
            if let Err(error) = serve.await {
                tracing::error!(%error, "the gateway's HTTP server failed");
            }
        });
        tracing::info!(addr = %local_addr, url = %shared.base_url, "gateway listening");
        Ok(RunningGateway {
            local_addr,
            shared,
            server,
        })
    }
}

/// A running gateway.
pub struct RunningGateway {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl RunningGateway {
    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL written into agent cards (the public URL, else `http://<local_addr>`).
    pub fn url(&self) -> &str {
        &self.shared.base_url
    }

    /// The task store.
    pub fn store(&self) -> Arc<dyn TaskStore> {
        self.shared.store().clone()
    }

    /// The registry the gateway routes by.
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// Stops taking connections, ends open event streams (their tasks keep running on the
    /// bus), and waits up to the configured grace for open requests to finish.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        let grace = self.shared.config.shutdown_grace;
        let mut server = self.server;
        if tokio::time::timeout(grace, &mut server).await.is_err() {
            tracing::warn!("open requests outlasted the shutdown grace; closing them");
            server.abort();
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", post(jsonrpc::post_default))
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
        .route("/agents", get(health::agents))
        .route("/agents/", get(health::agents))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(not_found)
        .with_state(shared)
}

async fn not_found() -> Response {
    json_status(
        StatusCode::NOT_FOUND,
        serde_json::json!({"error": "not found"}),
    )
}

/// A JSON body with a status.
pub(crate) fn json_status(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}
