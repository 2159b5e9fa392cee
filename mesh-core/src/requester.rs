//! The requesting side of the bus: send a request to an agent and receive its replies.
//!
//! A [`Requester`] owns one subscription on its response topics (a gateway instance's
//! `<ns>/a2a/v1/gateway/response/<gateway>/<instance>/+/+`, or a calling agent instance's
//! `.../agent/response/<agent>/<instance>/+/+`) and one router task that decodes every reply once
//! and hands it to the [`ReplyStream`] of the request it answers, matched by JSON-RPC id (a
//! fresh uuid per publish), when it came on a topic in the name of the agent that request went
//! to. The stream drops
//! duplicate deliveries by `_mesh.seq`, ends after the final event, and fails with a clear error
//! when the deadline passes, the instance running the task goes offline
//! ([`Requester::watch_registry`]) or the bus gives the request up.
//!
//! The gateway, peer calls inside agents and the `mesh` CLI all talk to agents through this
//! one type.
//!
//! Events the requester did not expect are dropped and counted
//! ([`Requester::unexpected_events`]), never delivered: one published in the name of another
//! agent than the one asked (a broker ACL lets each agent publish only in its own name), one
//! from an instance other than the one that answered first (the instance running the task), or
//! one whose `_mesh.seq` is out of the stream's window ([`SeqWindow`]). A publisher that forges events on an open bus
//! therefore cannot make the requester drop the real agent's events; keeping it from
//! publishing there at all is the broker's ACL's part. On a clean session, a dropped
//! connection fails every request in flight at once (its replies published meanwhile are
//! lost).

use crate::bus::{Bus, BusError, ConnectionState, DropReason, QoS};
use crate::codec;
use crate::dialect::{Dialect, Method};
use crate::error::A2aError;
use crate::flow::{BASE_WINDOW, FlowBudget, MAX_WINDOW, StreamCredit};
use crate::jsonrpc::JsonRpcId;
use crate::meta::{Caller, MeshMeta, deadline_in};
use crate::model::{CancelTaskRequest, SendMessageRequest, Task};
use crate::registry::{Registry, RegistryEvent};
use crate::rpc::{Call, Reply, Request};
use crate::seq_window::{Admit, SeqWindow};
use crate::sync::MutexExt;
pub use crate::topic::RequesterKind;
use crate::topic::{TopicError, Topics};
use foldhash::HashMap;
use serde_json::Value;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The error message of a stream whose deadline passed.
const DEADLINE_MESSAGE: &str = "the agent did not finish the task before its deadline";

/// Why the requester itself ended a reply stream with an error (rather than the agent
/// answering with one): what a caller decides on, where the error's message is for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The deadline passed.
    Deadline,
    /// The instance running the task went offline.
    InstanceOffline,
    /// No instance took the request up before an instance of its agent went offline (it was
    /// lost with that instance).
    NotTakenUp,
    /// The connection to the broker dropped while the request was in flight; the request may
    /// still reach the agent after the reconnect.
    ConnectionLost,
    /// The bus gave the request's publish up: it never reached the broker.
    GivenUp,
    /// Events of the stream were lost on the way (the broker dropped them: a QoS 0
    /// subscription, or the requester's queue at the broker full): what came is incomplete.
    EventsLost,
}

/// How long a request that no instance has answered yet may still wait for one after an
/// instance of its agent went offline: it may have been delivered to that instance, which
/// died before saying anything. An instance answers within a moment of taking a request up
/// (the reference runtime within 100 ms), so a request still unanswered after this was
/// almost certainly lost with it, and fails.
pub const PICKUP_GRACE: Duration = Duration::from_secs(2);

/// How many replies may wait in one stream before the router waits for its reader: the
/// widest flow-control window (see [`flow`](crate::flow)), so that an agent that outruns the
/// stream's reader waits for it rather than filling its stream and holding up every other
/// stream's replies.
const STREAM_CAPACITY: usize = MAX_WINDOW as usize;

/// Why a request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The agent name or task id cannot be put in a topic.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The bus refused the publish (for example, it is disconnected).
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// One reply delivered to a [`ReplyStream`].
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The decoded reply, or the JSON-RPC error the agent answered with.
    pub reply: Result<Reply, A2aError>,
    /// The agent instance that sent it (`_mesh.instance`), when it said.
    pub instance: Option<String>,
    /// The rest of the reply's `_mesh` (its position `seq`, the history it left out, what a
    /// 0.x event has no field for), taken out of the reply: no client sees it. Empty for an
    /// error.
    pub meta: MeshMeta,
    /// Set when the requester ended the stream itself (the error is its own, not the
    /// agent's), and why.
    pub ended: Option<Ended>,
    /// The reply's acknowledgement, when the requester's subscription leaves it to the
    /// consumer ([`AckMode::ByConsumer`](crate::bus::AckMode::ByConsumer)): drop it once the
    /// reply is where it must survive a crash.
    pub ack: Option<crate::bus::Ack>,
}

