//! An agent on the bus: [`Agent`] (the builder) and [`RunningAgent`] (one running instance).
//!
//! Starting an instance connects to the broker with a retained "offline" last will on its
//! presence topic, publishes the agent's card and its presence (both retained), subscribes to
//! the agent's requests (through the shared subscription, so N instances share the load) and
//! to its cancel topic, then probes its own request topic: if no instance answers, requests do
//! not reach the agent (a broker that accepts `$share` and delivers nothing) and start fails
//! loudly. Requests are de-duplicated on `_mesh.requestId`, bounded in number by a semaphore
//! (past the bound the subscription stops being read: backpressure reaches the broker), and
//! each runs in its own task (see [`runner`](crate::runner)). Shutdown stops taking requests,
//! lets running tasks finish for a grace period, cancels the rest, says offline and leaves.
//!
//! With a signing key ([`AgentConfig::signing_key`]) the published card carries the agent's
//! signature (A2A §8.4). While it runs, an instance re-asserts its card and its presence
//! when the retained ones are replaced by something else ([`guard`](crate::guard)).

use crate::dedup::Dedup;
use crate::directory::PeerDirectory;
use crate::guard::{self, Guarded, OwnCard, Watches};
use crate::handler::Handler;
use crate::runner::{self, Running, SendRequest};
use foldhash::HashMap;
use mesh_core::bus::{
    Bus, BusConfig, BusError, BusMessage, ConnectionState, DropReason, Dropped, LastWill, QoS,
};
use mesh_core::card_signing::{SigningKey, TrustedKeys};
use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::{MeshMeta, RequestHead, peek_request};
use mesh_core::model::{AgentCapabilities, AgentCard, AgentSkill};
use mesh_core::registry::{Presence, PresenceStatus, Registry};
use mesh_core::requester::{Requester, RequesterKind, SendError};
use mesh_core::rpc::Call;
use mesh_core::sync::MutexExt;
use mesh_core::topic::{TopicError, TopicKind, Topics};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Semaphore, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How many recent request ids an instance remembers to drop QoS 1 redeliveries.
const DEDUP_CAPACITY: usize = 65_536;

/// How an agent instance runs. `Default` is right for most agents.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The namespace (first topic segment) of the mesh.
    pub namespace: String,
    /// Tasks one instance runs at once; past it, requests wait in the broker.
    pub max_concurrent_tasks: usize,
    /// How often the instance republishes its presence.
    pub heartbeat: Duration,
    /// Share requests among instances with a `$share` subscription. Turn off for brokers that
    /// lack shared subscriptions (then run one instance per agent).
    pub shared_subscription: bool,
    /// How long the start-up probe waits for its own request to come back.
    pub probe_timeout: Duration,
    /// The deadline of a request that carries none.
    pub default_timeout: Duration,
    /// The longest deadline an instance grants, whatever a request asks.
    pub max_timeout: Duration,
    /// How deep delegation may go (gateway → agent → agent …).
    pub max_call_depth: u32,
    /// How long shutdown lets running tasks finish before canceling them.
    pub shutdown_grace: Duration,
    /// The key the agent signs its card with (`mesh agent --signing-key`); `None`: the card
    /// is published unsigned.
    pub signing_key: Option<SigningKey>,
    /// The keys peers' cards must be signed with for this instance's registry to keep them;
    /// `None`: every readable card is kept.
    pub trusted_keys: Option<TrustedKeys>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            namespace: "mesh".into(),
            max_concurrent_tasks: 256,
            heartbeat: Duration::from_secs(5),
            shared_subscription: true,
            probe_timeout: Duration::from_secs(5),
            default_timeout: Duration::from_secs(300),
            max_timeout: Duration::from_secs(3600),
            max_call_depth: 8,
            shutdown_grace: Duration::from_secs(5),
            signing_key: None,
            trusted_keys: None,
        }
    }
}

