//! JSON-RPC over `POST`: read the body (bounded), check the content type and the
//! `A2A-Version`, decode the request in whichever dialect it speaks, dispatch it, and answer
//! in the request's dialect with its exact id — a JSON response, an SSE stream, or nothing
//! (204) for a notification (a well-formed request without an `id`: a send or a cancel is
//! carried out, nothing is answered). A request without an `id` that cannot be served (an
//! unknown method, invalid params, an unsupported `A2A-Version`, no agent) gets its error with
//! `"id": null`, as JSON-RPC 2.0 §5 says of errors whose id cannot be known and as a2a-sdk's
//! server answers. Batches get an array of responses (streaming methods cannot be batched).
//!
//! Sending starts a task on the bus and hands its reply stream to the
//! [`bridge`](crate::bridge); everything else (get, list, cancel, resubscribe) answers from
//! the task store. Methods 0.1 and 0.3 share (`tasks/get`, `tasks/cancel`,
//! `tasks/resubscribe`, `tasks/list`) answer in the dialect that created the task.
//!
//! Push-notification configs (set, get, list, delete, and `pushNotificationConfig` inside a
//! send) are kept on the task's record and checked at registration (see
//! [`push`](crate::push)). With API keys, the caller's principal owns the tasks it creates
//! (another principal gets "task not found"), is forwarded to the agent, and may read the
//! extended card.

use crate::auth::Caller;
use crate::bridge::{Live, Undo, set_status};
use crate::push::{MAX_PUSH_CONFIGS, check_config};
use crate::server::Shared;
use crate::sse::EventStream;
use crate::store::{TaskQuery, TaskRecord};
use axum::body::Body;
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use mesh_core::bus::BusError;
use mesh_core::codec::{self, Decoded};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::{self, JsonRpcId};
use mesh_core::model::{
    CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, SendMessageRequest,
    SubscribeToTaskRequest, Task, TaskPushNotificationConfig, TaskState, TaskStatus,
};
use mesh_core::requester::{SendError, SendOptions};
use mesh_core::rpc::{Call, Reply, Request, RequestError};
use serde_json::{Map, Value};
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

/// The default and largest page of `ListTasks`.
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

/// What a request is answered with.
enum Answer {
    /// A JSON-RPC response body.
    Json(Vec<u8>),
    /// An event stream.
    Stream(EventStream),
    /// A streaming method that failed before its first event: an event stream of one event,
    /// its JSON-RPC error (0.3 §7.2.1, 1.0 §9.4: the response of a streaming method is a
    /// stream, errors included).
    FailedStream(Vec<u8>),
    /// Nothing (a notification).
    Nothing,
}

/// The request's HTTP context that matters to the dispatch.
struct Http {
    /// The `A2A-Version` asked for, when it is one we do not serve.
    bad_version: Option<String>,
    traceparent: Option<String>,
    /// The authenticated caller (absent without API keys).
    caller: Option<Caller>,
}

/// `POST /`: the default agent.
pub(crate) fn post_default(
    State(gw): State<Arc<Shared>>,
    request: HttpRequest,
) -> impl Future<Output = Response> + Send {
    let agent = gw.config.default_agent.clone();
    handle(gw, agent, request)
}

/// `POST /agents/{name}`.
pub(crate) fn post_agent(
    State(gw): State<Arc<Shared>>,
    Path(name): Path<String>,
    request: HttpRequest,
) -> impl Future<Output = Response> + Send {
    handle(gw, Some(name), request)
}

