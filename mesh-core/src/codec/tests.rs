//! Property tests of the codec on random models in every dialect: what the writer writes, the
//! readers read back as the same model (requests with their `_mesh` envelope, replies, errors),
//! and the typed reader answers either nothing or exactly what the lenient reader answers, on
//! the writer's output and on mutations of it that leave the canonical shapes.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::lenient_reader;
use super::typed_reader as fast;
use crate::dialect::{Dialect, Method};
use crate::jsonrpc::JsonRpcId;
use crate::model::*;
use crate::rpc::{Call, Reply, Request};

fn meta() -> impl Strategy<Value = Option<Metadata>> {
    let value = prop_oneof![
        any::<i32>().prop_map(|i| json!(i)),
        "[a-z\"\\\\é]{0,4}".prop_map(|s| json!(s)),
        Just(json!({"final": true})),
        Just(json!({"filename": "x", "k": [1, null]})),
        Just(json!(null)),
    ];
    let key = prop_oneof!["[a-z]{1,6}", Just(MESH_KEY.to_string())];
    prop::option::of(prop::collection::hash_map(key, value, 0..3))
        .prop_map(|m| m.map(|m: HashMap<String, Value>| m))
}

/// A request's `_mesh` envelope: none, or some of its fields (and an unknown one).
fn mesh() -> impl Strategy<Value = crate::meta::MeshMeta> {
    use crate::meta::{Caller, MeshMeta};
    use crate::topic::RequesterKind;
    let some = (
        prop::option::of("[a-z/+é\"]{1,12}"),
        prop::option::of(any::<u64>()),
        prop::option::of((
            prop_oneof![Just(RequesterKind::Gateway), Just(RequesterKind::Agent)],
            "[a-z0-9]{1,8}",
            prop::option::of("[a-z@.]{1,8}"),
        )),
        prop::option::of(any::<u32>()),
        prop::option::of(task().prop_map(Box::new)),
        prop::option::of(any::<u64>()),
        prop::bool::ANY,
    )
        .prop_map(|(reply_to, deadline, caller, depth, task, seq, unknown)| {
            let mut other = serde_json::Map::new();
            if unknown {
                other.insert("futureField".into(), json!([true, "x"]));
            }
            MeshMeta {
                request_id: reply_to.clone().map(|r| format!("{r}-id")),
                task_id: deadline.map(|d| format!("t{d}")),
                reply_to,
                deadline,
                caller: caller.map(|(kind, id, principal)| Caller {
                    kind,
                    id,
                    principal,
                }),
                depth,
                traceparent: depth.map(|d| format!("00-{d:032x}-{d:016x}-01")),
                task,
                instance: seq.map(|s| format!("i{s}")),
                window: depth.map(|d| d.wrapping_mul(7)),
                keeps_history: seq.map(|s| s % 2 == 0),
                history_from: deadline,
                stream_after_progress: depth.map(|d| d % 3 == 0),
                seq,
                other,
            }
        });
    prop_oneof![Just(MeshMeta::default()), some]
}

