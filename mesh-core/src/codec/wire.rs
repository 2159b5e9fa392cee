//! Typed writers: the model serialized straight into the output bytes, per dialect.
//!
//! Each adapter borrows a model value and its [`Dialect`] and implements
//! [`serde::Serialize`], so `serde_json::to_writer` writes the dialect's canonical camelCase
//! JSON without building an intermediate `serde_json::Value`. 1.0 parts, roles and states
//! use the `a2a-lf` serializers (ProtoJSON). 0.1 and 0.3 are written with their tags,
//! spellings and shapes; what they have no field for goes into the object's
//! `metadata._mesh` (see [`crate::model::MESH_KEY`]) and is restored by the readers.
//!
//! The output is member-for-member what the reference `Value` writer (the test-only
//! `write` module) produces; the `typed_writer_matches_reference_*` tests check it for random
//! models in every dialect. Only the rare cases that merge entries into `metadata._mesh`
//! build a small map; the agent card is written by [`super::card`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use crate::dialect::{Dialect, Method, method_name};
use crate::jsonrpc::JsonRpcId;
use crate::model::{
    Artifact, AuthenticationInfo, MESH_KEY, Message, Metadata, Part, PartContent, Role, Task,
    TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskState, TaskStatus,
    TaskStatusUpdateEvent, is_final_state,
};
use crate::rpc::{Call, Reply, Request};

/// Serializes into a fresh buffer (the adapters cannot fail; `null` defensively).
pub(crate) fn to_vec<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    match serde_json::to_writer(&mut out, v) {
        Ok(()) => out,
        Err(_) => b"null".to_vec(),
    }
}

/// Serializes into a `Value` (for the public helpers that return one).
pub(crate) fn to_value<T: Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Metadata to write: the object's own map by reference, or (when entries are stashed
/// under `_mesh`) a merged copy.
enum MetaOut<'a> {
    Borrowed(&'a Metadata),
    Owned(Map<String, Value>),
}

impl Serialize for MetaOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MetaOut::Borrowed(m) => m.serialize(s),
            MetaOut::Owned(m) => m.serialize(s),
        }
    }
}

/// The object's metadata plus the stashed entries under `_mesh` (merged into an existing
/// `_mesh` object). `None` when both are empty.
fn meta_out<'a>(meta: Option<&'a Metadata>, stash: Map<String, Value>) -> Option<MetaOut<'a>> {
    if stash.is_empty() {
        return meta.filter(|m| !m.is_empty()).map(MetaOut::Borrowed);
    }
    let mut out: Map<String, Value> = meta
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    match out.get_mut(MESH_KEY) {
        Some(Value::Object(existing)) => existing.extend(stash),
        _ => {
            out.insert(MESH_KEY.into(), Value::Object(stash));
        }
    }
    Some(MetaOut::Owned(out))
}

fn stash_opt<T: Clone + Into<Value>>(stash: &mut Map<String, Value>, key: &str, v: &Option<T>) {
    if let Some(v) = v {
        stash.insert(key.into(), v.clone().into());
    }
}

/// Writes `key: value` when `value` is `Some`.
fn opt<M: SerializeMap, T: Serialize + ?Sized>(
    m: &mut M,
    key: &'static str,
    v: Option<&T>,
) -> Result<(), M::Error> {
    match v {
        Some(v) => m.serialize_entry(key, v),
        None => Ok(()),
    }
}

/// A role (0.x: `user`/`agent`; 1.0: `ROLE_*`).
struct WRole<'a>(&'a Role, Dialect);

impl Serialize for WRole<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self.1, self.0) {
            (Dialect::V1_0, r) => r.serialize(s),
            (_, Role::Agent) => s.serialize_str("agent"),
            _ => s.serialize_str("user"),
        }
    }
}

/// A task state (0.x: lowercase with dashes, `unknown` for unspecified; 1.0: `TASK_STATE_*`).
pub(crate) struct WState<'a>(pub(crate) &'a TaskState, pub(crate) Dialect);

impl Serialize for WState<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.1 == Dialect::V1_0 {
            return self.0.serialize(s);
        }
        s.serialize_str(crate::model::state_name(self.0))
    }
}

/// A timestamp as RFC 3339 UTC (`Z`).
pub(crate) fn timestamp(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// A 0.x `file` object.
struct WFile<'a>(&'a Part);

