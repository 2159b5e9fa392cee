//! The writer: the model written straight into JSON bytes, per dialect.
//!
//! Each writer takes a model value and its [`Dialect`] and writes the dialect's canonical
//! camelCase JSON with [`JsonOut`] (literal member names, no intermediate
//! `serde_json::Value`). 1.0 parts are the flat ProtoJSON parts `a2a-lf` writes; 1.0 roles
//! and states go through the `a2a-lf` serializers. 0.1 and 0.3 are written with their tags,
//! spellings and shapes; what they have no field for goes into the object's
//! `metadata._mesh` (see [`crate::model::MESH_KEY`]) and is restored by the readers.
//!
//! The golden files of `tests/fixtures/written/` pin its output member for member, and the
//! readers read back every model it writes (the round-trip tests). Only the rare cases that
//! merge entries into `metadata._mesh` build a small map; the agent card is written by
//! [`super::card`].

use serde::Serialize;
use serde_json::{Map, Value};

pub(crate) mod json;
pub(crate) mod size_hint;

use super::TaskPage;
use crate::dialect::{Dialect, Method, method_name};
use crate::jsonrpc::JsonRpcId;
use crate::meta::{MESH_FIELDS, MeshMeta};
use crate::model::{
    Artifact, AuthenticationInfo, MESH_KEY, Message, Metadata, Part, PartContent, Role, Task,
    TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskState, TaskStatus,
    TaskStatusUpdateEvent, is_final_state,
};
use crate::rpc::{Call, Reply, Request};
use json::{JsonOut, Obj};

/// Writes one document with `write`, into a buffer made for about `size_hint` bytes (see
/// [`size_hint`]; 0 for the writer's usual first buffer).
pub(crate) fn to_vec(size_hint: usize, write: impl FnOnce(&mut JsonOut)) -> Vec<u8> {
    let mut out = JsonOut::with_capacity(size_hint);
    write(&mut out);
    out.into_bytes()
}

/// How much of a task an answer shows: the last `history_tail` messages of its history (a
/// client's `historyLength`; `None`: all of it), and its artifacts or not (ListTasks'
/// `includeArtifacts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskView {
    /// How many of the latest messages of the history to show; `None`: all.
    pub history_tail: Option<usize>,
    /// Whether the artifacts are shown.
    pub artifacts: bool,
}

impl TaskView {
    /// The whole task.
    pub const WHOLE: TaskView = TaskView {
        history_tail: None,
        artifacts: true,
    };

    /// The task with at most `history_tail` of its latest messages (`None`: all).
    pub fn history(history_tail: Option<usize>) -> TaskView {
        TaskView {
            history_tail,
            artifacts: true,
        }
    }
}

impl Default for TaskView {
    fn default() -> TaskView {
        TaskView::WHOLE
    }
}