fn part() -> impl Strategy<Value = Part> {
    let content = prop_oneof![
        ".{0,12}".prop_map(PartContent::Text),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(PartContent::Raw),
        "https://[a-z]{1,8}\\.example/[a-z]{0,6}".prop_map(PartContent::Url),
        any::<i64>().prop_map(|i| PartContent::Data(json!({"n": i}))),
        Just(PartContent::Data(Value::Null)),
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
            |(message_id, context_id, task_id, role, parts, metadata, ext, refs)| Message {
                message_id,
                context_id,
                task_id,
                role,
                parts,
                metadata,
                extensions: ext,
                reference_task_ids: refs,
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
        prop::option::of((0i64..4_000_000_000, 0u32..3)),
    )
        .prop_map(|(state, message, ts)| TaskStatus {
            state,
            message,
            timestamp: ts.and_then(|(s, n)| {
                chrono::DateTime::from_timestamp(s, [0, 1_000_000, 123_456_789][n as usize])
            }),
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

fn push_config() -> impl Strategy<Value = TaskPushNotificationConfig> {
    (
        "https://[a-z]{1,6}\\.example/hook",
        prop::option::of("[a-z0-9]{1,6}"),
        "[a-z0-9]{0,6}",
        prop::option::of("[a-z0-9]{1,6}"),
        prop::option::of(("[A-Za-z]{1,6}", prop::option::of("[a-z]{1,6}"))),
        prop::option::of("[a-z]{1,4}"),
    )
        .prop_map(
            |(url, id, task_id, token, auth, tenant)| TaskPushNotificationConfig {
                url,
                id,
                task_id,
                token,
                authentication: auth.map(|(scheme, credentials)| AuthenticationInfo {
                    scheme,
                    credentials,
                }),
                tenant,
            },
        )
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        task().prop_map(Reply::Task),
        message().prop_map(Reply::Message),
        ("[a-z0-9]{1,8}", "[a-z0-9]{0,8}", status(), meta()).prop_map(
            |(task_id, context_id, status, metadata)| Reply::StatusUpdate(TaskStatusUpdateEvent {
                task_id,
                context_id,
                status,
                metadata,
            })
        ),
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
        (
            prop::collection::vec(task(), 0..2),
            "[a-z]{0,4}",
            0i32..9,
            0i32..99
        )
            .prop_map(
                |(tasks, next_page_token, page_size, total_size)| Reply::Tasks(ListTasksResponse {
                    tasks,
                    next_page_token,
                    page_size,
                    total_size,
                })
            ),
        push_config().prop_map(Reply::PushConfig),
        (
            prop::collection::vec(push_config(), 0..3),
            prop::option::of("[a-z]{1,4}")
        )
            .prop_map(|(configs, next_page_token)| Reply::PushConfigs(
                ListTaskPushNotificationConfigsResponse {
                    configs,
                    next_page_token,
                }
            )),
        Just(Reply::Empty),
    ]
}

fn send() -> impl Strategy<Value = SendMessageRequest> {
    (
        message(),
        prop::option::of((
            prop::option::of(0i32..50),
            prop::option::of(any::<bool>()),
            prop::option::of(prop::collection::vec("text/[a-z]{1,5}", 0..2)),
            prop::option::of(push_config()),
        )),
        meta(),
        prop::option::of("[a-z]{1,4}"),
    )
        .prop_map(|(message, cfg, metadata, tenant)| SendMessageRequest {
            message,
            configuration: cfg.map(|(h, r, modes, push)| SendMessageConfiguration {
                accepted_output_modes: modes,
                task_push_notification_config: push,
                history_length: h,
                return_immediately: r,
            }),
            metadata,
            tenant,
        })
}

fn call() -> impl Strategy<Value = (Method, Call)> {
    let tenant = || prop::option::of("[a-z]{1,4}");
    prop_oneof![
        4 => (send(), any::<bool>()).prop_map(|(s, streaming)| (
            if streaming { Method::SendStreamingMessage } else { Method::SendMessage },
            Call::Send(s)
        )),
        1 => ("[a-z0-9]{1,6}", prop::option::of(0i32..9), tenant()).prop_map(|(id, h, tenant)| (
            Method::GetTask,
            Call::GetTask(GetTaskRequest { id, history_length: h, tenant })
        )),
        1 => (prop::option::of("[a-z]{1,4}"), prop::option::of(state()), prop::option::of(1i32..9),
              prop::option::of(0i64..4_000_000_000), prop::option::of(any::<bool>()), tenant())
            .prop_map(|(context_id, status, page_size, ts, include_artifacts, tenant)| (
                Method::ListTasks,
                Call::ListTasks(ListTasksRequest {
                    context_id, status, page_size, page_token: None, history_length: page_size,
                    status_timestamp_after: ts.and_then(|s| chrono::DateTime::from_timestamp(s, 0)),
                    include_artifacts, tenant,
                })
            )),
        1 => ("[a-z0-9]{1,6}", meta(), tenant()).prop_map(|(id, metadata, tenant)| (
            Method::CancelTask,
            Call::CancelTask(CancelTaskRequest { id, metadata, tenant })
        )),
        1 => ("[a-z0-9]{1,6}", tenant()).prop_map(|(id, tenant)| (
            Method::SubscribeToTask,
            Call::Subscribe(SubscribeToTaskRequest { id, tenant })
        )),
        // A push config is set on a task: its id is required.
        1 => push_config()
            .prop_filter("a task id", |c| !c.task_id.is_empty())
            .prop_map(|c| (Method::SetPushConfig, Call::SetPushConfig(c))),
        1 => ("[a-z0-9]{1,6}", "[a-z0-9]{0,6}", tenant()).prop_map(|(task_id, id, tenant)| (
            Method::GetPushConfig,
            Call::GetPushConfig(GetTaskPushNotificationConfigRequest { task_id, id, tenant })
        )),
        // A delete names the config it deletes.
        1 => ("[a-z0-9]{1,6}", "[a-z0-9]{1,6}", tenant()).prop_map(|(task_id, id, tenant)| (
            Method::DeletePushConfig,
            Call::DeletePushConfig(DeleteTaskPushNotificationConfigRequest { task_id, id, tenant })
        )),
        1 => ("[a-z0-9]{1,6}", prop::option::of(1i32..9), tenant()).prop_map(|(task_id, page_size, tenant)| (
            Method::ListPushConfigs,
            Call::ListPushConfigs(ListTaskPushNotificationConfigsRequest {
                task_id, page_size, page_token: None, tenant,
            })
        )),
        1 => Just((Method::GetExtendedCard, Call::GetExtendedCard)),
    ]
}

fn id() -> impl Strategy<Value = Option<JsonRpcId>> {
    prop::option::of(prop_oneof![
        "[a-z0-9\"]{0,6}".prop_map(JsonRpcId::String),
        any::<i64>().prop_map(JsonRpcId::from),
        Just(JsonRpcId::Null),
    ])
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("valid JSON")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn written_replies_read_back_as_written(r in reply(), id in id()) {
        let id = id.unwrap_or(JsonRpcId::Null);
        // A model the writer can carry whole (see `written_back`).
        let r = written_back(&r, Dialect::V1_0);
        for d in Dialect::ALL {
            for m in [None, Some(Method::GetTask), Some(Method::CancelTask), Some(Method::SendMessage)] {
                let bytes = match m {
                    None => super::encode_reply(d, &id, &r),
                    Some(m) => super::encode_reply_to(m, d, &id, &r),
                };
                let (read_id, read) = super::decode_reply(&bytes, d).map_err(|e| {
                    TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&bytes)))
                })?;
                prop_assert_eq!(&read_id, &id);
                prop_assert_eq!(read, Ok(written_back(&r, d)), "dialect {} method {:?}", d, m);
            }
            let bare = super::write_reply_json(d, &r);
            prop_assert_eq!(super::read_reply_json(&bare, d), Ok(written_back(&r, d)), "dialect {}", d);
        }
    }

    /// An agent's answer with its `_mesh` written from the fields reads back as the same
    /// answer with the `_mesh` put into the task's metadata first.
    #[test]
    fn a_task_with_mesh_written_from_its_fields_reads_as_one_put_into_its_metadata(
        t in task(), instance in "[a-z0-9]{1,12}", seq in 0u64..1_000_000,
        history_from in proptest::option::of(0u64..10), id in id()
    ) {
        // What an agent's answer carries: its instance, its position, the history it left out.
        let mesh = crate::meta::MeshMeta {
            instance: Some(instance),
            seq: Some(seq),
            history_from,
            ..Default::default()
        };
        let id = id.unwrap_or(JsonRpcId::Null);
        let mut t = written_back(&Reply::Task(t), Dialect::V1_0);
        let Reply::Task(t) = &mut t else { unreachable!() };
        if let Some(own) = t.metadata.as_mut() {
            own.remove(crate::model::MESH_KEY);
        }
        let mut put = t.clone();
        mesh.clone().put(&mut put.metadata);
        // One with a `_mesh` of its own is left to the caller, which merges them.
        prop_assert!(super::encode_task_with_mesh(Method::SendMessage, Dialect::V0_3, &id, &put, super::TaskView::WHOLE, &mesh).is_none());
        for d in Dialect::ALL {
            for view in [super::TaskView::WHOLE, super::TaskView::history(Some(1))] {
                let fields = super::encode_task_with_mesh(Method::SendMessage, d, &id, t, view, &mesh)
                    .expect("a task without a _mesh of its own");
                let value = super::encode_task(Method::SendMessage, d, &id, &put, view);
                prop_assert_eq!(parse(&fields), parse(&value), "dialect {}", d);
            }
        }
    }

    /// An agent's stream event with its `_mesh` written from the fields reads as the same
    /// event with the `_mesh` put into its metadata first; in 0.1, or with a `_mesh` of its
    /// own, the event is left to that.
    #[test]
    fn an_event_with_mesh_written_from_its_fields_reads_as_one_put_into_its_metadata(
        r in reply(), instance in "[a-z0-9]{1,12}", seq in 0u64..1_000_000, id in id()
    ) {
        let id = id.unwrap_or(JsonRpcId::Null);
        let mesh = crate::meta::MeshMeta {
            instance: Some(instance),
            seq: Some(seq),
            ..Default::default()
        };
        let own_mesh = super::writer::has_own_mesh;
        let event = matches!(&r, Reply::StatusUpdate(e) if !own_mesh(&e.metadata))
            || matches!(&r, Reply::ArtifactUpdate(e) if !own_mesh(&e.metadata));
        let mut put = r.clone();
        match &mut put {
            Reply::Task(t) => mesh.clone().put(&mut t.metadata),
            Reply::Message(m) => mesh.clone().put(&mut m.metadata),
            Reply::StatusUpdate(e) => mesh.clone().put(&mut e.metadata),
            Reply::ArtifactUpdate(e) => mesh.clone().put(&mut e.metadata),
            _ => {}
        }
        for d in Dialect::ALL {
            let fields = super::encode_event_with_mesh(d, &id, &r, &mesh);
            prop_assert_eq!(fields.is_some(), event && d != Dialect::V0_1, "dialect {}", d);
            if let Some(fields) = fields {
                let value = super::encode_reply(d, &id, &put);
                prop_assert_eq!(parse(&fields), parse(&value), "dialect {}", d);
            }
        }
    }

    #[test]
    fn written_requests_read_back_as_written((method, call) in call(), id in id(), mesh in mesh()) {
        // A model the writer can carry whole (see `written_back`).
        let call = call_as_read(&call);
        let mut mesh = mesh;
        if let Some(t) = &mut mesh.task {
            task_as_read(t);
        }
        for d in Dialect::ALL {
            let req = Request { id: id.clone(), method, dialect: d, shared_method: false, call: call.clone(), mesh: mesh.clone() };
            let bytes = super::encode_request(&req);
            let read = super::decode_request(&bytes).map_err(|e| {
                TestCaseError::fail(format!("{}: {}", e.error, String::from_utf8_lossy(&bytes)))
            })?;
            prop_assert_eq!(read.id, req.id);
            prop_assert_eq!(read.method, req.method);
            // 0.1 and 0.3 share some method names, and 0.1 has no extended-card method (0.3's
            // name is written): such a request reads as 0.3.
            let read_as_03 = read.shared_method || (d == Dialect::V0_1 && method == Method::GetExtendedCard);
            if !read_as_03 {
                prop_assert_eq!(read.dialect, d);
            }
            prop_assert_eq!(&read.call, &call_written_back(&call, d), "dialect {}", d);
            // The envelope rides in the params' metadata: only a send and a cancel have one.
            let carried = matches!(call, Call::Send(_) | Call::CancelTask(_));
            let expected = if carried { mesh.clone() } else { Default::default() };
            prop_assert_eq!(read.mesh, expected, "dialect {}", d);
        }
    }
}

