//! # mesh-gateway
//!
//! The HTTP face of the mesh: any A2A client (protocol 0.1, 0.3 or 1.0, JSON-RPC and SSE)
//! talks to any agent on the bus as if it were a plain A2A server.
//!
//! ```no_run
//! use mesh_core::bus::{Bus, BusConfig};
//! use mesh_gateway::{Gateway, GatewayConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let bus = Bus::connect(BusConfig::new("mqtt://127.0.0.1:1883")?).await?;
//! let config = GatewayConfig {
//!     listen: "127.0.0.1:8080".parse()?,
//!     default_agent: Some("echo".into()),
//!     ..GatewayConfig::default()
//! };
//! let gateway = Gateway::start(config, bus).await?;
//! println!("A2A clients: {}/agents/echo", gateway.url());
//! // … serve until it is time to stop:
//! gateway.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Modules: [`config`] (settings), [`server`] (router, start, shutdown), `service` (the A2A
//! operations, free of any transport), the bindings over it: `jsonrpc`, `rest` (HTTP+JSON),
//! `grpc` and `mcp` (the agents as MCP tools, at `/mcp`), with `answers` (the JSON both HTTP bindings write), `http`
//! (what the HTTP bindings share: bounded bodies, version and content-type checks), `sse`
//! (event streams), `bridge` (the pump from the bus to the store and the live subscribers),
//! [`task_events`] (how an event changes a task, and its stored encoding), `console` (the web console under `/ui/`), `cards` (and
//! `card_signer`, the gateway's signature on them), `health`, [`auth`] (API keys), [`push`]
//! (webhook checks and delivery), [`metrics`] (`GET /metrics`), [`tls`] (HTTPS on the
//! listener), and [`store`] (the [`TaskStore`] trait, the in-memory store and the durable
//! SQLite store).

mod answers;
pub mod auth;
mod bridge;
mod card_signer;
mod cards;
pub mod config;
mod console;
mod grpc;
mod health;
mod http;
mod http_server;
mod jsonrpc;
mod linger;
mod mcp;
pub mod metrics;
pub mod push;
mod rest;
pub mod server;
mod service;
mod sse;
pub mod store;
pub mod takeover;
pub mod task_events;
pub mod tls;

/// The gRPC binding's generated client (`a2a_service_client::A2aServiceClient`) and the
/// messages and enums of package `lf.a2a.v1` (`SendMessageRequest`, `Message`, `Part`,
/// `Task`, …), for load generators and tools that call a gateway over gRPC. Feature
/// `grpc-client`; no transport in this crate: build the client over tonic's `Channel`
/// (feature `channel` of tonic) or any HTTP/2 service.
#[cfg(feature = "grpc-client")]
pub mod grpc_client {
    pub use crate::grpc::proto::*;
}

pub use auth::ApiKey;
pub use config::{DEFAULT_GATEWAY_NAME, GATEWAY_ID_FILE, GatewayConfig};
pub use server::{Gateway, GatewayError, RunningGateway};
pub use store::{
    ANY_TASK, MemoryStore, PendingDelivery, PostgresStore, SqliteStore, StoreError, StoreLimits,
    StoredEvent, TaskPage, TaskQuery, TaskRecord, TaskStore,
};
pub use tls::TlsFiles;
