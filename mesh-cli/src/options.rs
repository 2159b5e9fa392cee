//! The command line's options, in groups: each command flattens the groups it reads, so its
//! `--help` shows its own options only, under their headings (Bus; Broker; Gateway and its
//! task store, authentication, CORS and webhooks; Agent; Client). Each group fills what it
//! was given into [`Common`] and [`Serve`], which [`Settings::resolve`](crate::settings::Settings::resolve)
//! completes from the config file and the defaults. Environment variables and config-file
//! keys are the same for every command.

use crate::settings::{Common, LogFormat, SchedPolicySetting, Serve, parse_bytes, parse_duration};
use clap::Args;
use clap::builder::FalseyValueParser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Options of every command.
#[derive(Args, Debug, Clone, Default)]
pub struct Global {
    /// A TOML file with any of the settings (snake_case keys); every command reads its own
    /// and ignores the others'.
    #[arg(long, env = "MESH_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log lines as text or as JSON (RUST_LOG sets the level).
    #[arg(long, env = "MESH_LOG_FORMAT", global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Worker threads of the async runtime; 0: one per core [default: 1 for `broker`,
    /// `gateway`, `agent` and each part of `up`, one per core for the other commands].
    #[arg(long, env = "MESH_WORKER_THREADS", global = true, value_name = "N")]
    pub worker_threads: Option<usize>,
    /// How Linux schedules a serving process when a message wakes it: `batch` runs it once
    /// the process that woke it blocks (or on an idle core), reading what arrived meanwhile
    /// together; `normal` preempts that process at once; `auto` is batch while the cores are
    /// busy (under 20 % idle) and normal once they idle (over 35 %) [default: auto for
    /// `agent`, normal for `broker`, `gateway` and `up`].
    #[arg(long, env = "MESH_SCHED_POLICY", global = true, value_enum)]
    pub sched_policy: Option<SchedPolicySetting>,
}

impl Global {
    /// Fills what was given.
    pub fn fill(&self, common: &mut Common) {
        common.config.clone_from(&self.config);
        common.log_format = self.log_format;
        common.worker_threads = self.worker_threads;
        common.sched_policy = self.sched_policy;
    }
}

/// The bus: which broker, which namespace.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Bus")]
pub struct BusOptions {
    /// The namespace: the first segment of every topic [default: mesh].
    #[arg(long, env = "MESH_NAMESPACE")]
    pub namespace: Option<String>,
    /// The broker to connect to [default: mqtt://127.0.0.1:1884]; `up` uses it instead of
    /// starting the embedded broker when given.
    #[arg(
        long,
        env = "MESH_BROKER_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub broker_url: Option<String>,
    /// A PEM file of the CA(s) that an `mqtts://` broker's certificate chains to [default:
    /// the system's roots].
    #[arg(long, env = "MESH_BROKER_CA", value_name = "PEM_FILE")]
    pub broker_ca: Option<PathBuf>,
}

impl BusOptions {
    /// Fills what was given.
    pub fn fill(&self, common: &mut Common) {
        common.namespace.clone_from(&self.namespace);
        common.broker_url.clone_from(&self.broker_url);
        common.broker_ca.clone_from(&self.broker_ca);
    }
}

/// The MQTT packet limit of bus clients and of the embedded broker.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Bus")]
pub struct PacketOptions {
    /// The largest MQTT packet, in bytes, a bus client publishes or takes in (larger incoming
    /// messages are dropped and counted), and the embedded broker accepts [default: 16MiB].
    /// An external broker's limit should match (Mosquitto: max_packet_size).
    #[arg(long, env = "MESH_MAX_PACKET_SIZE", value_name = "SIZE", value_parser = parse_bytes)]
    pub max_packet_size: Option<usize>,
}

impl PacketOptions {
    /// Fills what was given.
    pub fn fill(&self, common: &mut Common) {
        common.max_packet_size = self.max_packet_size;
    }
}