/// A reply as a reader gives it back after `d` wrote it: the same, but for what the codec
/// documents as not carried (see the module docs of `codec`): metadata that is an empty
/// object reads as absent, a user's own `_mesh` member is the codec's stash, and 0.x
/// push-config lists have no page token.
fn written_back(r: &Reply, d: Dialect) -> Reply {
    let mut r = r.clone();
    match &mut r {
        Reply::Task(t) => task_as_read(t),
        Reply::Message(m) => message_as_read(m),
        Reply::StatusUpdate(e) => {
            meta_as_read(&mut e.metadata);
            if let Some(m) = &mut e.status.message {
                message_as_read(m);
            }
        }
        Reply::ArtifactUpdate(e) => {
            meta_as_read(&mut e.metadata);
            artifact_as_read(&mut e.artifact);
        }
        Reply::Tasks(l) => l.tasks.iter_mut().for_each(task_as_read),
        Reply::PushConfigs(l) if d != Dialect::V1_0 => l.next_page_token = None,
        _ => {}
    }
    r
}

/// The model with the metadata a writer cannot carry as it is taken out (see
/// [`written_back`]).
fn meta_as_read(m: &mut Option<Metadata>) {
    if let Some(map) = m {
        map.remove(MESH_KEY);
    }
    if m.as_ref().is_some_and(|map| map.is_empty()) {
        *m = None;
    }
}

