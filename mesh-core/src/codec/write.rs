//! The reference writers (tests only): the model into each dialect's canonical camelCase
//! JSON, built as a `serde_json::Value`. This was the production writer before the typed
//! one ([`super::wire`]); the property tests check that both write the same members.
//!
//! 1.0 is written as ProtoJSON (the `a2a-lf` serializers). 0.1 and 0.3 are written with
//! their tags, spellings and shapes; what they have no field for goes into the object's
//! `metadata._mesh` (see [`crate::model::MESH_KEY`]) and is restored by the readers.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::dialect::Dialect;
use crate::model::{
    Artifact, AuthenticationInfo, MESH_KEY, Message, Metadata, Part, PartContent, Role, Task,
    TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskState, TaskStatus,
    TaskStatusUpdateEvent, is_final_state,
};
use crate::rpc::{Call, Reply};

/// Serializes a model value (infallible for these types; `null` defensively).
pub(crate) fn ser<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Builds the metadata to write: the object's metadata plus the stashed entries under `_mesh`
/// (merged into an existing `_mesh` object). `None` when both are empty.
fn with_mesh(meta: &Option<Metadata>, stash: Map<String, Value>) -> Option<Value> {
    let mut out: Map<String, Value> = meta
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if !stash.is_empty() {
        match out.get_mut(MESH_KEY) {
            Some(Value::Object(existing)) => existing.extend(stash),
            _ => {
                out.insert(MESH_KEY.into(), Value::Object(stash));
            }
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

fn put<T: Into<Value>>(obj: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        obj.insert(key.into(), v.into());
    }
}

/// Writes a role.
pub(crate) fn role(r: &Role, d: Dialect) -> Value {
    match d {
        Dialect::V1_0 => ser(r),
        _ => match r {
            Role::Agent => "agent".into(),
            _ => "user".into(),
        },
    }
}

/// Writes a task state (0.x: lowercase with dashes; `unknown` for unspecified).
pub(crate) fn state(s: &TaskState, d: Dialect) -> Value {
    if d == Dialect::V1_0 {
        return ser(s);
    }
    crate::model::state_name(s).into()
}

/// Writes a timestamp as RFC 3339 UTC (`Z`).
pub(crate) fn timestamp(t: &DateTime<Utc>) -> Value {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true).into()
}

/// Writes a part.
pub(crate) fn part(p: &Part, d: Dialect) -> Value {
    if d == Dialect::V1_0 {
        let mut v = ser(p);
        // a2a-lf drops empty metadata; keep non-empty metadata only, as it does.
        if let Value::Object(o) = &mut v
            && o.get("metadata")
                .is_some_and(|m| m.as_object().is_some_and(Map::is_empty))
        {
            o.remove("metadata");
        }
        return v;
    }
    let tag = if d == Dialect::V0_1 { "type" } else { "kind" };
    let mut obj = Map::new();
    let mut stash = Map::new();
    match &p.content {
        PartContent::Text(t) => {
            obj.insert(tag.into(), "text".into());
            obj.insert("text".into(), t.clone().into());
        }
        PartContent::Data(data) => {
            obj.insert(tag.into(), "data".into());
            obj.insert("data".into(), data.clone());
        }
        PartContent::Raw(_) | PartContent::Url(_) => {
            obj.insert(tag.into(), "file".into());
            let mut f = Map::new();
            put(&mut f, "name", p.filename.clone());
            put(&mut f, "mimeType", p.media_type.clone());
            match &p.content {
                PartContent::Raw(bytes) => {
                    f.insert("bytes".into(), STANDARD.encode(bytes).into());
                }
                PartContent::Url(u) => {
                    f.insert("uri".into(), u.clone().into());
                }
                _ => {}
            }
            obj.insert("file".into(), Value::Object(f));
        }
    }
    if matches!(p.content, PartContent::Text(_) | PartContent::Data(_)) {
        put(&mut stash, "filename", p.filename.clone());
        put(&mut stash, "mediaType", p.media_type.clone());
    }
    put(&mut obj, "metadata", with_mesh(&p.metadata, stash));
    Value::Object(obj)
}

fn parts(ps: &[Part], d: Dialect) -> Value {
    Value::Array(ps.iter().map(|p| part(p, d)).collect())
}

/// Writes a message (0.1: ids, extensions and references under `metadata._mesh`).
pub(crate) fn message(m: &Message, d: Dialect) -> Value {
    let mut obj = Map::new();
    match d {
        Dialect::V1_0 => {
            obj.insert("messageId".into(), m.message_id.clone().into());
            put(&mut obj, "contextId", m.context_id.clone());
            put(&mut obj, "taskId", m.task_id.clone());
            obj.insert("role".into(), role(&m.role, d));
            obj.insert("parts".into(), parts(&m.parts, d));
            put(&mut obj, "metadata", with_mesh(&m.metadata, Map::new()));
            put(&mut obj, "extensions", m.extensions.clone());
            put(&mut obj, "referenceTaskIds", m.reference_task_ids.clone());
        }
        Dialect::V0_3 => {
            obj.insert("kind".into(), "message".into());
            obj.insert("messageId".into(), m.message_id.clone().into());
            put(&mut obj, "contextId", m.context_id.clone());
            put(&mut obj, "taskId", m.task_id.clone());
            obj.insert("role".into(), role(&m.role, d));
            obj.insert("parts".into(), parts(&m.parts, d));
            put(&mut obj, "metadata", with_mesh(&m.metadata, Map::new()));
            put(&mut obj, "extensions", m.extensions.clone());
            put(&mut obj, "referenceTaskIds", m.reference_task_ids.clone());
        }
        Dialect::V0_1 => {
            obj.insert("role".into(), role(&m.role, d));
            obj.insert("parts".into(), parts(&m.parts, d));
            let mut stash = Map::new();
            stash.insert("messageId".into(), m.message_id.clone().into());
            put(&mut stash, "contextId", m.context_id.clone());
            put(&mut stash, "taskId", m.task_id.clone());
            put(&mut stash, "extensions", m.extensions.clone());
            put(&mut stash, "referenceTaskIds", m.reference_task_ids.clone());
            put(&mut obj, "metadata", with_mesh(&m.metadata, stash));
        }
    }
    Value::Object(obj)
}

/// Writes a task status.
pub(crate) fn status(s: &TaskStatus, d: Dialect) -> Value {
    let mut obj = Map::new();
    obj.insert("state".into(), state(&s.state, d));
    put(
        &mut obj,
        "message",
        s.message.as_ref().map(|m| message(m, d)),
    );
    put(&mut obj, "timestamp", s.timestamp.as_ref().map(timestamp));
    Value::Object(obj)
}

/// The 0.1 `index` implied by an artifact id of the form `artifact-{n}`.
fn implied_index(id: &str) -> Option<u64> {
    let n = id.strip_prefix("artifact-")?;
    let i: u64 = n.parse().ok()?;
    (i.to_string() == n).then_some(i)
}

/// Writes an artifact; `chunk` = 0.1 (append, lastChunk) for artifact-update events.
pub(crate) fn artifact(
    a: &Artifact,
    d: Dialect,
    position: usize,
    chunk: Option<(Option<bool>, Option<bool>)>,
) -> Value {
    let mut obj = Map::new();
    let mut stash = Map::new();
    if d == Dialect::V0_1 {
        match implied_index(&a.artifact_id) {
            Some(i) => {
                obj.insert("index".into(), i.into());
            }
            None => {
                obj.insert("index".into(), (position as u64).into());
                stash.insert("artifactId".into(), a.artifact_id.clone().into());
            }
        }
        put(&mut stash, "extensions", a.extensions.clone());
    } else {
        obj.insert("artifactId".into(), a.artifact_id.clone().into());
    }
    put(&mut obj, "name", a.name.clone());
    put(&mut obj, "description", a.description.clone());
    obj.insert("parts".into(), parts(&a.parts, d));
    put(&mut obj, "metadata", with_mesh(&a.metadata, stash));
    if d != Dialect::V0_1 {
        put(&mut obj, "extensions", a.extensions.clone());
    }
    if let Some((append, last)) = chunk {
        put(&mut obj, "append", append);
        put(&mut obj, "lastChunk", last);
    }
    Value::Object(obj)
}

/// Writes a task.
pub(crate) fn task(t: &Task, d: Dialect) -> Value {
    let mut obj = Map::new();
    if d == Dialect::V0_3 {
        obj.insert("kind".into(), "task".into());
    }
    obj.insert("id".into(), t.id.clone().into());
    match d {
        Dialect::V0_1 => {
            if !t.context_id.is_empty() {
                obj.insert("sessionId".into(), t.context_id.clone().into());
            }
        }
        _ => {
            obj.insert("contextId".into(), t.context_id.clone().into());
        }
    }
    obj.insert("status".into(), status(&t.status, d));
    if let Some(arts) = &t.artifacts {
        let list = arts
            .iter()
            .enumerate()
            .map(|(i, a)| artifact(a, d, i, None))
            .collect();
        obj.insert("artifacts".into(), Value::Array(list));
    }
    if let Some(h) = &t.history {
        obj.insert(
            "history".into(),
            Value::Array(h.iter().map(|m| message(m, d)).collect()),
        );
    }
    put(&mut obj, "metadata", with_mesh(&t.metadata, Map::new()));
    Value::Object(obj)
}

/// Writes a status-update event (0.x `final`: `metadata._mesh.final` if set, else implied
/// by the state).
pub(crate) fn status_event(e: &TaskStatusUpdateEvent, d: Dialect) -> Value {
    let mut obj = Map::new();
    if d == Dialect::V1_0 {
        obj.insert("taskId".into(), e.task_id.clone().into());
        obj.insert("contextId".into(), e.context_id.clone().into());
        obj.insert("status".into(), status(&e.status, d));
        put(&mut obj, "metadata", with_mesh(&e.metadata, Map::new()));
        return Value::Object(obj);
    }
    let mut meta = e.metadata.clone();
    let mut mesh = super::read::take_mesh(&mut meta);
    let fin = match mesh.remove("final") {
        Some(Value::Bool(b)) => b,
        _ => is_final_state(&e.status.state),
    };
    if d == Dialect::V0_3 {
        obj.insert("kind".into(), "status-update".into());
        obj.insert("taskId".into(), e.task_id.clone().into());
        obj.insert("contextId".into(), e.context_id.clone().into());
    } else {
        obj.insert("id".into(), e.task_id.clone().into());
        if !e.context_id.is_empty() {
            mesh.insert("contextId".into(), e.context_id.clone().into());
        }
    }
    obj.insert("status".into(), status(&e.status, d));
    obj.insert("final".into(), fin.into());
    put(&mut obj, "metadata", with_mesh(&meta, mesh));
    Value::Object(obj)
}

/// Writes an artifact-update event (0.1: append/lastChunk inside the artifact).
pub(crate) fn artifact_event(e: &TaskArtifactUpdateEvent, d: Dialect) -> Value {
    let mut obj = Map::new();
    match d {
        Dialect::V0_1 => {
            obj.insert("id".into(), e.task_id.clone().into());
            obj.insert(
                "artifact".into(),
                artifact(&e.artifact, d, 0, Some((e.append, e.last_chunk))),
            );
            let mut stash = Map::new();
            if !e.context_id.is_empty() {
                stash.insert("contextId".into(), e.context_id.clone().into());
            }
            put(&mut obj, "metadata", with_mesh(&e.metadata, stash));
        }
        _ => {
            if d == Dialect::V0_3 {
                obj.insert("kind".into(), "artifact-update".into());
            }
            obj.insert("taskId".into(), e.task_id.clone().into());
            obj.insert("contextId".into(), e.context_id.clone().into());
            obj.insert("artifact".into(), artifact(&e.artifact, d, 0, None));
            put(&mut obj, "append", e.append);
            put(&mut obj, "lastChunk", e.last_chunk);
            put(&mut obj, "metadata", with_mesh(&e.metadata, Map::new()));
        }
    }
    Value::Object(obj)
}

/// Writes push-config authentication.
pub(crate) fn auth(a: &AuthenticationInfo, d: Dialect) -> Value {
    let mut obj = Map::new();
    if d == Dialect::V1_0 {
        obj.insert("scheme".into(), a.scheme.clone().into());
    } else {
        obj.insert("schemes".into(), json!([a.scheme]));
    }
    put(&mut obj, "credentials", a.credentials.clone());
    Value::Object(obj)
}

/// Writes the inner push config (0.x `PushNotificationConfig`: no task id).
pub(crate) fn push_config_inner(c: &TaskPushNotificationConfig, d: Dialect) -> Value {
    let mut obj = Map::new();
    put(&mut obj, "id", c.id.clone());
    obj.insert("url".into(), c.url.clone().into());
    put(&mut obj, "token", c.token.clone());
    put(
        &mut obj,
        "authentication",
        c.authentication.as_ref().map(|a| auth(a, d)),
    );
    Value::Object(obj)
}

/// Writes a push config: 1.0 flat, 0.3 `{taskId, pushNotificationConfig}`, 0.1
/// `{id, pushNotificationConfig}`. The tenant is written as an extra member in 0.x.
pub(crate) fn push_config(c: &TaskPushNotificationConfig, d: Dialect) -> Value {
    match d {
        Dialect::V1_0 => {
            let mut obj = Map::new();
            put(&mut obj, "tenant", c.tenant.clone());
            put(&mut obj, "id", c.id.clone());
            if !c.task_id.is_empty() {
                obj.insert("taskId".into(), c.task_id.clone().into());
            }
            obj.insert("url".into(), c.url.clone().into());
            put(&mut obj, "token", c.token.clone());
            put(
                &mut obj,
                "authentication",
                c.authentication.as_ref().map(|a| auth(a, d)),
            );
            Value::Object(obj)
        }
        _ => {
            let mut obj = Map::new();
            let key = if d == Dialect::V0_3 { "taskId" } else { "id" };
            obj.insert(key.into(), c.task_id.clone().into());
            obj.insert("pushNotificationConfig".into(), push_config_inner(c, d));
            put(&mut obj, "tenant", c.tenant.clone());
            Value::Object(obj)
        }
    }
}

/// The JSON of a reply (a response's `result`) in `dialect`.
pub(crate) fn write_reply(d: Dialect, reply: &Reply) -> Value {
    let wrap = |key: &str, v: Value| {
        if d == Dialect::V1_0 {
            let mut o = Map::new();
            o.insert(key.into(), v);
            Value::Object(o)
        } else {
            v
        }
    };
    match reply {
        Reply::Task(t) => wrap("task", task(t, d)),
        Reply::Message(m) => wrap("message", message(m, d)),
        Reply::StatusUpdate(e) => wrap("statusUpdate", status_event(e, d)),
        Reply::ArtifactUpdate(e) => wrap("artifactUpdate", artifact_event(e, d)),
        Reply::Tasks(l) => {
            let mut o = Map::new();
            o.insert(
                "tasks".into(),
                Value::Array(l.tasks.iter().map(|t| task(t, d)).collect()),
            );
            o.insert("nextPageToken".into(), l.next_page_token.clone().into());
            o.insert("pageSize".into(), l.page_size.into());
            o.insert("totalSize".into(), l.total_size.into());
            Value::Object(o)
        }
        Reply::PushConfig(c) => push_config(c, d),
        Reply::PushConfigs(l) => {
            let list: Vec<Value> = l.configs.iter().map(|c| push_config(c, d)).collect();
            if d == Dialect::V1_0 {
                let mut o = Map::new();
                o.insert("configs".into(), Value::Array(list));
                if let Some(t) = &l.next_page_token {
                    o.insert("nextPageToken".into(), t.clone().into());
                }
                Value::Object(o)
            } else {
                Value::Array(list)
            }
        }
        Reply::Card(c) => match d {
            Dialect::V1_0 => super::card::write_card_v1(c),
            _ => super::card::write_card_v03(c),
        },
        Reply::Empty => match d {
            Dialect::V1_0 => Value::Object(Map::new()),
            _ => Value::Null,
        },
    }
}

fn meta_value(m: &Option<crate::model::Metadata>) -> Option<Value> {
    m.as_ref()
        .map(|m| Value::Object(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
}

/// Writes the params of `call` in `dialect` (`None`: no params member).
pub(crate) fn write_call(call: &Call, d: Dialect) -> Option<Value> {
    let mut obj = Map::new();
    match call {
        Call::GetExtendedCard => return None,
        Call::Send(s) => {
            if d == Dialect::V0_1 {
                put(&mut obj, "id", s.message.task_id.clone());
                put(&mut obj, "sessionId", s.message.context_id.clone());
            }
            obj.insert("message".into(), message(&s.message, d));
            if let Some(c) = &s.configuration {
                let mut co = Map::new();
                put(
                    &mut co,
                    "acceptedOutputModes",
                    c.accepted_output_modes.clone(),
                );
                put(&mut co, "historyLength", c.history_length);
                match d {
                    Dialect::V1_0 => {
                        put(&mut co, "returnImmediately", c.return_immediately);
                        put(
                            &mut co,
                            "taskPushNotificationConfig",
                            c.task_push_notification_config
                                .as_ref()
                                .map(|p| push_config(p, d)),
                        );
                    }
                    Dialect::V0_3 => {
                        put(&mut co, "blocking", c.return_immediately.map(|r| !r));
                        put(
                            &mut co,
                            "pushNotificationConfig",
                            c.task_push_notification_config
                                .as_ref()
                                .map(|p| push_config_inner(p, d)),
                        );
                    }
                    Dialect::V0_1 => {
                        put(&mut co, "returnImmediately", c.return_immediately);
                        put(
                            &mut co,
                            "pushNotification",
                            c.task_push_notification_config
                                .as_ref()
                                .map(|p| push_config_inner(p, d)),
                        );
                    }
                }
                if d == Dialect::V0_1 {
                    obj.extend(co);
                } else {
                    obj.insert("configuration".into(), Value::Object(co));
                }
            }
            put(&mut obj, "metadata", meta_value(&s.metadata));
            put(&mut obj, "tenant", s.tenant.clone());
        }
        Call::GetTask(g) => {
            obj.insert("id".into(), g.id.clone().into());
            put(&mut obj, "historyLength", g.history_length);
            put(&mut obj, "tenant", g.tenant.clone());
        }
        Call::ListTasks(l) => {
            put(&mut obj, "contextId", l.context_id.clone());
            put(&mut obj, "status", l.status.as_ref().map(|s| state(s, d)));
            put(&mut obj, "pageSize", l.page_size);
            put(&mut obj, "pageToken", l.page_token.clone());
            put(&mut obj, "historyLength", l.history_length);
            put(
                &mut obj,
                "statusTimestampAfter",
                l.status_timestamp_after.as_ref().map(timestamp),
            );
            put(&mut obj, "includeArtifacts", l.include_artifacts);
            put(&mut obj, "tenant", l.tenant.clone());
        }
        Call::CancelTask(c) => {
            obj.insert("id".into(), c.id.clone().into());
            put(&mut obj, "metadata", meta_value(&c.metadata));
            put(&mut obj, "tenant", c.tenant.clone());
        }
        Call::Subscribe(s) => {
            obj.insert("id".into(), s.id.clone().into());
            put(&mut obj, "tenant", s.tenant.clone());
        }
        Call::SetPushConfig(c) => return Some(push_config(c, d)),
        Call::GetPushConfig(g) => {
            write_task_and_config(&mut obj, d, &g.task_id, &g.id);
            put(&mut obj, "tenant", g.tenant.clone());
        }
        Call::DeletePushConfig(g) => {
            write_task_and_config(&mut obj, d, &g.task_id, &g.id);
            put(&mut obj, "tenant", g.tenant.clone());
        }
        Call::ListPushConfigs(l) => {
            let key = if d == Dialect::V1_0 { "taskId" } else { "id" };
            obj.insert(key.into(), l.task_id.clone().into());
            put(&mut obj, "pageSize", l.page_size);
            put(&mut obj, "pageToken", l.page_token.clone());
            put(&mut obj, "tenant", l.tenant.clone());
        }
    }
    Some(Value::Object(obj))
}

fn write_task_and_config(obj: &mut Map<String, Value>, d: Dialect, task_id: &str, id: &str) {
    if d == Dialect::V1_0 {
        obj.insert("taskId".into(), task_id.into());
        obj.insert("id".into(), id.into());
    } else {
        obj.insert("id".into(), task_id.into());
        if !id.is_empty() {
            obj.insert("pushNotificationConfigId".into(), id.into());
        }
    }
}
