//! Every A2A error's gRPC code and ErrorInfo; data, field violations, bounds; the gateway's
//! refusals.

use axum::http;
use serde_json::json;
use tonic_types::StatusExt;

use super::*;

/// §5.4's table, and the JSON-RPC kinds as a2a-sdk 1.3's gRPC handler maps them.
const TABLE: [(ErrorKind, Code, &str); 14] = [
    (ErrorKind::Parse, Code::InvalidArgument, "PARSE_ERROR"),
    (
        ErrorKind::InvalidRequest,
        Code::InvalidArgument,
        "INVALID_REQUEST",
    ),
    (
        ErrorKind::MethodNotFound,
        Code::NotFound,
        "METHOD_NOT_FOUND",
    ),
    (
        ErrorKind::InvalidParams,
        Code::InvalidArgument,
        "INVALID_PARAMS",
    ),
    (ErrorKind::Internal, Code::Internal, "INTERNAL_ERROR"),
    (ErrorKind::TaskNotFound, Code::NotFound, "TASK_NOT_FOUND"),
    (
        ErrorKind::TaskNotCancelable,
        Code::FailedPrecondition,
        "TASK_NOT_CANCELABLE",
    ),
    (
        ErrorKind::PushNotificationNotSupported,
        Code::FailedPrecondition,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        ErrorKind::UnsupportedOperation,
        Code::FailedPrecondition,
        "UNSUPPORTED_OPERATION",
    ),
    (
        ErrorKind::ContentTypeNotSupported,
        Code::InvalidArgument,
        "CONTENT_TYPE_NOT_SUPPORTED",
    ),
    (
        ErrorKind::InvalidAgentResponse,
        Code::Internal,
        "INVALID_AGENT_RESPONSE",
    ),
    (
        ErrorKind::ExtendedAgentCardNotConfigured,
        Code::FailedPrecondition,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    ),
    (
        ErrorKind::ExtensionSupportRequired,
        Code::FailedPrecondition,
        "EXTENSION_SUPPORT_REQUIRED",
    ),
    (
        ErrorKind::VersionNotSupported,
        Code::FailedPrecondition,
        "VERSION_NOT_SUPPORTED",
    ),
];

/// The reasons a2a-sdk 1.3's gRPC client turns into its exception classes
/// (`A2A_REASON_TO_ERROR` in `a2a/utils/errors.py`); `PARSE_ERROR` is not among them.
const SDK_REASONS: [&str; 13] = [
    "TASK_NOT_FOUND",
    "TASK_NOT_CANCELABLE",
    "PUSH_NOTIFICATION_NOT_SUPPORTED",
    "UNSUPPORTED_OPERATION",
    "CONTENT_TYPE_NOT_SUPPORTED",
    "INVALID_AGENT_RESPONSE",
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    "EXTENSION_SUPPORT_REQUIRED",
    "VERSION_NOT_SUPPORTED",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INTERNAL_ERROR",
];

/// The status as a client reads it: through the HTTP headers it is sent as.
fn over_the_wire(status: Status) -> Status {
    let response: http::Response<()> = status.into_http();
    Status::from_header_map(response.headers()).expect("a grpc-status header")
}

fn error_info(status: &Status) -> tonic_types::ErrorInfo {
    status
        .get_details_error_info()
        .expect("an ErrorInfo detail")
}

#[test]
fn every_kind_has_its_code_and_reason() {
    assert_eq!(TABLE.len(), ErrorKind::ALL.len());
    for (kind, expected_code, reason) in TABLE {
        assert!(ErrorKind::ALL.contains(&kind));
        let status = over_the_wire(to_status(&A2aError::new(kind, "boom")));
        assert_eq!(status.code(), expected_code, "{kind:?}");
        assert_eq!(status.message(), "boom");
        let info = error_info(&status);
        assert_eq!(info.reason, reason, "{kind:?}");
        assert_eq!(info.domain, "a2a-protocol.org");
        assert!(info.metadata.is_empty());
        assert!(status.get_details_bad_request().is_none());
    }
}

#[test]
fn every_reason_the_sdk_keys_on_is_written_for_its_kind() {
    for reason in SDK_REASONS {
        let (kind, _, _) = TABLE
            .iter()
            .find(|(_, _, r)| *r == reason)
            .expect("a kind for each SDK reason");
        assert_eq!(
            error_info(&to_status(&A2aError::new(*kind, "x"))).reason,
            reason
        );
    }
}

#[test]
fn a_code_outside_the_table_is_unknown() {
    let status = to_status(&A2aError::new(ErrorKind::Other(-32099), "odd"));
    assert_eq!(status.code(), Code::Unknown);
    assert_eq!(error_info(&status).reason, "UNKNOWN");
}

