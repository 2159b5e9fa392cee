//! The gateway's settings: where it listens, how it names itself on the bus and in agent
//! cards, which agent `POST /` reaches, the limits that keep every request bounded, where
//! its tasks are kept (memory, or SQLite in a data directory), API keys, CORS origins,
//! webhook delivery, TLS, and signed agent cards (a trust store, a signing key).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::auth::ApiKey;
use crate::store::StoreLimits;
pub use crate::tls::TlsFiles;
use mesh_core::card_signing::{SigningKey, TrustedKeys};

/// The room a request body needs on the bus besides itself: the JSON-RPC frame and the
/// `_mesh` envelope the gateway adds (a follow-up message also carries the task's snapshot,
/// which may need more: such a request is refused when it is published, with -32600).
pub const ENVELOPE_ROOM: usize = 16 * 1024;

/// The most HTTP connections a gateway holds open at once unless configured.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The gateway deployment name when none is configured.
pub const DEFAULT_GATEWAY_NAME: &str = "gateway";

/// The file in the data directory that keeps the gateway's id across restarts.
pub const GATEWAY_ID_FILE: &str = "gateway-id";

/// How a gateway runs. `Default` listens on 127.0.0.1:8080 in the namespace `mesh`.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The address the HTTP server binds (port 0: any free port).
    pub listen: SocketAddr,
    /// The URL clients reach the gateway at (`MESH_PUBLIC_URL` in the CLI), written into agent
    /// cards. `None`: `http://<bound address>` (`https://` with [`GatewayConfig::tls`]).
    pub public_url: Option<String>,
    /// The namespace (first topic segment) of the mesh.
    pub namespace: String,
    /// The gateway deployment's name on the bus (`--gateway-name`): the broker account its
    /// replicas share, first in its response topics (`…/gateway/response/<name>/<id>/…`), so
    /// that a broker ACL can let that account alone read them.
    pub name: String,
    /// This gateway instance's id on the bus: it names the response topics it subscribes to,
    /// after [`GatewayConfig::name`]. Two instances of one deployment need two ids. `None`: the id kept in the data directory
    /// ([`GATEWAY_ID_FILE`]), so that a gateway restarted on the same directory keeps its
    /// identity, or a new random one (written there when there is a data directory).
    pub gateway_id: Option<String>,
    /// The agent `POST /` and the root agent-card paths serve (`--default-agent`).
    pub default_agent: Option<String>,
    /// The largest request body accepted, in bytes (413 past it). At start it is lowered to
    /// what the bus can carry with the request's envelope ([`ENVELOPE_ROOM`] less than the
    /// bus's `max_packet_size`), so that a body the gateway accepts can be published.
    pub body_limit: usize,
    /// The most requests one JSON-RPC batch may hold; a larger batch is refused whole with
    /// one -32600 error.
    pub max_batch: usize,
    /// How long a blocking `SendMessage` waits for the task to finish before answering with
    /// the task as it stands (the client then polls or resubscribes).
    pub blocking_wait: Duration,
    /// How long an agent has to finish a task the gateway sends it (the bus deadline).
    pub task_timeout: Duration,
    /// How long a cancel waits for the instance running the task to answer before the
    /// gateway cancels the task in its store itself.
    pub cancel_wait: Duration,
    /// The interval of SSE keep-alive comments on an idle stream.
    pub sse_keep_alive: Duration,
    /// How long to wait for the registry's retained state at start.
    pub registry_wait: Duration,
    /// How long a finished task stays in the store.
    pub retention_age: Duration,
    /// How many tasks the store keeps at most. At the limit finished tasks are evicted,
    /// the oldest first; a task that is not finished never is, and when only those are left
    /// new tasks are refused (see [`store`](crate::store)).
    pub retention_count: usize,
    /// How many bytes the store keeps at most: the tasks and their event logs (estimated),
    /// in memory and, with a data directory, on disk (`--store-max-bytes`). Over it,
    /// finished tasks are evicted, the oldest first; if that is not enough, new tasks are
    /// refused.
    pub store_max_bytes: usize,
    /// How many bytes one task (its record and its event log) may take
    /// (`--store-max-task-bytes`): a task that grows past it is failed by the gateway, and
    /// its agent is asked to cancel it.
    pub store_max_task_bytes: usize,
    /// The longest graceful shutdown waits for open connections.
    pub shutdown_grace: Duration,
    /// The most HTTP connections open at once (`--max-connections`); past it a new
    /// connection is closed as soon as it is accepted. Each needs an open file: the
    /// process's limit must be higher.
    pub max_connections: usize,
    /// How long a client has to send a request head: from connecting to the first bytes that
    /// tell its version (HTTP/2's preface, or any other first byte), and over HTTP/1.1 from a
    /// head's first byte to its end, and between two requests on a keep-alive connection.
    pub header_timeout: Duration,
    /// How long an answer being written may wait for its client to accept a byte (a client
    /// that stops reading a stream, or a large answer): past it the connection is closed.
    /// Each byte accepted starts the clock again, so a slow reader is not cut off.
    pub write_timeout: Duration,
    /// The most streams open at once on one HTTP/2 connection (each request, and each event
    /// stream, is one).
    pub http2_max_streams: u32,
    /// Where the durable task store lives (`--data-dir`); `None`: tasks are kept in memory
    /// only ([`Gateway::start`](crate::Gateway::start) then uses a
    /// [`MemoryStore`](crate::MemoryStore)).
    pub data_dir: Option<PathBuf>,
    /// A task store shared with other gateways (`--store postgres://…`): PostgreSQL at this
    /// URL ([`PostgresStore`](crate::PostgresStore)). It takes the place of the SQLite store;
    /// the data directory still keeps the gateway's id.
    pub store_url: Option<String>,
    /// With a shared store: how long another gateway must have been gone before this one
    /// takes its running tasks over (see [`takeover`](crate::takeover)); a gateway that
    /// restarts within it takes them back itself.
    pub takeover_grace: Duration,
    /// API keys (`--api-key`, `MESH_API_KEYS`). Empty: no authentication. Otherwise every
    /// route but the cards, `/healthz` and `/readyz` needs `Authorization: Bearer <key>` or
    /// `X-API-Key: <key>`.
    pub api_keys: Vec<ApiKey>,
    /// The principals that may watch the bus traffic in the web console when API keys are on
    /// (it shows every principal's traffic); empty: no one may then.
    pub console_admins: Vec<String>,
    /// Origins browsers may call from (`--cors-origin`); `*` for any. Empty: no CORS headers.
    pub cors_origins: Vec<String>,
    /// Serve the push-notification methods and deliver webhooks.
    pub push_notifications: bool,
    /// Accept webhook URLs into loopback, private and link-local networks (tests, trusted
    /// networks: `--allow-private-webhooks`). Off by default (SSRF).
    pub allow_private_webhooks: bool,
    /// How long one webhook POST may take.
    pub webhook_timeout: Duration,
    /// How many times a delivery is tried before it is given up.
    pub webhook_attempts: u32,
    /// The wait before the first retry (doubled after each one).
    pub webhook_backoff: Duration,
    /// How many deliveries may wait at most; past it new ones are dropped (and counted).
    pub webhook_queue: usize,
    /// A PEM file of CAs that https webhooks' certificates may also chain to, besides the
    /// system's roots (`--webhook-ca`). A file that cannot be read stops the start.
    pub webhook_ca_file: Option<PathBuf>,
    /// Serve HTTPS only, with this certificate and key (`--tls-cert`, `--tls-key`), read and
    /// checked at start: a file that cannot be read or does not parse, or a key that does not
    /// match the certificate, stops the start ([`GatewayError::Tls`](crate::GatewayError)).
    /// `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// The keys agents' cards must be signed with (`--trusted-keys`, a JWKS file). A card
    /// that does not verify is refused: not served, counted, its agent shown untrusted.
    /// `None`: every card is served, signed or not.
    pub trusted_keys: Option<TrustedKeys>,
    /// The key the gateway signs the cards it serves with (`--signing-key`); its public key
    /// set is served at `/.well-known/jwks.json`. `None`: served cards carry no signature.
    pub signing_key: Option<SigningKey>,
}

