//! Round trips model → proto → model, and the proto requests' readings (valid and invalid).

use std::collections::HashMap;

use chrono::{DateTime, TimeZone, Utc};
use mesh_core::error::ErrorKind;
use serde_json::json;

use super::*;

fn meta(v: Value) -> Option<Metadata> {
    match v {
        Value::Object(map) => Some(map.into_iter().collect()),
        _ => panic!("metadata must be an object"),
    }
}

fn time(secs: i64, nanos: u32) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, nanos).single().expect("valid time")
}

/// Nested values, integers (small, negative, 2⁵³), floats, booleans, null, lists.
fn rich_metadata() -> Option<Metadata> {
    meta(json!({
        "count": 42,
        "negative": -7,
        "big": 9_007_199_254_740_992_i64,
        "ratio": 0.25,
        "flag": true,
        "nothing": null,
        "nested": {"list": [1, "two", {"three": 3.5}, [false]], "empty": {}},
    }))
}

fn every_part() -> Vec<m::Part> {
    vec![
        m::Part::text("hello").with_media_type("text/plain"),
        m::Part::raw(vec![0, 1, 2, 254, 255])
            .with_filename("blob.bin")
            .with_media_type("application/octet-stream"),
        m::Part::url("https://example.com/doc.pdf").with_filename("doc.pdf"),
        m::Part {
            content: m::PartContent::Data(json!({"a": [1, 2.5, null], "b": {"c": "d"}})),
            filename: None,
            media_type: Some("application/json".into()),
            metadata: meta(json!({"partKey": 1})),
        },
        m::Part::data(json!("a bare string")),
        m::Part::data(json!(17)),
    ]
}

fn full_message(role: m::Role) -> m::Message {
    m::Message {
        message_id: "m-1".into(),
        context_id: Some("ctx-1".into()),
        task_id: Some("task-1".into()),
        role,
        parts: every_part(),
        metadata: rich_metadata(),
        extensions: Some(vec!["https://example.com/ext/v1".into()]),
        reference_task_ids: Some(vec!["task-0".into()]),
    }
}

fn full_task() -> m::Task {
    m::Task {
        id: "task-1".into(),
        context_id: "ctx-1".into(),
        status: m::TaskStatus {
            state: m::TaskState::InputRequired,
            message: Some(full_message(m::Role::Agent)),
            timestamp: Some(time(1_761_000_000, 123_456_789)),
        },
        artifacts: Some(vec![
            m::Artifact {
                artifact_id: "a-1".into(),
                name: Some("result".into()),
                description: Some("the answer".into()),
                parts: every_part(),
                metadata: rich_metadata(),
                extensions: Some(vec!["https://example.com/ext/v1".into()]),
            },
            m::Artifact {
                artifact_id: "a-2".into(),
                name: None,
                description: None,
                parts: vec![m::Part::text("second")],
                metadata: None,
                extensions: None,
            },
        ]),
        history: Some(vec![
            full_message(m::Role::User),
            full_message(m::Role::Agent),
        ]),
        metadata: rich_metadata(),
    }
}

#[test]
fn task_round_trips() {
    let task = full_task();
    let proto = pb::Task::from(task.clone());
    assert_eq!(
        proto.status.as_ref().map(|s| s.state),
        Some(pb::TaskState::InputRequired as i32)
    );
    assert_eq!(proto.artifacts.len(), 2);
    assert_eq!(proto.history.len(), 2);
    assert_eq!(task_from_proto(proto).expect("reads back"), task);
}