#[test]
fn data_becomes_error_info_metadata() {
    let status = over_the_wire(to_status(&A2aError::task_not_found("task-123")));
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.message(), "Task not found: task-123");
    let info = error_info(&status);
    assert_eq!(
        info.metadata.get("taskId").map(String::as_str),
        Some("task-123")
    );

    let err = A2aError::internal("x").with_data(json!({"n": 3, "nested": {"a": [1]}}));
    let info = error_info(&to_status(&err));
    assert_eq!(info.metadata.get("n").map(String::as_str), Some("3"));
    assert_eq!(
        info.metadata.get("nested").map(String::as_str),
        Some(r#"{"a":[1]}"#)
    );

    let err = A2aError::internal("x").with_data(json!("just text"));
    let info = error_info(&to_status(&err));
    assert_eq!(
        info.metadata.get("data").map(String::as_str),
        Some(r#""just text""#)
    );
}

#[test]
fn a_named_field_becomes_a_bad_request_violation() {
    let err = A2aError::invalid_params_at("message.parts", "must not be empty");
    let status = over_the_wire(to_status(&err));
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "message.parts: must not be empty");
    assert_eq!(error_info(&status).reason, "INVALID_PARAMS");
    let bad = status
        .get_details_bad_request()
        .expect("a BadRequest detail");
    assert_eq!(bad.field_violations.len(), 1);
    assert_eq!(bad.field_violations[0].field, "message.parts");
    assert_eq!(bad.field_violations[0].description, "must not be empty");
}

#[test]
fn details_a_peer_sent_in_the_1_0_shape_carry_over() {
    let err = A2aError::new(ErrorKind::InvalidParams, "bad").with_data(json!([
        {
            "@type": ERROR_INFO_TYPE,
            "reason": "SOMETHING_ELSE",
            "domain": "example.com",
            "metadata": {"field": "message.role"},
        },
        {
            "@type": BAD_REQUEST_TYPE,
            "fieldViolations": [{"field": "message.role", "description": "missing"}],
        },
        {"@type": "type.googleapis.com/google.rpc.Help", "links": []},
    ]));
    let status = to_status(&err);
    let info = error_info(&status);
    assert_eq!(info.reason, "INVALID_PARAMS");
    assert_eq!(info.domain, "a2a-protocol.org");
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some("message.role")
    );
    let bad = status
        .get_details_bad_request()
        .expect("a BadRequest detail");
    assert_eq!(bad.field_violations[0].field, "message.role");
    assert_eq!(bad.field_violations[0].description, "missing");
}

#[test]
fn message_and_metadata_are_bounded() {
    let long = "é".repeat(2_000);
    let mut data = serde_json::Map::new();
    for i in 0..50 {
        data.insert(
            format!("{i:02}{}", "k".repeat(100)),
            json!("v".repeat(1_000)),
        );
    }
    let err = A2aError::internal(long).with_data(Value::Object(data));
    let status = over_the_wire(to_status(&err));
    assert!(status.message().len() <= MAX_MESSAGE_BYTES);
    assert!(status.message().ends_with('…'));
    assert!(status.message().starts_with("éé"));
    let info = error_info(&status);
    assert_eq!(info.metadata.len(), MAX_METADATA_ENTRIES);
    for (k, v) in &info.metadata {
        assert!(k.len() <= MAX_METADATA_KEY_BYTES);
        assert!(v.len() <= MAX_METADATA_VALUE_BYTES);
    }
    // The first keys in order are the ones kept.
    assert!(info.metadata.keys().any(|k| k.starts_with("00")));
    // Both status headers together stay well under gRPC's default 8 KiB of metadata.
    let response: http::Response<()> = status.into_http();
    let size: usize = response
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    assert!(size < 6 * 1024, "{size} bytes of headers");
}

#[test]
fn cut_keeps_whole_characters() {
    assert_eq!(cut("short", 10), "short");
    assert_eq!(cut("abcdef", 5), "ab…");
    let s = cut("ééééé", 6);
    assert!(s.len() <= 6);
    assert_eq!(s, "é…");
    assert_eq!(cut("abc", 0), "…");
}

#[test]
fn version_not_supported_names_the_version() {
    let status = over_the_wire(version_not_supported("2.0"));
    assert_eq!(status.code(), Code::FailedPrecondition);
    let info = error_info(&status);
    assert_eq!(info.reason, "VERSION_NOT_SUPPORTED");
    assert_eq!(
        info.metadata.get("version").map(String::as_str),
        Some("2.0")
    );
}

#[test]
fn the_details_repeat_the_code_and_message_of_the_call() {
    // a2a-sdk raises ValueError, not the A2A error, when google.rpc.Status in
    // grpc-status-details-bin disagrees with grpc-status / grpc-message.
    use prost::Message as _;
    for (kind, _, _) in TABLE {
        let status = over_the_wire(to_status(&A2aError::new(kind, "ünïcode: 100% sure")));
        let rpc = tonic_types::pb::Status::decode(status.details()).expect("google.rpc.Status");
        assert_eq!(rpc.code, status.code() as i32);
        assert_eq!(rpc.message, status.message());
    }
}
