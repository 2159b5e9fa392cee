//! The reserved metadata key `_mesh`: what travels with a request and an event on the bus.
//!
//! MQTT 3.1.1 has no user properties, so the reply topic, the deadline, the per-publish request
//! id and the rest ride inside the JSON-RPC payload, in `params.metadata._mesh` of a request and
//! in `result.metadata._mesh` of an event. A request's envelope is
//! [`Request::mesh`](crate::rpc::Request::mesh): the codec lifts it out of the params'
//! metadata on reading and writes it back, so a handler never sees it there. On events,
//! [`MeshMeta::take`] removes the key from a metadata map (a gateway strips it before a
//! client sees an event) and [`MeshMeta::put`] writes it. See docs/protocol.md, section 4.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::Task;
use crate::topic::RequesterKind;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::model::MESH_KEY;

/// Who sent a request: a gateway (on behalf of an HTTP client) or an agent delegating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Caller {
    /// A gateway or an agent.
    pub kind: RequesterKind,
    /// The gateway's (deployment) name or the calling agent's name: the first segment of its
    /// response topics after `response/`.
    pub id: String,
    /// The authenticated principal the request is made for, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

impl Caller {
    /// `_mesh.caller` as written on the bus.
    fn into_value(self) -> Value {
        let mut object = Map::new();
        object.insert("kind".to_owned(), Value::from(self.kind.as_str()));
        object.insert("id".to_owned(), Value::String(self.id));
        if let Some(principal) = self.principal {
            object.insert("principal".to_owned(), Value::String(principal));
        }
        Value::Object(object)
    }

    /// Reads `_mesh.caller` (`kind` `"gateway"` or `"agent"`, `id` a string, `principal`
    /// optional); anything else reads as no caller.
    fn from_value(value: Value) -> Option<Caller> {
        let Value::Object(object) = value else {
            return None;
        };
        let (mut kind, mut id, mut principal) = (None, None, None);
        for (key, value) in object {
            let Value::String(value) = value else {
                continue;
            };
            match key.as_str() {
                "kind" => kind = Some(value),
                "id" => id = Some(value),
                "principal" => principal = Some(value),
                _ => {}
            }
        }
        Some(Caller {
            kind: RequesterKind::from_name(&kind?)?,
            id: id?,
            principal,
        })
    }
}

/// The member names of [`MeshMeta`]'s fields on the wire, in declaration order.
pub(crate) const MESH_FIELDS: [&str; 14] = [
    "replyTo",
    "requestId",
    "deadline",
    "caller",
    "depth",
    "traceparent",
    "taskId",
    "task",
    "instance",
    "seq",
    "window",
    "keepsHistory",
    "historyFrom",
    "streamAfterProgress",
];

/// The content of `metadata._mesh`, on requests and on events alike (each side uses its fields).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeshMeta {
    /// Request: the topic every reply and event of this request goes to.
    pub reply_to: Option<String>,
    /// Request: unique per publish; the key agents de-duplicate on.
    pub request_id: Option<String>,
    /// Request: milliseconds since the Unix epoch after which the task fails.
    pub deadline: Option<u64>,
    /// Request: who asked.
    pub caller: Option<Caller>,
    /// Request: the call depth (0 from a gateway, +1 per delegation).
    pub depth: Option<u32>,
    /// Request: W3C trace context, passed through untouched.
    pub traceparent: Option<String>,
    /// Request: the id the requester assigned to the new task this message starts.
    pub task_id: Option<String>,
    /// Request: the task a follow-up message resumes (0.3 Task JSON on the wire). The codec
    /// reads and writes it with the request: [`MeshMeta::from_object`] leaves the member in
    /// [`MeshMeta::other`] and [`MeshMeta::into_object`] does not write this field.
    pub task: Option<Box<Task>>,
    /// Event: the id of the agent instance running the task.
    pub instance: Option<String>,
    /// Event: the position of the event in its reply stream.
    pub seq: Option<u64>,
    /// Request: the requester's flow-control window (a streaming request): the agent
    /// publishes the event at position `seq` only once the requester has credited a
    /// position above `seq - window` (`mesh/credit` on the task's cancel topic; see
    /// [`flow`](crate::flow)). Absent: no flow control.
    pub window: Option<u32>,
    /// Request: the requester keeps the task's history as this turn begins (the resumed
    /// task's, the question it asked, this message): the agent's task events carry only what
    /// comes after it, and say where that starts in `history_from`.
    pub keeps_history: Option<bool>,
    /// Event (a whole task): the task's `history` is its history from this position on; the
    /// requester, which asked with `keeps_history`, has the entries before it.
    pub history_from: Option<u64>,
    /// Request (`message/send`): once the task's progress response is out (it still runs
    /// after its first moment), the agent sends every later event as for `message/stream`,
    /// so that whoever follows the task through the requester sees it as it runs. Flow
    /// control (`window`) then applies as to a stream.
    pub stream_after_progress: Option<bool>,
    /// Dialect-preservation fields written by the codecs, and members this type does not
    /// know; kept as they are.
    pub other: Map<String, Value>,
}