impl Serialize for WFile<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let mut m = s.serialize_map(None)?;
        opt(&mut m, "name", p.filename.as_ref())?;
        opt(&mut m, "mimeType", p.media_type.as_ref())?;
        match &p.content {
            PartContent::Raw(bytes) => m.serialize_entry("bytes", &STANDARD.encode(bytes))?,
            PartContent::Url(u) => m.serialize_entry("uri", u)?,
            _ => {}
        }
        m.end()
    }
}

/// A part.
pub(crate) struct WPart<'a>(pub(crate) &'a Part, pub(crate) Dialect);

impl Serialize for WPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (p, d) = (self.0, self.1);
        if d == Dialect::V1_0 {
            // a2a-lf writes the flat ProtoJSON part and drops empty metadata.
            return p.serialize(s);
        }
        let tag = if d == Dialect::V0_1 { "type" } else { "kind" };
        let mut m = s.serialize_map(None)?;
        let mut stash = Map::new();
        match &p.content {
            PartContent::Text(t) => {
                m.serialize_entry(tag, "text")?;
                m.serialize_entry("text", t)?;
            }
            PartContent::Data(data) => {
                m.serialize_entry(tag, "data")?;
                m.serialize_entry("data", data)?;
            }
            PartContent::Raw(_) | PartContent::Url(_) => {
                m.serialize_entry(tag, "file")?;
                m.serialize_entry("file", &WFile(p))?;
            }
        }
        if matches!(p.content, PartContent::Text(_) | PartContent::Data(_)) {
            stash_opt(&mut stash, "filename", &p.filename);
            stash_opt(&mut stash, "mediaType", &p.media_type);
        }
        opt(
            &mut m,
            "metadata",
            meta_out(p.metadata.as_ref(), stash).as_ref(),
        )?;
        m.end()
    }
}

struct WParts<'a>(&'a [Part], Dialect);

impl Serialize for WParts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for p in self.0 {
            seq.serialize_element(&WPart(p, self.1))?;
        }
        seq.end()
    }
}

/// A message (0.1: ids, extensions and references under `metadata._mesh`).
pub(crate) struct WMessage<'a>(pub(crate) &'a Message, pub(crate) Dialect);

impl Serialize for WMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (msg, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        if d == Dialect::V0_1 {
            m.serialize_entry("role", &WRole(&msg.role, d))?;
            m.serialize_entry("parts", &WParts(&msg.parts, d))?;
            let mut stash = Map::new();
            stash.insert("messageId".into(), msg.message_id.clone().into());
            stash_opt(&mut stash, "contextId", &msg.context_id);
            stash_opt(&mut stash, "taskId", &msg.task_id);
            stash_opt(&mut stash, "extensions", &msg.extensions);
            stash_opt(&mut stash, "referenceTaskIds", &msg.reference_task_ids);
            opt(
                &mut m,
                "metadata",
                meta_out(msg.metadata.as_ref(), stash).as_ref(),
            )?;
            return m.end();
        }
        if d == Dialect::V0_3 {
            m.serialize_entry("kind", "message")?;
        }
        m.serialize_entry("messageId", &msg.message_id)?;
        opt(&mut m, "contextId", msg.context_id.as_ref())?;
        opt(&mut m, "taskId", msg.task_id.as_ref())?;
        m.serialize_entry("role", &WRole(&msg.role, d))?;
        m.serialize_entry("parts", &WParts(&msg.parts, d))?;
        opt(
            &mut m,
            "metadata",
            meta_out(msg.metadata.as_ref(), Map::new()).as_ref(),
        )?;
        opt(&mut m, "extensions", msg.extensions.as_ref())?;
        opt(&mut m, "referenceTaskIds", msg.reference_task_ids.as_ref())?;
        m.end()
    }
}

/// A task status.
struct WStatus<'a>(&'a TaskStatus, Dialect);

impl Serialize for WStatus<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (st, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("state", &WState(&st.state, d))?;
        opt(
            &mut m,
            "message",
            st.message.as_ref().map(|x| WMessage(x, d)).as_ref(),
        )?;
        opt(
            &mut m,
            "timestamp",
            st.timestamp.as_ref().map(timestamp).as_ref(),
        )?;
        m.end()
    }
}

