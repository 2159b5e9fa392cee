//! The gRPC binding's server: the proto's `A2AService` over the transport-free
//! [service](crate::service). Each call is converted to the model ([`convert`]), checked as
//! the other bindings check theirs (`A2A-Version` in the metadata, §10.2; the body size is
//! tonic's decoding limit, set to the gateway's body limit; API keys are the authentication
//! layer's, read from the `authorization` / `x-api-key` metadata like headers), served, and
//! converted back; errors are statuses as §10.6 maps them ([`status`]). The streaming methods
//! are server streaming, ending as the service's event streams end.
//!
//! The agent is the request's `tenant` (each agent's card declares its gRPC interface with
//! `tenant` set to its name, and clients copy it into every request, §8.3.2); a request
//! without a tenant goes to the default agent.
//!
//! [`convert`]: super::convert
//! [`status`]: super::status

// tonic's API takes and returns its `Status` by value.
#![allow(clippy::result_large_err)]

use super::convert;
use super::proto as pb;
use super::status;
use crate::auth::Authenticated;
use crate::bridge::{task_as_updates, view};
use crate::metrics::Metrics;
use crate::service::{A2aService, RequestContext, SendOutcome, TaskEvents};
use futures_util::stream::{self, Stream};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::A2aError;
use mesh_core::model as m;
use mesh_core::rpc::Reply;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

/// What the gRPC service uses.
pub(crate) struct Grpc {
    pub service: Arc<A2aService>,
    pub metrics: Arc<Metrics>,
    /// The agent a request without a tenant is for.
    pub default_agent: Option<String>,
}

/// The server of the proto's `A2AService`, with the gateway's body limit as its largest
/// message.
pub(crate) fn server(
    grpc: Grpc,
    body_limit: usize,
) -> pb::a2a_service_server::A2aServiceServer<Grpc> {
    pb::a2a_service_server::A2aServiceServer::new(grpc).max_decoding_message_size(body_limit)
}

/// A stream of `StreamResponse`s.
type Events = Pin<Box<dyn Stream<Item = Result<pb::StreamResponse, Status>> + Send>>;

impl Grpc {
    /// Reads a call: the version check (§10.2: `a2a-version` metadata), the message into the
    /// model, and its context for the agent its tenant names (else the default agent). A
    /// refusal is counted.
    fn read<P, T>(
        &self,
        method: Method,
        began: Instant,
        request: Request<P>,
        convert: impl FnOnce(P) -> Result<T, A2aError>,
        tenant: impl Fn(&T) -> Option<&str>,
    ) -> Result<(RequestContext, T), Status> {
        let refused = |status: Status| {
            self.metrics.request(Some(method), false, began.elapsed());
            status
        };
        let (metadata, extensions, message) = request.into_parts();
        if let Some(version) = metadata.get("a2a-version").and_then(|v| v.to_str().ok()) {
            let version = version.trim();
            if !(version.is_empty() || version == "1" || version.starts_with("1.")) {
                return Err(refused(status::version_not_supported(version)));
            }
        }
        let params = convert(message).map_err(|e| refused(status::to_status(&e)))?;
        let agent = match tenant(&params).filter(|t| !t.is_empty()) {
            Some(tenant) => tenant.to_owned(),
            None => self.default_agent.clone().ok_or_else(|| {
                let e = self
                    .service
                    .no_default_agent("set the request's tenant to an agent's name");
                refused(status::to_status(&e))
            })?,
        };
        let cx = RequestContext {
            agent,
            caller: extensions.get::<Authenticated>().cloned(),
            traceparent: metadata
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            dialect: Dialect::V1_0,
        };
        Ok((cx, params))
    }

    /// Counts a call and turns its error into a status.
    fn answered<T>(
        &self,
        method: Method,
        began: Instant,
        result: Result<T, A2aError>,
    ) -> Result<Response<T>, Status> {
        self.metrics
            .request(Some(method), result.is_ok(), began.elapsed());
        result.map(Response::new).map_err(|e| status::to_status(&e))
    }
}

/// `task` with only its last `history_length` messages (when given).
fn trimmed(mut task: m::Task, history_length: Option<i32>) -> m::Task {
    if let (Some(n), Some(history)) = (history_length, task.history.as_mut()) {
        let keep = usize::try_from(n).unwrap_or(0);
        if history.len() > keep {
            history.drain(..history.len() - keep);
        }
    }
    task
}