/// Answers one POST. Plain functions returning an async block (here and down to the publish
/// on the bus) rather than `async fn`s, which keep each by-value argument twice: the future is
/// boxed twice per request by axum, so its size is copied twice.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn handle(
    gw: Arc<Shared>,
    agent: Option<String>,
    request: HttpRequest,
) -> impl Future<Output = Response> + Send {
    async move {
        let (parts, body) = request.into_parts();
        let http = Http {
            bad_version: bad_version(&parts.headers, parts.uri.query()),
            traceparent: parts
                .headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            caller: parts.extensions.get::<Caller>().cloned(),
        };
        // The dialect of answers written before the request is read.
        let fallback = match version_asked(&parts.headers, parts.uri.query()).as_deref() {
            Some(v) if Dialect::from_version(v) == Some(Dialect::V1_0) => Dialect::V1_0,
            _ => Dialect::V0_3,
        };
        let limit = gw.config.body_limit;
        let too_large = || {
            json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                codec::encode_error(
                    fallback,
                    None,
                    &A2aError::invalid_request(format!(
                        "the request body is larger than this gateway accepts ({limit} bytes)"
                    )),
                ),
            )
        };
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return too_large();
        }
        let bytes = match read_body(body, limit).await {
            Ok(bytes) => bytes,
            Err(BodyError::TooLarge) => return too_large(),
            Err(BodyError::Broken(error)) => {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    codec::encode_error(
                        fallback,
                        None,
                        &A2aError::invalid_request(format!(
                            "the request body could not be read: {error}"
                        )),
                    ),
                );
            }
        };
        if let Some(content_type) = bad_content_type(&parts.headers) {
            let id = request_id(&bytes);
            return json_response(
                StatusCode::OK,
                codec::encode_error(
                    fallback,
                    id.as_ref(),
                    &A2aError::content_type_not_supported(&content_type),
                ),
            );
        }
        let Some(agent) = agent else {
            let agents: Vec<String> = gw.registry.agents().into_iter().map(|a| a.name).collect();
            let error = A2aError::invalid_request(format!(
            "this gateway has no default agent: POST to /agents/{{name}} (agents on the mesh: {})",
            if agents.is_empty() {
                "none".to_owned()
            } else {
                agents.join(", ")
            }
        ))
        .with_data(serde_json::json!({ "agents": agents }));
            // Without an id, the error goes back with `"id": null`.
            let id = request_id(&bytes).unwrap_or(JsonRpcId::Null);
            return json_response(
                StatusCode::OK,
                codec::encode_error(fallback, Some(&id), &error),
            );
        };
        // The single request is sorted and dispatched here rather than through `answer`:
        // its future, moved into this one, cost about 1,600 instructions (1 %) per request.
        let single = match codec::decode(&bytes) {
            Decoded::Single(request) => triage(&gw, &agent, &http, request, false, fallback),
            Decoded::Batch(requests) if requests.len() > gw.config.max_batch => {
                let error = A2aError::invalid_request(format!(
                    "a batch of {} requests is more than this gateway takes at once ({}): send fewer",
                    requests.len(),
                    gw.config.max_batch
                ));
                return json_response(
                    StatusCode::OK,
                    codec::encode_error(fallback, Some(&JsonRpcId::Null), &error),
                );
            }
            Decoded::Batch(requests) => {
                return answer_batch(&gw, &agent, &http, requests, fallback).await;
            }
        };
        let answer = match single {
            Triaged::Dispatch(request, id) => dispatch(&gw, &agent, &http, request, id).await,
            Triaged::Done(answer) => answer,
        };
        match answer {
            Answer::Json(body) => json_response(StatusCode::OK, body),
            Answer::Stream(stream) => stream.into_response(),
            Answer::FailedStream(body) => crate::sse::one_event(body),
            Answer::Nothing => StatusCode::NO_CONTENT.into_response(),
        }
    }
}

/// Answers a batch: each element on its own, the JSON answers in one array.
async fn answer_batch(
    gw: &Arc<Shared>,
    agent: &str,
    http: &Http,
    requests: Vec<Result<Request, RequestError>>,
    fallback: Dialect,
) -> Response {
    let answers = join_all(
        requests
            .into_iter()
            .map(|r| answer(gw, agent, http, r, true, fallback)),
    )
    .await;
    let bodies: Vec<Vec<u8>> = answers
        .into_iter()
        .filter_map(|a| match a {
            Answer::Json(body) => Some(body),
            _ => None,
        })
        .collect();
    if bodies.is_empty() {
        return StatusCode::NO_CONTENT.into_response();
    }
    let mut out = Vec::with_capacity(bodies.iter().map(|b| b.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, body) in bodies.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(body);
    }
    out.push(b']');
    json_response(StatusCode::OK, out)
}

/// Answers one element of a batch. The request is sorted when this is called, so that the
/// future holds only what is left to dispatch.
fn answer<'a>(
    gw: &'a Arc<Shared>,
    agent: &'a str,
    http: &'a Http,
    request: Result<Request, RequestError>,
    in_batch: bool,
    fallback: Dialect,
) -> impl Future<Output = Answer> + Send + 'a {
    let triaged = triage(gw, agent, http, request, in_batch, fallback);
    async move {
        match triaged {
            Triaged::Dispatch(request, id) => dispatch(gw, agent, http, request, id).await,
            Triaged::Done(answer) => answer,
        }
    }
}

/// What becomes of a decoded request (short-lived, moved once).
#[allow(clippy::large_enum_variant)]
enum Triaged {
    /// The request and its id, to dispatch.
    Dispatch(Request, JsonRpcId),
    /// Answered without reaching an agent (a decode error, a refused version, a notification).
    Done(Answer),
}

/// Sorts a decoded request: what it gets without reaching an agent, or what to dispatch.
fn triage(
    gw: &Arc<Shared>,
    agent: &str,
    http: &Http,
    request: Result<Request, RequestError>,
    in_batch: bool,
    fallback: Dialect,
) -> Triaged {
    let request = match request {
        Ok(request) => request,
        Err(e) => {
            gw.metrics.request(None, false, std::time::Duration::ZERO);
            let dialect = e.dialect.unwrap_or(fallback);
            let id = e.id.unwrap_or(JsonRpcId::Null);
            let body = codec::encode_error(dialect, Some(&id), &e.error);
            // A streaming method answers with a stream, its error included.
            let streaming = e.method.is_some_and(Method::is_streaming) && !in_batch;
            return Triaged::Done(if streaming {
                Answer::FailedStream(body)
            } else {
                Answer::Json(body)
            });
        }
    };
    let Some(id) = request.id.clone() else {
        if let Some(version) = &http.bad_version {
            return Triaged::Done(error(
                request.dialect,
                &JsonRpcId::Null,
                A2aError::version_not_supported(version),
            ));
        }
        // A notification: no answer is due. Work that changes something still happens.
        if matches!(request.call, Call::Send(_) | Call::CancelTask(_))
            && !request.method.is_streaming()
            && http.bad_version.is_none()
        {
            let gw = gw.clone();
            let agent = agent.to_owned();
            let mut request = request;
            request.id = Some(JsonRpcId::Null);
            let http = Http {
                bad_version: None,
                traceparent: http.traceparent.clone(),
                caller: http.caller.clone(),
            };
            tokio::spawn(async move {
                let _ = dispatch(&gw, &agent, &http, request, JsonRpcId::Null).await;
            });
        }
        return Triaged::Done(Answer::Nothing);
    };
    if let Some(version) = &http.bad_version {
        let body = codec::encode_error(
            request.dialect,
            Some(&id),
            &A2aError::version_not_supported(version),
        );
        return Triaged::Done(if request.method.is_streaming() && !in_batch {
            Answer::FailedStream(body)
        } else {
            Answer::Json(body)
        });
    }
    if in_batch && request.method.is_streaming() {
        return Triaged::Done(error(
            request.dialect,
            &id,
            A2aError::invalid_request("streaming methods cannot be sent in a batch"),
        ));
    }
    Triaged::Dispatch(request, id)
}

