//! The commands that talk to a running mesh: `mesh agents`, `mesh card`, `mesh send`.
//!
//! They go through the gateway when it answers (`--gateway-url`), else straight over the bus
//! (`--broker-url`): a registry for the agent list and cards, a requester for messages. The
//! gateway keeps tasks, so continuing a task (`--task`) needs it.

use crate::exit::{Failure, Outcome};
use crate::serve::{bus_config, unreachable_broker};
use crate::settings::Settings;
use futures_util::StreamExt;
use mesh_core::bus::{Bus, redact_url};
use mesh_core::codec;
use mesh_core::dialect::{Dialect, Method};
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::model::{
    Message, Part, PartContent, Role, Task, TaskState, send_params, state_name,
};
use mesh_core::registry::Registry;
use mesh_core::requester::{Requester, RequesterKind, SendOptions};
use mesh_core::rpc::{Call, Reply, Request};
use mesh_core::sse::SseParser;
use mesh_core::topic::Topics;
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

/// How long a client command waits for an answer.
const TIMEOUT: Duration = Duration::from_secs(300);

/// `mesh agents`.
pub async fn agents(settings: &Settings) -> Outcome {
    let agents: Vec<Value> = match Gateway::find(settings).await? {
        Some(gateway) => {
            let listing = gateway.get_json("/agents").await?;
            listing["agents"].as_array().cloned().unwrap_or_default()
        }
        None => {
            let (_, registry) = bus_registry(settings).await?;
            registry
                .agents()
                .into_iter()
                .map(|agent| {
                    serde_json::json!({
                        "name": agent.name,
                        "online": agent.online(),
                        "instances": agent.instances.len(),
                        "skills": agent.card.map(|c| c.skills.into_iter().map(|s| s.name).collect::<Vec<_>>()).unwrap_or_default(),
                    })
                })
                .collect()
        }
    };
    if agents.is_empty() {
        println!("no agents in namespace {}", settings.namespace);
        return Ok(());
    }
    println!("{:<20} {:<8} {:>9}  SKILLS", "AGENT", "STATUS", "INSTANCES");
    for agent in agents {
        let skills: Vec<String> = agent["skills"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| s["name"].as_str().unwrap_or("?").to_owned())
            })
            .collect();
        println!(
            "{:<20} {:<8} {:>9}  {}",
            agent["name"].as_str().unwrap_or("?"),
            if agent["online"].as_bool() == Some(true) {
                "online"
            } else {
                "offline"
            },
            agent["instances"].as_u64().unwrap_or(0),
            skills.join(", ")
        );
    }
    Ok(())
}

/// `mesh health`: the gateway's readiness, or (with an agent) the agent's presence on the bus.
pub async fn health(settings: &Settings, agent: Option<&str>) -> Outcome {
    if let Some(agent) = agent {
        let (_, registry) = bus_registry(settings).await?;
        return if registry.is_online(agent) {
            println!("{agent} is online");
            Ok(())
        } else {
            Err(Failure::UnknownAgent(format!(
                "agent {agent:?} is not online"
            )))
        };
    }
    let url = format!("{}/readyz", settings.gateway_url.trim_end_matches('/'));
    let response = http_client(settings)?
        .get(&url)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .map_err(|e| {
            Failure::Unreachable(format!(
                "the gateway at {} does not answer: {}",
                redact_url(&url),
                e.without_url()
            ))
        })?;
    if response.status().is_success() {
        println!("gateway ready");
        Ok(())
    } else {
        Err(Failure::Unreachable(format!(
            "the gateway at {} is not ready ({})",
            redact_url(&url),
            response.status()
        )))
    }
}

/// `mesh card <agent>`.
pub async fn card(settings: &Settings, agent: &str) -> Outcome {
    let card = match Gateway::find(settings).await? {
        Some(gateway) => {
            gateway
                .get_json(&format!("/agents/{agent}/.well-known/agent-card.json"))
                .await?
        }
        None => {
            let (_, registry) = bus_registry(settings).await?;
            let card = registry.agent(agent).and_then(|a| a.card).ok_or_else(|| {
                Failure::UnknownAgent(format!(
                    "no card for agent {agent:?} in namespace {}",
                    settings.namespace
                ))
            })?;
            codec::card::write_card_combined(&card)
        }
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&card).unwrap_or_default()
    );
    Ok(())
}