/// Why an agent instance could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The agent's name (or the namespace) cannot be a topic segment.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The broker could not be reached or refused us.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// Setting up the requester for peer calls failed.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The start-up probe got no answer: requests do not reach this agent.
    #[error(
        "requests to agent {agent} do not come back: no instance answered the start-up probe within {timeout:?} \
         (does the broker support shared subscriptions? if not, turn them off and run one instance)"
    )]
    ProbeFailed {
        /// The agent.
        agent: String,
        /// How long the probe waited.
        timeout: Duration,
    },
}

/// An agent: its card and its handler. [`Agent::start`] runs an instance of it.
pub struct Agent {
    card: AgentCard,
    handler: Arc<dyn Handler>,
    config: AgentConfig,
}

impl Agent {
    /// An agent named `name` (its topic segment and card name) served by `handler`.
    pub fn new(name: impl Into<String>, handler: impl Handler) -> Agent {
        let name = name.into();
        Agent {
            card: AgentCard {
                name: name.clone(),
                description: String::new(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                supported_interfaces: Vec::new(),
                capabilities: AgentCapabilities {
                    streaming: Some(true),
                    push_notifications: Some(false),
                    extensions: None,
                    extended_agent_card: None,
                },
                default_input_modes: vec!["text/plain".into()],
                default_output_modes: vec!["text/plain".into()],
                skills: Vec::new(),
                provider: None,
                documentation_url: None,
                icon_url: None,
                security_schemes: None,
                security_requirements: None,
                signatures: None,
            },
            handler: Arc::new(handler),
            config: AgentConfig::default(),
        }
    }

    /// What the agent does, for people and for routing agents.
    pub fn description(mut self, description: impl Into<String>) -> Agent {
        self.card.description = description.into();
        self
    }

    /// Adds a skill to the card.
    pub fn skill(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Agent {
        self.card.skills.push(AgentSkill {
            id: id.into(),
            name: name.into(),
            description: description.into(),
            tags: Vec::new(),
            examples: None,
            input_modes: None,
            output_modes: None,
            security_requirements: None,
        });
        self
    }

    /// Whether the agent streams (the card's `capabilities.streaming`; default true).
    pub fn streaming(mut self, streaming: bool) -> Agent {
        self.card.capabilities.streaming = Some(streaming);
        self
    }

    /// The media types the agent accepts and produces (defaults: `text/plain`).
    pub fn modes(mut self, input: &[&str], output: &[&str]) -> Agent {
        self.card.default_input_modes = input.iter().map(|s| (*s).to_owned()).collect();
        self.card.default_output_modes = output.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Replaces the whole card (its name stays the agent's name).
    pub fn card(mut self, card: AgentCard) -> Agent {
        let name = std::mem::take(&mut self.card.name);
        self.card = AgentCard { name, ..card };
        self
    }

    /// The instance settings.
    pub fn config(mut self, config: AgentConfig) -> Agent {
        self.config = config;
        self
    }

    /// The agent's card as it will be published.
    pub fn agent_card(&self) -> &AgentCard {
        &self.card
    }

    /// Starts one instance on the broker `bus` describes (its client id and last will are
    /// set here). Returns once the instance is announced and its request path probed.
    pub async fn start(self, mut bus_config: BusConfig) -> Result<RunningAgent, AgentError> {
        let name = self.card.name.clone();
        let topics = Topics::new(&self.config.namespace)?;
        let instance = uuid::Uuid::now_v7().simple().to_string();
        let presence_topic = topics.presence(&name, &instance)?;
        let request_filter = if self.config.shared_subscription {
            topics.agent_request_shared_filter(&name)?
        } else {
            tracing::info!(agent = %name, "shared subscriptions off: run a single instance of this agent");
            topics.agent_request_filter(&name)?
        };
        let cancel_filter = topics.agent_cancel_filter(&name)?;
        let card_topic = topics.agent_card(&name)?;

        bus_config.client_id = format!("{name}-{instance}");
        bus_config.last_will = Some(LastWill {
            topic: presence_topic.clone(),
            payload: presence_payload(
                &name,
                &instance,
                PresenceStatus::Offline,
                None,
                Some("connection lost"),
            )
            .into(),
            qos: QoS::AtLeastOnce,
            retain: true,
        });
        let bus = Bus::connect(bus_config).await?;
        let watches = Watches::subscribe(&bus, &card_topic, &presence_topic).await?;
        let requester = Requester::start(
            bus.clone(),
            topics.clone(),
            RequesterKind::Agent,
            &name,
            &instance,
        )
        .await?;
        let directory = PeerDirectory::new(
            bus.clone(),
            topics.clone(),
            &name,
            self.config.trusted_keys.clone(),
            requester.clone(),
            self.config.probe_timeout,
        );

        let mut requests = bus.subscribe(&request_filter, QoS::AtLeastOnce).await?;
        let mut cancels = bus.subscribe(&cancel_filter, QoS::AtLeastOnce).await?;

        let own_card = Arc::new(Mutex::new(OwnCard::new(
            codec::card::write_card_combined(&self.card),
            self.config.signing_key.as_ref(),
        )));
        let card_json = own_card.locked().payload.clone();
        bus.publish(&card_topic, card_json, QoS::AtLeastOnce, true)
            .await?;
        let since = chrono::Utc::now().to_rfc3339();
        let online = presence_payload(
            &name,
            &instance,
            PresenceStatus::Online,
            Some((self.config.heartbeat, &since)),
            None,
        );
        bus.publish(&presence_topic, online.clone(), QoS::AtLeastOnce, true)
            .await?;

        let shared = Arc::new(InstanceState {
            name: name.clone(),
            instance: instance.clone(),
            bus: bus.clone(),
            handler: self.handler,
            config: self.config.clone(),
            requester: requester.clone(),
            directory,
            running: Mutex::default(),
            idle: tokio::sync::Notify::new(),
            dedup: Mutex::new(Dedup::new(DEDUP_CAPACITY)),
            topics: topics.clone(),
            own_card: own_card.clone(),
        });

        let stop = CancellationToken::new();
        let semaphore = Arc::new(Semaphore::new(self.config.max_concurrent_tasks.max(1)));
        let request_loop = {
            let shared = shared.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    let message = tokio::select! {
                        message = requests.recv() => message,
                        _ = stop.cancelled() => break,
                    };
                    let Some(message) = message else { break };
                    let Ok(permit) = semaphore.clone().acquire_owned().await else {
                        break;
                    };
                    let request = handle_request(shared.clone(), message);
                    tokio::spawn(async move {
                        request.await;
                        drop(permit);
                    });
                }
            })
        };
        let cancel_loop = {
            let shared = shared.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    let message = tokio::select! {
                        message = cancels.recv() => message,
                        _ = stop.cancelled() => break,
                    };
                    let Some(message) = message else { break };
                    handle_cancel(&shared, &message.payload);
                }
            })
        };
        let oversized_loop = {
            let shared = shared.clone();
            let stop = stop.clone();
            let mut dropped = bus.dropped();
            tokio::spawn(async move {
                loop {
                    let next = tokio::select! {
                        next = dropped.recv() => next,
                        _ = stop.cancelled() => break,
                    };
                    match next {
                        Ok(message) if message.reason == DropReason::Oversized => {
                            answer_oversized(&shared, &message).await;
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
            })
        };
        let guard_loop = tokio::spawn(guard::run(
            Guarded {
                name: name.clone(),
                instance: instance.clone(),
                card_topic: card_topic.clone(),
                presence_topic: presence_topic.clone(),
                card: own_card.clone(),
                online: online.clone(),
                own_key: self
                    .config
                    .signing_key
                    .as_ref()
                    .map(|key| TrustedKeys::of(&[key])),
                interval: self.config.heartbeat,
            },
            watches,
            bus.clone(),
            stop.clone(),
        ));
        let heartbeat_loop = {
            let bus = bus.clone();
            let stop = stop.clone();
            let topic = presence_topic.clone();
            let heartbeat = self.config.heartbeat;
            let (own_card, card_topic) = (own_card.clone(), card_topic.clone());
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(heartbeat);
                ticks.tick().await;
                // With one broker node nothing is announced again: the broker keeps the
                // retained card and presence across a reconnect.
                let failover = bus.broker_nodes() > 1;
                let mut state = bus.state();
                let mut sessions_lost = bus.sessions_lost();
                loop {
                    tokio::select! {
                        _ = ticks.tick() => {
                            if let Err(error) = bus.publish(&topic, online.clone(), QoS::AtLeastOnce, true).await {
                                tracing::warn!(%error, "presence heartbeat not published");
                            }
                        }
                        changed = state.changed(), if failover => {
                            if changed.is_err() {
                                break;
                            }
                            let connected = *state.borrow_and_update() == ConnectionState::Connected;
                            let lost = bus.sessions_lost();
                            if !connected || lost == sessions_lost {
                                continue;
                            }
                            sessions_lost = lost;
                            // Connected again without a session, maybe to another node of the
                            // broker's cluster: the card and the presence are announced there
                            // again at once.
                            let card = own_card.locked().payload.clone();
                            for (topic, payload) in [(&card_topic, card), (&topic, online.clone())] {
                                if let Err(error) = bus.publish(topic, payload, QoS::AtLeastOnce, true).await {
                                    tracing::warn!(%error, %topic, "not announced again after a reconnect");
                                }
                            }
                        }
                        _ = stop.cancelled() => break,
                    }
                }
            })
        };

        let running = RunningAgent {
            shared,
            stop,
            loops: vec![
                request_loop,
                cancel_loop,
                oversized_loop,
                heartbeat_loop,
                guard_loop,
            ],
            presence_topic,
            card_topic,
        };
        match requester
            .ping(&name, self.config.probe_timeout)
            .await
            .map_err(AgentError::from)?
        {
            Some(answered_by) => {
                tracing::info!(agent = %name, %instance, %answered_by, "agent online: requests reach it");
                Ok(running)
            }
            None => {
                running.shutdown().await;
                Err(AgentError::ProbeFailed {
                    agent: name,
                    timeout: self.config.probe_timeout,
                })
            }
        }
    }
}

