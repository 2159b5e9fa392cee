//! One set of names for configuration: flags, `MESH_*` environment variables, and an optional
//! TOML file (`--config`, `MESH_CONFIG`), in that order of precedence, then the defaults. The
//! flags and variables a command takes are its option groups' ([`crate::options`]); the file
//! is read for the keys of what the command runs ([`Serve::starts_gateway`],
//! [`Serve::starts_broker`]).
//!
//! | setting | flag | env | default |
//! | --- | --- | --- | --- |
//! | embedded broker listen address | `--broker-addr` | `MESH_BROKER_ADDR` | `127.0.0.1:1884` |
//! | broker to connect to | `--broker-url` | `MESH_BROKER_URL` | `mqtt://127.0.0.1:1884` |
//! | gateway listen address | `--http-addr` | `MESH_HTTP_ADDR` | `127.0.0.1:8080` |
//! | gateway to talk to | `--gateway-url` | `MESH_GATEWAY_URL` | `http://127.0.0.1:8080` |
//! | CA file of an `https://` gateway (besides the system's roots) | `--gateway-ca` | `MESH_GATEWAY_CA` | the system's roots |
//! | API key a client sends the gateway | `--gateway-key` | `MESH_GATEWAY_KEY` | none |
//! | CA file of an `mqtts://` broker | `--broker-ca` | `MESH_BROKER_CA` | the system's roots |
//! | namespace | `--namespace` | `MESH_NAMESPACE` | `mesh` |
//! | the gateway deployment's name (its broker account; `send`, `card`, `agents` ask as it over the bus) | `--gateway-name` | `MESH_GATEWAY_NAME` | `gateway` |
//! | default agent for `POST /` | `--default-agent` | `MESH_DEFAULT_AGENT` | `echo` in `up`, none otherwise |
//! | URL clients reach the gateway at | `--public-url` | `MESH_PUBLIC_URL` | the bound address |
//! | the gateway's durable task store | `--data-dir` | `MESH_DATA_DIR` | `$XDG_DATA_HOME/mesh`, else `~/.local/share/mesh` |
//! | keep tasks in memory only | `--memory-store` | `MESH_MEMORY_STORE` | off |
//! | bytes the task store keeps (tasks and event logs) | `--store-max-bytes` | `MESH_STORE_MAX_BYTES` | `1GiB` |
//! | bytes one task may take | `--store-max-task-bytes` | `MESH_STORE_MAX_TASK_BYTES` | `128MiB` |
//! | API keys (`principal=secret` or `secret`) | `--api-key` (repeatable) | `MESH_API_KEYS` (comma-separated) | none: no auth |
//! | principals that may watch the bus in the console with API keys on | `--console-admin` (repeatable) | `MESH_CONSOLE_ADMINS` (comma-separated) | none |
//! | CORS origins (`*` for any) | `--cors-origin` (repeatable) | `MESH_CORS_ORIGINS` (comma-separated) | none: no CORS |
//! | webhooks into private networks | `--allow-private-webhooks` | `MESH_ALLOW_PRIVATE_WEBHOOKS` | off |
//! | CA file of `https://` webhooks (besides the system's roots) | `--webhook-ca` | `MESH_WEBHOOK_CA` | the system's roots only |
//! | how long one webhook POST may take | `--webhook-timeout` | `MESH_WEBHOOK_TIMEOUT` | `10s` |
//! | tries of one webhook delivery before it is given up | `--webhook-attempts` | `MESH_WEBHOOK_ATTEMPTS` | 5 |
//! | wait before the first webhook retry (doubled each time, at most 30 s) | `--webhook-backoff` | `MESH_WEBHOOK_BACKOFF` | `250ms` |
//! | webhook deliveries that may wait (past it new ones are dropped) | `--webhook-queue` | `MESH_WEBHOOK_QUEUE` | 10000 |
//! | largest MQTT packet a bus client sends or takes in, and the embedded broker accepts | `--max-packet-size` | `MESH_MAX_PACKET_SIZE` | `16MiB` |
//! | the embedded broker's accounts (Mosquitto's `password_file` format) | `--password-file` | `MESH_BROKER_PASSWORD_FILE` | none: anonymous clients accepted |
//! | the embedded broker's ACL (Mosquitto's `acl_file` format; with the password file) | `--acl-file` | `MESH_BROKER_ACL_FILE` | none |
//! | the embedded broker's id in a cluster of brokers (a `mesh` built with feature `cluster`) | `--cluster-node-id` | `MESH_CLUSTER_NODE_ID` | none: a broker alone |
//! | where that cluster node listens for its peers (gRPC) | `--cluster-addr` | `MESH_CLUSTER_ADDR` | `127.0.0.1:5363` |
//! | the cluster's other nodes, `id@host:port` | `--cluster-peer` (repeatable) | `MESH_CLUSTER_PEERS` (comma-separated) | none |
//! | most requests in one JSON-RPC batch | `--max-batch` | `MESH_MAX_BATCH` | 100 |
//! | worker threads of the async runtime (0: one per core) | `--worker-threads` | `MESH_WORKER_THREADS` | 1 for `broker`, `gateway`, `agent` and each part of `up`, one per core otherwise |
//! | CPU scheduling policy of a serving process (Linux) | `--sched-policy auto\|batch\|normal` | `MESH_SCHED_POLICY` | `auto` for `agent`, `normal` otherwise |
//! | the gateway's TLS certificate chain and private key (PEM; both or neither) | `--tls-cert`, `--tls-key` | `MESH_TLS_CERT`, `MESH_TLS_KEY` | none: plain HTTP |
//! | the gateway's trust store of agent-card keys (JWKS) | `--trusted-keys` | `MESH_TRUSTED_KEYS` | none: cards are not checked |
//! | the key the gateway signs served cards with (PKCS#8 PEM) | `gateway --signing-key` | `MESH_GATEWAY_SIGNING_KEY` | none: unsigned |
//! | the key an agent signs its card with (PKCS#8 PEM) | `agent --signing-key` | `MESH_SIGNING_KEY` | none: unsigned |
//!
//! The TOML file uses the same names in snake case (`broker_url = "mqtt://…"`; the lists are
//! `api_keys = […]` and `cors_origins = […]`; durations are strings such as `"10s"`, sizes
//! strings such as `"512MiB"`).
//!
//! `Debug` of these structs never shows a secret: broker and gateway URLs are redacted
//! ([`redact_url`]) and API keys hidden; the help never shows the environment's values of
//! `MESH_BROKER_URL` and `MESH_API_KEYS`.

