//! The typed reader: canonical 0.3 and 1.0 payloads decoded with `serde` straight into the
//! model, without a `serde_json::Value` tree.
//!
//! The JSON-RPC envelope is read with `params`/`result`/`error` as borrowed
//! [`RawValue`]s; the method (or the result's shape) then picks a typed struct that accepts
//! exactly the canonical member names (`deny_unknown_fields`, objects only). Anything else
//! (snake_case, untagged or `type`-tagged parts, 0.1 shapes, unknown members, duplicate
//! members, wrong types, escaped method names, missing message ids, …) makes these
//! functions answer `None`, and the caller runs the lenient reader on the same bytes: that
//! reader stays the one definition of what is accepted and of every error message.
//!
//! After the typed decode, the same rules as the lenient reader apply (the same helpers:
//! empty object metadata reads as absent, `metadata._mesh` restores what 0.x has no field
//! for, a 0.x `final` that differs from the state is kept), so on every input this
//! path answers either `None` or exactly what the lenient reader answers
//! (`codec::tests` checks this on random models and mutations).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::lenient_reader::{
    MessageFields, mesh_str, mesh_strings, parse_timestamp, put_back_mesh, read_base64, take_mesh,
};
use crate::dialect::{Dialect, Method, resolve_method};
use crate::error::A2aError;
use crate::jsonrpc::JsonRpcId;
use crate::meta::MeshMeta;
use crate::model::{
    Artifact, CancelTaskRequest, GetTaskRequest, MESH_KEY, Message, Metadata, Part, PartContent,
    Role, SendMessageConfiguration, SendMessageRequest, SubscribeToTaskRequest, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent, is_final_state,
};
use crate::rpc::{Call, Reply, Request};

/// A member that must be a JSON object (derived structs would also accept an array).
struct M<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for M<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = M<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<M<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(M)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// An `id` member: absent, or a string, an integer or null.
#[derive(Default)]
enum MaybeId {
    #[default]
    Absent,
    Present(JsonRpcId),
}

