//! The JSON-RPC binding (spec 1.0 §9, and 0.3 and 0.1 as their clients speak them) over
//! `POST`: read the body (bounded), check the content type and the `A2A-Version`, decode the
//! request in whichever dialect it speaks, call the [service](crate::service), and answer in
//! the request's dialect with its exact id — a JSON response, an SSE stream, or nothing (204)
//! for a notification (a well-formed request without an `id`: a send or a cancel is carried
//! out, nothing is answered). A request without an `id` that cannot be served (an unknown
//! method, invalid params, an unsupported `A2A-Version`, no agent) gets its error with
//! `"id": null`, as JSON-RPC 2.0 §5 says of errors whose id cannot be known and as a2a-sdk's
//! server answers. Batches get an array of responses (streaming methods cannot be batched).
//! A streaming method that fails before its first event answers with a stream of one event,
//! its error (0.3 §7.2.1, 1.0 §9.4).
//!
//! Methods 0.1 and 0.3 share (`tasks/get`, `tasks/cancel`, `tasks/resubscribe`,
//! `tasks/list`, the push-config methods) answer in the dialect that created the task.

use crate::auth::Authenticated;
use crate::http::{BodyError, bad_content_type, bad_version, fallback_dialect, read_body};
use crate::metrics::Metrics;
use crate::service::{A2aService, RequestContext, SendOutcome};
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use mesh_core::codec::{self, Decoded};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::model::{ListTaskPushNotificationConfigsResponse, Task};
use mesh_core::rpc::{Call, Reply, Request, RequestError};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What the JSON-RPC handlers use.
pub(crate) struct JsonRpc {
    pub service: Arc<A2aService>,
    pub metrics: Arc<Metrics>,
    /// The agent served at `POST /`.
    pub default_agent: Option<String>,
    /// The largest request body, in bytes.
    pub body_limit: usize,
    /// The most requests in one batch.
    pub max_batch: usize,
    /// How often an idle event stream gets a keep-alive comment.
    pub keep_alive: Duration,
}

/// What a request is answered with.
enum Answer {
    /// A JSON-RPC response body.
    Json(Vec<u8>),
    /// An event stream.
    Stream(crate::service::TaskEvents, Dialect, JsonRpcId),
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
    caller: Option<Authenticated>,
    /// Where a resubscription resumes (`Last-Event-ID`).
    last_event_id: Result<Option<u64>, A2aError>,
}

/// `POST /`: the default agent.
pub(crate) fn post_default(
    State(gw): State<Arc<JsonRpc>>,
    request: HttpRequest,
) -> impl Future<Output = Response> + Send {
    let agent = gw.default_agent.clone();
    handle(gw, agent, request)
}