fn message_as_read(m: &mut Message) {
    meta_as_read(&mut m.metadata);
    m.parts
        .iter_mut()
        .for_each(|p| meta_as_read(&mut p.metadata));
}

fn artifact_as_read(a: &mut Artifact) {
    meta_as_read(&mut a.metadata);
    a.parts
        .iter_mut()
        .for_each(|p| meta_as_read(&mut p.metadata));
}

fn task_as_read(t: &mut Task) {
    meta_as_read(&mut t.metadata);
    if let Some(m) = &mut t.status.message {
        message_as_read(m);
    }
    t.artifacts.iter_mut().flatten().for_each(artifact_as_read);
    t.history.iter_mut().flatten().for_each(message_as_read);
}

/// A call as a reader gives it back after `d` wrote it: a send's configuration that sets
/// nothing reads as none, and 0.x has no member for the task id and tenant of a send's push
/// config (the task is the one the send starts).
fn call_written_back(c: &Call, d: Dialect) -> Call {
    let mut c = c.clone();
    if let Call::Send(s) = &mut c
        && d != Dialect::V1_0
        && let Some(push) = s
            .configuration
            .as_mut()
            .and_then(|c| c.task_push_notification_config.as_mut())
    {
        push.task_id.clear();
        push.tenant = None;
    }
    if let Call::Send(s) = &mut c
        && s.configuration.as_ref().is_some_and(|c| {
            c.accepted_output_modes.is_none()
                && c.task_push_notification_config.is_none()
                && c.history_length.is_none()
                && c.return_immediately.is_none()
        })
    {
        s.configuration = None;
    }
    c
}

/// A call the writer can carry whole (see [`written_back`]).
fn call_as_read(c: &Call) -> Call {
    let mut c = c.clone();
    match &mut c {
        Call::Send(s) => {
            meta_as_read(&mut s.metadata);
            message_as_read(&mut s.message);
        }
        Call::CancelTask(x) => meta_as_read(&mut x.metadata),
        _ => {}
    }
    c
}

