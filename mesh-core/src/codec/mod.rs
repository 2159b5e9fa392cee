//! Dialect codecs: bytes of any A2A dialect into the model ([`crate::rpc`]) and back.
//!
//! Entry points:
//! - [`decode`] / [`decode_request`]: a JSON-RPC request (or batch) of any dialect into a
//!   [`Request`]; failures come as [`RequestError`] with the id and dialect when readable;
//! - [`encode_request`]: a [`Request`] in `req.dialect` (e.g. the gateway re-encodes a
//!   client's 1.0 request in 0.3 for the bus);
//! - [`encode_reply`] / [`encode_reply_to`] / [`encode_error`]: JSON-RPC responses (and SSE
//!   stream events) in a dialect;
//! - [`decode_reply`]: a response or stream event of a dialect into a [`Reply`];
//! - object helpers [`write_reply`] (and its bytes, [`write_reply_json`]), [`read_reply`],
//!   [`write_task`], [`read_task`], [`write_message`], [`read_message`] for
//!   push-notification bodies, SSE and the gateway's task event log;
//! - [`card`]: the agent-card codec.
//!
//! Reading is lenient (see the `read` module docs: camelCase or snake_case, tagged or
//! untagged parts, any state spelling); writing is canonical camelCase per dialect.
//! What 0.1/0.3 have no field for travels in `metadata._mesh` and is restored on read.
//! A request's own `params.metadata._mesh` is the bus envelope: the readers lift it into
//! [`Request::mesh`] and [`encode_request`] writes it from there.
//!
//! # Fast path and fallback
//! - Writing never builds a `serde_json::Value`: the `wire` module's writers borrow the
//!   model and write each dialect straight into the output bytes through the `out` module's
//!   JSON writer (literal member names, strings escaped eight bytes at a time); the public
//!   helpers that return a `Value` read those bytes back.
//! - Reading first tries the `fast` module: a typed `serde` decode of the canonical shapes
//!   (the JSON-RPC envelope with `params`/`result` as borrowed `RawValue`s; 0.3 and 1.0
//!   SendMessage/SendStreamingMessage params, GetTask/CancelTask/SubscribeToTask params;
//!   results that are a `kind`-tagged 0.3 or wrapped 1.0 task, message, status update or
//!   artifact update, a bare 1.0 task, `{}`; error responses). Its structs accept only the
//!   canonical member names, so anything else (snake_case, untagged or `type`-tagged parts,
//!   0.1 shapes, unknown or duplicate members, wrong types, batches, other methods and
//!   results) falls back to the lenient reader on the same bytes, which parses once into a
//!   `Value` and consumes it by moving out of it. The lenient reader stays the one
//!   definition of what is accepted and of every error message; the fast path answers
//!   either nothing or exactly what the lenient reader answers (property-tested).
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
mod fast;
mod out;
mod params;
mod read;
#[cfg(test)]
mod tests;
mod wire;
#[cfg(test)]
mod write;

use serde_json::Value;

use crate::dialect::{Dialect, Method, resolve_method};
use crate::error::{A2aError, ErrorKind};
use crate::jsonrpc::{Incoming, JsonRpcId, json_type, parse_envelope, parse_incoming};
use crate::model::{ListTaskPushNotificationConfigsResponse, ListTasksResponse, Message, Task};
use crate::rpc::{Call, Reply, Request, RequestError};

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
    match fast::decode_request(bytes) {
        Some(req) => Decoded::Single(Ok(req)),
        None => decode_lenient(bytes),
    }
}