/// What a request carries besides its A2A params.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// `SendStreamingMessage` to receive every event, `SendMessage` for the final answer only.
    pub method: Method,
    /// The id of the new task this message starts (`_mesh.taskId`), or the id of the task a
    /// follow-up message resumes. Names the request topic.
    pub task_id: String,
    /// The task a follow-up message resumes, as the requester last saw it.
    pub snapshot: Option<Task>,
    /// How long the agent has; the stream fails when it passes.
    pub timeout: Duration,
    /// The authenticated principal the request is made for.
    pub principal: Option<String>,
    /// The call depth (0 from a gateway).
    pub depth: u32,
    /// W3C trace context to pass through.
    pub traceparent: Option<String>,
    /// The requester keeps the task's history as this turn begins (a gateway does: it
    /// stores the task), so the agent's whole-task events leave it out (`_mesh.keepsHistory`)
    /// and the requester puts it back ([`restore_history`]).
    pub keeps_history: bool,
    /// For `SendMessage`: a task still running at its progress response goes on as a stream
    /// (`_mesh.streamAfterProgress`), every later event coming as it is made, with flow
    /// control, so that the requester can pass each on to whoever follows the task.
    pub stream_after_progress: bool,
}

impl SendOptions {
    /// A first message (no snapshot) with `method` for the new task `task_id`, given
    /// `timeout`, from no principal at depth 0, with no trace context; its requester keeps
    /// nothing of the task, and a send goes on as it began.
    pub fn new(method: Method, task_id: impl Into<String>, timeout: Duration) -> SendOptions {
        SendOptions {
            method,
            task_id: task_id.into(),
            snapshot: None,
            timeout,
            principal: None,
            depth: 0,
            traceparent: None,
            keeps_history: false,
            stream_after_progress: false,
        }
    }
}

/// A request made before (by this requester's earlier run, or by another one that is gone)
/// whose replies a new requester takes over ([`Requester::start_on`]).
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The request's JSON-RPC id ([`ReplyStream::request_id`]).
    pub request_id: String,
    /// The agent it went to.
    pub agent: String,
    /// The task the request runs (its replies are credited to the agent running it, as the
    /// request may have asked for flow control).
    pub task_id: String,
    /// The position (`_mesh.seq`) of the first reply not handled yet: earlier ones are
    /// dropped as duplicates.
    pub next_seq: u64,
    /// How long the agent still has.
    pub timeout: Duration,
}

type Pending = Arc<Mutex<HashMap<String, PendingEntry>>>;

impl PendingEntry {
    /// Ends the request's stream with the requester's own error (without waiting: a stream
    /// whose buffer is full misses it and ends at its deadline).
    fn end(&self, ended: Ended, message: &str) {
        let _ = self.tx.try_send(Box::new(Delivery {
            reply: Err(A2aError::internal(message)),
            instance: self.instance.clone(),
            meta: MeshMeta::default(),
            ended: Some(ended),
            ack: None,
        }));
    }
}

/// A delivery on its way to its stream, boxed: a channel allocates its first block of 32
/// slots when it is made, and a slot of an unboxed `Delivery` (712 bytes: a `Reply` holds a
/// `Task` in place, and the `_mesh` taken out of it is a `MeshMeta` of 280) would make that
/// 22.8 KB for every request in flight, when a box makes it 256 bytes; the box costs one
/// allocation per event.
type Routed = Box<Delivery>;

struct PendingEntry {
    tx: flume::Sender<Routed>,
    /// The instance that answered first: the one running the task. Its going offline fails
    /// the stream, and events from any other instance are dropped.
    instance: Option<String>,
    /// The agent the request went to.
    agent: String,
    /// Some answer arrived (with or without an instance): the request was taken up.
    answered: bool,
}

/// Sends requests to agents over the bus and routes their replies. Cheap to clone: one
/// reference count (an agent hands a clone to every task it runs, for its peer calls).
#[derive(Clone)]
pub struct Requester {
    inner: Arc<RequesterState>,
}

/// What every clone of a [`Requester`] shares.
struct RequesterState {
    bus: Bus,
    topics: Topics,
    /// Who this requester is on the bus: a gateway or an agent, and its name.
    caller: Caller,
    /// The requester's instance: the segment after its name in its response topics.
    instance: String,
    pending: Pending,
    /// Events dropped as unexpected (see the module docs).
    unexpected: Arc<AtomicU64>,
    /// What the windows of this requester's streams may borrow beyond their base.
    flow_budget: Arc<FlowBudget>,
}