#[test]
fn written_errors_read_back_with_their_code_and_message() {
    let err = crate::error::A2aError::invalid_params_at("params.message", "missing");
    for d in Dialect::ALL {
        for id in [None, Some(JsonRpcId::from(3)), Some(JsonRpcId::from("x"))] {
            let out = super::encode_error(d, id.as_ref(), &err);
            let (read_id, read) = super::decode_reply(&out, d).expect("an error response");
            assert_eq!(read_id, id.clone().unwrap_or(JsonRpcId::Null));
            let read = read.expect_err("an error");
            assert_eq!(read.code(), err.code());
            assert_eq!(read.message, err.message, "dialect {d}");
        }
    }
}

/// A mutation of one object in a payload, to leave the canonical shapes.
#[derive(Debug, Clone, Copy)]
enum Mutation {
    SnakeCase,
    DropKind,
    AddUnknown,
    BadType,
    Null,
    Remove,
}

fn mutation() -> impl Strategy<Value = (Mutation, usize, usize)> {
    (
        prop_oneof![
            Just(Mutation::SnakeCase),
            Just(Mutation::DropKind),
            Just(Mutation::AddUnknown),
            Just(Mutation::BadType),
            Just(Mutation::Null),
            Just(Mutation::Remove),
        ],
        any::<usize>(),
        any::<usize>(),
    )
}

fn snake(k: &str) -> String {
    let mut out = String::new();
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn count_objects(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(count_objects).sum::<usize>(),
        Value::Array(a) => a.iter().map(count_objects).sum(),
        _ => 0,
    }
}

fn mutate_nth(v: &mut Value, n: &mut usize, how: Mutation, key: usize) -> bool {
    match v {
        Value::Object(m) => {
            if *n == 0 {
                let keys: Vec<String> = m.keys().cloned().collect();
                let k = (!keys.is_empty()).then(|| keys[key % keys.len()].clone());
                match (how, k) {
                    (Mutation::SnakeCase, Some(k)) => {
                        if let Some(x) = m.remove(&k) {
                            m.insert(snake(&k), x);
                        }
                    }
                    (Mutation::DropKind, _) => {
                        m.remove("kind");
                    }
                    (Mutation::AddUnknown, _) => {
                        m.insert("unknownMember".into(), json!(1));
                    }
                    (Mutation::BadType, Some(k)) => {
                        m.insert(k, json!(5));
                    }
                    (Mutation::Null, Some(k)) => {
                        m.insert(k, Value::Null);
                    }
                    (Mutation::Remove, Some(k)) => {
                        m.remove(&k);
                    }
                    _ => {}
                }
                return true;
            }
            *n -= 1;
            m.values_mut().any(|c| mutate_nth(c, n, how, key))
        }
        Value::Array(a) => a.iter_mut().any(|c| mutate_nth(c, n, how, key)),
        _ => false,
    }
}

fn mutate(bytes: &[u8], (how, which, key): (Mutation, usize, usize)) -> Vec<u8> {
    let mut v = parse(bytes);
    let mut n = which % count_objects(&v).max(1);
    mutate_nth(&mut v, &mut n, how, key);
    serde_json::to_vec(&v).expect("serializes")
}