impl<'de> Deserialize<'de> for MaybeId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MaybeId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, an integer or null")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MaybeId, E> {
                Ok(MaybeId::Present(JsonRpcId::String(s.to_string())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<MaybeId, E> {
                Ok(MaybeId::Present(JsonRpcId::String(s)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<MaybeId, E> {
                Ok(MaybeId::Present(JsonRpcId::Number(n.into())))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<MaybeId, E> {
                Ok(MaybeId::Present(JsonRpcId::Number(n.into())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<MaybeId, E> {
                Ok(MaybeId::Present(JsonRpcId::Null))
            }
        }
        d.deserialize_any(V)
    }
}

/// `Some(value)` even for `null` (a present member).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `Some(raw)` even for `null` (a present member).
fn present_raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

type Str<'a> = Cow<'a, str>;

/// An optional string borrowed from the document when it has no escapes (serde borrows a
/// `Cow` only where the field's whole type is spelled `Cow<'a, str>`: not inside an
/// `Option`, nor behind an alias such as [`Str`]).
fn borrowed<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Str<'a>>, D::Error> {
    #[derive(Deserialize)]
    struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);
    Option::<Borrowed>::deserialize(d).map(|o| o.map(|Borrowed(s)| s))
}

/// Base64 text is borrowed from the document where it has no escapes (it never needs any):
/// decoded from there, not copied into a string first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FFile<'a> {
    name: Option<String>,
    mime_type: Option<String>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    bytes: Option<Str<'a>>,
    uri: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FPart<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    kind: Option<Str<'a>>,
    text: Option<String>,
    #[serde(borrow)]
    file: Option<M<FFile<'a>>>,
    #[serde(default, deserialize_with = "present")]
    data: Option<Value>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    raw: Option<Str<'a>>,
    url: Option<String>,
    filename: Option<String>,
    media_type: Option<String>,
    metadata: Option<Metadata>,
}

fn part(p: FPart) -> Option<Part> {
    let n = [
        p.text.is_some(),
        p.file.is_some(),
        p.data.is_some(),
        p.raw.is_some(),
        p.url.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if n != 1 {
        return None;
    }
    if let Some(kind) = &p.kind {
        let want = if p.text.is_some() {
            "text"
        } else if p.data.is_some() {
            "data"
        } else {
            "file"
        };
        if kind != want {
            return None;
        }
    }
    let mut filename = p.filename;
    let mut media_type = p.media_type;
    let content = if let Some(t) = p.text {
        PartContent::Text(t)
    } else if let Some(d) = p.data {
        PartContent::Data(d)
    } else if let Some(r) = p.raw {
        PartContent::Raw(read_base64(&r, "").ok()?)
    } else if let Some(u) = p.url {
        PartContent::Url(u)
    } else {
        let M(f) = p.file?;
        if f.name.is_some() {
            filename = f.name;
        }
        if f.mime_type.is_some() {
            media_type = f.mime_type;
        }
        match (f.bytes, f.uri) {
            (Some(b), None) => PartContent::Raw(read_base64(&b, "").ok()?),
            (None, Some(u)) => PartContent::Url(u),
            _ => return None,
        }
    };
    let mut metadata = p.metadata.filter(|m| !m.is_empty());
    let mut mesh = take_mesh(&mut metadata);
    if filename.is_none() {
        filename = mesh_str(&mut mesh, "filename");
    }
    if media_type.is_none() {
        media_type = mesh_str(&mut mesh, "mediaType");
    }
    put_back_mesh(&mut metadata, mesh);
    Some(Part {
        content,
        filename,
        media_type,
        metadata,
    })
}

fn parts(ps: Vec<M<FPart>>) -> Option<Vec<Part>> {
    if ps.is_empty() {
        return None;
    }
    convert(ps, |M(p)| part(p))
}

/// A decoded list converted into the model's, in a vector of exactly its length. Collecting
/// `into_iter().map(…)` would reuse the decoded list's buffer in place (serde grows it to four
/// elements or more, each the size of the larger decoded struct), which then lives as long
/// as the task it is part of: 5.4 KB per streamed task in the gateway, measured by heaptrack.
fn convert<T, U>(list: Vec<T>, mut f: impl FnMut(T) -> Option<U>) -> Option<Vec<U>> {
    let mut out = Vec::with_capacity(list.len());
    for item in list {
        out.push(f(item)?);
    }
    Some(out)
}

fn role(s: &str) -> Option<Role> {
    match s {
        "user" | "ROLE_USER" => Some(Role::User),
        "agent" | "ROLE_AGENT" => Some(Role::Agent),
        _ => None,
    }
}

fn state(s: &str) -> Option<TaskState> {
    Some(match s {
        "submitted" | "TASK_STATE_SUBMITTED" => TaskState::Submitted,
        "working" | "TASK_STATE_WORKING" => TaskState::Working,
        "input-required" | "TASK_STATE_INPUT_REQUIRED" => TaskState::InputRequired,
        "completed" | "TASK_STATE_COMPLETED" => TaskState::Completed,
        "canceled" | "TASK_STATE_CANCELED" => TaskState::Canceled,
        "failed" | "TASK_STATE_FAILED" => TaskState::Failed,
        "rejected" | "TASK_STATE_REJECTED" => TaskState::Rejected,
        "auth-required" | "TASK_STATE_AUTH_REQUIRED" => TaskState::AuthRequired,
        "unknown" | "TASK_STATE_UNSPECIFIED" => TaskState::Unspecified,
        _ => return None,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FMessage<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    kind: Option<Str<'a>>,
    message_id: Option<String>,
    context_id: Option<String>,
    task_id: Option<String>,
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    parts: Vec<M<FPart<'a>>>,
    metadata: Option<Metadata>,
    extensions: Option<Vec<String>>,
    reference_task_ids: Option<Vec<String>>,
}

/// A message; a missing `messageId` (after `_mesh`) is left to the lenient reader (an
/// error in sends, a generated id elsewhere).
fn message(m: FMessage) -> Option<Message> {
    if m.kind.as_ref().is_some_and(|k| k != "message") {
        return None;
    }
    let role = role(&m.role)?;
    let parts = parts(m.parts)?;
    let mut fields = MessageFields {
        message_id: m.message_id,
        context_id: m.context_id,
        task_id: m.task_id,
        extensions: m.extensions,
        reference_task_ids: m.reference_task_ids,
    };
    let mut metadata = m.metadata.filter(|x| !x.is_empty());
    fields.restore_from(&mut metadata);
    let MessageFields {
        message_id,
        context_id,
        task_id,
        extensions,
        reference_task_ids,
    } = fields;
    Some(Message {
        message_id: message_id?,
        context_id,
        task_id,
        role,
        parts,
        metadata,
        extensions,
        reference_task_ids,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FStatus<'a> {
    #[serde(borrow)]
    state: Cow<'a, str>,
    #[serde(borrow)]
    message: Option<M<FMessage<'a>>>,
    #[serde(default, borrow, deserialize_with = "borrowed")]
    timestamp: Option<Str<'a>>,
}

fn status(s: FStatus) -> Option<TaskStatus> {
    Some(TaskStatus {
        state: state(&s.state)?,
        message: match s.message {
            Some(M(m)) => Some(message(m)?),
            None => None,
        },
        timestamp: match s.timestamp {
            Some(t) => Some(parse_timestamp(&t, "").ok()?),
            None => None,
        },
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FArtifact<'a> {
    artifact_id: String,
    name: Option<String>,
    description: Option<String>,
    #[serde(borrow)]
    parts: Vec<M<FPart<'a>>>,
    metadata: Option<Metadata>,
    extensions: Option<Vec<String>>,
}

fn artifact(a: FArtifact) -> Option<Artifact> {
    let parts = parts(a.parts)?;
    let mut extensions = a.extensions;
    let mut metadata = a.metadata.filter(|x| !x.is_empty());
    let mut mesh = take_mesh(&mut metadata);
    if extensions.is_none() {
        extensions = mesh_strings(&mut mesh, "extensions");
    }
    put_back_mesh(&mut metadata, mesh);
    Some(Artifact {
        artifact_id: a.artifact_id,
        name: a.name,
        description: a.description,
        parts,
        metadata,
        extensions,
    })
}

/// A task; `Md` its metadata: a map, or [`FParamsMetadata`] to read its `_mesh` apart.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FTask<'a, Md = Metadata> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    kind: Option<Str<'a>>,
    id: String,
    context_id: Option<String>,
    #[serde(borrow)]
    status: M<FStatus<'a>>,
    #[serde(borrow)]
    artifacts: Option<Vec<M<FArtifact<'a>>>>,
    #[serde(borrow)]
    history: Option<Vec<M<FMessage<'a>>>>,
    metadata: Option<Md>,
}

/// A task read with its `_mesh` apart: the task as [`task`] takes it, and the `_mesh`, as
/// [`MeshMeta::take`] would have taken it out (a map left with nothing but `_mesh` is
/// absent). Its `_mesh` holds no task snapshot, which only a request's envelope reads as one.
fn split_task_mesh(t: FTask<'_, FParamsMetadata<false>>) -> (FTask<'_>, MeshMeta) {
    let (metadata, mesh) = match t.metadata {
        Some(m) => (Some(m.entries), m.mesh),
        None => (None, MeshMeta::default()),
    };
    let task = FTask {
        kind: t.kind,
        id: t.id,
        context_id: t.context_id,
        status: t.status,
        artifacts: t.artifacts,
        history: t.history,
        metadata,
    };
    (task, mesh)
}

fn task(t: FTask) -> Option<Task> {
    if t.kind.as_ref().is_some_and(|k| k != "task") {
        return None;
    }
    Some(Task {
        id: t.id,
        context_id: t.context_id.unwrap_or_default(),
        status: status(t.status.0)?,
        artifacts: match t.artifacts {
            Some(list) => Some(convert(list, |M(a)| artifact(a))?),
            None => None,
        },
        history: match t.history {
            Some(list) => Some(convert(list, |M(m)| message(m))?),
            None => None,
        },
        metadata: t.metadata.filter(|x| !x.is_empty()),
    })
}

/// How a stream event's metadata is read: a map whose `_mesh` stays in it ([`Metadata`]),
/// or with its `_mesh` read apart ([`FParamsMetadata`]). Either way the event's readers take
/// what 0.x has no field for out of the `_mesh` entries they do not know (the stash).
trait EventMetadata: Sized {
    /// The entries (absent when empty), the stash, and the rest of `_mesh` as read.
    fn open(metadata: Option<Self>) -> (Option<Metadata>, Map<String, Value>, MeshMeta);
    /// Puts back what the readers left of the stash: under `_mesh` in the entries, or among
    /// the `_mesh`'s other entries.
    fn close(metadata: &mut Option<Metadata>, stash: Map<String, Value>, mesh: &mut MeshMeta);
}

impl EventMetadata for Metadata {
    fn open(metadata: Option<Metadata>) -> (Option<Metadata>, Map<String, Value>, MeshMeta) {
        let mut metadata = metadata.filter(|x| !x.is_empty());
        let stash = take_mesh(&mut metadata);
        (metadata, stash, MeshMeta::default())
    }
    fn close(metadata: &mut Option<Metadata>, stash: Map<String, Value>, _: &mut MeshMeta) {
        put_back_mesh(metadata, stash);
    }
}

impl EventMetadata for FParamsMetadata<false> {
    fn open(metadata: Option<Self>) -> (Option<Metadata>, Map<String, Value>, MeshMeta) {
        match metadata {
            Some(m) => {
                let mut mesh = m.mesh;
                let stash = std::mem::take(&mut mesh.other);
                (Some(m.entries).filter(|x| !x.is_empty()), stash, mesh)
            }
            None => (None, Map::new(), MeshMeta::default()),
        }
    }
    fn close(_: &mut Option<Metadata>, stash: Map<String, Value>, mesh: &mut MeshMeta) {
        mesh.other = stash;
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FStatusEvent<'a, Md = Metadata> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    kind: Option<Str<'a>>,
    task_id: String,
    context_id: Option<String>,
    #[serde(borrow)]
    status: M<FStatus<'a>>,
    #[serde(rename = "final")]
    fin: Option<bool>,
    metadata: Option<Md>,
}

fn status_event(e: FStatusEvent) -> Option<TaskStatusUpdateEvent> {
    status_event_and_mesh(e).map(|(event, _)| event)
}

/// A status event, and its `_mesh` when `Md` reads it apart.
fn status_event_and_mesh<Md: EventMetadata>(
    e: FStatusEvent<'_, Md>,
) -> Option<(TaskStatusUpdateEvent, MeshMeta)> {
    if e.kind
        .as_ref()
        .is_some_and(|k| k != "status-update" && k != "TaskStatusUpdateEvent")
    {
        return None;
    }
    let status = status(e.status.0)?;
    let (mut metadata, mut stash, mut mesh) = Md::open(e.metadata);
    let context_id = e
        .context_id
        .or_else(|| mesh_str(&mut stash, "contextId"))
        .unwrap_or_default();
    if let Some(f) = e.fin {
        stash.remove("final");
        if f != is_final_state(&status.state) {
            stash.insert("final".into(), Value::Bool(f));
        }
    }
    Md::close(&mut metadata, stash, &mut mesh);
    let event = TaskStatusUpdateEvent {
        task_id: e.task_id,
        context_id,
        status,
        metadata,
    };
    Some((event, mesh))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FArtifactEvent<'a, Md = Metadata> {
    #[serde(default, borrow, deserialize_with = "borrowed")]
    kind: Option<Str<'a>>,
    task_id: String,
    context_id: Option<String>,
    #[serde(borrow)]
    artifact: M<FArtifact<'a>>,
    append: Option<bool>,
    last_chunk: Option<bool>,
    metadata: Option<Md>,
}

fn artifact_event(e: FArtifactEvent) -> Option<TaskArtifactUpdateEvent> {
    artifact_event_and_mesh(e).map(|(event, _)| event)
}

/// An artifact event, and its `_mesh` when `Md` reads it apart.
fn artifact_event_and_mesh<Md: EventMetadata>(
    e: FArtifactEvent<'_, Md>,
) -> Option<(TaskArtifactUpdateEvent, MeshMeta)> {
    if e.kind
        .as_ref()
        .is_some_and(|k| k != "artifact-update" && k != "TaskArtifactUpdateEvent")
    {
        return None;
    }
    let artifact = artifact(e.artifact.0)?;
    let (mut metadata, mut stash, mut mesh) = Md::open(e.metadata);
    let context_id = e
        .context_id
        .or_else(|| mesh_str(&mut stash, "contextId"))
        .unwrap_or_default();
    Md::close(&mut metadata, stash, &mut mesh);
    let event = TaskArtifactUpdateEvent {
        task_id: e.task_id,
        context_id,
        artifact,
        append: e.append,
        last_chunk: e.last_chunk,
        metadata,
    };
    Some((event, mesh))
}

// ---------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct FRequest<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(default)]
    id: MaybeId,
    method: &'a str,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

/// The envelope members the request readers use.
struct FEnv<'a> {
    id: MaybeId,
    method: &'a str,
    params: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FConfig {
    accepted_output_modes: Option<Vec<String>>,
    history_length: Option<i32>,
    blocking: Option<bool>,
    return_immediately: Option<bool>,
    push_notification_config: Option<Value>,
    task_push_notification_config: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FSend<'a> {
    #[serde(borrow)]
    message: M<FMessage<'a>>,
    configuration: Option<M<FConfig>>,
    metadata: Option<FParamsMetadata>,
    tenant: Option<String>,
}

/// The metadata of send params: its entries, with `_mesh` read straight into a
/// [`MeshMeta`] instead of a `Value` tree (the request's envelope, on every request an agent
/// serves). `SNAPSHOT`: whether its `_mesh` may hold a task snapshot (a request's; an
/// answer's `_mesh` with one is left to the lenient reader).
struct FParamsMetadata<const SNAPSHOT: bool = true> {
    entries: Metadata,
    mesh: MeshMeta,
}

impl<'de, const SNAPSHOT: bool> Deserialize<'de> for FParamsMetadata<SNAPSHOT> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const SNAPSHOT: bool>;
        impl<'de, const SNAPSHOT: bool> Visitor<'de> for V<SNAPSHOT> {
            type Value = FParamsMetadata<SNAPSHOT>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Metadata::new();
                let mut mesh = None;
                while let Some(Key(key)) = map.next_key()? {
                    if key == MESH_KEY {
                        if mesh.is_some() {
                            return Err(de::Error::duplicate_field(MESH_KEY));
                        }
                        mesh = Some(map.next_value::<FMesh<SNAPSHOT>>()?.0);
                    } else {
                        entries.insert(key.into_owned(), map.next_value()?);
                    }
                }
                Ok(FParamsMetadata {
                    entries,
                    mesh: mesh.unwrap_or_default(),
                })
            }
        }
        d.deserialize_map(V::<SNAPSHOT>)
    }
}

/// An object member's name, borrowed from the input unless it has escapes.
struct Key<'a>(Str<'a>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// `_mesh` read strictly into a [`MeshMeta`]: an object whose known members have their
/// types (`null` as absent) and appear once; unknown members are kept in `other`. Anything
/// else makes this reader decline, and the lenient reading ([`MeshMeta::take`]) decides.
/// `SNAPSHOT`: whether a `task` member is read (see [`FParamsMetadata`]); without, it declines.
struct FMesh<const SNAPSHOT: bool = true>(MeshMeta);

impl<'de, const SNAPSHOT: bool> Deserialize<'de> for FMesh<SNAPSHOT> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const SNAPSHOT: bool>;
        impl<'de, const SNAPSHOT: bool> Visitor<'de> for V<SNAPSHOT> {
            type Value = FMesh<SNAPSHOT>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FMesh<SNAPSHOT>, A::Error> {
                let mut m = MeshMeta::default();
                let mut seen = 0u16;
                while let Some(Key(key)) = map.next_key()? {
                    // The bit of each known member, in the order of `MESH_FIELDS`.
                    let bit = match &*key {
                        "replyTo" => 0,
                        "requestId" => 1,
                        "deadline" => 2,
                        "caller" => 3,
                        "depth" => 4,
                        "traceparent" => 5,
                        "taskId" => 6,
                        "task" => 7,
                        "instance" => 8,
                        "seq" => 9,
                        "window" => 10,
                        "keepsHistory" => 11,
                        "historyFrom" => 12,
                        "streamAfterProgress" => 13,
                        _ => {
                            m.other.insert(key.into_owned(), map.next_value()?);
                            continue;
                        }
                    };
                    if seen & (1 << bit) != 0 {
                        return Err(de::Error::custom("duplicate member in _mesh"));
                    }
                    seen |= 1 << bit;
                    match bit {
                        0 => m.reply_to = map.next_value()?,
                        1 => m.request_id = map.next_value()?,
                        2 => m.deadline = map.next_value()?,
                        // `kind` and `id` strings, `principal` a string or null.
                        3 => m.caller = map.next_value()?,
                        4 => m.depth = map.next_value()?,
                        5 => m.traceparent = map.next_value()?,
                        6 => m.task_id = map.next_value()?,
                        7 if !SNAPSHOT => {
                            return Err(de::Error::custom("a task snapshot in this _mesh"));
                        }
                        // The snapshot of a follow-up: a 0.3 task (null: none).
                        7 => {
                            if let Some(M(t)) = map.next_value::<Option<M<FTask<'de>>>>()? {
                                let t = task(t).ok_or_else(|| de::Error::custom("_mesh.task"))?;
                                m.task = Some(Box::new(t));
                            }
                        }
                        8 => m.instance = map.next_value()?,
                        9 => m.seq = map.next_value()?,
                        10 => m.window = map.next_value()?,
                        11 => m.keeps_history = map.next_value()?,
                        12 => m.history_from = map.next_value()?,
                        _ => m.stream_after_progress = map.next_value()?,
                    }
                }
                Ok(FMesh(m))
            }
        }
        d.deserialize_map(V::<SNAPSHOT>)
    }
}

/// Send params and their `_mesh`.
fn send(p: FSend) -> Option<(SendMessageRequest, MeshMeta)> {
    let configuration = match p.configuration {
        None => None,
        Some(M(c)) => {
            let push = match (c.push_notification_config, c.task_push_notification_config) {
                (Some(_), Some(_)) => return None,
                (Some(v), None) | (None, Some(v)) => {
                    Some(super::lenient_reader::read_push_config(v, "").ok()?)
                }
                (None, None) => None,
            };
            let cfg = SendMessageConfiguration {
                accepted_output_modes: c.accepted_output_modes,
                task_push_notification_config: push,
                history_length: c.history_length,
                return_immediately: c.return_immediately.or(c.blocking.map(|b| !b)),
            };
            (cfg.accepted_output_modes.is_some()
                || cfg.task_push_notification_config.is_some()
                || cfg.history_length.is_some()
                || cfg.return_immediately.is_some())
            .then_some(cfg)
        }
    };
    // As `MeshMeta::take` leaves it: a map with nothing but `_mesh` (or nothing) is absent.
    let (metadata, mesh) = match p.metadata {
        Some(m) => (Some(m.entries).filter(|e| !e.is_empty()), m.mesh),
        None => (None, MeshMeta::default()),
    };
    let params = SendMessageRequest {
        message: message(p.message.0)?,
        configuration,
        metadata,
        tenant: p.tenant,
    };
    Some((params, mesh))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FTaskId {
    id: String,
    history_length: Option<i32>,
    metadata: Option<Metadata>,
    tenant: Option<String>,
}

fn params<'a, T: Deserialize<'a>>(raw: Option<&'a str>) -> Option<T> {
    serde_json::from_str::<M<T>>(raw?).ok().map(|M(t)| t)
}

/// A request exactly as the writers lay it out,
/// `{"jsonrpc":"2.0","id":…,"method":"…","params":…}` (no `id` in a notification): the id,
/// the method and the bytes of the params, found without scanning the params twice (see
/// [`split_response`]).
fn split_request(text: &str) -> Option<(MaybeId, &str, &str)> {
    let rest = text.strip_prefix(r#"{"jsonrpc":"2.0","#)?;
    let (id, rest) = match rest.strip_prefix(r#""id":"#) {
        Some(r) => {
            let (id, r) = split_id(r)?;
            (MaybeId::Present(id), r.strip_prefix(',')?)
        }
        None => (MaybeId::Absent, rest),
    };
    let rest = rest.strip_prefix(r#""method":"#)?;
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<&str>();
    let method = stream.next()?.ok()?;
    let params = rest
        .get(stream.byte_offset()..)?
        .strip_prefix(r#","params":"#)?
        .trim_ascii_end()
        .strip_suffix('}')?;
    Some((id, method, params))
}

/// The typed decode of a single canonical request; `None`: use the lenient reader.
pub(crate) fn decode_request(bytes: &[u8]) -> Option<Request> {
    // One UTF-8 check of the whole payload (fast for ASCII), then no check per string.
    let text = std::str::from_utf8(bytes).ok()?;
    let (id, method, params_text) = match split_request(text) {
        Some((id, method, params)) => (id, method, Some(params)),
        None => {
            let env: FRequest = serde_json::from_str::<M<FRequest>>(text).ok()?.0;
            if env.jsonrpc != "2.0" {
                return None;
            }
            (env.id, env.method, env.params.map(|p| p.get()))
        }
    };
    let env = FEnv {
        id,
        method,
        params: params_text,
    };
    let info = resolve_method(env.method)?;
    let mut mesh = None;
    let mut call = match info.method {
        Method::SendMessage | Method::SendStreamingMessage if info.dialect != Dialect::V0_1 => {
            let (send, envelope) = send(params(env.params)?)?;
            mesh = Some(envelope);
            Call::Send(send)
        }
        Method::GetTask | Method::CancelTask | Method::SubscribeToTask => {
            let p: FTaskId = params(env.params)?;
            match info.method {
                Method::GetTask if p.metadata.is_none() => Call::GetTask(GetTaskRequest {
                    id: p.id,
                    history_length: p.history_length,
                    tenant: p.tenant,
                }),
                Method::CancelTask if p.history_length.is_none() => {
                    Call::CancelTask(CancelTaskRequest {
                        id: p.id,
                        metadata: p.metadata,
                        tenant: p.tenant,
                    })
                }
                Method::SubscribeToTask if p.history_length.is_none() && p.metadata.is_none() => {
                    Call::Subscribe(SubscribeToTaskRequest {
                        id: p.id,
                        tenant: p.tenant,
                    })
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    let mesh = match mesh {
        Some(mesh) => mesh,
        None => {
            let mesh = call.take_mesh();
            // A task snapshot here is the lenient reader's to read (or refuse).
            if mesh.other.contains_key("task") {
                return None;
            }
            mesh
        }
    };
    Some(Request {
        id: match env.id {
            MaybeId::Absent => None,
            MaybeId::Present(id) => Some(id),
        },
        method: info.method,
        dialect: info.dialect,
        shared_method: info.shared,
        mesh,
        call,
    })
}

// ---------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct FResponse<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(default)]
    id: MaybeId,
    #[serde(borrow, default, deserialize_with = "present_raw")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present_raw")]
    error: Option<&'a RawValue>,
}

/// Counts the members of an object without building anything.
struct Members(usize);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut n = 0;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Members(n))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrapTask<'a> {
    #[serde(borrow)]
    task: M<FTask<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrapMessage<'a> {
    #[serde(borrow)]
    message: M<FMessage<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WrapStatus<'a> {
    #[serde(borrow)]
    status_update: M<FStatusEvent<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WrapArtifact<'a> {
    #[serde(borrow)]
    artifact_update: M<FArtifactEvent<'a>>,
}

fn typed<'a, T: Deserialize<'a>>(raw: &'a str) -> Option<T> {
    serde_json::from_str::<M<T>>(raw).ok().map(|M(t)| t)
}

/// The typed decode of a canonical result: a task, message or event (bare, with or without
/// its 0.3 `kind`, or 1.0-wrapped), or an empty object. 0.1 results are never canonical
/// (`sessionId`, `type`-tagged parts): they go to the lenient reader at once.
///
/// Each typed struct fails at the first member it does not know, but a failure costs
/// serde_json an error and its message (about 3,000 instructions): the shape the result
/// names first ([`leading_shape`]) is tried first, then the likeliest shapes of the
/// dialect. Every attempt is exact: a bare struct that decodes has at least two members,
/// only its own members and its kind (if any) checked, which is how the lenient reader
/// dispatches such an object too; a wrapper that decodes has exactly its one member. So the
/// order changes the cost, never the answer.
fn reply(raw: &str, d: Dialect) -> Option<Reply> {
    reply_after(raw, d, false, leading_shape(raw))
}

/// Which shape a result names in its first member, laid out as the writers lay results
/// out (no space): a 0.3 object's `"kind"` (`{"kind":"status-update",…`) or a 1.0
/// wrapper's one member (`{"statusUpdate":{…`); with whether it is wrapped. A hint for the
/// order of the typed attempts only (see [`reply`]).
fn leading_shape(raw: &str) -> Option<(Shape, bool)> {
    const BARE: [(&str, Shape); 4] = [
        (r#""kind":"task""#, Shape::Task),
        (r#""kind":"status-update""#, Shape::Status),
        (r#""kind":"artifact-update""#, Shape::Artifact),
        (r#""kind":"message""#, Shape::Message),
    ];
    const WRAPPED: [(&str, Shape); 4] = [
        (r#""task":"#, Shape::Task),
        (r#""statusUpdate":"#, Shape::Status),
        (r#""artifactUpdate":"#, Shape::Artifact),
        (r#""message":"#, Shape::Message),
    ];
    let first = raw.trim_ascii_start().strip_prefix('{')?;
    let named = |names: &[(&str, Shape)]| {
        names
            .iter()
            .find(|(name, _)| first.starts_with(name))
            .map(|&(_, shape)| shape)
    };
    match named(&BARE) {
        Some(shape) => Some((shape, false)),
        None => named(&WRAPPED).map(|shape| (shape, true)),
    }
}

/// The shapes of a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Task,
    Status,
    Artifact,
    Message,
}

/// One typed attempt: `raw` as a `shape`, bare or `wrapped` (`None`: not that shape).
fn attempt(raw: &str, shape: Shape, wrapped: bool) -> Option<Option<Reply>> {
    Some(match (shape, wrapped) {
        (Shape::Task, false) => task(typed(raw)?).map(Reply::Task),
        (Shape::Status, false) => status_event(typed(raw)?).map(Reply::StatusUpdate),
        (Shape::Artifact, false) => artifact_event(typed(raw)?).map(Reply::ArtifactUpdate),
        (Shape::Message, false) => message(typed(raw)?).map(Reply::Message),
        (Shape::Task, true) => task(typed::<WrapTask>(raw)?.task.0).map(Reply::Task),
        (Shape::Status, true) => {
            status_event(typed::<WrapStatus>(raw)?.status_update.0).map(Reply::StatusUpdate)
        }
        (Shape::Artifact, true) => {
            artifact_event(typed::<WrapArtifact>(raw)?.artifact_update.0).map(Reply::ArtifactUpdate)
        }
        (Shape::Message, true) => message(typed::<WrapMessage>(raw)?.message.0).map(Reply::Message),
    })
}

/// [`reply`] with the result's [`leading_shape`] read already, the attempts as a bare task,
/// status or artifact event left out when `events_tried` (already made).
fn reply_after(
    raw: &str,
    d: Dialect,
    events_tried: bool,
    hint: Option<(Shape, bool)>,
) -> Option<Reply> {
    if d == Dialect::V0_1 {
        return None;
    }
    if let Some((shape, wrapped)) = hint
        && (wrapped || shape == Shape::Message || !events_tried)
        && let Some(found) = attempt(raw, shape, wrapped)
    {
        return found;
    }
    const ALL: [Shape; 4] = [Shape::Task, Shape::Status, Shape::Artifact, Shape::Message];
    let bare = |raw: &str| -> Option<Option<Reply>> {
        let shapes = if events_tried { &ALL[3..] } else { &ALL[..] };
        shapes.iter().find_map(|&shape| attempt(raw, shape, false))
    };
    let wrapped = |raw: &str| ALL.iter().find_map(|&shape| attempt(raw, shape, true));
    let found = if d == Dialect::V1_0 {
        wrapped(raw).or_else(|| bare(raw))
    } else {
        bare(raw).or_else(|| wrapped(raw))
    };
    match found {
        Some(r) => r,
        None => (typed::<Members>(raw)?.0 == 0).then_some(Reply::Empty),
    }
}

/// [`reply`] with the reply's `_mesh` taken out: a bare task, status or artifact event (a 0.x
/// answer to SendMessage, the events of a stream) reads its `_mesh` straight into a
/// [`MeshMeta`], without a `Value` tree; any other reply is read by [`reply`] and its `_mesh`
/// taken out after.
fn reply_and_mesh(raw: &str, d: Dialect) -> Option<(Reply, MeshMeta)> {
    if d == Dialect::V0_1 {
        return None;
    }
    let mut events_tried = false;
    // A 0.3 event or task, the one its `kind` names first (see [`reply`] on the order); a
    // message or a 1.0 wrapper is left to `reply_after`, which tries it first.
    let hint = leading_shape(raw);
    let order = match hint {
        Some((Shape::Status, false)) => Some([Shape::Status, Shape::Task, Shape::Artifact]),
        Some((Shape::Artifact, false)) => Some([Shape::Artifact, Shape::Task, Shape::Status]),
        Some((Shape::Task, false)) | None => Some([Shape::Task, Shape::Status, Shape::Artifact]),
        Some(_) => None,
    };
    if let Some(order) = order
        && d != Dialect::V1_0
    {
        for shape in order {
            match shape {
                Shape::Task => {
                    if let Some(t) = typed::<FTask<FParamsMetadata<false>>>(raw) {
                        let (t, mesh) = split_task_mesh(t);
                        return Some((Reply::Task(task(t)?), mesh));
                    }
                }
                Shape::Status => {
                    if let Some(e) = typed::<FStatusEvent<FParamsMetadata<false>>>(raw) {
                        let (event, mesh) = status_event_and_mesh(e)?;
                        return Some((Reply::StatusUpdate(event), mesh));
                    }
                }
                Shape::Artifact => {
                    if let Some(e) = typed::<FArtifactEvent<FParamsMetadata<false>>>(raw) {
                        let (event, mesh) = artifact_event_and_mesh(e)?;
                        return Some((Reply::ArtifactUpdate(event), mesh));
                    }
                }
                Shape::Message => {}
            }
        }
        events_tried = true;
    }
    let mut reply = reply_after(raw, d, events_tried, hint)?;
    let mesh = reply.take_mesh();
    Some((reply, mesh))
}

/// The typed decode of a bare canonical result (see [`super::read_reply_json`]); `None`: use
/// the lenient reader.
pub(crate) fn read_result(bytes: &[u8], dialect: Dialect) -> Option<Reply> {
    reply(std::str::from_utf8(bytes).ok()?, dialect)
}

/// Reads the id of an envelope written member by member as `"id":<id>,` (the rest follows).
fn split_id(rest: &str) -> Option<(JsonRpcId, &str)> {
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<MaybeId>();
    let MaybeId::Present(id) = stream.next()?.ok()? else {
        return None;
    };
    Some((id, rest.get(stream.byte_offset()..)?))
}

/// A response exactly as the writers lay it out, `{"jsonrpc":"2.0","id":…,"result":…}`:
/// the id and the bytes of the result, found without scanning the result twice. That the
/// result is one JSON value (nothing after it but the closing brace) is checked by the
/// typed decode of it (`from_str` rejects trailing characters), so such a payload has
/// exactly these three members, as the lenient reader would see them.
fn split_response(text: &str) -> Option<(JsonRpcId, &str)> {
    let rest = text.strip_prefix(r#"{"jsonrpc":"2.0","id":"#)?;
    let (id, rest) = split_id(rest)?;
    let result = rest
        .strip_prefix(r#","result":"#)?
        .trim_ascii_end()
        .strip_suffix('}')?;
    Some((id, result))
}

/// The typed decode of a canonical response (see [`super::decode_reply`]); `None`: use the
/// lenient reader.
pub(crate) fn decode_reply(bytes: &[u8], dialect: Dialect) -> Option<super::DecodedReply> {
    decode_response(bytes, dialect, reply)
}

/// [`decode_reply`] with the reply's `_mesh` taken out (see
/// [`super::decode_reply_and_mesh`]).
pub(crate) fn decode_reply_and_mesh(
    bytes: &[u8],
    dialect: Dialect,
) -> Option<super::DecodedReplyAndMesh> {
    decode_response(bytes, dialect, reply_and_mesh)
}

/// A response's id and its result read by `read` (or its error).
fn decode_response<T>(
    bytes: &[u8],
    dialect: Dialect,
    read: impl Fn(&str, Dialect) -> Option<T>,
) -> Option<(JsonRpcId, Result<T, A2aError>)> {
    let text = std::str::from_utf8(bytes).ok()?;
    if let Some((id, result)) = split_response(text) {
        return Some((id, Ok(read(result, dialect)?)));
    }
    let env: FResponse = serde_json::from_str::<M<FResponse>>(text).ok()?.0;
    if env.jsonrpc != "2.0" {
        return None;
    }
    let id = match env.id {
        MaybeId::Absent => JsonRpcId::Null,
        MaybeId::Present(id) => id,
    };
    if let Some(err) = env.error {
        let v: Value = serde_json::from_str(err.get()).ok()?;
        return Some((id, Err(A2aError::from_json(v, dialect).ok()?)));
    }
    Some((id, Ok(read(env.result?.get(), dialect)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Part, TaskStatus};

    /// Every result the writers lay out names its shape first, so that the typed reader
    /// tries the right struct first (0.1's results are left to the lenient reader).
    #[test]
    fn the_writers_results_name_their_shape_first() {
        let task = super::super::read_task(serde_json::json!({
            "kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "working"}
        }))
        .unwrap();
        let status = TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: None,
            },
            metadata: None,
        };
        let artifact = TaskArtifactUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            artifact: Artifact {
                artifact_id: "a".into(),
                name: None,
                description: None,
                parts: vec![Part::text("x")],
                metadata: None,
                extensions: None,
            },
            append: None,
            last_chunk: None,
            metadata: None,
        };
        let message = Message::new(Role::Agent, vec![Part::text("x")]);
        let id = JsonRpcId::Number(1.into());
        for d in [Dialect::V0_3, Dialect::V1_0] {
            let wrapped = d == Dialect::V1_0;
            for (reply, shape) in [
                (Reply::Task(task.clone()), Shape::Task),
                (Reply::StatusUpdate(status.clone()), Shape::Status),
                (Reply::ArtifactUpdate(artifact.clone()), Shape::Artifact),
                (Reply::Message(message.clone()), Shape::Message),
            ] {
                let bytes = super::super::encode_reply(d, &id, &reply);
                let text = std::str::from_utf8(&bytes).unwrap();
                let (_, result) = split_response(text).unwrap();
                assert_eq!(leading_shape(result), Some((shape, wrapped)), "{text}");
            }
        }
        assert_eq!(
            leading_shape(r#" {"kind":"status-update"}"#),
            Some((Shape::Status, false))
        );
        // Laid out otherwise, a result gives no hint (its attempts go in the usual order).
        assert_eq!(leading_shape(r#"{ "kind": "task" }"#), None);
        assert_eq!(leading_shape(r#"{"id":"t","kind":"task"}"#), None);
        assert_eq!(leading_shape(r#"{"kind":"other"}"#), None);
        assert_eq!(leading_shape("[]"), None);
    }
}