impl Requester {
    /// Subscribes to the response topics of instance `instance` of `name` (a gateway
    /// deployment's name or the calling agent's name, as `kind` says) and starts routing
    /// replies.
    pub async fn start(
        bus: Bus,
        topics: Topics,
        kind: RequesterKind,
        name: &str,
        instance: &str,
    ) -> Result<Requester, SendError> {
        let filter = topics.response_filter(kind, name, instance)?;
        let subscription = bus.subscribe(&filter, bus.inbox_qos()).await?;
        let (requester, _) =
            Requester::start_on(bus, subscription, topics, kind, name, instance, Vec::new())?;
        Ok(requester)
    }

    /// [`Requester::start`] on a subscription made already (to
    /// [`Requester::response_filter`]), which may hold replies to requests made before:
    /// `resumed` names them, and their streams (in the same order) receive their replies,
    /// from the position given on, before anything else is routed. This is how a requester
    /// takes over the requests of one that is gone (a gateway restarted, or another one that
    /// died) whose replies the broker kept in a persistent session.
    pub fn start_on(
        bus: Bus,
        mut subscription: crate::bus::Subscription,
        topics: Topics,
        kind: RequesterKind,
        name: &str,
        instance: &str,
        resumed: Vec<Resumed>,
    ) -> Result<(Requester, Vec<ReplyStream>), SendError> {
        let filter = topics.response_filter(kind, name, instance)?;
        // Every reply topic of this requester is `<prefix><agent>/<task>`.
        let prefix = filter.trim_end_matches("+/+").to_owned();
        let pending: Pending = Arc::default();
        let unexpected: Arc<AtomicU64> = Arc::default();
        fail_given_up(&bus, &pending);
        fail_on_connection_loss(&bus, &pending);
        let requester = Requester {
            inner: Arc::new(RequesterState {
                bus,
                topics,
                caller: Caller {
                    kind,
                    id: name.to_owned(),
                    principal: None,
                },
                instance: instance.to_owned(),
                pending: pending.clone(),
                unexpected: unexpected.clone(),
                flow_budget: Arc::default(),
            }),
        };
        let streams = resumed
            .into_iter()
            .map(|r| {
                let mut stream = requester.register(r.request_id, &r.agent, r.timeout);
                stream.window = SeqWindow::starting_at(r.next_seq);
                stream.flow = requester.taken_over_flow(&r.agent, &r.task_id, r.next_seq);
                stream
            })
            .collect();
        tokio::spawn(async move {
            while let Some(message) = subscription.recv().await {
                let answering = message
                    .topic
                    .strip_prefix(prefix.as_str())
                    .and_then(|rest| rest.split_once('/'))
                    .map_or("", |(agent, _)| agent);
                route(
                    &pending,
                    &unexpected,
                    answering,
                    &message.payload,
                    message.ack,
                )
                .await;
            }
        });
        Ok((requester, streams))
    }

    /// The filter of the response topics of instance `instance` of `name` (what
    /// [`Requester::start_on`] takes a subscription to).
    pub fn response_filter(
        topics: &Topics,
        kind: RequesterKind,
        name: &str,
        instance: &str,
    ) -> Result<String, TopicError> {
        topics.response_filter(kind, name, instance)
    }

    /// How many events this requester dropped as unexpected so far: from an instance other
    /// than the one running the task, or with a `_mesh.seq` out of the stream's window.
    pub fn unexpected_events(&self) -> u64 {
        self.inner.unexpected.load(Ordering::Relaxed)
    }

    /// The events of the flow-control budget its streams have borrowed now (see
    /// [`flow`](crate::flow)): 0 when no stream's window is wider than the one it asked for.
    pub fn flow_window_lent(&self) -> u64 {
        self.inner.flow_budget.lent()
    }

