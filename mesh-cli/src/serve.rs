//! The commands that serve: `mesh up` (everything in one process), `mesh broker`,
//! `mesh gateway` and `mesh agent <name>` (each part alone). Each runs until Ctrl-C or SIGTERM
//! and then shuts down cleanly: agents announce themselves offline before they leave.
//!
//! Every broker URL they print goes through [`redact_url`]: no password reaches the output.

use crate::exit::{Failure, Outcome};
use crate::options::McpOptions;
use crate::runtime::{self, OwnThread};
use crate::secure::{self, Profile, ProfileSpec, example_agents};
use crate::settings::Settings;
use mesh_agent::{AgentConfig, AgentError, RunningAgent};
use mesh_broker::{Access, Broker, BrokerConfig, BrokerError};
use mesh_core::bus::{BusConfig, BusError, redact_url};
use mesh_core::card_signing::{SigningKey, TrustedKeys};
use mesh_gateway::{Gateway, GatewayConfig, GatewayError, RunningGateway};
use mesh_llm::{LlmAgent, LlmAgentError, LlmConfig};
use mesh_mcp::{McpAgent, McpAgentError, McpServer};
use std::path::Path;
use std::time::Instant;

/// `mesh up`: the embedded broker (unless --broker-url names one), the example agents and the
/// gateway, with `echo` as the default agent. With `secure`, the secure profile in that
/// directory (generated first when it has none): the broker authenticates and enforces the
/// ACL, and each part connects with its own account.
///
/// The broker and the gateway each run on a thread and runtime of their own
/// (`runtime::on_own_thread`), with the workers the separate commands have (one unless
/// --worker-threads says otherwise), and the agents on the embedded broker's (on a thread of
/// their own with an external broker): a request crosses threads where it enters and leaves
/// the broker, as a raw MQTT round trip does, instead of also into and out of the agents, or
/// wherever two workers of one shared runtime happen to hand it over.
pub async fn up(settings: &Settings, secure: Option<&Path>) -> Outcome {
    let started = Instant::now();
    let mut settings = settings.clone();
    let profile = match secure {
        Some(dir) => Some(secure_profile(&mut settings, dir)?),
        None => None,
    };
    let workers = settings.runtime_threads(true);
    let broker = match &settings.broker_url {
        Some(_) => None,
        None => {
            let settings = settings.clone();
            Some(
                runtime::on_own_thread(
                    "broker",
                    workers,
                    move || async move {
                        let broker = start_broker(&settings).await?;
                        Ok((broker.local_addr(), broker))
                    },
                    Broker::stop,
                )
                .await?,
            )
        }
    };
    let url = match &broker {
        Some(broker) => format!("mqtt://{}", broker.info),
        None => settings.broker_url_or_default(),
    };
    // Each part's URL: with a profile, its own account on the broker of `url`.
    let url_of = |account: &str| -> Result<String, Failure> {
        match &profile {
            Some(profile) => profile.account_on(account, &url),
            None => Ok(url.clone()),
        }
    };
    // And its signing key: with a profile, its own.
    let key_of = |account: &str| match &profile {
        Some(profile) => Some(profile.signing_key(account)),
        None => settings.signing_key.clone(),
    };
    let mut parts = Vec::new();
    for name in mesh_example_agents::NAMES {
        parts.push((*name, url_of(name)?, key_of(name)));
    }
    let gateway_url = url_of(&settings.gateway_name)?;
    let agents = {
        let settings = settings.clone();
        let start = move || async move {
            let starts = parts
                .iter()
                .map(|(name, url, key)| start_agent(&settings, url, name, key.as_deref()));
            let mut agents = Vec::new();
            let mut failure = None;
            for result in futures_util::future::join_all(starts).await {
                match result {
                    Ok(agent) => agents.push(agent),
                    Err(e) => failure = Some(e),
                }
            }
            if let Some(failure) = failure {
                stop_agents(agents).await;
                return Err(failure);
            }
            let names: Vec<String> = agents.iter().map(|a| a.name().to_owned()).collect();
            Ok((names, agents))
        };
        match &broker {
            Some(broker) => runtime::on_thread_of(broker, "agents", start, stop_agents).await,
            None => runtime::on_own_thread("agents", workers, start, stop_agents).await,
        }
    };
    let agents = match agents {
        Ok(agents) => agents,
        Err(failure) => {
            stop_all(None, None, broker).await;
            return Err(failure);
        }
    };
    let mut settings = settings.clone();
    settings.default_agent.get_or_insert_with(|| "echo".into());
    let gateway = {
        let settings = settings.clone();
        runtime::on_own_thread(
            "gateway",
            workers,
            move || async move {
                let gateway = start_gateway(&settings, &gateway_url).await?;
                Ok((gateway.url().to_owned(), gateway))
            },
            RunningGateway::shutdown,
        )
        .await
    };
    let gateway = match gateway {
        Ok(gateway) => gateway,
        Err(e) => {
            stop_all(Some(agents), None, broker).await;
            return Err(e);
        }
    };
    let ready = started.elapsed();
    let broker_line = match (&broker, &profile) {
        (Some(_), Some(_)) => format!("{url} (embedded; authenticated, with ACLs)"),
        (Some(_), None) => format!("{url} (embedded)"),
        (None, _) => redact_url(&url),
    };
    println!("mesh is up in {:.0} ms", ready.as_secs_f64() * 1000.0);
    println!("  gateway   {}", gateway.info);
    println!("  broker    {broker_line}");
    println!("  namespace {}", settings.namespace);
    println!("  tasks     {}", store_line(&settings));
    println!("  agents    {}", agents.info.join(", "));
    println!();
    println!("try:  mesh send echo \"hello\"");
    println!(
        "      curl -s {}/ -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\",\"params\":{{\"message\":{{\"role\":\"user\",\"messageId\":\"m1\",\"parts\":[{{\"kind\":\"text\",\"text\":\"hello\"}}]}}}}}}'",
        gateway.info
    );
    println!("Ctrl-C stops the mesh.");
    wait_for_stop().await;
    eprintln!("mesh: stopping");
    stop_all(Some(agents), Some(gateway), broker).await;
    Ok(())
}

