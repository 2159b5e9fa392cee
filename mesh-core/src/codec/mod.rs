//! Dialect codecs: bytes of any A2A dialect into the model ([`crate::rpc`]) and back.
//!
//! # Which part does what
//! - `typed_reader`: reads the canonical shapes of 0.3 and 1.0 with `serde` straight into
//!   the model (the JSON-RPC envelope with `params`/`result` as borrowed `RawValue`s; send,
//!   get, cancel and subscribe params; results that are a task, message or event; error
//!   responses). It accepts only the canonical member names: anything else makes it answer
//!   nothing, and the lenient reader runs on the same bytes.
//! - `lenient_reader`: the definition of what is accepted and of every error message:
//!   camelCase or snake_case, tagged or untagged parts, any state spelling, every 0.1 shape.
//!   It parses once into a `Value` and consumes it by moving out of it. The typed reader
//!   answers either nothing or exactly what the lenient one answers (property-tested in
//!   `tests`).
//! - `writer`: the one writer of every shape, the model written straight into each
//!   dialect's canonical camelCase bytes through `writer::json` (no `serde_json::Value` in
//!   between). Every public encoder returns bytes.
//! - [`card`]: the agent-card codec.
//!
//! The writer's output is pinned by the golden files of `tests/fixtures/written/` (the
//! `codec_written` tests), and every shape round-trips through both readers
//! (`codec_roundtrip`, `codec_fixtures` and the property tests here).
//!
//! # Entry points
//! - [`decode`] / [`decode_request`]: a JSON-RPC request (or batch) of any dialect into a
//!   [`Request`]; failures come as [`RequestError`] with the id and dialect when readable;
//! - [`encode_request`]: a [`Request`] in `req.dialect` (e.g. the gateway re-encodes a
//!   client's 1.0 request in 0.3 for the bus);
//! - [`encode_reply`] / [`encode_reply_to`] / [`encode_task`] / [`encode_task_page`] /
//!   [`encode_error`]: JSON-RPC responses (and SSE stream events) in a dialect;
//!   [`encode_task_with_mesh`], [`encode_event_with_mesh`]: an agent's answer, an agent's
//!   stream event, with its `_mesh` written from the fields;
//! - [`write_reply_json`], [`write_reply_to_json`], [`write_task_json`],
//!   [`write_task_page_json`], [`write_stream_task_json`]: the same results without the
//!   JSON-RPC envelope (the HTTP+JSON binding's bodies, push-notification bodies, the task
//!   store's event log);
//! - [`decode_reply`]: a response or stream event of a dialect into a [`Reply`]
//!   ([`decode_reply_and_mesh`]: with its `_mesh` taken out, as a requester reads it);
//!   [`read_reply_json`] a bare result; [`read_task`] a task already parsed;
//!   [`read_params`] the params of a method gathered by another binding.
//!
//! What 0.1/0.3 have no field for travels in `metadata._mesh` and is restored on read.
//! A request's own `params.metadata._mesh` is the bus envelope: the readers lift it into
//! [`Request::mesh`] (its task snapshot read as a [`Task`]) and [`encode_request`] writes it
//! from there.
//!
//! # Mapping notes
//! - `_mesh` stash (0.1): message `messageId`, `contextId`, `taskId`, `extensions`,
//!   `referenceTaskIds`; artifact `artifactId` (unless it is `artifact-{index}`) and
//!   `extensions`; event `contextId`. 0.1 and 0.3: a text/data part's `filename` and
//!   `mediaType`. 0.x status updates: a `final` that differs from what the state implies
//!   (terminal, input-required, auth-required) is kept as `metadata._mesh.final`.
//! - 0.3 `configuration.blocking: b` is the model's `return_immediately: !b`.
//! - 0.1 `tasks/send` `params.id`/`params.sessionId` become the message's task/context id;
//!   a missing `messageId` is generated (0.3 and 1.0 sends require it: `-32602`).
//! - A missing task/context id in a 0.1 task or event reads as `""`; a 0.1 artifact without
//!   id gets `artifact-{index}`.
//! - 0.x push-config authentication keeps only the first of `schemes`; 0.x get/delete
//!   without `pushNotificationConfigId` read the config id as `""`.
//! - The model has no `metadata` on get/list/subscribe requests: 0.x `params.metadata` there
//!   is not carried. `tenant` (1.0) is written as an extra member in 0.x params.
//! - 0.1 has no `rejected`/`auth-required` states nor an extended-card method: the 0.3
//!   spellings/name are written.
//! - Empty object `metadata` reads as absent (except `params.metadata`, kept verbatim).

