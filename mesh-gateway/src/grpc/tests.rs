//! The generated server mounted on an axum router (as the gateway serves it) and called
//! in process by the generated client: messages cross real protobuf encoding, errors
//! arrive as the statuses [`super::status`] makes, mid-stream ones in the trailers.

use std::time::Duration;

use futures_util::StreamExt;
use mesh_core::error::{A2aError, ErrorKind};
use mesh_core::model as m;
use tonic::server::NamedService;
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

use super::convert;
use super::proto as pb;
use super::proto::a2a_service_client::A2aServiceClient;
use super::proto::a2a_service_server::{A2aService, A2aServiceServer};
use super::status::to_status;

/// Answers sends with a completed task holding the message, streams two events and then
/// fails, and knows no task (`kind:<code>` gets that error kind instead).
struct Stub;

type Events = futures_util::stream::Iter<std::vec::IntoIter<Result<pb::StreamResponse, Status>>>;

// tonic's handlers answer `Result<Response<T>, Status>`, Status and all.
#[allow(clippy::result_large_err)]
fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not in this test"))
}

#[tonic::async_trait]
impl A2aService for Stub {
    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let send =
            convert::send_message_request(request.into_inner()).map_err(|e| to_status(&e))?;
        let task = m::Task {
            id: "task-1".into(),
            context_id: send.message.context_id.clone().unwrap_or_default(),
            status: m::TaskStatus {
                state: m::TaskState::Completed,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: Some(vec![send.message]),
            metadata: send.metadata.filter(|md| !md.is_empty()),
        };
        Ok(Response::new(m::SendMessageResponse::Task(task).into()))
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        let send =
            convert::send_message_request(request.into_inner()).map_err(|e| to_status(&e))?;
        let working = m::StreamResponse::StatusUpdate(m::TaskStatusUpdateEvent {
            task_id: "task-1".into(),
            context_id: "ctx".into(),
            status: m::TaskStatus {
                state: m::TaskState::Working,
                message: None,
                timestamp: None,
            },
            metadata: None,
        });
        let echoed = m::StreamResponse::Message(send.message);
        let events = vec![
            Ok(working.into()),
            Ok(echoed.into()),
            Err(to_status(&A2aError::invalid_agent_response(
                "the agent went quiet",
            ))),
        ];
        Ok(Response::new(futures_util::stream::iter(events)))
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let get = convert::get_task_request(request.into_inner()).map_err(|e| to_status(&e))?;
        // `kind:<code>` asks for that error; `long` for an overlong message.
        if let Some(code) = get.id.strip_prefix("kind:").and_then(|c| c.parse().ok()) {
            let kind = ErrorKind::from_code(code);
            return Err(to_status(&A2aError::new(
                kind,
                format!("kind {code}: ünïcode 100%"),
            )));
        }
        if get.id == "long" {
            return Err(to_status(&A2aError::internal("é".repeat(5_000))));
        }
        Err(to_status(&A2aError::task_not_found(&get.id)))
    }

    async fn list_tasks(
        &self,
        _: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        unimplemented()
    }

    async fn cancel_task(
        &self,
        _: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        unimplemented()
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        _: Request<pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        unimplemented()
    }

    async fn create_task_push_notification_config(
        &self,
        _: Request<pb::TaskPushNotificationConfig>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        unimplemented()
    }

    async fn get_task_push_notification_config(
        &self,
        _: Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        unimplemented()
    }

    async fn list_task_push_notification_configs(
        &self,
        _: Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        unimplemented()
    }