/// Where the gateway keeps its tasks, said for a person.
fn store_line(settings: &Settings) -> String {
    match (&settings.store_url, &settings.data_dir) {
        (Some(url), _) => format!("{} (PostgreSQL, shared)", mesh_core::bus::redact_url(url)),
        (None, Some(dir)) => format!("{} (SQLite)", dir.display()),
        (None, None) => "in memory (--memory-store)".into(),
    }
}

/// `mesh broker`: the embedded broker alone.
pub async fn broker(settings: &Settings) -> Outcome {
    let broker = start_broker(settings).await?;
    match &settings.cluster {
        Some(cluster) => println!(
            "broker listening on mqtt://{} (cluster node {}, gRPC on {}, peers {})",
            broker.local_addr(),
            cluster.node_id,
            cluster.grpc_addr,
            cluster.peers.join(", ")
        ),
        None => println!("broker listening on mqtt://{}", broker.local_addr()),
    }
    wait_for_stop().await;
    broker.stop().await;
    Ok(())
}

/// `mesh gateway`: the gateway alone, on --broker-url.
pub async fn gateway(settings: &Settings) -> Outcome {
    let url = settings.broker_url_or_default();
    let gateway = start_gateway(settings, &url).await?;
    println!(
        "gateway listening on {} (broker {}; tasks {})",
        gateway.url(),
        redact_url(&url),
        store_line(settings)
    );
    wait_for_stop().await;
    gateway.shutdown().await;
    Ok(())
}

/// `mesh agent <name>`: one example agent, on --broker-url.
pub async fn agent(settings: &Settings, name: &str) -> Outcome {
    let url = settings.broker_url_or_default();
    let agent = start_agent(settings, &url, name, settings.signing_key.as_deref()).await?;
    println!(
        "agent {name} online (instance {}, broker {})",
        agent.instance_id(),
        redact_url(&url)
    );
    wait_for_stop().await;
    agent.shutdown().await;
    Ok(())
}

