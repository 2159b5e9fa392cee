//! `mesh`: bring up a local mesh with one command, run each part alone, and talk to it.
//!
//! Exit codes scripts can rely on: 0 success; 1 the task failed (or was rejected or
//! canceled); 2 bad usage or configuration; 3 the broker or the gateway does not answer (or a
//! port is taken); 4 the agent is unknown or offline.

mod client;
mod exit;
mod options;
mod runtime;
mod secure;
mod serve;
mod settings;
mod tail;

use clap::{CommandFactory, Parser, Subcommand};
use exit::Failure;
use mesh_core::sched::SchedPolicy;
use options::{
    AgentOptions, BrokerOptions, BusOptions, ClientOptions, GatewayGroups, Global, McpOptions,
    PacketOptions,
};
use settings::{Common, LogFormat, SchedPolicySetting, Serve, Settings};
use std::path::PathBuf;

/// Agent meshes over MQTT: A2A agents on a broker, an HTTP gateway in front of them.
#[derive(Parser, Debug)]
#[command(name = "mesh", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// A bus client's options: the broker and the packet limit.
#[derive(clap::Args, Debug, Clone, Default)]
struct BusClient {
    #[command(flatten)]
    bus: BusOptions,
    #[command(flatten)]
    packet: PacketOptions,
}

/// A client's options: the bus, and the gateway it asks first.
#[derive(clap::Args, Debug, Clone, Default)]
struct Client {
    #[command(flatten)]
    bus: BusClient,
    #[command(flatten)]
    client: ClientOptions,
}