/// The 0.1 `index` implied by an artifact id of the form `artifact-{n}`.
fn implied_index(id: &str) -> Option<u64> {
    let n = id.strip_prefix("artifact-")?;
    let i: u64 = n.parse().ok()?;
    (i.to_string() == n).then_some(i)
}

/// An artifact; `chunk` = 0.1 (append, lastChunk) for artifact-update events.
struct WArtifact<'a> {
    a: &'a Artifact,
    d: Dialect,
    position: usize,
    chunk: Option<(Option<bool>, Option<bool>)>,
}

impl Serialize for WArtifact<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (a, d) = (self.a, self.d);
        let mut m = s.serialize_map(None)?;
        let mut stash = Map::new();
        if d == Dialect::V0_1 {
            match implied_index(&a.artifact_id) {
                Some(i) => m.serialize_entry("index", &i)?,
                None => {
                    m.serialize_entry("index", &(self.position as u64))?;
                    stash.insert("artifactId".into(), a.artifact_id.clone().into());
                }
            }
            stash_opt(&mut stash, "extensions", &a.extensions);
        } else {
            m.serialize_entry("artifactId", &a.artifact_id)?;
        }
        opt(&mut m, "name", a.name.as_ref())?;
        opt(&mut m, "description", a.description.as_ref())?;
        m.serialize_entry("parts", &WParts(&a.parts, d))?;
        opt(
            &mut m,
            "metadata",
            meta_out(a.metadata.as_ref(), stash).as_ref(),
        )?;
        if d != Dialect::V0_1 {
            opt(&mut m, "extensions", a.extensions.as_ref())?;
        }
        if let Some((append, last)) = self.chunk {
            opt(&mut m, "append", append.as_ref())?;
            opt(&mut m, "lastChunk", last.as_ref())?;
        }
        m.end()
    }
}

struct WArtifacts<'a>(&'a [Artifact], Dialect);

impl Serialize for WArtifacts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (position, a) in self.0.iter().enumerate() {
            seq.serialize_element(&WArtifact {
                a,
                d: self.1,
                position,
                chunk: None,
            })?;
        }
        seq.end()
    }
}

struct WMessages<'a>(&'a [Message], Dialect);

impl Serialize for WMessages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for x in self.0 {
            seq.serialize_element(&WMessage(x, self.1))?;
        }
        seq.end()
    }
}

/// A task.
pub(crate) struct WTask<'a>(pub(crate) &'a Task, pub(crate) Dialect);

/// A task with only the last `history_tail` messages of its history (a client's
/// `historyLength`); `None` writes all of it.
pub(crate) struct WTaskTail<'a>(
    pub(crate) &'a Task,
    pub(crate) Dialect,
    pub(crate) Option<usize>,
);

impl Serialize for WTaskTail<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WTask(self.0, self.1).write(s, self.2)
    }
}

impl Serialize for WTask<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.write(s, None)
    }
}

impl WTask<'_> {
    fn write<S: Serializer>(&self, s: S, history_tail: Option<usize>) -> Result<S::Ok, S::Error> {
        let (t, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        if d == Dialect::V0_3 {
            m.serialize_entry("kind", "task")?;
        }
        m.serialize_entry("id", &t.id)?;
        match d {
            Dialect::V0_1 => {
                if !t.context_id.is_empty() {
                    m.serialize_entry("sessionId", &t.context_id)?;
                }
            }
            _ => m.serialize_entry("contextId", &t.context_id)?,
        }
        m.serialize_entry("status", &WStatus(&t.status, d))?;
        opt(
            &mut m,
            "artifacts",
            t.artifacts.as_deref().map(|a| WArtifacts(a, d)).as_ref(),
        )?;
        let history = t.history.as_deref().map(|h| match history_tail {
            Some(n) if h.len() > n => &h[h.len() - n..],
            _ => h,
        });
        opt(&mut m, "history", history.map(|h| WMessages(h, d)).as_ref())?;
        opt(
            &mut m,
            "metadata",
            meta_out(t.metadata.as_ref(), Map::new()).as_ref(),
        )?;
        m.end()
    }
}