/// `mesh send <agent> <text>`.
pub async fn send(
    settings: &Settings,
    agent: &str,
    text: &str,
    stream: bool,
    task: Option<String>,
    files: &[PathBuf],
) -> Outcome {
    let mut message = Message::new(Role::User, vec![Part::text(text)]);
    for path in files {
        message.parts.push(file_part(path)?);
    }
    message.task_id = task.clone();
    let mut printer = Printer::new(agent, stream);
    match Gateway::find(settings).await? {
        Some(gateway) => gateway.send(agent, message, stream, &mut printer).await?,
        None => {
            if task.is_some() {
                return Err(Failure::Unreachable(format!(
                    "continuing a task needs the gateway (it keeps the task), and {} does not answer",
                    redact_url(&settings.gateway_url)
                )));
            }
            send_over_bus(settings, agent, message, stream, &mut printer).await?
        }
    }
    printer.finish()
}

async fn send_over_bus(
    settings: &Settings,
    agent: &str,
    message: Message,
    stream: bool,
    printer: &mut Printer,
) -> Outcome {
    let (bus, registry) = bus_registry(settings).await?;
    if !registry.is_online(agent) {
        return Err(unknown_agent(
            agent,
            registry
                .agents()
                .iter()
                .filter(|a| a.online())
                .map(|a| a.name.clone())
                .collect(),
        ));
    }
    let topics =
        Topics::new(settings.namespace.clone()).map_err(|e| Failure::Usage(e.to_string()))?;
    let id = format!("cli{}", uuid::Uuid::new_v4().simple());
    let requester = Requester::start(
        bus,
        topics,
        RequesterKind::Gateway,
        &settings.gateway_name,
        &id,
    )
    .await
    .map_err(|e| Failure::Unreachable(e.to_string()))?;
    requester.watch_registry(&registry);
    let mut replies = requester
        .send(
            agent,
            send_params(message),
            SendOptions {
                method: if stream {
                    Method::SendStreamingMessage
                } else {
                    Method::SendMessage
                },
                task_id: uuid::Uuid::now_v7().to_string(),
                snapshot: None,
                timeout: TIMEOUT,
                principal: None,
                depth: 0,
                traceparent: None,
                keeps_history: false,
                stream_after_progress: false,
            },
        )
        .await
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    while let Some(delivery) = replies.next().await {
        match delivery.reply {
            // Its `_mesh` taken out by the requester.
            Ok(reply) => printer.event(reply),
            Err(error) => return Err(Failure::Other(format!("{agent} answered: {error}"))),
        }
    }
    Ok(())
}

async fn bus_registry(settings: &Settings) -> Result<(Bus, Registry), Failure> {
    let url = settings.broker_url_or_default();
    let config = bus_config(settings, &url)?
        .with_client_id(format!("mesh-cli-{}", uuid::Uuid::new_v4().simple()));
    let bus = Bus::connect(config).await.map_err(|e| {
        Failure::Unreachable(format!(
            "neither the gateway at {} nor the broker answers; {}",
            redact_url(&settings.gateway_url),
            match unreachable_broker(&url, e) {
                Failure::Unreachable(reason) => reason,
                other => format!("{other:?}"),
            }
        ))
    })?;
    let topics =
        Topics::new(settings.namespace.clone()).map_err(|e| Failure::Usage(e.to_string()))?;
    let registry = Registry::start(&bus, &topics, &settings.gateway_name)
        .await
        .map_err(|e| unreachable_broker(&url, e))?;
    registry.wait_loaded(Duration::from_secs(5)).await;
    Ok((bus, registry))
}

fn unknown_agent(agent: &str, online: Vec<String>) -> Failure {
    Failure::UnknownAgent(if online.is_empty() {
        format!("agent {agent:?} is not online, and no agent is")
    } else {
        format!(
            "agent {agent:?} is not online; online agents: {}",
            online.join(", ")
        )
    })
}

/// A file attached by bytes, its media type guessed from its extension.
fn file_part(path: &PathBuf) -> Result<Part, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let media = match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("txt" | "md") => "text/plain",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("pdf") => "application/pdf",
        Some("csv") => "text/csv",
        _ => "application/octet-stream",
    };
    Ok(Part::raw(bytes).with_filename(name).with_media_type(media))
}