/// What the loops of one instance share.
pub(crate) struct InstanceState {
    pub(crate) name: String,
    pub(crate) instance: String,
    pub(crate) bus: Bus,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) config: AgentConfig,
    pub(crate) requester: Requester,
    /// The instance's view of its peers, started by the first handler that looks.
    pub(crate) directory: PeerDirectory,
    pub(crate) running: Mutex<HashMap<String, Arc<Running>>>,
    /// Told when the last running task ends (see [`InstanceState::task_ended`]).
    idle: tokio::sync::Notify,
    dedup: Mutex<Dedup>,
    /// The namespace's topics: a reply goes only to one of its response topics.
    topics: Topics,
    /// The card as this instance publishes it (and re-asserts it).
    own_card: Arc<Mutex<OwnCard>>,
}

impl InstanceState {
    pub(crate) fn lock_running(&self) -> MutexGuard<'_, HashMap<String, Arc<Running>>> {
        self.running.locked()
    }

    /// Task `id`'s run `run` ended: it leaves the running tasks (unless the task's next
    /// message has already started a new run), and a shutdown waiting for them to end is
    /// told when it was the last.
    pub(crate) fn task_ended(&self, id: &str, run: &Arc<Running>) {
        let mut running = self.lock_running();
        if running.get(id).is_some_and(|now| Arc::ptr_eq(now, run)) {
            running.remove(id);
        }
        if running.is_empty() {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no task runs, or `deadline`; true when none does.
    async fn all_ended(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.lock_running().is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return false;
            }
        }
    }
}

