//! The A2A error table as typed errors, and how each dialect writes and reads them.
//!
//! Every failure the mesh reports to a peer is an [`A2aError`]: a [`ErrorKind`] (which fixes
//! the JSON-RPC code), a human-readable message and optional structured `data`.
//!
//! Codes follow the A2A specification 1.0.1 (section 5.4): `-32007` is
//! `ExtendedAgentCardNotConfigured`, `-32008` is `ExtensionSupportRequired` and `-32009` is
//! `VersionNotSupported`. (Some product notes number `-32007`/`-32008` differently; the
//! specification wins, see `docs/fixtures.md`.)
//!
//! Dialects write errors differently:
//! - 0.1 and 0.3: `{"code", "message", "data"?}` with `data` as given;
//! - 1.0: `error.data` is a list of ProtoJSON `Any` objects: a `google.rpc.ErrorInfo`
//!   (`reason`, `domain: "a2a-protocol.org"`, `metadata`) and, for validation errors that name
//!   a field, a `google.rpc.BadRequest` with one field violation.

use serde_json::{Map, Value, json};

use crate::dialect::Dialect;

/// `@type` of a `google.rpc.ErrorInfo` detail.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// `@type` of a `google.rpc.BadRequest` detail.
pub const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
/// The `domain` of every A2A `ErrorInfo`.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// The kind of an A2A error; each kind has one JSON-RPC code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `-32700`: the payload is not valid JSON.
    Parse,
    /// `-32600`: the JSON is not a valid JSON-RPC request object.
    InvalidRequest,
    /// `-32601`: the method does not exist.
    MethodNotFound,
    /// `-32602`: the method parameters are invalid.
    InvalidParams,
    /// `-32603`: an internal error.
    Internal,
    /// `-32001`: no such task.
    TaskNotFound,
    /// `-32002`: the task is not in a cancelable state.
    TaskNotCancelable,
    /// `-32003`: push notifications are not supported.
    PushNotificationNotSupported,
    /// `-32004`: the operation is not supported.
    UnsupportedOperation,
    /// `-32005`: a media type is not supported.
    ContentTypeNotSupported,
    /// `-32006`: an agent returned a response that does not conform to the method.
    InvalidAgentResponse,
    /// `-32007`: the extended agent card is not configured (spec 1.0.1 numbering).
    ExtendedAgentCardNotConfigured,
    /// `-32008`: the client must support a required extension (spec 1.0.1 numbering).
    ExtensionSupportRequired,
    /// `-32009`: the requested protocol version is not supported.
    VersionNotSupported,
    /// Any other code read from a peer (kept so that it can be passed on unchanged).
    Other(i64),
}