impl MeshMeta {
    /// Removes `_mesh` from a metadata map and reads it. A missing or unreadable key gives the
    /// default (no routing information); the caller decides whether that is an error.
    /// A map left empty by the removal becomes `None`, so that stripping leaves no trace.
    pub fn take(metadata: &mut Option<HashMap<String, Value>>) -> MeshMeta {
        let Some(map) = metadata.as_mut() else {
            return MeshMeta::default();
        };
        let meta = match map.remove(MESH_KEY) {
            Some(Value::Object(object)) => MeshMeta::from_object(object),
            _ => MeshMeta::default(),
        };
        if map.is_empty() {
            *metadata = None;
        }
        meta
    }

    /// Writes this value under `_mesh` into a metadata map (creating the map), merging with
    /// fields already there (the codecs may have put dialect-preservation fields in it).
    pub fn put(self, metadata: &mut Option<HashMap<String, Value>>) {
        let map = metadata.get_or_insert_with(HashMap::new);
        let new = self.into_object();
        match map.get_mut(MESH_KEY) {
            Some(Value::Object(existing)) => existing.extend(new),
            _ => {
                map.insert(MESH_KEY.to_owned(), Value::Object(new));
            }
        }
    }

    /// Reads the object under `_mesh`, moving its values out (what serde would read, written
    /// by hand: serde's `flatten` buffers every field, and this runs on every message). A
    /// field of the wrong type reads as absent, except `deadline` and `depth` out of range
    /// (not `null`), which stay in `other` ([`MeshMeta::out_of_range`]); unknown fields are
    /// kept in `other` (the task snapshot among them: the codec reads it as a [`Task`]).
    pub fn from_object(object: Map<String, Value>) -> MeshMeta {
        let mut meta = MeshMeta::default();
        let string = |value: Value| match value {
            Value::String(s) => Some(s),
            _ => None,
        };
        // One pass, moving each value out: no lookups.
        for (key, value) in object {
            match key.as_str() {
                "replyTo" => meta.reply_to = string(value),
                "requestId" => meta.request_id = string(value),
                // Out of range (negative, fractional, too large): kept in `other` under its
                // own name, so that a receiver can refuse it rather than act on its absence.
                "deadline" => match value.as_u64() {
                    Some(deadline) => meta.deadline = Some(deadline),
                    None if value.is_null() => {}
                    None => {
                        meta.other.insert(key, value);
                    }
                },
                "caller" => meta.caller = Caller::from_value(value),
                "depth" => match value.as_u64().and_then(|d| u32::try_from(d).ok()) {
                    Some(depth) => meta.depth = Some(depth),
                    None if value.is_null() => {}
                    None => {
                        meta.other.insert(key, value);
                    }
                },
                "traceparent" => meta.traceparent = string(value),
                "taskId" => meta.task_id = string(value),
                "instance" => meta.instance = string(value),
                "seq" => meta.seq = value.as_u64(),
                "window" => meta.window = value.as_u64().and_then(|w| u32::try_from(w).ok()),
                "keepsHistory" => meta.keeps_history = value.as_bool(),
                "historyFrom" => meta.history_from = value.as_u64(),
                "streamAfterProgress" => meta.stream_after_progress = value.as_bool(),
                _ => {
                    meta.other.insert(key, value);
                }
            }
        }
        meta
    }

    /// The first of `deadline` and `depth` that a request carried with a value out of
    /// range (see [`MeshMeta::from_object`]), and that value.
    pub fn out_of_range(&self) -> Option<(&'static str, &Value)> {
        ["deadline", "depth"]
            .into_iter()
            .find_map(|key| self.other.get(key).map(|value| (key, value)))
    }