    /// Fails at once every stream whose task runs on an instance the registry sees go offline,
    /// instead of letting it wait for its deadline; and [`PICKUP_GRACE`] later, every request
    /// to that agent that no instance has answered yet (it was lost with the dead instance).
    pub fn watch_registry(&self, registry: &Registry) {
        let mut events = registry.subscribe();
        let pending = self.inner.pending.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(RegistryEvent::InstanceOffline { agent, instance }) => {
                        fail_instance(&pending, &agent, &instance);
                        fail_unanswered_later(&pending, agent, instance);
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        });
    }

    /// The bus this requester publishes on.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// Publishes `params` to `agent` and returns the stream of its replies.
    ///
    /// The request is encoded when this is called (not when the future is first polled), so
    /// that the future holds only the payload and the stream while it waits for the bus.
    pub fn send(
        &self,
        agent: &str,
        params: SendMessageRequest,
        options: SendOptions,
    ) -> impl Future<Output = Result<ReplyStream, SendError>> + Send + '_ {
        let prepared = self.prepare(agent, params, options);
        async move { self.publish(prepared?.0).await }
    }

    /// [`send`](Self::send) in two steps: the request to `agent` encoded and its reply
    /// stream registered, with `params` given back (a caller keeps the message without
    /// copying it), then [`publish`](Self::publish)ed.
    pub fn prepare(
        &self,
        agent: &str,
        params: SendMessageRequest,
        options: SendOptions,
    ) -> Result<(Prepared, SendMessageRequest), SendError> {
        let request_topic = self.inner.topics.agent_request(agent, &options.task_id)?;
        let reply_to = self.reply_topic(agent, &options.task_id)?;
        let rpc_id = uuid::Uuid::new_v4().simple().to_string();
        let is_follow_up = options.snapshot.is_some();
        let streaming = options.method == Method::SendStreamingMessage;
        let stream_after_progress = !streaming && options.stream_after_progress;
        let flow = match streaming || stream_after_progress {
            true => self
                .inner
                .topics
                .agent_cancel_of_request(&request_topic)
                .map(|topic| self.flow_on(topic, &options.task_id, 0)),
            false => None,
        };
        let mesh = MeshMeta {
            reply_to: Some(reply_to),
            request_id: Some(rpc_id.clone()),
            deadline: Some(deadline_in(options.timeout)),
            caller: Some(Caller {
                principal: options.principal,
                ..self.inner.caller.clone()
            }),
            depth: Some(options.depth),
            traceparent: options.traceparent,
            task_id: (!is_follow_up).then_some(options.task_id),
            task: options.snapshot.map(Box::new),
            window: flow.is_some().then_some(BASE_WINDOW),
            keeps_history: options.keeps_history.then_some(true),
            stream_after_progress: stream_after_progress.then_some(true),
            ..Default::default()
        };
        let request = Request {
            id: Some(JsonRpcId::String(rpc_id.clone())),
            method: options.method,
            dialect: Dialect::V0_3,
            shared_method: false,
            call: Call::Send(params),
            mesh,
        };
        let payload = codec::encode_request(&request);
        let Call::Send(params) = request.call else {
            unreachable!("the request made above")
        };
        let mut stream = self.register(rpc_id, agent, options.timeout);
        stream.flow = flow;
        let prepared = Prepared {
            topic: request_topic,
            payload,
            stream,
        };
        Ok((prepared, params))
    }

    /// Publishes a [`prepare`](Self::prepare)d request and returns the stream of its replies.
    pub async fn publish(&self, prepared: Prepared) -> Result<ReplyStream, SendError> {
        let Prepared {
            topic,
            payload,
            stream,
        } = prepared;
        self.inner
            .bus
            .publish(&topic, payload, QoS::AtLeastOnce, false)
            .await?;
        Ok(stream)
    }

    /// Asks every instance of `agent` to cancel `task_id`, and waits up to `timeout` for the
    /// instance running it to answer with the canceled task. `Ok(None)`: no instance answered
    /// (none runs it, or the connection to the broker dropped before an answer came).
    pub async fn cancel(
        &self,
        agent: &str,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<Result<Task, A2aError>>, SendError> {
        let cancel_topic = self.inner.topics.agent_cancel(agent, task_id)?;
        let rpc_id = uuid::Uuid::new_v4().simple().to_string();
        let request = Request {
            id: Some(JsonRpcId::String(rpc_id.clone())),
            method: Method::CancelTask,
            dialect: Dialect::V0_3,
            shared_method: false,
            call: Call::CancelTask(CancelTaskRequest {
                id: task_id.to_owned(),
                metadata: None,
                tenant: None,
            }),
            mesh: MeshMeta {
                reply_to: Some(self.reply_topic(agent, task_id)?),
                request_id: Some(rpc_id.clone()),
                caller: Some(self.inner.caller.clone()),
                ..Default::default()
            },
        };
        let mut stream = self.register(rpc_id, agent, timeout);
        self.inner
            .bus
            .publish(
                &cancel_topic,
                codec::encode_request(&request),
                QoS::AtLeastOnce,
                false,
            )
            .await?;
        Ok(match stream.next().await {
            Some(Delivery {
                reply: Ok(Reply::Task(task)),
                ..
            }) => Some(Ok(task)),
            // The requester ended the wait itself: the deadline passed, or the connection
            // dropped before an answer came.
            Some(Delivery { ended: Some(_), .. }) => None,
            Some(Delivery { reply: Err(e), .. }) => Some(Err(e)),
            Some(_) => Some(Err(A2aError::invalid_agent_response(
                "the agent answered a cancel with something other than a task",
            ))),
            None => None,
        })
    }

    /// Sends `mesh/ping` to `agent` and waits up to `timeout` for any answer: the id of the
    /// instance that answered, `Some("")` for an answer that did not say (an agent that does
    /// not know the method still proves that requests reach it), `None` for silence.
    pub async fn ping(&self, agent: &str, timeout: Duration) -> Result<Option<String>, SendError> {
        let probe = format!("probe-{}", uuid::Uuid::new_v4().simple());
        let topic = self.inner.topics.agent_request(agent, &probe)?;
        let rpc_id = uuid::Uuid::new_v4().simple().to_string();
        let mut metadata = None;
        MeshMeta {
            reply_to: Some(self.reply_topic(agent, &probe)?),
            request_id: Some(rpc_id.clone()),
            caller: Some(self.inner.caller.clone()),
            ..Default::default()
        }
        .put(&mut metadata);
        let payload = serde_json::json!({
            "jsonrpc": "2.0",
            "id": rpc_id,
            "method": "mesh/ping",
            "params": { "metadata": metadata },
        });
        let mut stream = self.register(rpc_id, agent, timeout);
        self.inner
            .bus
            .publish(
                &topic,
                payload.to_string().into_bytes(),
                QoS::AtLeastOnce,
                false,
            )
            .await?;
        Ok(match stream.next().await {
            Some(Delivery {
                ended: Some(Ended::Deadline),
                ..
            }) => None,
            Some(delivery) => Some(delivery.instance.unwrap_or_default()),
            None => None,
        })
    }

    /// The topic `agent` answers a request for `task_id` on.
    fn reply_topic(&self, agent: &str, task_id: &str) -> Result<String, TopicError> {
        self.inner.topics.response_topic(
            self.inner.caller.kind,
            &self.inner.caller.id,
            &self.inner.instance,
            agent,
            task_id,
        )
    }

    /// The flow control of a stream of `agent`'s task `task_id` taken over from position
    /// `next_seq` on; `None` when the task's cancel topic cannot be named (nothing is credited
    /// then).
    fn taken_over_flow(&self, agent: &str, task_id: &str, next_seq: u64) -> Option<Box<Flow>> {
        let topic = self.inner.topics.agent_cancel(agent, task_id).ok()?;
        let budget = self.inner.flow_budget.clone();
        let credit = StreamCredit::taken_over(budget, next_seq);
        Some(self.flow_with(topic, task_id, credit))
    }

    /// The flow control of a new stream of task `task_id`, whose credits go to `topic`.
    fn flow_on(&self, topic: String, task_id: &str, next_seq: u64) -> Box<Flow> {
        let budget = self.inner.flow_budget.clone();
        let credit = StreamCredit::new(budget, next_seq);
        self.flow_with(topic, task_id, credit)
    }

    fn flow_with(&self, topic: String, task_id: &str, credit: StreamCredit) -> Box<Flow> {
        Box::new(Flow {
            bus: self.inner.bus.clone(),
            topic,
            task_id: task_id.to_owned(),
            credit,
            owed: None,
        })
    }

    fn register(&self, rpc_id: String, agent: &str, timeout: Duration) -> ReplyStream {
        let (tx, rx) = flume::bounded(STREAM_CAPACITY);
        let entry = PendingEntry {
            tx,
            instance: None,
            agent: agent.to_owned(),
            answered: false,
        };
        self.inner.pending.locked().insert(rpc_id.clone(), entry);
        ReplyStream {
            rx,
            rpc_id,
            pending: self.inner.pending.clone(),
            unexpected: self.inner.unexpected.clone(),
            deadline: Instant::now() + timeout,
            window: SeqWindow::default(),
            flow: None,
            finished: false,
        }
    }
}

