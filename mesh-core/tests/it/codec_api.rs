//! Tests of the codec entry points: every method in every dialect, errors per dialect,
//! request errors (id/dialect kept), notifications, batches, agent cards, seed variants.

use std::fs;
use std::path::PathBuf;

use mesh_core::codec::card::{
    decode_card, read_card, write_card_combined, write_card_v1, write_card_v03,
};
use mesh_core::codec::{
    Decoded, TaskView, decode, decode_reply, decode_request, encode_error, encode_reply,
    encode_reply_to, encode_request, write_task_json,
};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::{A2aError, ErrorKind};
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::MeshMeta;
use mesh_core::model::*;
use mesh_core::rpc::{Call, Reply, Request};
use serde_json::{Value, json};

fn bytes(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("json")
}

fn parse(b: &[u8]) -> Value {
    serde_json::from_slice(b).expect("json")
}

fn push_cfg() -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        url: "https://client.example/hook".into(),
        id: Some("cfg-1".into()),
        task_id: "task-1".into(),
        token: Some("tok".into()),
        authentication: Some(AuthenticationInfo {
            scheme: "Bearer".into(),
            credentials: Some("c".into()),
        }),
        tenant: None,
    }
}

fn all_calls() -> Vec<(Method, Call)> {
    vec![
        (
            Method::SendMessage,
            Call::Send(SendMessageRequest {
                message: Message::new(Role::User, vec![Part::text("hi")]),
                configuration: Some(SendMessageConfiguration {
                    accepted_output_modes: Some(vec!["text/plain".into()]),
                    task_push_notification_config: Some(TaskPushNotificationConfig {
                        task_id: String::new(),
                        ..push_cfg()
                    }),
                    history_length: Some(3),
                    return_immediately: Some(true),
                }),
                metadata: Some(
                    [("trace".to_string(), json!({"route": "x"}))]
                        .into_iter()
                        .collect(),
                ),
                tenant: None,
            }),
        ),
        (
            Method::GetTask,
            Call::GetTask(GetTaskRequest {
                id: "t".into(),
                history_length: Some(2),
                tenant: None,
            }),
        ),
        (
            Method::ListTasks,
            Call::ListTasks(ListTasksRequest {
                context_id: Some("c".into()),
                status: Some(TaskState::InputRequired),
                page_size: Some(5),
                page_token: Some("p".into()),
                history_length: None,
                status_timestamp_after: None,
                include_artifacts: Some(true),
                tenant: None,
            }),
        ),
        (
            Method::CancelTask,
            Call::CancelTask(CancelTaskRequest {
                id: "t".into(),
                metadata: None,
                tenant: None,
            }),
        ),
        (
            Method::SubscribeToTask,
            Call::Subscribe(SubscribeToTaskRequest {
                id: "t".into(),
                tenant: None,
            }),
        ),
        (Method::SetPushConfig, Call::SetPushConfig(push_cfg())),
        (
            Method::GetPushConfig,
            Call::GetPushConfig(GetTaskPushNotificationConfigRequest {
                task_id: "t".into(),
                id: "cfg-1".into(),
                tenant: None,
            }),
        ),
        (
            Method::ListPushConfigs,
            Call::ListPushConfigs(ListTaskPushNotificationConfigsRequest {
                task_id: "t".into(),
                page_size: None,
                page_token: None,
                tenant: None,
            }),
        ),
        (
            Method::DeletePushConfig,
            Call::DeletePushConfig(DeleteTaskPushNotificationConfigRequest {
                task_id: "t".into(),
                id: "cfg-1".into(),
                tenant: None,
            }),
        ),
        (Method::GetExtendedCard, Call::GetExtendedCard),
    ]
}

#[test]
fn every_method_round_trips_in_every_dialect() {
    for d in Dialect::ALL {
        for (method, call) in all_calls() {
            let req = Request {
                id: Some(JsonRpcId::from(1)),
                method,
                dialect: d,
                shared_method: false,
                call,
                mesh: MeshMeta::default(),
            };
            let out = encode_request(&req);
            let back = decode_request(&out).unwrap_or_else(|e| panic!("{method:?} in {d}: {e}"));
            assert_eq!(
                back.call,
                req.call,
                "{method:?} in {d}: {}",
                String::from_utf8_lossy(&out)
            );
            assert_eq!(back.method, method);
            let expect_dialect = if back.shared_method { Dialect::V0_3 } else { d };
            if !(d == Dialect::V0_1 && method == Method::GetExtendedCard) {
                assert_eq!(back.dialect, expect_dialect, "{method:?} in {d}");
            }
        }
    }
}