#[test]
fn a_task_without_optional_members_round_trips() {
    let task = m::Task {
        id: "t".into(),
        context_id: String::new(),
        status: m::TaskStatus {
            state: m::TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: None,
        metadata: None,
    };
    assert_eq!(
        task_from_proto(task.clone().into()).expect("reads back"),
        task
    );
}

#[test]
fn message_with_every_part_kind_round_trips() {
    let msg = full_message(m::Role::User);
    let proto = pb::Message::from(msg.clone());
    let kinds: Vec<_> = proto
        .parts
        .iter()
        .map(|p| match p.content {
            Some(pb::part::Content::Text(_)) => "text",
            Some(pb::part::Content::Raw(_)) => "raw",
            Some(pb::part::Content::Url(_)) => "url",
            Some(pb::part::Content::Data(_)) => "data",
            None => "none",
        })
        .collect();
    assert_eq!(kinds, ["text", "raw", "url", "data", "data", "data"]);
    assert_eq!(proto.role, pb::Role::User as i32);
    assert_eq!(message_from_proto_result(proto).expect("reads back"), msg);
}

#[test]
fn every_state_and_role_round_trips() {
    for state in [
        m::TaskState::Unspecified,
        m::TaskState::Submitted,
        m::TaskState::Working,
        m::TaskState::Completed,
        m::TaskState::Failed,
        m::TaskState::Canceled,
        m::TaskState::InputRequired,
        m::TaskState::Rejected,
        m::TaskState::AuthRequired,
    ] {
        let n = state_to_proto(&state);
        assert_eq!(state_from_proto(n, &REQUEST).expect("known"), state);
    }
    for role in [m::Role::User, m::Role::Agent] {
        assert_eq!(
            role_from_proto(role_to_proto(&role), &REQUEST).expect("known"),
            role
        );
    }
}

#[test]
fn events_round_trip() {
    let status = m::StreamResponse::StatusUpdate(m::TaskStatusUpdateEvent {
        task_id: "task-1".into(),
        context_id: "ctx-1".into(),
        status: m::TaskStatus {
            state: m::TaskState::Working,
            message: Some(full_message(m::Role::Agent)),
            timestamp: Some(time(0, 1)),
        },
        metadata: rich_metadata(),
    });
    let artifact = m::StreamResponse::ArtifactUpdate(m::TaskArtifactUpdateEvent {
        task_id: "task-1".into(),
        context_id: "ctx-1".into(),
        artifact: full_task().artifacts.expect("artifacts").remove(0),
        append: Some(true),
        last_chunk: Some(true),
        metadata: meta(json!({"k": "v"})),
    });
    let first_chunk = m::StreamResponse::ArtifactUpdate(m::TaskArtifactUpdateEvent {
        task_id: "task-1".into(),
        context_id: "ctx-1".into(),
        artifact: full_task().artifacts.expect("artifacts").remove(1),
        append: None,
        last_chunk: None,
        metadata: None,
    });
    let task = m::StreamResponse::Task(full_task());
    let message = m::StreamResponse::Message(full_message(m::Role::Agent));
    for event in [status, artifact, first_chunk, task, message] {
        let proto = pb::StreamResponse::from(event.clone());
        assert!(proto.payload.is_some());
        assert_eq!(
            stream_response_from_proto(proto).expect("reads back"),
            event
        );
    }
    let none =
        stream_response_from_proto(pb::StreamResponse { payload: None }).expect_err("no payload");
    assert_eq!(none.kind, ErrorKind::InvalidAgentResponse);
}

#[test]
fn send_message_responses_round_trip() {
    for r in [
        m::SendMessageResponse::Task(full_task()),
        m::SendMessageResponse::Message(full_message(m::Role::Agent)),
    ] {
        let proto = pb::SendMessageResponse::from(r.clone());
        assert_eq!(
            send_message_response_from_proto(proto).expect("reads back"),
            r
        );
    }
}

#[test]
fn list_tasks_response_round_trips() {
    let r = m::ListTasksResponse {
        tasks: vec![full_task(), full_task()],
        next_page_token: "next".into(),
        page_size: 2,
        total_size: 7,
    };
    let proto = pb::ListTasksResponse::from(r.clone());
    assert_eq!(
        list_tasks_response_from_proto(proto).expect("reads back"),
        r
    );
}

fn push_config() -> m::TaskPushNotificationConfig {
    m::TaskPushNotificationConfig {
        url: "https://hooks.example.com/a2a".into(),
        id: Some("cfg-1".into()),
        task_id: "task-1".into(),
        token: Some("tok".into()),
        authentication: Some(m::AuthenticationInfo {
            scheme: "Bearer".into(),
            credentials: Some("secret".into()),
        }),
        tenant: Some("tenant-a".into()),
    }
}

#[test]
fn push_configs_round_trip() {
    let c = push_config();
    assert_eq!(
        push_config_from_proto(c.clone().into()).expect("reads back"),
        c
    );
    let bare = m::TaskPushNotificationConfig {
        url: "https://hooks.example.com/a2a".into(),
        id: None,
        task_id: "task-1".into(),
        token: None,
        authentication: Some(m::AuthenticationInfo {
            scheme: "Basic".into(),
            credentials: None,
        }),
        tenant: None,
    };
    assert_eq!(
        push_config_from_proto(bare.clone().into()).expect("reads back"),
        bare
    );
    let list = m::ListTaskPushNotificationConfigsResponse {
        configs: vec![c, bare],
        next_page_token: Some("p2".into()),
    };
    let proto = pb::ListTaskPushNotificationConfigsResponse::from(list.clone());
    assert_eq!(
        list_push_configs_response_from_proto(proto).expect("reads back"),
        list
    );
}

fn scopes() -> HashMap<String, String> {
    [("read".to_string(), "read things".to_string())]
        .into_iter()
        .collect()
}

fn full_card() -> m::AgentCard {
    let oauth = |flows| {
        m::SecurityScheme::OAuth2(m::OAuth2SecurityScheme {
            flows,
            description: Some("oauth".into()),
            oauth2_metadata_url: Some("https://auth.example.com/.well-known".into()),
        })
    };
    let schemes: HashMap<String, m::SecurityScheme> = [
        (
            "apiKey".to_string(),
            m::SecurityScheme::ApiKey(m::ApiKeySecurityScheme {
                location: "header".into(),
                name: "X-API-Key".into(),
                description: Some("a key".into()),
            }),
        ),
        (
            "bearer".to_string(),
            m::SecurityScheme::HttpAuth(m::HttpAuthSecurityScheme {
                scheme: "Bearer".into(),
                description: None,
                bearer_format: Some("JWT".into()),
            }),
        ),
        (
            "code".to_string(),
            oauth(m::OAuthFlows::AuthorizationCode(
                m::AuthorizationCodeOAuthFlow {
                    authorization_url: "https://auth.example.com/authorize".into(),
                    token_url: "https://auth.example.com/token".into(),
                    scopes: scopes(),
                    refresh_url: Some("https://auth.example.com/refresh".into()),
                    pkce_required: Some(true),
                },
            )),
        ),
        (
            "client".to_string(),
            oauth(m::OAuthFlows::ClientCredentials(
                m::ClientCredentialsOAuthFlow {
                    token_url: "https://auth.example.com/token".into(),
                    scopes: scopes(),
                    refresh_url: None,
                },
            )),
        ),
        (
            "device".to_string(),
            oauth(m::OAuthFlows::DeviceCode(m::DeviceCodeOAuthFlow {
                device_authorization_url: "https://auth.example.com/device".into(),
                token_url: "https://auth.example.com/token".into(),
                scopes: scopes(),
                refresh_url: None,
            })),
        ),
        (
            "implicit".to_string(),
            oauth(m::OAuthFlows::Implicit(m::ImplicitOAuthFlow {
                authorization_url: "https://auth.example.com/authorize".into(),
                scopes: HashMap::new(),
                refresh_url: None,
            })),
        ),
        (
            "password".to_string(),
            oauth(m::OAuthFlows::Password(m::PasswordOAuthFlow {
                token_url: "https://auth.example.com/token".into(),
                scopes: scopes(),
                refresh_url: Some("https://auth.example.com/refresh".into()),
            })),
        ),
        (
            "oidc".to_string(),
            m::SecurityScheme::OpenIdConnect(m::OpenIdConnectSecurityScheme {
                open_id_connect_url: "https://auth.example.com/.well-known/openid-configuration"
                    .into(),
                description: None,
            }),
        ),
        (
            "mtls".to_string(),
            m::SecurityScheme::MutualTls(m::MutualTlsSecurityScheme {
                description: Some("client certificates".into()),
            }),
        ),
    ]
    .into_iter()
    .collect();
    let requirement: m::SecurityRequirement = [
        ("bearer".to_string(), vec![]),
        ("code".to_string(), vec!["read".to_string()]),
    ]
    .into_iter()
    .collect();
    m::AgentCard {
        name: "Echo".into(),
        description: "Echoes".into(),
        version: "1.2.3".into(),
        supported_interfaces: vec![
            m::AgentInterface {
                url: "https://gw.example.com/agents/echo".into(),
                protocol_binding: "JSONRPC".into(),
                protocol_version: "1.0".into(),
                tenant: None,
            },
            m::AgentInterface {
                url: "gw.example.com:443".into(),
                protocol_binding: "GRPC".into(),
                protocol_version: "1.0".into(),
                tenant: Some("echo".into()),
            },
        ],
        capabilities: m::AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: Some(vec![
                m::AgentExtension {
                    uri: "https://example.com/ext/v1".into(),
                    description: Some("an extension".into()),
                    required: Some(true),
                    params: meta(json!({"depth": 3, "modes": ["a", "b"]})),
                },
                m::AgentExtension {
                    uri: "https://example.com/ext/v2".into(),
                    description: None,
                    required: None,
                    params: None,
                },
            ]),
            extended_agent_card: Some(true),
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills: vec![
            m::AgentSkill {
                id: "echo".into(),
                name: "Echo".into(),
                description: "Says it back".into(),
                tags: vec!["test".into()],
                examples: Some(vec!["hello".into()]),
                input_modes: Some(vec!["text/plain".into()]),
                output_modes: Some(vec!["text/plain".into()]),
                security_requirements: Some(vec![requirement.clone()]),
            },
            m::AgentSkill {
                id: "plain".into(),
                name: "Plain".into(),
                description: "Nothing optional".into(),
                tags: vec![],
                examples: None,
                input_modes: None,
                output_modes: None,
                security_requirements: None,
            },
        ],
        provider: Some(m::AgentProvider {
            organization: "Mesh".into(),
            url: "https://mesh.example.com".into(),
        }),
        documentation_url: Some("https://mesh.example.com/docs".into()),
        icon_url: Some("https://mesh.example.com/icon.png".into()),
        security_schemes: Some(schemes),
        security_requirements: Some(vec![requirement]),
        signatures: Some(vec![m::AgentCardSignature {
            protected: "eyJhbGciOiJFUzI1NiJ9".into(),
            signature: "c2lnbmF0dXJl".into(),
            header: meta(json!({"kid": "key-1"})),
        }]),
    }
}

#[test]
fn agent_card_round_trips() {
    let card = full_card();
    let proto = pb::AgentCard::from(card.clone());
    assert_eq!(proto.security_schemes.len(), 9);
    assert_eq!(proto.supported_interfaces[1].tenant, "echo");
    assert_eq!(agent_card_from_proto(proto).expect("reads back"), card);
}

#[test]
fn a_grpc_interface_url_is_written_as_the_card_json_writes_it() {
    let mut card = full_card();
    card.supported_interfaces = vec![m::AgentInterface {
        url: "http://127.0.0.1:50051".into(),
        protocol_binding: "GRPC".into(),
        protocol_version: "1.0".into(),
        tenant: None,
    }];
    let proto = pb::AgentCard::from(card.clone());
    let json = serde_json::to_value(&card).expect("serializes");
    assert_eq!(
        json["supportedInterfaces"][0]["url"],
        proto.supported_interfaces[0].url
    );
}

#[test]
fn a_card_scheme_without_variant_is_refused() {
    let mut proto = pb::AgentCard::from(full_card());
    proto
        .security_schemes
        .insert("broken".into(), pb::SecurityScheme { scheme: None });
    let err = agent_card_from_proto(proto).expect_err("no scheme");
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert!(
        err.message.contains("card.security_schemes.broken"),
        "{}",
        err.message
    );
}

// ---------------------------------------------------------------------------------------
// Values, numbers, timestamps

#[test]
fn integers_stay_integers_and_other_numbers_stay_floats() {
    let at = REQUEST;
    let back = |v: Value| json_from_proto(json_to_proto(v), &at).expect("finite");
    assert_eq!(back(json!(42)), json!(42));
    assert!(back(json!(42)).is_i64());
    assert_eq!(back(json!(-3)), json!(-3));
    assert_eq!(
        back(json!(9_007_199_254_740_992_i64)),
        json!(9_007_199_254_740_992_i64)
    );
    assert_eq!(back(json!(0.5)), json!(0.5));
    assert!(back(json!(1e300)).is_f64());
    // Past 2⁵³ an integral double is not an exact integer: it stays a float.
    assert!(back(json!(18_014_398_509_481_984_i64)).is_f64());
    assert_eq!(back(json!(null)), json!(null));
    assert_eq!(
        back(json!({"a": [true, "x", {"b": []}]})),
        json!({"a": [true, "x", {"b": []}]})
    );
}

#[test]
fn non_finite_numbers_are_refused_naming_the_field() {
    for n in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let s = prost_types::Struct {
            fields: [(
                "outer".to_string(),
                prost_types::Value {
                    kind: Some(Kind::ListValue(prost_types::ListValue {
                        values: vec![prost_types::Value {
                            kind: Some(Kind::NumberValue(n)),
                        }],
                    })),
                },
            )]
            .into_iter()
            .collect(),
        };
        let err = map_from_struct(s, &REQUEST.field("metadata")).expect_err("not finite");
        assert_eq!(err.kind, ErrorKind::InvalidParams);
        assert!(
            err.message
                .starts_with("metadata.outer[0]: must be a finite number"),
            "{}",
            err.message
        );
    }
}