/// The embedded broker.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Broker")]
pub struct BrokerOptions {
    /// Where the embedded broker listens [default: 127.0.0.1:1884].
    #[arg(long, env = "MESH_BROKER_ADDR", value_name = "ADDR")]
    pub broker_addr: Option<SocketAddr>,
    /// The embedded broker's accounts: a Mosquitto password file (`mesh secure` writes one).
    /// With it (and --acl-file) anonymous clients and wrong passwords are refused [default:
    /// none, every client accepted].
    #[arg(
        long = "password-file",
        env = "MESH_BROKER_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub password_file: Option<PathBuf>,
    /// The embedded broker's ACL: a Mosquitto ACL file, what each account may publish and
    /// subscribe to (`mesh secure` writes one).
    #[arg(long = "acl-file", env = "MESH_BROKER_ACL_FILE", value_name = "FILE")]
    pub acl_file: Option<PathBuf>,
    /// This broker's id in a cluster of brokers, unique in the cluster; with
    /// --cluster-peer it makes the broker a cluster node (a `mesh` built with the `cluster`
    /// feature) [default: none, a broker alone].
    #[arg(long, env = "MESH_CLUSTER_NODE_ID", value_name = "ID")]
    pub cluster_node_id: Option<u64>,
    /// Where this cluster node listens for its peers (gRPC, neither encrypted nor
    /// authenticated: a network only the nodes reach) [default: 127.0.0.1:5363].
    #[arg(long, env = "MESH_CLUSTER_ADDR", value_name = "ADDR")]
    pub cluster_addr: Option<SocketAddr>,
    /// Another node of the cluster, as ID@HOST:PORT (its id and where it listens for
    /// peers); repeatable, or comma-separated.
    #[arg(
        long = "cluster-peer",
        env = "MESH_CLUSTER_PEERS",
        value_delimiter = ',',
        value_name = "ID@HOST:PORT"
    )]
    pub cluster_peers: Vec<String>,
}

impl BrokerOptions {
    /// Fills what was given, and marks the command as one that starts the embedded broker.
    pub fn fill(&self, serve: &mut Serve) {
        serve.starts_broker = true;
        serve.broker_addr = self.broker_addr;
        serve.broker_password_file.clone_from(&self.password_file);
        serve.broker_acl_file.clone_from(&self.acl_file);
        serve.cluster_node_id = self.cluster_node_id;
        serve.cluster_addr = self.cluster_addr;
        serve.cluster_peers.clone_from(&self.cluster_peers);
    }
}

/// The gateway's HTTP face and identity.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Gateway")]
pub struct GatewayOptions {
    /// Where the gateway listens [default: 127.0.0.1:8080].
    #[arg(long, env = "MESH_HTTP_ADDR", value_name = "ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// The URL clients reach the gateway at, written into agent cards [default: the bound
    /// address].
    #[arg(long, env = "MESH_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// The agent `POST /` and `/.well-known/agent-card.json` serve [default: echo in `up`].
    #[arg(long, env = "MESH_DEFAULT_AGENT", value_name = "AGENT")]
    pub default_agent: Option<String>,
    /// The gateway deployment's name on the bus, first in its response topics: the broker
    /// account its instances share under an ACL [default: gateway].
    #[arg(long, env = "MESH_GATEWAY_NAME", value_name = "NAME")]
    pub gateway_name: Option<String>,
    /// The most requests one JSON-RPC batch may hold; a larger batch is refused [default:
    /// 100].
    #[arg(long, env = "MESH_MAX_BATCH", value_name = "N")]
    pub max_batch: Option<usize>,
    /// The most HTTP connections the gateway holds open at once; past it a new connection
    /// is closed when accepted. Each takes an open file: the process's limit (`ulimit -n`)
    /// must be higher [default: 10000].
    #[arg(long, env = "MESH_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Serve the gateway over HTTPS only, with this PEM certificate chain (the server's
    /// certificate first); needs --tls-key.
    #[arg(long, env = "MESH_TLS_CERT", value_name = "PEM_FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 RSA or SEC1 EC); needs --tls-cert.
    #[arg(long, env = "MESH_TLS_KEY", value_name = "PEM_FILE")]
    pub tls_key: Option<PathBuf>,
    /// A JWKS file of the keys agents' cards must be signed with; a card that does not
    /// verify is not served [default: none, every card is served].
    #[arg(long, env = "MESH_TRUSTED_KEYS", value_name = "JWKS_FILE")]
    pub trusted_keys: Option<PathBuf>,
    /// A PKCS#8 PEM file of the key the gateway signs the cards it serves with (its public
    /// key set is served at /.well-known/jwks.json) [default: none, cards are unsigned].
    #[arg(
        long = "signing-key",
        env = "MESH_GATEWAY_SIGNING_KEY",
        value_name = "PEM_FILE"
    )]
    pub signing_key: Option<PathBuf>,
}

impl GatewayOptions {
    /// Fills what was given, and marks the command as one that starts a gateway.
    pub fn fill(&self, common: &mut Common, serve: &mut Serve) {
        serve.starts_gateway = true;
        common.gateway_name.clone_from(&self.gateway_name);
        serve.http_addr = self.http_addr;
        serve.public_url.clone_from(&self.public_url);
        serve.default_agent.clone_from(&self.default_agent);
        serve.max_batch = self.max_batch;
        serve.max_connections = self.max_connections;
        serve.tls_cert.clone_from(&self.tls_cert);
        serve.tls_key.clone_from(&self.tls_key);
        serve.trusted_keys.clone_from(&self.trusted_keys);
        serve.gateway_signing_key.clone_from(&self.signing_key);
    }
}