    /// This value as the object under `_mesh` (the fields that are set, camelCase), but for the
    /// task snapshot, which only a request carries and the codec writes.
    pub fn into_object(self) -> Map<String, Value> {
        let mut object = self.other;
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                object.insert(key.to_owned(), value);
            }
        };
        set("replyTo", self.reply_to.map(Value::String));
        set("requestId", self.request_id.map(Value::String));
        set("deadline", self.deadline.map(Value::from));
        set("caller", self.caller.map(Caller::into_value));
        set("depth", self.depth.map(Value::from));
        set("traceparent", self.traceparent.map(Value::String));
        set("taskId", self.task_id.map(Value::String));
        set("instance", self.instance.map(Value::String));
        set("seq", self.seq.map(Value::from));
        set("window", self.window.map(Value::from));
        set("keepsHistory", self.keeps_history.map(Value::from));
        set("historyFrom", self.history_from.map(Value::from));
        set(
            "streamAfterProgress",
            self.stream_after_progress.map(Value::from),
        );
        object
    }

    /// True when no field is set (nothing to write under `_mesh`).
    pub fn is_empty(&self) -> bool {
        *self == MeshMeta::default()
    }

    /// The deadline as a duration from now; `None` when there is no deadline, zero when it
    /// has passed.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| Duration::from_millis(deadline.saturating_sub(now_millis())))
    }
}

/// What [`peek_request`] reads of a request: enough to answer it, whatever else it holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestHead {
    /// The JSON-RPC `id` as it was sent (any JSON value; `Null` when absent).
    pub id: Value,
    /// The `method`, when it is a string.
    pub method: Option<String>,
    /// `params.metadata._mesh`, read as [`MeshMeta::from_object`] reads it.
    pub meta: MeshMeta,
}

/// Reads a request's [`RequestHead`] from its payload without decoding the rest (skipped, not
/// copied): for a request that did not decode, or one too large to decode whole, so that it
/// can still be answered. A payload that is not a JSON object gives the empty head.
pub fn peek_request(payload: &[u8]) -> RequestHead {
    // Typed all the way down to `_mesh`: serde skips every other member without copying it.
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        id: Value,
        #[serde(default)]
        method: Value,
        #[serde(default)]
        params: Option<Params>,
    }
    #[derive(Deserialize)]
    struct Params {
        #[serde(default)]
        metadata: Option<Metadata>,
    }
    #[derive(Deserialize)]
    struct Metadata {
        #[serde(default, rename = "_mesh")]
        mesh: Option<Value>,
    }
    // When `params` or its metadata is not an object: the id and method alone.
    #[derive(Deserialize)]
    struct IdOnly {
        #[serde(default)]
        id: Value,
        #[serde(default)]
        method: Value,
    }
    // A derived struct would also read an array (by position): only an object is a request.
    if payload.trim_ascii_start().first() != Some(&b'{') {
        return RequestHead::default();
    }
    let (id, method, mesh) = match serde_json::from_slice::<Head>(payload) {
        Ok(head) => {
            let mesh = head.params.and_then(|p| p.metadata).and_then(|m| m.mesh);
            (head.id, head.method, mesh)
        }
        Err(_) => match serde_json::from_slice::<IdOnly>(payload) {
            Ok(head) => (head.id, head.method, None),
            Err(_) => return RequestHead::default(),
        },
    };
    RequestHead {
        id,
        method: match method {
            Value::String(method) => Some(method),
            _ => None,
        },
        meta: match mesh {
            Some(Value::Object(mesh)) => MeshMeta::from_object(mesh),
            _ => MeshMeta::default(),
        },
    }
}