impl GatewayConfig {
    /// Refuses the settings no gateway can run with, naming the first: a zero that would
    /// fail every waiting write or every request head at once, send keep-alive comments
    /// without pause, refuse every request, batch, connection, stream or task, or deliver no
    /// webhook. Every way of starting a gateway ([`Gateway::start`](crate::Gateway::start),
    /// `connect`, `start_with_store`) checks them first, before a store opens; the CLI's
    /// own checks, when it reads its flags, config file and environment, name its flags.
    pub fn check(&self) -> Result<(), String> {
        let zero_durations = [
            ("header_timeout", self.header_timeout),
            ("write_timeout", self.write_timeout),
            ("sse_keep_alive", self.sse_keep_alive),
            ("task_timeout", self.task_timeout),
            ("webhook_timeout", self.webhook_timeout),
        ];
        if let Some((name, _)) = zero_durations.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("{name} is 0: give it a duration above 0"));
        }
        let zero_counts = [
            ("body_limit", self.body_limit),
            ("max_batch", self.max_batch),
            ("max_connections", self.max_connections),
            ("http2_max_streams", self.http2_max_streams as usize),
            ("retention_count", self.retention_count),
            ("store_max_bytes", self.store_max_bytes),
            ("store_max_task_bytes", self.store_max_task_bytes),
            ("webhook_attempts", self.webhook_attempts as usize),
            ("webhook_queue", self.webhook_queue),
        ];
        if let Some((name, _)) = zero_counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("{name} is 0: give it a number above 0"));
        }
        Ok(())
    }

    /// The task store's limits these settings give.
    pub fn store_limits(&self) -> StoreLimits {
        StoreLimits {
            max_age: self.retention_age,
            max_tasks: self.retention_count,
            max_bytes: self.store_max_bytes,
            max_task_bytes: self.store_max_task_bytes,
        }
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            namespace: "mesh".into(),
            name: DEFAULT_GATEWAY_NAME.to_owned(),
            gateway_id: None,
            default_agent: None,
            body_limit: 4 * 1024 * 1024,
            max_batch: 100,
            blocking_wait: Duration::from_secs(30),
            task_timeout: Duration::from_secs(300),
            cancel_wait: Duration::from_secs(3),
            sse_keep_alive: Duration::from_secs(15),
            registry_wait: Duration::from_secs(5),
            retention_age: Duration::from_secs(3600),
            retention_count: 100_000,
            store_max_bytes: StoreLimits::default().max_bytes,
            store_max_task_bytes: StoreLimits::default().max_task_bytes,
            shutdown_grace: Duration::from_secs(5),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            http2_max_streams: 200,
            data_dir: None,
            store_url: None,
            takeover_grace: Duration::from_secs(5),
            api_keys: Vec::new(),
            console_admins: Vec::new(),
            cors_origins: Vec::new(),
            push_notifications: true,
            allow_private_webhooks: false,
            webhook_timeout: Duration::from_secs(10),
            webhook_attempts: 5,
            webhook_backoff: Duration::from_millis(250),
            webhook_queue: 10_000,
            webhook_ca_file: None,
            tls: None,
            trusted_keys: None,
            signing_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_pass_and_each_zero_is_refused_by_name() {
        assert_eq!(GatewayConfig::default().check(), Ok(()));
        type Zero = fn(&mut GatewayConfig);
        let zeroed: [(&str, Zero); 14] = [
            ("header_timeout", |c| c.header_timeout = Duration::ZERO),
            ("write_timeout", |c| c.write_timeout = Duration::ZERO),
            ("sse_keep_alive", |c| c.sse_keep_alive = Duration::ZERO),
            ("task_timeout", |c| c.task_timeout = Duration::ZERO),
            ("webhook_timeout", |c| c.webhook_timeout = Duration::ZERO),
            ("body_limit", |c| c.body_limit = 0),
            ("max_batch", |c| c.max_batch = 0),
            ("max_connections", |c| c.max_connections = 0),
            ("http2_max_streams", |c| c.http2_max_streams = 0),
            ("retention_count", |c| c.retention_count = 0),
            ("store_max_bytes", |c| c.store_max_bytes = 0),
            ("store_max_task_bytes", |c| c.store_max_task_bytes = 0),
            ("webhook_attempts", |c| c.webhook_attempts = 0),
            ("webhook_queue", |c| c.webhook_queue = 0),
        ];
        for (name, zero) in zeroed {
            let mut config = GatewayConfig::default();
            zero(&mut config);
            let error = config.check().expect_err(name);
            assert!(error.starts_with(&format!("{name} is 0")), "{error}");
        }
    }
}
