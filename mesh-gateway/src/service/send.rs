//! `SendMessage` and `SendStreamingMessage`: check the agent, record the task (new, or the
//! interrupted one the message continues), publish the request on the bus and pump its
//! replies through the [`bridge`](crate::bridge). A blocking send waits (up to the blocking
//! wait) for the task to end or interrupt; a streaming send answers with the task's events
//! once the first one is there, so that an agent's refusal is a plain error, not a stream.
//! A send that returns immediately answers with the task as recorded, and asks the agent
//! for every event all the same (`message/stream` on the bus, unless its card says it does
//! not stream): a client that then subscribes to the task follows it as it runs, not only
//! its end.
//!
//! The functions here return futures from plain `fn`s (async blocks) rather than being
//! `async fn`s, which keep each by-value argument twice: the future is boxed per request by
//! the HTTP server, so its size is copied.

use super::{A2aService, RequestContext, TaskEvents};
use crate::bridge::{
    Live, Pump, Reads, SEND_CAPACITY, STREAM_CAPACITY, Subscription, Undo, set_status, task_event,
};
use crate::push::check_config;
use crate::store::TaskRecord;
use mesh_core::bus::BusError;
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::A2aError;
use mesh_core::model::{
    Message, SendMessageRequest, Task, TaskPushNotificationConfig, TaskState, TaskStatus,
};
use mesh_core::requester::{SendError, SendOptions};
use mesh_core::rpc::Reply;
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

/// What a blocking send answers with.
pub(crate) enum SendOutcome {
    /// The task, as it stands when it ended, interrupted, or the wait was over.
    Task(Arc<TaskRecord>),
    /// The agent's direct answer (a message, no task).
    Message(Message),
}

/// A task the gateway just handed to the bus.
struct Published {
    task_id: String,
    events: Subscription,
    /// The task's pump: polled in place or detached (dropping it detaches it).
    pump: Pump,
}

/// How the client that sends a message hears of its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Every event as it comes (`SendStreamingMessage`).
    Stream,
    /// The task when its turn ends, interrupts or the blocking wait is over (a blocking
    /// `SendMessage`): the agent sends its final answer only.
    Outcome,
    /// The task as recorded, at once (a `SendMessage` that returns immediately): the agent
    /// streams its events to the gateway all the same, for the task's subscribers.
    AtOnce,
}

/// A task begun (live, its originator subscribed), not yet recorded or sent.
struct Begun {
    task_id: String,
    events: Subscription,
    live: Arc<crate::bridge::LiveTask>,
    /// The interrupted task the message continues.
    previous: Option<Arc<TaskRecord>>,
}