/// The gateway's task store.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Gateway: task store")]
pub struct StoreOptions {
    /// Where the gateway keeps its tasks (SQLite) [default: $XDG_DATA_HOME/mesh, else
    /// ~/.local/share/mesh].
    #[arg(long, env = "MESH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep the gateway's tasks in memory only (lost on restart).
    #[arg(long, env = "MESH_MEMORY_STORE", value_parser = FalseyValueParser::new())]
    pub memory_store: bool,
    /// Keep the gateway's tasks in PostgreSQL, shared with every gateway given the same
    /// database (`postgres://user:password@host:port/db`): replicas. The data directory then
    /// keeps only the gateway's id, and is used only when given.
    #[arg(
        long,
        env = "MESH_STORE",
        value_name = "URL",
        conflicts_with = "memory_store",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// With `--store`: how long another gateway must have been gone before this one takes
    /// its running tasks over, e.g. `5s` [default: 5s].
    #[arg(long, env = "MESH_TAKEOVER_GRACE", value_name = "DURATION", value_parser = parse_duration)]
    pub takeover_grace: Option<Duration>,
    /// The most bytes the gateway's task store keeps (tasks and their event logs, in memory
    /// and on disk), e.g. `512MiB`; over it finished tasks are evicted, then new tasks are
    /// refused [default: 1GiB].
    #[arg(long, env = "MESH_STORE_MAX_BYTES", value_name = "SIZE", value_parser = parse_bytes)]
    pub store_max_bytes: Option<usize>,
    /// The most bytes one task may take in the store; a task that grows past it is failed
    /// [default: 128MiB].
    #[arg(long, env = "MESH_STORE_MAX_TASK_BYTES", value_name = "SIZE", value_parser = parse_bytes)]
    pub store_max_task_bytes: Option<usize>,
}

impl StoreOptions {
    /// Fills what was given.
    pub fn fill(&self, serve: &mut Serve) {
        serve.data_dir.clone_from(&self.data_dir);
        serve.memory_store = self.memory_store;
        serve.store.clone_from(&self.store);
        serve.takeover_grace = self.takeover_grace;
        serve.store_max_bytes = self.store_max_bytes;
        serve.store_max_task_bytes = self.store_max_task_bytes;
    }
}

/// Who may call the gateway.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Gateway: authentication")]
pub struct AuthOptions {
    /// An API key the gateway accepts, `principal=secret` or `secret` (repeatable; the
    /// environment variable takes a comma-separated list). None: no authentication.
    #[arg(
        long = "api-key",
        env = "MESH_API_KEYS",
        value_name = "KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,
    /// A principal that may watch the bus traffic in the web console when API keys are on
    /// (repeatable; comma-separated in the environment variable). None: no one may.
    #[arg(
        long = "console-admin",
        env = "MESH_CONSOLE_ADMINS",
        value_name = "PRINCIPAL",
        value_delimiter = ','
    )]
    pub console_admins: Vec<String>,
}

impl AuthOptions {
    /// Fills what was given.
    pub fn fill(&self, serve: &mut Serve) {
        serve.api_keys.clone_from(&self.api_keys);
        serve.console_admins.clone_from(&self.console_admins);
    }
}

/// Which browser origins may call the gateway.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Gateway: CORS")]
pub struct CorsOptions {
    /// An origin browsers may call the gateway from, or `*` (repeatable; comma-separated in
    /// the environment variable).
    #[arg(
        long = "cors-origin",
        env = "MESH_CORS_ORIGINS",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
}

impl CorsOptions {
    /// Fills what was given.
    pub fn fill(&self, serve: &mut Serve) {
        serve.cors_origins.clone_from(&self.cors_origins);
    }
}

/// Push-notification webhooks.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Gateway: webhooks")]
pub struct WebhookOptions {
    /// Accept push-notification webhooks into loopback, private and link-local networks.
    #[arg(long, env = "MESH_ALLOW_PRIVATE_WEBHOOKS", value_parser = FalseyValueParser::new())]
    pub allow_private_webhooks: bool,
    /// A PEM file of CA(s) that `https://` webhooks' certificates may chain to, besides the
    /// system's roots.
    #[arg(long, env = "MESH_WEBHOOK_CA", value_name = "PEM_FILE")]
    pub webhook_ca: Option<PathBuf>,
    /// How long one webhook POST may take, e.g. `10s` or `500ms` [default: 10s].
    #[arg(long, env = "MESH_WEBHOOK_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub webhook_timeout: Option<Duration>,
    /// How many times a webhook delivery is tried before it is given up [default: 5].
    #[arg(long, env = "MESH_WEBHOOK_ATTEMPTS", value_name = "N")]
    pub webhook_attempts: Option<u32>,
    /// The wait before the first webhook retry, doubled after each one up to 30 s
    /// [default: 250ms].
    #[arg(long, env = "MESH_WEBHOOK_BACKOFF", value_name = "DURATION", value_parser = parse_duration)]
    pub webhook_backoff: Option<Duration>,
    /// How many webhook deliveries may wait; past it new ones are dropped and counted
    /// [default: 10000].
    #[arg(long, env = "MESH_WEBHOOK_QUEUE", value_name = "N")]
    pub webhook_queue: Option<usize>,
}