/// A 0.x event's `final` and metadata: `metadata._mesh.final` (if a boolean) wins over what
/// the state implies and is not written back; `ctx` (0.1) is stashed as `_mesh.contextId`.
fn event_meta<'a>(
    meta: Option<&'a Metadata>,
    state: &TaskState,
    ctx: Option<&str>,
) -> (bool, Option<MetaOut<'a>>) {
    let has_mesh = meta.is_some_and(|m| matches!(m.get(MESH_KEY), Some(Value::Object(_))));
    if !has_mesh {
        let mut stash = Map::new();
        if let Some(c) = ctx {
            stash.insert("contextId".into(), c.into());
        }
        return (is_final_state(state), meta_out(meta, stash));
    }
    let mut rest: Map<String, Value> = Map::new();
    let mut mesh = Map::new();
    for (k, v) in meta.into_iter().flatten() {
        match (k.as_str(), v) {
            (MESH_KEY, Value::Object(o)) => mesh = o.clone(),
            _ => {
                rest.insert(k.clone(), v.clone());
            }
        }
    }
    let fin = match mesh.remove("final") {
        Some(Value::Bool(b)) => b,
        _ => is_final_state(state),
    };
    if let Some(c) = ctx {
        mesh.insert("contextId".into(), c.into());
    }
    if !mesh.is_empty() {
        rest.insert(MESH_KEY.into(), Value::Object(mesh));
    }
    (fin, (!rest.is_empty()).then_some(MetaOut::Owned(rest)))
}

/// A status-update event (0.x `final`: `metadata._mesh.final` if set, else implied by the
/// state).
pub(crate) struct WStatusEvent<'a>(pub(crate) &'a TaskStatusUpdateEvent, pub(crate) Dialect);

impl Serialize for WStatusEvent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (e, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        if d == Dialect::V1_0 {
            m.serialize_entry("taskId", &e.task_id)?;
            m.serialize_entry("contextId", &e.context_id)?;
            m.serialize_entry("status", &WStatus(&e.status, d))?;
            opt(
                &mut m,
                "metadata",
                meta_out(e.metadata.as_ref(), Map::new()).as_ref(),
            )?;
            return m.end();
        }
        let ctx = (d == Dialect::V0_1 && !e.context_id.is_empty()).then_some(e.context_id.as_str());
        let (fin, meta) = event_meta(e.metadata.as_ref(), &e.status.state, ctx);
        if d == Dialect::V0_3 {
            m.serialize_entry("kind", "status-update")?;
            m.serialize_entry("taskId", &e.task_id)?;
            m.serialize_entry("contextId", &e.context_id)?;
        } else {
            m.serialize_entry("id", &e.task_id)?;
        }
        m.serialize_entry("status", &WStatus(&e.status, d))?;
        m.serialize_entry("final", &fin)?;
        opt(&mut m, "metadata", meta.as_ref())?;
        m.end()
    }
}

/// An artifact-update event (0.1: append/lastChunk inside the artifact).
pub(crate) struct WArtifactEvent<'a>(pub(crate) &'a TaskArtifactUpdateEvent, pub(crate) Dialect);

impl Serialize for WArtifactEvent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (e, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        if d == Dialect::V0_1 {
            m.serialize_entry("id", &e.task_id)?;
            m.serialize_entry(
                "artifact",
                &WArtifact {
                    a: &e.artifact,
                    d,
                    position: 0,
                    chunk: Some((e.append, e.last_chunk)),
                },
            )?;
            let mut stash = Map::new();
            if !e.context_id.is_empty() {
                stash.insert("contextId".into(), e.context_id.clone().into());
            }
            opt(
                &mut m,
                "metadata",
                meta_out(e.metadata.as_ref(), stash).as_ref(),
            )?;
            return m.end();
        }
        if d == Dialect::V0_3 {
            m.serialize_entry("kind", "artifact-update")?;
        }
        m.serialize_entry("taskId", &e.task_id)?;
        m.serialize_entry("contextId", &e.context_id)?;
        m.serialize_entry(
            "artifact",
            &WArtifact {
                a: &e.artifact,
                d,
                position: 0,
                chunk: None,
            },
        )?;
        opt(&mut m, "append", e.append.as_ref())?;
        opt(&mut m, "lastChunk", e.last_chunk.as_ref())?;
        opt(
            &mut m,
            "metadata",
            meta_out(e.metadata.as_ref(), Map::new()).as_ref(),
        )?;
        m.end()
    }
}

/// Push-config authentication (0.x: `schemes: [scheme]`).
struct WAuth<'a>(&'a AuthenticationInfo, Dialect);