/// A request to an agent encoded, its reply stream registered (dropping it forgets the
/// stream), not yet published: see [`Requester::prepare`].
pub struct Prepared {
    topic: String,
    payload: Vec<u8>,
    stream: ReplyStream,
}

/// A stream's credit to its agent (see [`flow`](crate::flow)).
struct Flow {
    bus: Bus,
    /// The task's cancel topic, where credits go.
    topic: String,
    task_id: String,
    /// When to credit, and how far.
    credit: StreamCredit,
    /// A credit owed since the reader took an event: sent when it asks for the next one.
    owed: Option<u64>,
}

impl Flow {
    /// The reader took every event before position `next`: a credit may be owed.
    fn taken(&mut self, next: u64) {
        if let Some(position) = self.credit.taken(next, std::time::Instant::now) {
            self.owed = Some(position);
        }
    }

    /// Credits the agent with position `position` (see [`Flow::taken`]).
    async fn credit(&mut self, position: u64) {
        let credit = crate::flow::encode_credit(&self.task_id, position);
        if let Err(error) = self
            .bus
            .publish(&self.topic, credit, QoS::AtLeastOnce, false)
            .await
        {
            // The stream's deadline still bounds the agent's wait.
            tracing::debug!(%error, task = %self.task_id, "could not credit a reply stream");
        }
    }
}

