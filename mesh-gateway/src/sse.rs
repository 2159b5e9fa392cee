//! Server-sent events: a task's events ([`TaskEvents`]) as `data:` lines, each event written
//! by the binding's renderer: a JSON-RPC response with the request's id in the client's
//! dialect ([`jsonrpc_events`]), or a bare `StreamResponse` for HTTP+JSON.
//!
//! 0.3 and 1.0 streams open with the Task (or the single Message of a message-only answer,
//! then close); 0.1 streams carry status and artifact updates only, so a Task becomes its
//! artifacts and its status. A Task after the first event (the final answer of a task started
//! with a blocking send, or a resynchronisation) becomes its artifacts and its status too, so
//! that every stream ends with a status update (`final: true` in 0.1 and 0.3). Idle streams
//! get keep-alive comments. Each event's last `data:` line carries the event's sequence
//! number in its task as the SSE `id` (for `Last-Event-ID`). The response tells caches and buffering proxies to pass it on as
//! it comes (`Cache-Control: no-cache`, `X-Accel-Buffering: no`).

use crate::bridge::{LiveEvent, Seq, status_event, task_as_updates, view};
use crate::http_server::LongLived;
use crate::service::TaskEvents;
use axum::http::{HeaderName, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::model::{Task, TaskState};
use mesh_core::rpc::Reply;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

/// Writes one event as server-sent events; `started` is true once an event was written.
pub(crate) trait Render: Send + 'static {
    fn events(&mut self, event: Result<&Reply, &A2aError>, started: bool) -> Vec<Event>;
}

/// The events of one task event: the last one carries its sequence number as the SSE `id`
/// (when the store logged it), so that a client that saw it has seen the whole event.
fn with_id(mut events: Vec<Event>, seq: Seq) -> Vec<Event> {
    if seq > 0
        && let Some(last) = events.pop()
    {
        events.push(last.id(seq.to_string()));
    }
    events
}

/// JSON-RPC responses with the request's id, in the client's dialect.
pub(crate) struct JsonRpcEvents {
    pub dialect: Dialect,
    pub id: JsonRpcId,
}

impl Render for JsonRpcEvents {
    fn events(&mut self, event: Result<&Reply, &A2aError>, started: bool) -> Vec<Event> {
        let (dialect, id) = (self.dialect, &self.id);
        render(
            dialect,
            event,
            started,
            |reply| codec::encode_reply(dialect, id, reply),
            |error| codec::encode_error(dialect, Some(id), error),
        )
        .into_iter()
        .map(|line| Event::default().data(line))
        .collect()
    }
}

/// Bare `StreamResponse` objects (HTTP+JSON, spec 1.0 §11.7); an error is an `error` event
/// carrying a `google.rpc.Status` (§11.6), as a2a-sdk's server writes it.
pub(crate) struct RestEvents;

impl Render for RestEvents {
    fn events(&mut self, event: Result<&Reply, &A2aError>, started: bool) -> Vec<Event> {
        if let Err(error) = event {
            let status = error.to_status_json(error.kind.http_status());
            return vec![Event::default().event("error").data(status.to_string())];
        }
        render(
            Dialect::V1_0,
            event,
            started,
            |reply| codec::write_reply_json(Dialect::V1_0, reply),
            |_| Vec::new(),
        )
        .into_iter()
        .map(|line| Event::default().data(line))
        .collect()
    }
}

/// The SSE response of `events`, each written by `render`.
pub(crate) fn respond(events: TaskEvents, render: impl Render, keep_alive: Duration) -> Response {
    let state = State {
        started: events.resumed,
        events,
        render,
        pending: VecDeque::new(),
    };
    stream_response(lines(state), Some(keep_alive))
}

/// A server-sent events response of `events`, with keep-alive comments every `keep_alive`
/// while idle (when given), that caches and buffering proxies pass on as it comes.
pub(crate) fn stream_response(
    events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
    keep_alive: Option<Duration>,
) -> Response {
    let sse = Sse::new(events);
    let mut response = match keep_alive {
        Some(every) => sse
            .keep_alive(KeepAlive::new().interval(every))
            .into_response(),
        None => sse.into_response(),
    };
    // A buffering reverse proxy (nginx) passes each event on at once instead of holding
    // the stream back in its buffer; axum already sends `Cache-Control: no-cache`.
    response.headers_mut().insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response.extensions_mut().insert(LongLived);
    response
}

/// The SSE response of a JSON-RPC streaming method.
pub(crate) fn jsonrpc_events(
    events: TaskEvents,
    dialect: Dialect,
    id: JsonRpcId,
    keep_alive: Duration,
) -> Response {
    respond(events, JsonRpcEvents { dialect, id }, keep_alive)
}

struct State<R> {
    events: TaskEvents,
    render: R,
    pending: VecDeque<Event>,
    started: bool,
}

impl<R: Render> State<R> {
    fn push(&mut self, seq: Seq, event: &LiveEvent) {
        let events = with_id(self.render.events(view(event), self.started), seq);
        self.started = true;
        self.pending.extend(events);
    }
}

fn lines<R: Render>(state: State<R>) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop_front() {
                return Some((Ok(event), state));
            }
            let (seq, event) = state.events.next().await?;
            state.push(seq, &event);
        }
    })
}

/// An event stream of one event, `body` (the JSON-RPC error of a streaming method that failed
/// before its first event), then its end.
pub(crate) fn one_event(body: Vec<u8>) -> Response {
    let line = String::from_utf8(body).unwrap_or_default();
    let event = stream::once(async move { Ok::<_, Infallible>(Event::default().data(line)) });
    stream_response(event, None)
}

/// The `data:` lines one event becomes in `dialect` (see the module docs), each reply written
/// by `reply` and an error by `error`.
pub(crate) fn render(
    dialect: Dialect,
    event: Result<&Reply, &A2aError>,
    started: bool,
    reply: impl Fn(&Reply) -> Vec<u8>,
    error: impl Fn(&A2aError) -> Vec<u8>,
) -> Vec<String> {
    let line = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap_or_default();
    match event {
        Err(e) => vec![line(error(e))],
        Ok(Reply::Task(task)) if started || dialect == Dialect::V0_1 => {
            task_as_updates(task).map(|r| line(reply(&r))).collect()
        }
        Ok(Reply::Message(message)) if dialect == Dialect::V0_1 => {
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
            vec![line(reply(&Reply::StatusUpdate(event)))]
        }
        Ok(other) => vec![line(reply(other))],
    }
}