use mesh_core::bus::redact_url;
use mesh_gateway::{ApiKey, TlsFiles};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default address of the embedded broker: 1883 is often taken by a system broker.
pub const DEFAULT_BROKER_ADDR: &str = "127.0.0.1:1884";
/// The default address of the gateway.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";
/// The default namespace.
pub const DEFAULT_NAMESPACE: &str = "mesh";

/// What the command line (flags and environment) gave that every command may read: filled by
/// the option groups of the command run ([`crate::options`]), `None` for what it does not
/// take.
#[derive(Clone, Default)]
pub struct Common {
    pub config: Option<PathBuf>,
    pub namespace: Option<String>,
    pub broker_url: Option<String>,
    pub broker_ca: Option<PathBuf>,
    pub gateway_name: Option<String>,
    pub gateway_url: Option<String>,
    pub gateway_ca: Option<PathBuf>,
    pub gateway_key: Option<String>,
    pub log_format: Option<LogFormat>,
    pub worker_threads: Option<usize>,
    pub sched_policy: Option<SchedPolicySetting>,
    pub max_packet_size: Option<usize>,
}

/// What the command line gave for the parts a command serves (broker, gateway, agent).
#[derive(Clone, Default)]
pub struct Serve {
    /// The command starts a gateway: only then is its data directory resolved (and its
    /// absence an error).
    pub starts_gateway: bool,
    /// The command starts the embedded broker: only then are the broker's keys of the config
    /// file read.
    pub starts_broker: bool,
    pub broker_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub default_agent: Option<String>,
    pub public_url: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub memory_store: bool,
    pub store: Option<String>,
    pub takeover_grace: Option<Duration>,
    pub store_max_bytes: Option<usize>,
    pub store_max_task_bytes: Option<usize>,
    pub api_keys: Vec<String>,
    pub console_admins: Vec<String>,
    pub cors_origins: Vec<String>,
    pub allow_private_webhooks: bool,
    pub webhook_ca: Option<PathBuf>,
    pub webhook_timeout: Option<Duration>,
    pub webhook_attempts: Option<u32>,
    pub webhook_backoff: Option<Duration>,
    pub webhook_queue: Option<usize>,
    pub max_batch: Option<usize>,
    pub max_connections: Option<usize>,
    pub broker_password_file: Option<PathBuf>,
    pub broker_acl_file: Option<PathBuf>,
    pub cluster_node_id: Option<u64>,
    pub cluster_addr: Option<SocketAddr>,
    pub cluster_peers: Vec<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub trusted_keys: Option<PathBuf>,
    pub gateway_signing_key: Option<PathBuf>,
    pub signing_key: Option<PathBuf>,
}

/// How log lines look.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The CPU scheduling policy of a process (`mesh_core::sched`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedPolicySetting {
    /// Batch while the cores are busy, Linux's default while they idle.
    Auto,
    /// Linux's default: a woken process preempts the one running.
    Normal,
    /// A woken process waits for an idle core, or for the running one to block.
    Batch,
}

/// The TOML file.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    namespace: Option<String>,
    gateway_name: Option<String>,
    broker_url: Option<String>,
    broker_ca: Option<PathBuf>,
    gateway_url: Option<String>,
    gateway_ca: Option<PathBuf>,
    gateway_key: Option<String>,
    log_format: Option<LogFormat>,
    worker_threads: Option<usize>,
    sched_policy: Option<SchedPolicySetting>,
    broker_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    default_agent: Option<String>,
    public_url: Option<String>,
    data_dir: Option<PathBuf>,
    memory_store: Option<bool>,
    store: Option<String>,
    takeover_grace: Option<String>,
    store_max_bytes: Option<String>,
    store_max_task_bytes: Option<String>,
    api_keys: Option<Vec<String>>,
    console_admins: Option<Vec<String>>,
    cors_origins: Option<Vec<String>>,
    allow_private_webhooks: Option<bool>,
    webhook_ca: Option<PathBuf>,
    webhook_timeout: Option<String>,
    webhook_attempts: Option<u32>,
    webhook_backoff: Option<String>,
    webhook_queue: Option<usize>,
    max_packet_size: Option<String>,
    max_batch: Option<usize>,
    max_connections: Option<usize>,
    broker_password_file: Option<PathBuf>,
    broker_acl_file: Option<PathBuf>,
    cluster_node_id: Option<u64>,
    cluster_addr: Option<SocketAddr>,
    cluster_peers: Option<Vec<String>>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    trusted_keys: Option<PathBuf>,
    gateway_signing_key: Option<PathBuf>,
    signing_key: Option<PathBuf>,
}

