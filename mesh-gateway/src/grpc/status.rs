//! A2A errors as gRPC statuses (A2A 1.0 §10.6 and the table of §5.4). (A call past the body
//! limit is refused by tonic itself, `OUT_OF_RANGE`; one without credentials by the
//! authentication layer, `UNAUTHENTICATED`.)
//!
//! [`to_status`] gives every [`A2aError`]:
//! - the gRPC code of §5.4 ([`code`]): `NOT_FOUND` for TaskNotFound, `FAILED_PRECONDITION`
//!   for TaskNotCancelable, PushNotificationNotSupported, UnsupportedOperation,
//!   ExtendedAgentCardNotConfigured, ExtensionSupportRequired and VersionNotSupported,
//!   `INVALID_ARGUMENT` for ContentTypeNotSupported, `INTERNAL` for InvalidAgentResponse;
//!   the JSON-RPC errors as the official SDK maps them (InvalidParams, InvalidRequest and
//!   Parse: `INVALID_ARGUMENT`; MethodNotFound: `NOT_FOUND`; Internal: `INTERNAL`); a code
//!   from outside the table: `UNKNOWN`;
//! - its message as the status message;
//! - a `google.rpc.ErrorInfo` detail: `reason` the kind in UPPER_SNAKE_CASE without "Error"
//!   ([`ErrorKind::reason`]: `TASK_NOT_FOUND`, …), `domain` `a2a-protocol.org`, `metadata`
//!   the error's data (an object's members, non-strings as JSON text; any other data under
//!   `data`), as the JSON-RPC 1.0 `error.data` carries it;
//! - when the data names a `field` (validation errors), a `google.rpc.BadRequest` with that
//!   field violation.
//!
//! The official Python SDK (a2a-sdk 1.3) reads these back by the ErrorInfo `reason` when the
//! `domain` is `a2a-protocol.org` (and a BadRequest's violations as `data.errors`); it also
//! requires the status in `grpc-status-details-bin` to repeat the call's code and message
//! exactly, which `tonic_types` does. Status headers travel in HTTP/2 trailers that clients
//! bound (gRPC's default is 8 KiB of metadata), so the message and the metadata are cut to
//! fixed sizes here.

use std::collections::HashMap;

use mesh_core::error::{A2aError, BAD_REQUEST_TYPE, ERROR_DOMAIN, ERROR_INFO_TYPE, ErrorKind};
use serde_json::Value;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The longest status message written, in bytes (a longer one is cut, ending in `…`).
pub(crate) const MAX_MESSAGE_BYTES: usize = 512;
/// The most ErrorInfo metadata entries written (the first ones by key).
pub(crate) const MAX_METADATA_ENTRIES: usize = 8;
/// The longest ErrorInfo metadata key written (ErrorInfo asks for at most 64 characters).
pub(crate) const MAX_METADATA_KEY_BYTES: usize = 64;
/// The longest ErrorInfo metadata value written.
pub(crate) const MAX_METADATA_VALUE_BYTES: usize = 128;
/// The longest BadRequest field path and description written.
const MAX_VIOLATION_BYTES: usize = 256;

/// The gRPC code of an A2A error kind (§5.4; JSON-RPC kinds as the official SDK maps them).
pub(crate) fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::TaskNotFound | ErrorKind::MethodNotFound => Code::NotFound,
        ErrorKind::TaskNotCancelable
        | ErrorKind::PushNotificationNotSupported
        | ErrorKind::UnsupportedOperation
        | ErrorKind::ExtendedAgentCardNotConfigured
        | ErrorKind::ExtensionSupportRequired
        | ErrorKind::VersionNotSupported => Code::FailedPrecondition,
        ErrorKind::ContentTypeNotSupported
        | ErrorKind::InvalidParams
        | ErrorKind::InvalidRequest
        | ErrorKind::Parse => Code::InvalidArgument,
        ErrorKind::InvalidAgentResponse | ErrorKind::Internal => Code::Internal,
        ErrorKind::Other(_) => Code::Unknown,
    }
}

/// The gRPC status of an A2A error: code, message, ErrorInfo and (for a named field)
/// BadRequest.
pub(crate) fn to_status(err: &A2aError) -> Status {
    status_with(code(err.kind), err, MetadataMap::new())
}

fn status_with(code: Code, err: &A2aError, metadata: MetadataMap) -> Status {
    let message = cut(&err.message, MAX_MESSAGE_BYTES);
    let (info, violation) = details_of(err);
    let mut details = ErrorDetails::new();
    details.set_error_info(err.kind.reason(), ERROR_DOMAIN, info);
    if let Some((field, description)) = violation {
        details.add_bad_request_violation(
            cut(&field, MAX_VIOLATION_BYTES),
            cut(&description, MAX_VIOLATION_BYTES),
        );
    }
    Status::with_error_details_and_metadata(code, message, details, metadata)
}

/// The `A2A-Version` asked for is not served: `FAILED_PRECONDITION` with reason
/// `VERSION_NOT_SUPPORTED`.
pub(crate) fn version_not_supported(version: &str) -> Status {
    to_status(&A2aError::version_not_supported(version))
}

/// ErrorInfo metadata and the field violation (field, description) of an error's data.
fn details_of(err: &A2aError) -> (HashMap<String, String>, Option<(String, String)>) {
    let mut info = HashMap::new();
    let mut violation = None;
    match &err.data {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map.iter().take(MAX_METADATA_ENTRIES) {
                info.insert(cut(k, MAX_METADATA_KEY_BYTES), metadata_value(v));
            }
            if let Some(field) = map.get("field").and_then(Value::as_str) {
                let description = err
                    .message
                    .strip_prefix(field)
                    .and_then(|m| m.strip_prefix(": "))
                    .unwrap_or(&err.message);
                violation = Some((field.to_owned(), description.to_owned()));
            }
        }
        // 1.0 details a peer sent (ProtoJSON `Any`s): their ErrorInfo metadata and first
        // field violation carry over; the kind's own reason is written.
        Some(Value::Array(items)) if items.iter().all(|i| i.get("@type").is_some()) => {
            for item in items {
                match item.get("@type").and_then(Value::as_str) {
                    Some(ERROR_INFO_TYPE) => {
                        if let Some(Value::Object(meta)) = item.get("metadata") {
                            for (k, v) in meta.iter().take(MAX_METADATA_ENTRIES) {
                                info.insert(cut(k, MAX_METADATA_KEY_BYTES), metadata_value(v));
                            }
                        }
                    }
                    Some(BAD_REQUEST_TYPE) if violation.is_none() => {
                        let first = item
                            .get("fieldViolations")
                            .and_then(Value::as_array)
                            .and_then(|v| v.first());
                        if let Some(first) = first {
                            let text = |key: &str| {
                                first
                                    .get(key)
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_owned()
                            };
                            violation = Some((text("field"), text("description")));
                        }
                    }
                    _ => {}
                }
            }
        }
        Some(other) => {
            info.insert(
                "data".into(),
                cut(&other.to_string(), MAX_METADATA_VALUE_BYTES),
            );
        }
    }
    (info, violation)
}

/// A data member as ErrorInfo metadata text (strings as they are, the rest as JSON).
fn metadata_value(v: &Value) -> String {
    match v {
        Value::String(s) => cut(s, MAX_METADATA_VALUE_BYTES),
        other => cut(&other.to_string(), MAX_METADATA_VALUE_BYTES),
    }
}

/// `s` cut to at most `max` bytes on a character boundary, ending in `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + ellipsis.len_utf8());
    out.push_str(&s[..end]);
    out.push(ellipsis);
    out
}

#[cfg(test)]
mod tests;