/// The typed reader either declines or answers exactly what the lenient reader answers.
fn check_request(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Some(fast) = fast::decode_request(bytes) {
        prop_assert_eq!(
            lenient_reader::request::decode(bytes),
            super::Decoded::Single(Ok(fast)),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    Ok(())
}

fn check_reply(bytes: &[u8], d: Dialect) -> Result<(), TestCaseError> {
    if let Some(fast) = fast::decode_reply(bytes, d) {
        prop_assert_eq!(
            lenient_reader::reply::decode_reply(bytes, d),
            Ok(fast),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    // With the `_mesh` taken out as it is read: what the lenient reader reads, then taken out.
    if let Some(fast) = fast::decode_reply_and_mesh(bytes, d) {
        let lenient = lenient_reader::reply::decode_reply(bytes, d).map(|(id, reply)| {
            let reply = reply.map(|mut reply| {
                let mesh = reply.take_mesh();
                (reply, mesh)
            });
            (id, reply)
        });
        prop_assert_eq!(lenient, Ok(fast), "{}", String::from_utf8_lossy(bytes));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn typed_reader_matches_lenient_replies(r in reply(), id in id(), seq in prop::option::of(0u64..1000), history_from in prop::option::of(0u64..5), unknown in prop::bool::ANY, muts in prop::collection::vec(mutation(), 1..3)) {
        let id = id.unwrap_or(JsonRpcId::Null);
        // As an agent sends it: its `_mesh` in the metadata (the lenient reader's own `_mesh`
        // cases come from `meta()`).
        let mut r = r;
        // Random `_mesh` values of the model's own (`meta()`) may be left to the lenient reader.
        let own_mesh = match &r {
            Reply::Task(t) => t.metadata.as_ref(),
            Reply::Message(m) => m.metadata.as_ref(),
            Reply::StatusUpdate(e) => e.metadata.as_ref(),
            Reply::ArtifactUpdate(e) => e.metadata.as_ref(),
            _ => None,
        }
        .is_some_and(|m| m.contains_key(MESH_KEY));
        if seq.is_some() || history_from.is_some() {
            let mut other = serde_json::Map::new();
            if unknown {
                other.insert("futureField".into(), json!([true, "x"]));
            }
            let mesh = crate::meta::MeshMeta {
                instance: seq.map(|s| format!("i{s}")),
                seq,
                history_from,
                other,
                ..Default::default()
            };
            match &mut r {
                Reply::Task(t) => mesh.put(&mut t.metadata),
                Reply::Message(m) => mesh.put(&mut m.metadata),
                Reply::StatusUpdate(e) => mesh.put(&mut e.metadata),
                Reply::ArtifactUpdate(e) => mesh.put(&mut e.metadata),
                _ => {}
            }
        }
        for d in Dialect::ALL {
            for m in [Method::GetTask, Method::SendMessage] {
                let bytes = super::encode_reply_to(m, d, &id, &r);
                check_reply(&bytes, d)?;
                // What the bus carries is read by the typed reader.
                let canonical = d != Dialect::V0_1
                    && matches!(r, Reply::Task(_) | Reply::Message(_) | Reply::StatusUpdate(_) | Reply::ArtifactUpdate(_) | Reply::Empty)
                    && !(d == Dialect::V0_3 && matches!(r, Reply::Empty));
                if canonical {
                    prop_assert!(fast::decode_reply(&bytes, d).is_some(), "not covered: {}", String::from_utf8_lossy(&bytes));
                    prop_assert!(own_mesh || fast::decode_reply_and_mesh(&bytes, d).is_some(), "not covered: {}", String::from_utf8_lossy(&bytes));
                }
                let mut mutated = bytes.clone();
                for m in &muts {
                    mutated = mutate(&mutated, *m);
                    check_reply(&mutated, d)?;
                }
            }
        }
        let err = super::encode_error(Dialect::V0_3, Some(&id), &crate::error::A2aError::invalid_params("x"));
        prop_assert!(fast::decode_reply(&err, Dialect::V0_3).is_some());
        check_reply(&err, Dialect::V0_3)?;
    }

    #[test]
    fn typed_reader_matches_lenient_requests((method, call) in call(), id in id(), mesh in mesh(), muts in prop::collection::vec(mutation(), 1..3)) {
        for d in Dialect::ALL {
            let req = Request { id: id.clone(), method, dialect: d, shared_method: false, call: call.clone(), mesh: mesh.clone() };
            let bytes = super::encode_request(&req);
            check_request(&bytes)?;
            if d != Dialect::V0_1 && matches!(call, Call::Send(_)) {
                prop_assert!(fast::decode_request(&bytes).is_some(), "not covered: {}", String::from_utf8_lossy(&bytes));
            }
            let mut mutated = bytes.clone();
            for m in &muts {
                mutated = mutate(&mutated, *m);
                check_request(&mutated)?;
            }
        }
    }
}

/// Hand-picked payloads at the edge of the canonical shapes: the typed reader declines or
/// agrees with the lenient reader (results and error messages).
#[test]
fn typed_reader_edge_cases() {
    let msg =
        r#"{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]}"#;
    let requests = [
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":null,"method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1.5,"method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":true,"method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"id":2,"method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message\/send","params":{{"message":{msg}}}}}"#),
        format!(r#"{{"jsonrpc":"1.0","id":1,"method":"message/send","params":{{"message":{msg}}}}}"#),
        format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg}}}}}]"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":[{msg}]}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":[1]}}"#.to_string(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"extra":1}}}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[{"kind":{"text":null},"text":"hi"}]}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[{"kind":"text","text":"hi","data":null}]}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"text":"hi"}]}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[]}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[{"text":"a"}],"metadata":{"_mesh":{}}},"configuration":{"blocking":false,"returnImmediately":false}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"raw":"aGk="}]},"configuration":{}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t","metadata":{"a":1}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t","historyLength":2.0}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"t","metadata":{}}}"#.to_string(),
        // The envelope under params.metadata._mesh: read in place, or declined to the lenient
        // reader when it is anything but a plain object of well-typed members.
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"a":1,"_mesh":{{"replyTo":"r/t","requestId":"q","deadline":17,"caller":{{"id":"g","kind":"gateway","x":1}},"depth":0,"taskId":"t","task":null,"seq":3,"instance":"i","other":[1]}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"replyTo":null,"deadline":null,"caller":null}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"replyTo":"a","replyTo":"b"}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"x":1}},"_mesh":{{"y":2}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"replyTo":5,"deadline":-1,"depth":4294967296}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"deadline":1.5,"seq":"3"}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{{"message":{msg},"metadata":{{"_mesh":{{"window":256}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{{"message":{msg},"metadata":{{"_mesh":{{"window":"256"}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{{"message":{msg},"metadata":{{"_mesh":{{"window":-1}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{{"message":{msg},"metadata":{{"_mesh":{{"window":4294967296}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"caller":{{"kind":"gateway"}}}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{"caller":{{"kind":"agent","id":"a","principal":7}}}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":"junk","b":2}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":[1,2]}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"\u005fmesh":{{"replyTo":"r"}},"k\"ey":1}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{"_mesh":{{}}}}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{{"message":{msg},"metadata":{{}}}}}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"t","metadata":{"_mesh":{"replyTo":"r","requestId":"q"}}}}"#.to_string(),
    ];
    for r in &requests {
        let fast = fast::decode_request(r.as_bytes());
        if let Some(f) = fast {
            assert_eq!(
                lenient_reader::request::decode(r.as_bytes()),
                super::Decoded::Single(Ok(f)),
                "{r}"
            );
        }
        assert_eq!(
            super::decode(r.as_bytes()),
            lenient_reader::request::decode(r.as_bytes()),
            "{r}"
        );
    }
    let task = r#"{"kind":"task","id":"t","contextId":"c","status":{"state":"completed"}}"#;
    let replies = [
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{task}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"task":{task}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"task":{task},"id":null}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{task},"error":null}}"#),
        format!(r#"{{"jsonrpc":"2.0","result":{task}}}"#),
        r#"{"jsonrpc":"2.0","id":1,"result":{"kind":null,"id":"t","status":{"state":"working"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"kind":"status-update","id":"t","status":{"state":"working"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"type":"task","id":"t","status":{"state":"working"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"taskId":"t","status":{"state":"working"},"final":true}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"taskId":"t","artifact":{"artifactId":"a","parts":[{"text":"x"}]}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"role":"agent","parts":[{"text":"x"}],"messageId":"m"}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"role":"agent","parts":[{"text":"x"}]}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":null}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"result":[]}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"nope"}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1}"#.to_string(),
    ];
    for r in &replies {
        for d in Dialect::ALL {
            if let Some(f) = fast::decode_reply(r.as_bytes(), d) {
                assert_eq!(
                    lenient_reader::reply::decode_reply(r.as_bytes(), d),
                    Ok(f),
                    "{r}"
                );
            }
        }
    }
    // The canonical ones are covered, the envelope included.
    assert!(fast::decode_request(requests[0].as_bytes()).is_some());
    let enveloped = requests
        .iter()
        .find(|r| r.contains(r#""replyTo":"r/t""#))
        .unwrap();
    let decoded = fast::decode_request(enveloped.as_bytes()).expect("read in place");
    assert_eq!(decoded.mesh.reply_to.as_deref(), Some("r/t"));
    assert_eq!(
        decoded.mesh.caller.as_ref().map(|c| c.id.as_str()),
        Some("g")
    );
    assert_eq!(decoded.mesh.task, None);
    assert_eq!(decoded.mesh.other.get("other"), Some(&json!([1])));
    let Call::Send(params) = &decoded.call else {
        panic!("a send")
    };
    assert_eq!(
        params.metadata,
        Some(HashMap::from([("a".to_owned(), json!(1))]))
    );
    assert!(fast::decode_reply(replies[0].as_bytes(), Dialect::V0_3).is_some());
    assert!(fast::decode_reply(replies[1].as_bytes(), Dialect::V1_0).is_some());
}

/// The typed readers check UTF-8 once for the whole payload: a canonical request or reply
/// with a byte that is not UTF-8 inside a string is left to the lenient reader, which answers
/// with a parse error (as for any other payload that is not JSON).
#[test]
fn invalid_utf8_is_a_parse_error_on_both_paths() {
    let mut request =
        br#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","role":"user","messageId":"m","parts":[{"kind":"text","text":"X"}]}}}"#
            .to_vec();
    let at = request.iter().position(|&b| b == b'X').unwrap();
    request[at] = 0xff;
    assert!(fast::decode_request(&request).is_none());
    let error = super::decode_request(&request).unwrap_err();
    assert_eq!(error.error.code(), -32700, "{error:?}");

    let mut reply =
        br#"{"jsonrpc":"2.0","id":1,"result":{"kind":"task","id":"t","contextId":"c","status":{"state":"X"}}}"#
            .to_vec();
    let at = reply.iter().position(|&b| b == b'X').unwrap();
    reply[at] = 0xc3; // the first byte of a two-byte sequence, cut short
    for d in Dialect::ALL {
        assert!(fast::decode_reply(&reply, d).is_none());
        let error = super::decode_reply(&reply, d).unwrap_err();
        assert_eq!(error.code(), -32700, "{error:?}");
    }
}

/// A task with large parts: a 256 KiB text in its history and the same bytes as a file in
/// its artifact.
fn bulky_task() -> Task {
    let text = "x".repeat(256 * 1024);
    let mut task = Task {
        id: "t".into(),
        context_id: "c".into(),
        status: TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: None,
        },
        artifacts: Some(vec![Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts: vec![Part::raw(text.clone().into_bytes())],
            metadata: None,
            extensions: None,
        }]),
        history: Some(vec![Message::new(Role::User, vec![Part::text(text)])]),
        metadata: None,
    };
    task.history.as_mut().unwrap()[0].message_id = "m".into();
    task
}

/// The writer makes its buffer once at about the document's size: a buffer grown past each
/// large part ended with twice the document's size (and a copy of it per doubling).
#[test]
fn a_large_document_is_written_into_a_buffer_of_about_its_size() {
    let reply = Reply::Task(bulky_task());
    for dialect in [Dialect::V0_1, Dialect::V0_3, Dialect::V1_0] {
        let bytes = super::encode_reply(dialect, &JsonRpcId::String("1".into()), &reply);
        assert!(
            bytes.capacity() < bytes.len() + bytes.len() / 8,
            "{dialect:?}: {} bytes in a buffer of {}",
            bytes.len(),
            bytes.capacity()
        );
    }
}

/// Decoded lists are the model's in vectors of their own length: collecting in place kept
/// serde's larger buffer for as long as the task lived.
#[test]
fn decoded_lists_hold_no_more_room_than_their_items() {
    let bytes = super::encode_reply(
        Dialect::V0_3,
        &JsonRpcId::String("1".into()),
        &Reply::Task(bulky_task()),
    );
    let (_, reply) = super::decode_reply(&bytes, Dialect::V0_3).unwrap();
    let Ok(Reply::Task(task)) = reply else {
        panic!("a task: {reply:?}")
    };
    let history = task.history.unwrap();
    let artifacts = task.artifacts.unwrap();
    assert_eq!(history.capacity(), history.len());
    assert_eq!(history[0].parts.capacity(), history[0].parts.len());
    assert_eq!(artifacts.capacity(), artifacts.len());
    assert_eq!(artifacts[0].parts.capacity(), artifacts[0].parts.len());
}

#[test]
fn an_answer_reads_its_mesh_apart_and_leaves_a_snapshot_in_it_to_the_lenient_reader() {
    let answer = |mesh: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"r1","result":{{"kind":"task","id":"t","contextId":"c","status":{{"state":"completed"}},"metadata":{{"k":1,"_mesh":{mesh}}}}}}}"#
        )
    };
    let plain = answer(r#"{"instance":"i","seq":3,"historyFrom":1}"#);
    let (id, read) = fast::decode_reply_and_mesh(plain.as_bytes(), Dialect::V0_3).unwrap();
    assert_eq!(id, JsonRpcId::String("r1".into()));
    let (Reply::Task(task), mesh) = read.unwrap() else {
        panic!("a task")
    };
    assert_eq!(task.metadata, Some(HashMap::from([("k".into(), json!(1))])));
    assert_eq!(
        (mesh.instance.as_deref(), mesh.seq, mesh.history_from),
        (Some("i"), Some(3), Some(1))
    );
    // A snapshot is a request's: the typed reader declines, the lenient one keeps it as is.
    let snapshot = answer(
        r#"{"seq":3,"task":{"kind":"task","id":"s","contextId":"c","status":{"state":"working"}}}"#,
    );
    assert!(fast::decode_reply_and_mesh(snapshot.as_bytes(), Dialect::V0_3).is_none());
    let (_, read) = super::decode_reply_and_mesh(snapshot.as_bytes(), Dialect::V0_3).unwrap();
    let (_, mesh) = read.unwrap();
    assert_eq!(mesh.seq, Some(3));
    assert_eq!(mesh.other["task"]["id"], "s");
}

#[test]
fn a_stream_after_progress_of_the_wrong_type_reads_as_absent_and_the_request_stands() {
    for value in ["\"yes\"", "1", "null", "{}"] {
        let payload = format!(
            r#"{{"jsonrpc":"2.0","id":"r1","method":"message/send","params":{{"message":{{"kind":"message","role":"user","messageId":"m1","parts":[{{"kind":"text","text":"x"}}]}},"metadata":{{"_mesh":{{"replyTo":"t","streamAfterProgress":{value}}}}}}}}}"#
        );
        let request = super::decode_request(payload.as_bytes()).expect("the request stands");
        assert_eq!(request.mesh.stream_after_progress, None, "{value}");
        assert_eq!(request.mesh.reply_to.as_deref(), Some("t"), "{value}");
    }
    let payload = br#"{"jsonrpc":"2.0","id":"r1","method":"message/send","params":{"message":{"kind":"message","role":"user","messageId":"m1","parts":[{"kind":"text","text":"x"}]},"metadata":{"_mesh":{"replyTo":"t","streamAfterProgress":true}}}}"#;
    let request = super::decode_request(payload).unwrap();
    assert_eq!(request.mesh.stream_after_progress, Some(true));
}