/// How long a shutdown waits for the tasks it canceled (past the grace) to end.
const CANCELED_WAIT: Duration = Duration::from_secs(2);

/// One running instance of an agent.
pub struct RunningAgent {
    shared: Arc<InstanceState>,
    stop: CancellationToken,
    loops: Vec<JoinHandle<()>>,
    presence_topic: String,
    card_topic: String,
}

impl RunningAgent {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The instance's connection to the broker (its state, what it counts).
    pub fn bus(&self) -> &Bus {
        &self.shared.bus
    }

    /// This instance's id (its presence topic segment).
    pub fn instance_id(&self) -> &str {
        &self.shared.instance
    }

    /// The registry this instance keeps of the mesh, started (and loaded) by the first
    /// look at it, this one or a handler's at its peers.
    pub async fn registry(&self) -> Result<&Registry, BusError> {
        self.shared.directory.registry().await
    }

    /// How many tasks run on this instance now.
    pub fn running_tasks(&self) -> usize {
        self.shared.lock_running().len()
    }

    /// Publishes a new card (retained) for the agent, signed when the agent has a key; the
    /// instance re-asserts this one from now on.
    pub async fn update_card(&self, card: &AgentCard) -> Result<(), BusError> {
        let own = OwnCard::new(
            codec::card::write_card_combined(card),
            self.shared.config.signing_key.as_ref(),
        );
        let json = own.payload.clone();
        *self.shared.own_card.locked() = own;
        self.shared
            .bus
            .publish(&self.card_topic, json, QoS::AtLeastOnce, true)
            .await
    }