/// The service's events as `StreamResponse`s: a Task after the first event becomes its
/// artifacts and its status, as in every binding's streams; an error ends the stream with
/// its status.
fn events(events: TaskEvents) -> Events {
    struct State {
        events: TaskEvents,
        pending: VecDeque<Result<pb::StreamResponse, Status>>,
        started: bool,
    }
    let state = State {
        started: events.resumed,
        events,
        pending: VecDeque::new(),
    };
    Box::pin(stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                return Some((item, state));
            }
            let (seq, event) = state.events.next().await?;
            let started = std::mem::replace(&mut state.started, true);
            let numbered = |reply: Reply| stream_response(with_event_id(reply, seq));
            match view(&event) {
                Err(e) => state.pending.push_back(Err(status::to_status(e))),
                Ok(Reply::Task(task)) if started => state
                    .pending
                    .extend(task_as_updates(task).filter_map(numbered).map(Ok)),
                Ok(reply) => state.pending.extend(numbered(reply.clone()).map(Ok)),
            }
        }
    }))
}

/// The metadata key of a streamed event's sequence number in its task: what a client sends
/// back as `last-event-id` to resume (gRPC has no event ids of its own).
pub(crate) const EVENT_ID_KEY: &str = "meshEventId";

/// `reply` with its sequence number in its task in its metadata ([`EVENT_ID_KEY`]); as it is
/// when the store did not log it (`seq` 0).
fn with_event_id(mut reply: Reply, seq: u64) -> Reply {
    if seq == 0 {
        return reply;
    }
    let metadata = match &mut reply {
        Reply::Task(task) => &mut task.metadata,
        Reply::Message(message) => &mut message.metadata,
        Reply::StatusUpdate(update) => &mut update.metadata,
        Reply::ArtifactUpdate(update) => &mut update.metadata,
        _ => return reply,
    };
    metadata
        .get_or_insert_with(Default::default)
        .insert(EVENT_ID_KEY.to_owned(), seq.to_string().into());
    reply
}

/// A stream event as the proto's `StreamResponse` (other replies are no events).
fn stream_response(reply: Reply) -> Option<pb::StreamResponse> {
    let response = match reply {
        Reply::Task(task) => m::StreamResponse::Task(task),
        Reply::Message(message) => m::StreamResponse::Message(message),
        Reply::StatusUpdate(update) => m::StreamResponse::StatusUpdate(update),
        Reply::ArtifactUpdate(update) => m::StreamResponse::ArtifactUpdate(update),
        _ => return None,
    };
    Some(response.into())
}

/// Removes the reserved `_mesh` metadata a client may not set (the bus routing's own).
fn without_mesh(mut params: m::SendMessageRequest) -> m::SendMessageRequest {
    mesh_core::meta::MeshMeta::take(&mut params.metadata);
    params
}

