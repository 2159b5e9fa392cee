//! The lenient reader: JSON of any dialect (and the seeds' variants) into the model. Its
//! parts: the shapes here, a request's params in [`params`], a whole request in [`request`],
//! a reply in [`reply`].
//!
//! Every reader accepts, in every dialect: camelCase and snake_case member names, parts
//! tagged `kind` or `type` or untagged, flat 1.0 parts (`raw`, `url`, `mediaType`), roles
//! `user`/`ROLE_USER`, states in any spelling (`input-required`, `input_required`,
//! `TASK_STATE_INPUT_REQUIRED`). Errors name the offending field by its JSON path.
//! Values are consumed (moved out of), never cloned.

pub(crate) mod params;
pub(crate) mod reply;
pub(crate) mod request;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::{Map, Value};

use crate::error::A2aError;
use crate::jsonrpc::json_type;
use crate::model::{
    Artifact, AuthenticationInfo, MESH_KEY, Message, Metadata, Part, PartContent, Role, Task,
    TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskState, TaskStatus,
    TaskStatusUpdateEvent, is_final_state,
};

/// Result of a reader; errors are `-32602` naming the field.
pub(crate) type R<T> = Result<T, A2aError>;

/// An object being read, with its JSON path for error messages.
pub(crate) struct Obj {
    map: Map<String, Value>,
    path: String,
}

impl Obj {
    /// Requires `v` to be an object.
    pub(crate) fn new(v: Value, path: &str) -> R<Obj> {
        match v {
            Value::Object(map) => Ok(Obj {
                map,
                path: path.to_string(),
            }),
            other => Err(A2aError::invalid_params_at(
                path,
                format!("must be an object; found {}", json_type(&other)),
            )),
        }
    }