impl WebhookOptions {
    /// Fills what was given.
    pub fn fill(&self, serve: &mut Serve) {
        serve.allow_private_webhooks = self.allow_private_webhooks;
        serve.webhook_ca.clone_from(&self.webhook_ca);
        serve.webhook_timeout = self.webhook_timeout;
        serve.webhook_attempts = self.webhook_attempts;
        serve.webhook_backoff = self.webhook_backoff;
        serve.webhook_queue = self.webhook_queue;
    }
}

/// Everything a gateway reads, for `gateway` and `up`.
#[derive(Args, Debug, Clone, Default)]
pub struct GatewayGroups {
    #[command(flatten)]
    pub gateway: GatewayOptions,
    #[command(flatten)]
    pub store: StoreOptions,
    #[command(flatten)]
    pub auth: AuthOptions,
    #[command(flatten)]
    pub cors: CorsOptions,
    #[command(flatten)]
    pub webhooks: WebhookOptions,
}

impl GatewayGroups {
    /// Fills what was given.
    pub fn fill(&self, common: &mut Common, serve: &mut Serve) {
        self.gateway.fill(common, serve);
        self.store.fill(serve);
        self.auth.fill(serve);
        self.cors.fill(serve);
        self.webhooks.fill(serve);
    }
}

/// An agent.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Agent")]
pub struct AgentOptions {
    /// A PKCS#8 PEM file of the key the agent signs its card with [default: none, the card
    /// is unsigned].
    #[arg(long, env = "MESH_SIGNING_KEY", value_name = "PEM_FILE")]
    pub signing_key: Option<PathBuf>,
}

impl AgentOptions {
    /// Fills what was given.
    pub fn fill(&self, serve: &mut Serve) {
        serve.signing_key.clone_from(&self.signing_key);
    }
}

/// `mesh agent mcp`: which MCP server, and the agent it becomes.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "MCP server (mesh agent mcp)")]
pub struct McpOptions {
    /// The agent's name on the mesh (a topic segment: letters, digits, `-`, `_`, `.`).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Reach an MCP server over Streamable HTTP at this URL instead of running a command.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The environment variable that holds a bearer token for --url (the token itself never
    /// goes on the command line).
    #[arg(long, value_name = "VAR")]
    pub bearer_env: Option<String>,
    /// What the agent does [default: the server's name and its tools].
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
}

impl McpOptions {
    /// Whether any of these was given.
    pub fn given(&self) -> bool {
        self.name.is_some()
            || self.url.is_some()
            || self.bearer_env.is_some()
            || self.description.is_some()
    }
}

/// The commands that talk to a mesh: which gateway, and as which deployment on the bus.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Client")]
pub struct ClientOptions {
    /// The gateway to talk to [default: http://127.0.0.1:8080]; when it does not answer, the
    /// command goes over the bus.
    #[arg(
        long,
        env = "MESH_GATEWAY_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub gateway_url: Option<String>,
    /// A PEM file of the CA(s) an `https://` gateway's certificate chains to, besides the
    /// system's roots (a profile's `tls/ca.pem`).
    #[arg(long, env = "MESH_GATEWAY_CA", value_name = "PEM_FILE")]
    pub gateway_ca: Option<PathBuf>,
    /// The API key to send the gateway (`Authorization: Bearer`); a profile's
    /// `clients/<name>.key` holds one.
    #[arg(
        long,
        env = "MESH_GATEWAY_KEY",
        value_name = "KEY",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    pub gateway_key: Option<String>,
    /// The gateway deployment to ask as over the bus (its response topics; under an ACL,
    /// its account) [default: gateway].
    #[arg(long, env = "MESH_GATEWAY_NAME", value_name = "NAME")]
    pub gateway_name: Option<String>,
}

impl ClientOptions {
    /// Fills what was given.
    pub fn fill(&self, common: &mut Common) {
        common.gateway_url.clone_from(&self.gateway_url);
        common.gateway_ca.clone_from(&self.gateway_ca);
        common.gateway_key.clone_from(&self.gateway_key);
        common.gateway_name.clone_from(&self.gateway_name);
    }
}
