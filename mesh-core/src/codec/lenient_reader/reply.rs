//! The lenient reading of a reply (a response's `result` or a stream event) written in any
//! dialect: the shape tells the kind. This is the definition of what a reply may look like and
//! of every error a bad one gets; the typed reader ([`crate::codec::typed_reader`]) answers
//! either nothing or the same.

use serde_json::Value;

use super::{
    Obj, read_artifact_event, read_message, read_push_config, read_status_event, read_task,
};
use crate::codec::{DecodedReply, card};
use crate::dialect::Dialect;
use crate::error::{A2aError, ErrorKind};
use crate::jsonrpc::{JsonRpcId, json_type};
use crate::model::{ListTaskPushNotificationConfigsResponse, ListTasksResponse};
use crate::rpc::Reply;

/// Reads a reply (a response's `result` or a stream event) written in `dialect`; the shape
/// tells the kind (0.3 `kind` tag, 1.0 wrapper key, 0.1 field shape: `status`+`final` →
/// status update, `artifact` → artifact update, else task). Errors are `-32006`.
pub(crate) fn read_reply(v: Value, dialect: Dialect) -> Result<Reply, A2aError> {
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
                .map(|(i, c)| read_push_config(c, &format!("{path}[{i}]")))
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
                    0 => Reply::Task(read_task(inner, &p)?),
                    1 => Reply::Message(read_message(inner, &p, false)?),
                    2 => Reply::StatusUpdate(read_status_event(inner, &p)?),
                    _ => Reply::ArtifactUpdate(read_artifact_event(inner, &p)?),
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
        Some("task") => return Ok(Reply::Task(read_task(v, path)?)),
        Some("message") => return Ok(Reply::Message(read_message(v, path, false)?)),
        Some("status-update" | "TaskStatusUpdateEvent") => {
            return Ok(Reply::StatusUpdate(read_status_event(v, path)?));
        }
        Some("artifact-update" | "TaskArtifactUpdateEvent") => {
            return Ok(Reply::ArtifactUpdate(read_artifact_event(v, path)?));
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
                .map(|(i, c)| read_push_config(c, &format!("{path}.configs[{i}]")))
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
        return Ok(Reply::PushConfig(read_push_config(v, path)?));
    }
    if has("artifact") {
        return Ok(Reply::ArtifactUpdate(read_artifact_event(v, path)?));
    }
    if has("status") && (has("final") || has("taskId") || has("task_id")) {
        return Ok(Reply::StatusUpdate(read_status_event(v, path)?));
    }
    if has("status") {
        return Ok(Reply::Task(read_task(v, path)?));
    }
    if has("role") && has("parts") {
        return Ok(Reply::Message(read_message(v, path, false)?));
    }
    let _ = d;
    Err(A2aError::invalid_agent_response(format!(
        "{path}: not a task, message, event, task list, push config or agent card"
    )))
}

fn read_tasks(v: Value) -> Result<ListTasksResponse, A2aError> {
    let mut o = Obj::new(v, "result")?;
    let (tp, tv) = o.req(&["tasks"])?;
    let Value::Array(items) = tv else {
        return Err(A2aError::invalid_params_at(&tp, "must be an array"));
    };
    let tasks = items
        .into_iter()
        .enumerate()
        .map(|(i, t)| read_task(t, &format!("{tp}[{i}]")))
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

/// Decodes a response or stream event (see [`crate::codec::decode_reply`]).
pub(crate) fn decode_reply(bytes: &[u8], dialect: Dialect) -> Result<DecodedReply, A2aError> {
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