impl ErrorKind {
    /// Every kind of the A2A error table (without [`ErrorKind::Other`]).
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::Parse,
        ErrorKind::InvalidRequest,
        ErrorKind::MethodNotFound,
        ErrorKind::InvalidParams,
        ErrorKind::Internal,
        ErrorKind::TaskNotFound,
        ErrorKind::TaskNotCancelable,
        ErrorKind::PushNotificationNotSupported,
        ErrorKind::UnsupportedOperation,
        ErrorKind::ContentTypeNotSupported,
        ErrorKind::InvalidAgentResponse,
        ErrorKind::ExtendedAgentCardNotConfigured,
        ErrorKind::ExtensionSupportRequired,
        ErrorKind::VersionNotSupported,
    ];

    /// The JSON-RPC error code.
    pub fn code(self) -> i64 {
        match self {
            ErrorKind::Parse => -32700,
            ErrorKind::InvalidRequest => -32600,
            ErrorKind::MethodNotFound => -32601,
            ErrorKind::InvalidParams => -32602,
            ErrorKind::Internal => -32603,
            ErrorKind::TaskNotFound => -32001,
            ErrorKind::TaskNotCancelable => -32002,
            ErrorKind::PushNotificationNotSupported => -32003,
            ErrorKind::UnsupportedOperation => -32004,
            ErrorKind::ContentTypeNotSupported => -32005,
            ErrorKind::InvalidAgentResponse => -32006,
            ErrorKind::ExtendedAgentCardNotConfigured => -32007,
            ErrorKind::ExtensionSupportRequired => -32008,
            ErrorKind::VersionNotSupported => -32009,
            ErrorKind::Other(code) => code,
        }
    }

    /// The kind for a JSON-RPC code (unknown codes give [`ErrorKind::Other`]).
    pub fn from_code(code: i64) -> ErrorKind {
        ErrorKind::ALL
            .into_iter()
            .find(|k| k.code() == code)
            .unwrap_or(ErrorKind::Other(code))
    }

    /// The `google.rpc.ErrorInfo` reason written in 1.0 (`TASK_NOT_FOUND`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Parse => "PARSE_ERROR",
            ErrorKind::InvalidRequest => "INVALID_REQUEST",
            ErrorKind::MethodNotFound => "METHOD_NOT_FOUND",
            ErrorKind::InvalidParams => "INVALID_PARAMS",
            ErrorKind::Internal => "INTERNAL_ERROR",
            ErrorKind::TaskNotFound => "TASK_NOT_FOUND",
            ErrorKind::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            ErrorKind::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ErrorKind::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            ErrorKind::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            ErrorKind::InvalidAgentResponse => "INVALID_AGENT_RESPONSE",
            ErrorKind::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ErrorKind::ExtensionSupportRequired => "EXTENSION_SUPPORT_REQUIRED",
            ErrorKind::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            ErrorKind::Other(_) => "UNKNOWN",
        }
    }

    /// The HTTP status of the kind in the HTTP+JSON binding (spec 1.0 §5.4; the JSON-RPC
    /// codes of §5.4's first rows as a2a-sdk maps them).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::TaskNotFound | ErrorKind::MethodNotFound => 404,
            ErrorKind::Internal | ErrorKind::InvalidAgentResponse | ErrorKind::Other(_) => 500,
            _ => 400,
        }
    }

    /// The `google.rpc.Code` of the kind, by name (spec 1.0 §5.4's gRPC column; the HTTP+JSON
    /// binding writes it as the error's `status`).
    pub fn rpc_code(self) -> &'static str {
        match self {
            ErrorKind::TaskNotFound | ErrorKind::MethodNotFound => "NOT_FOUND",
            ErrorKind::Parse
            | ErrorKind::InvalidRequest
            | ErrorKind::InvalidParams
            | ErrorKind::ContentTypeNotSupported => "INVALID_ARGUMENT",
            ErrorKind::Internal | ErrorKind::InvalidAgentResponse | ErrorKind::Other(_) => {
                "INTERNAL"
            }
            ErrorKind::TaskNotCancelable
            | ErrorKind::PushNotificationNotSupported
            | ErrorKind::UnsupportedOperation
            | ErrorKind::ExtendedAgentCardNotConfigured
            | ErrorKind::ExtensionSupportRequired
            | ErrorKind::VersionNotSupported => "FAILED_PRECONDITION",
        }
    }

    /// The standard message of the kind (used when a constructor is given no text).
    pub fn default_message(self) -> &'static str {
        match self {
            ErrorKind::Parse => "Invalid JSON payload",
            ErrorKind::InvalidRequest => "Request payload validation error",
            ErrorKind::MethodNotFound => "Method not found",
            ErrorKind::InvalidParams => "Invalid parameters",
            ErrorKind::Internal => "Internal error",
            ErrorKind::TaskNotFound => "Task not found",
            ErrorKind::TaskNotCancelable => "Task cannot be canceled",
            ErrorKind::PushNotificationNotSupported => "Push Notification is not supported",
            ErrorKind::UnsupportedOperation => "This operation is not supported",
            ErrorKind::ContentTypeNotSupported => "Incompatible content types",
            ErrorKind::InvalidAgentResponse => "Invalid agent response",
            ErrorKind::ExtendedAgentCardNotConfigured => "Extended agent card is not configured",
            ErrorKind::ExtensionSupportRequired => "A required extension is not supported",
            ErrorKind::VersionNotSupported => "Protocol version is not supported",
            ErrorKind::Other(_) => "Error",
        }
    }
}