    async fn get_extended_agent_card(
        &self,
        _: Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<pb::AgentCard>, Status> {
        unimplemented()
    }

    async fn delete_task_push_notification_config(
        &self,
        _: Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        unimplemented()
    }
}

/// The generated server on an axum route, as a client's channel.
fn client() -> A2aServiceClient<axum::Router> {
    let name = <A2aServiceServer<Stub> as NamedService>::NAME;
    assert_eq!(name, "lf.a2a.v1.A2AService");
    let router = axum::Router::new()
        .route_service(&format!("/{name}/{{*method}}"), A2aServiceServer::new(Stub));
    A2aServiceClient::new(router)
}

fn message() -> m::Message {
    m::Message {
        message_id: "m-1".into(),
        context_id: Some("ctx".into()),
        task_id: None,
        role: m::Role::User,
        parts: vec![
            m::Part::text("hi"),
            m::Part::data(serde_json::json!({"n": 1, "x": [0.5, null]})),
        ],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

fn send(msg: m::Message) -> pb::SendMessageRequest {
    pb::SendMessageRequest {
        message: Some(msg.into()),
        ..Default::default()
    }
}

/// Bounds every call (the calls are in process, so this never fires when all is well).
async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("the in-process call finishes")
}

#[tokio::test]
async fn a_unary_call_crosses_the_wire() {
    let answer = bounded(client().send_message(send(message())))
        .await
        .expect("a task")
        .into_inner();
    let m::SendMessageResponse::Task(task) =
        convert::send_message_response_from_proto(answer).expect("reads back")
    else {
        panic!("expected a task");
    };
    assert_eq!(task.status.state, m::TaskState::Completed);
    assert_eq!(task.history, Some(vec![message()]));
}

#[tokio::test]
async fn an_a2a_error_arrives_with_its_code_and_error_info() {
    let status = bounded(client().get_task(pb::GetTaskRequest {
        id: "nope".into(),
        ..Default::default()
    }))
    .await
    .expect_err("no such task");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.message(), "Task not found: nope");
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "TASK_NOT_FOUND");
    assert_eq!(info.domain, "a2a-protocol.org");
    assert_eq!(
        info.metadata.get("taskId").map(String::as_str),
        Some("nope")
    );
}

#[tokio::test]
async fn invalid_input_is_invalid_argument_naming_the_field() {
    let mut bad = send(message());
    if let Some(msg) = bad.message.as_mut() {
        msg.role = 9;
    }
    let status = bounded(client().send_message(bad))
        .await
        .expect_err("bad role");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.get_details_error_info().expect("ErrorInfo").reason,
        "INVALID_PARAMS"
    );
    let violation = &status
        .get_details_bad_request()
        .expect("BadRequest")
        .field_violations[0];
    assert_eq!(violation.field, "message.role");
    assert!(violation.description.starts_with("unknown role 9"));
}

#[tokio::test]
async fn a_stream_carries_events_then_an_error_in_its_trailers() {
    let mut stream = bounded(client().send_streaming_message(send(message())))
        .await
        .expect("a stream")
        .into_inner();
    let mut events = Vec::new();
    let status = loop {
        match bounded(stream.next()).await {
            Some(Ok(event)) => {
                events.push(convert::stream_response_from_proto(event).expect("reads back"))
            }
            Some(Err(status)) => break status,
            None => panic!("the stream ended without its error"),
        }
    };
    assert_eq!(events.len(), 2);
    assert!(
        matches!(&events[0], m::StreamResponse::StatusUpdate(e) if e.status.state == m::TaskState::Working)
    );
    assert_eq!(events[1], m::StreamResponse::Message(message()));
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(
        status.get_details_error_info().expect("ErrorInfo").reason,
        "INVALID_AGENT_RESPONSE"
    );
}

#[tokio::test]
async fn every_error_kind_arrives_with_its_code_and_reason() {
    let mut client = client();
    for kind in ErrorKind::ALL.into_iter().chain([ErrorKind::Other(-32099)]) {
        let code = kind.code();
        let status = bounded(client.get_task(pb::GetTaskRequest {
            id: format!("kind:{code}"),
            ..Default::default()
        }))
        .await
        .expect_err("an error");
        assert_eq!(status.code(), super::status::code(kind), "{kind:?}");
        assert_eq!(status.message(), format!("kind {code}: ünïcode 100%"));
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, kind.reason());
        assert_eq!(info.domain, "a2a-protocol.org");
    }
}
