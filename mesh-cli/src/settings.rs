//! One set of names for configuration: flags, `MESH_*` environment variables, and an optional
//! TOML file (`--config`, `MESH_CONFIG`), in that order of precedence, then the defaults.
//!
//! | setting | flag | env | default |
//! | --- | --- | --- | --- |
//! | embedded broker listen address | `--broker-addr` | `MESH_BROKER_ADDR` | `127.0.0.1:1884` |
//! | broker to connect to | `--broker-url` | `MESH_BROKER_URL` | `mqtt://127.0.0.1:1884` |
//! | gateway listen address | `--http-addr` | `MESH_HTTP_ADDR` | `127.0.0.1:8080` |
//! | gateway to talk to | `--gateway-url` | `MESH_GATEWAY_URL` | `http://127.0.0.1:8080` |
//! | namespace | `--namespace` | `MESH_NAMESPACE` | `mesh` |
//! | default agent for `POST /` | `--default-agent` | `MESH_DEFAULT_AGENT` | `echo` in `up`, none otherwise |
//! | URL clients reach the gateway at | `--public-url` | `MESH_PUBLIC_URL` | the bound address |
//!
//! The TOML file uses the same names in snake case (`broker_url = "mqtt://…"`).

use clap::Args;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The default address of the embedded broker: 1883 is often taken by a system broker.
pub const DEFAULT_BROKER_ADDR: &str = "127.0.0.1:1884";
/// The default address of the gateway.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";
/// The default namespace.
pub const DEFAULT_NAMESPACE: &str = "mesh";

/// Settings every command reads.
#[derive(Args, Debug, Clone, Default)]
pub struct Common {
    /// A TOML file with any of these settings (snake_case keys).
    #[arg(long, env = "MESH_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The namespace: the first segment of every topic [default: mesh].
    #[arg(long, env = "MESH_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// The broker to connect to [default: mqtt://127.0.0.1:1884]; `up` uses it instead of
    /// starting the embedded broker when given.
    #[arg(long, env = "MESH_BROKER_URL", global = true, value_name = "URL")]
    pub broker_url: Option<String>,
    /// The gateway to talk to [default: http://127.0.0.1:8080].
    #[arg(long, env = "MESH_GATEWAY_URL", global = true, value_name = "URL")]
    pub gateway_url: Option<String>,
    /// Log lines as text or as JSON (RUST_LOG sets the level).
    #[arg(long, env = "MESH_LOG_FORMAT", global = true, value_enum)]
    pub log_format: Option<LogFormat>,
}

/// Settings of the commands that serve (`up`, `broker`, `gateway`).
#[derive(Args, Debug, Clone, Default)]
pub struct Serve {
    /// Where the embedded broker listens [default: 127.0.0.1:1884].
    #[arg(long, env = "MESH_BROKER_ADDR", value_name = "ADDR")]
    pub broker_addr: Option<SocketAddr>,
    /// Where the gateway listens [default: 127.0.0.1:8080].
    #[arg(long, env = "MESH_HTTP_ADDR", value_name = "ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// The agent `POST /` and `/.well-known/agent-card.json` serve [default: echo in `up`].
    #[arg(long, env = "MESH_DEFAULT_AGENT", value_name = "AGENT")]
    pub default_agent: Option<String>,
    /// The URL clients reach the gateway at, written into agent cards [default: the bound
    /// address].
    #[arg(long, env = "MESH_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
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

/// The TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct File {
    namespace: Option<String>,
    broker_url: Option<String>,
    gateway_url: Option<String>,
    log_format: Option<LogFormat>,
    broker_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    default_agent: Option<String>,
    public_url: Option<String>,
}

/// Every setting, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    /// `None`: not given anywhere (`up` then starts the embedded broker).
    pub broker_url: Option<String>,
    pub gateway_url: String,
    pub log_format: LogFormat,
    pub broker_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub default_agent: Option<String>,
    pub public_url: Option<String>,
}

impl Settings {
    /// Flags and environment first (clap has read both), then the file, then the defaults.
    pub fn resolve(common: &Common, serve: &Serve) -> Result<Settings, String> {
        let file = match &common.config {
            Some(path) => read_file(path)?,
            None => File::default(),
        };
        Ok(Settings {
            namespace: common
                .namespace
                .clone()
                .or(file.namespace)
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            broker_url: common.broker_url.clone().or(file.broker_url),
            gateway_url: common
                .gateway_url
                .clone()
                .or(file.gateway_url)
                .unwrap_or_else(|| format!("http://{DEFAULT_HTTP_ADDR}")),
            log_format: common.log_format.or(file.log_format).unwrap_or_default(),
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

fn read_file(path: &Path) -> Result<File, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let settings = Settings::resolve(&common, &Serve::default()).unwrap();
        assert_eq!(settings.namespace, "from-flag");
        assert_eq!(settings.http_addr.port(), 9999);
        assert_eq!(settings.broker_addr.port(), 1884);
        assert_eq!(settings.broker_url_or_default(), "mqtt://127.0.0.1:1884");
        std::fs::write(&path, "nonsense = 1\n").unwrap();
        let error = Settings::resolve(&common, &Serve::default()).unwrap_err();
        assert!(error.contains("nonsense"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