impl File {
    /// The file as the command run reads it: the keys of a gateway or of the embedded broker
    /// only when it starts one, so that one file serves every command and a key of another
    /// command's (even a bad value) never stops this one.
    fn for_command(self, serve: &Serve) -> File {
        let mut file = self;
        if !serve.starts_gateway {
            file = File {
                http_addr: None,
                default_agent: None,
                public_url: None,
                data_dir: None,
                memory_store: None,
                store: None,
                takeover_grace: None,
                store_max_bytes: None,
                store_max_task_bytes: None,
                api_keys: None,
                console_admins: None,
                cors_origins: None,
                allow_private_webhooks: None,
                webhook_ca: None,
                webhook_timeout: None,
                webhook_attempts: None,
                webhook_backoff: None,
                webhook_queue: None,
                max_batch: None,
                max_connections: None,
                tls_cert: None,
                tls_key: None,
                trusted_keys: None,
                gateway_signing_key: None,
                ..file
            };
        }
        if !serve.starts_broker {
            file = File {
                broker_addr: None,
                broker_password_file: None,
                broker_acl_file: None,
                cluster_node_id: None,
                cluster_addr: None,
                cluster_peers: None,
                ..file
            };
        }
        file
    }
}

/// Every setting, resolved.
#[derive(Clone)]
pub struct Settings {
    pub namespace: String,
    pub gateway_name: String,
    /// `None`: not given anywhere (`up` then starts the embedded broker).
    pub broker_url: Option<String>,
    /// The CA file for an `mqtts://` broker; `None`: the system's roots.
    pub broker_ca: Option<PathBuf>,
    pub gateway_url: String,
    /// The CA file of an `https://` gateway, besides the system's roots.
    pub gateway_ca: Option<PathBuf>,
    /// The API key a client sends the gateway.
    pub gateway_key: Option<String>,
    pub log_format: LogFormat,
    /// Worker threads of the async runtime, when given (0: one per core); `None`: the
    /// command's default (see [`Settings::runtime_threads`]).
    pub worker_threads: Option<usize>,
    /// The CPU scheduling policy, when given; `None`: the command's default (see
    /// [`Settings::sched_policy`]).
    pub sched_policy: Option<SchedPolicySetting>,
    pub broker_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub default_agent: Option<String>,
    pub public_url: Option<String>,
    /// The gateway's data directory; `None` with `--memory-store`, and with `--store` when
    /// none is given.
    pub data_dir: Option<PathBuf>,
    /// The PostgreSQL store the gateway shares (`--store`).
    pub store_url: Option<String>,
    /// How long another gateway must be gone before this one takes its tasks over.
    pub takeover_grace: Duration,
    pub store_max_bytes: usize,
    pub store_max_task_bytes: usize,
    pub api_keys: Vec<ApiKey>,
    /// The principals that may watch the bus in the console when API keys are on.
    pub console_admins: Vec<String>,
    pub cors_origins: Vec<String>,
    pub allow_private_webhooks: bool,
    /// The CA file for `https://` webhooks; `None`: the system's roots only.
    pub webhook_ca: Option<PathBuf>,
    pub webhook_timeout: Duration,
    pub webhook_attempts: u32,
    pub webhook_backoff: Duration,
    pub webhook_queue: usize,
    /// The bus clients' and the embedded broker's packet limit.
    pub max_packet_size: usize,
    pub max_batch: usize,
    pub max_connections: usize,
    /// The embedded broker's password and ACL files, when it authenticates.
    pub broker_access: Option<(PathBuf, PathBuf)>,
    /// The embedded broker's place in a cluster of brokers, when it is a node of one.
    pub cluster: Option<ClusterSettings>,
    /// The gateway's certificate and key; `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// The gateway's trust store (a JWKS file); `None`: cards are not checked.
    pub trusted_keys: Option<PathBuf>,
    /// The gateway's card-signing key (a PEM file); `None`: served cards are unsigned.
    pub gateway_signing_key: Option<PathBuf>,
    /// An agent's card-signing key (a PEM file); `None`: its card is unsigned.
    pub signing_key: Option<PathBuf>,
}

/// A cluster node's settings, as given (the peers are read by the broker, which says
/// what is wrong with one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    pub node_id: u64,
    pub grpc_addr: SocketAddr,
    /// `id@host:port` each.
    pub peers: Vec<String>,
}

/// Where a cluster node listens for its peers unless told.
pub const DEFAULT_CLUSTER_ADDR: &str = "127.0.0.1:5363";

/// The default data directory: `$XDG_DATA_HOME/mesh`, else `~/.local/share/mesh`.
pub fn default_data_dir() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").and_then(absolute) {
        return Some(xdg.join("mesh"));
    }
    std::env::var_os("HOME")
        .and_then(absolute)
        .map(|home| home.join(".local").join("share").join("mesh"))
}

/// More runtime workers than any host has cores: a typo, refused rather than spawned.
const MAX_WORKER_THREADS: usize = 1024;

/// The most `--max-connections` accepted: far past what one process's open files allow.
const MAX_CONNECTIONS_LIMIT: usize = 10_000_000;