#[test]
fn wire_shapes_per_dialect() {
    let (_, call) = all_calls().remove(0);
    let req = |d| Request {
        id: Some(JsonRpcId::from("a")),
        method: Method::SendMessage,
        dialect: d,
        shared_method: false,
        call: call.clone(),
        mesh: MeshMeta {
            reply_to: Some("ns/a2a/v1/gateway/response/g/i/echo/t".into()),
            deadline: Some(42),
            ..MeshMeta::default()
        },
    };
    let v03 = parse(&encode_request(&req(Dialect::V0_3)));
    assert_eq!(v03["method"], "message/send");
    assert_eq!(v03["params"]["message"]["kind"], "message");
    assert_eq!(v03["params"]["message"]["role"], "user");
    assert_eq!(
        v03["params"]["message"]["parts"][0],
        json!({"kind": "text", "text": "hi"})
    );
    assert_eq!(v03["params"]["configuration"]["blocking"], false);
    assert_eq!(
        v03["params"]["configuration"]["pushNotificationConfig"]["authentication"]["schemes"],
        json!(["Bearer"])
    );
    assert_eq!(
        v03["params"]["metadata"],
        json!({"trace": {"route": "x"}, "_mesh": {"replyTo": "ns/a2a/v1/gateway/response/g/i/echo/t", "deadline": 42}})
    );
    // The envelope is lifted out of the params' metadata on the way back in.
    let back = decode_request(&encode_request(&req(Dialect::V0_3))).unwrap();
    assert_eq!(back, req(Dialect::V0_3));
    let v10 = parse(&encode_request(&req(Dialect::V1_0)));
    assert_eq!(v10["method"], "SendMessage");
    assert_eq!(v10["params"]["message"]["role"], "ROLE_USER");
    assert_eq!(v10["params"]["configuration"]["returnImmediately"], true);
    assert!(v10["params"]["message"].get("kind").is_none());
    let v01 = parse(&encode_request(&req(Dialect::V0_1)));
    assert_eq!(v01["method"], "tasks/send");
    assert_eq!(
        v01["params"]["message"]["parts"][0],
        json!({"type": "text", "text": "hi"})
    );
    assert!(v01["params"]["message"]["metadata"]["_mesh"]["messageId"].is_string());
}