impl A2aService {
    /// `SendMessage`: starts the task and waits (up to the blocking wait) for its end, unless
    /// the configuration asks to return immediately.
    pub(crate) fn send_message<'a>(
        &'a self,
        cx: &'a RequestContext,
        params: SendMessageRequest,
    ) -> impl Future<Output = Result<SendOutcome, A2aError>> + Send + 'a {
        let immediately = params
            .configuration
            .as_ref()
            .and_then(|c| c.return_immediately)
            .unwrap_or(false);
        async move {
            let answer = match immediately {
                true => Answer::AtOnce,
                false => Answer::Outcome,
            };
            let mut started = self.start(cx, params, answer).await?;
            // The answer waits until the task is where every gateway sharing the store
            // reads it (at once with a store of one gateway), so that a client may read it
            // through any of them next.
            let task = |service: &'a A2aService, task_id: String| async move {
                let record = service.store().get(&task_id);
                if service.store().shared() {
                    service.store().written(&task_id).await;
                }
                // Written and let go of the working set as its turn ended: the store has it.
                let record = match record {
                    Some(record) => Some(record),
                    None => service.store().load(&task_id).await?,
                };
                match record {
                    Some(record) => Ok(SendOutcome::Task(record)),
                    None => Err(A2aError::task_not_found(&task_id)),
                }
            };
            if immediately {
                return task(self, started.task_id).await;
            }
            let deadline = Instant::now() + self.settings.blocking_wait;
            loop {
                let received = tokio::select! {
                    // Shutting down: the task as it stands, as when the wait is over.
                    _ = self.shutdown.cancelled() => return task(self, started.task_id).await,
                    // The pump runs here, in the request's own task, until the task's stream ends.
                    () = &mut started.pump, if !started.pump.finished() => continue,
                    received = tokio::time::timeout_at(deadline, started.events.recv()) => received,
                };
                match received {
                    // The wait is over: the task as it stands, for the client to poll or resubscribe.
                    Err(_) | Ok(None) => return task(self, started.task_id).await,
                    Ok(Some(Live::Lagged)) => continue,
                    // The turn ended with a whole task, which the record holds.
                    Ok(Some(Live::Ended(_, record))) => {
                        if self.store().shared() {
                            self.store().written(&started.task_id).await;
                        }
                        return Ok(SendOutcome::Task(record));
                    }
                    Ok(Some(Live::Event(_, event))) => match crate::bridge::view(&event) {
                        Err(e) => return Err(e.clone()),
                        Ok(Reply::Message(message)) => {
                            return Ok(SendOutcome::Message(message.clone()));
                        }
                        Ok(reply) if crate::bridge::ends_task(reply) => {
                            return task(self, started.task_id).await;
                        }
                        Ok(_) => {}
                    },
                }
            }
        }
    }

    /// `SendStreamingMessage`: starts the task and answers with its events once the first one
    /// is there (bounded: the pump fails the task at its deadline).
    #[allow(clippy::manual_async_fn)] // on purpose: see the module docs
    pub(crate) fn stream_message<'a>(
        &'a self,
        cx: &'a RequestContext,
        params: SendMessageRequest,
    ) -> impl Future<Output = Result<TaskEvents, A2aError>> + Send + 'a {
        async move {
            let mut started = self.start(cx, params, Answer::Stream).await?;
            started.pump.detach();
            let first = loop {
                tokio::select! {
                    _ = self.shutdown.cancelled() => {
                        return Err(A2aError::internal("the gateway is shutting down"));
                    }
                    received = started.events.recv() => match received {
                        Some(Live::Event(seq, event)) => break (seq, event),
                        // Not sent to a reader of content; read as the task all the same.
                        Some(Live::Ended(seq, record)) => break (seq, task_event(&record)),
                        Some(Live::Lagged) => continue,
                        None => {
                            return Err(A2aError::internal(
                                "the task's event stream ended before its first event",
                            ));
                        }
                    },
                }
            };
            if let Err(e) = &first.1 {
                return Err(A2aError::clone(e));
            }
            // As for a send: the task is where every gateway sharing the store reads it
            // before its client hears of it.
            if self.store().shared() {
                self.store().written(&started.task_id).await;
            }
            Ok(self.events(started.task_id, vec![first], Some(started.events), false))
        }
    }

    /// Checks the agent can take a message now: known, online, the bus up (and streaming,
    /// when asked to stream). The common case reads no card.
    fn check_agent(&self, agent: &str, answer: Answer) -> Result<(), A2aError> {
        if !self.registry.is_online(agent) {
            return Err(match self.registry.agent(agent) {
                Some(_) => A2aError::internal(format!(
                    "agent {agent:?} is offline: no instance of it is running"
                )),
                None => A2aError::invalid_params(format!(
                    "no agent named {agent:?} on the mesh (agents: {})",
                    self.agents_on_the_mesh()
                )),
            });
        }
        if !self.bus.is_connected() {
            return Err(A2aError::internal(
                "the gateway has lost its connection to the message bus; try again when it recovers",
            ));
        }
        if answer == Answer::Stream && !self.streams(agent) {
            return Err(A2aError::unsupported_operation(format!(
                "agent {agent:?} does not stream (its card says capabilities.streaming: false); use SendMessage"
            )));
        }
        Ok(())
    }

    /// Whether `agent` streams: unless its card says it does not.
    fn streams(&self, agent: &str) -> bool {
        self.registry
            .agent(agent)
            .and_then(|view| view.card)
            .is_none_or(|card| card.capabilities.streaming != Some(false))
    }

    /// Starts (or resumes) the task a message is for: the live broadcast, the request
    /// encoded, the store record (the message moves into its history once encoded), the
    /// publish on the bus and the pump. The agent is checked when this is called; the future
    /// checks a push URL (a DNS lookup) when the message carries one, then records the task
    /// and publishes.
    #[allow(clippy::manual_async_fn)] // on purpose: see the module docs
    fn start<'a>(
        &'a self,
        cx: &'a RequestContext,
        mut params: SendMessageRequest,
        answer: Answer,
    ) -> impl Future<Output = Result<Published, A2aError>> + Send + 'a {
        async move {
            let agent = cx.agent.as_str();
            self.check_agent(agent, answer)?;
            let push = params
                .configuration
                .as_mut()
                .and_then(|c| c.task_push_notification_config.take());
            if let Some(config) = &push {
                if self.pusher.is_none() {
                    return Err(A2aError::push_notification_not_supported());
                }
                let field = match cx.dialect {
                    Dialect::V0_1 => "params.pushNotification",
                    Dialect::V0_3 => "params.configuration.pushNotificationConfig",
                    _ => "params.configuration.taskPushNotificationConfig",
                };
                check_config(config, self.allow_private(), field).await?;
            }
            // The task the message continues, wherever the store holds it.
            let previous = match params.message.task_id.as_deref() {
                Some(task_id) if !task_id.is_empty() => self.store().load(task_id).await?,
                _ => None,
            };
            let (begun, params, options) = self.begin(cx, params, previous, answer)?;
            let Begun {
                task_id,
                events,
                live,
                previous,
            } = begun;
            let fail = |e: SendError| {
                self.bridge.end(&task_id, &live);
                send_error(agent, &task_id, e)
            };
            let (prepared, params) = match self.requester.prepare(agent, params, options) {
                Ok(prepared) => prepared,
                Err(e) => return Err(fail(e)),
            };
            let undo = match self.record(cx, &task_id, previous, params.message, push) {
                Ok(undo) => undo,
                Err(e) => {
                    self.bridge.end(&task_id, &live);
                    return Err(e);
                }
            };
            let turn_start = match &undo {
                Undo::Restore(previous) => previous.seq,
                Undo::Remove => 0,
            };
            match self.requester.publish(prepared).await {
                Ok(stream) => {
                    let pump = self
                        .bridge
                        .pump(task_id.clone(), live, stream, undo, turn_start);
                    Ok(Published {
                        task_id,
                        events,
                        pump,
                    })
                }
                Err(e) => {
                    let store = self.store();
                    match undo {
                        Undo::Remove => store.remove(&task_id),
                        Undo::Restore(record) => {
                            let _ = store.insert(TaskRecord::clone(&record));
                        }
                    }
                    Err(fail(e))
                }
            }
        }
    }

    /// Checks that the message may start or continue its task, and begins it: its ids, its
    /// live broadcast with the originator subscribed, and the params and options to send.
    fn begin(
        &self,
        cx: &RequestContext,
        mut params: SendMessageRequest,
        previous: Option<Arc<TaskRecord>>,
        answer: Answer,
    ) -> Result<(Begun, SendMessageRequest, SendOptions), A2aError> {
        let agent = cx.agent.as_str();
        let previous = match (params.message.task_id.as_deref(), previous) {
            (Some(""), _) => {
                return Err(A2aError::invalid_params(
                    "the task id is empty: give a task's id, or none to start a new task",
                ));
            }
            (Some(task_id), Some(record)) => {
                if record.agent != agent || !self.owns(cx, &record) {
                    return Err(A2aError::task_not_found(task_id));
                }
                let state = &record.task.status.state;
                if state.is_terminal() {
                    return Err(A2aError::unsupported_operation(format!(
                        "task {task_id} is {}: it takes no more messages",
                        mesh_core::model::state_name(state)
                    )));
                }
                // Submitted or working: its stream runs, here or at another gateway that
                // shares the store.
                if self.bridge.is_live(task_id)
                    || matches!(state, TaskState::Submitted | TaskState::Working)
                {
                    return Err(A2aError::unsupported_operation(format!(
                        "task {task_id} is still running: send the next message when it asks for input"
                    )));
                }
                Some(record)
            }
            // 0.1 clients choose the id of a new task.
            (Some(_), None) if cx.dialect == Dialect::V0_1 => None,
            (Some(task_id), None) => return Err(A2aError::task_not_found(task_id)),
            (None, _) => None,
        };
        let task_id = params
            .message
            .task_id
            .clone()
            .unwrap_or_else(time_ordered_id);
        let context_id = match &previous {
            Some(record) => record.task.context_id.clone(),
            None => params
                .message
                .context_id
                .take()
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        };
        params.message.task_id = Some(task_id.clone());
        params.message.context_id = Some(context_id);

        // A stream is written event by event; a blocking send answers with the task as the
        // store holds it at the end, and one that returns at once reads nothing of it.
        let (capacity, reads) = match answer {
            Answer::Stream => (STREAM_CAPACITY, Reads::Content),
            Answer::Outcome | Answer::AtOnce => (SEND_CAPACITY, Reads::Outcome),
        };
        let Some((live, events)) = self.bridge.begin(&task_id, capacity, reads) else {
            return Err(A2aError::unsupported_operation(format!(
                "task {task_id} is still running: send the next message when it asks for input"
            )));
        };
        // Every event of a task no one waits on, for whoever subscribes to it; otherwise
        // (a blocking send, or an agent whose card says it does not stream) only the final
        // answer of a short task, and every event after the progress response of a long one,
        // which a client may follow while the send waits and once the wait is over.
        let streams = match answer {
            Answer::Stream => true,
            Answer::AtOnce => self.streams(agent),
            Answer::Outcome => false,
        };
        let stream_after_progress = !streams;
        let options = SendOptions {
            method: if streams {
                Method::SendStreamingMessage
            } else {
                Method::SendMessage
            },
            task_id: task_id.clone(),
            snapshot: previous.as_ref().map(|record| record.task.clone()),
            timeout: self.settings.task_timeout,
            principal: cx.principal().map(str::to_owned),
            depth: 0,
            traceparent: cx.traceparent.clone(),
            keeps_history: true,
            stream_after_progress,
        };
        let begun = Begun {
            task_id,
            events,
            live,
            previous,
        };
        Ok((begun, params, options))
    }

    /// Records the task in the store, submitted: new, or the interrupted one it continues,
    /// with `message` (its ids set by [`begin`](Self::begin)) added to its history. How to
    /// undo that if the request cannot be published.
    fn record(
        &self,
        cx: &RequestContext,
        task_id: &str,
        previous: Option<Arc<TaskRecord>>,
        message: Message,
        push: Option<TaskPushNotificationConfig>,
    ) -> Result<Undo, A2aError> {
        let store = self.store();
        let submitted = TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        };
        match previous {
            Some(record) => {
                let mut updated = TaskRecord::clone(&record);
                set_status(&mut updated.task, submitted);
                updated
                    .task
                    .history
                    .get_or_insert_with(Vec::new)
                    .push(message);
                if let Some(config) = push {
                    super::push_configs::add(&mut updated, config, cx.dialect)?;
                }
                store.insert(updated)?;
                Ok(Undo::Restore(record))
            }
            None => {
                let task = Task {
                    id: task_id.to_owned(),
                    context_id: message.context_id.clone().unwrap_or_default(),
                    status: submitted,
                    artifacts: None,
                    history: Some(vec![message]),
                    metadata: None,
                };
                let mut record = TaskRecord::new(task, &cx.agent, cx.dialect);
                record.owner = cx.principal().map(str::to_owned);
                if let Some(config) = push {
                    // A new record has room for one config: this cannot fail.
                    let _ = super::push_configs::add(&mut record, config, cx.dialect);
                }
                // A full store refuses new work (an error naming the limit).
                store.insert(record)?;
                Ok(Undo::Remove)
            }
        }
    }
}