pub mod card;
mod lenient_reader;
#[cfg(test)]
mod tests;
mod typed_reader;
mod writer;

use serde_json::Value;

use crate::dialect::{Dialect, Method};
use crate::error::A2aError;
use crate::jsonrpc::JsonRpcId;
use crate::meta::MeshMeta;
use crate::model::Task;
use crate::rpc::{Call, Reply, Request, RequestError};

pub use writer::TaskView;

/// What a payload decodes to: one request, or a batch (answer each element).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A single request.
    Single(Result<Request, RequestError>),
    /// A non-empty batch, one result per element, in order.
    Batch(Vec<Result<Request, RequestError>>),
}

/// Decodes a payload that may be a batch. Invalid JSON and an empty batch give
/// `Single(Err(..))` (`-32700` / `-32600`).
pub fn decode(bytes: &[u8]) -> Decoded {
    match typed_reader::decode_request(bytes) {
        Some(req) => Decoded::Single(Ok(req)),
        None => lenient_reader::request::decode(bytes),
    }
}

/// Decodes a single JSON-RPC request of any dialect. A batch gives `-32600` (use
/// [`decode`] where batches are accepted).
pub fn decode_request(bytes: &[u8]) -> Result<Request, RequestError> {
    match decode(bytes) {
        Decoded::Single(r) => r,
        Decoded::Batch(_) => Err(RequestError {
            id: None,
            notification: false,
            dialect: None,
            method: None,
            shared_method: false,
            error: A2aError::invalid_request("batch requests are not accepted here"),
        }),
    }
}

/// Encodes a request in `req.dialect` (method name from
/// [`crate::dialect::method_name`]; no `id` member for a notification).
pub fn encode_request(req: &Request) -> Vec<u8> {
    writer::to_vec(writer::size_hint::request(req), |out| {
        writer::request(out, req)
    })
}

/// Encodes a success response (or SSE event payload) in `dialect`. In 1.0 a task or message
/// is wrapped (`{"task": …}`), as SendMessage and stream events require; use
/// [`encode_reply_to`] for GetTask/CancelTask, which answer a bare task in 1.0.
pub fn encode_reply(dialect: Dialect, id: &JsonRpcId, reply: &Reply) -> Vec<u8> {
    writer::to_vec(writer::size_hint::reply(reply), |out| {
        writer::result(out, id, |out| writer::reply_for(out, None, dialect, reply))
    })
}

/// Encodes the answer to `method` in `dialect` (1.0 GetTask/CancelTask: bare task).
pub fn encode_reply_to(method: Method, dialect: Dialect, id: &JsonRpcId, reply: &Reply) -> Vec<u8> {
    writer::to_vec(writer::size_hint::reply(reply), |out| {
        writer::result(out, id, |out| {
            writer::reply_for(out, Some(method), dialect, reply)
        })
    })
}

/// Encodes the answer to `method` carrying `task` as `view` shows it: bare, except
/// SendMessage in 1.0 (`{"task": …}`).
pub fn encode_task(
    method: Method,
    dialect: Dialect,
    id: &JsonRpcId,
    task: &Task,
    view: TaskView,
) -> Vec<u8> {
    writer::to_vec(writer::size_hint::task(task, view), |out| {
        writer::result(out, id, |out| {
            writer::task_answer(out, method, task, dialect, view, None)
        })
    })
}