/// [`decode`] without the typed fast path: the definition of what is accepted.
fn decode_lenient(bytes: &[u8]) -> Decoded {
    match parse_incoming(bytes) {
        Err(e) => Decoded::Single(Err(RequestError {
            id: e.id,
            notification: false,
            dialect: None,
            method: None,
            shared_method: false,
            error: e.error,
        })),
        Ok(Incoming::Single(v)) => Decoded::Single(decode_value(v)),
        Ok(Incoming::Batch(items)) => Decoded::Batch(items.into_iter().map(decode_value).collect()),
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

/// Decodes one request object (a single request or a batch element).
pub fn decode_value(value: Value) -> Result<Request, RequestError> {
    let env = parse_envelope(value).map_err(|e| {
        let info = e.method.as_deref().and_then(resolve_method);
        RequestError {
            id: e.id,
            notification: false,
            dialect: info.map(|i| i.dialect),
            method: info.map(|i| i.method),
            shared_method: info.is_some_and(|i| i.shared),
            error: e.error,
        }
    })?;
    let notification = env.id.is_none();
    let Some(info) = resolve_method(&env.method) else {
        return Err(RequestError {
            id: env.id,
            notification,
            dialect: None,
            method: None,
            shared_method: false,
            error: A2aError::method_not_found(&env.method),
        });
    };
    match params::read_call(info.method, info.dialect, env.params) {
        Ok(mut call) => Ok(Request {
            id: env.id,
            method: info.method,
            dialect: info.dialect,
            shared_method: info.shared,
            mesh: call.take_mesh(),
            call,
        }),
        Err(error) => Err(RequestError {
            id: env.id,
            notification,
            dialect: Some(info.dialect),
            method: Some(info.method),
            shared_method: info.shared,
            error,
        }),
    }
}

/// Encodes a request in `req.dialect` (method name from
/// [`crate::dialect::method_name`]; no `id` member for
/// a notification).
pub fn encode_request(req: &Request) -> Vec<u8> {
    wire::to_vec(|out| wire::request(out, req))
}

/// Encodes a success response (or SSE event payload) in `dialect`. In 1.0 a task or message
/// is wrapped (`{"task": …}`), as SendMessage and stream events require; use
/// [`encode_reply_to`] for GetTask/CancelTask, which answer a bare task in 1.0.
pub fn encode_reply(dialect: Dialect, id: &JsonRpcId, reply: &Reply) -> Vec<u8> {
    wire::to_vec(|out| wire::result(out, id, |out| wire::reply_for(out, None, dialect, reply)))
}

/// Encodes the answer to `method` in `dialect` (1.0 GetTask/CancelTask: bare task).
pub fn encode_reply_to(method: Method, dialect: Dialect, id: &JsonRpcId, reply: &Reply) -> Vec<u8> {
    wire::to_vec(|out| {
        wire::result(out, id, |out| {
            wire::reply_for(out, Some(method), dialect, reply)
        })
    })
}

/// Encodes the answer to `method` carrying `task`, with only the last `history_length`
/// messages of its history when given: bare, except SendMessage in 1.0 (`{"task": …}`).
pub fn encode_task(
    method: Method,
    dialect: Dialect,
    id: &JsonRpcId,
    task: &Task,
    history_length: Option<usize>,
) -> Vec<u8> {
    let wrapped = dialect == Dialect::V1_0 && method == Method::SendMessage;
    wire::to_vec(|out| {
        wire::result(out, id, |out| {
            if wrapped {
                wire::wrapped_task(out, task, dialect, history_length)
            } else {
                wire::task(out, task, dialect, history_length)
            }
        })
    })
}

/// The `result` of [`encode_task`] alone (no JSON-RPC envelope): the body of the
/// HTTP+JSON binding's answer.
pub fn write_task_json(
    method: Method,
    dialect: Dialect,
    task: &Task,
    history_length: Option<usize>,
) -> Vec<u8> {
    wire::to_vec(|out| {
        if dialect == Dialect::V1_0 && method == Method::SendMessage {
            wire::wrapped_task(out, task, dialect, history_length)
        } else {
            wire::task(out, task, dialect, history_length)
        }
    })
}

/// The `result` of [`encode_reply_to`] alone (no JSON-RPC envelope).
pub fn write_reply_to_json(method: Method, dialect: Dialect, reply: &Reply) -> Vec<u8> {
    wire::to_vec(|out| wire::reply_for(out, Some(method), dialect, reply))
}

/// Reads the params of `method` as `dialect` writes them: the JSON-RPC `params`, or what
/// another binding gathered into that shape (the HTTP+JSON body with its path and query
/// parameters). Reserved `_mesh` metadata is dropped, as [`decode`] drops it.
pub fn read_params(method: Method, dialect: Dialect, params: Value) -> Result<Call, A2aError> {
    let mut call = params::read_call(method, dialect, Some(params))?;
    call.take_mesh();
    Ok(call)
}

/// Encodes an error response in `dialect` (`id` null when unknown).
pub fn encode_error(dialect: Dialect, id: Option<&JsonRpcId>, err: &A2aError) -> Vec<u8> {
    wire::to_vec(|out| wire::error(out, id, &err.to_json(dialect)))
}

/// The JSON of a reply (a response's `result`) in `dialect`.
pub fn write_reply(d: Dialect, reply: &Reply) -> Value {
    wire::to_value(|out| wire::reply_for(out, None, d, reply))
}

/// The bytes of [`write_reply`]: the reply (a response's `result` or a stream event) as
/// JSON in `d`, written straight from the model.
pub fn write_reply_json(d: Dialect, reply: &Reply) -> Vec<u8> {
    wire::to_vec(|out| wire::reply_for(out, None, d, reply))
}

/// Reads a reply (a response's `result` or a stream event) written in `dialect`; the shape
/// tells the kind (0.3 `kind` tag, 1.0 wrapper key, 0.1 field shape: `status`+`final` →
/// status update, `artifact` → artifact update, else task). Errors are `-32006`.
pub fn read_reply(v: Value, dialect: Dialect) -> Result<Reply, A2aError> {
    read_reply_inner(v, dialect).map_err(|e| {
        if e.kind == ErrorKind::InvalidParams || e.kind == ErrorKind::InvalidRequest {
            A2aError {
                kind: ErrorKind::InvalidAgentResponse,
                ..e
            }
        } else {
            e
        }
    })
}

fn read_reply_inner(v: Value, d: Dialect) -> Result<Reply, A2aError> {
    let path = "result";
    let mut obj = match v {
        Value::Null => return Ok(Reply::Empty),
        Value::Array(items) => {
            let configs = items
                .into_iter()
                .enumerate()
                .map(|(i, c)| read::read_push_config(c, &format!("{path}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Reply::PushConfigs(
                ListTaskPushNotificationConfigsResponse {
                    configs,
                    next_page_token: None,
                },
            ));
        }
        Value::Object(o) => o,
        other => {
            return Err(A2aError::invalid_agent_response(format!(
                "{path}: must be an object; found {}",
                json_type(&other)
            )));
        }
    };
    if obj.is_empty() {
        return Ok(Reply::Empty);
    }
    // 1.0 wrappers (accepted in every dialect).
    if obj.len() == 1 {
        for (key, which) in [
            ("task", 0),
            ("message", 1),
            ("statusUpdate", 2),
            ("artifactUpdate", 3),
        ] {
            if let Some(inner) = obj.remove(key) {
                let p = format!("{path}.{key}");
                return Ok(match which {
                    0 => Reply::Task(read::read_task(inner, &p)?),
                    1 => Reply::Message(read::read_message(inner, &p, false)?),
                    2 => Reply::StatusUpdate(read::read_status_event(inner, &p)?),
                    _ => Reply::ArtifactUpdate(read::read_artifact_event(inner, &p)?),
                });
            }
        }
    }
    let tag = obj
        .get("kind")
        .or_else(|| obj.get("type"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let v = Value::Object(obj);
    let o = v.as_object();
    let has = |k: &str| o.is_some_and(|o| o.contains_key(k));
    match tag.as_deref() {
        Some("task") => return Ok(Reply::Task(read::read_task(v, path)?)),
        Some("message") => return Ok(Reply::Message(read::read_message(v, path, false)?)),
        Some("status-update" | "TaskStatusUpdateEvent") => {
            return Ok(Reply::StatusUpdate(read::read_status_event(v, path)?));
        }
        Some("artifact-update" | "TaskArtifactUpdateEvent") => {
            return Ok(Reply::ArtifactUpdate(read::read_artifact_event(v, path)?));
        }
        _ => {}
    }
    if has("tasks") {
        return read_tasks(v).map(Reply::Tasks);
    }
    if has("configs") {
        let Value::Object(mut o) = v else {
            return Ok(Reply::Empty);
        };
        let configs = match o.remove("configs") {
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, c)| read::read_push_config(c, &format!("{path}.configs[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        let next_page_token = o
            .remove("nextPageToken")
            .and_then(|t| t.as_str().map(String::from));
        return Ok(Reply::PushConfigs(
            ListTaskPushNotificationConfigsResponse {
                configs,
                next_page_token,
            },
        ));
    }
    if has("name") && (has("capabilities") || has("supportedInterfaces") || has("skills")) {
        return card::read_card(v).map(Reply::Card);
    }
    if has("pushNotificationConfig") || (has("url") && !has("status")) {
        return Ok(Reply::PushConfig(read::read_push_config(v, path)?));
    }
    if has("artifact") {
        return Ok(Reply::ArtifactUpdate(read::read_artifact_event(v, path)?));
    }
    if has("status") && (has("final") || has("taskId") || has("task_id")) {
        return Ok(Reply::StatusUpdate(read::read_status_event(v, path)?));
    }
    if has("status") {
        return Ok(Reply::Task(read::read_task(v, path)?));
    }
    if has("role") && has("parts") {
        return Ok(Reply::Message(read::read_message(v, path, false)?));
    }
    let _ = d;
    Err(A2aError::invalid_agent_response(format!(
        "{path}: not a task, message, event, task list, push config or agent card"
    )))
}

fn read_tasks(v: Value) -> Result<ListTasksResponse, A2aError> {
    let mut o = read::Obj::new(v, "result")?;
    let (tp, tv) = o.req(&["tasks"])?;
    let Value::Array(items) = tv else {
        return Err(A2aError::invalid_params_at(&tp, "must be an array"));
    };
    let tasks = items
        .into_iter()
        .enumerate()
        .map(|(i, t)| read::read_task(t, &format!("{tp}[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ListTasksResponse {
        tasks,
        next_page_token: o
            .str_opt(&["nextPageToken", "next_page_token"])?
            .unwrap_or_default(),
        page_size: o.i32_opt(&["pageSize", "page_size"])?.unwrap_or_default(),
        total_size: o.i32_opt(&["totalSize", "total_size"])?.unwrap_or_default(),
    })
}

/// Decodes a response or stream event written in `dialect`: the id, and the result or the
/// error it carries. The outer `Err` is for payloads that are not a response (`-32700`
/// invalid JSON, `-32600` bad envelope, `-32006` malformed result).
pub type DecodedReply = (JsonRpcId, Result<Reply, A2aError>);

/// See [`DecodedReply`]. SSE framing (`data: `) must be stripped by the caller.
pub fn decode_reply(bytes: &[u8], dialect: Dialect) -> Result<DecodedReply, A2aError> {
    match fast::decode_reply(bytes, dialect) {
        Some(r) => Ok(r),
        None => decode_reply_lenient(bytes, dialect),
    }
}

/// [`decode_reply`] without the typed fast path: the definition of what is accepted.
fn decode_reply_lenient(bytes: &[u8], dialect: Dialect) -> Result<DecodedReply, A2aError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| A2aError::parse(format!("Invalid JSON payload: {e}")))?;
    let Value::Object(mut obj) = v else {
        return Err(A2aError::invalid_request("response: must be an object"));
    };
    match obj.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        _ => {
            return Err(A2aError::invalid_request_at(
                "jsonrpc",
                "missing or not \"2.0\"",
            ));
        }
    }
    let id = match obj.remove("id") {
        Some(v) => JsonRpcId::from_value(v)?,
        None => JsonRpcId::Null,
    };
    if let Some(err) = obj.remove("error") {
        return Ok((id, Err(A2aError::from_json(err, dialect)?)));
    }
    match obj.remove("result") {
        Some(r) => Ok((id, Ok(read_reply(r, dialect)?))),
        None => Err(A2aError::invalid_request(
            "response: has neither result nor error",
        )),
    }
}

/// Writes a task in `dialect` (bare, e.g. a push-notification body).
pub fn write_task(task: &Task, dialect: Dialect) -> Value {
    wire::to_value(|out| wire::task(out, task, dialect, None))
}

/// Reads a bare task written in any dialect (`-32602` naming the field).
pub fn read_task(v: Value) -> Result<Task, A2aError> {
    read::read_task(v, "task")
}

/// Writes a message in `dialect` (bare).
pub fn write_message(message: &Message, dialect: Dialect) -> Value {
    wire::to_value(|out| wire::message(out, message, dialect))
}

/// Reads a bare message written in any dialect (a missing `messageId` is generated).
pub fn read_message(v: Value) -> Result<Message, A2aError> {
    read::read_message(v, "message", false)
}