/// The HTTP client of the gateway: trusting `--gateway-ca` besides the system's roots, and
/// sending `--gateway-key` as a bearer token.
fn http_client(settings: &Settings) -> Result<reqwest::Client, Failure> {
    let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(2));
    if let Some(path) = &settings.gateway_ca {
        let unusable =
            |e: String| Failure::Usage(format!("{}: {e} (--gateway-ca)", path.display()));
        let pem = std::fs::read(path).map_err(|e| unusable(e.to_string()))?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|_| unusable("not a PEM file of certificates".into()))?;
        if certificates.is_empty() {
            return Err(unusable("no certificate in it".into()));
        }
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    if let Some(key) = &settings.gateway_key {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", key.trim()))
            .map_err(|_| {
            Failure::Usage("the API key is not a valid header value (--gateway-key)".into())
        })?;
        value.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, value);
        builder = builder.default_headers(headers);
    }
    builder
        .build()
        .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))
}

/// The gateway at --gateway-url, when it answers.
struct Gateway {
    http: reqwest::Client,
    base: String,
}

impl Gateway {
    /// The gateway when it answers; `Ok(None)` when it does not (the caller goes over the
    /// bus).
    async fn find(settings: &Settings) -> Result<Option<Gateway>, Failure> {
        let http = http_client(settings)?;
        let base = settings.gateway_url.trim_end_matches('/').to_owned();
        let answers = http
            .get(format!("{base}/healthz"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|health| health.status().is_success());
        Ok(answers.then_some(Gateway { http, base }))
    }

    async fn get_json(&self, path: &str) -> Result<Value, Failure> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| {
                Failure::Unreachable(format!(
                    "the gateway at {} does not answer: {}",
                    redact_url(&self.base),
                    e.without_url()
                ))
            })?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(Failure::UnknownAgent(format!(
                "{path}: not found at the gateway"
            )));
        }
        response.json().await.map_err(|e| {
            Failure::Other(format!(
                "the gateway answered something unreadable: {}",
                e.without_url()
            ))
        })
    }

    async fn send(
        &self,
        agent: &str,
        message: Message,
        stream: bool,
        printer: &mut Printer,
    ) -> Outcome {
        let listing = self.get_json("/agents").await?;
        let online: Vec<String> = listing["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["online"].as_bool() == Some(true))
            .filter_map(|a| a["name"].as_str().map(str::to_owned))
            .collect();
        if !online.iter().any(|name| name == agent) {
            return Err(unknown_agent(agent, online));
        }
        let request = Request {
            id: Some(JsonRpcId::String(uuid::Uuid::new_v4().to_string())),
            method: if stream {
                Method::SendStreamingMessage
            } else {
                Method::SendMessage
            },
            dialect: Dialect::V0_3,
            shared_method: false,
            call: Call::Send(send_params(message)),
            mesh: Default::default(),
        };
        let response = self
            .http
            .post(format!("{}/agents/{agent}", self.base))
            .header("content-type", "application/json")
            .header(
                "accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .body(codec::encode_request(&request))
            .timeout(TIMEOUT)
            .send()
            .await
            .map_err(|e| {
                Failure::Unreachable(format!(
                    "the gateway at {} does not answer: {}",
                    redact_url(&self.base),
                    e.without_url()
                ))
            })?;
        if !stream {
            let body = response
                .bytes()
                .await
                .map_err(|e| Failure::Unreachable(e.without_url().to_string()))?;
            return printer.decoded(agent, &body);
        }
        let mut body = response.bytes_stream();
        let mut parser = SseParser::default();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                Failure::Unreachable(format!("the stream broke: {}", e.without_url()))
            })?;
            parser.feed(&chunk);
            for event in parser.take_events() {
                printer.decoded(agent, event.data.as_bytes())?;
            }
        }
        parser.finish();
        for event in parser.take_events() {
            printer.decoded(agent, event.data.as_bytes())?;
        }
        Ok(())
    }
}

/// Prints what an agent says: the final answer, or (with --stream) every event as it comes.
struct Printer {
    agent: String,
    stream: bool,
    terminal: bool,
    last: Option<Reply>,
}