/// `mesh agent mcp --name NAME -- COMMAND…` (or `--url URL`): an MCP server's tools served as
/// the agent NAME, on --broker-url.
pub async fn mcp_agent(settings: &Settings, options: &McpOptions, command: Vec<String>) -> Outcome {
    let Some(name) = options.name.clone() else {
        return Err(Failure::Usage(
            "say the agent's name: mesh agent mcp --name NAME -- COMMAND… (or --url URL)".into(),
        ));
    };
    let bearer = match &options.bearer_env {
        None => None,
        Some(var) => Some(std::env::var(var).map_err(|_| {
            Failure::Usage(format!("--bearer-env {var}: the environment has no {var}"))
        })?),
    };
    let server = McpServer::from_parts(command, options.url.clone(), bearer)
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let url = settings.broker_url_or_default();
    let config = AgentConfig {
        namespace: settings.namespace.clone(),
        signing_key: signing_key(settings.signing_key.as_deref(), "--signing-key")?,
        ..AgentConfig::default()
    };
    let mut agent = McpAgent::new(name.clone(), server).config(config);
    if let Some(description) = &options.description {
        agent = agent.description(description.clone());
    }
    let running = agent
        .start(bus_config(settings, &url)?)
        .await
        .map_err(|e| match e {
            McpAgentError::Server { .. } => Failure::Unreachable(e.to_string()),
            McpAgentError::Agent(AgentError::Bus(bus)) => unreachable_broker(&url, bus),
            McpAgentError::Agent(AgentError::Topic(topic)) => {
                Failure::Usage(format!("{topic} (--name)"))
            }
            McpAgentError::Agent(other) => Failure::Other(other.to_string()),
        })?;
    let tools: Vec<String> = running
        .connection()
        .live()
        .map(|live| live.tools.iter().map(|t| t.name.to_string()).collect())
        .unwrap_or_default();
    println!(
        "agent {name} online (instance {}, broker {}): tools {}",
        running.agent().instance_id(),
        redact_url(&url),
        tools.join(", ")
    );
    wait_for_stop().await;
    running.shutdown().await;
    Ok(())
}

/// `mesh agent llm --config FILE`: the LLM agent the file defines, on --broker-url.
pub async fn llm_agent(settings: &Settings, file: Option<&Path>) -> Outcome {
    let Some(file) = file else {
        return Err(Failure::Usage(
            "say the agent's file: mesh agent llm --config assistant.toml".into(),
        ));
    };
    let config = LlmConfig::load(file, |var| std::env::var(var).ok())
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let name = config.name.clone();
    let url = settings.broker_url_or_default();
    let agent_config = AgentConfig {
        namespace: settings.namespace.clone(),
        signing_key: signing_key(settings.signing_key.as_deref(), "--signing-key")?,
        ..AgentConfig::default()
    };
    let running = LlmAgent::new(config)
        .config(agent_config)
        .start(bus_config(settings, &url)?)
        .await
        .map_err(|e| match e {
            LlmAgentError::Mcp { .. } => Failure::Unreachable(e.to_string()),
            LlmAgentError::Agent(AgentError::Bus(bus)) => unreachable_broker(&url, bus),
            LlmAgentError::Agent(AgentError::Topic(topic)) => {
                Failure::Usage(format!("{topic} (the file's name)"))
            }
            LlmAgentError::Agent(other) => Failure::Other(other.to_string()),
        })?;
    println!(
        "agent {name} online (instance {}, broker {})",
        running.agent().instance_id(),
        redact_url(&url)
    );
    wait_for_stop().await;
    running.shutdown().await;
    Ok(())
}