    /// Stops the instance as a crash would: no offline announcement, no DISCONNECT; the
    /// broker publishes the instance's last will. Running tasks are dropped mid-way. For tests
    /// and for supervisors that must not wait.
    pub fn abort(self) {
        self.shared.bus.abort();
        self.stop.cancel();
        for handle in &self.loops {
            handle.abort();
        }
        for running in self.shared.lock_running().values() {
            running.cancel.cancel();
        }
    }

    /// Stops taking requests, lets running tasks finish for the grace period, cancels the
    /// rest, announces the instance offline, clears its retained presence and disconnects.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let now = tokio::time::Instant::now();
        if !self
            .shared
            .all_ended(now + self.shared.config.shutdown_grace)
            .await
        {
            let leftover: Vec<Arc<Running>> =
                self.shared.lock_running().values().cloned().collect();
            for running in &leftover {
                running.cancel.cancel();
            }
            let canceled = tokio::time::Instant::now() + CANCELED_WAIT;
            self.shared.all_ended(canceled).await;
        }
        for handle in &self.loops {
            handle.abort();
        }
        let offline = presence_payload(
            &self.shared.name,
            &self.shared.instance,
            PresenceStatus::Offline,
            None,
            Some("shut down"),
        );
        let bus = &self.shared.bus;
        let _ = bus
            .publish(&self.presence_topic, offline, QoS::AtLeastOnce, false)
            .await;
        let _ = bus
            .publish(&self.presence_topic, Vec::new(), QoS::AtLeastOnce, true)
            .await;
        if let Err(error) = bus.disconnect().await {
            tracing::debug!(%error, "disconnect after shutdown");
        }
        tracing::info!(agent = %self.shared.name, instance = %self.shared.instance, "agent instance stopped");
    }
}

/// Serves one request from the request topic. Everything up to the handler's start is done
/// here, synchronously, by [`route`], and the future returned (spawned per request, and held
/// for as long as its task runs) is the one of what follows, alone: not the payload, which is
/// let go once decoded (a slice of the bus's read buffer, which it would keep whole), and not
/// the larger futures of the rare one-off answers.
fn handle_request(
    shared: Arc<InstanceState>,
    message: BusMessage,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let next = route(&shared, &message.payload);
    drop(message);
    match next {
        Next::Run(started) => Box::pin(runner::drive(shared, started)),
        Next::Refuse(emitter, error) => Box::pin(async move {
            if let Err(e) = emitter.error(&error).await {
                tracing::warn!(agent = %shared.name, error = %e, "could not answer a refused request");
            }
        }),
        Next::Answer { topic, payload } => Box::pin(async move {
            publish_or_log(&shared, &topic, payload).await;
        }),
        Next::Nothing => Box::pin(std::future::ready(())),
    }
}