impl Settings {
    /// The async runtime's worker threads (0: one per core): the setting when given, else 1
    /// for the parts that carry the mesh's traffic (`broker`, `gateway`, `agent`, and each of
    /// `up`'s parts, which run on runtimes of their own) and one per core for the others.
    ///
    /// Why one: every request crosses tasks (the gateway's HTTP connection and its bus; the
    /// broker's client connections; an agent's bus and its handler), and with several workers
    /// tokio hands the request from thread to thread (a futex wake and a context switch each
    /// way; `strace` counted four futex calls per request in the gateway). On one worker the
    /// bus also acknowledges a request in the same write as the reply (`bus::driver`). On 2
    /// cores one worker answers 25 to 35 % sooner at concurrency 1 and serves as many requests
    /// per second at concurrency 64 (docs/benchmarks.md). More workers pay off for one process
    /// on a large host under high load, for an agent whose handlers compute, and they keep a
    /// request that decodes a multi-MiB payload from delaying the others meanwhile.
    ///
    /// One worker is tokio's current-thread scheduler: the whole process, `main`'s own future
    /// included, runs on its one thread (a multi-thread runtime of one worker still polls
    /// `main`'s future on a second thread), for about 2 % fewer instructions per request.
    pub fn runtime_threads(&self, carries_traffic_alone: bool) -> usize {
        self.worker_threads
            .unwrap_or(if carries_traffic_alone { 1 } else { 0 })
    }

    /// The CPU scheduling policy: the setting when given, else `auto` for an agent (`mesh
    /// agent`), whose wake-ups are the broker's deliveries, and Linux's default for the other
    /// commands: the gateway answers HTTP clients (batch did not raise its rate, measured at
    /// concurrency 64), and `up`'s parts wake each other within one process.
    pub fn sched_policy(&self, is_agent: bool) -> SchedPolicySetting {
        match self.sched_policy {
            Some(setting) => setting,
            None if is_agent => SchedPolicySetting::Auto,
            None => SchedPolicySetting::Normal,
        }
    }