/// Serves one request. The request is taken apart when this is called, so that the future
/// holds its call once (an `async fn` would keep the argument and its own copy of it).
fn dispatch<'a>(
    gw: &'a Arc<Shared>,
    agent: &'a str,
    http: &'a Http,
    request: Request,
    id: JsonRpcId,
) -> impl Future<Output = Answer> + Send + 'a {
    let Request {
        dialect,
        shared_method: shared,
        method,
        call,
        ..
    } = request;
    async move {
        let began = Instant::now();
        let result = match call {
            Call::Send(params) if method == Method::SendStreamingMessage => {
                stream_message(gw, agent, http, dialect, &id, params).await
            }
            Call::Send(params) => send_message(gw, agent, http, dialect, &id, params).await,
            Call::GetTask(params) => get_task(gw, agent, http, dialect, shared, &id, params),
            Call::ListTasks(params) => list_tasks(gw, agent, http, dialect, &id, params),
            Call::CancelTask(params) => {
                cancel_task(gw, agent, http, dialect, shared, &id, params).await
            }
            Call::Subscribe(params) => subscribe(gw, agent, http, dialect, shared, &id, params),
            Call::SetPushConfig(config) => {
                set_push_config(gw, agent, http, dialect, shared, &id, config).await
            }
            Call::GetPushConfig(params) => {
                get_push_config(gw, agent, http, dialect, shared, &id, params)
            }
            Call::ListPushConfigs(params) => {
                list_push_configs(gw, agent, http, dialect, shared, &id, params)
            }
            Call::DeletePushConfig(params) => {
                delete_push_config(gw, agent, http, dialect, shared, &id, params)
            }
            Call::GetExtendedCard => crate::cards::extended_card(gw, agent, http.caller.as_ref())
                .map(|card| crate::cards::signed_for(gw, card, dialect))
                .map(|card| Answer::Json(codec::encode_reply(dialect, &id, &Reply::Card(card))))
                .map_err(|e| (dialect, e)),
        };
        gw.metrics
            .request(Some(method), result.is_ok(), began.elapsed());
        match result {
            Ok(answer) => answer,
            Err((dialect, e)) if method.is_streaming() => {
                Answer::FailedStream(codec::encode_error(dialect, Some(&id), &e))
            }
            Err((dialect, e)) => error(dialect, &id, e),
        }
    }
}

/// A failed dispatch: the dialect to answer in and the error.
type Failed = (Dialect, A2aError);