#[test]
fn seed_variants_are_accepted() {
    // snake_case, untagged parts, underscores in states, mixed generations
    let r = decode_request(&bytes(json!({"jsonrpc":"2.0","id":"x","method":"tasks/send","params":{
        "message":{"message_id":"m","role":"user","parts":[{"text":"a"},{"file":{"bytes":"aGk=","mime_type":"text/plain","name":"a.txt"}}]},
        "push_notification":{"url":"https://h","authentication":{"schemes":["Bearer"]}},"history_length":2}})))
        .expect("ok");
    let Call::Send(s) = r.call else {
        panic!("send")
    };
    assert_eq!(s.message.message_id, "m");
    assert_eq!(s.message.parts[1].content, PartContent::Raw(b"hi".to_vec()));
    assert_eq!(s.message.parts[1].filename.as_deref(), Some("a.txt"));
    assert_eq!(s.message.parts[1].media_type.as_deref(), Some("text/plain"));
    assert_eq!(
        s.configuration.as_ref().and_then(|c| c.history_length),
        Some(2)
    );
    let (_, rep) = decode_reply(br#"{"jsonrpc":"2.0","id":1,"result":{"task_id":"t","context_id":"c","status":{"state":"input_required"},"final":true,"kind":"status-update"}}"#, Dialect::V0_3).expect("ok");
    let Ok(Reply::StatusUpdate(e)) = rep else {
        panic!("status")
    };
    assert_eq!(e.status.state, TaskState::InputRequired);
    assert_eq!(e.metadata, None);
    // 0.1 tasks/send without messageId gets one; params.id → task id, sessionId → context id
    let r = decode_request(&bytes(json!({"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{"id":"t1","sessionId":"s1","message":{"role":"user","parts":[{"type":"text","text":"a"}]}}}))).expect("ok");
    let Call::Send(s) = r.call else {
        panic!("send")
    };
    assert!(!s.message.message_id.is_empty());
    assert_eq!(
        (
            s.message.task_id.as_deref(),
            s.message.context_id.as_deref()
        ),
        (Some("t1"), Some("s1"))
    );
}

#[test]
fn validation_errors_name_the_field() {
    let cases = [
        (
            json!({"role":"user","messageId":"m","parts":[{"text":"a"},{"text":"b","data":{}}]}),
            "params.message.parts[1]: a part carries exactly one of text, file, data (or raw, url); found text and data",
        ),
        (
            json!({"role":"robot","messageId":"m","parts":[{"text":"a"}]}),
            "params.message.role",
        ),
        (
            json!({"messageId":"m","parts":[{"text":"a"}]}),
            "params.message.role: missing",
        ),
        (
            json!({"role":"user","messageId":"m","parts":[]}),
            "params.message.parts: must not be empty",
        ),
        (
            json!({"role":"user","messageId":"m","parts":[{"kind":"file","file":{"name":"x"}}]}),
            "params.message.parts[0].file: a file carries exactly one of bytes, uri; found neither",
        ),
        (
            json!({"role":"user","messageId":"m","parts":[{"kind":"data","text":"x"}]}),
            "params.message.parts[0].kind",
        ),
        (
            json!({"role":"user","messageId":5,"parts":[{"text":"a"}]}),
            "params.message.messageId: must be a string",
        ),
        (
            json!({"role":"user","parts":[{"text":"a"}]}),
            "params.message.messageId: missing",
        ),
    ];
    for (msg, want) in cases {
        let e = decode_request(&bytes(
            json!({"jsonrpc":"2.0","id":9,"method":"message/send","params":{"message":msg}}),
        ))
        .expect_err(want);
        assert_eq!(e.error.code(), -32602, "{want}");
        assert!(
            e.error.message.starts_with(want),
            "{} vs {want}",
            e.error.message
        );
        assert_eq!(e.id, Some(JsonRpcId::from(9)));
        assert_eq!(e.dialect, Some(Dialect::V0_3));
    }
    let e = decode_request(
        br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t","historyLength":"x"}}"#,
    )
    .expect_err("bad");
    assert_eq!(
        e.error.message,
        "params.historyLength: must be an integer; found a string"
    );
    let e = decode_request(
        br#"{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{"status":"sleeping"}}"#,
    )
    .expect_err("bad");
    assert!(
        e.error
            .message
            .starts_with("params.status: unknown task state \"sleeping\"")
    );
    assert!(e.shared_method);
}

#[test]
fn request_errors_carry_id_and_dialect() {
    let e =
        decode_request(br#"{"jsonrpc":"2.0","id":"q","method":"nope/nope"}"#).expect_err("unknown");
    assert_eq!(e.error.kind, ErrorKind::MethodNotFound);
    assert!(e.error.message.contains("nope/nope"));
    assert_eq!(e.id, Some(JsonRpcId::from("q")));
    let e = decode_request(br#"{"id":3,"method":"SendMessage"}"#).expect_err("no jsonrpc");
    assert_eq!((e.error.code(), e.dialect), (-32600, Some(Dialect::V1_0)));
    assert_eq!(e.id, Some(JsonRpcId::from(3)));
    let e = decode_request(b"{nope").expect_err("parse");
    assert_eq!((e.error.code(), e.id.clone()), (-32700, None));
    let e = decode_request(br#"{"jsonrpc":"2.0","method":"GetTask","params":{}}"#)
        .expect_err("notification");
    assert!(e.notification);
}

#[test]
fn notifications_and_batches() {
    let r = decode_request(br#"{"jsonrpc":"2.0","method":"tasks/cancel","params":{"id":"t"}}"#)
        .expect("ok");
    assert_eq!(r.id, None);
    let out = encode_request(&r);
    assert!(parse(&out).get("id").is_none());
    match decode(br#"[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t"}}, 5]"#) {
        Decoded::Batch(items) => {
            assert!(items[0].is_ok());
            assert_eq!(items[1].as_ref().expect_err("bad").error.code(), -32600);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(decode(b"[]"), Decoded::Single(Err(e)) if e.error.code() == -32600));
    assert_eq!(
        decode_request(br#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#)
            .expect_err("batch")
            .error
            .code(),
        -32600
    );
}

#[test]
fn errors_in_each_dialect() {
    let id = JsonRpcId::from(2);
    for kind in ErrorKind::ALL {
        let err = A2aError::new(kind, "m").with_data(json!({"taskId": "t"}));
        for d in Dialect::ALL {
            let out = parse(&encode_error(d, Some(&id), &err));
            assert_eq!(out["error"]["code"], kind.code());
            assert_eq!(out["id"], 2);
            if d == Dialect::V1_0 {
                assert_eq!(out["error"]["data"][0]["reason"], kind.reason());
            }
            let (id2, back) =
                decode_reply(&serde_json::to_vec(&out).expect("json"), d).expect("ok");
            assert_eq!(id2, id);
            assert_eq!(back.expect_err("error"), err);
        }
    }
    let out = parse(&encode_error(Dialect::V0_3, None, &A2aError::parse("x")));
    assert_eq!(out["id"], Value::Null);
}

#[test]
fn replies_have_the_dialect_shape() {
    let task = Task {
        id: "t".into(),
        context_id: "c".into(),
        status: TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: None,
        },
        artifacts: Some(vec![Artifact {
            artifact_id: "a1".into(),
            name: None,
            description: None,
            parts: vec![Part::data(json!({"k":1}))],
            metadata: None,
            extensions: None,
        }]),
        history: None,
        metadata: None,
    };
    let id = JsonRpcId::from(1);
    let v10 = parse(&encode_reply(
        Dialect::V1_0,
        &id,
        &Reply::Task(task.clone()),
    ));
    assert_eq!(
        v10["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let bare = parse(&encode_reply_to(
        Method::GetTask,
        Dialect::V1_0,
        &id,
        &Reply::Task(task.clone()),
    ));
    assert_eq!(bare["result"]["id"], "t");
    let (_, back) =
        decode_reply(&serde_json::to_vec(&bare).expect("json"), Dialect::V1_0).expect("ok");
    assert_eq!(back.expect("task"), Reply::Task(task.clone()));
    let json = |task: &Task, d| -> Value {
        serde_json::from_slice(&write_task_json(Method::GetTask, d, task, TaskView::WHOLE))
            .expect("json")
    };
    let v03 = json(&task, Dialect::V0_3);
    assert_eq!(v03["kind"], "task");
    assert_eq!(v03["artifacts"][0]["parts"][0]["kind"], "data");
    let v01 = json(&task, Dialect::V0_1);
    assert_eq!(v01["sessionId"], "c");
    assert_eq!(v01["artifacts"][0]["metadata"]["_mesh"]["artifactId"], "a1");
    assert_eq!(v01["status"]["state"], "completed");
    for d in Dialect::ALL {
        for r in [
            Reply::Empty,
            Reply::PushConfig(push_cfg()),
            Reply::PushConfigs(ListTaskPushNotificationConfigsResponse {
                configs: vec![push_cfg()],
                next_page_token: None,
            }),
            Reply::Tasks(ListTasksResponse {
                tasks: vec![task.clone()],
                next_page_token: "n".into(),
                page_size: 1,
                total_size: 1,
            }),
        ] {
            let (_, back) = decode_reply(&encode_reply(d, &id, &r), d).expect("ok");
            assert_eq!(back.expect("ok"), r, "{d}");
        }
    }
}

fn fixture(name: &str) -> Vec<u8> {
    fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .expect("fixture")
}

#[test]
fn agent_cards() {
    let c03 =
        decode_card(&fixture("cards_ok/spec03_5_7_sample_agent_card.json")).expect("0.3 card");
    assert_eq!(c03.supported_interfaces.len(), 3);
    assert_eq!(c03.supported_interfaces[0].protocol_binding, "JSONRPC");
    assert_eq!(c03.capabilities.extended_agent_card, Some(true));
    assert!(matches!(
        c03.security_schemes.as_ref().and_then(|s| s.get("google")),
        Some(SecurityScheme::OpenIdConnect(_))
    ));
    assert!(c03.security_requirements.is_some());
    let c10 =
        decode_card(&fixture("cards_ok/spec10_8_5_sample_agent_card.json")).expect("1.0 card");
    assert_eq!(c10.supported_interfaces[0].protocol_version, "1.0");
    for c in [&c03, &c10] {
        assert_eq!(&read_card(write_card_v1(c)).expect("v1"), c);
        assert_eq!(
            &read_card(write_card_v03(c)).expect("v03").skills,
            &c.skills
        );
        let combined = write_card_combined(c);
        assert_eq!(combined["url"], "https://georoute-agent.example.com/a2a/v1");
        assert_eq!(combined["preferredTransport"], "JSONRPC");
        assert!(combined["protocolVersion"].is_string());
        let jsonrpc: Vec<_> = combined["supportedInterfaces"]
            .as_array()
            .expect("list")
            .iter()
            .filter(|i| i["protocolBinding"] == "JSONRPC")
            .collect();
        assert_eq!(jsonrpc.len(), 2);
        assert_eq!(jsonrpc[0]["protocolVersion"], "1.0");
        assert_eq!(jsonrpc[1]["protocolVersion"], "0.3");
        assert_eq!(jsonrpc[0]["url"], jsonrpc[1]["url"]);
        let back = read_card(combined).expect("combined reads");
        assert_eq!(back.name, c.name);
    }
    assert_eq!(read_card(write_card_v03(&c03)).expect("0.3"), c03);
    let v03 = write_card_v03(&c10);
    assert_eq!(v03["securitySchemes"]["google"]["type"], "openIdConnect");
    assert_eq!(v03["supportsAuthenticatedExtendedCard"], true);
    assert_eq!(
        decode_card(&fixture(
            "cards_fail/-32700_spec10_4_6_1_extension_card_trailing_comma.json"
        ))
        .expect_err("bad")
        .code(),
        -32700
    );
    assert_eq!(
        read_card(json!({"name": "x"})).expect_err("no url").code(),
        -32006
    );
    let id = JsonRpcId::from(1);
    for d in Dialect::ALL {
        let (_, back) =
            decode_reply(&encode_reply(d, &id, &Reply::Card(c10.clone())), d).expect("card reply");
        assert_eq!(
            back.expect("card").clone(),
            if d == Dialect::V1_0 {
                Reply::Card(c10.clone())
            } else {
                Reply::Card(read_card(write_card_v03(&c10)).expect("x"))
            }
        );
    }
}

#[test]
fn reply_finality() {
    let ev = |state, meta: Option<Value>| {
        Reply::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: None,
            },
            metadata: meta.and_then(|m| serde_json::from_value(m).ok()),
        })
    };
    assert!(!ev(TaskState::Working, None).is_final());
    assert!(ev(TaskState::Completed, None).is_final());
    assert!(ev(TaskState::InputRequired, None).is_final());
    assert!(ev(TaskState::Working, Some(json!({"_mesh": {"final": true}}))).is_final());
    // a 0.3 event whose `final` disagrees with its state keeps it through every dialect
    let raw = br#"{"jsonrpc":"2.0","id":1,"result":{"kind":"status-update","taskId":"t","contextId":"c","status":{"state":"working"},"final":true}}"#;
    let (id, r) = decode_reply(raw, Dialect::V0_3).expect("ok");
    let r = r.expect("event");
    assert!(r.is_final());
    for d in Dialect::ALL {
        let (_, back) = decode_reply(&encode_reply(d, &id, &r), d).expect("ok");
        assert_eq!(back.expect("event"), r);
    }
    let out = parse(&encode_reply(Dialect::V0_3, &id, &r));
    assert_eq!(out["result"]["final"], true);
    assert!(out["result"].get("metadata").is_none());
}

/// A follow-up's task snapshot is read as a task: one that is not a task fails the request
/// with invalid params naming it (the agent answers with that error), `null` is no snapshot.
#[test]
fn the_envelope_task_snapshot_is_read_as_a_task() {
    let request = |task: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{{"kind":"message","messageId":"m","role":"user","parts":[{{"kind":"text","text":"hi"}}]}},"metadata":{{"_mesh":{{"replyTo":"r/t","task":{task}}}}}}}}}"#
        )
    };
    let ok = decode_request(
        request(r#"{"kind":"task","id":"t1","contextId":"c","status":{"state":"input-required"}}"#)
            .as_bytes(),
    )
    .expect("a snapshot");
    let snapshot = ok.mesh.task.expect("read as a task");
    assert_eq!(snapshot.id, "t1");
    assert_eq!(snapshot.status.state, TaskState::InputRequired);
    assert!(!ok.mesh.other.contains_key("task"));
    let none = decode_request(request("null").as_bytes()).expect("null is no snapshot");
    assert_eq!(none.mesh.task, None);
    let bad = decode_request(request(r#"{"id":"t1","status":{"state":"dreaming"}}"#).as_bytes())
        .expect_err("not a task");
    assert_eq!(bad.error.code(), -32602);
    assert!(
        bad.error.message.contains("params.metadata._mesh.task"),
        "{}",
        bad.error.message
    );
}