    /// Flags and environment first (clap has read both), then the file, then the defaults.
    pub fn resolve(common: &Common, serve: &Serve) -> Result<Settings, String> {
        let file = match &common.config {
            Some(path) => read_file(path)?.for_command(serve),
            None => File::default(),
        };
        let memory_store = serve.memory_store || file.memory_store.unwrap_or(false);
        let store_url = serve.store.clone().or(file.store);
        if let Some(url) = &store_url {
            if memory_store {
                return Err("--store and --memory-store name two task stores: give one".into());
            }
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(format!(
                    "--store {}: not a PostgreSQL URL (postgres://user:password@host:port/database)",
                    mesh_core::bus::redact_url(url)
                ));
            }
        }
        let data_dir = if memory_store {
            None
        } else {
            match serve.data_dir.clone().or(file.data_dir) {
                Some(dir) => Some(dir),
                // Only a command that starts a gateway needs one; a shared store none.
                None if !serve.starts_gateway || store_url.is_some() => None,
                None => Some(default_data_dir().ok_or(
                    "no data directory for the gateway's tasks: neither HOME nor XDG_DATA_HOME is set; \
                     give --data-dir (or --memory-store)",
                )?),
            }
        };
        let store_limits = mesh_gateway::StoreLimits::default();
        let size =
            |flag: Option<usize>, in_file: Option<String>, key: &str, default: usize| match flag {
                Some(bytes) => Ok(bytes),
                None => in_file
                    .map(|text| {
                        parse_bytes(&text).map_err(|e| format!("{key} in the config file: {e}"))
                    })
                    .unwrap_or(Ok(default)),
            };
        let store_max_bytes = size(
            serve.store_max_bytes,
            file.store_max_bytes,
            "store_max_bytes",
            store_limits.max_bytes,
        )?;
        let store_max_task_bytes = size(
            serve.store_max_task_bytes,
            file.store_max_task_bytes,
            "store_max_task_bytes",
            store_limits.max_task_bytes,
        )?;
        for (key, bytes) in [
            ("store_max_bytes", store_max_bytes),
            ("store_max_task_bytes", store_max_task_bytes),
        ] {
            if bytes == 0 {
                let flag = key.replace('_', "-");
                return Err(format!("{key} is 0: give more than 0 (--{flag})"));
            }
        }
        let key_texts = if serve.api_keys.is_empty() {
            file.api_keys.unwrap_or_default()
        } else {
            serve.api_keys.clone()
        };
        let api_keys = key_texts
            .iter()
            .filter(|k| !k.trim().is_empty())
            .enumerate()
            .map(|(i, k)| ApiKey::parse(k, i + 1).map_err(|e| format!("{e} (--api-key)")))
            .collect::<Result<Vec<_>, _>>()?;
        let console_admins: Vec<String> = if serve.console_admins.is_empty() {
            file.console_admins.unwrap_or_default()
        } else {
            serve.console_admins.clone()
        }
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
        let cors_origins = if serve.cors_origins.is_empty() {
            file.cors_origins.unwrap_or_default()
        } else {
            serve.cors_origins.clone()
        };
        let worker_threads = common.worker_threads.or(file.worker_threads);
        if let Some(n) = worker_threads.filter(|&n| n > MAX_WORKER_THREADS) {
            return Err(format!(
                "worker_threads is {n}: give 0 (one per core) or 1 to {MAX_WORKER_THREADS} (--worker-threads)"
            ));
        }
        let webhooks = mesh_gateway::GatewayConfig::default();
        let duration = |flag: Option<Duration>, in_file: Option<String>, key: &str| match flag {
            Some(duration) => Ok(Some(duration)),
            None => in_file
                .map(|text| {
                    parse_duration(&text).map_err(|e| format!("{key} in the config file: {e}"))
                })
                .transpose(),
        };
        let webhook_timeout = duration(
            serve.webhook_timeout,
            file.webhook_timeout,
            "webhook_timeout",
        )?
        .unwrap_or(webhooks.webhook_timeout);
        let takeover_grace = duration(serve.takeover_grace, file.takeover_grace, "takeover_grace")?
            .unwrap_or(mesh_gateway::GatewayConfig::default().takeover_grace);
        let webhook_backoff = duration(
            serve.webhook_backoff,
            file.webhook_backoff,
            "webhook_backoff",
        )?
        .unwrap_or(webhooks.webhook_backoff);
        let webhook_attempts = serve
            .webhook_attempts
            .or(file.webhook_attempts)
            .unwrap_or(webhooks.webhook_attempts);
        let webhook_queue = serve
            .webhook_queue
            .or(file.webhook_queue)
            .unwrap_or(webhooks.webhook_queue);
        let max_packet_size = size(
            common.max_packet_size,
            file.max_packet_size,
            "max_packet_size",
            mesh_core::bus::DEFAULT_MAX_PACKET_SIZE,
        )?;
        let packet_range =
            mesh_core::bus::MIN_MAX_PACKET_SIZE..=mesh_core::bus::MQTT_MAX_PACKET_SIZE;
        if !packet_range.contains(&max_packet_size) {
            return Err(format!(
                "max_packet_size is {max_packet_size}: give {} to {} bytes (--max-packet-size)",
                packet_range.start(),
                packet_range.end()
            ));
        }
        let max_batch = serve
            .max_batch
            .or(file.max_batch)
            .unwrap_or(webhooks.max_batch);
        let max_connections = serve
            .max_connections
            .or(file.max_connections)
            .unwrap_or(webhooks.max_connections);
        if max_connections > MAX_CONNECTIONS_LIMIT {
            return Err(format!(
                "max_connections is {max_connections}: give 1 to {MAX_CONNECTIONS_LIMIT} \
                 (--max-connections)"
            ));
        }
        for (key, is_zero) in [
            ("max_batch", max_batch == 0),
            ("max_connections", max_connections == 0),
            ("webhook_timeout", webhook_timeout.is_zero()),
            ("webhook_attempts", webhook_attempts == 0),
            ("webhook_queue", webhook_queue == 0),
        ] {
            if is_zero {
                let flag = key.replace('_', "-");
                return Err(format!("{key} is 0: give more than 0 (--{flag})"));
            }
        }
        let tls = match (
            serve.tls_cert.clone().or(file.tls_cert),
            serve.tls_key.clone().or(file.tls_key),
        ) {
            (Some(cert_file), Some(key_file)) => Some(TlsFiles {
                cert_file,
                key_file,
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err("--tls-cert needs --tls-key (the certificate's private key): give both, or neither for plain HTTP".into());
            }
            (None, Some(_)) => {
                return Err("--tls-key needs --tls-cert (the certificate chain): give both, or neither for plain HTTP".into());
            }
        };
        let cors_origins = cors_origins
            .into_iter()
            .map(|o| o.trim().to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        let broker_access = match (
            serve
                .broker_password_file
                .clone()
                .or(file.broker_password_file),
            serve.broker_acl_file.clone().or(file.broker_acl_file),
        ) {
            (Some(passwords), Some(acl)) => Some((passwords, acl)),
            (None, None) => None,
            _ => {
                return Err(
                    "give the broker's --password-file and --acl-file together (an account \
                     without rights, or rights without accounts, is refused)"
                        .into(),
                );
            }
        };
        let cluster_peers: Vec<String> = if serve.cluster_peers.is_empty() {
            file.cluster_peers.unwrap_or_default()
        } else {
            serve.cluster_peers.clone()
        }
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
        let cluster = match (
            serve.cluster_node_id.or(file.cluster_node_id),
            cluster_peers,
        ) {
            (None, peers) if peers.is_empty() => {
                if serve.cluster_addr.or(file.cluster_addr).is_some() {
                    return Err(
                        "--cluster-addr needs --cluster-node-id and --cluster-peer (a \
                                broker alone listens for no peers)"
                            .into(),
                    );
                }
                None
            }
            (Some(node_id), peers) if !peers.is_empty() => Some(ClusterSettings {
                node_id,
                grpc_addr: serve
                    .cluster_addr
                    .or(file.cluster_addr)
                    .unwrap_or_else(|| DEFAULT_CLUSTER_ADDR.parse().expect("a valid default")),
                peers,
            }),
            (Some(_), _) => {
                return Err(
                    "--cluster-node-id needs the other nodes: give --cluster-peer \
                            ID@HOST:PORT for each"
                        .into(),
                );
            }
            (None, _) => {
                return Err("--cluster-peer needs --cluster-node-id (this node's id)".into());
            }
        };
        Ok(Settings {
            broker_access,
            cluster,
            trusted_keys: serve.trusted_keys.clone().or(file.trusted_keys),
            gateway_signing_key: serve
                .gateway_signing_key
                .clone()
                .or(file.gateway_signing_key),
            signing_key: serve.signing_key.clone().or(file.signing_key),
            data_dir,
            store_url,
            takeover_grace,
            store_max_bytes,
            store_max_task_bytes,
            api_keys,
            console_admins,
            cors_origins,
            allow_private_webhooks: serve.allow_private_webhooks
                || file.allow_private_webhooks.unwrap_or(false),
            webhook_ca: serve.webhook_ca.clone().or(file.webhook_ca),
            webhook_timeout,
            webhook_attempts,
            webhook_backoff,
            webhook_queue,
            max_packet_size,
            max_batch,
            max_connections,
            tls,
            namespace: common
                .namespace
                .clone()
                .or(file.namespace)
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            gateway_name: common
                .gateway_name
                .clone()
                .or(file.gateway_name)
                .unwrap_or_else(|| mesh_gateway::DEFAULT_GATEWAY_NAME.into()),
            broker_url: common.broker_url.clone().or(file.broker_url),
            gateway_ca: common.gateway_ca.clone().or(file.gateway_ca),
            gateway_key: common.gateway_key.clone().or(file.gateway_key),
            gateway_url: common
                .gateway_url
                .clone()
                .or(file.gateway_url)
                .unwrap_or_else(|| format!("http://{DEFAULT_HTTP_ADDR}")),
            log_format: common.log_format.or(file.log_format).unwrap_or_default(),
            worker_threads,
            sched_policy: common.sched_policy.or(file.sched_policy),
            broker_ca: common.broker_ca.clone().or(file.broker_ca),
            broker_addr: serve
                .broker_addr
                .or(file.broker_addr)
                .unwrap_or_else(|| DEFAULT_BROKER_ADDR.parse().expect("a valid default")),
            http_addr: serve
                .http_addr
                .or(file.http_addr)
                .unwrap_or_else(|| DEFAULT_HTTP_ADDR.parse().expect("a valid default")),
            default_agent: serve.default_agent.clone().or(file.default_agent),
            public_url: serve.public_url.clone().or(file.public_url),
        })
    }

    /// The broker URL clients connect to: the one given, else the embedded broker's default.
    pub fn broker_url_or_default(&self) -> String {
        self.broker_url
            .clone()
            .unwrap_or_else(|| format!("mqtt://{}", self.broker_addr))
    }
}

/// A duration written as a whole number and a unit: `ms`, `s`, `m` or `h` (`250ms`, `10s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write it as 250ms, 10s, 2m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write it as 250ms, 10s, 2m or 1h"))?;
    let millis_per_unit = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("`{text}`: the unit is one of ms, s, m, h")),
    };
    number
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// A size in bytes: a whole number, optionally with a unit `B`, `KiB`, `MiB` or `GiB`
/// (`1048576`, `512MiB`, `1GiB`).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size: write it as 1048576, 512MiB or 1GiB"))?;
    let per_unit: usize = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(format!("`{text}`: the unit is one of B, KiB, MiB, GiB")),
    };
    number
        .checked_mul(per_unit)
        .ok_or_else(|| format!("`{text}` is too large"))
}