/// `mesh secure`'s arguments.
#[derive(clap::Args, Debug)]
struct SecureArgs {
    /// Where to write it.
    dir: PathBuf,
    /// An agent, and the agents it may call: `NAME` or `NAME=PEER,PEER` (repeatable)
    /// [default: the example agents].
    #[arg(long = "agent", value_name = "NAME[=PEERS]")]
    agents: Vec<String>,
    /// A gateway deployment (one account for all its instances; repeatable)
    /// [default: gateway].
    #[arg(long = "gateway", value_name = "NAME")]
    gateways: Vec<String>,
    /// A client (principal) that gets an API key of the gateways, in DIR/clients/NAME.key
    /// (repeatable) [default: client].
    #[arg(long = "client", value_name = "NAME")]
    clients: Vec<String>,
    /// A host name or address HTTPS clients reach the gateways at, for their certificates
    /// (repeatable) [default: localhost and 127.0.0.1].
    #[arg(long = "tls-host", value_name = "HOST")]
    tls_hosts: Vec<String>,
    /// Replace a profile already in DIR (every password changes).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    bus: BusOptions,
    /// An operator's account, which reads the whole namespace (`mesh tail`, `mesh send` over
    /// the bus; repeatable) [default: none].
    #[arg(long = "operator", value_name = "NAME")]
    operators: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Embedded broker, gateway and the example agents in one process (Ctrl-C stops all).
    Up {
        #[command(flatten)]
        bus: BusClient,
        #[command(flatten)]
        broker: BrokerOptions,
        #[command(flatten)]
        gateway: GatewayGroups,
        /// Run the secure profile in DIR (generated there for the example agents and a
        /// gateway when DIR has none): the embedded broker authenticates every account and
        /// enforces its ACL, and each agent and the gateway connect with their own account.
        #[arg(long, env = "MESH_SECURE", value_name = "DIR")]
        secure: Option<PathBuf>,
    },
    /// The embedded MQTT broker alone.
    Broker {
        #[command(flatten)]
        broker: BrokerOptions,
        #[command(flatten)]
        packet: PacketOptions,
    },
    /// The HTTP gateway alone, connected to --broker-url.
    Gateway {
        #[command(flatten)]
        bus: BusClient,
        #[command(flatten)]
        gateway: GatewayGroups,
    },
    /// One agent, connected to --broker-url: an example agent; `mcp`, an MCP server's tools
    /// served as an agent (`mesh agent mcp --name clock -- mcp-server-time`); or `llm`, an LLM
    /// agent defined in a file (`mesh agent llm --config assistant.toml`).
    Agent {
        /// echo, writer, flight-booker, files, orchestrator; mcp; or llm.
        kind: String,
        #[command(flatten)]
        bus: BusClient,
        #[command(flatten)]
        agent: AgentOptions,
        #[command(flatten)]
        mcp: McpOptions,
        /// `mcp`: the MCP server's command line, run as a child process (MCP over stdio).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// The live list of agents.
    Agents {
        #[command(flatten)]
        client: Client,
    },
    /// An agent's card.
    Card {
        /// The agent.
        agent: String,
        #[command(flatten)]
        client: Client,
    },
    /// Send a message to an agent and print its answer.
    Send {
        /// The agent.
        agent: String,
        /// The text of the message.
        text: String,
        /// Show status and artifacts as they arrive.
        #[arg(long)]
        stream: bool,
        /// Continue this task (one that asked for input).
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        /// Attach a file (repeatable).
        #[arg(long, value_name = "PATH")]
        file: Vec<PathBuf>,
        #[command(flatten)]
        client: Client,
    },
    /// Exit 0 if the gateway is ready (its /readyz), or with --agent if that agent is online
    /// on the bus; for container healthchecks and scripts.
    Health {
        /// Check that this agent has an online instance instead of checking the gateway.
        #[arg(long)]
        agent: Option<String>,
        #[command(flatten)]
        client: Client,
    },
    /// Generate a secure profile in DIR: an account and password per agent and gateway, the
    /// broker's password file and ACL (for the embedded broker and for Mosquitto), signing
    /// keys, TLS files, API keys, and a `--config` file per account.
    Secure(SecureArgs),
    /// Watch the namespace's bus traffic, one line per message.
    Tail {
        /// Only traffic to or from this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only traffic of this task.
        #[arg(long)]
        task: Option<String>,
        /// Print each message as raw JSON: {"topic":…,"payload":…}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bus: BusClient,
    },
    /// Print shell completions for `mesh` (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

impl BusClient {
    fn fill(&self, common: &mut Common) {
        self.bus.fill(common);
        self.packet.fill(common);
    }
}

impl Client {
    fn fill(&self, common: &mut Common) {
        self.bus.fill(common);
        self.client.fill(common);
    }
}

impl Command {
    /// What the command's own options were given (the global ones aside).
    fn given(&self) -> (Common, Serve) {
        let (mut common, mut serve) = (Common::default(), Serve::default());
        match self {
            Command::Up {
                bus,
                broker,
                gateway,
                ..
            } => {
                bus.fill(&mut common);
                broker.fill(&mut serve);
                gateway.fill(&mut common, &mut serve);
            }
            Command::Broker { broker, packet } => {
                broker.fill(&mut serve);
                packet.fill(&mut common);
            }
            Command::Gateway { bus, gateway } => {
                bus.fill(&mut common);
                gateway.fill(&mut common, &mut serve);
            }
            Command::Agent { bus, agent, .. } => {
                bus.fill(&mut common);
                agent.fill(&mut serve);
            }
            Command::Agents { client }
            | Command::Card { client, .. }
            | Command::Send { client, .. }
            | Command::Health { client, .. } => client.fill(&mut common),
            Command::Secure(secure) => secure.bus.fill(&mut common),
            Command::Tail { bus, .. } => bus.fill(&mut common),
            Command::Completions { .. } => {}
        }
        (common, serve)
    }
}

/// mimalloc instead of glibc's allocator: `scripts/bench-instructions` counts 13 % fewer
/// instructions per request in the gateway and 15 % in an agent (allocation was 16 to 19 % of
/// both), for about the same idle memory as long as its arenas get no transparent huge pages
/// (the `no_thp` feature, Cargo.toml): with them an idle agent grew from 11 to 23 MiB. Built
/// without the `mimalloc` feature, the binary keeps the system allocator (for heap profilers).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Before any HTTP client is built (reqwest's rustls has no provider of its own).
    mesh_core::tls::install_crypto_provider();
    let mut cli = Cli::parse();
    // `mesh agent llm --config FILE`: the file defines the agent (mesh's own settings then come
    // from flags and the environment only).
    let llm_config = match &cli.command {
        Command::Agent { kind, .. } if kind == "llm" => cli.global.config.take(),
        _ => None,
    };
    if let Command::Completions { shell } = cli.command {
        let mut command = Cli::command();
        clap_complete::generate(shell, &mut command, "mesh", &mut std::io::stdout());
        return;
    }
    let (mut common, serve) = cli.command.given();
    cli.global.fill(&mut common);
    let settings = match Settings::resolve(&common, &serve) {
        Ok(settings) => settings,
        Err(reason) => Failure::Usage(reason).exit(),
    };
    let serving = matches!(
        cli.command,
        Command::Up { .. }
            | Command::Broker { .. }
            | Command::Gateway { .. }
            | Command::Agent { .. }
    );
    init_logging(settings.log_format, serving);
    // Before the runtime starts its threads, which inherit it; `auto` follows the load once
    // the runtime runs. A client command keeps the policy it was started in.
    let sched_policy =
        serving.then(|| settings.sched_policy(matches!(cli.command, Command::Agent { .. })));
    let fixed_policy = match sched_policy {
        None | Some(SchedPolicySetting::Auto) => None,
        Some(SchedPolicySetting::Normal) => Some(SchedPolicy::Normal),
        Some(SchedPolicySetting::Batch) => Some(SchedPolicy::Batch),
    };
    if let Some(policy) = fixed_policy {
        match mesh_core::sched::apply(policy) {
            Ok(()) => {}
            // Not Linux, and the policy not asked for: nothing to say.
            Err(e)
                if e.kind() == std::io::ErrorKind::Unsupported
                    && settings.sched_policy.is_none() =>
            {
                tracing::debug!("{e}");
            }
            Err(e) => tracing::warn!(
                "cannot run in the {} CPU scheduling policy ({e}): running in the one it has",
                policy.name()
            ),
        }
    }
    // `up` runs its parts on runtimes of their own (`serve::up`): its main thread only waits.
    let workers = match cli.command {
        Command::Up { .. } => 1,
        Command::Broker { .. } | Command::Gateway { .. } | Command::Agent { .. } => {
            settings.runtime_threads(true)
        }
        _ => settings.runtime_threads(false),
    };
    let runtime = match runtime::build(workers) {
        Ok(runtime) => runtime,
        Err(e) => Failure::Other(format!("cannot start the async runtime: {e}")).exit(),
    };
    let result = runtime.block_on(async move {
        if sched_policy == Some(SchedPolicySetting::Auto) {
            tokio::spawn(async {
                if let Err(e) = mesh_core::sched::follow_load().await {
                    tracing::warn!(
                        "cannot follow the cores' load with the CPU scheduling policy ({e}): \
                         running in the one it has"
                    );
                }
            });
        }
        match cli.command {
            Command::Up { secure, .. } => serve::up(&settings, secure.as_deref()).await,
            Command::Completions { .. } => Ok(()),
            Command::Broker { .. } => serve::broker(&settings).await,
            Command::Gateway { .. } => serve::gateway(&settings).await,
            Command::Agent {
                kind, mcp, command, ..
            } => match kind.as_str() {
                "mcp" => serve::mcp_agent(&settings, &mcp, command).await,
                "llm" if mcp.given() || !command.is_empty() => Err(Failure::Usage(
                    "`mesh agent llm` takes its agent from --config FILE alone".into(),
                )),
                "llm" => serve::llm_agent(&settings, llm_config.as_deref()).await,
                _ if mcp.given() || !command.is_empty() => Err(Failure::Usage(format!(
                    "--name, --url, --bearer-env, --description and a command after `--` are \
                     for `mesh agent mcp`, not for the example agent {kind:?}"
                ))),
                _ => serve::agent(&settings, &kind).await,
            },
            Command::Agents { .. } => client::agents(&settings).await,
            Command::Card { agent, .. } => client::card(&settings, &agent).await,
            Command::Send {
                agent,
                text,
                stream,
                task,
                file,
                ..
            } => client::send(&settings, &agent, &text, stream, task, &file).await,
            Command::Health { agent, .. } => client::health(&settings, agent.as_deref()).await,
            Command::Tail {
                agent, task, json, ..
            } => tail::tail(&settings, agent, task, json).await,
            Command::Secure(secure) => secure_command(&settings, &secure),
        }
    });
    if let Err(failure) = result {
        failure.exit();
    }
}

/// `mesh secure`: writes the profile and says how to use it.
fn secure_command(settings: &Settings, args: &SecureArgs) -> exit::Outcome {
    let or = |given: &[String], default: Vec<String>| {
        if given.is_empty() {
            default
        } else {
            given.to_vec()
        }
    };
    let agents = if args.agents.is_empty() {
        secure::example_agents()
    } else {
        args.agents
            .iter()
            .map(|a| secure::AgentSpec::parse(a))
            .collect::<Result<_, _>>()
            .map_err(Failure::Usage)?
    };
    let spec = secure::ProfileSpec {
        namespace: settings.namespace.clone(),
        broker_url: settings.broker_url_or_default(),
        agents,
        gateways: or(&args.gateways, vec![settings.gateway_name.clone()]),
        clients: or(&args.clients, vec![secure::DEFAULT_CLIENT.to_owned()]),
        operators: args.operators.clone(),
        tls_hosts: or(&args.tls_hosts, secure::default_tls_hosts()),
    };
    let dir = args.dir.as_path();
    let profile = secure::generate(&spec, dir, args.force)?;
    println!("secure profile written to {}", dir.display());
    println!(
        "  broker:   mesh broker --config {}   (or mosquitto -c {})",
        dir.join("broker.toml").display(),
        dir.join("broker").join("mosquitto.conf").display()
    );
    for gateway in &spec.gateways {
        println!(
            "  gateway:  mesh gateway --config {}",
            profile.account_config(gateway).display()
        );
    }
    for agent in &spec.agents {
        println!(
            "  agent:    mesh agent {} --config {}",
            agent.name,
            profile.account_config(&agent.name).display()
        );
    }
    for operator in &spec.operators {
        println!(
            "  operator: mesh tail --config {}",
            profile.account_config(operator).display()
        );
    }
    println!(
        "  HTTPS clients trust {} (e.g. curl --cacert) and send a key of {} \
         (Authorization: Bearer <key>)",
        profile.ca_file().display(),
        dir.join("clients").display()
    );
    println!("The account and key files hold secrets: they are readable by their owner only.");
    Ok(())
}

/// Logs through tracing: RUST_LOG sets the filter (servers log `info`, clients `warn`).
fn init_logging(format: LogFormat, serving: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if serving { "info" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_target(false).init(),
    }
}