fn error(dialect: Dialect, id: &JsonRpcId, error: A2aError) -> Answer {
    Answer::Json(codec::encode_error(dialect, Some(id), &error))
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

// ---------------------------------------------------------------------------------------
// Sending

/// A task the gateway just handed to the bus.
struct Started {
    task_id: String,
    events: crate::bridge::Subscription,
    /// The task's pump: polled in place or detached (dropping it detaches it).
    pump: crate::bridge::Pump,
}

/// Checks the agent can take a message now: known, online, the bus up (and streaming, when
/// asked to stream). The common case reads no card.
fn check_agent(gw: &Shared, agent: &str, streaming: bool) -> Result<(), A2aError> {
    if !gw.registry.is_online(agent) {
        return Err(match gw.registry.agent(agent) {
            Some(_) => A2aError::internal(format!(
                "agent {agent:?} is offline: no instance of it is running"
            )),
            None => {
                let agents: Vec<String> =
                    gw.registry.agents().into_iter().map(|a| a.name).collect();
                A2aError::invalid_params(format!(
                    "no agent named {agent:?} on the mesh (agents: {})",
                    if agents.is_empty() {
                        "none".to_owned()
                    } else {
                        agents.join(", ")
                    }
                ))
            }
        });
    }
    if !gw.bus.is_connected() {
        return Err(A2aError::internal(
            "the gateway has lost its connection to the message bus; try again when it recovers",
        ));
    }
    if streaming
        && gw
            .registry
            .agent(agent)
            .and_then(|view| view.card)
            .is_some_and(|card| card.capabilities.streaming == Some(false))
    {
        return Err(A2aError::unsupported_operation(format!(
            "agent {agent:?} does not stream (its card says capabilities.streaming: false); use SendMessage"
        )));
    }
    Ok(())
}

/// Starts (or resumes) the task a message is for: the store record, the live broadcast, the
/// publish on the bus and the pump. The agent is checked when this is called; the future
/// checks a push URL (a DNS lookup) when the message carries one, then records the task and
/// publishes.
#[allow(clippy::manual_async_fn)] // on purpose: see `handle`
fn start<'a>(
    gw: &'a Arc<Shared>,
    agent: &'a str,
    http: &'a Http,
    dialect: Dialect,
    mut params: SendMessageRequest,
    streaming: bool,
) -> impl Future<Output = Result<Started, A2aError>> + Send + 'a {
    // An async block capturing `params`, not an `async fn`: that would keep it twice.
    async move {
        check_agent(gw, agent, streaming)?;
        let push = params
            .configuration
            .as_mut()
            .and_then(|c| c.task_push_notification_config.take());
        if let Some(config) = &push {
            if gw.pusher.is_none() {
                return Err(A2aError::push_notification_not_supported());
            }
            let field = match dialect {
                Dialect::V0_1 => "params.pushNotification",
                Dialect::V0_3 => "params.configuration.pushNotificationConfig",
                _ => "params.configuration.taskPushNotificationConfig",
            };
            check_config(config, allow_private(gw), field).await?;
        }
        let (begun, params, options) = begin(gw, agent, http, dialect, params, push, streaming)?;
        let Begun {
            task_id,
            events,
            live,
            undo,
        } = begun;
        match gw.requester.send(agent, params, options).await {
            Ok(stream) => {
                let pump = gw.bridge.pump(task_id.clone(), live, stream, undo);
                Ok(Started {
                    task_id,
                    events,
                    pump,
                })
            }
            Err(e) => {
                let store = gw.store();
                match undo {
                    Undo::Remove => store.remove(&task_id),
                    Undo::Restore(record) => {
                        let _ = store.insert(TaskRecord::clone(&record));
                    }
                }
                gw.bridge.end(&task_id, &live);
                Err(match e {
                    SendError::Topic(e) => {
                        A2aError::invalid_params(format!("task id {task_id:?}: {e}"))
                    }
                    SendError::Bus(BusError::PayloadTooLarge { size, max }) => {
                        A2aError::invalid_request(format!(
                            "the message is too large for the bus: {size} bytes with its envelope, \
                             at most {max} (the bus's max_packet_size)"
                        ))
                    }
                    SendError::Bus(e) => A2aError::internal(format!(
                        "could not publish to agent {agent:?} on the message bus: {e}"
                    )),
                })
            }
        }
    }
}

/// A task recorded, its request not yet sent.
struct Begun {
    task_id: String,
    events: crate::bridge::Subscription,
    live: Arc<crate::bridge::LiveTask>,
    undo: Undo,
}

/// Records the task (new, or the resumed one with the message added): the record, and the
/// params and options to send.
fn begin(
    gw: &Arc<Shared>,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    mut params: SendMessageRequest,
    push: Option<TaskPushNotificationConfig>,
    streaming: bool,
) -> Result<(Begun, SendMessageRequest, SendOptions), A2aError> {
    let store = gw.store();
    let previous = match params.message.task_id.as_deref() {
        Some("") => {
            return Err(A2aError::invalid_params(
                "the task id is empty: give a task's id, or none to start a new task",
            ));
        }
        Some(task_id) => match store.get(task_id) {
            Some(record) if record.agent != agent || !owns(gw, http, &record) => {
                return Err(A2aError::task_not_found(task_id));
            }
            Some(record) => {
                let state = &record.task.status.state;
                if state.is_terminal() {
                    return Err(A2aError::unsupported_operation(format!(
                        "task {task_id} is {}: it takes no more messages",
                        mesh_core::model::state_name(state)
                    )));
                }
                if gw.bridge.is_live(task_id) {
                    return Err(A2aError::unsupported_operation(format!(
                        "task {task_id} is still running: send the next message when it asks for input"
                    )));
                }
                Some(record)
            }
            // 0.1 clients choose the id of a new task.
            None if dialect == Dialect::V0_1 => None,
            None => return Err(A2aError::task_not_found(task_id)),
        },
        None => None,
    };
    let task_id = params
        .message
        .task_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let context_id = match &previous {
        Some(record) => record.task.context_id.clone(),
        None => params
            .message
            .context_id
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
    };
    params.message.task_id = Some(task_id.clone());
    params.message.context_id = Some(context_id.clone());

    let Some((live, events)) = gw.bridge.begin(
        &task_id,
        if streaming {
            crate::bridge::STREAM_CAPACITY
        } else {
            crate::bridge::SEND_CAPACITY
        },
    ) else {
        return Err(A2aError::unsupported_operation(format!(
            "task {task_id} is still running: send the next message when it asks for input"
        )));
    };
    let submitted = TaskStatus {
        state: TaskState::Submitted,
        message: None,
        timestamp: Some(chrono::Utc::now()),
    };
    let (snapshot, undo) = match &previous {
        Some(record) => {
            let snapshot = record.task.clone();
            let mut updated = TaskRecord::clone(record);
            set_status(&mut updated.task, submitted);
            updated
                .task
                .history
                .get_or_insert_with(Vec::new)
                .push(params.message.clone());
            if let Some(config) = push {
                if let Err(e) = add_push_config(&mut updated, config, dialect) {
                    gw.bridge.end(&task_id, &live);
                    return Err(e);
                }
            }
            if let Err(e) = store.insert(updated) {
                gw.bridge.end(&task_id, &live);
                return Err(e.into());
            }
            (Some(snapshot), Undo::Restore(record.clone()))
        }
        None => {
            let task = Task {
                id: task_id.clone(),
                context_id,
                status: submitted,
                artifacts: None,
                history: Some(vec![params.message.clone()]),
                metadata: None,
            };
            let mut record = TaskRecord::new(task, agent, dialect);
            record.owner = http.caller.as_ref().map(|c| c.principal.clone());
            if let Some(config) = push {
                // A new record has room for one config: this cannot fail.
                let _ = add_push_config(&mut record, config, dialect);
            }
            // A full store refuses new work (an error naming the limit).
            if let Err(e) = store.insert(record) {
                gw.bridge.end(&task_id, &live);
                return Err(e.into());
            }
            (None, Undo::Remove)
        }
    };
    let options = SendOptions {
        method: if streaming {
            Method::SendStreamingMessage
        } else {
            Method::SendMessage
        },
        task_id: task_id.clone(),
        snapshot,
        timeout: gw.config.task_timeout,
        principal: http.caller.as_ref().map(|c| c.principal.clone()),
        depth: 0,
        traceparent: http.traceparent.clone(),
    };
    let begun = Begun {
        task_id,
        events,
        live,
        undo,
    };
    Ok((begun, params, options))
}