/// An A2A error: kind (hence code), message and optional structured data.
///
/// `data` is dialect-neutral: an object of details (`{"taskId": "…"}`, `{"field": "…"}`) or
/// any JSON a peer sent. [`A2aError::to_json`] turns it into each dialect's error object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{} ({}): {message}", kind.reason(), kind.code())]
pub struct A2aError {
    /// What went wrong; fixes the JSON-RPC code.
    pub kind: ErrorKind,
    /// Human-readable description (names the offending field for validation errors).
    pub message: String,
    /// Optional structured details.
    pub data: Option<Value>,
}

impl A2aError {
    /// A new error of `kind` with `message` and no data.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        A2aError {
            kind,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches structured data.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The JSON-RPC code.
    pub fn code(&self) -> i64 {
        self.kind.code()
    }

    /// `-32700`: invalid JSON.
    pub fn parse(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Parse, message)
    }

    /// `-32600`: not a valid JSON-RPC request object.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    /// `-32600` naming the offending member (`field` is recorded in `data.field`).
    pub fn invalid_request_at(field: &str, description: impl std::fmt::Display) -> Self {
        Self::new(ErrorKind::InvalidRequest, format!("{field}: {description}"))
            .with_data(json!({ "field": field }))
    }

    /// `-32601`: the method `method` does not exist.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            ErrorKind::MethodNotFound,
            format!("Method not found: {method}"),
        )
        .with_data(json!({ "method": method }))
    }

    /// `-32602` with a message; prefer [`A2aError::invalid_params_at`] to name the field.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    /// `-32602` naming the offending field (`"params.message.parts: must not be empty"`).
    pub fn invalid_params_at(field: &str, description: impl std::fmt::Display) -> Self {
        Self::new(ErrorKind::InvalidParams, format!("{field}: {description}"))
            .with_data(json!({ "field": field }))
    }

    /// `-32603`: internal error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// `-32001`: no task with this id.
    pub fn task_not_found(task_id: &str) -> Self {
        Self::new(
            ErrorKind::TaskNotFound,
            format!("Task not found: {task_id}"),
        )
        .with_data(json!({ "taskId": task_id }))
    }

    /// `-32002`: the task cannot be canceled (already terminal).
    pub fn task_not_cancelable(task_id: &str) -> Self {
        Self::new(
            ErrorKind::TaskNotCancelable,
            format!("Task cannot be canceled: {task_id}"),
        )
        .with_data(json!({ "taskId": task_id }))
    }

    /// `-32003`: push notifications are not supported.
    pub fn push_notification_not_supported() -> Self {
        Self::new(
            ErrorKind::PushNotificationNotSupported,
            ErrorKind::PushNotificationNotSupported.default_message(),
        )
    }

    /// `-32004`: the operation is not supported.
    pub fn unsupported_operation(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnsupportedOperation, message)
    }

    /// `-32005`: the media type is not supported.
    pub fn content_type_not_supported(media_type: &str) -> Self {
        Self::new(
            ErrorKind::ContentTypeNotSupported,
            format!("Content type not supported: {media_type}"),
        )
        .with_data(json!({ "mediaType": media_type }))
    }

    /// `-32006`: an agent's response does not conform to the method.
    pub fn invalid_agent_response(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidAgentResponse, message)
    }

    /// `-32007`: no extended agent card is configured.
    pub fn extended_card_not_configured() -> Self {
        Self::new(
            ErrorKind::ExtendedAgentCardNotConfigured,
            ErrorKind::ExtendedAgentCardNotConfigured.default_message(),
        )
    }

    /// `-32008`: the client must support extension `uri`.
    pub fn extension_support_required(uri: &str) -> Self {
        Self::new(
            ErrorKind::ExtensionSupportRequired,
            format!("Extension support required: {uri}"),
        )
        .with_data(json!({ "extension": uri }))
    }

    /// `-32009`: protocol version `version` is not supported.
    pub fn version_not_supported(version: &str) -> Self {
        Self::new(
            ErrorKind::VersionNotSupported,
            format!("Protocol version not supported: {version}"),
        )
        .with_data(json!({ "version": version }))
    }

    /// The JSON-RPC `error` object in `dialect`.
    pub fn to_json(&self, dialect: Dialect) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), Value::from(self.code()));
        obj.insert("message".into(), Value::from(self.message.clone()));
        match dialect {
            Dialect::V0_1 | Dialect::V0_3 => {
                if let Some(data) = &self.data {
                    obj.insert("data".into(), data.clone());
                }
            }
            Dialect::V1_0 => {
                obj.insert("data".into(), Value::Array(self.details_v1()));
            }
        }
        Value::Object(obj)
    }

    /// The error as the HTTP+JSON binding writes it (spec 1.0 §11.6): a `google.rpc.Status`
    /// under `error`, `code` the HTTP status, `status` the `google.rpc.Code` name, `details`
    /// the `ErrorInfo` (and `BadRequest`) of the 1.0 JSON-RPC `data`.
    pub fn to_status_json(&self, http_status: u16) -> Value {
        json!({
            "error": {
                "code": http_status,
                "status": self.kind.rpc_code(),
                "message": self.message,
                "details": self.details_v1(),
            }
        })
    }

    /// The 1.0 `error.data` list: data already in that shape is kept, otherwise an
    /// `ErrorInfo` (metadata = the data object's members as strings) and, when `data.field`
    /// names a field, a `BadRequest`.
    fn details_v1(&self) -> Vec<Value> {
        if let Some(Value::Array(items)) = &self.data
            && items.iter().all(|i| i.get("@type").is_some())
        {
            return items.clone();
        }
        let mut details = Vec::new();
        let mut info = Map::new();
        info.insert("@type".into(), ERROR_INFO_TYPE.into());
        info.insert("reason".into(), self.kind.reason().into());
        info.insert("domain".into(), ERROR_DOMAIN.into());
        let mut field = None;
        match &self.data {
            Some(Value::Object(map)) => {
                let meta: Map<String, Value> = map
                    .iter()
                    .map(|(k, v)| {
                        let s = match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), Value::String(s))
                    })
                    .collect();
                field = map.get("field").and_then(Value::as_str);
                if !meta.is_empty() {
                    info.insert("metadata".into(), Value::Object(meta));
                }
            }
            Some(Value::Null) | None => {}
            Some(other) => {
                info.insert("metadata".into(), json!({ "data": other.to_string() }));
            }
        }
        details.push(Value::Object(info));
        if let Some(field) = field {
            let description = self
                .message
                .strip_prefix(field)
                .and_then(|m| m.strip_prefix(": "))
                .unwrap_or(&self.message);
            details.push(json!({
                "@type": BAD_REQUEST_TYPE,
                "fieldViolations": [{ "field": field, "description": description }],
            }));
        }
        details
    }

    /// Reads a JSON-RPC `error` object written in `dialect` (the inverse of
    /// [`A2aError::to_json`]; a 1.0 `ErrorInfo`'s metadata becomes `data`).
    pub fn from_json(value: Value, dialect: Dialect) -> Result<A2aError, A2aError> {
        let Value::Object(mut obj) = value else {
            return Err(A2aError::invalid_agent_response("error: must be an object"));
        };
        let code = obj
            .get("code")
            .and_then(Value::as_i64)
            .ok_or_else(|| A2aError::invalid_agent_response("error.code: must be an integer"))?;
        let kind = ErrorKind::from_code(code);
        let message = match obj.remove("message") {
            Some(Value::String(s)) => s,
            _ => kind.default_message().to_string(),
        };
        let data = match (dialect, obj.remove("data")) {
            (_, None) | (_, Some(Value::Null)) => None,
            (Dialect::V1_0, Some(Value::Array(items))) => Some(data_from_details(items)),
            (_, Some(other)) => Some(other),
        };
        Ok(A2aError {
            kind,
            message,
            data: data.filter(|d| !d.is_null()),
        })
    }
}