#[test]
fn a_value_without_kind_reads_as_null() {
    let v = prost_types::Value { kind: None };
    assert_eq!(json_from_proto(v, &REQUEST).expect("null"), Value::Null);
}

#[test]
fn timestamps_round_trip_and_bounds_are_checked() {
    for t in [
        time(0, 0),
        time(1_761_000_000, 999_999_999),
        time(-62_135_596_800, 0),
        time(253_402_300_799, 999_999_999),
    ] {
        let back = timestamp_from_proto(timestamp_to_proto(&t), &REQUEST).expect("in range");
        assert_eq!(back, t);
    }
    let at = REQUEST.field("status_timestamp_after");
    for (seconds, nanos) in [
        (-62_135_596_801, 0),
        (253_402_300_800, 0),
        (i64::MAX, 0),
        (i64::MIN, 0),
        (0, -1),
        (0, 1_000_000_000),
    ] {
        let err = timestamp_from_proto(prost_types::Timestamp { seconds, nanos }, &at)
            .expect_err("out of range");
        assert!(
            err.message.starts_with("status_timestamp_after: "),
            "{}",
            err.message
        );
    }
}

// ---------------------------------------------------------------------------------------
// Requests

fn proto_message() -> pb::Message {
    pb::Message::from(full_message(m::Role::User))
}