fn read_file(path: &Path) -> Result<File, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    // toml's own message quotes the line, which may hold a broker password or an API key:
    // say where and what, not the line.
    toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|span| {
                format!(
                    ", line {}",
                    1 + text[..span.start.min(text.len())].matches('\n').count()
                )
            })
            .unwrap_or_default();
        format!("config file {}{line}: {}", path.display(), e.message())
    })
}

/// A URL as `Debug` shows it: redacted.
struct Shown<'a>(&'a str);

impl std::fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&redact_url(self.0), f)
    }
}

/// API key texts as `Debug` shows them: as many `***`.
struct HiddenKeys<'a>(&'a [String]);

impl std::fmt::Debug for HiddenKeys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|_| "***"))
            .finish()
    }
}

impl std::fmt::Debug for Common {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Common")
            .field("config", &self.config)
            .field("namespace", &self.namespace)
            .field("broker_url", &self.broker_url.as_deref().map(Shown))
            .field("broker_ca", &self.broker_ca)
            .field("gateway_url", &self.gateway_url.as_deref().map(Shown))
            .field("log_format", &self.log_format)
            .field("worker_threads", &self.worker_threads)
            .field("sched_policy", &self.sched_policy)
            .field("max_packet_size", &self.max_packet_size)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("broker_addr", &self.broker_addr)
            .field("http_addr", &self.http_addr)
            .field("default_agent", &self.default_agent)
            .field("public_url", &self.public_url.as_deref().map(Shown))
            .field("data_dir", &self.data_dir)
            .field("memory_store", &self.memory_store)
            .field("store", &self.store.as_deref().map(Shown))
            .field("api_keys", &HiddenKeys(&self.api_keys))
            .field("cors_origins", &self.cors_origins)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("namespace", &self.namespace)
            .field("broker_url", &self.broker_url.as_deref().map(Shown))
            .field("broker_ca", &self.broker_ca)
            .field("gateway_url", &Shown(&self.gateway_url))
            .field("broker_addr", &self.broker_addr)
            .field("cluster", &self.cluster)
            .field("http_addr", &self.http_addr)
            .field("default_agent", &self.default_agent)
            .field("public_url", &self.public_url.as_deref().map(Shown))
            .field("data_dir", &self.data_dir)
            .field("store_url", &self.store_url.as_deref().map(Shown))
            .field("api_keys", &self.api_keys)
            .field("cors_origins", &self.cors_origins)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a command that starts a gateway and the embedded broker was given: nothing.
    fn serving() -> Serve {
        Serve {
            starts_gateway: true,
            starts_broker: true,
            ..Serve::default()
        }
    }