/// `message/send`: starts the task and waits (up to the blocking wait) for its end. Like
/// [`dispatch`], a plain `fn` so that the params are not kept twice in the future.
fn send_message<'a>(
    gw: &'a Arc<Shared>,
    agent: &'a str,
    http: &'a Http,
    dialect: Dialect,
    id: &'a JsonRpcId,
    params: SendMessageRequest,
) -> impl Future<Output = Result<Answer, Failed>> + Send + 'a {
    let config = params.configuration.as_ref();
    let immediately = config.and_then(|c| c.return_immediately).unwrap_or(false);
    let history_length = config.and_then(|c| c.history_length);
    async move {
        let mut started = start(gw, agent, http, dialect, params, false)
            .await
            .map_err(|e| (dialect, e))?;
        let task_answer = |gw: &Shared| -> Result<Answer, Failed> {
            match gw.store().get(&started.task_id) {
                Some(record) => Ok(task_answer(
                    Method::SendMessage,
                    dialect,
                    id,
                    &record.task,
                    history_length,
                )),
                None => Err((dialect, A2aError::task_not_found(&started.task_id))),
            }
        };
        if immediately {
            return task_answer(gw);
        }
        let deadline = Instant::now() + gw.config.blocking_wait;
        loop {
            let received = tokio::select! {
                // Shutting down: the task as it stands, as when the wait is over.
                _ = gw.shutdown.cancelled() => return task_answer(gw),
                // The pump runs here, in the request's own task, until the task's stream ends.
                () = &mut started.pump, if !started.pump.finished() => continue,
                received = tokio::time::timeout_at(deadline, started.events.recv()) => received,
            };
            match received {
                // The wait is over: the task as it stands, for the client to poll or resubscribe.
                Err(_) => return task_answer(gw),
                Ok(None) => return task_answer(gw),
                Ok(Some(Live::Lagged)) => continue,
                Ok(Some(Live::Event(event))) => match crate::bridge::view(&event) {
                    Err(e) => return Err((dialect, e.clone())),
                    Ok(Reply::Message(message)) => {
                        return Ok(Answer::Json(codec::encode_reply(
                            dialect,
                            id,
                            &Reply::Message(message.clone()),
                        )));
                    }
                    Ok(reply) if crate::bridge::ends_task(reply) => return task_answer(gw),
                    Ok(_) => {}
                },
            }
        }
    }
}

/// `message/stream`: starts the task and answers with its event stream once the first event
/// is there.
#[allow(clippy::manual_async_fn)] // on purpose: see `handle`
fn stream_message<'a>(
    gw: &'a Arc<Shared>,
    agent: &'a str,
    http: &'a Http,
    dialect: Dialect,
    id: &'a JsonRpcId,
    params: SendMessageRequest,
) -> impl Future<Output = Result<Answer, Failed>> + Send + 'a {
    async move {
        let mut started = start(gw, agent, http, dialect, params, true)
            .await
            .map_err(|e| (dialect, e))?;
        started.pump.detach();
        // Wait for the first event (bounded: the pump fails the task at its deadline), so that an
        // agent's refusal is a plain JSON-RPC error rather than a stream.
        let first = loop {
            tokio::select! {
                _ = gw.shutdown.cancelled() => {
                    return Err((dialect, A2aError::internal("the gateway is shutting down")));
                }
                received = started.events.recv() => match received {
                    Some(Live::Event(event)) => break event,
                    Some(Live::Lagged) => continue,
                    None => {
                        return Err((dialect, A2aError::internal("the task's event stream ended before its first event")));
                    }
                },
            }
        };
        if let Err(e) = &first {
            return Err((dialect, A2aError::clone(e)));
        }
        Ok(Answer::Stream(EventStream {
            dialect,
            id: id.clone(),
            first: vec![first],
            live: Some(started.events),
            store: gw.store().clone(),
            task_id: started.task_id,
            shutdown: gw.shutdown.clone(),
            keep_alive: gw.config.sse_keep_alive,
            metrics: gw.metrics.clone(),
            until_terminal: false,
        }))
    }
}