/// `POST /agents/{name}`.
pub(crate) fn post_agent(
    State(gw): State<Arc<JsonRpc>>,
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
    gw: Arc<JsonRpc>,
    agent: Option<String>,
    request: HttpRequest,
) -> impl Future<Output = Response> + Send {
    async move {
        let (parts, body) = request.into_parts();
        let http = Http {
            bad_version: bad_version(&parts.headers, parts.uri.query()),
            traceparent: crate::http::traceparent(&parts.headers),
            last_event_id: crate::http::last_event_id(&parts.headers),
            caller: parts.extensions.get::<Authenticated>().cloned(),
        };
        // The dialect of answers written before the request is read.
        let fallback = fallback_dialect(&parts.headers, parts.uri.query());
        let limit = gw.body_limit;
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
        let bytes = match read_body(&parts.headers, body, limit).await {
            Ok(bytes) => bytes,
            Err(BodyError::TooLarge) => {
                return crate::http::closing(too_large(), parts.version);
            }
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
            let error = gw.service.no_default_agent("POST to /agents/{name}");
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
            Decoded::Batch(requests) if requests.len() > gw.max_batch => {
                let error = A2aError::invalid_request(format!(
                    "a batch of {} requests is more than this gateway takes at once ({}): send fewer",
                    requests.len(),
                    gw.max_batch
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
            // Boxed: the dispatch's future is most of this one's size, which axum copies
            // twice as it boxes it (about 1,000 instructions a request); the box copies it once.
            Triaged::Dispatch(request, id) => {
                Box::pin(dispatch(&gw, &agent, &http, request, id)).await
            }
            Triaged::Done(answer) => answer,
        };
        match answer {
            Answer::Json(body) => json_response(StatusCode::OK, body),
            Answer::Stream(events, dialect, id) => {
                crate::sse::jsonrpc_events(events, dialect, id, gw.keep_alive)
            }
            Answer::FailedStream(body) => crate::sse::one_event(body),
            Answer::Nothing => StatusCode::NO_CONTENT.into_response(),
        }
    }
}

/// Answers a batch: each element on its own, the JSON answers in one array.
async fn answer_batch(
    gw: &Arc<JsonRpc>,
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
    gw: &'a Arc<JsonRpc>,
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
    gw: &Arc<JsonRpc>,
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
                last_event_id: Ok(None),
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
    gw: &'a Arc<JsonRpc>,
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
    let cx = RequestContext {
        agent: agent.to_owned(),
        caller: http.caller.clone(),
        traceparent: http.traceparent.clone(),
        dialect,
    };
    async move {
        let began = Instant::now();
        let service = &gw.service;
        // A method 0.1 and 0.3 share answers in the dialect that created the task.
        let answer_in = |task_dialect: Dialect| {
            if shared && task_dialect == Dialect::V0_1 {
                Dialect::V0_1
            } else {
                dialect
            }
        };
        let result = match call {
            Call::Send(params) if method == Method::SendStreamingMessage => service
                .stream_message(&cx, params)
                .await
                .map(|events| Answer::Stream(events, dialect, id.clone())),
            Call::Send(params) => {
                let history_length = params.configuration.as_ref().and_then(|c| c.history_length);
                service
                    .send_message(&cx, params)
                    .await
                    .map(|outcome| match outcome {
                        SendOutcome::Task(record) => task_answer(
                            Method::SendMessage,
                            dialect,
                            &id,
                            &record.task,
                            history_length,
                        ),
                        SendOutcome::Message(message) => Answer::Json(codec::encode_reply(
                            dialect,
                            &id,
                            &Reply::Message(message),
                        )),
                    })
            }
            Call::GetTask(params) => service.get_task(&cx, &params).await.map(|record| {
                task_answer(
                    Method::GetTask,
                    answer_in(record.dialect),
                    &id,
                    &record.task,
                    params.history_length,
                )
            }),
            Call::ListTasks(params) => service.list_tasks(&cx, params).await.map(|list| {
                Answer::Json(codec::encode_task_page(
                    dialect,
                    &id,
                    &crate::answers::task_page(&list),
                ))
            }),
            Call::CancelTask(params) => service.cancel_task(&cx, params).await.map(|record| {
                task_answer(
                    Method::CancelTask,
                    answer_in(record.dialect),
                    &id,
                    &record.task,
                    None,
                )
            }),
            Call::Subscribe(params) => match http.last_event_id.clone() {
                Ok(resume) => service.subscribe(&cx, params, resume).await,
                Err(e) => Err(e),
            }
            .map(|(record, events)| Answer::Stream(events, answer_in(record.dialect), id.clone())),
            Call::SetPushConfig(config) => {
                service
                    .set_push_config(&cx, config)
                    .await
                    .map(|(config, task_dialect)| {
                        Answer::Json(codec::encode_reply(
                            answer_in(task_dialect),
                            &id,
                            &Reply::PushConfig(config),
                        ))
                    })
            }
            Call::GetPushConfig(params) => {
                service
                    .get_push_config(&cx, &params)
                    .await
                    .map(|(config, task_dialect)| {
                        Answer::Json(codec::encode_reply(
                            answer_in(task_dialect),
                            &id,
                            &Reply::PushConfig(config),
                        ))
                    })
            }
            Call::ListPushConfigs(params) => {
                service
                    .list_push_configs(&cx, &params)
                    .await
                    .map(|(configs, task_dialect)| {
                        Answer::Json(codec::encode_reply(
                            answer_in(task_dialect),
                            &id,
                            &Reply::PushConfigs(ListTaskPushNotificationConfigsResponse {
                                configs,
                                next_page_token: None,
                            }),
                        ))
                    })
            }
            Call::DeletePushConfig(params) => {
                service
                    .delete_push_config(&cx, &params)
                    .await
                    .map(|task_dialect| {
                        Answer::Json(codec::encode_reply(
                            answer_in(task_dialect),
                            &id,
                            &Reply::Empty,
                        ))
                    })
            }
            Call::GetExtendedCard => service
                .extended_card(&cx)
                .map(|card| Answer::Json(codec::encode_reply(dialect, &id, &Reply::Card(card)))),
        };
        gw.metrics
            .request(Some(method), result.is_ok(), began.elapsed());
        match result {
            Ok(answer) => answer,
            Err(e) if method.is_streaming() => {
                Answer::FailedStream(codec::encode_error(dialect, Some(&id), &e))
            }
            Err(e) => error(dialect, &id, e),
        }
    }
}

fn error(dialect: Dialect, id: &JsonRpcId, error: A2aError) -> Answer {
    Answer::Json(codec::encode_error(dialect, Some(id), &error))
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    crate::http::json_bytes(status, body, "application/json")
}

// ---------------------------------------------------------------------------------------
// Writing answers

/// The response carrying a task: bare, except SendMessage in 1.0 (`{"task": …}`).
fn task_answer(
    method: Method,
    dialect: Dialect,
    id: &JsonRpcId,
    task: &Task,
    history_length: Option<i32>,
) -> Answer {
    let view = crate::answers::task_view(history_length);
    Answer::Json(codec::encode_task(method, dialect, id, task, view))
}

/// The request's id, when the body is a JSON object with a usable one.
fn request_id(bytes: &[u8]) -> Option<JsonRpcId> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    JsonRpcId::from_value(value.get("id")?.clone()).ok()
}
