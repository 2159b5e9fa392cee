//! The JSON-RPC 2.0 envelope: request ids, envelope parsing (with notification and batch
//! detection). Responses are written by the codec.
//!
//! This layer knows nothing about A2A methods; [`crate::codec`] builds on it (and reads
//! canonical envelopes with its own typed reader).
//! Error codes: `-32700` when the bytes are not JSON, `-32600` when the JSON is not a
//! request object (not an object, `jsonrpc` missing or not `"2.0"`, `method` not a string,
//! `id` neither string, integer nor null, empty batch).

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use std::fmt;

use crate::error::A2aError;

/// A JSON-RPC request id: string, integer or null, kept exactly as received so that it can
/// be echoed back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonRpcId {
    /// A string id.
    String(String),
    /// An integer id (as written by the peer; never fractional).
    Number(Number),
    /// A null id.
    Null,
}

impl JsonRpcId {
    /// Reads an id member; `Err` (-32600) for objects, arrays, booleans and fractional numbers.
    pub fn from_value(value: Value) -> Result<JsonRpcId, A2aError> {
        match value {
            Value::String(s) => Ok(JsonRpcId::String(s)),
            Value::Null => Ok(JsonRpcId::Null),
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(JsonRpcId::Number(n)),
            Value::Number(_) => Err(A2aError::invalid_request_at(
                "id",
                "must be a string, an integer or null; found a fractional number",
            )),
            other => Err(A2aError::invalid_request_at(
                "id",
                format!(
                    "must be a string, an integer or null; found {}",
                    json_type(&other)
                ),
            )),
        }
    }

    /// The id as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            JsonRpcId::String(s) => Value::String(s.clone()),
            JsonRpcId::Number(n) => Value::Number(n.clone()),
            JsonRpcId::Null => Value::Null,
        }
    }
}

impl fmt::Display for JsonRpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonRpcId::String(s) => write!(f, "{s:?}"),
            JsonRpcId::Number(n) => write!(f, "{n}"),
            JsonRpcId::Null => f.write_str("null"),
        }
    }
}

impl From<&str> for JsonRpcId {
    fn from(s: &str) -> Self {
        JsonRpcId::String(s.to_string())
    }
}

impl From<String> for JsonRpcId {
    fn from(s: String) -> Self {
        JsonRpcId::String(s)
    }
}

impl From<i64> for JsonRpcId {
    fn from(n: i64) -> Self {
        JsonRpcId::Number(n.into())
    }
}

/// The name of a JSON value's type, for error messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A syntactically valid JSON-RPC request (method not yet interpreted).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// `None` when the member is absent: a notification (no answer is due).
    pub id: Option<JsonRpcId>,
    /// The method name.
    pub method: String,
    /// The params member, if any.
    pub params: Option<Value>,
}

impl Envelope {
    /// Whether this is a notification (no `id` member).
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

/// An envelope that failed validation, with the id if it could be read.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvelopeError {
    /// The request id, when readable (answer with it; else answer with `null`).
    pub id: Option<JsonRpcId>,
    /// The method name, when readable.
    pub method: Option<String>,
    /// `-32700` or `-32600`.
    pub error: A2aError,
}

/// What a payload holds at top level.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// One request object.
    Single(Value),
    /// A batch (non-empty top-level array): answer each element per JSON-RPC 2.0.
    Batch(Vec<Value>),
}

/// Parses bytes into a single request object or a batch. `-32700` on invalid JSON,
/// `-32600` on an empty batch.
pub fn parse_incoming(bytes: &[u8]) -> Result<Incoming, EnvelopeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| EnvelopeError {
        id: None,
        method: None,
        error: A2aError::parse(format!("Invalid JSON payload: {e}")),
    })?;
    match value {
        Value::Array(items) if items.is_empty() => Err(EnvelopeError {
            id: None,
            method: None,
            error: A2aError::invalid_request("empty batch: a batch must hold at least one request"),
        }),
        Value::Array(items) => Ok(Incoming::Batch(items)),
        other => Ok(Incoming::Single(other)),
    }
}