/// The replies to one request, in the order the agent sent them.
pub struct ReplyStream {
    rx: flume::Receiver<Routed>,
    rpc_id: String,
    pending: Pending,
    unexpected: Arc<AtomicU64>,
    deadline: Instant,
    window: SeqWindow,
    /// Flow control: a streaming request's, or a taken-over stream's.
    flow: Option<Box<Flow>>,
    finished: bool,
}

impl ReplyStream {
    /// The next reply. After the final one (a terminal or interrupted status, a direct message,
    /// an error), `None`. When the deadline passes first, an error delivery that says so, then
    /// `None`.
    pub async fn next(&mut self) -> Option<Delivery> {
        if self.finished {
            return None;
        }
        // The credit the last event made due, now that the reader asks for more. Boxed: a
        // publish's future is large, and this one is held by every task in flight (in the
        // gateway, by its pump) for as long as it runs.
        if let Some(flow) = self.flow.as_mut()
            && let Some(next) = flow.owed.take()
        {
            Box::pin(flow.credit(next)).await;
        }
        loop {
            let delivery = match tokio::time::timeout_at(self.deadline, self.rx.recv_async()).await
            {
                Ok(Ok(delivery)) => *delivery,
                Ok(Err(flume::RecvError::Disconnected)) => {
                    self.finished = true;
                    return None;
                }
                Err(_) => {
                    self.finished = true;
                    return Some(Delivery {
                        reply: Err(A2aError::internal(DEADLINE_MESSAGE)),
                        instance: None,
                        meta: MeshMeta::default(),
                        ended: Some(Ended::Deadline),
                        ack: None,
                    });
                }
            };
            let is_final = match &delivery.reply {
                Ok(reply) => reply.is_final_given(&delivery.meta),
                Err(_) => true,
            };
            if delivery.reply.is_ok()
                && let Some(seq) = delivery.meta.seq
            {
                match self.window.admit(seq) {
                    Admit::New => {}
                    Admit::Duplicate => continue, // a duplicate delivery of QoS 1
                    Admit::OutOfWindow => {
                        self.unexpected.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            seq,
                            "dropped an event whose _mesh.seq is out of its stream's window"
                        );
                        continue;
                    }
                }
                let lost = self.window.lost()
                    + if is_final {
                        self.window.unseen_before(seq)
                    } else {
                        0
                    };
                if lost > 0 {
                    self.finished = true;
                    return Some(events_lost(lost, delivery.instance));
                }
                if let Some(flow) = self.flow.as_mut() {
                    flow.taken(seq + 1);
                }
            }
            self.finished = is_final;
            return Some(delivery);
        }
    }

    /// The request's JSON-RPC id: what names it to a requester that takes it over
    /// ([`Resumed::request_id`]).
    pub fn request_id(&self) -> &str {
        &self.rpc_id
    }

    /// Moves the deadline (a blocking send may wait less than the task may run).
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }
}

impl Drop for ReplyStream {
    fn drop(&mut self) {
        self.pending.locked().remove(&self.rpc_id);
    }
}

/// The error that ends a stream whose events were lost on the way (`lost` of them, at least).
fn events_lost(lost: u64, instance: Option<String>) -> Delivery {
    tracing::warn!(
        lost,
        "a reply stream lost events on the bus: it ends with an error"
    );
    Delivery {
        reply: Err(A2aError::internal(format!(
            "{lost} of the task's events were lost on the way from the agent (the broker \
             dropped them: its queue for this requester was full, or the subscription is QoS 0); \
             what came of the task is incomplete"
        ))),
        instance,
        meta: MeshMeta::default(),
        ended: Some(Ended::EventsLost),
        ack: None,
    }
}

/// Removes the `_mesh` metadata from a reply (before a client sees it) and returns it.
pub fn strip_reply_meta(reply: &mut Reply) -> MeshMeta {
    reply.take_mesh()
}

/// Puts back into a whole-task event the history its agent left out (`_mesh.historyFrom`,
/// asked for with [`SendOptions::keeps_history`]): the first `from` entries of `known`, the
/// history the requester keeps, before the entries the event carries. Returns how many it put
/// back: fewer than `from` when `known` has fewer (it then gives what it has).
pub fn restore_history(task: &mut Task, from: u64, known: &[crate::model::Message]) -> usize {
    let from = usize::try_from(from).unwrap_or(usize::MAX);
    let kept = &known[..from.min(known.len())];
    let carried = task.history.take().unwrap_or_default();
    if !kept.is_empty() || !carried.is_empty() {
        let mut history = Vec::with_capacity(kept.len() + carried.len());
        history.extend_from_slice(kept);
        history.extend(carried);
        task.history = Some(history);
    }
    kept.len()
}