    /// The remaining members (for readers that re-dispatch on shape).
    pub(crate) fn map_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.map
    }

    /// The path of member `name`.
    pub(crate) fn at(&self, name: &str) -> String {
        format!("{}.{name}", self.path)
    }

    /// Whether any of `names` is present (and not null).
    pub(crate) fn has(&self, names: &[&str]) -> bool {
        names
            .iter()
            .any(|n| self.map.get(*n).is_some_and(|v| !v.is_null()))
    }

    /// Removes every alias in `names`; returns the first non-null value and its name.
    pub(crate) fn take_named(&mut self, names: &[&'static str]) -> Option<(&'static str, Value)> {
        let mut found = None;
        for n in names {
            if let Some(v) = self.map.remove(*n)
                && found.is_none()
                && !v.is_null()
            {
                found = Some((*n, v));
            }
        }
        found
    }

    /// Removes every alias in `names`; returns the first non-null value.
    pub(crate) fn take(&mut self, names: &[&'static str]) -> Option<Value> {
        self.take_named(names).map(|(_, v)| v)
    }

    pub(crate) fn str_opt(&mut self, names: &[&'static str]) -> R<Option<String>> {
        match self.take_named(names) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((n, other)) => Err(A2aError::invalid_params_at(
                &self.at(n),
                format!("must be a string; found {}", json_type(&other)),
            )),
        }
    }

    pub(crate) fn str_req(&mut self, names: &[&'static str]) -> R<String> {
        let first = names.first().copied().unwrap_or("?");
        self.str_opt(names)?
            .ok_or_else(|| A2aError::invalid_params_at(&self.at(first), "missing"))
    }

    pub(crate) fn bool_opt(&mut self, names: &[&'static str]) -> R<Option<bool>> {
        match self.take_named(names) {
            None => Ok(None),
            Some((_, Value::Bool(b))) => Ok(Some(b)),
            Some((n, other)) => Err(A2aError::invalid_params_at(
                &self.at(n),
                format!("must be a boolean; found {}", json_type(&other)),
            )),
        }
    }

    pub(crate) fn i32_opt(&mut self, names: &[&'static str]) -> R<Option<i32>> {
        match self.take_named(names) {
            None => Ok(None),
            Some((n, Value::Number(num))) => num
                .as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| {
                    A2aError::invalid_params_at(&self.at(n), "must be a 32-bit integer")
                }),
            Some((n, other)) => Err(A2aError::invalid_params_at(
                &self.at(n),
                format!("must be an integer; found {}", json_type(&other)),
            )),
        }
    }

    pub(crate) fn strings_opt(&mut self, names: &[&'static str]) -> R<Option<Vec<String>>> {
        match self.take_named(names) {
            None => Ok(None),
            Some((n, Value::Array(items))) => {
                let base = self.at(n);
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) => Ok(s),
                        other => Err(A2aError::invalid_params_at(
                            &format!("{base}[{i}]"),
                            format!("must be a string; found {}", json_type(&other)),
                        )),
                    })
                    .collect::<R<Vec<_>>>()
                    .map(Some)
            }
            Some((n, other)) => Err(A2aError::invalid_params_at(
                &self.at(n),
                format!("must be an array of strings; found {}", json_type(&other)),
            )),
        }
    }

    /// Metadata kept verbatim (an empty object stays `Some(empty)`).
    pub(crate) fn metadata_verbatim(&mut self) -> R<Option<Metadata>> {
        match self.take_named(&["metadata"]) {
            None => Ok(None),
            Some((_, Value::Object(m))) => Ok(Some(m.into_iter().collect())),
            Some((n, other)) => Err(A2aError::invalid_params_at(
                &self.at(n),
                format!("must be an object; found {}", json_type(&other)),
            )),
        }
    }

    /// Object metadata: an empty object reads as absent.
    pub(crate) fn metadata(&mut self) -> R<Option<Metadata>> {
        Ok(self.metadata_verbatim()?.filter(|m| !m.is_empty()))
    }

    /// Checks an optional `kind`/`type` tag against the expected values.
    pub(crate) fn check_tag(&mut self, expected: &[&str]) -> R<()> {
        if let Some((n, v)) = self.take_named(&["kind", "type"]) {
            match v.as_str() {
                Some(s) if expected.contains(&s) => {}
                _ => {
                    return Err(A2aError::invalid_params_at(
                        &self.at(n),
                        format!("must be {}; found {v}", expected.join(" or ")),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Takes a required member.
    pub(crate) fn req(&mut self, names: &[&'static str]) -> R<(String, Value)> {
        match self.take_named(names) {
            Some((n, v)) => Ok((self.at(n), v)),
            None => Err(A2aError::invalid_params_at(
                &self.at(names.first().copied().unwrap_or("?")),
                "missing",
            )),
        }
    }

    /// Takes an optional member with its path.
    pub(crate) fn opt(&mut self, names: &[&'static str]) -> Option<(String, Value)> {
        self.take_named(names).map(|(n, v)| (self.at(n), v))
    }
}

/// Takes the reserved `_mesh` object out of `meta` (normalizing an emptied map to `None`).
pub(crate) fn take_mesh(meta: &mut Option<Metadata>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(m) = meta.as_mut()
        && matches!(m.get(MESH_KEY), Some(Value::Object(_)))
        && let Some(Value::Object(mesh)) = m.remove(MESH_KEY)
    {
        out = mesh;
    }
    if meta.as_ref().is_some_and(|m| m.is_empty()) {
        *meta = None;
    }
    out
}

/// Puts what a reader did not consume back under `_mesh`.
pub(crate) fn put_back_mesh(meta: &mut Option<Metadata>, rest: Map<String, Value>) {
    if !rest.is_empty() {
        meta.get_or_insert_with(Metadata::new)
            .insert(MESH_KEY.to_string(), Value::Object(rest));
    }
}

pub(crate) fn mesh_str(mesh: &mut Map<String, Value>, key: &str) -> Option<String> {
    match mesh.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            mesh.insert(key.to_string(), other);
            None
        }
        None => None,
    }
}

pub(crate) fn mesh_strings(mesh: &mut Map<String, Value>, key: &str) -> Option<Vec<String>> {
    let v = mesh.remove(key)?;
    match serde_json::from_value::<Vec<String>>(v.clone()) {
        Ok(list) => Some(list),
        Err(_) => {
            mesh.insert(key.to_string(), v);
            None
        }
    }
}

/// Reads a role (`user`, `agent`, `ROLE_USER`, `ROLE_AGENT`, any case).
pub(crate) fn read_role(v: Value, path: &str) -> R<Role> {
    let Value::String(s) = v else {
        return Err(A2aError::invalid_params_at(
            path,
            format!("must be a string; found {}", json_type(&v)),
        ));
    };
    match s.to_ascii_lowercase().as_str() {
        "user" | "role_user" => Ok(Role::User),
        "agent" | "role_agent" => Ok(Role::Agent),
        _ => Err(A2aError::invalid_params_at(
            path,
            format!("unknown role {s:?}; expected \"user\" or \"agent\""),
        )),
    }
}

/// Reads a task state in any spelling.
pub(crate) fn read_state(v: Value, path: &str) -> R<TaskState> {
    let Value::String(s) = v else {
        return Err(A2aError::invalid_params_at(
            path,
            format!("must be a string; found {}", json_type(&v)),
        ));
    };
    let lower = s.to_ascii_lowercase().replace('_', "-");
    let norm = lower.strip_prefix("task-state-").unwrap_or(&lower);
    Ok(match norm {
        "submitted" => TaskState::Submitted,
        "working" => TaskState::Working,
        "input-required" => TaskState::InputRequired,
        "completed" => TaskState::Completed,
        "canceled" | "cancelled" => TaskState::Canceled,
        "failed" => TaskState::Failed,
        "rejected" => TaskState::Rejected,
        "auth-required" => TaskState::AuthRequired,
        "unknown" | "unspecified" => TaskState::Unspecified,
        _ => {
            return Err(A2aError::invalid_params_at(
                path,
                format!(
                    "unknown task state {s:?}; expected one of submitted, working, \
                     input-required, completed, canceled, failed, rejected, auth-required, unknown"
                ),
            ));
        }
    })
}

/// Reads an RFC 3339 timestamp; one without offset (`2025-04-02T16:59:25.331844`) is UTC.
pub(crate) fn read_timestamp(v: Value, path: &str) -> R<DateTime<Utc>> {
    let Value::String(s) = v else {
        return Err(A2aError::invalid_params_at(
            path,
            format!("must be a timestamp string; found {}", json_type(&v)),
        ));
    };
    parse_timestamp(&s, path)
}

/// Parses an RFC 3339 timestamp (one without offset is UTC).
pub(crate) fn parse_timestamp(s: &str, path: &str) -> R<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .map(|n| n.and_utc())
        .map_err(|_| A2aError::invalid_params_at(path, format!("not an ISO 8601 timestamp: {s:?}")))
}

/// Decodes base64 (standard or URL-safe, padded or not).
pub(crate) fn read_base64(s: &str, path: &str) -> R<Vec<u8>> {
    STANDARD
        .decode(s)
        .or_else(|_| STANDARD_NO_PAD.decode(s))
        .or_else(|_| URL_SAFE.decode(s))
        .or_else(|_| URL_SAFE_NO_PAD.decode(s))
        .map_err(|_| A2aError::invalid_params_at(path, "not valid base64"))
}

const PART_PAYLOADS: [&str; 5] = ["text", "file", "data", "raw", "url"];

/// Reads a part: tagged (`kind`/`type`) or untagged, 0.x `file` objects or 1.0 flat parts.
pub(crate) fn read_part(v: Value, path: &str) -> R<Part> {
    let mut o = Obj::new(v, path)?;
    let present: Vec<&str> = PART_PAYLOADS
        .iter()
        .copied()
        .filter(|k| {
            if *k == "data" {
                o.map.contains_key("data")
            } else {
                o.has(&[k])
            }
        })
        .collect();
    if present.len() != 1 {
        let found = if present.is_empty() {
            "none".to_string()
        } else {
            present.join(" and ")
        };
        return Err(A2aError::invalid_params_at(
            path,
            format!("a part carries exactly one of text, file, data (or raw, url); found {found}"),
        ));
    }
    let payload = present[0];
    if let Some((n, tag)) = o.take_named(&["kind", "type"]) {
        let want = match payload {
            "text" => "text",
            "data" => "data",
            _ => "file",
        };
        match tag.as_str() {
            Some(t) if t == want => {}
            Some(t @ ("text" | "file" | "data")) => {
                return Err(A2aError::invalid_params_at(
                    &o.at(n),
                    format!("part is tagged {t:?} but carries {payload}"),
                ));
            }
            _ => {
                return Err(A2aError::invalid_params_at(
                    &o.at(n),
                    format!("unknown part kind {tag}; expected \"text\", \"file\" or \"data\""),
                ));
            }
        }
    }
    let mut filename = o.str_opt(&["filename", "file_name"])?;
    let mut media_type = o.str_opt(&["mediaType", "media_type", "mimeType", "mime_type"])?;
    let content = match payload {
        "text" => PartContent::Text(o.str_req(&["text"])?),
        "data" => PartContent::Data(o.map.remove("data").unwrap_or(Value::Null)),
        "raw" => {
            let p = o.at("raw");
            let s = o.str_req(&["raw"])?;
            PartContent::Raw(read_base64(&s, &p)?)
        }
        "url" => PartContent::Url(o.str_req(&["url"])?),
        _ => {
            let (fp, fv) = o.req(&["file"])?;
            let mut f = Obj::new(fv, &fp)?;
            if let Some(name) = f.str_opt(&["name", "filename"])? {
                filename = Some(name);
            }
            if let Some(mt) = f.str_opt(&["mimeType", "mime_type", "mediaType", "media_type"])? {
                media_type = Some(mt);
            }
            match (f.has(&["bytes"]), f.has(&["uri", "url"])) {
                (true, false) => {
                    let p = f.at("bytes");
                    let s = f.str_req(&["bytes"])?;
                    PartContent::Raw(read_base64(&s, &p)?)
                }
                (false, true) => PartContent::Url(f.str_req(&["uri", "url"])?),
                (b, _) => {
                    let found = if b { "both" } else { "neither" };
                    return Err(A2aError::invalid_params_at(
                        &fp,
                        format!("a file carries exactly one of bytes, uri; found {found}"),
                    ));
                }
            }
        }
    };
    let mut metadata = o.metadata()?;
    let mut mesh = take_mesh(&mut metadata);
    if filename.is_none() {
        filename = mesh_str(&mut mesh, "filename");
    }
    if media_type.is_none() {
        media_type = mesh_str(&mut mesh, "mediaType");
    }
    put_back_mesh(&mut metadata, mesh);
    Ok(Part {
        content,
        filename,
        media_type,
        metadata,
    })
}

/// Reads a non-empty list of parts.
pub(crate) fn read_parts(v: Value, path: &str) -> R<Vec<Part>> {
    let Value::Array(items) = v else {
        return Err(A2aError::invalid_params_at(
            path,
            format!("must be an array of parts; found {}", json_type(&v)),
        ));
    };
    if items.is_empty() {
        return Err(A2aError::invalid_params_at(path, "must not be empty"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, p)| read_part(p, &format!("{path}[{i}]")))
        .collect()
}

/// The message fields a dialect without them (0.1: no messageId, contextId, taskId,
/// extensions, referenceTaskIds) stashes under `_mesh`. Both readers restore them through
/// [`MessageFields::restore_from`], so the rule lives in one place.
pub(crate) struct MessageFields {
    pub(crate) message_id: Option<String>,
    pub(crate) context_id: Option<String>,
    pub(crate) task_id: Option<String>,
    pub(crate) extensions: Option<Vec<String>>,
    pub(crate) reference_task_ids: Option<Vec<String>>,
}

impl MessageFields {
    /// Fills each field the payload lacks from `metadata._mesh`, removing what it takes.
    pub(crate) fn restore_from(&mut self, metadata: &mut Option<Metadata>) {
        let mut mesh = take_mesh(metadata);
        if self.message_id.is_none() {
            self.message_id = mesh_str(&mut mesh, "messageId");
        }
        if self.context_id.is_none() {
            self.context_id = mesh_str(&mut mesh, "contextId");
        }
        if self.task_id.is_none() {
            self.task_id = mesh_str(&mut mesh, "taskId");
        }
        if self.extensions.is_none() {
            self.extensions = mesh_strings(&mut mesh, "extensions");
        }
        if self.reference_task_ids.is_none() {
            self.reference_task_ids = mesh_strings(&mut mesh, "referenceTaskIds");
        }
        put_back_mesh(metadata, mesh);
    }
}

/// Reads a message. `require_id`: a missing `messageId` is an error (0.3/1.0 sends);
/// otherwise one is generated.
pub(crate) fn read_message(v: Value, path: &str, require_id: bool) -> R<Message> {
    let mut o = Obj::new(v, path)?;
    o.check_tag(&["message"])?;
    let mut fields = MessageFields {
        message_id: o.str_opt(&["messageId", "message_id"])?,
        context_id: o.str_opt(&["contextId", "context_id"])?,
        task_id: o.str_opt(&["taskId", "task_id"])?,
        extensions: o.strings_opt(&["extensions"])?,
        reference_task_ids: o.strings_opt(&["referenceTaskIds", "reference_task_ids"])?,
    };
    let (rp, rv) = o.req(&["role"])?;
    let role = read_role(rv, &rp)?;
    let (pp, pv) = o.req(&["parts"])?;
    let parts = read_parts(pv, &pp)?;
    let mut metadata = o.metadata()?;
    fields.restore_from(&mut metadata);
    let MessageFields {
        message_id,
        context_id,
        task_id,
        extensions,
        reference_task_ids,
    } = fields;
    let message_id = match message_id {
        Some(id) => id,
        None if require_id => {
            return Err(A2aError::invalid_params_at(&o.at("messageId"), "missing"));
        }
        None => a2a::new_message_id(),
    };
    Ok(Message {
        message_id,
        context_id,
        task_id,
        role,
        parts,
        metadata,
        extensions,
        reference_task_ids,
    })
}

/// Reads a task status.
pub(crate) fn read_status(v: Value, path: &str) -> R<TaskStatus> {
    let mut o = Obj::new(v, path)?;
    let (sp, sv) = o.req(&["state"])?;
    let state = read_state(sv, &sp)?;
    let message = match o.opt(&["message"]) {
        Some((p, m)) => Some(read_message(m, &p, false)?),
        None => None,
    };
    let timestamp = match o.opt(&["timestamp"]) {
        Some((p, t)) => Some(read_timestamp(t, &p)?),
        None => None,
    };
    Ok(TaskStatus {
        state,
        message,
        timestamp,
    })
}

/// 0.1 streaming fields found inside an artifact.
#[derive(Default)]
pub(crate) struct ArtifactChunk {
    pub(crate) append: Option<bool>,
    pub(crate) last_chunk: Option<bool>,
}

/// Reads an artifact. Without an `artifactId` (0.1), the id is `_mesh.artifactId`, else
/// `artifact-{index}` (`index` member, else `default_index`).
pub(crate) fn read_artifact(
    v: Value,
    path: &str,
    default_index: usize,
) -> R<(Artifact, ArtifactChunk)> {
    let mut o = Obj::new(v, path)?;
    let artifact_id = o.str_opt(&["artifactId", "artifact_id"])?;
    let index = match o.opt(&["index"]) {
        Some((p, Value::Number(n))) => Some(
            n.as_u64()
                .ok_or_else(|| A2aError::invalid_params_at(&p, "must be a non-negative integer"))?,
        ),
        Some((p, other)) => {
            return Err(A2aError::invalid_params_at(
                &p,
                format!("must be an integer; found {}", json_type(&other)),
            ));
        }
        None => None,
    };
    let chunk = ArtifactChunk {
        append: o.bool_opt(&["append"])?,
        last_chunk: o.bool_opt(&["lastChunk", "last_chunk"])?,
    };
    let name = o.str_opt(&["name"])?;
    let description = o.str_opt(&["description"])?;
    let mut extensions = o.strings_opt(&["extensions"])?;
    let (pp, pv) = o.req(&["parts"])?;
    let parts = read_parts(pv, &pp)?;
    let mut metadata = o.metadata()?;
    let mut mesh = take_mesh(&mut metadata);
    let artifact_id = match artifact_id.or_else(|| mesh_str(&mut mesh, "artifactId")) {
        Some(id) => id,
        None => format!("artifact-{}", index.unwrap_or(default_index as u64)),
    };
    if extensions.is_none() {
        extensions = mesh_strings(&mut mesh, "extensions");
    }
    put_back_mesh(&mut metadata, mesh);
    Ok((
        Artifact {
            artifact_id,
            name,
            description,
            parts,
            metadata,
            extensions,
        },
        chunk,
    ))
}

fn read_list<T>(v: Value, path: &str, f: impl Fn(Value, &str, usize) -> R<T>) -> R<Vec<T>> {
    let Value::Array(items) = v else {
        return Err(A2aError::invalid_params_at(
            path,
            format!("must be an array; found {}", json_type(&v)),
        ));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, x)| f(x, &format!("{path}[{i}]"), i))
        .collect()
}

/// Reads a task (0.1 `sessionId` or `contextId`; a missing context id reads as `""`).
pub(crate) fn read_task(v: Value, path: &str) -> R<Task> {
    let mut o = Obj::new(v, path)?;
    o.check_tag(&["task"])?;
    let id = o.str_req(&["id", "taskId", "task_id"])?;
    let context_id = o
        .str_opt(&["contextId", "context_id", "sessionId", "session_id"])?
        .unwrap_or_default();
    let (sp, sv) = o.req(&["status"])?;
    let status = read_status(sv, &sp)?;
    let artifacts = match o.opt(&["artifacts"]) {
        Some((p, a)) => Some(read_list(a, &p, |x, p, i| {
            read_artifact(x, p, i).map(|(a, _)| a)
        })?),
        None => None,
    };
    let history = match o.opt(&["history"]) {
        Some((p, h)) => Some(read_list(h, &p, |x, p, _| read_message(x, p, false))?),
        None => None,
    };
    let metadata = o.metadata()?;
    Ok(Task {
        id,
        context_id,
        status,
        artifacts,
        history,
        metadata,
    })
}

/// Reads a status-update event. A 0.x `final` that differs from what the state implies is
/// kept as `metadata._mesh.final`.
pub(crate) fn read_status_event(v: Value, path: &str) -> R<TaskStatusUpdateEvent> {
    let mut o = Obj::new(v, path)?;
    o.check_tag(&["status-update", "TaskStatusUpdateEvent"])?;
    let task_id = o.str_req(&["taskId", "task_id", "id"])?;
    let context_id = o.str_opt(&["contextId", "context_id", "sessionId", "session_id"])?;
    let (sp, sv) = o.req(&["status"])?;
    let status = read_status(sv, &sp)?;
    let fin = o.bool_opt(&["final"])?;
    let mut metadata = o.metadata()?;
    let mut mesh = take_mesh(&mut metadata);
    let context_id = context_id
        .or_else(|| mesh_str(&mut mesh, "contextId"))
        .unwrap_or_default();
    if let Some(f) = fin {
        mesh.remove("final");
        if f != is_final_state(&status.state) {
            mesh.insert("final".into(), Value::Bool(f));
        }
    }
    put_back_mesh(&mut metadata, mesh);
    Ok(TaskStatusUpdateEvent {
        task_id,
        context_id,
        status,
        metadata,
    })
}

/// Reads an artifact-update event (0.1: `append`/`lastChunk` inside the artifact).
pub(crate) fn read_artifact_event(v: Value, path: &str) -> R<TaskArtifactUpdateEvent> {
    let mut o = Obj::new(v, path)?;
    o.check_tag(&["artifact-update", "TaskArtifactUpdateEvent"])?;
    let task_id = o.str_req(&["taskId", "task_id", "id"])?;
    let context_id = o.str_opt(&["contextId", "context_id", "sessionId", "session_id"])?;
    let (ap, av) = o.req(&["artifact"])?;
    let (artifact, chunk) = read_artifact(av, &ap, 0)?;
    let append = o.bool_opt(&["append"])?.or(chunk.append);
    let last_chunk = o
        .bool_opt(&["lastChunk", "last_chunk"])?
        .or(chunk.last_chunk);
    o.take(&["final"]);
    let mut metadata = o.metadata()?;
    let mut mesh = take_mesh(&mut metadata);
    let context_id = context_id
        .or_else(|| mesh_str(&mut mesh, "contextId"))
        .unwrap_or_default();
    put_back_mesh(&mut metadata, mesh);
    Ok(TaskArtifactUpdateEvent {
        task_id,
        context_id,
        artifact,
        append,
        last_chunk,
        metadata,
    })
}

/// Reads push-config authentication: 1.0 `{scheme, credentials}` or 0.x
/// `{schemes: [...], credentials}` (the first scheme is kept).
pub(crate) fn read_auth(v: Value, path: &str) -> R<AuthenticationInfo> {
    let mut o = Obj::new(v, path)?;
    let scheme = match o.str_opt(&["scheme"])? {
        Some(s) => s,
        None => {
            let p = o.at("schemes");
            let schemes = o.strings_opt(&["schemes"])?.unwrap_or_default();
            schemes
                .into_iter()
                .next()
                .ok_or_else(|| A2aError::invalid_params_at(&p, "missing; name one scheme"))?
        }
    };
    Ok(AuthenticationInfo {
        scheme,
        credentials: o.str_opt(&["credentials"])?,
    })
}

/// Reads a flat push config (`{url, id, taskId, token, authentication}`).
pub(crate) fn read_push_config_flat(
    mut o: Obj,
    task_id: Option<String>,
) -> R<TaskPushNotificationConfig> {
    let url = o.str_req(&["url"])?;
    let id = o.str_opt(&["id", "configId", "config_id"])?;
    let own_task = o.str_opt(&["taskId", "task_id"])?;
    let token = o.str_opt(&["token"])?;
    let authentication = match o.opt(&["authentication"]) {
        Some((p, a)) => Some(read_auth(a, &p)?),
        None => None,
    };
    let tenant = o.str_opt(&["tenant"])?;
    Ok(TaskPushNotificationConfig {
        url,
        id,
        task_id: own_task.or(task_id).unwrap_or_default(),
        token,
        authentication,
        tenant,
    })
}

/// Reads a push config in any shape: 1.0 flat, or 0.x `{taskId|id, pushNotificationConfig}`.
pub(crate) fn read_push_config(v: Value, path: &str) -> R<TaskPushNotificationConfig> {
    let mut o = Obj::new(v, path)?;
    if o.has(&["pushNotificationConfig", "push_notification_config"]) {
        let task_id = o.str_opt(&["taskId", "task_id", "id"])?;
        let tenant = o.str_opt(&["tenant"])?;
        let (ip, iv) = o.req(&["pushNotificationConfig", "push_notification_config"])?;
        let mut cfg = read_push_config_flat(Obj::new(iv, &ip)?, task_id)?;
        if cfg.tenant.is_none() {
            cfg.tenant = tenant;
        }
        Ok(cfg)
    } else {
        read_push_config_flat(o, None)
    }
}