/// Validates one request object (an element of a batch, or a single request).
pub fn parse_envelope(value: Value) -> Result<Envelope, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(EnvelopeError {
            id: None,
            method: None,
            error: A2aError::invalid_request(format!(
                "request: must be an object; found {}",
                json_type(&value)
            )),
        });
    };
    let id = match obj.remove("id") {
        None => None,
        Some(v) => match JsonRpcId::from_value(v) {
            Ok(id) => Some(id),
            Err(error) => {
                return Err(EnvelopeError {
                    id: None,
                    method: obj.get("method").and_then(Value::as_str).map(String::from),
                    error,
                });
            }
        },
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => Some(m),
        Some(other) => {
            return Err(EnvelopeError {
                id,
                method: None,
                error: A2aError::invalid_request_at(
                    "method",
                    format!("must be a string; found {}", json_type(&other)),
                ),
            });
        }
        None => None,
    };
    let fail = |id: Option<JsonRpcId>, method: Option<String>, error| {
        Err(EnvelopeError { id, method, error })
    };
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(other) => {
            return fail(
                id,
                method,
                A2aError::invalid_request_at("jsonrpc", format!("must be \"2.0\"; found {other}")),
            );
        }
        None => {
            return fail(
                id,
                method,
                A2aError::invalid_request_at("jsonrpc", "missing; must be \"2.0\""),
            );
        }
    }
    let Some(method) = method else {
        return fail(id, None, A2aError::invalid_request_at("method", "missing"));
    };
    let params = match obj.remove("params") {
        None => None,
        Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p),
        Some(Value::Null) => None,
        Some(other) => {
            return fail(
                id,
                Some(method),
                A2aError::invalid_request_at(
                    "params",
                    format!("must be an object or an array; found {}", json_type(&other)),
                ),
            );
        }
    };
    Ok(Envelope { id, method, params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(v: Value) -> Result<Envelope, EnvelopeError> {
        parse_envelope(v)
    }

    #[test]
    fn ids_keep_their_form() {
        let e = env(json!({"jsonrpc":"2.0","id":7,"method":"m"})).expect("ok");
        assert_eq!(e.id, Some(JsonRpcId::from(7)));
        let e = env(json!({"jsonrpc":"2.0","id":"7","method":"m"})).expect("ok");
        assert_eq!(e.id, Some(JsonRpcId::from("7")));
        let e = env(json!({"jsonrpc":"2.0","id":null,"method":"m"})).expect("ok");
        assert_eq!(e.id, Some(JsonRpcId::Null));
        let e = env(json!({"jsonrpc":"2.0","method":"m"})).expect("ok");
        assert!(e.is_notification());
    }

    #[test]
    fn bad_envelopes() {
        let code = |v: Value| env(v).expect_err("invalid").error.code();
        assert_eq!(code(json!([1])), -32600);
        assert_eq!(code(json!({"id":1,"method":"m"})), -32600);
        assert_eq!(code(json!({"jsonrpc":"1.0","id":1,"method":"m"})), -32600);
        assert_eq!(code(json!({"jsonrpc":"2.0","id":1,"method":5})), -32600);
        assert_eq!(code(json!({"jsonrpc":"2.0","id":{},"method":"m"})), -32600);
        assert_eq!(code(json!({"jsonrpc":"2.0","id":[1],"method":"m"})), -32600);
        assert_eq!(code(json!({"jsonrpc":"2.0","id":1.5,"method":"m"})), -32600);
        assert_eq!(code(json!({"jsonrpc":"2.0","id":1})), -32600);
        assert_eq!(
            code(json!({"jsonrpc":"2.0","id":1,"method":"m","params":3})),
            -32600
        );
        let e = env(json!({"id":"x","method":"m"})).expect_err("no jsonrpc");
        assert_eq!(e.id, Some(JsonRpcId::from("x")));
    }

    #[test]
    fn incoming() {
        assert_eq!(parse_incoming(b"{").expect_err("bad").error.code(), -32700);
        assert_eq!(
            parse_incoming(b"[]").expect_err("empty").error.code(),
            -32600
        );
        assert!(matches!(parse_incoming(b"[{}]"), Ok(Incoming::Batch(v)) if v.len() == 1));
        assert!(matches!(parse_incoming(b"{}"), Ok(Incoming::Single(_))));
    }
}