/// [`restore_history`] from a history the caller gives up (the task's own before the event
/// replaced it): its entries move instead of being copied.
pub fn restore_history_from(
    task: &mut Task,
    from: u64,
    mut known: Vec<crate::model::Message>,
) -> usize {
    known.truncate(usize::try_from(from).unwrap_or(usize::MAX));
    let put_back = known.len();
    if let Some(carried) = task.history.take() {
        known.extend(carried);
    }
    task.history = (!known.is_empty()).then_some(known);
    put_back
}

/// Hands a reply that came on a topic in the name of agent `answering` to the stream of the
/// request it answers.
async fn route(
    pending: &Pending,
    unexpected: &AtomicU64,
    answering: &str,
    payload: &[u8],
    ack: Option<crate::bus::Ack>,
) {
    let (id, reply) = match codec::decode_reply_and_mesh(payload, Dialect::V0_3) {
        Ok(decoded) => decoded,
        Err(error) => {
            tracing::warn!(%error, "undecodable reply on the response topic, dropped");
            return;
        }
    };
    let key = match id {
        JsonRpcId::String(s) => s,
        other => other.to_string(),
    };
    let (reply, mut meta) = match reply {
        Ok((reply, meta)) => (Ok(reply), meta),
        Err(error) => (Err(error), MeshMeta::default()),
    };
    let instance = meta.instance.take();
    let tx = {
        let mut pending = pending.locked();
        let Some(entry) = pending.get_mut(&key) else {
            tracing::debug!(id = %key, "reply to no pending request, dropped");
            return;
        };
        if entry.agent != answering {
            unexpected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(id = %key, asked = %entry.agent, answering = %answering,
                "dropped a reply in the name of an agent other than the one asked");
            return;
        }
        match (&entry.instance, &instance) {
            (None, _) if !entry.answered => entry.instance.clone_from(&instance),
            (None, _) => {}
            (Some(running), Some(from)) if running == from => {}
            (Some(running), from) => {
                unexpected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(id = %key, %running, from = from.as_deref().unwrap_or("no instance"),
                    "dropped an event from an instance other than the one running the task");
                return;
            }
        }
        entry.answered = true;
        entry.tx.clone()
    };
    // Awaiting room is the backpressure: a stream whose reader stalls holds the router.
    let _ = tx
        .send_async(Box::new(Delivery {
            reply,
            instance,
            meta,
            ended: None,
            ack,
        }))
        .await;
}

/// On a clean session, fails at once every stream in flight when the connection to the
/// broker drops: the broker discards what was published to this requester meanwhile (and
/// a publish of its own may be lost too), so waiting for the deadline would wait for events
/// that may never come. With a persistent session the broker keeps the replies, and the
/// streams go on after the reconnect, unless the broker lost the session meanwhile
/// ([`Bus::sessions_lost`]): then they fail as the connection comes back.
fn fail_on_connection_loss(bus: &Bus, pending: &Pending) {
    let persistent = bus.inbox_qos() != QoS::AtMostOnce;
    let mut state = bus.state();
    let pending = pending.clone();
    let lost = bus.sessions_lost_reader();
    tokio::spawn(async move {
        let mut sessions_lost = lost();
        while state.changed().await.is_ok() {
            let message = match &*state.borrow_and_update() {
                ConnectionState::Disconnected { reason } if !persistent => format!(
                    "the connection to the broker dropped while the request was in flight \
                     ({reason}); its events may be lost, so it failed"
                ),
                ConnectionState::Connected if persistent => {
                    let now = lost();
                    if now == sessions_lost {
                        continue;
                    }
                    sessions_lost = now;
                    "the broker lost this client's session while the connection was down \
                     (restarted without keeping sessions?): the request's events sent \
                     meanwhile are lost, so it failed"
                        .to_owned()
                }
                ConnectionState::Closed => break,
                _ => continue,
            };
            let pending = pending.locked();
            if !pending.is_empty() {
                tracing::warn!(requests = pending.len(), reason = %message, "requests in flight fail");
            }
            for entry in pending.values() {
                entry.end(Ended::ConnectionLost, &message);
            }
        }
    });
}