/// What a request on the request topic leads to.
enum Next {
    /// A task started: drive it to its end.
    Run(runner::Started),
    /// A send that is refused before it starts: answer with the error.
    Refuse(Arc<crate::emitter::Emitter>, A2aError),
    /// A one-off answer (a pong, an error to an undecodable request).
    Answer { topic: String, payload: Vec<u8> },
    /// Nothing to do (a duplicate, or no reply topic to answer on).
    Nothing,
}

fn route(shared: &Arc<InstanceState>, payload: &[u8]) -> Next {
    let request = match codec::decode_request(payload) {
        Ok(request) => request,
        Err(refused) => {
            let mut peeked = peek_request(payload);
            let Some(reply_to) = shared.reply_topic(&mut peeked.meta) else {
                tracing::warn!(agent = %shared.name, error = %refused.error, "refused a request with no reply topic");
                return Next::Nothing;
            };
            if !shared.dedup(&peeked.meta) {
                return Next::Nothing;
            }
            let payload = if peeked.method.as_deref() == Some("mesh/ping") {
                pong(shared, peeked.id)
            } else {
                codec::encode_error(
                    refused.dialect.unwrap_or(Dialect::V0_3),
                    refused.id.as_ref(),
                    &refused.error,
                )
            };
            return Next::Answer {
                topic: reply_to,
                payload,
            };
        }
    };
    let (rpc_id, method, dialect) = (request.id, request.method, request.dialect);
    match request.call {
        Call::Send(params) => {
            let mut meta = request.mesh;
            let Some(reply_to) = shared.reply_topic(&mut meta) else {
                return Next::Nothing;
            };
            if !shared.dedup(&meta) {
                return Next::Nothing;
            }
            let request = SendRequest {
                rpc_id: rpc_id.unwrap_or(JsonRpcId::Null),
                method,
                dialect,
                params,
                meta,
                reply_to,
            };
            match runner::start(shared, request) {
                Ok(started) => Next::Run(started),
                Err((emitter, error)) => Next::Refuse(emitter, error),
            }
        }
        _ => {
            // Read from the payload: only send and cancel params carry metadata in the model,
            // so the envelope of another method is not in `request.mesh`.
            let Some(reply_to) = shared.reply_topic(&mut peek_request(payload).meta) else {
                return Next::Nothing;
            };
            let error = A2aError::unsupported_operation(format!(
                "agents serve message/send and message/stream on their request topic; \
                 {method:?} is answered by the gateway or travels on the cancel topic"
            ));
            Next::Answer {
                topic: reply_to,
                payload: codec::encode_error(dialect, rpc_id.as_ref(), &error),
            }
        }
    }
}

fn handle_cancel(shared: &InstanceState, payload: &[u8]) {
    // The requester's credit of a stream it reads (flow control), the most frequent message.
    if let Some(credit) = mesh_core::flow::decode_credit(payload) {
        if let Some(sender) = shared
            .lock_running()
            .get(&credit.task_id)
            .and_then(|running| running.credit.get())
        {
            crate::flow_gate::credit(sender, credit.seq);
        }
        return;
    }
    let Ok(request) = codec::decode_request(payload) else {
        tracing::warn!(agent = %shared.name, "undecodable cancel request ignored");
        return;
    };
    let Call::CancelTask(cancel) = request.call else {
        return;
    };
    let mut meta = request.mesh;
    let Some(running) = shared.lock_running().get(&cancel.id).cloned() else {
        return; // another instance runs it, or nobody does: stay silent
    };
    if let (Some(reply_to), Some(id)) = (shared.reply_topic(&mut meta), request.id) {
        running
            .cancel_waiters
            .locked()
            .push((reply_to, id, request.dialect));
    }
    tracing::info!(agent = %shared.name, task = %cancel.id, "task canceled by request");
    running.cancel.cancel();
}

/// The answer to `mesh/ping`: a message from this instance.
fn pong(shared: &InstanceState, id: Value) -> Vec<u8> {
    let mut metadata = None;
    MeshMeta {
        instance: Some(shared.instance.clone()),
        seq: Some(0),
        ..Default::default()
    }
    .put(&mut metadata);
    let pong = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {
            "kind": "message",
            "role": "agent",
            "messageId": uuid::Uuid::now_v7().to_string(),
            "parts": [{"kind": "text", "text": "pong"}],
            "metadata": metadata,
        }
    });
    pong.to_string().into_bytes()
}