/// [`encode_task`] with `mesh` as the task's `metadata._mesh`, written from its fields rather
/// than put into the task's metadata as a `Value` first: how an agent answers with the task
/// it keeps. `None` for a task whose own metadata holds a `_mesh` (the caller puts `mesh`
/// into it, to merge them, and writes it with [`encode_task`]).
pub fn encode_task_with_mesh(
    method: Method,
    dialect: Dialect,
    id: &JsonRpcId,
    task: &Task,
    view: TaskView,
    mesh: &MeshMeta,
) -> Option<Vec<u8>> {
    if writer::has_own_mesh(&task.metadata) {
        return None;
    }
    Some(writer::to_vec(
        writer::size_hint::task(task, view) + MESH_HINT,
        |out| {
            writer::result(out, id, |out| {
                writer::task_answer(out, method, task, dialect, view, Some(mesh))
            })
        },
    ))
}

/// An agent's stream event (a status or artifact update, 0.3 or 1.0, with no `_mesh` of its
/// own) with `mesh` as its `metadata._mesh`, written from the fields rather than put into the
/// event's metadata as a `Value` first; `None` for any other reply (the caller puts `mesh`
/// into its metadata and writes it with [`encode_reply`]).
pub fn encode_event_with_mesh(
    dialect: Dialect,
    id: &JsonRpcId,
    reply: &Reply,
    mesh: &MeshMeta,
) -> Option<Vec<u8>> {
    if !writer::event_takes_mesh(reply, dialect) {
        return None;
    }
    Some(writer::to_vec(
        writer::size_hint::reply(reply) + MESH_HINT,
        |out| {
            writer::result(out, id, |out| {
                writer::event_with_mesh(out, reply, dialect, mesh)
            })
        },
    ))
}

/// Room for an agent's `_mesh` in an answer (instance, position, history kept).
const MESH_HINT: usize = 96;

/// The `result` of [`encode_task`] alone (no JSON-RPC envelope): the body of the
/// HTTP+JSON binding's answer.
pub fn write_task_json(method: Method, dialect: Dialect, task: &Task, view: TaskView) -> Vec<u8> {
    writer::to_vec(writer::size_hint::task(task, view), |out| {
        writer::task_answer(out, method, task, dialect, view, None)
    })
}

/// A page of tasks as ListTasks answers it, borrowed from wherever the tasks are kept.
#[derive(Debug, Clone)]
pub struct TaskPage<'a> {
    /// The tasks of the page, in order.
    pub tasks: Vec<&'a Task>,
    /// The token of the next page (empty on the last one).
    pub next_page_token: &'a str,
    /// The page size used.
    pub page_size: i32,
    /// How many tasks match in all.
    pub total_size: i32,
    /// How much of each task the page shows.
    pub view: TaskView,
}

/// About the size of a page of tasks (see `writer::size_hint`).
fn page_hint(page: &TaskPage<'_>) -> usize {
    page.tasks
        .iter()
        .map(|task| writer::size_hint::task(task, page.view))
        .sum()
}

/// Encodes a ListTasks answer in `dialect`.
pub fn encode_task_page(dialect: Dialect, id: &JsonRpcId, page: &TaskPage<'_>) -> Vec<u8> {
    writer::to_vec(page_hint(page), |out| {
        writer::result(out, id, |out| writer::task_page(out, page, dialect))
    })
}

/// The `result` of [`encode_task_page`] alone (the HTTP+JSON binding's body).
pub fn write_task_page_json(dialect: Dialect, page: &TaskPage<'_>) -> Vec<u8> {
    writer::to_vec(page_hint(page), |out| writer::task_page(out, page, dialect))
}

/// A task as a stream event carries it, alone: `{"task": …}` in 1.0 (a `StreamResponse`), the
/// bare task in 0.x. The body of a push notification.
pub fn write_stream_task_json(task: &Task, dialect: Dialect) -> Vec<u8> {
    writer::to_vec(writer::size_hint::task(task, TaskView::WHOLE), |out| {
        writer::task_answer(
            out,
            Method::SendMessage,
            task,
            dialect,
            TaskView::WHOLE,
            None,
        )
    })
}