/// Generates the secure profile in `dir` for the example agents and the gateway when there is
/// none, and points the embedded broker's settings at its files.
fn secure_profile(settings: &mut Settings, dir: &Path) -> Result<Profile, Failure> {
    let profile = Profile::at(dir);
    if !profile.exists() {
        let spec = ProfileSpec {
            namespace: settings.namespace.clone(),
            // `up` puts each account on the broker it really runs (its port may be chosen at
            // start); the files name the address as given, or the default port.
            broker_url: match (&settings.broker_url, settings.broker_addr.port()) {
                (None, 0) => format!(
                    "mqtt://{}",
                    std::net::SocketAddr::new(
                        settings.broker_addr.ip(),
                        crate::settings::DEFAULT_BROKER_ADDR
                            .parse::<std::net::SocketAddr>()
                            .map_or(1884, |a| a.port())
                    )
                ),
                _ => settings.broker_url_or_default(),
            },
            agents: example_agents(),
            gateways: vec![settings.gateway_name.clone()],
            tls_hosts: secure::default_tls_hosts(),
            clients: vec![secure::DEFAULT_CLIENT.to_owned()],
            operators: Vec::new(),
        };
        secure::generate(&spec, dir, false)?;
        eprintln!("mesh: wrote a secure profile to {}", dir.display());
    }
    settings.broker_access = Some((profile.password_file(), profile.acl_file()));
    if settings.api_keys.is_empty() {
        for (index, key) in profile.api_keys(&settings.gateway_name)?.iter().enumerate() {
            let key = mesh_gateway::ApiKey::parse(key, index + 1).map_err(|e| {
                Failure::Usage(format!(
                    "{e} ({})",
                    profile.account_config(&settings.gateway_name).display()
                ))
            })?;
            settings.api_keys.push(key);
        }
    }
    settings
        .trusted_keys
        .get_or_insert_with(|| profile.agent_keys());
    settings
        .gateway_signing_key
        .get_or_insert_with(|| profile.signing_key(&settings.gateway_name));
    let tls = profile.gateway_tls(&settings.gateway_name);
    if tls.cert_file.exists() {
        settings.tls.get_or_insert(tls);
    }
    Ok(profile)
}

async fn start_broker(settings: &Settings) -> Result<Broker, Failure> {
    let mut config = BrokerConfig::new(settings.broker_addr);
    if let Some((passwords, acl)) = &settings.broker_access {
        let access = Access::from_files(passwords, acl)
            .map_err(|e| Failure::Usage(format!("{e} (--password-file, --acl-file)")))?;
        config.access = Some(std::sync::Arc::new(access));
    }
    // What the bus clients may publish (the setting is checked to fit MQTT's u32 range).
    config.max_packet_size = u32::try_from(settings.max_packet_size).unwrap_or(u32::MAX);
    if let Some(cluster) = &settings.cluster {
        join_cluster(&mut config, cluster)?;
    }
    Broker::start_with(config).await.map_err(|e| match e {
        BrokerError::AddrInUse { .. } => Failure::Unreachable(format!(
            "{e}: the embedded broker's port is taken; choose another with --broker-addr \
                 (or use the running broker with --broker-url)"
        )),
        other => Failure::Unreachable(format!("{other} (--broker-addr)")),
    })
}