#[tonic::async_trait]
impl pb::a2a_service_server::A2aService for Grpc {
    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let (began, method) = (Instant::now(), Method::SendMessage);
        let (cx, params) =
            self.read(method, began, request, convert::send_message_request, |p| {
                p.tenant.as_deref()
            })?;
        let history_length = params.configuration.as_ref().and_then(|c| c.history_length);
        let answer = self
            .service
            .send_message(&cx, without_mesh(params))
            .await
            .map(|outcome| {
                let response = match outcome {
                    SendOutcome::Task(record) => {
                        m::SendMessageResponse::Task(trimmed(record.task.clone(), history_length))
                    }
                    SendOutcome::Message(message) => m::SendMessageResponse::Message(message),
                };
                pb::SendMessageResponse::from(response)
            });
        self.answered(method, began, answer)
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        let (began, method) = (Instant::now(), Method::SendStreamingMessage);
        let (cx, params) =
            self.read(method, began, request, convert::send_message_request, |p| {
                p.tenant.as_deref()
            })?;
        let answer = self
            .service
            .stream_message(&cx, without_mesh(params))
            .await
            .map(events);
        self.answered(method, began, answer)
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let (began, method) = (Instant::now(), Method::GetTask);
        let (cx, params) = self.read(method, began, request, convert::get_task_request, |p| {
            p.tenant.as_deref()
        })?;
        let answer = self
            .service
            .get_task(&cx, &params)
            .await
            .map(|record| pb::Task::from(trimmed(record.task.clone(), params.history_length)));
        self.answered(method, began, answer)
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let (began, method) = (Instant::now(), Method::ListTasks);
        let (cx, params) = self.read(method, began, request, convert::list_tasks_request, |p| {
            p.tenant.as_deref()
        })?;
        let answer = self.service.list_tasks(&cx, params).await.map(|list| {
            let tasks = list
                .records
                .iter()
                .map(|record| {
                    let mut task = trimmed(record.task.clone(), list.history_length);
                    if !list.include_artifacts {
                        task.artifacts = None;
                    }
                    task
                })
                .collect();
            pb::ListTasksResponse::from(m::ListTasksResponse {
                tasks,
                next_page_token: list.next_page_token.unwrap_or_default(),
                page_size: i32::try_from(list.page_size).unwrap_or(i32::MAX),
                total_size: i32::try_from(list.total_size).unwrap_or(i32::MAX),
            })
        });
        self.answered(method, began, answer)
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let (began, method) = (Instant::now(), Method::CancelTask);
        let (cx, mut params) =
            self.read(method, began, request, convert::cancel_task_request, |p| {
                p.tenant.as_deref()
            })?;
        mesh_core::meta::MeshMeta::take(&mut params.metadata);
        let answer = self
            .service
            .cancel_task(&cx, params)
            .await
            .map(|record| pb::Task::from(record.task.clone()));
        self.answered(method, began, answer)
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        request: Request<pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        let (began, method) = (Instant::now(), Method::SubscribeToTask);
        // Resuming: the `last-event-id` metadata, as the SSE bindings' header.
        let resume_after = match request.metadata().get("last-event-id").map(|v| v.to_str()) {
            None => None,
            Some(Ok(text)) if text.trim().is_empty() => None,
            Some(Ok(text)) if text.trim().parse::<u64>().is_ok() => text.trim().parse().ok(),
            Some(_) => {
                let error = A2aError::invalid_params(
                    "last-event-id is not an event id of this gateway (the meshEventId of an event it sent)",
                );
                return self.answered(method, began, Err(error));
            }
        };
        let (cx, params) = self.read(
            method,
            began,
            request,
            convert::subscribe_to_task_request,
            |p| p.tenant.as_deref(),
        )?;
        let answer = self
            .service
            .subscribe(&cx, params, resume_after)
            .await
            .map(|(_, subscription)| events(subscription));
        self.answered(method, began, answer)
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<pb::TaskPushNotificationConfig>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        let (began, method) = (Instant::now(), Method::SetPushConfig);
        let (cx, config) = self.read(
            method,
            began,
            request,
            convert::create_push_config_request,
            |p| p.tenant.as_deref(),
        )?;
        let answer = self
            .service
            .set_push_config(&cx, config)
            .await
            .map(|(config, _)| pb::TaskPushNotificationConfig::from(config));
        self.answered(method, began, answer)
    }

    async fn get_task_push_notification_config(
        &self,
        request: Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        let (began, method) = (Instant::now(), Method::GetPushConfig);
        let (cx, params) = self.read(
            method,
            began,
            request,
            convert::get_push_config_request,
            |p| p.tenant.as_deref(),
        )?;
        let answer = self
            .service
            .get_push_config(&cx, &params)
            .await
            .map(|(config, _)| pb::TaskPushNotificationConfig::from(config));
        self.answered(method, began, answer)
    }

    async fn list_task_push_notification_configs(
        &self,
        request: Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        let (began, method) = (Instant::now(), Method::ListPushConfigs);
        let (cx, params) = self.read(
            method,
            began,
            request,
            convert::list_push_configs_request,
            |p| p.tenant.as_deref(),
        )?;
        let answer = self
            .service
            .list_push_configs(&cx, &params)
            .await
            .map(|(configs, _)| {
                pb::ListTaskPushNotificationConfigsResponse::from(
                    m::ListTaskPushNotificationConfigsResponse {
                        configs,
                        next_page_token: None,
                    },
                )
            });
        self.answered(method, began, answer)
    }

    async fn get_extended_agent_card(
        &self,
        request: Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<pb::AgentCard>, Status> {
        let (began, method) = (Instant::now(), Method::GetExtendedCard);
        let (cx, _) = self.read(
            method,
            began,
            request,
            |r| Ok(convert::extended_card_request(r)),
            |p| p.tenant.as_deref(),
        )?;
        let answer = self.service.extended_card(&cx).map(pb::AgentCard::from);
        self.answered(method, began, answer)
    }

    async fn delete_task_push_notification_config(
        &self,
        request: Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        let (began, method) = (Instant::now(), Method::DeletePushConfig);
        let (cx, params) = self.read(
            method,
            began,
            request,
            convert::delete_push_config_request,
            |p| p.tenant.as_deref(),
        )?;
        let answer = self
            .service
            .delete_push_config(&cx, &params)
            .await
            .map(|_| ());
        self.answered(method, began, answer)
    }
}