// ---------------------------------------------------------------------------------------
// Reading, listing, canceling, resubscribing

/// The stored task of `agent`, and the dialect to answer a method about it in.
fn find(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    task_id: &str,
) -> Result<(Arc<TaskRecord>, Dialect), Failed> {
    match gw.store().get(task_id) {
        Some(record) if record.agent == agent && owns(gw, http, &record) => {
            let answer_in = if shared && record.dialect == Dialect::V0_1 {
                Dialect::V0_1
            } else {
                dialect
            };
            Ok((record, answer_in))
        }
        _ => Err((dialect, A2aError::task_not_found(task_id))),
    }
}

fn get_task(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    params: GetTaskRequest,
) -> Result<Answer, Failed> {
    let (record, dialect) = find(gw, agent, http, dialect, shared, &params.id)?;
    Ok(task_answer(
        Method::GetTask,
        dialect,
        id,
        &record.task,
        params.history_length,
    ))
}

fn list_tasks(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    id: &JsonRpcId,
    params: ListTasksRequest,
) -> Result<Answer, Failed> {
    let page_size = match params.page_size {
        None | Some(0) => DEFAULT_PAGE_SIZE,
        Some(n) if n < 0 || n as usize > MAX_PAGE_SIZE => {
            return Err((
                dialect,
                A2aError::invalid_params_at(
                    "pageSize",
                    format!("must be between 1 and {MAX_PAGE_SIZE}"),
                ),
            ));
        }
        Some(n) => n as usize,
    };
    let query = TaskQuery {
        agent: Some(agent.to_owned()),
        context_id: params.context_id.filter(|c| !c.is_empty()),
        state: params.status.filter(|s| *s != TaskState::Unspecified),
        owner: owner_filter(gw, http),
        page_size,
        page_token: params.page_token,
    };
    let page = gw
        .store()
        .list(&query)
        .map_err(|e| (dialect, A2aError::invalid_params_at("pageToken", e)))?;
    let include_artifacts = params.include_artifacts.unwrap_or(dialect != Dialect::V1_0);
    let tasks: Vec<Value> = page
        .records
        .iter()
        .map(|record| {
            let mut task = task_value(&record.task, dialect, params.history_length);
            if !include_artifacts {
                if let Some(o) = task.as_object_mut() {
                    o.remove("artifacts");
                }
            }
            task
        })
        .collect();
    let mut result = Map::new();
    result.insert("tasks".into(), Value::Array(tasks));
    result.insert(
        "nextPageToken".into(),
        page.next_page_token.unwrap_or_default().into(),
    );
    result.insert("pageSize".into(), page_size.into());
    result.insert("totalSize".into(), page.total_size.into());
    Ok(Answer::Json(jsonrpc::write_result(
        id,
        Value::Object(result),
    )))
}

async fn cancel_task(
    gw: &Arc<Shared>,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    params: CancelTaskRequest,
) -> Result<Answer, Failed> {
    let (record, dialect) = find(gw, agent, http, dialect, shared, &params.id)?;
    if record.task.status.state.is_terminal() {
        return Err((dialect, A2aError::task_not_cancelable(&params.id)));
    }
    let answer =
        |record: &TaskRecord| task_answer(Method::CancelTask, dialect, id, &record.task, None);
    let Some(live) = gw.bridge.live(&params.id) else {
        // No instance runs it (it waits for input at the gateway): cancel it here.
        let canceled = gw.store().update(&params.id, &mut |r| {
            if !r.task.status.state.is_terminal() {
                set_status(
                    &mut r.task,
                    TaskStatus {
                        state: TaskState::Canceled,
                        message: None,
                        timestamp: Some(chrono::Utc::now()),
                    },
                );
            }
        });
        return match canceled {
            Some(record) => {
                gw.bridge.notify_push(&record);
                gw.bridge.release_waiting(&record);
                Ok(answer(&record))
            }
            None => Err((dialect, A2aError::task_not_found(&params.id))),
        };
    };
    let asked = if gw.bus.is_connected() {
        gw.requester
            .cancel(agent, &params.id, gw.config.cancel_wait)
            .await
    } else {
        Ok(None)
    };
    match asked {
        Ok(Some(Ok(mut task))) => {
            mesh_core::meta::MeshMeta::take(&mut task.metadata);
            let updated = gw.store().update(&params.id, &mut |r| {
                if !r.task.status.state.is_terminal() {
                    set_status(&mut r.task, task.status.clone());
                }
            });
            if let Some(record) = &updated {
                gw.bridge.notify_push(record);
            }
            Ok(answer(updated.as_deref().unwrap_or(&TaskRecord::new(
                task.clone(),
                agent,
                dialect,
            ))))
        }
        Ok(Some(Err(e))) => Err((dialect, e)),
        // No instance answered in time (or the bus is down): the gateway cancels it itself.
        Ok(None) | Err(_) => match gw.bridge.cancel_locally(&params.id, &live) {
            Some(record) => Ok(answer(&record)),
            None => Err((dialect, A2aError::task_not_found(&params.id))),
        },
    }
}

