//! Server-sent events: a task's events as the client's dialect writes them, one JSON-RPC
//! response (with the request's id) per `data:` line.
//!
//! 0.3 and 1.0 streams open with the Task (or the single Message of a message-only answer,
//! then close); 0.1 streams carry status and artifact updates only, so a Task becomes its
//! artifacts and its status. A send's stream closes after the event that ends the turn (a
//! terminal or interrupted state: `final: true` in 0.1 and 0.3); a subscription's after a
//! terminal state only (an interrupted task's subscriber gets the events of its next message,
//! whoever sends it), sends keep-alive comments
//! while idle, and ends when the gateway shuts down. A subscriber that stopped reading long
//! enough to miss events is resynchronised with the task as the store has it. The response
//! tells caches and buffering proxies to pass it on as it comes (`Cache-Control: no-cache`,
//! `X-Accel-Buffering: no`).

use crate::bridge::{Live, LiveEvent, artifact_events, ends_task, status_event, view};
use crate::store::TaskStore;
use axum::http::{HeaderName, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::model::is_final_state;
use mesh_core::model::{Task, TaskState};
use mesh_core::rpc::Reply;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Everything one SSE response needs.
pub(crate) struct EventStream {
    pub dialect: Dialect,
    pub id: JsonRpcId,
    /// Events already known (the first event, a snapshot).
    pub first: Vec<LiveEvent>,
    /// The live events after them; `None` when the stream is only `first`.
    pub live: Option<crate::bridge::Subscription>,
    /// Where to resynchronise a subscriber that fell behind.
    pub store: Arc<dyn TaskStore>,
    pub task_id: String,
    pub shutdown: CancellationToken,
    pub keep_alive: Duration,
    /// Counts the stream in `mesh_gateway_sse_streams_open` while it lives.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Ends at a terminal state only, not at an interrupted one (`SubscribeToTask`,
    /// `tasks/resubscribe`: spec 1.0 §3.1.6); a send's stream ends at either.
    pub until_terminal: bool,
}

struct State {
    s: EventStream,
    _open: crate::metrics::StreamGuard,
    pending: VecDeque<String>,
    done: bool,
    /// True once the first event was rendered: a later Task becomes updates.
    started: bool,
}

impl EventStream {
    /// The SSE response.
    pub(crate) fn into_response(self) -> Response {
        let keep_alive = self.keep_alive;
        let mut state = State {
            _open: self.metrics.stream_opened(),
            s: self,
            pending: VecDeque::new(),
            done: false,
            started: false,
        };
        for event in std::mem::take(&mut state.s.first) {
            state.push(view(&event));
        }
        let mut response = Sse::new(events(state))
            .keep_alive(KeepAlive::new().interval(keep_alive))
            .into_response();
        // A buffering reverse proxy (nginx) passes each event on at once instead of holding
        // the stream back in its buffer; axum already sends `Cache-Control: no-cache`.
        response.headers_mut().insert(
            HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        );
        response
    }
}

impl State {
    fn push(&mut self, event: Result<&Reply, &A2aError>) {
        if self.done {
            return;
        }
        let (lines, end) = render(self.s.dialect, &self.s.id, event, self.started);
        self.started = true;
        self.pending.extend(lines);
        self.done = end && (!self.s.until_terminal || ends_for_good(event));
    }
}

fn events(state: State) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(line) = state.pending.pop_front() {
                return Some((Ok(Event::default().data(line)), state));
            }
            if state.done {
                return None;
            }
            let live = state.s.live.as_mut()?;
            let received = tokio::select! {
                _ = state.s.shutdown.cancelled() => return None,
                received = live.recv() => received,
            };
            match received {
                Some(Live::Event(event)) => state.push(view(&event)),
                Some(Live::Lagged) => {
                    tracing::debug!(task = %state.s.task_id, "slow subscriber resynchronised");
                    match state.s.store.get(&state.s.task_id) {
                        Some(record) => state.push(Ok(&Reply::Task(record.task.clone()))),
                        None => state.done = true,
                    }
                }
                None => {
                    // The pump ended without a final event (stopped): close with the task as
                    // it stands when that ends it.
                    if let Some(record) = state.s.store.get(&state.s.task_id) {
                        if crate::bridge::ends_task(&Reply::Task(record.task.clone())) {
                            state.push(Ok(&Reply::Task(record.task.clone())));
                        }
                    }
                    state.done = true;
                }
            }
        }
    })
}

/// True for an event after which the task never changes again: a terminal state, a direct
/// message, an error.
fn ends_for_good(event: Result<&Reply, &A2aError>) -> bool {
    match event {
        Ok(Reply::Task(task)) => task.status.state.is_terminal(),
        Ok(Reply::StatusUpdate(update)) => update.status.state.is_terminal(),
        Ok(Reply::ArtifactUpdate(_)) => false,
        _ => true,
    }
}

/// An event stream of one event, `body` (the JSON-RPC error of a streaming method that failed
/// before its first event), then its end.
pub(crate) fn one_event(body: Vec<u8>) -> Response {
    let line = String::from_utf8(body).unwrap_or_default();
    let event = stream::once(async move { Ok::<_, Infallible>(Event::default().data(line)) });
    let mut response = Sse::new(event).into_response();
    response.headers_mut().insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

/// The `data:` lines one event becomes in `dialect`, and whether the stream ends after it.
/// A Task after the first event (the final answer of a task started with a blocking send, or
/// a resynchronisation) becomes its artifacts and its status, so that every stream ends with
/// a status update (`final: true` in 0.1 and 0.3).
pub(crate) fn render(
    dialect: Dialect,
    id: &JsonRpcId,
    event: Result<&Reply, &A2aError>,
    started: bool,
) -> (Vec<String>, bool) {
    let line = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    match event {
        Err(error) => (
            vec![line(codec::encode_error(dialect, Some(id), error))],
            true,
        ),
        Ok(reply) if dialect == Dialect::V0_1 => {
            let end = ends_task(reply);
            let lines = match reply {
                Reply::Task(task) => task_as_updates(task)
                    .map(|r| line(codec::encode_reply(dialect, id, &r)))
                    .collect(),
                Reply::Message(message) => {
                    // 0.1 has no message-only answer in a stream: a completed status carries it.
                    let task = Task {
                        id: message.task_id.clone().unwrap_or_default(),
                        context_id: message.context_id.clone().unwrap_or_default(),
                        status: mesh_core::model::TaskStatus {
                            state: TaskState::Completed,
                            message: None,
                            timestamp: None,
                        },
                        artifacts: None,
                        history: None,
                        metadata: None,
                    };
                    let mut event = status_event(&task, TaskState::Completed, None);
                    event.status.message = Some(message.clone());
                    vec![line(codec::encode_reply(
                        dialect,
                        id,
                        &Reply::StatusUpdate(event),
                    ))]
                }
                other => vec![line(codec::encode_reply(dialect, id, other))],
            };
            (lines, end)
        }
        Ok(Reply::Task(task)) if started => (
            task_as_updates(task)
                .map(|r| line(codec::encode_reply(dialect, id, &r)))
                .collect(),
            is_final_state(&task.status.state),
        ),
        Ok(reply) => (
            vec![line(codec::encode_reply(dialect, id, reply))],
            ends_task(reply),
        ),
    }
}

/// A task as 0.1 stream events: its artifacts, then its status.
fn task_as_updates(task: &Task) -> impl Iterator<Item = Reply> + '_ {
    let status = mesh_core::model::TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: None,
    };
    artifact_events(task)
        .map(Reply::ArtifactUpdate)
        .chain(std::iter::once(Reply::StatusUpdate(status)))
}