/// Milliseconds since the Unix epoch, the unit of [`MeshMeta::deadline`].
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The deadline `timeout` from now, in the unit of [`MeshMeta::deadline`].
pub fn deadline_in(timeout: Duration) -> u64 {
    now_millis().saturating_add(timeout.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn put_then_take_round_trips_and_strips() {
        let mut metadata = None;
        let meta = MeshMeta {
            reply_to: Some("ns/a2a/v1/gateway/response/gw/i1/echo/t1".into()),
            request_id: Some("r1".into()),
            deadline: Some(42),
            depth: Some(1),
            ..Default::default()
        };
        meta.clone().put(&mut metadata);
        assert_eq!(MeshMeta::take(&mut metadata), meta);
        assert_eq!(metadata, None, "an emptied map is removed");
    }

    #[test]
    fn take_keeps_user_metadata() {
        let mut metadata = Some(HashMap::from([
            ("user".to_owned(), json!(1)),
            (MESH_KEY.to_owned(), json!({"seq": 3, "instance": "i1"})),
        ]));
        let meta = MeshMeta::take(&mut metadata);
        assert_eq!(meta.seq, Some(3));
        assert_eq!(meta.instance.as_deref(), Some("i1"));
        assert_eq!(
            metadata,
            Some(HashMap::from([("user".to_owned(), json!(1))]))
        );
    }

    #[test]
    fn put_merges_with_codec_fields() {
        let mut metadata = Some(HashMap::from([(
            MESH_KEY.to_owned(),
            json!({"artifactId": "a1"}),
        )]));
        MeshMeta {
            seq: Some(0),
            ..Default::default()
        }
        .put(&mut metadata);
        let meta = MeshMeta::take(&mut metadata);
        assert_eq!(meta.seq, Some(0));
        assert_eq!(meta.other.get("artifactId"), Some(&json!("a1")));
    }

    #[test]
    fn every_field_round_trips_through_the_object() {
        let meta = MeshMeta {
            reply_to: Some("ns/a2a/v1/gateway/response/gw/i1/echo/t1".into()),
            request_id: Some("r1".into()),
            deadline: Some(42),
            caller: Some(Caller {
                kind: RequesterKind::Gateway,
                id: "gw".into(),
                principal: Some("alice".into()),
            }),
            depth: Some(2),
            traceparent: Some("00-abc-def-01".into()),
            task_id: Some("t1".into()),
            task: None,
            instance: Some("i1".into()),
            seq: Some(7),
            window: Some(256),
            keeps_history: Some(true),
            history_from: Some(3),
            stream_after_progress: Some(true),
            other: Map::from_iter([("artifactId".to_owned(), json!("a1"))]),
        };
        let object = meta.clone().into_object();
        let mut names: Vec<&str> = object.keys().map(String::as_str).collect();
        names.retain(|name| *name != "artifactId");
        names.push("task");
        let mut fields = MESH_FIELDS.to_vec();
        fields.sort_unstable();
        names.sort_unstable();
        assert_eq!(names, fields, "MESH_FIELDS names every field");
        assert_eq!(MeshMeta::from_object(object), meta);
        assert_eq!(
            Value::Object(MeshMeta::default().into_object()),
            json!({}),
            "unset fields are not written"
        );
    }

    #[test]
    fn a_caller_of_an_unknown_kind_is_no_caller() {
        let meta = MeshMeta::from_object(Map::from_iter([(
            "caller".to_owned(),
            json!({"kind": "robot", "id": "r2"}),
        )]));
        assert_eq!(meta.caller, None);
        let meta = MeshMeta::from_object(Map::from_iter([(
            "caller".to_owned(),
            json!({"kind": "agent", "id": "planner"}),
        )]));
        assert_eq!(meta.caller.map(|c| c.kind), Some(RequesterKind::Agent));
    }

    #[test]
    fn the_task_snapshot_is_left_for_the_codec() {
        let meta = MeshMeta::from_object(Map::from_iter([(
            "task".to_owned(),
            json!({"kind": "task", "id": "t1"}),
        )]));
        assert_eq!(meta.task, None);
        assert_eq!(
            meta.other.get("task"),
            Some(&json!({"kind": "task", "id": "t1"}))
        );
    }

    #[test]
    fn a_field_of_the_wrong_type_reads_as_absent() {
        let Value::Object(object) = json!({"seq": "3", "instance": "i1", "depth": -1}) else {
            unreachable!()
        };
        let meta = MeshMeta::from_object(object);
        assert_eq!(meta.seq, None);
        assert_eq!(meta.depth, None);
        assert_eq!(meta.instance.as_deref(), Some("i1"));
    }

    #[test]
    fn garbage_under_the_key_is_ignored_not_fatal() {
        let mut metadata = Some(HashMap::from([(MESH_KEY.to_owned(), json!("nonsense"))]));
        assert_eq!(MeshMeta::take(&mut metadata), MeshMeta::default());
        assert_eq!(metadata, None);
    }

    #[test]
    fn a_request_head_is_read_from_any_payload() {
        let head = peek_request(
            br#"{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"parts":[]},"metadata":{"_mesh":{"replyTo":"r","requestId":"q"}}}}"#,
        );
        assert_eq!(head.id, json!(7));
        assert_eq!(head.method.as_deref(), Some("message/send"));
        assert_eq!(head.meta.reply_to.as_deref(), Some("r"));
        // Params that are not an object, a method that is not a string: the id still reads.
        let head = peek_request(br#"{"id":{"odd":1},"method":5,"params":"x"}"#);
        assert_eq!(head.id, json!({"odd": 1}));
        assert_eq!(head.method, None);
        assert_eq!(head.meta, MeshMeta::default());
        for junk in [&b""[..], b"[1,2]", b"{not json", b"null"] {
            assert_eq!(peek_request(junk), RequestHead::default());
        }
    }

    #[test]
    fn time_left_saturates() {
        let past = MeshMeta {
            deadline: Some(1),
            ..Default::default()
        };
        assert_eq!(past.time_left(), Some(Duration::ZERO));
        let future = MeshMeta {
            deadline: Some(deadline_in(Duration::from_secs(60))),
            ..Default::default()
        };
        assert!(future.time_left().unwrap() > Duration::from_secs(50));
    }
}