fn subscribe(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    params: SubscribeToTaskRequest,
) -> Result<Answer, Failed> {
    let (record, dialect) = find(gw, agent, http, dialect, shared, &params.id)?;
    if record.task.status.state.is_terminal() {
        return Err((
            dialect,
            A2aError::unsupported_operation(format!(
                "task {} is {}: there is nothing to subscribe to",
                params.id,
                mesh_core::model::state_name(&record.task.status.state)
            )),
        ));
    }
    let Some((snapshot, live)) = gw
        .bridge
        .attach(&params.id, true)
        .map_err(|e| (dialect, e))?
    else {
        return Err((dialect, A2aError::task_not_found(&params.id)));
    };
    Ok(Answer::Stream(EventStream {
        dialect,
        id: id.clone(),
        first: vec![Ok(Arc::new(Reply::Task(snapshot.task.clone())))],
        live,
        store: gw.store().clone(),
        task_id: params.id,
        shutdown: gw.shutdown.clone(),
        keep_alive: gw.config.sse_keep_alive,
        metrics: gw.metrics.clone(),
        until_terminal: true,
    }))
}

// ---------------------------------------------------------------------------------------
// Ownership and push-notification configs

/// True when the caller may see the task: always without API keys; with them, only the
/// principal that created it.
fn owns(gw: &Shared, http: &Http, record: &TaskRecord) -> bool {
    !gw.keys.enabled()
        || record.owner.as_deref() == http.caller.as_ref().map(|c| c.principal.as_str())
}

/// The owner a listing is limited to.
fn owner_filter(gw: &Shared, http: &Http) -> Option<String> {
    if !gw.keys.enabled() {
        return None;
    }
    // Without a caller (cannot happen behind the auth layer) nothing matches.
    Some(
        http.caller
            .as_ref()
            .map_or_else(|| "\u{0}".to_owned(), |c| c.principal.clone()),
    )
}

fn allow_private(gw: &Shared) -> bool {
    gw.pusher.as_ref().is_some_and(|p| p.allow_private())
}

/// Adds (or replaces, same id) a checked config on a record; the config as stored.
fn add_push_config(
    record: &mut TaskRecord,
    mut config: TaskPushNotificationConfig,
    dialect: Dialect,
) -> Result<TaskPushNotificationConfig, A2aError> {
    config.task_id = record.task.id.clone();
    let id = match config.id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => id.to_owned(),
        // 0.x clients name configs by their task; 1.0 configs get an id of their own.
        None if dialect == Dialect::V1_0 => uuid::Uuid::new_v4().to_string(),
        None => record.task.id.clone(),
    };
    config.id = Some(id.clone());
    let count = record.push_configs.len();
    match record
        .push_configs
        .iter_mut()
        .find(|c| c.id.as_deref() == Some(id.as_str()))
    {
        Some(existing) => *existing = config.clone(),
        None if count >= MAX_PUSH_CONFIGS => {
            return Err(A2aError::invalid_params(format!(
                "task {} already has {MAX_PUSH_CONFIGS} push notification configs; delete one first",
                record.task.id
            )));
        }
        None => record.push_configs.push(config.clone()),
    }
    Ok(config)
}

fn push_enabled(gw: &Shared, dialect: Dialect) -> Result<(), Failed> {
    match gw.pusher {
        Some(_) => Ok(()),
        None => Err((dialect, A2aError::push_notification_not_supported())),
    }
}

async fn set_push_config(
    gw: &Arc<Shared>,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    config: TaskPushNotificationConfig,
) -> Result<Answer, Failed> {
    push_enabled(gw, dialect)?;
    let (_, answer_in) = find(gw, agent, http, dialect, shared, &config.task_id)?;
    let field = if dialect == Dialect::V1_0 {
        "params"
    } else {
        "params.pushNotificationConfig"
    };
    check_config(&config, allow_private(gw), field)
        .await
        .map_err(|e| (dialect, e))?;
    let task_id = config.task_id.clone();
    let mut outcome = Err(A2aError::task_not_found(&task_id));
    let mut config = Some(config);
    gw.store().update(&task_id, &mut |record| {
        if let Some(config) = config.take() {
            outcome = add_push_config(record, config, dialect);
        }
    });
    let stored = outcome.map_err(|e| (dialect, e))?;
    Ok(Answer::Json(codec::encode_reply(
        answer_in,
        id,
        &Reply::PushConfig(stored),
    )))
}

/// The config of `task` named `config_id`; a 0.x request naming none gets the first one.
fn pick_config<'a>(
    record: &'a TaskRecord,
    config_id: &str,
) -> Option<&'a TaskPushNotificationConfig> {
    if config_id.is_empty() {
        return record
            .push_configs
            .iter()
            .find(|c| c.id.as_deref() == Some(record.task.id.as_str()))
            .or_else(|| record.push_configs.first());
    }
    record
        .push_configs
        .iter()
        .find(|c| c.id.as_deref() == Some(config_id))
}