impl Serialize for WAuth<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let a = self.0;
        let mut m = s.serialize_map(None)?;
        if self.1 == Dialect::V1_0 {
            m.serialize_entry("scheme", &a.scheme)?;
        } else {
            m.serialize_entry("schemes", std::slice::from_ref(&a.scheme))?;
        }
        opt(&mut m, "credentials", a.credentials.as_ref())?;
        m.end()
    }
}

/// The inner push config (0.x `PushNotificationConfig`: no task id).
struct WPushInner<'a>(&'a TaskPushNotificationConfig, Dialect);

impl Serialize for WPushInner<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut m = s.serialize_map(None)?;
        opt(&mut m, "id", c.id.as_ref())?;
        m.serialize_entry("url", &c.url)?;
        opt(&mut m, "token", c.token.as_ref())?;
        opt(
            &mut m,
            "authentication",
            c.authentication.as_ref().map(|a| WAuth(a, self.1)).as_ref(),
        )?;
        m.end()
    }
}

/// A push config: 1.0 flat, 0.3 `{taskId, pushNotificationConfig}`, 0.1
/// `{id, pushNotificationConfig}`. The tenant is written as an extra member in 0.x.
pub(crate) struct WPushConfig<'a>(
    pub(crate) &'a TaskPushNotificationConfig,
    pub(crate) Dialect,
);

impl Serialize for WPushConfig<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (c, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        if d == Dialect::V1_0 {
            opt(&mut m, "tenant", c.tenant.as_ref())?;
            opt(&mut m, "id", c.id.as_ref())?;
            if !c.task_id.is_empty() {
                m.serialize_entry("taskId", &c.task_id)?;
            }
            m.serialize_entry("url", &c.url)?;
            opt(&mut m, "token", c.token.as_ref())?;
            opt(
                &mut m,
                "authentication",
                c.authentication.as_ref().map(|a| WAuth(a, d)).as_ref(),
            )?;
        } else {
            let key = if d == Dialect::V0_3 { "taskId" } else { "id" };
            m.serialize_entry(key, &c.task_id)?;
            m.serialize_entry("pushNotificationConfig", &WPushInner(c, d))?;
            opt(&mut m, "tenant", c.tenant.as_ref())?;
        }
        m.end()
    }
}

/// A model type with a dialect adapter (for lists).
trait Adapt {
    type W<'a>: Serialize
    where
        Self: 'a;
    fn adapt(&self, d: Dialect) -> Self::W<'_>;
}

impl Adapt for Task {
    type W<'a> = WTask<'a>;
    fn adapt(&self, d: Dialect) -> WTask<'_> {
        WTask(self, d)
    }
}

impl Adapt for TaskPushNotificationConfig {
    type W<'a> = WPushConfig<'a>;
    fn adapt(&self, d: Dialect) -> WPushConfig<'_> {
        WPushConfig(self, d)
    }
}

struct WSeq<'a, T>(&'a [T], Dialect);

impl<T: Adapt> Serialize for WSeq<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for x in self.0 {
            seq.serialize_element(&x.adapt(self.1))?;
        }
        seq.end()
    }
}

/// `{key: value}` (1.0 wrapped results).
pub(crate) struct Wrap<T>(pub(crate) &'static str, pub(crate) T);

impl<T: Serialize> Serialize for Wrap<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.0, &self.1)?;
        m.end()
    }
}

/// A reply (a response's `result`); `bare_task`: a 1.0 task is not wrapped (GetTask,
/// CancelTask).
pub(crate) struct WReply<'a> {
    pub(crate) reply: &'a Reply,
    pub(crate) d: Dialect,
    pub(crate) bare_task: bool,
}