/// Makes the broker a node of the cluster the settings describe.
#[cfg(feature = "cluster")]
fn join_cluster(
    config: &mut BrokerConfig,
    cluster: &crate::settings::ClusterSettings,
) -> Result<(), Failure> {
    let peers = cluster
        .peers
        .iter()
        .map(|p| mesh_broker::ClusterConfig::parse_peer(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::Usage(format!("{e} (--cluster-peer)")))?;
    config.cluster = Some(mesh_broker::ClusterConfig {
        node_id: cluster.node_id,
        grpc_addr: cluster.grpc_addr,
        peers,
    });
    Ok(())
}

/// Without the `cluster` feature a broker cannot be a cluster node: say how to get one.
#[cfg(not(feature = "cluster"))]
fn join_cluster(_: &mut BrokerConfig, _: &crate::settings::ClusterSettings) -> Result<(), Failure> {
    Err(Failure::Usage(
        "this `mesh` was built without the broker cluster (--cluster-node-id, --cluster-peer): \
         build it with `cargo build --release -p mesh-cli --features cluster` (needs protoc, \
         Debian's protobuf-compiler)"
            .into(),
    ))
}

async fn start_agent(
    settings: &Settings,
    url: &str,
    name: &str,
    key: Option<&Path>,
) -> Result<RunningAgent, Failure> {
    let Some(agent) = mesh_example_agents::by_name(name) else {
        return Err(Failure::UnknownAgent(format!(
            "no example agent named {name:?}; there are: {}",
            mesh_example_agents::NAMES.join(", ")
        )));
    };
    let config = AgentConfig {
        namespace: settings.namespace.clone(),
        signing_key: signing_key(key, "--signing-key")?,
        ..AgentConfig::default()
    };
    agent
        .config(config)
        .start(bus_config(settings, url)?)
        .await
        .map_err(|e| match e {
            AgentError::Bus(bus) => unreachable_broker(url, bus),
            AgentError::Topic(topic) => Failure::Usage(topic.to_string()),
            other => Failure::Other(other.to_string()),
        })
}

async fn start_gateway(settings: &Settings, url: &str) -> Result<RunningGateway, Failure> {
    // The key files first: a bad one is a usage error whether or not the broker answers.
    let mut config = gateway_config(settings);
    config.signing_key = signing_key(settings.gateway_signing_key.as_deref(), "--signing-key")?;
    config.trusted_keys = match &settings.trusted_keys {
        Some(path) => Some(
            TrustedKeys::load(path).map_err(|e| Failure::Usage(format!("{e} (--trusted-keys)")))?,
        ),
        None => None,
    };
    // With a shared store the gateway names its session after itself (see
    // mesh_gateway::takeover); otherwise this id stands.
    let bus_config = bus_config(settings, url)?
        .with_client_id(format!("mesh-gateway-{}", uuid::Uuid::new_v4().simple()));
    Gateway::connect(config, bus_config)
        .await
        .map_err(|e| match e {
            GatewayError::Bind { addr, source } => Failure::Unreachable(format!(
                "cannot listen on {addr}: {source}; choose another address with --http-addr"
            )),
            GatewayError::Bus(bus) => unreachable_broker(url, bus),
            GatewayError::Store(e) => Failure::Usage(match settings.store_url {
                Some(_) => format!("{e} (--store)"),
                None => format!("{e} (--data-dir, or --memory-store)"),
            }),
            GatewayError::Config(e) => Failure::Usage(format!("{e} (--cors-origin)")),
            GatewayError::WebhookTls(e) => Failure::Usage(format!("{e} (--webhook-ca)")),
            GatewayError::Tls(e) => Failure::Usage(format!("{e} (--tls-cert, --tls-key)")),
            other => Failure::Other(other.to_string()),
        })
}

/// The signing key in `path`, when one is given; a file that is not one stops the start.
fn signing_key(path: Option<&std::path::Path>, flag: &str) -> Result<Option<SigningKey>, Failure> {
    path.map(|path| SigningKey::load(path).map_err(|e| Failure::Usage(format!("{e} ({flag})"))))
        .transpose()
}

/// The gateway's configuration from the settings (the keys are read by `start_gateway`).
fn gateway_config(settings: &Settings) -> GatewayConfig {
    GatewayConfig {
        listen: settings.http_addr,
        public_url: settings.public_url.clone(),
        namespace: settings.namespace.clone(),
        name: settings.gateway_name.clone(),
        default_agent: settings.default_agent.clone(),
        data_dir: settings.data_dir.clone(),
        store_url: settings.store_url.clone(),
        takeover_grace: settings.takeover_grace,
        store_max_bytes: settings.store_max_bytes,
        store_max_task_bytes: settings.store_max_task_bytes,
        api_keys: settings.api_keys.clone(),
        console_admins: settings.console_admins.clone(),
        cors_origins: settings.cors_origins.clone(),
        allow_private_webhooks: settings.allow_private_webhooks,
        webhook_ca_file: settings.webhook_ca.clone(),
        webhook_timeout: settings.webhook_timeout,
        webhook_attempts: settings.webhook_attempts,
        webhook_backoff: settings.webhook_backoff,
        webhook_queue: settings.webhook_queue,
        max_batch: settings.max_batch,
        max_connections: settings.max_connections,
        tls: settings.tls.clone(),
        ..GatewayConfig::default()
    }
}

/// The bus settings of a connection to `url` (with --broker-ca for an `mqtts://` broker).
pub fn bus_config(settings: &Settings, url: &str) -> Result<BusConfig, Failure> {
    let mut config =
        BusConfig::new(url).map_err(|e| Failure::Usage(format!("{e} (--broker-url)")))?;
    if let Some(ca) = &settings.broker_ca {
        if !ca.is_file() {
            return Err(Failure::Usage(format!(
                "--broker-ca {}: no such file",
                ca.display()
            )));
        }
        config.tls_roots.ca_file = Some(ca.clone());
    }
    config.max_packet_size = settings.max_packet_size;
    Ok(config)
}

/// A bus error, said as "the broker does not answer" (the URL redacted).
pub fn unreachable_broker(url: &str, error: BusError) -> Failure {
    Failure::Unreachable(format!(
        "the broker at {} does not answer: {error} (start one with `mesh broker`, or set --broker-url)",
        redact_url(url)
    ))
}

/// Stops `mesh up`'s parts: the agents first (they announce themselves offline), then the
/// gateway, then the broker.
async fn stop_all(
    agents: Option<OwnThread<Vec<String>>>,
    gateway: Option<OwnThread<String>>,
    broker: Option<OwnThread<std::net::SocketAddr>>,
) {
    if let Some(agents) = agents {
        agents.stop().await;
    }
    if let Some(gateway) = gateway {
        gateway.stop().await;
    }
    if let Some(broker) = broker {
        broker.stop().await;
    }
}

async fn stop_agents(agents: Vec<RunningAgent>) {
    futures_util::future::join_all(agents.into_iter().map(RunningAgent::shutdown)).await;
}

/// Resolves on Ctrl-C or SIGTERM.
async fn wait_for_stop() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
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

    use crate::settings::{Common, Serve};
    use std::time::Duration;

    #[test]
    fn the_webhook_settings_reach_the_gateway() {
        let serve = Serve {
            memory_store: true,
            webhook_timeout: Some(Duration::from_secs(3)),
            webhook_attempts: Some(2),
            webhook_backoff: Some(Duration::from_millis(40)),
            webhook_queue: Some(9),
            allow_private_webhooks: true,
            store_max_bytes: Some(4 << 20),
            store_max_task_bytes: Some(1 << 20),
            ..serving()
        };
        let settings = Settings::resolve(&Common::default(), &serve).unwrap();
        let config = gateway_config(&settings);
        assert_eq!(config.webhook_timeout, Duration::from_secs(3));
        assert_eq!(config.webhook_attempts, 2);
        assert_eq!(config.webhook_backoff, Duration::from_millis(40));
        assert_eq!(config.webhook_queue, 9);
        assert!(config.allow_private_webhooks);
        assert_eq!(config.data_dir, None);
        assert_eq!(config.store_max_bytes, 4 << 20);
        assert_eq!(config.store_max_task_bytes, 1 << 20);
    }

    #[test]
    fn key_files_are_read_and_a_bad_one_stops_the_start() {
        let dir = std::env::temp_dir().join(format!("mesh-serve-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pem, jwks) = (dir.join("agent.pem"), dir.join("trusted.json"));
        let key = SigningKey::generate().unwrap();
        std::fs::write(&pem, key.to_pem()).unwrap();
        std::fs::write(&jwks, TrustedKeys::of(&[&key]).to_jwks().to_string()).unwrap();
        std::fs::write(
            dir.join("mesh.toml"),
            format!(
                "memory_store = true\nsigning_key = {pem:?}\ntrusted_keys = {jwks:?}\ngateway_signing_key = {pem:?}\n"
            ),
        )
        .unwrap();
        let common = Common {
            config: Some(dir.join("mesh.toml")),
            ..Common::default()
        };
        let settings = Settings::resolve(&common, &serving()).unwrap();
        let read = signing_key(settings.signing_key.as_deref(), "--signing-key").unwrap();
        assert_eq!(read.unwrap().kid(), key.kid());
        assert_eq!(settings.gateway_signing_key.as_deref(), Some(pem.as_path()));
        let trusted = TrustedKeys::load(settings.trusted_keys.as_deref().unwrap()).unwrap();
        assert_eq!(trusted.len(), 1);
        assert!(signing_key(None, "--signing-key").unwrap().is_none());
        let refused = signing_key(Some(&jwks), "--signing-key").unwrap_err();
        assert!(
            matches!(&refused, Failure::Usage(why) if why.contains("PRIVATE KEY") && why.ends_with("(--signing-key)")),
            "{refused:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
