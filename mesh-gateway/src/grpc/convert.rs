//! The one place where the gRPC messages ([`super::proto`], package `lf.a2a.v1`) meet the
//! model (`mesh_core::model`, the `a2a-lf` types), in both directions.
//!
//! - Requests, proto → model: [`send_message_request`], [`get_task_request`],
//!   [`list_tasks_request`], [`cancel_task_request`], [`subscribe_to_task_request`],
//!   [`create_push_config_request`], [`get_push_config_request`],
//!   [`list_push_configs_request`], [`delete_push_config_request`],
//!   [`extended_card_request`]. Each model request carries the call's `tenant`.
//! - Results, model → proto: `From` impls for every type an answer holds (`Task`,
//!   `Message`, `SendMessageResponse`, `StreamResponse`, `ListTasksResponse`,
//!   `TaskPushNotificationConfig`, `ListTaskPushNotificationConfigsResponse`, `AgentCard`,
//!   and their parts). The inverses ([`task_from_proto`], [`stream_response_from_proto`],
//!   …) read what a gRPC agent answers.
//! - Shared pieces: `google.protobuf.Value`/`Struct` ⇄ `serde_json` ([`json_to_proto`],
//!   [`json_from_proto`], [`struct_from_map`]), timestamps ⇄ `chrono`, enums.
//!
//! Reading follows the JSON codec's 1.0 semantics (`mesh_core::codec`): an empty string is
//! an absent id or text (proto3 cannot tell them apart); required fields are `id`s of the
//! addressed task or config, a message's `message_id` in a send, `role` and a non-empty
//! `parts`, a part's content, a status's presence; empty metadata reads as absent except
//! the request-level `metadata` of a send or cancel, kept as sent (like `params.metadata`).
//! Invalid input is `-32602` (invalid params, gRPC `INVALID_ARGUMENT`) whose message names
//! the field by its proto path (`message.parts[0].data`); nothing panics on input.
//!
//! Numbers: `google.protobuf.Value` has only doubles. An integral value within ±2⁵³ reads as
//! a JSON integer, any other finite value as a float; NaN and infinities are refused (JSON has
//! none). Written the other way, every JSON number becomes a double (integers beyond 2⁵³ lose
//! precision). Where the proto has plain scalars for the model's optional ones (`bool`,
//! `string`, `repeated`), `false`, `""` and `[]` read as absent.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use mesh_core::error::A2aError;
use mesh_core::model::{self as m, Metadata};
use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

use super::proto as pb;

/// The result of a proto → model conversion.
pub(crate) type R<T> = Result<T, A2aError>;

// ---------------------------------------------------------------------------------------
// Field paths (for error messages)