impl Serialize for WReply<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.d;
        let v1 = d == Dialect::V1_0;
        match self.reply {
            Reply::Task(t) if v1 && !self.bare_task => Wrap("task", WTask(t, d)).serialize(s),
            Reply::Task(t) => WTask(t, d).serialize(s),
            Reply::Message(x) if v1 => Wrap("message", WMessage(x, d)).serialize(s),
            Reply::Message(x) => WMessage(x, d).serialize(s),
            Reply::StatusUpdate(e) if v1 => Wrap("statusUpdate", WStatusEvent(e, d)).serialize(s),
            Reply::StatusUpdate(e) => WStatusEvent(e, d).serialize(s),
            Reply::ArtifactUpdate(e) if v1 => {
                Wrap("artifactUpdate", WArtifactEvent(e, d)).serialize(s)
            }
            Reply::ArtifactUpdate(e) => WArtifactEvent(e, d).serialize(s),
            Reply::Tasks(l) => {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("tasks", &WSeq(&l.tasks, d))?;
                m.serialize_entry("nextPageToken", &l.next_page_token)?;
                m.serialize_entry("pageSize", &l.page_size)?;
                m.serialize_entry("totalSize", &l.total_size)?;
                m.end()
            }
            Reply::PushConfig(c) => WPushConfig(c, d).serialize(s),
            Reply::PushConfigs(l) => {
                let list = WSeq(&l.configs, d);
                if v1 {
                    let mut m = s.serialize_map(None)?;
                    m.serialize_entry("configs", &list)?;
                    opt(&mut m, "nextPageToken", l.next_page_token.as_ref())?;
                    m.end()
                } else {
                    list.serialize(s)
                }
            }
            Reply::Card(c) => match d {
                Dialect::V1_0 => super::card::write_card_v1(c).serialize(s),
                _ => super::card::write_card_v03(c).serialize(s),
            },
            Reply::Empty if v1 => s.serialize_map(Some(0))?.end(),
            Reply::Empty => s.serialize_unit(),
        }
    }
}

/// The params of a send's configuration, written inside `configuration` (or, in 0.1,
/// flattened into the params object by [`WCall`]).
fn write_send_config<M: SerializeMap>(
    m: &mut M,
    c: &crate::model::SendMessageConfiguration,
    d: Dialect,
) -> Result<(), M::Error> {
    opt(m, "acceptedOutputModes", c.accepted_output_modes.as_ref())?;
    opt(m, "historyLength", c.history_length.as_ref())?;
    let push = c.task_push_notification_config.as_ref();
    match d {
        Dialect::V1_0 => {
            opt(m, "returnImmediately", c.return_immediately.as_ref())?;
            opt(
                m,
                "taskPushNotificationConfig",
                push.map(|p| WPushConfig(p, d)).as_ref(),
            )?;
        }
        Dialect::V0_3 => {
            opt(m, "blocking", c.return_immediately.map(|r| !r).as_ref())?;
            opt(
                m,
                "pushNotificationConfig",
                push.map(|p| WPushInner(p, d)).as_ref(),
            )?;
        }
        Dialect::V0_1 => {
            opt(m, "returnImmediately", c.return_immediately.as_ref())?;
            opt(
                m,
                "pushNotification",
                push.map(|p| WPushInner(p, d)).as_ref(),
            )?;
        }
    }
    Ok(())
}

struct WConfig<'a>(&'a crate::model::SendMessageConfiguration, Dialect);

impl Serialize for WConfig<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        write_send_config(&mut m, self.0, self.1)?;
        m.end()
    }
}

fn task_and_config<M: SerializeMap>(
    m: &mut M,
    d: Dialect,
    task_id: &str,
    id: &str,
) -> Result<(), M::Error> {
    if d == Dialect::V1_0 {
        m.serialize_entry("taskId", task_id)?;
        m.serialize_entry("id", id)?;
    } else {
        m.serialize_entry("id", task_id)?;
        if !id.is_empty() {
            m.serialize_entry("pushNotificationConfigId", id)?;
        }
    }
    Ok(())
}

/// The params of a call in a dialect (`None` from [`WCall::new`]: no params member).
pub(crate) struct WCall<'a>(&'a Call, Dialect);