#[test]
fn send_message_request_reads_every_field() {
    let r = pb::SendMessageRequest {
        tenant: "tenant-a".into(),
        message: Some(proto_message()),
        configuration: Some(pb::SendMessageConfiguration {
            accepted_output_modes: vec!["text/plain".into()],
            task_push_notification_config: Some(pb::TaskPushNotificationConfig {
                url: "https://hooks.example.com".into(),
                token: "tok".into(),
                ..Default::default()
            }),
            history_length: Some(0),
            return_immediately: true,
        }),
        metadata: Some(struct_from_map(rich_metadata().expect("metadata"))),
    };
    let req = send_message_request(r).expect("valid");
    assert_eq!(req.message, full_message(m::Role::User));
    assert_eq!(req.tenant.as_deref(), Some("tenant-a"));
    assert_eq!(req.metadata, rich_metadata());
    let cfg = req.configuration.expect("configuration");
    assert_eq!(
        cfg.accepted_output_modes,
        Some(vec!["text/plain".to_string()])
    );
    assert_eq!(cfg.history_length, Some(0));
    assert_eq!(cfg.return_immediately, Some(true));
    let push = cfg.task_push_notification_config.expect("push config");
    assert_eq!(push.url, "https://hooks.example.com");
    assert_eq!(push.task_id, "");
    assert_eq!(push.token.as_deref(), Some("tok"));
    assert_eq!(push.id, None);
}