/// The error of a request that could not be sent to `agent` on the bus.
fn send_error(agent: &str, task_id: &str, e: SendError) -> A2aError {
    match e {
        SendError::Topic(e) => A2aError::invalid_params(format!("task id {task_id:?}: {e}")),
        SendError::Bus(BusError::PayloadTooLarge { size, max }) => {
            A2aError::invalid_request(format!(
                "the message is too large for the bus: {size} bytes with its envelope, \
                 at most {max} (the bus's max_packet_size)"
            ))
        }
        SendError::Bus(e) => A2aError::internal(format!(
            "could not publish to agent {agent:?} on the message bus: {e}"
        )),
    }
}

/// A new task's id: a UUIDv7, the milliseconds since the epoch then 74 random bits (no
/// counter, so an id tells no more of the ids made in the same millisecond). A durable
/// store's indexes on time-ordered ids grow at their end and lose their oldest entries at
/// their start, where random ids put every new task, and every evicted one, on a page of
/// its own. (Context ids stay random: no store indexes them.)
fn time_ordered_id() -> String {
    uuid::Uuid::new_v7(uuid::Timestamp::now(uuid::NoContext)).to_string()
}

#[cfg(test)]
mod tests {
    use super::time_ordered_id;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn millis() -> u128 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
    }

    #[test]
    fn ids_made_in_a_later_millisecond_sort_after() {
        let first = time_ordered_id();
        let made = millis();
        // Busy until the clock has moved on (a millisecond at most).
        while millis() == made {}
        let later = time_ordered_id();
        assert!(first < later, "{first} then {later}");
        let (a, b) = (
            uuid::Uuid::parse_str(&first).unwrap(),
            uuid::Uuid::parse_str(&later).unwrap(),
        );
        assert_eq!((a.get_version_num(), b.get_version_num()), (7, 7));
        assert_ne!(time_ordered_id(), time_ordered_id());
    }
}
