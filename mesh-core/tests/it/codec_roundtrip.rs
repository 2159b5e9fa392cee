//! Property tests: for each dialect, write → read is the identity on the model (for 0.1 the
//! fields it lacks come back via the reserved `_mesh` metadata key).

use std::collections::HashMap;

use mesh_core::codec::{decode_reply, decode_request, encode_reply, encode_request};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::MeshMeta;
use mesh_core::model::*;
use mesh_core::rpc::{Call, Reply, Request};
use proptest::prelude::*;
use serde_json::{Value, json};

fn meta() -> impl Strategy<Value = Option<Metadata>> {
    prop::option::of(prop::collection::hash_map(
        "[a-z]{1,6}",
        any::<i32>().prop_map(|i| json!(i)),
        1..3,
    ))
    .prop_map(|m| m.map(|m: HashMap<String, Value>| m))
}

fn part() -> impl Strategy<Value = Part> {
    let content = prop_oneof![
        ".{0,12}".prop_map(PartContent::Text),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(PartContent::Raw),
        "https://[a-z]{1,8}\\.example/[a-z]{0,6}".prop_map(PartContent::Url),
        any::<i64>().prop_map(|i| PartContent::Data(json!({"n": i}))),
    ];
    (
        content,
        prop::option::of("[a-z]{1,8}\\.txt"),
        prop::option::of("[a-z]{1,5}/[a-z]{1,5}"),
        meta(),
    )
        .prop_map(|(content, filename, media_type, metadata)| Part {
            content,
            filename,
            media_type,
            metadata,
        })
}

fn message() -> impl Strategy<Value = Message> {
    (
        "[a-z0-9-]{1,10}",
        prop::option::of("[a-z0-9]{1,6}"),
        prop::option::of("[a-z0-9]{1,6}"),
        prop_oneof![Just(Role::User), Just(Role::Agent)],
        prop::collection::vec(part(), 1..4),
        meta(),
        prop::option::of(prop::collection::vec("urn:[a-z]{1,5}", 0..2)),
        prop::option::of(prop::collection::vec("[a-z]{1,5}", 0..2)),
    )
        .prop_map(
            |(
                message_id,
                context_id,
                task_id,
                role,
                parts,
                metadata,
                extensions,
                reference_task_ids,
            )| Message {
                message_id,
                context_id,
                task_id,
                role,
                parts,
                metadata,
                extensions,
                reference_task_ids,
            },
        )
}

fn state() -> impl Strategy<Value = TaskState> {
    prop_oneof![
        Just(TaskState::Submitted),
        Just(TaskState::Working),
        Just(TaskState::Completed),
        Just(TaskState::Failed),
        Just(TaskState::Canceled),
        Just(TaskState::InputRequired),
        Just(TaskState::Rejected),
        Just(TaskState::AuthRequired),
        Just(TaskState::Unspecified),
    ]
}

fn status() -> impl Strategy<Value = TaskStatus> {
    (
        state(),
        prop::option::of(message()),
        prop::option::of(0i64..4_000_000_000),
    )
        .prop_map(|(state, message, ts)| TaskStatus {
            state,
            message,
            timestamp: ts.and_then(|s| chrono::DateTime::from_timestamp(s, 1_000_000)),
        })
}

fn artifact() -> impl Strategy<Value = Artifact> {
    (
        prop_oneof![
            "[a-z0-9]{1,8}",
            (0u32..5).prop_map(|i| format!("artifact-{i}"))
        ],
        prop::option::of("[a-z]{1,6}"),
        prop::option::of("[a-z ]{1,10}"),
        prop::collection::vec(part(), 1..3),
        meta(),
        prop::option::of(prop::collection::vec("urn:[a-z]{1,5}", 0..2)),
    )
        .prop_map(
            |(artifact_id, name, description, parts, metadata, extensions)| Artifact {
                artifact_id,
                name,
                description,
                parts,
                metadata,
                extensions,
            },
        )
}