fn no_config(dialect: Dialect, task_id: &str, config_id: &str) -> Failed {
    let field = if dialect == Dialect::V1_0 {
        "params.id"
    } else {
        "params.pushNotificationConfigId"
    };
    (
        dialect,
        A2aError::invalid_params_at(
            field,
            format!("task {task_id} has no push notification config {config_id:?}"),
        ),
    )
}

fn get_push_config(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    params: GetTaskPushNotificationConfigRequest,
) -> Result<Answer, Failed> {
    push_enabled(gw, dialect)?;
    let (record, answer_in) = find(gw, agent, http, dialect, shared, &params.task_id)?;
    let config = pick_config(&record, &params.id)
        .ok_or_else(|| no_config(dialect, &params.task_id, &params.id))?;
    Ok(Answer::Json(codec::encode_reply(
        answer_in,
        id,
        &Reply::PushConfig(config.clone()),
    )))
}

fn list_push_configs(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    params: ListTaskPushNotificationConfigsRequest,
) -> Result<Answer, Failed> {
    push_enabled(gw, dialect)?;
    let (record, answer_in) = find(gw, agent, http, dialect, shared, &params.task_id)?;
    Ok(Answer::Json(codec::encode_reply(
        answer_in,
        id,
        &Reply::PushConfigs(ListTaskPushNotificationConfigsResponse {
            configs: record.push_configs.clone(),
            next_page_token: None,
        }),
    )))
}

fn delete_push_config(
    gw: &Shared,
    agent: &str,
    http: &Http,
    dialect: Dialect,
    shared: bool,
    id: &JsonRpcId,
    params: DeleteTaskPushNotificationConfigRequest,
) -> Result<Answer, Failed> {
    push_enabled(gw, dialect)?;
    let (record, answer_in) = find(gw, agent, http, dialect, shared, &params.task_id)?;
    if params.id.is_empty() {
        return Err(no_config(dialect, &params.task_id, &params.id));
    }
    // Idempotent (spec 1.0 §3.1.10): a config that is not there (any more) is deleted already.
    if pick_config(&record, &params.id).is_some() {
        gw.store().update(&params.task_id, &mut |r| {
            r.push_configs
                .retain(|c| c.id.as_deref() != Some(params.id.as_str()));
        });
    }
    Ok(Answer::Json(codec::encode_reply(
        answer_in,
        id,
        &Reply::Empty,
    )))
}

// ---------------------------------------------------------------------------------------
// Writing tasks

/// A task in `dialect` with at most `history_length` of its latest messages.
fn task_value(task: &Task, dialect: Dialect, history_length: Option<i32>) -> Value {
    let mut value = codec::write_task(task, dialect);
    if let (Some(n), Some(Value::Array(history))) = (
        history_length,
        value.as_object_mut().and_then(|o| o.get_mut("history")),
    ) {
        let keep = usize::try_from(n).unwrap_or(0);
        if history.len() > keep {
            history.drain(..history.len() - keep);
        }
    }
    value
}

/// The response carrying a task: bare, except SendMessage in 1.0 (`{"task": …}`).
fn task_answer(
    method: Method,
    dialect: Dialect,
    id: &JsonRpcId,
    task: &Task,
    history_length: Option<i32>,
) -> Answer {
    let tail = history_length.map(|n| usize::try_from(n).unwrap_or(0));
    Answer::Json(codec::encode_task(method, dialect, id, task, tail))
}

// ---------------------------------------------------------------------------------------
// HTTP checks

fn version_asked(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(v) = headers.get("a2a-version").and_then(|v| v.to_str().ok()) {
        return Some(v.trim().to_owned());
    }
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
        .map(|(_, v)| v.trim().to_owned())
}

/// The version asked for when it is one this gateway does not serve (absent, 0.3 and 1.0 are
/// served).
fn bad_version(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let version = version_asked(headers, query)?;
    if version.is_empty() {
        return None;
    }
    let served = matches!(version.as_str(), "0.3" | "0.3.0" | "1.0" | "1.0.0" | "1")
        || matches!(Dialect::from_version(&version), Some(Dialect::V1_0))
            && version.starts_with("1.0");
    (!served).then_some(version)
}

/// The content type when it is not JSON (an absent header is accepted).
fn bad_content_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?;
    let text = value.to_str().unwrap_or("");
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || essence == "application/json-rpc"
        || essence == "application/jsonrequest"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    (!json).then(|| text.to_owned())
}

enum BodyError {
    TooLarge,
    Broken(axum::Error),
}

/// Reads the whole body, refusing it as soon as it passes `limit` bytes.
async fn read_body(body: Body, limit: usize) -> Result<bytes::Bytes, BodyError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut first: Option<bytes::Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Broken)?;
        total += chunk.len();
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        match &first {
            // One chunk (the usual case) is returned as it is, without a copy.
            None if rest.is_empty() => first = Some(chunk),
            _ => {
                if let Some(first) = first.take() {
                    rest.extend_from_slice(&first);
                }
                rest.extend_from_slice(&chunk);
            }
        }
    }
    Ok(match first {
        Some(first) => first,
        None => bytes::Bytes::from(rest),
    })
}

/// The request's id, when the body is a JSON object with a usable one.
fn request_id(bytes: &[u8]) -> Option<JsonRpcId> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    JsonRpcId::from_value(value.get("id")?.clone()).ok()
}