impl<'a> WCall<'a> {
    pub(crate) fn new(call: &'a Call, d: Dialect) -> Option<WCall<'a>> {
        (!matches!(call, Call::GetExtendedCard)).then_some(WCall(call, d))
    }
}

impl Serialize for WCall<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.1;
        if let Call::SetPushConfig(c) = self.0 {
            return WPushConfig(c, d).serialize(s);
        }
        let mut m = s.serialize_map(None)?;
        match self.0 {
            Call::GetExtendedCard | Call::SetPushConfig(_) => {}
            Call::Send(x) => {
                if d == Dialect::V0_1 {
                    opt(&mut m, "id", x.message.task_id.as_ref())?;
                    opt(&mut m, "sessionId", x.message.context_id.as_ref())?;
                }
                m.serialize_entry("message", &WMessage(&x.message, d))?;
                if let Some(c) = &x.configuration {
                    if d == Dialect::V0_1 {
                        write_send_config(&mut m, c, d)?;
                    } else {
                        m.serialize_entry("configuration", &WConfig(c, d))?;
                    }
                }
                opt(&mut m, "metadata", x.metadata.as_ref())?;
                opt(&mut m, "tenant", x.tenant.as_ref())?;
            }
            Call::GetTask(g) => {
                m.serialize_entry("id", &g.id)?;
                opt(&mut m, "historyLength", g.history_length.as_ref())?;
                opt(&mut m, "tenant", g.tenant.as_ref())?;
            }
            Call::ListTasks(l) => {
                opt(&mut m, "contextId", l.context_id.as_ref())?;
                opt(
                    &mut m,
                    "status",
                    l.status.as_ref().map(|x| WState(x, d)).as_ref(),
                )?;
                opt(&mut m, "pageSize", l.page_size.as_ref())?;
                opt(&mut m, "pageToken", l.page_token.as_ref())?;
                opt(&mut m, "historyLength", l.history_length.as_ref())?;
                opt(
                    &mut m,
                    "statusTimestampAfter",
                    l.status_timestamp_after.as_ref().map(timestamp).as_ref(),
                )?;
                opt(&mut m, "includeArtifacts", l.include_artifacts.as_ref())?;
                opt(&mut m, "tenant", l.tenant.as_ref())?;
            }
            Call::CancelTask(c) => {
                m.serialize_entry("id", &c.id)?;
                opt(&mut m, "metadata", c.metadata.as_ref())?;
                opt(&mut m, "tenant", c.tenant.as_ref())?;
            }
            Call::Subscribe(x) => {
                m.serialize_entry("id", &x.id)?;
                opt(&mut m, "tenant", x.tenant.as_ref())?;
            }
            Call::GetPushConfig(g) => {
                task_and_config(&mut m, d, &g.task_id, &g.id)?;
                opt(&mut m, "tenant", g.tenant.as_ref())?;
            }
            Call::DeletePushConfig(g) => {
                task_and_config(&mut m, d, &g.task_id, &g.id)?;
                opt(&mut m, "tenant", g.tenant.as_ref())?;
            }
            Call::ListPushConfigs(l) => {
                let key = if d == Dialect::V1_0 { "taskId" } else { "id" };
                m.serialize_entry(key, &l.task_id)?;
                opt(&mut m, "pageSize", l.page_size.as_ref())?;
                opt(&mut m, "pageToken", l.page_token.as_ref())?;
                opt(&mut m, "tenant", l.tenant.as_ref())?;
            }
        }
        m.end()
    }
}

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}` (no `id` for a notification).
pub(crate) struct WRequest<'a>(pub(crate) &'a Request);

impl Serialize for WRequest<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", "2.0")?;
        opt(&mut m, "id", r.id.as_ref())?;
        m.serialize_entry("method", method_name(r.method, r.dialect))?;
        opt(&mut m, "params", WCall::new(&r.call, r.dialect).as_ref())?;
        m.end()
    }
}

/// The answer to `method` in a dialect: 1.0 GetTask/CancelTask answer a bare task.
pub(crate) fn reply_for(method: Option<Method>, d: Dialect, reply: &Reply) -> WReply<'_> {
    WReply {
        reply,
        d,
        bare_task: d == Dialect::V1_0
            && matches!(method, Some(Method::GetTask | Method::CancelTask))
            && matches!(reply, Reply::Task(_)),
    }
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub(crate) struct WResult<'a, T>(pub(crate) &'a JsonRpcId, pub(crate) T);

impl<T: Serialize> Serialize for WResult<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("jsonrpc", "2.0")?;
        m.serialize_entry("id", self.0)?;
        m.serialize_entry("result", &self.1)?;
        m.end()
    }
}

/// `{"jsonrpc":"2.0","id":…,"error":…}` (`id` null when unknown).
pub(crate) struct WError<'a, T>(pub(crate) Option<&'a JsonRpcId>, pub(crate) T);

impl<T: Serialize> Serialize for WError<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("jsonrpc", "2.0")?;
        m.serialize_entry("id", &self.0.unwrap_or(&JsonRpcId::Null))?;
        m.serialize_entry("error", &self.1)?;
        m.end()
    }
}