async fn publish_or_log(shared: &InstanceState, topic: &str, payload: Vec<u8>) {
    if let Err(error) = shared
        .bus
        .publish(topic, payload, QoS::AtLeastOnce, false)
        .await
    {
        tracing::warn!(agent = %shared.name, %error, "could not publish an answer");
    }
}

/// Answers a request the bus dropped as larger than it takes, when it was a request to this
/// agent whose envelope names a reply topic: -32600, so that the requester does not wait for
/// its deadline. Only the id and the envelope are read (the rest is skipped, not copied).
async fn answer_oversized(shared: &InstanceState, dropped: &Dropped) {
    let ours = matches!(
        shared.topics.parse_own(&dropped.topic),
        Some(TopicKind::AgentRequest { agent, .. }) if agent == shared.name
    );
    if !ours {
        return;
    }
    let RequestHead { id, mut meta, .. } = peek_request(&dropped.payload);
    let Some(topic) = shared.reply_topic(&mut meta) else {
        return;
    };
    let error = A2aError::invalid_request(format!(
        "the request of {} bytes is larger than agent {} takes ({} bytes, its bus's max_packet_size)",
        dropped.payload.len(),
        shared.name,
        shared.bus.max_packet_size()
    ));
    let id = JsonRpcId::from_value(id).ok();
    let payload = codec::encode_error(Dialect::V0_3, id.as_ref(), &error);
    publish_or_log(shared, &topic, payload).await;
}

impl InstanceState {
    /// The request's `_mesh.replyTo` when it is a response topic of this namespace (a
    /// gateway's or a calling agent's) in this agent's name; `None`, logged, for anything
    /// else: the agent answers nowhere else (another namespace, another agent's name, a
    /// request or discovery topic, `$SYS/…`).
    fn reply_topic(&self, meta: &mut MeshMeta) -> Option<String> {
        match meta.reply_to.take() {
            Some(topic) if self.topics.is_response_topic_of(&topic, &self.name) => Some(topic),
            Some(topic) => {
                tracing::warn!(agent = %self.name, reply_to = %topic,
                    "refused a request whose replyTo is not a response topic of the namespace in this agent's name");
                None
            }
            None => {
                tracing::warn!(agent = %self.name, "a request with no _mesh.replyTo: nowhere to answer, dropped");
                None
            }
        }
    }

    /// True the first time a request id is seen; requests without one are always served.
    fn dedup(&self, meta: &MeshMeta) -> bool {
        let Some(id) = &meta.request_id else {
            return true;
        };
        let fresh = self.dedup.locked().insert(id);
        if !fresh {
            tracing::debug!(agent = %self.name, request = %id, "duplicate delivery dropped");
        }
        fresh
    }
}

fn presence_payload(
    agent: &str,
    instance: &str,
    status: PresenceStatus,
    online: Option<(Duration, &str)>,
    reason: Option<&str>,
) -> Vec<u8> {
    let presence = Presence {
        status,
        agent: agent.to_owned(),
        instance: instance.to_owned(),
        heartbeat_ms: online.map(|(heartbeat, _)| heartbeat.as_millis() as u64),
        since: online.map(|(_, since)| since.to_owned()),
        reason: reason.map(str::to_owned),
    };
    serde_json::to_vec(&presence).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an async fn of two arguments returns, without calling it.
    fn future_size<A, B, F: Future>(_: impl Fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request's future is held (boxed) for as long as its task runs: what it holds
    /// across its awaits is the largest part of the agent's memory per task in flight (2,832
    /// bytes before the handler's result, the end and the progress event were boxed and the
    /// two timers became one; the handler's own future is boxed apart).
    #[test]
    fn the_future_of_a_running_task_stays_small() {
        let size = future_size(runner::drive);
        println!("runner::drive: {size} bytes");
        assert!(size <= 640, "a running task's future is {size} bytes");
    }
}
