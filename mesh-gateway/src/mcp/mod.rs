//! The gateway's MCP endpoint (`/mcp`, Streamable HTTP): every agent online on the mesh is an
//! MCP tool, one more binding over the transport-free A2A service (like JSON-RPC, HTTP+JSON and
//! gRPC), through the official Rust MCP SDK (rmcp).
//!
//! It is served statelessly (no MCP session is kept between requests: nothing to bound, and a
//! client may go through any replica): a call's progress notifications ride on its own
//! response stream, and tool-list changes on a `subscriptions/listen` stream. The gateway's
//! API keys apply as on every route. The parts: [`tools`] (agents as tools and tasks as
//! results, as data) and [`handler`] (the server).

pub(crate) mod handler;
pub(crate) mod tools;

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::service::A2aService;
use handler::{MAX_LISTENS, McpTools};

/// The `/mcp` service: `body_limit` bounds a request's body, as on the other bindings;
/// `shutdown` ends the open streams.
pub(crate) fn service(
    a2a: Arc<A2aService>,
    body_limit: usize,
    shutdown: CancellationToken,
) -> StreamableHttpService<McpTools, NeverSessionManager> {
    let tools = McpTools {
        service: a2a,
        listens: Arc::new(Semaphore::new(MAX_LISTENS)),
    };
    // The gateway is reached under any host name (behind a load balancer, in a cluster); its
    // API keys, not a host allowlist, decide who may call.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(body_limit)
        .with_cancellation_token(shutdown);
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