/// The `result` of [`encode_reply_to`] alone (no JSON-RPC envelope).
pub fn write_reply_to_json(method: Method, dialect: Dialect, reply: &Reply) -> Vec<u8> {
    writer::to_vec(writer::size_hint::reply(reply), |out| {
        writer::reply_for(out, Some(method), dialect, reply)
    })
}

/// The `result` of [`encode_reply`] alone: the reply (a response's `result` or a stream event)
/// as JSON in `d`.
pub fn write_reply_json(d: Dialect, reply: &Reply) -> Vec<u8> {
    writer::to_vec(writer::size_hint::reply(reply), |out| {
        writer::reply_for(out, None, d, reply)
    })
}

/// Reads the params of `method` as `dialect` writes them: the JSON-RPC `params`, or what
/// another binding gathered into that shape (the HTTP+JSON body with its path and query
/// parameters). Reserved `_mesh` metadata is dropped, as [`decode`] drops it.
pub fn read_params(method: Method, dialect: Dialect, params: Value) -> Result<Call, A2aError> {
    let mut call = lenient_reader::params::read_call(method, dialect, Some(params))?;
    call.take_mesh();
    Ok(call)
}

/// Encodes an error response in `dialect` (`id` null when unknown).
pub fn encode_error(dialect: Dialect, id: Option<&JsonRpcId>, err: &A2aError) -> Vec<u8> {
    writer::to_vec(0, |out| writer::error(out, id, &err.to_json(dialect)))
}

/// Reads the bytes of a reply (a response's `result` or a stream event) written in `dialect`
/// (what [`write_reply_json`] writes): the typed reader first, the lenient one when it
/// declines. The shape tells the kind (0.3 `kind` tag, 1.0 wrapper key, 0.1 field shape:
/// `status`+`final` → status update, `artifact` → artifact update, else task). Invalid JSON
/// is `-32700`, a malformed reply `-32006`.
pub fn read_reply_json(bytes: &[u8], dialect: Dialect) -> Result<Reply, A2aError> {
    if let Some(reply) = typed_reader::read_result(bytes, dialect) {
        return Ok(reply);
    }
    let value = serde_json::from_slice(bytes)
        .map_err(|e| A2aError::parse(format!("Invalid JSON payload: {e}")))?;
    lenient_reader::reply::read_reply(value, dialect)
}

/// Decodes a response or stream event written in `dialect`: the id, and the result or the
/// error it carries. The outer `Err` is for payloads that are not a response (`-32700`
/// invalid JSON, `-32600` bad envelope, `-32006` malformed result).
pub type DecodedReply = (JsonRpcId, Result<Reply, A2aError>);

/// See [`DecodedReply`]. SSE framing (`data: `) must be stripped by the caller.
pub fn decode_reply(bytes: &[u8], dialect: Dialect) -> Result<DecodedReply, A2aError> {
    match typed_reader::decode_reply(bytes, dialect) {
        Some(r) => Ok(r),
        None => lenient_reader::reply::decode_reply(bytes, dialect),
    }
}

/// [`DecodedReply`] with the reply's `_mesh` metadata taken out of it (empty when it has
/// none): how a requester reads an agent's answers, whose `_mesh` no client sees.
pub type DecodedReplyAndMesh = (JsonRpcId, Result<(Reply, MeshMeta), A2aError>);

/// [`decode_reply`], then [`Reply::take_mesh`]; the typed reader reads a task's `_mesh`
/// straight into the [`MeshMeta`] (an agent's answer to SendMessage), without a `Value` tree.
pub fn decode_reply_and_mesh(
    bytes: &[u8],
    dialect: Dialect,
) -> Result<DecodedReplyAndMesh, A2aError> {
    if let Some(r) = typed_reader::decode_reply_and_mesh(bytes, dialect) {
        return Ok(r);
    }
    let (id, reply) = lenient_reader::reply::decode_reply(bytes, dialect)?;
    let reply = reply.map(|mut reply| {
        let mesh = reply.take_mesh();
        (reply, mesh)
    });
    Ok((id, reply))
}

/// Reads a bare task written in any dialect (`-32602` naming the field).
pub fn read_task(v: Value) -> Result<Task, A2aError> {
    lenient_reader::read_task(v, "task")
}