/// Fails at once the stream of every request the bus gives up (the broker kept closing the
/// connection on it), instead of letting it wait for its deadline.
fn fail_given_up(bus: &Bus, pending: &Pending) {
    let mut dropped = bus.dropped();
    let pending = pending.clone();
    tokio::spawn(async move {
        loop {
            let publish = match dropped.recv().await {
                Ok(publish) if publish.reason == DropReason::GivenUp => publish,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            let Some(key) = request_key(&publish.payload) else {
                continue;
            };
            if let Some(entry) = pending.locked().get(&key) {
                let message = format!(
                    "the broker refused the request on {} ({} bytes): it closed the connection on it \
                     {} times (over its packet size limit?)",
                    publish.topic,
                    publish.payload.len(),
                    crate::bus::RESEND_LIMIT
                );
                entry.end(Ended::GivenUp, &message);
            }
        }
    });
}

/// The pending-map key of a request payload (its JSON-RPC id), read without decoding the rest.
fn request_key(payload: &[u8]) -> Option<String> {
    match crate::meta::peek_request(payload).id {
        Value::String(s) => Some(s),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// [`PICKUP_GRACE`] after `instance` of `agent` went offline, fails the requests to `agent`
/// that were waiting for their first answer then and still are.
fn fail_unanswered_later(pending: &Pending, agent: String, instance: String) {
    let waiting: Vec<String> = pending
        .locked()
        .iter()
        .filter(|(_, entry)| !entry.answered && entry.agent == agent)
        .map(|(key, _)| key.clone())
        .collect();
    if waiting.is_empty() {
        return;
    }
    let pending = pending.clone();
    tokio::spawn(async move {
        tokio::time::sleep(PICKUP_GRACE).await;
        let pending = pending.locked();
        for key in waiting {
            let Some(entry) = pending.get(&key).filter(|e| !e.answered) else {
                continue;
            };
            let message = format!(
                "agent {agent} instance {instance} went offline, and no instance took the \
                 request up within {} s after: it was lost with that instance",
                PICKUP_GRACE.as_secs()
            );
            entry.end(Ended::NotTakenUp, &message);
        }
    });
}

fn fail_instance(pending: &Pending, agent: &str, instance: &str) {
    let pending = pending.locked();
    for entry in pending.values() {
        if entry.instance.as_deref() == Some(instance) {
            let message =
                format!("agent {agent} instance {instance} went offline while running the task");
            entry.end(Ended::InstanceOffline, &message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, Part, PartContent, Role, TaskState, TaskStatus};

    fn text(message: &Message) -> String {
        match &message.parts[0].content {
            PartContent::Text(text) => text.clone(),
            other => panic!("a text part: {other:?}"),
        }
    }

    fn task_with(history: Option<Vec<Message>>) -> Task {
        Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Completed,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history,
            metadata: None,
        }
    }

    fn said(role: Role, words: &str) -> Message {
        Message::new(role, vec![Part::text(words)])
    }

    /// The future of `ReplyStream::next` is held by every task in flight (the gateway's pump
    /// awaits it for as long as the task runs): what it holds across its awaits is its size.
    #[test]
    fn the_future_of_the_next_reply_stays_small() {
        let (_tx, rx) = flume::bounded(1);
        let mut stream = ReplyStream {
            rx,
            rpc_id: "r".into(),
            pending: Pending::default(),
            unexpected: Arc::default(),
            deadline: Instant::now(),
            window: SeqWindow::default(),
            flow: None,
            finished: false,
        };
        let next = std::mem::size_of_val(&stream.next());
        println!("ReplyStream::next: {next} bytes");
        assert!(next <= 256, "ReplyStream::next's future is {next} bytes");
    }

    /// A way of putting the history back.
    type Restore = fn(&mut Task, u64, &[crate::model::Message]) -> usize;

    /// Both ways of putting the history back, with the same results.
    fn restorers() -> [Restore; 2] {
        [restore_history, |task, from, known| {
            restore_history_from(task, from, known.to_vec())
        }]
    }

    #[test]
    fn the_history_left_out_is_put_back_before_what_the_event_carries() {
        let known = [
            said(Role::User, "book"),
            said(Role::Agent, "where?"),
            said(Role::User, "Paris"),
            said(Role::Agent, "stale"),
        ];
        for restore in restorers() {
            let mut task = task_with(Some(vec![said(Role::Agent, "searching")]));
            assert_eq!(restore(&mut task, 3, &known), 3);
            let texts: Vec<String> = task.history.iter().flatten().map(text).collect();
            assert_eq!(texts, ["book", "where?", "Paris", "searching"]);

            // An event that carries no history gets the kept part alone.
            let mut task = task_with(None);
            assert_eq!(restore(&mut task, 1, &known), 1);
            assert_eq!(task.history.map(|h| h.len()), Some(1));
            // Nothing kept, nothing carried: no history.
            let mut task = task_with(None);
            assert_eq!(restore(&mut task, 0, &known), 0);
            assert!(task.history.is_none());
        }
    }

    #[test]
    fn a_history_shorter_than_the_agent_says_is_put_back_as_far_as_it_goes() {
        let known = [said(Role::User, "book")];
        for restore in restorers() {
            let mut task = task_with(Some(vec![said(Role::Agent, "done")]));
            assert_eq!(restore(&mut task, 3, &known), 1);
            let texts: Vec<String> = task.history.iter().flatten().map(text).collect();
            assert_eq!(texts, ["book", "done"]);
            let mut task = task_with(None);
            assert_eq!(restore(&mut task, u64::MAX, &known), 1);
            assert_eq!(task.history.map(|h| h.len()), Some(1));
        }
    }
}