    #[test]
    fn a_cluster_node_needs_its_id_and_its_peers() {
        let common = Common::default();
        let node = |id: Option<u64>, addr: Option<&str>, peers: &[&str]| Serve {
            cluster_node_id: id,
            cluster_addr: addr.map(|a| a.parse().unwrap()),
            cluster_peers: peers.iter().map(|p| p.to_string()).collect(),
            ..serving()
        };
        let settings = Settings::resolve(&common, &node(Some(1), None, &["2@b:5363"])).unwrap();
        assert_eq!(
            settings.cluster,
            Some(ClusterSettings {
                node_id: 1,
                grpc_addr: DEFAULT_CLUSTER_ADDR.parse().unwrap(),
                peers: vec!["2@b:5363".into()],
            })
        );
        assert_eq!(
            Settings::resolve(&common, &serving()).unwrap().cluster,
            None
        );
        for (serve, says) in [
            (node(Some(1), None, &[]), "--cluster-peer"),
            (node(None, None, &["2@b:5363"]), "--cluster-node-id"),
            (node(None, Some("0.0.0.0:5363"), &[]), "--cluster-addr"),
        ] {
            let error = Settings::resolve(&common, &serve).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn flags_beat_the_file_which_beats_the_defaults() {
        let dir = std::env::temp_dir().join(format!("mesh-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mesh.toml");
        std::fs::write(
            &path,
            "namespace = \"from-file\"\nhttp_addr = \"127.0.0.1:9999\"\n",
        )
        .unwrap();
        let common = Common {
            config: Some(path.clone()),
            namespace: Some("from-flag".into()),
            ..Common::default()
        };
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.namespace, "from-flag");
        assert_eq!(settings.http_addr.port(), 9999);
        assert_eq!(settings.broker_addr.port(), 1884);
        assert_eq!(settings.broker_url_or_default(), "mqtt://127.0.0.1:1884");
        assert!(settings.api_keys.is_empty() && !settings.allow_private_webhooks);
        assert_eq!(settings.runtime_threads(true), 1);
        assert_eq!(settings.runtime_threads(false), 0);
        assert_eq!(settings.sched_policy(true), SchedPolicySetting::Auto);
        assert_eq!(settings.sched_policy(false), SchedPolicySetting::Normal);
        std::fs::write(
            &path,
            "data_dir = \"/tmp/x\"\napi_keys = [\"alice=a\", \"b\"]\ncors_origins = [\"*\"]\n",
        )
        .unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.data_dir.as_deref(), Some(Path::new("/tmp/x")));
        assert_eq!(settings.api_keys[0].principal, "alice");
        assert_eq!(settings.api_keys[1].principal, "key-2");
        assert_eq!(settings.cors_origins, ["*"]);
        assert_eq!(settings.webhook_ca, None);
        std::fs::write(
            &path,
            "webhook_ca = \"/tmp/ca.pem\"\nworker_threads = 3\nsched_policy = \"normal\"\n",
        )
        .unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.runtime_threads(true), 3);
        assert_eq!(settings.sched_policy(true), SchedPolicySetting::Normal);
        std::fs::write(&path, "sched_policy = \"fastest\"\n").unwrap();
        let error = Settings::resolve(&common, &serving()).err().unwrap();
        assert!(
            error.contains("fastest") && error.contains("auto"),
            "{error}"
        );
        std::fs::write(
            &path,
            "webhook_ca = \"/tmp/ca.pem\"\nworker_threads = 3\nsched_policy = \"normal\"\n",
        )
        .unwrap();
        let flag = Common {
            worker_threads: Some(0),
            sched_policy: Some(SchedPolicySetting::Batch),
            ..common.clone()
        };
        let settings_flag = Settings::resolve(&flag, &serving()).unwrap();
        assert_eq!(settings_flag.runtime_threads(true), 0);
        assert_eq!(settings_flag.sched_policy(false), SchedPolicySetting::Batch);
        let absurd = Common {
            worker_threads: Some(100_000),
            ..common.clone()
        };
        let error = Settings::resolve(&absurd, &serving()).unwrap_err();
        assert!(error.contains("worker_threads is 100000"), "{error}");
        assert_eq!(
            settings.webhook_ca.as_deref(),
            Some(Path::new("/tmp/ca.pem"))
        );
        let memory = Serve {
            memory_store: true,
            api_keys: vec!["bob=".into()],
            ..serving()
        };
        let error = Settings::resolve(&common, &memory).unwrap_err();
        assert!(error.contains("empty"), "{error}");
        assert_eq!(settings.webhook_timeout, Duration::from_secs(10));
        assert_eq!(settings.webhook_attempts, 5);
        std::fs::write(
            &path,
            "webhook_timeout = \"2m\"\nwebhook_backoff = \"1s\"\nwebhook_attempts = 9\nwebhook_queue = 7\n",
        )
        .unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.webhook_timeout, Duration::from_secs(120));
        assert_eq!(settings.webhook_backoff, Duration::from_secs(1));
        assert_eq!((settings.webhook_attempts, settings.webhook_queue), (9, 7));
        let flags = Serve {
            webhook_timeout: Some(Duration::from_millis(500)),
            webhook_attempts: Some(2),
            ..serving()
        };
        let settings = Settings::resolve(&common, &flags).unwrap();
        assert_eq!(settings.webhook_timeout, Duration::from_millis(500));
        assert_eq!((settings.webhook_attempts, settings.webhook_queue), (2, 7));
        let zero = Serve {
            webhook_attempts: Some(0),
            ..serving()
        };
        let error = Settings::resolve(&common, &zero).unwrap_err();
        assert!(error.contains("webhook_attempts is 0"), "{error}");
        std::fs::write(&path, "webhook_timeout = \"10\"\n").unwrap();
        let error = Settings::resolve(&common, &serving()).unwrap_err();
        assert!(
            error.contains("webhook_timeout in the config file") && error.contains("no unit"),
            "{error}"
        );
        std::fs::write(&path, "nonsense = 1\n").unwrap();
        let error = Settings::resolve(&common, &serving()).unwrap_err();
        assert!(error.contains("nonsense"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn sizes_of_the_task_store() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes(" 512MiB "), Ok(512 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        for bad in [
            "",
            "MiB",
            "1.5GiB",
            "-1",
            "1 GiB",
            "1GB",
            "99999999999999999999GiB",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} accepted");
        }
        let dir = std::env::temp_dir().join(format!("mesh-settings-size-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mesh.toml");
        let common = Common {
            config: Some(path.clone()),
            ..Common::default()
        };
        std::fs::write(&path, "memory_store = true\n").unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.store_max_bytes, 1 << 30);
        assert_eq!(settings.store_max_task_bytes, 128 << 20);
        std::fs::write(
            &path,
            "memory_store = true\nstore_max_bytes = \"256MiB\"\nstore_max_task_bytes = \"8MiB\"\n",
        )
        .unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.store_max_bytes, 256 << 20);
        assert_eq!(settings.store_max_task_bytes, 8 << 20);
        let flags = Serve {
            store_max_bytes: Some(1000),
            ..serving()
        };
        let settings = Settings::resolve(&common, &flags).unwrap();
        assert_eq!(settings.store_max_bytes, 1000);
        let zero = Serve {
            store_max_task_bytes: Some(0),
            ..serving()
        };
        let error = Settings::resolve(&common, &zero).unwrap_err();
        assert!(error.contains("store_max_task_bytes is 0"), "{error}");
        std::fs::write(&path, "memory_store = true\nstore_max_bytes = \"1TB\"\n").unwrap();
        let error = Settings::resolve(&common, &serving()).unwrap_err();
        assert!(
            error.contains("store_max_bytes in the config file"),
            "{error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_packet_limit_and_the_batch_cap() {
        let dir = std::env::temp_dir().join(format!("mesh-settings-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mesh.toml");
        let common = Common {
            config: Some(path.clone()),
            ..Common::default()
        };
        std::fs::write(
            &path,
            "memory_store = true
",
        )
        .unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!(settings.max_packet_size, 16 << 20);
        assert_eq!(settings.max_batch, 100);
        std::fs::write(
            &path,
            "memory_store = true\nmax_packet_size = \"1MiB\"\nmax_batch = 7\n",
        )
        .unwrap();
        let settings = Settings::resolve(&common, &serving()).unwrap();
        assert_eq!((settings.max_packet_size, settings.max_batch), (1 << 20, 7));
        // Out of MQTT's range, or a batch of nothing: refused with the setting named.
        for (packet, batch, named) in [
            (Some(1024), None, "max_packet_size is 1024"),
            (Some(1 << 30), None, "max_packet_size is"),
            (None, Some(0), "max_batch is 0"),
        ] {
            let common = Common {
                max_packet_size: packet,
                ..common.clone()
            };
            let serve = Serve {
                max_batch: batch,
                ..serving()
            };
            let error = Settings::resolve(&common, &serve).unwrap_err();
            assert!(error.contains(named), "{error}");
        }
        // Connections: 10,000 unless given; none, or more than any process could hold, refused.
        assert_eq!(settings.max_connections, 10_000);
        for (connections, named) in [
            (0, "max_connections is 0"),
            (usize::MAX, "max_connections is"),
        ] {
            let serve = Serve {
                max_connections: Some(connections),
                ..serving()
            };
            let error = Settings::resolve(&common, &serve).unwrap_err();
            assert!(error.contains(named), "{error}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn tls_files_come_in_pairs_and_debug_shows_no_secret() {
        let serve = Serve {
            memory_store: true,
            tls_cert: Some("/etc/mesh/chain.pem".into()),
            tls_key: Some("/etc/mesh/key.pem".into()),
            api_keys: vec!["alice=s3cret-key".into()],
            ..serving()
        };
        let common = Common {
            broker_url: Some("mqtts://gw:s3cret-pass@broker:8883".into()),
            gateway_url: Some("https://u:s3cret-gw@gw".into()),
            ..Common::default()
        };
        let settings = Settings::resolve(&common, &serve).unwrap();
        let tls = settings.tls.clone().unwrap();
        assert_eq!(tls.cert_file, Path::new("/etc/mesh/chain.pem"));
        assert_eq!(tls.key_file, Path::new("/etc/mesh/key.pem"));
        for shown in [
            format!("{common:?}"),
            format!("{serve:?}"),
            format!("{settings:?}"),
        ] {
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("***"), "{shown}");
        }
        assert!(format!("{settings:?}").contains("mqtts://gw:***@broker:8883"));

        for (cert, key, named) in [
            (Some("/c.pem"), None, "--tls-key"),
            (None, Some("/k.pem"), "--tls-cert"),
        ] {
            let half = Serve {
                memory_store: true,
                tls_cert: cert.map(PathBuf::from),
                tls_key: key.map(PathBuf::from),
                ..serving()
            };
            let error = Settings::resolve(&Common::default(), &half).unwrap_err();
            assert!(error.contains(named), "{error}");
        }
        let plain = Serve {
            memory_store: true,
            ..serving()
        };
        assert!(
            Settings::resolve(&Common::default(), &plain)
                .unwrap()
                .tls
                .is_none()
        );
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 10s "), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "3d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