/// 1.0 details → neutral data: the `ErrorInfo` metadata (strings), or the list itself when
/// it carries something else.
fn data_from_details(items: Vec<Value>) -> Value {
    let only_known = items.iter().all(|i| {
        matches!(
            i.get("@type").and_then(Value::as_str),
            Some(ERROR_INFO_TYPE) | Some(BAD_REQUEST_TYPE)
        )
    });
    if !only_known {
        return Value::Array(items);
    }
    let mut out = Map::new();
    for item in items {
        if item.get("@type").and_then(Value::as_str) == Some(ERROR_INFO_TYPE)
            && let Some(Value::Object(meta)) = item.get("metadata")
        {
            for (k, v) in meta {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if out.is_empty() {
        Value::Null
    } else {
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_in_every_dialect() {
        for kind in ErrorKind::ALL {
            let err = A2aError::new(kind, "boom").with_data(json!({"taskId": "t1"}));
            for d in Dialect::ALL {
                let v = err.to_json(d);
                assert_eq!(v["code"], kind.code());
                assert_eq!(v["message"], "boom");
                match d {
                    Dialect::V1_0 => {
                        assert_eq!(v["data"][0]["@type"], ERROR_INFO_TYPE);
                        assert_eq!(v["data"][0]["reason"], kind.reason());
                        assert_eq!(v["data"][0]["domain"], ERROR_DOMAIN);
                        assert_eq!(v["data"][0]["metadata"]["taskId"], "t1");
                    }
                    _ => assert_eq!(v["data"]["taskId"], "t1"),
                }
                let back = A2aError::from_json(v, d).expect("reads back");
                assert_eq!(back, err, "{kind:?} in {d:?}");
            }
        }
    }

    #[test]
    fn spec_numbering() {
        assert_eq!(ErrorKind::ExtendedAgentCardNotConfigured.code(), -32007);
        assert_eq!(ErrorKind::ExtensionSupportRequired.code(), -32008);
        assert_eq!(ErrorKind::VersionNotSupported.code(), -32009);
        assert_eq!(ErrorKind::from_code(-32050), ErrorKind::Other(-32050));
    }

    #[test]
    fn bad_request_detail_in_v1() {
        let err = A2aError::invalid_params_at("params.message.parts", "must not be empty");
        assert_eq!(err.message, "params.message.parts: must not be empty");
        let v = err.to_json(Dialect::V1_0);
        assert_eq!(v["data"][1]["@type"], BAD_REQUEST_TYPE);
        assert_eq!(
            v["data"][1]["fieldViolations"][0]["field"],
            "params.message.parts"
        );
        assert_eq!(
            v["data"][1]["fieldViolations"][0]["description"],
            "must not be empty"
        );
        let v = err.to_json(Dialect::V0_3);
        assert_eq!(v["data"]["field"], "params.message.parts");
    }

    #[test]
    fn constructors_have_their_codes() {
        assert_eq!(A2aError::task_not_found("x").code(), -32001);
        assert_eq!(A2aError::task_not_cancelable("x").code(), -32002);
        assert_eq!(A2aError::push_notification_not_supported().code(), -32003);
        assert_eq!(A2aError::unsupported_operation("x").code(), -32004);
        assert_eq!(A2aError::content_type_not_supported("x").code(), -32005);
        assert_eq!(A2aError::invalid_agent_response("x").code(), -32006);
        assert_eq!(A2aError::extended_card_not_configured().code(), -32007);
        assert_eq!(A2aError::extension_support_required("x").code(), -32008);
        assert_eq!(A2aError::version_not_supported("x").code(), -32009);
        assert_eq!(A2aError::parse("x").code(), -32700);
        assert_eq!(A2aError::invalid_request("x").code(), -32600);
        assert_eq!(A2aError::method_not_found("x").code(), -32601);
        assert_eq!(A2aError::invalid_params("x").code(), -32602);
        assert_eq!(A2aError::internal("x").code(), -32603);
        assert!(
            A2aError::method_not_found("foo/bar")
                .message
                .contains("foo/bar")
        );
    }
}