fn task() -> impl Strategy<Value = Task> {
    (
        "[a-z0-9]{1,8}",
        "[a-z0-9]{0,8}",
        status(),
        prop::option::of(prop::collection::vec(artifact(), 0..3)),
        prop::option::of(prop::collection::vec(message(), 0..3)),
        meta(),
    )
        .prop_map(
            |(id, context_id, status, artifacts, history, metadata)| Task {
                id,
                context_id,
                status,
                artifacts,
                history,
                metadata,
            },
        )
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        task().prop_map(Reply::Task),
        message().prop_map(Reply::Message),
        (
            "[a-z0-9]{1,8}",
            "[a-z0-9]{0,8}",
            status(),
            meta(),
            prop::option::of(any::<bool>())
        )
            .prop_map(|(task_id, context_id, status, mut metadata, fin)| {
                if let Some(f) = fin {
                    metadata
                        .get_or_insert_with(HashMap::new)
                        .insert(MESH_KEY.into(), json!({"final": f}));
                    // only a `final` that differs from the state's is kept
                    if f == is_final_state(&status.state) {
                        if let Some(m) = metadata.as_mut() {
                            m.remove(MESH_KEY);
                        }
                        if metadata.as_ref().is_some_and(|m| m.is_empty()) {
                            metadata = None;
                        }
                    }
                }
                Reply::StatusUpdate(TaskStatusUpdateEvent {
                    task_id,
                    context_id,
                    status,
                    metadata,
                })
            }),
        (
            "[a-z0-9]{1,8}",
            "[a-z0-9]{0,8}",
            artifact(),
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
            meta()
        )
            .prop_map(
                |(task_id, context_id, artifact, append, last_chunk, metadata)| {
                    Reply::ArtifactUpdate(TaskArtifactUpdateEvent {
                        task_id,
                        context_id,
                        artifact,
                        append,
                        last_chunk,
                        metadata,
                    })
                }
            ),
    ]
}

fn send_request() -> impl Strategy<Value = SendMessageRequest> {
    (
        message(),
        prop::option::of((
            0i32..50,
            prop::option::of(any::<bool>()),
            prop::option::of(prop::collection::vec("text/[a-z]{1,5}", 0..2)),
        )),
        meta(),
    )
        .prop_map(|(message, cfg, metadata)| SendMessageRequest {
            message,
            configuration: cfg.map(|(h, r, modes)| SendMessageConfiguration {
                accepted_output_modes: modes,
                task_push_notification_config: None,
                history_length: Some(h),
                return_immediately: r,
            }),
            metadata,
            tenant: None,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn replies_round_trip(r in reply()) {
        let id = JsonRpcId::from(7);
        for d in Dialect::ALL {
            let bytes = encode_reply(d, &id, &r);
            let (id2, back) = decode_reply(&bytes, d).map_err(|e| TestCaseError::fail(format!("{d}: {e}")))?;
            prop_assert_eq!(&id2, &id);
            let back = back.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back, &r, "dialect {}: {}", d, String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn send_requests_round_trip(s in send_request(), streaming in any::<bool>()) {
        for d in Dialect::ALL {
            let req = Request {
                id: Some(JsonRpcId::from("r")),
                method: if streaming { Method::SendStreamingMessage } else { Method::SendMessage },
                dialect: d,
                shared_method: false,
                call: Call::Send(s.clone()),
                // The bus envelope travels beside the params' own metadata, in every dialect.
                mesh: MeshMeta {
                    reply_to: Some("ns/a2a/v1/gateway/response/g/i/echo/t".into()),
                    request_id: Some("r".into()),
                    deadline: Some(1_795_422_601_053),
                    depth: Some(streaming as u32),
                    ..MeshMeta::default()
                },
            };
            let bytes = encode_request(&req);
            let back = decode_request(&bytes).map_err(|e| TestCaseError::fail(format!("{d}: {e}")))?;
            prop_assert_eq!(&back, &req, "dialect {}: {}", d, String::from_utf8_lossy(&bytes));
        }
    }
}