impl Printer {
    fn new(agent: &str, stream: bool) -> Printer {
        Printer {
            agent: agent.to_owned(),
            stream,
            terminal: std::io::stdout().is_terminal(),
            last: None,
        }
    }

    fn decoded(&mut self, agent: &str, bytes: &[u8]) -> Outcome {
        let (_, reply) = codec::decode_reply(bytes, Dialect::V0_3)
            .map_err(|e| Failure::Other(format!("unreadable answer from the gateway: {e}")))?;
        match reply {
            Ok(reply) => {
                self.event(reply);
                Ok(())
            }
            Err(error) if error.code() == -32001 => {
                Err(Failure::Usage(format!("{agent}: {}", error.message)))
            }
            Err(error) => Err(Failure::Other(format!("{agent} answered: {error}"))),
        }
    }

    fn event(&mut self, reply: Reply) {
        if self.stream {
            let mut out = std::io::stdout().lock();
            match &reply {
                Reply::StatusUpdate(update) => {
                    let text = update
                        .status
                        .message
                        .as_ref()
                        .map(message_text)
                        .unwrap_or_default();
                    let state = state_name(&update.status.state);
                    if self.terminal {
                        let _ = write!(
                            out,
                            "\r\x1b[2K⠿ {state}{}",
                            if text.is_empty() {
                                String::new()
                            } else {
                                format!(": {text}")
                            }
                        );
                        if mesh_core::model::is_final_state(&update.status.state) {
                            let _ = writeln!(out);
                        }
                    } else {
                        let _ = writeln!(out, "[{state}] {text}");
                    }
                }
                Reply::ArtifactUpdate(update) => {
                    if self.terminal {
                        let _ = write!(out, "\r\x1b[2K");
                    }
                    for part in &update.artifact.parts {
                        let _ = write!(out, "{}", part_text(part));
                    }
                    if update.last_chunk != Some(false) {
                        let _ = writeln!(out);
                    }
                }
                Reply::Message(message) => {
                    let _ = writeln!(out, "{}", message_text(message));
                }
                _ => {}
            }
            let _ = out.flush();
        }
        self.last = Some(reply);
    }

    /// Prints the final answer (non-streaming) and decides the exit code.
    fn finish(self) -> Outcome {
        let Some(last) = self.last else {
            return Err(Failure::Other("the agent sent no answer".into()));
        };
        let task: Option<Task> = match last {
            Reply::Task(task) => Some(task),
            Reply::Message(message) => {
                if !self.stream {
                    println!("{}", message_text(&message));
                }
                return Ok(());
            }
            Reply::StatusUpdate(update) => Some(Task {
                id: update.task_id,
                context_id: update.context_id,
                status: update.status,
                artifacts: None,
                history: None,
                metadata: None,
            }),
            _ => None,
        };
        let Some(task) = task else { return Ok(()) };
        if !self.stream {
            for artifact in task.artifacts.iter().flatten() {
                for part in &artifact.parts {
                    println!("{}", part_text(part));
                }
            }
            if let Some(message) = &task.status.message {
                println!("{}", message_text(message));
            }
        }
        match task.status.state {
            TaskState::Completed => Ok(()),
            TaskState::InputRequired | TaskState::AuthRequired => {
                eprintln!(
                    "(task {} waits for your answer: mesh send {} --task {} \"…\")",
                    task.id, self.agent, task.id
                );
                Ok(())
            }
            state => Err(Failure::Other(format!(
                "task {} ended {}{}",
                task.id,
                state_name(&state),
                task.status
                    .message
                    .as_ref()
                    .map(|m| format!(": {}", message_text(m)))
                    .unwrap_or_default()
            ))),
        }
    }
}

fn message_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .map(part_text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn part_text(part: &Part) -> String {
    match &part.content {
        PartContent::Text(text) => text.clone(),
        PartContent::Data(data) => serde_json::to_string_pretty(data).unwrap_or_default(),
        PartContent::Raw(bytes) => format!(
            "[file {} ({} bytes, {})]",
            part.filename.as_deref().unwrap_or("unnamed"),
            bytes.len(),
            part.media_type
                .as_deref()
                .unwrap_or("application/octet-stream")
        ),
        PartContent::Url(url) => format!(
            "[file {} at {url}]",
            part.filename.as_deref().unwrap_or("unnamed")
        ),
    }
}