/// Where a field sits in the message being read, e.g. `message.parts[0].data`. Built on the
/// stack as the readers descend; written out only when an error names it.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    /// The message being read (`""`) or a named root.
    Root(&'static str),
    /// A field of the parent.
    Field(&'a Path<'a>, &'static str),
    /// An element of a repeated parent.
    Index(&'a Path<'a>, usize),
    /// A key of a map or struct parent.
    Key(&'a Path<'a>, &'a str),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root(name) => f.write_str(name),
            Path::Field(Path::Root(""), name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
            Path::Key(Path::Root(""), key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
        }
    }
}

/// The root of a request's fields (`message.parts`, `id`).
const REQUEST: Path<'static> = Path::Root("");

impl<'a> Path<'a> {
    fn field(&'a self, name: &'static str) -> Path<'a> {
        Path::Field(self, name)
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    /// `-32602` naming this field: `description`.
    fn invalid(&self, description: impl fmt::Display) -> A2aError {
        A2aError::invalid_params_at(&self.to_string(), description)
    }

    /// `-32602`: this required field is absent (or empty).
    fn missing(&self) -> A2aError {
        self.invalid("missing")
    }
}

// ---------------------------------------------------------------------------------------
// Scalars

/// `""` → absent.
fn opt_string(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// `[]` → absent.
fn opt_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// A proto3 `bool` for the model's `Option<bool>` whose absence means `false`.
fn opt_true(b: bool) -> Option<bool> {
    b.then_some(true)
}

/// A required string: `""` is missing.
fn required(s: String, at: &Path<'_>) -> R<String> {
    if s.is_empty() {
        Err(at.missing())
    } else {
        Ok(s)
    }
}

/// A required message field.
fn present<T>(v: Option<T>, at: &Path<'_>) -> R<T> {
    v.ok_or_else(|| at.missing())
}

// ---------------------------------------------------------------------------------------
// google.protobuf.Value / Struct ⇄ serde_json

/// 2⁵³: every integer of smaller magnitude is exact in a double.
const EXACT_INTEGER_LIMIT: f64 = 9_007_199_254_740_992.0;

/// A JSON value as a `google.protobuf.Value` (numbers become doubles).
pub(crate) fn json_to_proto(v: Value) -> prost_types::Value {
    let kind = match v {
        Value::Null => Kind::NullValue(prost_types::NullValue::NullValue as i32),
        Value::Bool(b) => Kind::BoolValue(b),
        // Without serde_json's arbitrary precision every number has an f64 reading; keep
        // the text should one not.
        Value::Number(n) => match n.as_f64() {
            Some(f) => Kind::NumberValue(f),
            None => Kind::StringValue(n.to_string()),
        },
        Value::String(s) => Kind::StringValue(s),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(json_to_proto).collect(),
        }),
        Value::Object(map) => Kind::StructValue(prost_types::Struct {
            fields: map
                .into_iter()
                .map(|(k, v)| (k, json_to_proto(v)))
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// A `google.protobuf.Value` as JSON: an unset kind is `null`; an integral number within
/// ±2⁵³ is an integer; NaN and infinities are refused.
pub(crate) fn json_from_proto(v: prost_types::Value, at: &Path<'_>) -> R<Value> {
    Ok(match v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => number_from_proto(n, at)?,
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .into_iter()
                .enumerate()
                .map(|(i, v)| json_from_proto(v, &at.index(i)))
                .collect::<R<Vec<_>>>()?,
        ),
        Some(Kind::StructValue(s)) => Value::Object(json_map_from_struct(s, at)?),
    })
}

fn number_from_proto(n: f64, at: &Path<'_>) -> R<Value> {
    if !n.is_finite() {
        return Err(at.invalid(format!("must be a finite number; found {n}")));
    }
    if n.fract() == 0.0 && n.abs() <= EXACT_INTEGER_LIMIT {
        // Exact: |n| ≤ 2⁵³ fits an i64 and has no fraction.
        return Ok(Value::from(n as i64));
    }
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| at.invalid(format!("must be a finite number; found {n}")))
}

fn json_map_from_struct(s: prost_types::Struct, at: &Path<'_>) -> R<Map<String, Value>> {
    let mut out = Map::new();
    for (k, v) in s.fields {
        let v = json_from_proto(v, &at.key(&k))?;
        out.insert(k, v);
    }
    Ok(out)
}

/// A model metadata map as a `google.protobuf.Struct`.
pub(crate) fn struct_from_map(map: Metadata) -> prost_types::Struct {
    prost_types::Struct {
        fields: map
            .into_iter()
            .map(|(k, v)| (k, json_to_proto(v)))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// A `google.protobuf.Struct` as a model metadata map.
pub(crate) fn map_from_struct(s: prost_types::Struct, at: &Path<'_>) -> R<Metadata> {
    let mut out = Metadata::with_capacity(s.fields.len());
    for (k, v) in s.fields {
        let v = json_from_proto(v, &at.key(&k))?;
        out.insert(k, v);
    }
    Ok(out)
}

/// Object metadata: absent or empty reads as absent.
fn metadata_in(s: Option<prost_types::Struct>, at: &Path<'_>) -> R<Option<Metadata>> {
    Ok(metadata_verbatim(s, at)?.filter(|m| !m.is_empty()))
}

/// Request-level metadata, kept as sent (an empty struct stays an empty map).
fn metadata_verbatim(s: Option<prost_types::Struct>, at: &Path<'_>) -> R<Option<Metadata>> {
    s.map(|s| map_from_struct(s, at)).transpose()
}

/// Model metadata out: empty is omitted.
fn metadata_out(m: Option<Metadata>) -> Option<prost_types::Struct> {
    m.filter(|m| !m.is_empty()).map(struct_from_map)
}

// ---------------------------------------------------------------------------------------
// Timestamps

/// `0001-01-01T00:00:00Z`, the first instant a `google.protobuf.Timestamp` may hold.
const TIMESTAMP_MIN_SECONDS: i64 = -62_135_596_800;
/// `9999-12-31T23:59:59Z`, the last whole second a `google.protobuf.Timestamp` may hold.
const TIMESTAMP_MAX_SECONDS: i64 = 253_402_300_799;

/// A model time as a `google.protobuf.Timestamp` (a leap second's extra nanoseconds are
/// folded into the last nanosecond of its second).
pub(crate) fn timestamp_to_proto(t: &DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos().min(999_999_999)).unwrap_or(999_999_999),
    }
}

/// A `google.protobuf.Timestamp` within its documented range (years 1 to 9999, nanos in
/// `0..1e9`) as a model time.
pub(crate) fn timestamp_from_proto(t: prost_types::Timestamp, at: &Path<'_>) -> R<DateTime<Utc>> {
    if !(TIMESTAMP_MIN_SECONDS..=TIMESTAMP_MAX_SECONDS).contains(&t.seconds) {
        return Err(at.invalid(format!(
            "seconds {} is outside 0001-01-01T00:00:00Z..=9999-12-31T23:59:59Z",
            t.seconds
        )));
    }
    let nanos = u32::try_from(t.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| at.invalid(format!("nanos {} is outside 0..=999999999", t.nanos)))?;
    DateTime::from_timestamp(t.seconds, nanos)
        .ok_or_else(|| at.invalid("not a representable timestamp"))
}

// ---------------------------------------------------------------------------------------
// Enums

/// A model state as its proto enum number.
pub(crate) fn state_to_proto(s: &m::TaskState) -> i32 {
    let s = match s {
        m::TaskState::Unspecified => pb::TaskState::Unspecified,
        m::TaskState::Submitted => pb::TaskState::Submitted,
        m::TaskState::Working => pb::TaskState::Working,
        m::TaskState::Completed => pb::TaskState::Completed,
        m::TaskState::Failed => pb::TaskState::Failed,
        m::TaskState::Canceled => pb::TaskState::Canceled,
        m::TaskState::InputRequired => pb::TaskState::InputRequired,
        m::TaskState::Rejected => pb::TaskState::Rejected,
        m::TaskState::AuthRequired => pb::TaskState::AuthRequired,
    };
    s as i32
}

/// A proto enum number as a model state (an unknown number is invalid).
pub(crate) fn state_from_proto(v: i32, at: &Path<'_>) -> R<m::TaskState> {
    let s = pb::TaskState::try_from(v).map_err(|_| {
        at.invalid(format!(
            "unknown task state {v}; expected 0 to 8 (TASK_STATE_UNSPECIFIED to TASK_STATE_AUTH_REQUIRED)"
        ))
    })?;
    Ok(match s {
        pb::TaskState::Unspecified => m::TaskState::Unspecified,
        pb::TaskState::Submitted => m::TaskState::Submitted,
        pb::TaskState::Working => m::TaskState::Working,
        pb::TaskState::Completed => m::TaskState::Completed,
        pb::TaskState::Failed => m::TaskState::Failed,
        pb::TaskState::Canceled => m::TaskState::Canceled,
        pb::TaskState::InputRequired => m::TaskState::InputRequired,
        pb::TaskState::Rejected => m::TaskState::Rejected,
        pb::TaskState::AuthRequired => m::TaskState::AuthRequired,
    })
}

/// A model role as its proto enum number.
pub(crate) fn role_to_proto(r: &m::Role) -> i32 {
    let r = match r {
        m::Role::Unspecified => pb::Role::Unspecified,
        m::Role::User => pb::Role::User,
        m::Role::Agent => pb::Role::Agent,
    };
    r as i32
}

/// A proto role: `ROLE_UNSPECIFIED` (the proto3 default) is missing, like an absent JSON
/// `role`; an unknown number is invalid.
pub(crate) fn role_from_proto(v: i32, at: &Path<'_>) -> R<m::Role> {
    match pb::Role::try_from(v) {
        Ok(pb::Role::User) => Ok(m::Role::User),
        Ok(pb::Role::Agent) => Ok(m::Role::Agent),
        Ok(pb::Role::Unspecified) => Err(at.invalid("missing; expected ROLE_USER or ROLE_AGENT")),
        Err(_) => Err(at.invalid(format!(
            "unknown role {v}; expected 1 (ROLE_USER) or 2 (ROLE_AGENT)"
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Parts, messages, statuses, artifacts, tasks

impl From<m::Part> for pb::Part {
    fn from(p: m::Part) -> Self {
        let content = match p.content {
            m::PartContent::Text(t) => pb::part::Content::Text(t),
            m::PartContent::Raw(r) => pb::part::Content::Raw(r),
            m::PartContent::Url(u) => pb::part::Content::Url(u),
            m::PartContent::Data(d) => pb::part::Content::Data(json_to_proto(d)),
        };
        pb::Part {
            metadata: metadata_out(p.metadata),
            filename: p.filename.unwrap_or_default(),
            media_type: p.media_type.unwrap_or_default(),
            content: Some(content),
        }
    }
}

fn part_from_proto(p: pb::Part, at: &Path<'_>) -> R<m::Part> {
    let content = match p.content {
        Some(pb::part::Content::Text(t)) => m::PartContent::Text(t),
        Some(pb::part::Content::Raw(r)) => m::PartContent::Raw(r),
        Some(pb::part::Content::Url(u)) => m::PartContent::Url(u),
        Some(pb::part::Content::Data(d)) => {
            m::PartContent::Data(json_from_proto(d, &at.field("data"))?)
        }
        None => {
            return Err(at.invalid("a part carries one of text, raw, url, data; found none"));
        }
    };
    Ok(m::Part {
        content,
        filename: opt_string(p.filename),
        media_type: opt_string(p.media_type),
        metadata: metadata_in(p.metadata, &at.field("metadata"))?,
    })
}

/// A non-empty list of parts.
fn parts_from_proto(parts: Vec<pb::Part>, at: &Path<'_>) -> R<Vec<m::Part>> {
    if parts.is_empty() {
        return Err(at.invalid("must not be empty"));
    }
    parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| part_from_proto(p, &at.index(i)))
        .collect()
}

impl From<m::Message> for pb::Message {
    fn from(msg: m::Message) -> Self {
        pb::Message {
            message_id: msg.message_id,
            context_id: msg.context_id.unwrap_or_default(),
            task_id: msg.task_id.unwrap_or_default(),
            role: role_to_proto(&msg.role),
            parts: msg.parts.into_iter().map(pb::Part::from).collect(),
            metadata: metadata_out(msg.metadata),
            extensions: msg.extensions.unwrap_or_default(),
            reference_task_ids: msg.reference_task_ids.unwrap_or_default(),
        }
    }
}

/// Reads a message. `require_id`: an empty `message_id` is missing (a send); otherwise one
/// is generated (as the JSON reader does for messages inside tasks).
fn message_from_proto(msg: pb::Message, at: &Path<'_>, require_id: bool) -> R<m::Message> {
    let message_id = match opt_string(msg.message_id) {
        Some(id) => id,
        None if require_id => return Err(at.field("message_id").missing()),
        None => m::new_message_id(),
    };
    Ok(m::Message {
        message_id,
        context_id: opt_string(msg.context_id),
        task_id: opt_string(msg.task_id),
        role: role_from_proto(msg.role, &at.field("role"))?,
        parts: parts_from_proto(msg.parts, &at.field("parts"))?,
        metadata: metadata_in(msg.metadata, &at.field("metadata"))?,
        extensions: opt_vec(msg.extensions),
        reference_task_ids: opt_vec(msg.reference_task_ids),
    })
}

impl From<m::TaskStatus> for pb::TaskStatus {
    fn from(s: m::TaskStatus) -> Self {
        pb::TaskStatus {
            state: state_to_proto(&s.state),
            message: s.message.map(pb::Message::from),
            timestamp: s.timestamp.as_ref().map(timestamp_to_proto),
        }
    }
}

#[cfg(test)]
fn status_from_proto(s: pb::TaskStatus, at: &Path<'_>) -> R<m::TaskStatus> {
    Ok(m::TaskStatus {
        state: state_from_proto(s.state, &at.field("state"))?,
        message: s
            .message
            .map(|msg| message_from_proto(msg, &at.field("message"), false))
            .transpose()?,
        timestamp: s
            .timestamp
            .map(|t| timestamp_from_proto(t, &at.field("timestamp")))
            .transpose()?,
    })
}

impl From<m::Artifact> for pb::Artifact {
    fn from(a: m::Artifact) -> Self {
        pb::Artifact {
            artifact_id: a.artifact_id,
            name: a.name.unwrap_or_default(),
            description: a.description.unwrap_or_default(),
            parts: a.parts.into_iter().map(pb::Part::from).collect(),
            metadata: metadata_out(a.metadata),
            extensions: a.extensions.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
fn artifact_from_proto(a: pb::Artifact, at: &Path<'_>) -> R<m::Artifact> {
    Ok(m::Artifact {
        artifact_id: required(a.artifact_id, &at.field("artifact_id"))?,
        name: opt_string(a.name),
        description: opt_string(a.description),
        parts: parts_from_proto(a.parts, &at.field("parts"))?,
        metadata: metadata_in(a.metadata, &at.field("metadata"))?,
        extensions: opt_vec(a.extensions),
    })
}

impl From<m::Task> for pb::Task {
    fn from(t: m::Task) -> Self {
        pb::Task {
            id: t.id,
            context_id: t.context_id,
            status: Some(t.status.into()),
            artifacts: t
                .artifacts
                .unwrap_or_default()
                .into_iter()
                .map(pb::Artifact::from)
                .collect(),
            history: t
                .history
                .unwrap_or_default()
                .into_iter()
                .map(pb::Message::from)
                .collect(),
            metadata: metadata_out(t.metadata),
        }
    }
}

#[cfg(test)]
fn task_at(t: pb::Task, at: &Path<'_>) -> R<m::Task> {
    let artifacts_at = at.field("artifacts");
    let history_at = at.field("history");
    Ok(m::Task {
        id: required(t.id, &at.field("id"))?,
        context_id: t.context_id,
        status: status_from_proto(present(t.status, &at.field("status"))?, &at.field("status"))?,
        artifacts: opt_vec(
            t.artifacts
                .into_iter()
                .enumerate()
                .map(|(i, a)| artifact_from_proto(a, &artifacts_at.index(i)))
                .collect::<R<Vec<_>>>()?,
        ),
        history: opt_vec(
            t.history
                .into_iter()
                .enumerate()
                .map(|(i, msg)| message_from_proto(msg, &history_at.index(i), false))
                .collect::<R<Vec<_>>>()?,
        ),
        metadata: metadata_in(t.metadata, &at.field("metadata"))?,
    })
}

/// A task an agent answered with.
#[cfg(test)]
pub(crate) fn task_from_proto(t: pb::Task) -> R<m::Task> {
    task_at(t, &Path::Root("task"))
}

/// A message an agent answered with (its `message_id` is required).
#[cfg(test)]
pub(crate) fn message_from_proto_result(msg: pb::Message) -> R<m::Message> {
    message_from_proto(msg, &Path::Root("message"), true)
}

// ---------------------------------------------------------------------------------------
// Events and answers

impl From<m::TaskStatusUpdateEvent> for pb::TaskStatusUpdateEvent {
    fn from(e: m::TaskStatusUpdateEvent) -> Self {
        pb::TaskStatusUpdateEvent {
            task_id: e.task_id,
            context_id: e.context_id,
            status: Some(e.status.into()),
            metadata: metadata_out(e.metadata),
        }
    }
}

#[cfg(test)]
fn status_event_at(e: pb::TaskStatusUpdateEvent, at: &Path<'_>) -> R<m::TaskStatusUpdateEvent> {
    let status_at = at.field("status");
    Ok(m::TaskStatusUpdateEvent {
        task_id: required(e.task_id, &at.field("task_id"))?,
        context_id: e.context_id,
        status: status_from_proto(present(e.status, &status_at)?, &status_at)?,
        metadata: metadata_in(e.metadata, &at.field("metadata"))?,
    })
}

impl From<m::TaskArtifactUpdateEvent> for pb::TaskArtifactUpdateEvent {
    fn from(e: m::TaskArtifactUpdateEvent) -> Self {
        pb::TaskArtifactUpdateEvent {
            task_id: e.task_id,
            context_id: e.context_id,
            artifact: Some(e.artifact.into()),
            append: e.append.unwrap_or(false),
            last_chunk: e.last_chunk.unwrap_or(false),
            metadata: metadata_out(e.metadata),
        }
    }
}

#[cfg(test)]
fn artifact_event_at(
    e: pb::TaskArtifactUpdateEvent,
    at: &Path<'_>,
) -> R<m::TaskArtifactUpdateEvent> {
    let artifact_at = at.field("artifact");
    Ok(m::TaskArtifactUpdateEvent {
        task_id: required(e.task_id, &at.field("task_id"))?,
        context_id: e.context_id,
        artifact: artifact_from_proto(present(e.artifact, &artifact_at)?, &artifact_at)?,
        append: opt_true(e.append),
        last_chunk: opt_true(e.last_chunk),
        metadata: metadata_in(e.metadata, &at.field("metadata"))?,
    })
}

impl From<m::SendMessageResponse> for pb::SendMessageResponse {
    fn from(r: m::SendMessageResponse) -> Self {
        let payload = match r {
            m::SendMessageResponse::Task(t) => pb::send_message_response::Payload::Task(t.into()),
            m::SendMessageResponse::Message(msg) => {
                pb::send_message_response::Payload::Message(msg.into())
            }
        };
        pb::SendMessageResponse {
            payload: Some(payload),
        }
    }
}

/// A SendMessage answer (exactly one of task, message).
#[cfg(test)]
pub(crate) fn send_message_response_from_proto(
    r: pb::SendMessageResponse,
) -> R<m::SendMessageResponse> {
    match r.payload {
        Some(pb::send_message_response::Payload::Task(t)) => Ok(m::SendMessageResponse::Task(
            task_at(t, &Path::Root("task"))?,
        )),
        Some(pb::send_message_response::Payload::Message(msg)) => Ok(
            m::SendMessageResponse::Message(message_from_proto_result(msg)?),
        ),
        None => Err(A2aError::invalid_agent_response(
            "SendMessageResponse: carries neither task nor message",
        )),
    }
}

impl From<m::StreamResponse> for pb::StreamResponse {
    fn from(r: m::StreamResponse) -> Self {
        use pb::stream_response::Payload;
        let payload = match r {
            m::StreamResponse::Task(t) => Payload::Task(t.into()),
            m::StreamResponse::Message(msg) => Payload::Message(msg.into()),
            m::StreamResponse::StatusUpdate(e) => Payload::StatusUpdate(e.into()),
            m::StreamResponse::ArtifactUpdate(e) => Payload::ArtifactUpdate(e.into()),
        };
        pb::StreamResponse {
            payload: Some(payload),
        }
    }
}

/// A stream event (exactly one of task, message, status update, artifact update).
#[cfg(test)]
pub(crate) fn stream_response_from_proto(r: pb::StreamResponse) -> R<m::StreamResponse> {
    use pb::stream_response::Payload;
    match r.payload {
        Some(Payload::Task(t)) => Ok(m::StreamResponse::Task(task_at(t, &Path::Root("task"))?)),
        Some(Payload::Message(msg)) => {
            Ok(m::StreamResponse::Message(message_from_proto_result(msg)?))
        }
        Some(Payload::StatusUpdate(e)) => Ok(m::StreamResponse::StatusUpdate(status_event_at(
            e,
            &Path::Root("status_update"),
        )?)),
        Some(Payload::ArtifactUpdate(e)) => Ok(m::StreamResponse::ArtifactUpdate(
            artifact_event_at(e, &Path::Root("artifact_update"))?,
        )),
        None => Err(A2aError::invalid_agent_response(
            "StreamResponse: carries no payload",
        )),
    }
}

impl From<m::ListTasksResponse> for pb::ListTasksResponse {
    fn from(r: m::ListTasksResponse) -> Self {
        pb::ListTasksResponse {
            tasks: r.tasks.into_iter().map(pb::Task::from).collect(),
            next_page_token: r.next_page_token,
            page_size: r.page_size,
            total_size: r.total_size,
        }
    }
}

/// A ListTasks answer.
#[cfg(test)]
pub(crate) fn list_tasks_response_from_proto(r: pb::ListTasksResponse) -> R<m::ListTasksResponse> {
    let tasks_at = Path::Root("tasks");
    Ok(m::ListTasksResponse {
        tasks: r
            .tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| task_at(t, &tasks_at.index(i)))
            .collect::<R<Vec<_>>>()?,
        next_page_token: r.next_page_token,
        page_size: r.page_size,
        total_size: r.total_size,
    })
}

// ---------------------------------------------------------------------------------------
// Push-notification configs

impl From<m::AuthenticationInfo> for pb::AuthenticationInfo {
    fn from(a: m::AuthenticationInfo) -> Self {
        pb::AuthenticationInfo {
            scheme: a.scheme,
            credentials: a.credentials.unwrap_or_default(),
        }
    }
}

impl From<m::TaskPushNotificationConfig> for pb::TaskPushNotificationConfig {
    fn from(c: m::TaskPushNotificationConfig) -> Self {
        pb::TaskPushNotificationConfig {
            tenant: c.tenant.unwrap_or_default(),
            id: c.id.unwrap_or_default(),
            task_id: c.task_id,
            url: c.url,
            token: c.token.unwrap_or_default(),
            authentication: c.authentication.map(pb::AuthenticationInfo::from),
        }
    }
}

/// A push config; `url` and, when there is authentication, its `scheme` are required. An
/// empty `task_id` stays empty (a send's config names no task).
fn push_config_at(
    c: pb::TaskPushNotificationConfig,
    at: &Path<'_>,
) -> R<m::TaskPushNotificationConfig> {
    let auth_at = at.field("authentication");
    Ok(m::TaskPushNotificationConfig {
        url: required(c.url, &at.field("url"))?,
        id: opt_string(c.id),
        task_id: c.task_id,
        token: opt_string(c.token),
        authentication: c
            .authentication
            .map(|a| {
                Ok::<_, A2aError>(m::AuthenticationInfo {
                    scheme: required(a.scheme, &auth_at.field("scheme"))?,
                    credentials: opt_string(a.credentials),
                })
            })
            .transpose()?,
        tenant: opt_string(c.tenant),
    })
}

/// A push config an agent answered with.
#[cfg(test)]
pub(crate) fn push_config_from_proto(
    c: pb::TaskPushNotificationConfig,
) -> R<m::TaskPushNotificationConfig> {
    push_config_at(c, &REQUEST)
}

impl From<m::ListTaskPushNotificationConfigsResponse>
    for pb::ListTaskPushNotificationConfigsResponse
{
    fn from(r: m::ListTaskPushNotificationConfigsResponse) -> Self {
        pb::ListTaskPushNotificationConfigsResponse {
            configs: r
                .configs
                .into_iter()
                .map(pb::TaskPushNotificationConfig::from)
                .collect(),
            next_page_token: r.next_page_token.unwrap_or_default(),
        }
    }
}

/// A ListTaskPushNotificationConfigs answer.
#[cfg(test)]
pub(crate) fn list_push_configs_response_from_proto(
    r: pb::ListTaskPushNotificationConfigsResponse,
) -> R<m::ListTaskPushNotificationConfigsResponse> {
    let configs_at = Path::Root("configs");
    Ok(m::ListTaskPushNotificationConfigsResponse {
        configs: r
            .configs
            .into_iter()
            .enumerate()
            .map(|(i, c)| push_config_at(c, &configs_at.index(i)))
            .collect::<R<Vec<_>>>()?,
        next_page_token: opt_string(r.next_page_token),
    })
}

// ---------------------------------------------------------------------------------------
// Requests (proto → model)

/// SendMessage / SendStreamingMessage. The message, its `message_id`, `role` and parts are
/// required; a configuration with nothing set reads as absent; `metadata` is kept as sent.
pub(crate) fn send_message_request(r: pb::SendMessageRequest) -> R<m::SendMessageRequest> {
    let at = REQUEST;
    let message_at = at.field("message");
    let message = message_from_proto(present(r.message, &message_at)?, &message_at, true)?;
    let configuration = match r.configuration {
        Some(c) => {
            let c_at = at.field("configuration");
            let cfg = m::SendMessageConfiguration {
                accepted_output_modes: opt_vec(c.accepted_output_modes),
                task_push_notification_config: c
                    .task_push_notification_config
                    .map(|p| push_config_at(p, &c_at.field("task_push_notification_config")))
                    .transpose()?,
                history_length: c.history_length,
                return_immediately: opt_true(c.return_immediately),
            };
            let any = cfg.accepted_output_modes.is_some()
                || cfg.task_push_notification_config.is_some()
                || cfg.history_length.is_some()
                || cfg.return_immediately.is_some();
            any.then_some(cfg)
        }
        None => None,
    };
    Ok(m::SendMessageRequest {
        message,
        configuration,
        metadata: metadata_verbatim(r.metadata, &at.field("metadata"))?,
        tenant: opt_string(r.tenant),
    })
}

/// GetTask: `id` is required.
pub(crate) fn get_task_request(r: pb::GetTaskRequest) -> R<m::GetTaskRequest> {
    Ok(m::GetTaskRequest {
        id: required(r.id, &REQUEST.field("id"))?,
        history_length: r.history_length,
        tenant: opt_string(r.tenant),
    })
}

/// ListTasks: every filter is optional; `status` 0 (unspecified) is no filter, an unknown
/// number is invalid; `status_timestamp_after` must be a valid timestamp.
pub(crate) fn list_tasks_request(r: pb::ListTasksRequest) -> R<m::ListTasksRequest> {
    let at = REQUEST;
    let status = match state_from_proto(r.status, &at.field("status"))? {
        m::TaskState::Unspecified => None,
        s => Some(s),
    };
    Ok(m::ListTasksRequest {
        context_id: opt_string(r.context_id),
        status,
        page_size: r.page_size,
        page_token: opt_string(r.page_token),
        history_length: r.history_length,
        status_timestamp_after: r
            .status_timestamp_after
            .map(|t| timestamp_from_proto(t, &at.field("status_timestamp_after")))
            .transpose()?,
        include_artifacts: r.include_artifacts,
        tenant: opt_string(r.tenant),
    })
}

/// CancelTask: `id` is required; `metadata` is kept as sent.
pub(crate) fn cancel_task_request(r: pb::CancelTaskRequest) -> R<m::CancelTaskRequest> {
    let at = REQUEST;
    Ok(m::CancelTaskRequest {
        id: required(r.id, &at.field("id"))?,
        metadata: metadata_verbatim(r.metadata, &at.field("metadata"))?,
        tenant: opt_string(r.tenant),
    })
}

/// SubscribeToTask: `id` is required.
pub(crate) fn subscribe_to_task_request(
    r: pb::SubscribeToTaskRequest,
) -> R<m::SubscribeToTaskRequest> {
    Ok(m::SubscribeToTaskRequest {
        id: required(r.id, &REQUEST.field("id"))?,
        tenant: opt_string(r.tenant),
    })
}

/// CreateTaskPushNotificationConfig: `task_id` and `url` are required.
pub(crate) fn create_push_config_request(
    r: pb::TaskPushNotificationConfig,
) -> R<m::TaskPushNotificationConfig> {
    if r.task_id.is_empty() {
        return Err(REQUEST.field("task_id").missing());
    }
    push_config_at(r, &REQUEST)
}

/// GetTaskPushNotificationConfig: `task_id` and `id` are required.
pub(crate) fn get_push_config_request(
    r: pb::GetTaskPushNotificationConfigRequest,
) -> R<m::GetTaskPushNotificationConfigRequest> {
    let at = REQUEST;
    Ok(m::GetTaskPushNotificationConfigRequest {
        task_id: required(r.task_id, &at.field("task_id"))?,
        id: required(r.id, &at.field("id"))?,
        tenant: opt_string(r.tenant),
    })
}

/// ListTaskPushNotificationConfigs: `task_id` is required; `page_size` 0 is unset.
pub(crate) fn list_push_configs_request(
    r: pb::ListTaskPushNotificationConfigsRequest,
) -> R<m::ListTaskPushNotificationConfigsRequest> {
    Ok(m::ListTaskPushNotificationConfigsRequest {
        task_id: required(r.task_id, &REQUEST.field("task_id"))?,
        page_size: (r.page_size != 0).then_some(r.page_size),
        page_token: opt_string(r.page_token),
        tenant: opt_string(r.tenant),
    })
}

/// DeleteTaskPushNotificationConfig: `task_id` and `id` are required.
pub(crate) fn delete_push_config_request(
    r: pb::DeleteTaskPushNotificationConfigRequest,
) -> R<m::DeleteTaskPushNotificationConfigRequest> {
    let at = REQUEST;
    Ok(m::DeleteTaskPushNotificationConfigRequest {
        task_id: required(r.task_id, &at.field("task_id"))?,
        id: required(r.id, &at.field("id"))?,
        tenant: opt_string(r.tenant),
    })
}

/// GetExtendedAgentCard: only the tenant.
pub(crate) fn extended_card_request(
    r: pb::GetExtendedAgentCardRequest,
) -> m::GetExtendedAgentCardRequest {
    m::GetExtendedAgentCardRequest {
        tenant: opt_string(r.tenant),
    }
}

// ---------------------------------------------------------------------------------------
// Agent card

fn security_requirement_to_proto(r: m::SecurityRequirement) -> pb::SecurityRequirement {
    pb::SecurityRequirement {
        schemes: r
            .into_iter()
            .map(|(name, list)| (name, pb::StringList { list }))
            .collect(),
    }
}

#[cfg(test)]
fn security_requirement_from_proto(r: pb::SecurityRequirement) -> m::SecurityRequirement {
    r.schemes
        .into_iter()
        .map(|(name, scopes)| (name, scopes.list))
        .collect()
}

impl From<m::OAuthFlows> for pb::OAuthFlows {
    fn from(f: m::OAuthFlows) -> Self {
        use pb::o_auth_flows::Flow;
        let flow = match f {
            m::OAuthFlows::AuthorizationCode(f) => {
                Flow::AuthorizationCode(pb::AuthorizationCodeOAuthFlow {
                    authorization_url: f.authorization_url,
                    token_url: f.token_url,
                    refresh_url: f.refresh_url.unwrap_or_default(),
                    scopes: f.scopes,
                    pkce_required: f.pkce_required.unwrap_or(false),
                })
            }
            m::OAuthFlows::ClientCredentials(f) => {
                Flow::ClientCredentials(pb::ClientCredentialsOAuthFlow {
                    token_url: f.token_url,
                    refresh_url: f.refresh_url.unwrap_or_default(),
                    scopes: f.scopes,
                })
            }
            m::OAuthFlows::DeviceCode(f) => Flow::DeviceCode(pb::DeviceCodeOAuthFlow {
                device_authorization_url: f.device_authorization_url,
                token_url: f.token_url,
                refresh_url: f.refresh_url.unwrap_or_default(),
                scopes: f.scopes,
            }),
            m::OAuthFlows::Implicit(f) => Flow::Implicit(pb::ImplicitOAuthFlow {
                authorization_url: f.authorization_url,
                refresh_url: f.refresh_url.unwrap_or_default(),
                scopes: f.scopes,
            }),
            m::OAuthFlows::Password(f) => Flow::Password(pb::PasswordOAuthFlow {
                token_url: f.token_url,
                refresh_url: f.refresh_url.unwrap_or_default(),
                scopes: f.scopes,
            }),
        };
        pb::OAuthFlows { flow: Some(flow) }
    }
}

#[cfg(test)]
fn flows_from_proto(f: pb::OAuthFlows, at: &Path<'_>) -> R<m::OAuthFlows> {
    use pb::o_auth_flows::Flow;
    Ok(match f.flow {
        Some(Flow::AuthorizationCode(f)) => {
            m::OAuthFlows::AuthorizationCode(m::AuthorizationCodeOAuthFlow {
                authorization_url: f.authorization_url,
                token_url: f.token_url,
                scopes: f.scopes,
                refresh_url: opt_string(f.refresh_url),
                pkce_required: opt_true(f.pkce_required),
            })
        }
        Some(Flow::ClientCredentials(f)) => {
            m::OAuthFlows::ClientCredentials(m::ClientCredentialsOAuthFlow {
                token_url: f.token_url,
                scopes: f.scopes,
                refresh_url: opt_string(f.refresh_url),
            })
        }
        Some(Flow::DeviceCode(f)) => m::OAuthFlows::DeviceCode(m::DeviceCodeOAuthFlow {
            device_authorization_url: f.device_authorization_url,
            token_url: f.token_url,
            scopes: f.scopes,
            refresh_url: opt_string(f.refresh_url),
        }),
        Some(Flow::Implicit(f)) => m::OAuthFlows::Implicit(m::ImplicitOAuthFlow {
            authorization_url: f.authorization_url,
            scopes: f.scopes,
            refresh_url: opt_string(f.refresh_url),
        }),
        Some(Flow::Password(f)) => m::OAuthFlows::Password(m::PasswordOAuthFlow {
            token_url: f.token_url,
            scopes: f.scopes,
            refresh_url: opt_string(f.refresh_url),
        }),
        None => return Err(at.invalid("names no flow")),
    })
}

impl From<m::SecurityScheme> for pb::SecurityScheme {
    fn from(s: m::SecurityScheme) -> Self {
        use pb::security_scheme::Scheme;
        let scheme = match s {
            m::SecurityScheme::ApiKey(s) => {
                Scheme::ApiKeySecurityScheme(pb::ApiKeySecurityScheme {
                    description: s.description.unwrap_or_default(),
                    location: s.location,
                    name: s.name,
                })
            }
            m::SecurityScheme::HttpAuth(s) => {
                Scheme::HttpAuthSecurityScheme(pb::HttpAuthSecurityScheme {
                    description: s.description.unwrap_or_default(),
                    scheme: s.scheme,
                    bearer_format: s.bearer_format.unwrap_or_default(),
                })
            }
            m::SecurityScheme::OAuth2(s) => {
                Scheme::Oauth2SecurityScheme(pb::OAuth2SecurityScheme {
                    description: s.description.unwrap_or_default(),
                    flows: Some(s.flows.into()),
                    oauth2_metadata_url: s.oauth2_metadata_url.unwrap_or_default(),
                })
            }
            m::SecurityScheme::OpenIdConnect(s) => {
                Scheme::OpenIdConnectSecurityScheme(pb::OpenIdConnectSecurityScheme {
                    description: s.description.unwrap_or_default(),
                    open_id_connect_url: s.open_id_connect_url,
                })
            }
            m::SecurityScheme::MutualTls(s) => {
                Scheme::MtlsSecurityScheme(pb::MutualTlsSecurityScheme {
                    description: s.description.unwrap_or_default(),
                })
            }
        };
        pb::SecurityScheme {
            scheme: Some(scheme),
        }
    }
}

#[cfg(test)]
fn security_scheme_from_proto(s: pb::SecurityScheme, at: &Path<'_>) -> R<m::SecurityScheme> {
    use pb::security_scheme::Scheme;
    Ok(match s.scheme {
        Some(Scheme::ApiKeySecurityScheme(s)) => {
            m::SecurityScheme::ApiKey(m::ApiKeySecurityScheme {
                location: s.location,
                name: s.name,
                description: opt_string(s.description),
            })
        }
        Some(Scheme::HttpAuthSecurityScheme(s)) => {
            m::SecurityScheme::HttpAuth(m::HttpAuthSecurityScheme {
                scheme: s.scheme,
                description: opt_string(s.description),
                bearer_format: opt_string(s.bearer_format),
            })
        }
        Some(Scheme::Oauth2SecurityScheme(s)) => {
            let scheme_at = at.field("oauth2_security_scheme");
            let flows_at = scheme_at.field("flows");
            m::SecurityScheme::OAuth2(m::OAuth2SecurityScheme {
                flows: flows_from_proto(present(s.flows, &flows_at)?, &flows_at)?,
                description: opt_string(s.description),
                oauth2_metadata_url: opt_string(s.oauth2_metadata_url),
            })
        }
        Some(Scheme::OpenIdConnectSecurityScheme(s)) => {
            m::SecurityScheme::OpenIdConnect(m::OpenIdConnectSecurityScheme {
                open_id_connect_url: s.open_id_connect_url,
                description: opt_string(s.description),
            })
        }
        Some(Scheme::MtlsSecurityScheme(s)) => {
            m::SecurityScheme::MutualTls(m::MutualTlsSecurityScheme {
                description: opt_string(s.description),
            })
        }
        None => return Err(at.invalid("names no scheme")),
    })
}

impl From<m::AgentSkill> for pb::AgentSkill {
    fn from(s: m::AgentSkill) -> Self {
        pb::AgentSkill {
            id: s.id,
            name: s.name,
            description: s.description,
            tags: s.tags,
            examples: s.examples.unwrap_or_default(),
            input_modes: s.input_modes.unwrap_or_default(),
            output_modes: s.output_modes.unwrap_or_default(),
            security_requirements: s
                .security_requirements
                .unwrap_or_default()
                .into_iter()
                .map(security_requirement_to_proto)
                .collect(),
        }
    }
}

impl From<m::AgentExtension> for pb::AgentExtension {
    fn from(e: m::AgentExtension) -> Self {
        pb::AgentExtension {
            uri: e.uri,
            description: e.description.unwrap_or_default(),
            required: e.required.unwrap_or(false),
            params: metadata_out(e.params),
        }
    }
}

impl From<m::AgentCard> for pb::AgentCard {
    fn from(c: m::AgentCard) -> Self {
        pb::AgentCard {
            name: c.name,
            description: c.description,
            supported_interfaces: c
                .supported_interfaces
                .into_iter()
                .map(|i| pb::AgentInterface {
                    // As the card's JSON writes it (a GRPC interface's URL without `http://`).
                    url: i.wire_url(),
                    protocol_binding: i.protocol_binding,
                    tenant: i.tenant.unwrap_or_default(),
                    protocol_version: i.protocol_version,
                })
                .collect(),
            provider: c.provider.map(|p| pb::AgentProvider {
                url: p.url,
                organization: p.organization,
            }),
            version: c.version,
            documentation_url: c.documentation_url,
            capabilities: Some(pb::AgentCapabilities {
                streaming: c.capabilities.streaming,
                push_notifications: c.capabilities.push_notifications,
                extensions: c
                    .capabilities
                    .extensions
                    .unwrap_or_default()
                    .into_iter()
                    .map(pb::AgentExtension::from)
                    .collect(),
                extended_agent_card: c.capabilities.extended_agent_card,
            }),
            security_schemes: c
                .security_schemes
                .unwrap_or_default()
                .into_iter()
                .map(|(name, s)| (name, s.into()))
                .collect(),
            security_requirements: c
                .security_requirements
                .unwrap_or_default()
                .into_iter()
                .map(security_requirement_to_proto)
                .collect(),
            default_input_modes: c.default_input_modes,
            default_output_modes: c.default_output_modes,
            skills: c.skills.into_iter().map(pb::AgentSkill::from).collect(),
            signatures: c
                .signatures
                .unwrap_or_default()
                .into_iter()
                .map(|s| pb::AgentCardSignature {
                    protected: s.protected,
                    signature: s.signature,
                    header: metadata_out(s.header),
                })
                .collect(),
            icon_url: c.icon_url,
        }
    }
}

/// An agent card as a gRPC agent serves it. Lenient like the card codec: only what the
/// model cannot hold (a security scheme or OAuth flows naming nothing, a bad `Struct`
/// number) is refused.
#[cfg(test)]
pub(crate) fn agent_card_from_proto(c: pb::AgentCard) -> R<m::AgentCard> {
    let at = Path::Root("card");
    let caps = c.capabilities.unwrap_or_default();
    let caps_at = at.field("capabilities");
    let ext_at = caps_at.field("extensions");
    let extensions = caps
        .extensions
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            Ok(m::AgentExtension {
                uri: e.uri,
                description: opt_string(e.description),
                required: opt_true(e.required),
                params: metadata_in(e.params, &ext_at.index(i).field("params"))?,
            })
        })
        .collect::<R<Vec<_>>>()?;
    let schemes_at = at.field("security_schemes");
    let mut security_schemes = std::collections::HashMap::with_capacity(c.security_schemes.len());
    for (name, s) in c.security_schemes {
        let s = security_scheme_from_proto(s, &schemes_at.key(&name))?;
        security_schemes.insert(name, s);
    }
    let signatures_at = at.field("signatures");
    let signatures = c
        .signatures
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            Ok(m::AgentCardSignature {
                protected: s.protected,
                signature: s.signature,
                header: metadata_in(s.header, &signatures_at.index(i).field("header"))?,
            })
        })
        .collect::<R<Vec<_>>>()?;
    Ok(m::AgentCard {
        name: c.name,
        description: c.description,
        version: c.version,
        supported_interfaces: c
            .supported_interfaces
            .into_iter()
            .map(|i| m::AgentInterface {
                url: i.url,
                protocol_binding: i.protocol_binding,
                protocol_version: i.protocol_version,
                tenant: opt_string(i.tenant),
            })
            .collect(),
        capabilities: m::AgentCapabilities {
            streaming: caps.streaming,
            push_notifications: caps.push_notifications,
            extensions: opt_vec(extensions),
            extended_agent_card: caps.extended_agent_card,
        },
        default_input_modes: c.default_input_modes,
        default_output_modes: c.default_output_modes,
        skills: c
            .skills
            .into_iter()
            .map(|s| m::AgentSkill {
                id: s.id,
                name: s.name,
                description: s.description,
                tags: s.tags,
                examples: opt_vec(s.examples),
                input_modes: opt_vec(s.input_modes),
                output_modes: opt_vec(s.output_modes),
                security_requirements: opt_vec(
                    s.security_requirements
                        .into_iter()
                        .map(security_requirement_from_proto)
                        .collect(),
                ),
            })
            .collect(),
        provider: c.provider.map(|p| m::AgentProvider {
            organization: p.organization,
            url: p.url,
        }),
        documentation_url: c.documentation_url,
        icon_url: c.icon_url,
        security_schemes: (!security_schemes.is_empty()).then_some(security_schemes),
        security_requirements: opt_vec(
            c.security_requirements
                .into_iter()
                .map(security_requirement_from_proto)
                .collect(),
        ),
        signatures: opt_vec(signatures),
    })
}

#[cfg(test)]
mod tests;