/// Metadata to write: the object's own map by reference, or (when entries are stashed
/// under `_mesh`) a merged copy.
enum MetaOut<'a> {
    Borrowed(&'a Metadata),
    Owned(Map<String, Value>),
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

/// Whether an object's own metadata holds a `_mesh` (which the writers merge with what they
/// put there, so that it cannot be written from a [`MeshMeta`]'s fields alone).
pub(crate) fn has_own_mesh(metadata: &Option<Metadata>) -> bool {
    metadata.as_ref().is_some_and(|m| m.contains_key(MESH_KEY))
}

/// Writes an object's own metadata with `mesh` as its `_mesh` (an object without one of its
/// own), or, without `mesh`, as [`metadata`] does.
fn own_metadata(o: &mut Obj<'_>, own: Option<&Metadata>, mesh: Option<&MeshMeta>) {
    match mesh {
        Some(mesh) => params_metadata(o, own, mesh),
        None => metadata(o, meta_out(own, Map::new())),
    }
}

/// Writes `metadata` (the object's own, or merged with a stash) unless there is none.
fn metadata(o: &mut Obj<'_>, meta: Option<MetaOut<'_>>) {
    match meta {
        Some(MetaOut::Borrowed(m)) => o.key("metadata").map(m),
        Some(MetaOut::Owned(m)) => o.key("metadata").map(&m),
        None => {}
    }
}

fn stash_opt<T: Clone + Into<Value>>(stash: &mut Map<String, Value>, key: &str, v: &Option<T>) {
    if let Some(v) = v {
        stash.insert(key.into(), v.clone().into());
    }
}

/// Writes an optional string member.
#[inline(always)]
fn opt_str(o: &mut Obj<'_>, key: &str, v: Option<&String>) {
    if let Some(v) = v {
        o.key(key).str(v);
    }
}

/// Writes an optional member through `serde_json` (numbers, booleans, string lists).
#[inline(always)]
fn opt_serde<T: Serialize>(o: &mut Obj<'_>, key: &str, v: Option<&T>) {
    if let Some(v) = v {
        o.key(key).serde(v);
    }
}

/// A role (0.x: `user`/`agent`; 1.0: `ROLE_*`).
fn role(out: &mut JsonOut, r: &Role, d: Dialect) {
    match (d, r) {
        (Dialect::V1_0, r) => out.serde(r),
        (_, Role::Agent) => out.raw("\"agent\""),
        _ => out.raw("\"user\""),
    }
}

/// A task state (0.x: lowercase with dashes, `unknown` for unspecified; 1.0: `TASK_STATE_*`).
pub(crate) fn state(out: &mut JsonOut, s: &TaskState, d: Dialect) {
    if d == Dialect::V1_0 {
        out.serde(s);
    } else {
        out.str(crate::model::state_name(s));
    }
}

/// A 0.x `file` object.
fn file(out: &mut JsonOut, p: &Part) {
    let mut o = out.obj();
    opt_str(&mut o, "name", p.filename.as_ref());
    opt_str(&mut o, "mimeType", p.media_type.as_ref());
    match &p.content {
        PartContent::Raw(bytes) => o.key("bytes").base64(bytes),
        PartContent::Url(u) => o.key("uri").str(u),
        _ => {}
    }
    o.end();
}

/// A part.
pub(crate) fn part(out: &mut JsonOut, p: &Part, d: Dialect) {
    let mut o = out.obj();
    if d == Dialect::V1_0 {
        // The flat ProtoJSON part, as a2a-lf writes it (empty metadata dropped).
        match &p.content {
            PartContent::Text(t) => o.key("text").str(t),
            PartContent::Raw(r) => o.key("raw").base64(r),
            PartContent::Url(u) => o.key("url").str(u),
            PartContent::Data(data) => o.key("data").value(data),
        }
        opt_str(&mut o, "filename", p.filename.as_ref());
        opt_str(&mut o, "mediaType", p.media_type.as_ref());
        metadata(&mut o, meta_out(p.metadata.as_ref(), Map::new()));
        return o.end();
    }
    let tag = if d == Dialect::V0_1 { "type" } else { "kind" };
    let mut stash = Map::new();
    match &p.content {
        PartContent::Text(t) => {
            o.key(tag).raw("\"text\"");
            o.key("text").str(t);
        }
        PartContent::Data(data) => {
            o.key(tag).raw("\"data\"");
            o.key("data").value(data);
        }
        PartContent::Raw(_) | PartContent::Url(_) => {
            o.key(tag).raw("\"file\"");
            file(o.key("file"), p);
        }
    }
    if matches!(p.content, PartContent::Text(_) | PartContent::Data(_)) {
        stash_opt(&mut stash, "filename", &p.filename);
        stash_opt(&mut stash, "mediaType", &p.media_type);
    }
    metadata(&mut o, meta_out(p.metadata.as_ref(), stash));
    o.end();
}

fn parts(out: &mut JsonOut, ps: &[Part], d: Dialect) {
    out.array(ps, |out, p| part(out, p, d));
}

/// A message (0.1: ids, extensions and references under `metadata._mesh`).
pub(crate) fn message(out: &mut JsonOut, msg: &Message, d: Dialect) {
    let mut o = out.obj();
    if d == Dialect::V0_1 {
        role(o.key("role"), &msg.role, d);
        parts(o.key("parts"), &msg.parts, d);
        let mut stash = Map::new();
        stash.insert("messageId".into(), msg.message_id.clone().into());
        stash_opt(&mut stash, "contextId", &msg.context_id);
        stash_opt(&mut stash, "taskId", &msg.task_id);
        stash_opt(&mut stash, "extensions", &msg.extensions);
        stash_opt(&mut stash, "referenceTaskIds", &msg.reference_task_ids);
        metadata(&mut o, meta_out(msg.metadata.as_ref(), stash));
        return o.end();
    }
    if d == Dialect::V0_3 {
        o.key("kind").raw("\"message\"");
    }
    o.key("messageId").str(&msg.message_id);
    opt_str(&mut o, "contextId", msg.context_id.as_ref());
    opt_str(&mut o, "taskId", msg.task_id.as_ref());
    role(o.key("role"), &msg.role, d);
    parts(o.key("parts"), &msg.parts, d);
    metadata(&mut o, meta_out(msg.metadata.as_ref(), Map::new()));
    opt_serde(&mut o, "extensions", msg.extensions.as_ref());
    opt_serde(&mut o, "referenceTaskIds", msg.reference_task_ids.as_ref());
    o.end();
}

/// A task status.
fn status(out: &mut JsonOut, st: &TaskStatus, d: Dialect) {
    let mut o = out.obj();
    state(o.key("state"), &st.state, d);
    if let Some(m) = &st.message {
        message(o.key("message"), m, d);
    }
    if let Some(t) = &st.timestamp {
        o.key("timestamp").timestamp(t);
    }
    o.end();
}

/// The 0.1 `index` implied by an artifact id of the form `artifact-{n}`.
fn implied_index(id: &str) -> Option<u64> {
    let n = id.strip_prefix("artifact-")?;
    let i: u64 = n.parse().ok()?;
    (i.to_string() == n).then_some(i)
}

/// An artifact at `position` in its list; `chunk` = 0.1 (append, lastChunk) for
/// artifact-update events.
fn artifact(
    out: &mut JsonOut,
    a: &Artifact,
    d: Dialect,
    position: usize,
    chunk: Option<(Option<bool>, Option<bool>)>,
) {
    let mut o = out.obj();
    let mut stash = Map::new();
    if d == Dialect::V0_1 {
        match implied_index(&a.artifact_id) {
            Some(i) => o.key("index").serde(&i),
            None => {
                o.key("index").serde(&(position as u64));
                stash.insert("artifactId".into(), a.artifact_id.clone().into());
            }
        }
        stash_opt(&mut stash, "extensions", &a.extensions);
    } else {
        o.key("artifactId").str(&a.artifact_id);
    }
    opt_str(&mut o, "name", a.name.as_ref());
    opt_str(&mut o, "description", a.description.as_ref());
    parts(o.key("parts"), &a.parts, d);
    metadata(&mut o, meta_out(a.metadata.as_ref(), stash));
    if d != Dialect::V0_1 {
        opt_serde(&mut o, "extensions", a.extensions.as_ref());
    }
    if let Some((append, last)) = chunk {
        opt_serde(&mut o, "append", append.as_ref());
        opt_serde(&mut o, "lastChunk", last.as_ref());
    }
    o.end();
}

/// A task as `view` shows it.
pub(crate) fn task(out: &mut JsonOut, t: &Task, d: Dialect, view: TaskView) {
    task_with(out, t, d, view, None);
}

/// [`task`], with `mesh` (when given) written as its `metadata._mesh` next to the task's own
/// entries, in place of any `_mesh` of its own.
fn task_with(out: &mut JsonOut, t: &Task, d: Dialect, view: TaskView, mesh: Option<&MeshMeta>) {
    let mut o = out.obj();
    if d == Dialect::V0_3 {
        o.key("kind").raw("\"task\"");
    }
    o.key("id").str(&t.id);
    match d {
        Dialect::V0_1 => {
            if !t.context_id.is_empty() {
                o.key("sessionId").str(&t.context_id);
            }
        }
        _ => o.key("contextId").str(&t.context_id),
    }
    status(o.key("status"), &t.status, d);
    if let Some(artifacts) = t.artifacts.as_ref().filter(|_| view.artifacts) {
        let mut position = 0;
        o.key("artifacts").array(artifacts, |out, a| {
            artifact(out, a, d, position, None);
            position += 1;
        });
    }
    if let Some(h) = &t.history {
        let h = match view.history_tail {
            Some(n) if h.len() > n => &h[h.len() - n..],
            _ => h,
        };
        o.key("history").array(h, |out, m| message(out, m, d));
    }
    own_metadata(&mut o, t.metadata.as_ref(), mesh);
    o.end();
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
pub(crate) fn status_event(out: &mut JsonOut, e: &TaskStatusUpdateEvent, d: Dialect) {
    status_event_with(out, e, d, None);
}

/// Whether [`event_with_mesh`] writes `r` in `d`: a status or artifact event, 0.3 or 1.0,
/// whose metadata holds no `_mesh` of its own (which the 0.x writers merge with a stash).
pub(crate) fn event_takes_mesh(r: &Reply, d: Dialect) -> bool {
    d != Dialect::V0_1
        && match r {
            Reply::StatusUpdate(e) => !has_own_mesh(&e.metadata),
            Reply::ArtifactUpdate(e) => !has_own_mesh(&e.metadata),
            _ => false,
        }
}

/// A stream event of an agent ([`event_takes_mesh`]) with `mesh` written as its
/// `metadata._mesh` (wrapped in 1.0).
pub(crate) fn event_with_mesh(out: &mut JsonOut, r: &Reply, d: Dialect, mesh: &MeshMeta) {
    let v1 = d == Dialect::V1_0;
    match r {
        Reply::StatusUpdate(e) if v1 => wrap(out, "statusUpdate", |out| {
            status_event_with(out, e, d, Some(mesh))
        }),
        Reply::StatusUpdate(e) => status_event_with(out, e, d, Some(mesh)),
        Reply::ArtifactUpdate(e) if v1 => wrap(out, "artifactUpdate", |out| {
            artifact_event_with(out, e, d, Some(mesh))
        }),
        Reply::ArtifactUpdate(e) => artifact_event_with(out, e, d, Some(mesh)),
        _ => reply(out, r, d, false),
    }
}

/// [`status_event`]; with `mesh` (0.3 and 1.0, an event without a `_mesh` of its own),
/// that written as its `metadata._mesh`.
fn status_event_with(
    out: &mut JsonOut,
    e: &TaskStatusUpdateEvent,
    d: Dialect,
    mesh: Option<&MeshMeta>,
) {
    let mut o = out.obj();
    if d == Dialect::V1_0 {
        o.key("taskId").str(&e.task_id);
        o.key("contextId").str(&e.context_id);
        status(o.key("status"), &e.status, d);
        own_metadata(&mut o, e.metadata.as_ref(), mesh);
        return o.end();
    }
    // With `mesh` (0.3, no `_mesh` of its own): no stash, `final` as the state implies.
    let (fin, meta) = match mesh {
        Some(_) => (is_final_state(&e.status.state), None),
        None => {
            let ctx =
                (d == Dialect::V0_1 && !e.context_id.is_empty()).then_some(e.context_id.as_str());
            event_meta(e.metadata.as_ref(), &e.status.state, ctx)
        }
    };
    if d == Dialect::V0_3 {
        o.key("kind").raw("\"status-update\"");
        o.key("taskId").str(&e.task_id);
        o.key("contextId").str(&e.context_id);
    } else {
        o.key("id").str(&e.task_id);
    }
    status(o.key("status"), &e.status, d);
    o.key("final").bool(fin);
    match mesh {
        Some(mesh) => params_metadata(&mut o, e.metadata.as_ref(), mesh),
        None => metadata(&mut o, meta),
    }
    o.end();
}

/// An artifact-update event (0.1: append/lastChunk inside the artifact).
pub(crate) fn artifact_event(out: &mut JsonOut, e: &TaskArtifactUpdateEvent, d: Dialect) {
    artifact_event_with(out, e, d, None);
}

/// [`artifact_event`]; with `mesh` (0.3 and 1.0, an event without a `_mesh` of its own),
/// that written as its `metadata._mesh`.
fn artifact_event_with(
    out: &mut JsonOut,
    e: &TaskArtifactUpdateEvent,
    d: Dialect,
    mesh: Option<&MeshMeta>,
) {
    let mut o = out.obj();
    if d == Dialect::V0_1 {
        o.key("id").str(&e.task_id);
        artifact(
            o.key("artifact"),
            &e.artifact,
            d,
            0,
            Some((e.append, e.last_chunk)),
        );
        let mut stash = Map::new();
        if !e.context_id.is_empty() {
            stash.insert("contextId".into(), e.context_id.clone().into());
        }
        metadata(&mut o, meta_out(e.metadata.as_ref(), stash));
        return o.end();
    }
    if d == Dialect::V0_3 {
        o.key("kind").raw("\"artifact-update\"");
    }
    o.key("taskId").str(&e.task_id);
    o.key("contextId").str(&e.context_id);
    artifact(o.key("artifact"), &e.artifact, d, 0, None);
    opt_serde(&mut o, "append", e.append.as_ref());
    opt_serde(&mut o, "lastChunk", e.last_chunk.as_ref());
    own_metadata(&mut o, e.metadata.as_ref(), mesh);
    o.end();
}

/// Push-config authentication (0.x: `schemes: [scheme]`).
fn auth(out: &mut JsonOut, a: &AuthenticationInfo, d: Dialect) {
    let mut o = out.obj();
    if d == Dialect::V1_0 {
        o.key("scheme").str(&a.scheme);
    } else {
        o.key("schemes")
            .array(std::slice::from_ref(&a.scheme), |out, s| out.str(s));
    }
    opt_str(&mut o, "credentials", a.credentials.as_ref());
    o.end();
}

/// The inner push config (0.x `PushNotificationConfig`: no task id).
fn push_inner(out: &mut JsonOut, c: &TaskPushNotificationConfig, d: Dialect) {
    let mut o = out.obj();
    opt_str(&mut o, "id", c.id.as_ref());
    o.key("url").str(&c.url);
    opt_str(&mut o, "token", c.token.as_ref());
    if let Some(a) = &c.authentication {
        auth(o.key("authentication"), a, d);
    }
    o.end();
}

/// A push config: 1.0 flat, 0.3 `{taskId, pushNotificationConfig}`, 0.1
/// `{id, pushNotificationConfig}`. The tenant is written as an extra member in 0.x.
pub(crate) fn push_config(out: &mut JsonOut, c: &TaskPushNotificationConfig, d: Dialect) {
    let mut o = out.obj();
    if d == Dialect::V1_0 {
        opt_str(&mut o, "tenant", c.tenant.as_ref());
        opt_str(&mut o, "id", c.id.as_ref());
        if !c.task_id.is_empty() {
            o.key("taskId").str(&c.task_id);
        }
        o.key("url").str(&c.url);
        opt_str(&mut o, "token", c.token.as_ref());
        if let Some(a) = &c.authentication {
            auth(o.key("authentication"), a, d);
        }
    } else {
        let key = if d == Dialect::V0_3 { "taskId" } else { "id" };
        o.key(key).str(&c.task_id);
        push_inner(o.key("pushNotificationConfig"), c, d);
        opt_str(&mut o, "tenant", c.tenant.as_ref());
    }
    o.end();
}

/// `{key: …}` with the value written by `write` (1.0 wrapped results).
fn wrap(out: &mut JsonOut, key: &str, write: impl FnOnce(&mut JsonOut)) {
    let mut o = out.obj();
    write(o.key(key));
    o.end();
}

/// A reply (a response's `result`); `bare_task`: a 1.0 task is not wrapped (GetTask,
/// CancelTask).
fn reply(out: &mut JsonOut, r: &Reply, d: Dialect, bare_task: bool) {
    let v1 = d == Dialect::V1_0;
    match r {
        Reply::Task(t) if v1 && !bare_task => {
            wrap(out, "task", |out| task(out, t, d, TaskView::WHOLE))
        }
        Reply::Task(t) => task(out, t, d, TaskView::WHOLE),
        Reply::Message(x) if v1 => wrap(out, "message", |out| message(out, x, d)),
        Reply::Message(x) => message(out, x, d),
        Reply::StatusUpdate(e) if v1 => wrap(out, "statusUpdate", |out| status_event(out, e, d)),
        Reply::StatusUpdate(e) => status_event(out, e, d),
        Reply::ArtifactUpdate(e) if v1 => {
            wrap(out, "artifactUpdate", |out| artifact_event(out, e, d))
        }
        Reply::ArtifactUpdate(e) => artifact_event(out, e, d),
        Reply::Tasks(l) => task_page(
            out,
            &TaskPage {
                tasks: l.tasks.iter().collect(),
                next_page_token: &l.next_page_token,
                page_size: l.page_size,
                total_size: l.total_size,
                view: TaskView::WHOLE,
            },
            d,
        ),
        Reply::PushConfig(c) => push_config(out, c, d),
        Reply::PushConfigs(l) => {
            let list = |out: &mut JsonOut| out.array(&l.configs, |out, c| push_config(out, c, d));
            if v1 {
                let mut o = out.obj();
                list(o.key("configs"));
                opt_str(&mut o, "nextPageToken", l.next_page_token.as_ref());
                o.end();
            } else {
                list(out);
            }
        }
        Reply::Card(c) => match d {
            Dialect::V1_0 => out.serde(&super::card::write_card_v1(c)),
            _ => out.serde(&super::card::write_card_v03(c)),
        },
        Reply::Empty if v1 => out.raw("{}"),
        Reply::Empty => out.null(),
    }
}

/// The params of a send's configuration, written inside `configuration` (or, in 0.1,
/// flattened into the params object by [`call`]).
fn send_config(o: &mut Obj<'_>, c: &crate::model::SendMessageConfiguration, d: Dialect) {
    opt_serde(o, "acceptedOutputModes", c.accepted_output_modes.as_ref());
    opt_serde(o, "historyLength", c.history_length.as_ref());
    let push = c.task_push_notification_config.as_ref();
    match d {
        Dialect::V1_0 => {
            opt_serde(o, "returnImmediately", c.return_immediately.as_ref());
            if let Some(p) = push {
                push_config(o.key("taskPushNotificationConfig"), p, d);
            }
        }
        Dialect::V0_3 => {
            opt_serde(o, "blocking", c.return_immediately.map(|r| !r).as_ref());
            if let Some(p) = push {
                push_inner(o.key("pushNotificationConfig"), p, d);
            }
        }
        Dialect::V0_1 => {
            opt_serde(o, "returnImmediately", c.return_immediately.as_ref());
            if let Some(p) = push {
                push_inner(o.key("pushNotification"), p, d);
            }
        }
    }
}

fn task_and_config(o: &mut Obj<'_>, d: Dialect, task_id: &str, id: &str) {
    if d == Dialect::V1_0 {
        o.key("taskId").str(task_id);
        o.key("id").str(id);
    } else {
        o.key("id").str(task_id);
        if !id.is_empty() {
            o.key("pushNotificationConfigId").str(id);
        }
    }
}

/// The metadata of request params: the params' own entries (a `_mesh` among them left out)
/// and the request's envelope under `_mesh`, when there is one.
fn params_metadata(o: &mut Obj<'_>, own: Option<&Metadata>, mesh: &MeshMeta) {
    let has_mesh = !mesh.is_empty();
    if own.is_none() && !has_mesh {
        return;
    }
    let mut m = o.key("metadata").obj();
    for (key, value) in own.into_iter().flatten() {
        if key != MESH_KEY {
            m.entry(key).value(value);
        }
    }
    if has_mesh {
        mesh_meta(m.key("_mesh"), mesh);
    }
    m.end();
}

/// `_mesh`: the fields that are set, then the other entries.
fn mesh_meta(out: &mut JsonOut, m: &MeshMeta) {
    let mut o = out.obj();
    opt_str(&mut o, "replyTo", m.reply_to.as_ref());
    opt_str(&mut o, "requestId", m.request_id.as_ref());
    opt_serde(&mut o, "deadline", m.deadline.as_ref());
    if let Some(caller) = &m.caller {
        let mut c = o.key("caller").obj();
        c.key("kind").str(caller.kind.as_str());
        c.key("id").str(&caller.id);
        opt_str(&mut c, "principal", caller.principal.as_ref());
        c.end();
    }
    opt_serde(&mut o, "depth", m.depth.as_ref());
    opt_str(&mut o, "traceparent", m.traceparent.as_ref());
    opt_str(&mut o, "taskId", m.task_id.as_ref());
    if let Some(t) = &m.task {
        task(o.key("task"), t, Dialect::V0_3, TaskView::WHOLE);
    }
    opt_str(&mut o, "instance", m.instance.as_ref());
    opt_serde(&mut o, "seq", m.seq.as_ref());
    opt_serde(&mut o, "window", m.window.as_ref());
    opt_serde(&mut o, "keepsHistory", m.keeps_history.as_ref());
    opt_serde(
        &mut o,
        "streamAfterProgress",
        m.stream_after_progress.as_ref(),
    );
    opt_serde(&mut o, "historyFrom", m.history_from.as_ref());
    // An entry of `other` named like a field is left out: the field wins, as in
    // `MeshMeta::into_object`.
    for (key, value) in &m.other {
        if !MESH_FIELDS.contains(&key.as_str()) {
            o.entry(key).value(value);
        }
    }
    o.end();
}

/// The params of a call in a dialect (the caller leaves them out for
/// [`Call::GetExtendedCard`]).
fn call(out: &mut JsonOut, c: &Call, d: Dialect, mesh: &MeshMeta) {
    if let Call::SetPushConfig(c) = c {
        return push_config(out, c, d);
    }
    let mut o = out.obj();
    match c {
        Call::GetExtendedCard | Call::SetPushConfig(_) => {}
        Call::Send(x) => {
            if d == Dialect::V0_1 {
                opt_str(&mut o, "id", x.message.task_id.as_ref());
                opt_str(&mut o, "sessionId", x.message.context_id.as_ref());
            }
            message(o.key("message"), &x.message, d);
            if let Some(c) = &x.configuration {
                if d == Dialect::V0_1 {
                    send_config(&mut o, c, d);
                } else {
                    let mut inner = o.key("configuration").obj();
                    send_config(&mut inner, c, d);
                    inner.end();
                }
            }
            params_metadata(&mut o, x.metadata.as_ref(), mesh);
            opt_str(&mut o, "tenant", x.tenant.as_ref());
        }
        Call::GetTask(g) => {
            o.key("id").str(&g.id);
            opt_serde(&mut o, "historyLength", g.history_length.as_ref());
            opt_str(&mut o, "tenant", g.tenant.as_ref());
        }
        Call::ListTasks(l) => {
            opt_str(&mut o, "contextId", l.context_id.as_ref());
            if let Some(s) = &l.status {
                state(o.key("status"), s, d);
            }
            opt_serde(&mut o, "pageSize", l.page_size.as_ref());
            opt_str(&mut o, "pageToken", l.page_token.as_ref());
            opt_serde(&mut o, "historyLength", l.history_length.as_ref());
            if let Some(t) = &l.status_timestamp_after {
                o.key("statusTimestampAfter").timestamp(t);
            }
            opt_serde(&mut o, "includeArtifacts", l.include_artifacts.as_ref());
            opt_str(&mut o, "tenant", l.tenant.as_ref());
        }
        Call::CancelTask(c) => {
            o.key("id").str(&c.id);
            params_metadata(&mut o, c.metadata.as_ref(), mesh);
            opt_str(&mut o, "tenant", c.tenant.as_ref());
        }
        Call::Subscribe(x) => {
            o.key("id").str(&x.id);
            opt_str(&mut o, "tenant", x.tenant.as_ref());
        }
        Call::GetPushConfig(g) => {
            task_and_config(&mut o, d, &g.task_id, &g.id);
            opt_str(&mut o, "tenant", g.tenant.as_ref());
        }
        Call::DeletePushConfig(g) => {
            task_and_config(&mut o, d, &g.task_id, &g.id);
            opt_str(&mut o, "tenant", g.tenant.as_ref());
        }
        Call::ListPushConfigs(l) => {
            let key = if d == Dialect::V1_0 { "taskId" } else { "id" };
            o.key(key).str(&l.task_id);
            opt_serde(&mut o, "pageSize", l.page_size.as_ref());
            opt_str(&mut o, "pageToken", l.page_token.as_ref());
            opt_str(&mut o, "tenant", l.tenant.as_ref());
        }
    }
    o.end();
}

/// A JSON-RPC id.
fn id(out: &mut JsonOut, id: &JsonRpcId) {
    match id {
        JsonRpcId::String(s) => out.str(s),
        JsonRpcId::Number(n) => out.serde(n),
        JsonRpcId::Null => out.null(),
    }
}

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}` (no `id` for a notification, no
/// `params` for the extended-card call).
pub(crate) fn request(out: &mut JsonOut, r: &Request) {
    let mut o = out.obj();
    o.key("jsonrpc").raw("\"2.0\"");
    if let Some(rpc_id) = &r.id {
        id(o.key("id"), rpc_id);
    }
    o.key("method").str(method_name(r.method, r.dialect));
    if !matches!(r.call, Call::GetExtendedCard) {
        call(o.key("params"), &r.call, r.dialect, &r.mesh);
    }
    o.end();
}

/// The answer to `method` (`None`: a stream event or push body) in a dialect: 1.0
/// GetTask/CancelTask answer a bare task, everything else wraps a task or message.
pub(crate) fn reply_for(out: &mut JsonOut, method: Option<Method>, d: Dialect, r: &Reply) {
    let bare_task = d == Dialect::V1_0
        && matches!(method, Some(Method::GetTask | Method::CancelTask))
        && matches!(r, Reply::Task(_));
    reply(out, r, d, bare_task);
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` with the result written by `result`.
pub(crate) fn result(out: &mut JsonOut, rpc_id: &JsonRpcId, result: impl FnOnce(&mut JsonOut)) {
    let mut o = out.obj();
    o.key("jsonrpc").raw("\"2.0\"");
    id(o.key("id"), rpc_id);
    result(o.key("result"));
    o.end();
}

/// `{"jsonrpc":"2.0","id":…,"error":…}` (`id` null when unknown).
pub(crate) fn error(out: &mut JsonOut, rpc_id: Option<&JsonRpcId>, error: &Value) {
    let mut o = out.obj();
    o.key("jsonrpc").raw("\"2.0\"");
    id(o.key("id"), rpc_id.unwrap_or(&JsonRpcId::Null));
    o.key("error").serde(error);
    o.end();
}

/// The answer to `method` carrying a task: wrapped (`{"task": …}`) for a 1.0 SendMessage (and
/// a stream event), else bare.
pub(crate) fn task_answer(
    out: &mut JsonOut,
    method: Method,
    t: &Task,
    d: Dialect,
    view: TaskView,
    mesh: Option<&MeshMeta>,
) {
    if d == Dialect::V1_0 && matches!(method, Method::SendMessage | Method::SendStreamingMessage) {
        wrap(out, "task", |out| task_with(out, t, d, view, mesh));
    } else {
        task_with(out, t, d, view, mesh);
    }
}

/// A ListTasks result: the page's tasks as its view shows them, and the paging members.
pub(crate) fn task_page(out: &mut JsonOut, page: &TaskPage<'_>, d: Dialect) {
    let mut o = out.obj();
    o.key("tasks")
        .array(&page.tasks, |out, t| task(out, t, d, page.view));
    o.key("nextPageToken").str(page.next_page_token);
    o.key("pageSize").serde(&page.page_size);
    o.key("totalSize").serde(&page.total_size);
    o.end();
}