#[test]
fn send_message_request_defaults_read_as_absent() {
    let r = pb::SendMessageRequest {
        message: Some(proto_message()),
        configuration: Some(pb::SendMessageConfiguration::default()),
        metadata: Some(prost_types::Struct::default()),
        ..Default::default()
    };
    let req = send_message_request(r).expect("valid");
    assert_eq!(req.configuration, None);
    assert_eq!(req.tenant, None);
    // Request-level metadata is kept as sent, like the JSON params.metadata.
    assert_eq!(req.metadata, Some(Metadata::new()));
}

fn send_error(edit: impl FnOnce(&mut pb::SendMessageRequest)) -> A2aError {
    let mut r = pb::SendMessageRequest {
        message: Some(proto_message()),
        ..Default::default()
    };
    edit(&mut r);
    let err = send_message_request(r).expect_err("invalid");
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    err
}

#[test]
fn invalid_sends_name_the_field() {
    type Edit = Box<dyn FnOnce(&mut pb::SendMessageRequest)>;
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|r| r.message = None), "message: missing"),
        (
            Box::new(|r| r.message.as_mut().expect("m").message_id.clear()),
            "message.message_id: missing",
        ),
        (
            Box::new(|r| r.message.as_mut().expect("m").role = 0),
            "message.role: missing",
        ),
        (
            Box::new(|r| r.message.as_mut().expect("m").role = 7),
            "message.role: unknown role 7",
        ),
        (
            Box::new(|r| r.message.as_mut().expect("m").parts.clear()),
            "message.parts: must not be empty",
        ),
        (
            Box::new(|r| r.message.as_mut().expect("m").parts[2].content = None),
            "message.parts[2]: a part carries one of",
        ),
        (
            Box::new(|r| {
                r.message.as_mut().expect("m").parts[0].content =
                    Some(pb::part::Content::Data(prost_types::Value {
                        kind: Some(Kind::NumberValue(f64::NAN)),
                    }))
            }),
            "message.parts[0].data: must be a finite number",
        ),
        (
            Box::new(|r| {
                r.configuration = Some(pb::SendMessageConfiguration {
                    task_push_notification_config: Some(pb::TaskPushNotificationConfig::default()),
                    ..Default::default()
                })
            }),
            "configuration.task_push_notification_config.url: missing",
        ),
        (
            Box::new(|r| {
                r.configuration = Some(pb::SendMessageConfiguration {
                    task_push_notification_config: Some(pb::TaskPushNotificationConfig {
                        url: "https://x".into(),
                        authentication: Some(pb::AuthenticationInfo::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            }),
            "configuration.task_push_notification_config.authentication.scheme: missing",
        ),
    ];
    for (edit, expected) in cases {
        let err = send_error(edit);
        assert!(
            err.message.starts_with(expected),
            "{:?} does not start with {expected:?}",
            err.message
        );
        assert!(err.data.is_some(), "the field is in the data: {err:?}");
    }
}

#[test]
fn get_task_request_reads_and_requires_the_id() {
    let r = pb::GetTaskRequest {
        tenant: "t".into(),
        id: "task-1".into(),
        history_length: Some(3),
    };
    assert_eq!(
        get_task_request(r).expect("valid"),
        m::GetTaskRequest {
            id: "task-1".into(),
            history_length: Some(3),
            tenant: Some("t".into()),
        }
    );
    let err = get_task_request(pb::GetTaskRequest::default()).expect_err("no id");
    assert_eq!(err.message, "id: missing");
}

#[test]
fn list_tasks_request_reads_every_filter() {
    let r = pb::ListTasksRequest {
        tenant: "t".into(),
        context_id: "ctx".into(),
        status: pb::TaskState::Working as i32,
        page_size: Some(10),
        page_token: "tok".into(),
        history_length: Some(2),
        status_timestamp_after: Some(prost_types::Timestamp {
            seconds: 1_761_000_000,
            nanos: 5,
        }),
        include_artifacts: Some(true),
    };
    assert_eq!(
        list_tasks_request(r).expect("valid"),
        m::ListTasksRequest {
            context_id: Some("ctx".into()),
            status: Some(m::TaskState::Working),
            page_size: Some(10),
            page_token: Some("tok".into()),
            history_length: Some(2),
            status_timestamp_after: Some(time(1_761_000_000, 5)),
            include_artifacts: Some(true),
            tenant: Some("t".into()),
        }
    );
    let empty = list_tasks_request(pb::ListTasksRequest::default()).expect("valid");
    assert_eq!(
        empty,
        m::ListTasksRequest {
            context_id: None,
            status: None,
            page_size: None,
            page_token: None,
            history_length: None,
            status_timestamp_after: None,
            include_artifacts: None,
            tenant: None,
        }
    );
}

#[test]
fn list_tasks_request_refuses_unknown_states_and_bad_timestamps() {
    let err = list_tasks_request(pb::ListTasksRequest {
        status: 42,
        ..Default::default()
    })
    .expect_err("unknown state");
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert!(
        err.message.starts_with("status: unknown task state 42"),
        "{}",
        err.message
    );
    let err = list_tasks_request(pb::ListTasksRequest {
        status: -1,
        ..Default::default()
    })
    .expect_err("negative state");
    assert!(
        err.message.starts_with("status: unknown task state -1"),
        "{}",
        err.message
    );
    let err = list_tasks_request(pb::ListTasksRequest {
        status_timestamp_after: Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        }),
        ..Default::default()
    })
    .expect_err("absurd timestamp");
    assert!(
        err.message.starts_with("status_timestamp_after: seconds"),
        "{}",
        err.message
    );
}

#[test]
fn cancel_and_subscribe_requests_read_and_require_the_id() {
    let r = pb::CancelTaskRequest {
        tenant: "t".into(),
        id: "task-1".into(),
        metadata: Some(struct_from_map(meta(json!({"why": "done"})).expect("m"))),
    };
    assert_eq!(
        cancel_task_request(r).expect("valid"),
        m::CancelTaskRequest {
            id: "task-1".into(),
            metadata: meta(json!({"why": "done"})),
            tenant: Some("t".into()),
        }
    );
    assert_eq!(
        cancel_task_request(pb::CancelTaskRequest::default())
            .expect_err("no id")
            .message,
        "id: missing"
    );
    let r = pb::SubscribeToTaskRequest {
        tenant: String::new(),
        id: "task-1".into(),
    };
    assert_eq!(
        subscribe_to_task_request(r).expect("valid"),
        m::SubscribeToTaskRequest {
            id: "task-1".into(),
            tenant: None,
        }
    );
    assert_eq!(
        subscribe_to_task_request(pb::SubscribeToTaskRequest::default())
            .expect_err("no id")
            .message,
        "id: missing"
    );
}

#[test]
fn push_config_requests_read_and_require_their_ids() {
    let created = create_push_config_request(push_config().into()).expect("valid");
    assert_eq!(created, push_config());
    let no_task = pb::TaskPushNotificationConfig {
        task_id: String::new(),
        ..push_config().into()
    };
    assert_eq!(
        create_push_config_request(no_task)
            .expect_err("no task")
            .message,
        "task_id: missing"
    );
    let no_url = pb::TaskPushNotificationConfig {
        url: String::new(),
        ..push_config().into()
    };
    assert_eq!(
        create_push_config_request(no_url)
            .expect_err("no url")
            .message,
        "url: missing"
    );

    let get = pb::GetTaskPushNotificationConfigRequest {
        tenant: "t".into(),
        task_id: "task-1".into(),
        id: "cfg-1".into(),
    };
    assert_eq!(
        get_push_config_request(get.clone()).expect("valid"),
        m::GetTaskPushNotificationConfigRequest {
            task_id: "task-1".into(),
            id: "cfg-1".into(),
            tenant: Some("t".into()),
        }
    );
    let no_id = pb::GetTaskPushNotificationConfigRequest {
        id: String::new(),
        ..get.clone()
    };
    assert_eq!(
        get_push_config_request(no_id).expect_err("no id").message,
        "id: missing"
    );

    let delete = pb::DeleteTaskPushNotificationConfigRequest {
        tenant: String::new(),
        task_id: "task-1".into(),
        id: "cfg-1".into(),
    };
    assert_eq!(
        delete_push_config_request(delete.clone()).expect("valid"),
        m::DeleteTaskPushNotificationConfigRequest {
            task_id: "task-1".into(),
            id: "cfg-1".into(),
            tenant: None,
        }
    );
    let no_task = pb::DeleteTaskPushNotificationConfigRequest {
        task_id: String::new(),
        ..delete
    };
    assert_eq!(
        delete_push_config_request(no_task)
            .expect_err("no task")
            .message,
        "task_id: missing"
    );

    let list = pb::ListTaskPushNotificationConfigsRequest {
        tenant: "t".into(),
        task_id: "task-1".into(),
        page_size: 0,
        page_token: String::new(),
    };
    assert_eq!(
        list_push_configs_request(list.clone()).expect("valid"),
        m::ListTaskPushNotificationConfigsRequest {
            task_id: "task-1".into(),
            page_size: None,
            page_token: None,
            tenant: Some("t".into()),
        }
    );
    let paged = pb::ListTaskPushNotificationConfigsRequest {
        page_size: 5,
        page_token: "p2".into(),
        ..list.clone()
    };
    let paged = list_push_configs_request(paged).expect("valid");
    assert_eq!(
        (paged.page_size, paged.page_token.as_deref()),
        (Some(5), Some("p2"))
    );
    let no_task = pb::ListTaskPushNotificationConfigsRequest {
        task_id: String::new(),
        ..list
    };
    assert_eq!(
        list_push_configs_request(no_task)
            .expect_err("no task")
            .message,
        "task_id: missing"
    );
}

#[test]
fn extended_card_request_yields_its_tenant() {
    let r = pb::GetExtendedAgentCardRequest {
        tenant: "tenant-a".into(),
    };
    assert_eq!(extended_card_request(r).tenant.as_deref(), Some("tenant-a"));
    assert_eq!(
        extended_card_request(pb::GetExtendedAgentCardRequest::default()).tenant,
        None
    );
}

#[test]
fn answers_with_missing_required_members_are_refused() {
    let mut task = pb::Task::from(full_task());
    task.status = None;
    assert_eq!(
        task_from_proto(task).expect_err("no status").message,
        "task.status: missing"
    );
    let mut task = pb::Task::from(full_task());
    task.status.as_mut().expect("status").state = 99;
    assert!(
        task_from_proto(task)
            .expect_err("bad state")
            .message
            .starts_with("task.status.state: unknown task state 99")
    );
    let mut task = pb::Task::from(full_task());
    task.artifacts[1].parts.clear();
    assert_eq!(
        task_from_proto(task).expect_err("no parts").message,
        "task.artifacts[1].parts: must not be empty"
    );
    let mut task = pb::Task::from(full_task());
    task.history[0].message_id.clear();
    let read = task_from_proto(task).expect("a history message without id gets one");
    assert!(!read.history.expect("history")[0].message_id.is_empty());
}
