//! The HTTP+JSON binding (spec 1.0 §11): the A2A operations as resources, each request read
//! into the model by the codec that reads JSON-RPC `params` (the body, with the path and query
//! parameters put in, is the `params` of the same operation), each answer written by the same
//! writers: a `SendMessageResponse`, a bare `Task`, a `StreamResponse` per server-sent event
//! (§11.7), and errors as a `google.rpc.Status` with an `ErrorInfo` detail and the HTTP status
//! of §5.4 (§11.6).
//!
//! | method | path | operation |
//! | --- | --- | --- |
//! | `POST` | `/message:send` | SendMessage |
//! | `POST` | `/message:stream` | SendStreamingMessage (SSE) |
//! | `GET` | `/tasks/{id}` | GetTask (`?historyLength=`) |
//! | `GET` | `/tasks` | ListTasks (`?contextId=&status=&pageSize=&pageToken=&historyLength=&statusTimestampAfter=&includeArtifacts=`) |
//! | `POST` | `/tasks/{id}:cancel` | CancelTask |
//! | `POST`, `GET` | `/tasks/{id}:subscribe` | SubscribeToTask (SSE; §11.3.2 says POST, the proto's annotation GET) |
//! | `POST` | `/tasks/{id}/pushNotificationConfigs` | CreateTaskPushNotificationConfig |
//! | `GET` | `/tasks/{id}/pushNotificationConfigs` | ListTaskPushNotificationConfigs |
//! | `GET` | `/tasks/{id}/pushNotificationConfigs/{configId}` | GetTaskPushNotificationConfig |
//! | `DELETE` | `/tasks/{id}/pushNotificationConfigs/{configId}` | DeleteTaskPushNotificationConfig |
//! | `GET` | `/extendedAgentCard` | GetExtendedAgentCard |
//!
//! The paths are served under each agent's base URL (`/agents/{name}/message:send`, …), and
//! at the root for the default agent. Each also has its `/{tenant}/…` form (the proto's
//! additional bindings): at the root the tenant names the agent; under an agent's path it
//! must be that agent. The checks of the JSON-RPC binding apply: the body's size and content
//! type, `A2A-Version` (absent or 1.x: this binding is 1.0's), the API keys (the
//! authentication layer).

use crate::answers;
use crate::auth::Authenticated;
use crate::cards::Cards;
use crate::http::{BodyError, bad_content_type, read_body};
use crate::metrics::Metrics;
use crate::service::{A2aService, RequestContext, SendOutcome};
use crate::sse::RestEvents;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{Method as HttpMethod, StatusCode};
use axum::response::Response;
use mesh_core::codec::{self, TaskView};
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::{A2aError, ErrorKind};
use mesh_core::model::ListTaskPushNotificationConfigsResponse;
use mesh_core::rpc::{Call, Reply};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The media type of this binding's bodies (§11.1).
const CONTENT_TYPE: &str = "application/a2a+json";

/// What the HTTP+JSON handlers use.
pub(crate) struct Rest {
    pub service: Arc<A2aService>,
    /// How cards are served (the extended card is one).
    pub cards: Arc<Cards>,
    pub metrics: Arc<Metrics>,
    /// The agent served at the root.
    pub default_agent: Option<String>,
    /// The largest request body, in bytes.
    pub body_limit: usize,
    /// How often an idle event stream gets a keep-alive comment.
    pub keep_alive: Duration,
}

/// One operation of the binding, as its path and method name it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Operation {
    Send,
    Stream,
    GetTask(String),
    ListTasks,
    Cancel(String),
    Subscribe(String),
    CreatePushConfig(String),
    ListPushConfigs(String),
    GetPushConfig(String, String),
    DeletePushConfig(String, String),
    ExtendedCard,
}

impl Operation {
    /// The A2A method it is.
    fn method(&self) -> Method {
        match self {
            Operation::Send => Method::SendMessage,
            Operation::Stream => Method::SendStreamingMessage,
            Operation::GetTask(_) => Method::GetTask,
            Operation::ListTasks => Method::ListTasks,
            Operation::Cancel(_) => Method::CancelTask,
            Operation::Subscribe(_) => Method::SubscribeToTask,
            Operation::CreatePushConfig(_) => Method::SetPushConfig,
            Operation::ListPushConfigs(_) => Method::ListPushConfigs,
            Operation::GetPushConfig(..) => Method::GetPushConfig,
            Operation::DeletePushConfig(..) => Method::DeletePushConfig,
            Operation::ExtendedCard => Method::GetExtendedCard,
        }
    }

    /// Whether the operation reads a body.
    fn has_body(&self) -> bool {
        matches!(
            self,
            Operation::Send
                | Operation::Stream
                | Operation::Cancel(_)
                | Operation::CreatePushConfig(_)
        )
    }
}

/// Why a path is not an operation.
#[derive(Debug, PartialEq, Eq)]
enum NotAnOperation {
    /// No operation has this path.
    Unknown,
    /// The path is an operation's, the HTTP method is not.
    WrongMethod,
}

/// The operation of `segments` (percent-decoded path segments) under `method`.
fn operation(method: &HttpMethod, segments: &[String]) -> Result<Operation, NotAnOperation> {
    use NotAnOperation::{Unknown, WrongMethod};
    let is = |m: HttpMethod| {
        if *method == m {
            Ok(())
        } else {
            Err(WrongMethod)
        }
    };
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match segments.as_slice() {
        ["message:send"] => is(HttpMethod::POST).map(|()| Operation::Send),
        ["message:stream"] => is(HttpMethod::POST).map(|()| Operation::Stream),
        ["extendedAgentCard"] => is(HttpMethod::GET).map(|()| Operation::ExtendedCard),
        ["tasks"] => is(HttpMethod::GET).map(|()| Operation::ListTasks),
        ["tasks", task] => {
            if let Some(id) = task.strip_suffix(":cancel") {
                is(HttpMethod::POST).map(|()| Operation::Cancel(id.to_owned()))
            } else if let Some(id) = task.strip_suffix(":subscribe") {
                if *method == HttpMethod::POST || *method == HttpMethod::GET {
                    Ok(Operation::Subscribe(id.to_owned()))
                } else {
                    Err(WrongMethod)
                }
            } else {
                is(HttpMethod::GET).map(|()| Operation::GetTask((*task).to_owned()))
            }
        }
        ["tasks", task, "pushNotificationConfigs"] => match *method {
            HttpMethod::POST => Ok(Operation::CreatePushConfig((*task).to_owned())),
            HttpMethod::GET => Ok(Operation::ListPushConfigs((*task).to_owned())),
            _ => Err(WrongMethod),
        },
        ["tasks", task, "pushNotificationConfigs", config] => match *method {
            HttpMethod::GET => Ok(Operation::GetPushConfig(
                (*task).to_owned(),
                (*config).to_owned(),
            )),
            HttpMethod::DELETE => Ok(Operation::DeletePushConfig(
                (*task).to_owned(),
                (*config).to_owned(),
            )),
            _ => Err(WrongMethod),
        },
        _ => Err(Unknown),
    }
}

/// First segments that are the gateway's own, never a tenant.
const RESERVED: [&str; 9] = [
    "ui",
    "mcp",
    "agents",
    "metrics",
    "healthz",
    "readyz",
    ".well-known",
    "a2a",
    "agentCard",
];

/// The operation of a path below an agent's base URL, and the tenant it names (`/{tenant}/…`).
fn route(method: &HttpMethod, path: &str) -> Result<(Option<String>, Operation), NotAnOperation> {
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    match operation(method, &segments) {
        Ok(operation) => Ok((None, operation)),
        Err(NotAnOperation::Unknown)
            if segments.len() > 1 && !RESERVED.contains(&segments[0].as_str()) =>
        {
            operation(method, &segments[1..]).map(|op| (Some(segments[0].clone()), op))
        }
        Err(e) => Err(e),
    }
}

/// Whether a root path is one of this binding's (the router sends every path it does not
/// know here; the others get the gateway's 404).
pub(crate) fn is_operation_path(method: &HttpMethod, path: &str) -> bool {
    !matches!(route(method, path), Err(NotAnOperation::Unknown))
}

/// `/{path}` at the root: the default agent, or the agent a `/{tenant}/…` path names.
pub(crate) async fn root(State(rest): State<Arc<Rest>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    match route(request.method(), &path) {
        Ok((Some(tenant), operation)) => serve(&rest, tenant, operation, request).await,
        Ok((None, operation)) => match rest.default_agent.clone() {
            Some(agent) => serve(&rest, agent, operation, request).await,
            None => {
                let e = rest
                    .service
                    .no_default_agent(&format!("use /agents/{{name}}{path}"));
                error(status_of(&e), &e)
            }
        },
        Err(NotAnOperation::WrongMethod) => wrong_method(request.method(), &path),
        Err(NotAnOperation::Unknown) => error(
            StatusCode::NOT_FOUND,
            &A2aError::new(ErrorKind::MethodNotFound, format!("no such path: {path}")),
        ),
    }
}

/// `/agents/{name}/{*path}`: the operation of that agent.
pub(crate) async fn agent(
    State(rest): State<Arc<Rest>>,
    Path((name, path)): Path<(String, String)>,
    request: Request,
) -> Response {
    match route(request.method(), &path) {
        Ok((Some(tenant), _)) if tenant != name => error(
            StatusCode::NOT_FOUND,
            &A2aError::new(
                ErrorKind::MethodNotFound,
                format!(
                    "tenant {tenant:?} is not agent {name:?}: under /agents/{name}/ the tenant, when given, is the agent"
                ),
            ),
        ),
        Ok((_, operation)) => serve(&rest, name, operation, request).await,
        Err(NotAnOperation::WrongMethod) => wrong_method(request.method(), &path),
        Err(NotAnOperation::Unknown) => error(
            StatusCode::NOT_FOUND,
            &A2aError::new(
                ErrorKind::MethodNotFound,
                format!("no such path: /agents/{name}/{path}"),
            ),
        ),
    }
}

fn wrong_method(method: &HttpMethod, path: &str) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        &A2aError::new(
            ErrorKind::MethodNotFound,
            format!("{method} is not an operation of {path}"),
        ),
    )
}

/// Serves one operation for `agent`.
async fn serve(rest: &Rest, agent: String, operation: Operation, request: Request) -> Response {
    let began = Instant::now();
    let method = operation.method();
    let (parts, body) = request.into_parts();
    // A refusal before the body is read tells an HTTP/1 client not to reuse the connection.
    let unread = |response: Response| {
        if operation.has_body() {
            crate::http::closing(response, parts.version)
        } else {
            response
        }
    };
    if let Some(version) = crate::http::version_asked(&parts.headers, parts.uri.query())
        .filter(|v| !(v.is_empty() || *v == "1" || v.starts_with("1.")))
    {
        return unread(failed(
            rest,
            method,
            began,
            A2aError::version_not_supported(version),
        ));
    }
    let body = if operation.has_body() {
        if let Some(content_type) = bad_content_type(&parts.headers) {
            let e = A2aError::content_type_not_supported(&content_type);
            return unread(failed(rest, method, began, e));
        }
        match read_object(&parts.headers, body, rest.body_limit).await {
            Ok(body) => body,
            Err(BodyRefused::TooLarge) => {
                rest.metrics.request(Some(method), false, began.elapsed());
                let e = A2aError::invalid_request(format!(
                    "the request body is larger than this gateway accepts ({} bytes)",
                    rest.body_limit
                ));
                return unread(error(StatusCode::PAYLOAD_TOO_LARGE, &e));
            }
            Err(BodyRefused::Invalid(e)) => return failed(rest, method, began, e),
        }
    } else {
        Map::new()
    };
    let call = match read_call(&operation, body, parts.uri.query()) {
        Ok(call) => call,
        Err(e) => return failed(rest, method, began, e),
    };
    let cx = RequestContext {
        agent,
        caller: parts.extensions.get::<Authenticated>().cloned(),
        traceparent: crate::http::traceparent(&parts.headers),
        dialect: Dialect::V1_0,
    };
    // Boxed: its future is most of this one's size, which axum copies twice as it boxes it.
    let answer = Box::pin(answer(rest, &cx, method, call, &parts.headers)).await;
    rest.metrics
        .request(Some(method), answer.is_ok(), began.elapsed());
    answer.unwrap_or_else(|e| error(status_of(&e), &e))
}

/// Calls the service and writes its answer.
async fn answer(
    rest: &Rest,
    cx: &RequestContext,
    method: Method,
    call: Call,
    headers: &axum::http::HeaderMap,
) -> Result<Response, A2aError> {
    let service = &rest.service;
    let d = Dialect::V1_0;
    Ok(match call {
        Call::Send(params) if method == Method::SendStreamingMessage => {
            let events = service.stream_message(cx, params).await?;
            crate::sse::respond(events, RestEvents, rest.keep_alive)
        }
        Call::Send(params) => {
            let view =
                answers::task_view(params.configuration.as_ref().and_then(|c| c.history_length));
            match service.send_message(cx, params).await? {
                SendOutcome::Task(record) => ok(codec::write_task_json(
                    Method::SendMessage,
                    d,
                    &record.task,
                    view,
                )),
                SendOutcome::Message(message) => {
                    ok(codec::write_reply_json(d, &Reply::Message(message)))
                }
            }
        }
        Call::GetTask(params) => {
            let record = service.get_task(cx, &params).await?;
            let view = answers::task_view(params.history_length);
            ok(codec::write_task_json(method, d, &record.task, view))
        }
        Call::ListTasks(params) => {
            let list = service.list_tasks(cx, params).await?;
            ok(codec::write_task_page_json(d, &answers::task_page(&list)))
        }
        Call::CancelTask(params) => {
            let record = service.cancel_task(cx, params).await?;
            ok(codec::write_task_json(
                method,
                d,
                &record.task,
                TaskView::WHOLE,
            ))
        }
        Call::Subscribe(params) => {
            let resume = crate::http::last_event_id(headers)?;
            let (_, events) = service.subscribe(cx, params, resume).await?;
            crate::sse::respond(events, RestEvents, rest.keep_alive)
        }
        Call::SetPushConfig(config) => {
            let (config, _) = service.set_push_config(cx, config).await?;
            ok(codec::write_reply_to_json(
                method,
                d,
                &Reply::PushConfig(config),
            ))
        }
        Call::GetPushConfig(params) => {
            let (config, _) = service.get_push_config(cx, &params).await?;
            ok(codec::write_reply_to_json(
                method,
                d,
                &Reply::PushConfig(config),
            ))
        }
        Call::ListPushConfigs(params) => {
            let (configs, _) = service.list_push_configs(cx, &params).await?;
            let list = ListTaskPushNotificationConfigsResponse {
                configs,
                next_page_token: None,
            };
            ok(codec::write_reply_to_json(
                method,
                d,
                &Reply::PushConfigs(list),
            ))
        }
        Call::DeletePushConfig(params) => {
            service.delete_push_config(cx, &params).await?;
            // google.protobuf.Empty.
            ok(b"{}".to_vec())
        }
        Call::GetExtendedCard => {
            // The shape the public card has for this client (`A2A-Version`).
            let mut card = service.extended_card(cx)?;
            card.signatures = None;
            let body = crate::cards::card_body(&rest.cards, &card, headers);
            ok(serde_json::to_vec(&body).unwrap_or_default())
        }
    })
}

/// The params of `operation`, as the JSON-RPC binding's 1.0 `params` carry them: the body,
/// with the path's ids and the query's parameters put in (§11.5: camelCase names; numbers
/// and booleans as their decimal and `true`/`false` strings).
fn read_call(
    operation: &Operation,
    mut params: Map<String, Value>,
    query: Option<&str>,
) -> Result<Call, A2aError> {
    let mut put = |name: &str, value: &str| {
        params.insert(name.to_owned(), Value::String(value.to_owned()));
    };
    match operation {
        Operation::GetTask(id) | Operation::Cancel(id) | Operation::Subscribe(id) => put("id", id),
        Operation::CreatePushConfig(task) | Operation::ListPushConfigs(task) => put("taskId", task),
        Operation::GetPushConfig(task, config) | Operation::DeletePushConfig(task, config) => {
            put("taskId", task);
            put("id", config);
        }
        Operation::Send | Operation::Stream | Operation::ListTasks | Operation::ExtendedCard => {}
    }
    if !operation.has_body() {
        for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let value = query_value(&name, &value)?;
            params.insert(name.into_owned(), value);
        }
    }
    codec::read_params(operation.method(), Dialect::V1_0, Value::Object(params))
}

/// A query parameter's value as the params' JSON types it.
fn query_value(name: &str, value: &str) -> Result<Value, A2aError> {
    let bad =
        |kind: &str| A2aError::invalid_params_at(name, format!("must be {kind}; found {value:?}"));
    Ok(match name {
        "historyLength" | "history_length" | "pageSize" | "page_size" => value
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| bad("an integer"))?,
        "includeArtifacts" | "include_artifacts" => match value {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(bad("true or false")),
        },
        _ => Value::String(value.to_owned()),
    })
}

/// Why a body was refused.
enum BodyRefused {
    TooLarge,
    Invalid(A2aError),
}

/// Reads a body that is a JSON object (an empty body is an empty object).
async fn read_object(
    headers: &axum::http::HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Map<String, Value>, BodyRefused> {
    let bytes = match read_body(headers, body, limit).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => return Err(BodyRefused::TooLarge),
        Err(BodyError::Broken(e)) => {
            return Err(BodyRefused::Invalid(A2aError::invalid_request(format!(
                "the request body could not be read: {e}"
            ))));
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(BodyRefused::Invalid(A2aError::invalid_request(
            "the request body must be a JSON object",
        ))),
        Err(e) => Err(BodyRefused::Invalid(A2aError::parse(format!(
            "the request body is not JSON: {e}"
        )))),
    }
}

/// The HTTP status of an error (§5.4).
fn status_of(error: &A2aError) -> StatusCode {
    StatusCode::from_u16(error.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Counts a request refused before the service, and answers its error.
fn failed(rest: &Rest, method: Method, began: Instant, e: A2aError) -> Response {
    rest.metrics.request(Some(method), false, began.elapsed());
    error(status_of(&e), &e)
}

/// A success body.
fn ok(body: Vec<u8>) -> Response {
    crate::http::json_bytes(StatusCode::OK, body, CONTENT_TYPE)
}

/// An error as §11.6 writes it.
pub(crate) fn error(status: StatusCode, error: &A2aError) -> Response {
    let body = error
        .to_status_json(status.as_u16())
        .to_string()
        .into_bytes();
    crate::http::json_bytes(status, body, CONTENT_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(method: HttpMethod, path: &str) -> Result<(Option<String>, Operation), NotAnOperation> {
        route(&method, path)
    }

    #[test]
    fn every_path_of_the_binding_names_its_operation() {
        use Operation::*;
        let t = || "t-1".to_owned();
        let cases = [
            (HttpMethod::POST, "/message:send", Send),
            (HttpMethod::POST, "message:stream", Stream),
            (HttpMethod::GET, "/tasks/t-1", GetTask(t())),
            (HttpMethod::GET, "/tasks", ListTasks),
            (HttpMethod::POST, "/tasks/t-1:cancel", Cancel(t())),
            (HttpMethod::POST, "/tasks/t-1:subscribe", Subscribe(t())),
            (HttpMethod::GET, "/tasks/t-1:subscribe", Subscribe(t())),
            (
                HttpMethod::POST,
                "/tasks/t-1/pushNotificationConfigs",
                CreatePushConfig(t()),
            ),
            (
                HttpMethod::GET,
                "/tasks/t-1/pushNotificationConfigs",
                ListPushConfigs(t()),
            ),
            (
                HttpMethod::GET,
                "/tasks/t-1/pushNotificationConfigs/c",
                GetPushConfig(t(), "c".into()),
            ),
            (
                HttpMethod::DELETE,
                "/tasks/t-1/pushNotificationConfigs/c",
                DeletePushConfig(t(), "c".into()),
            ),
            (HttpMethod::GET, "/extendedAgentCard", ExtendedCard),
        ];
        for (method, path, expected) in cases {
            assert_eq!(
                op(method.clone(), path),
                Ok((None, expected.clone())),
                "{path}"
            );
            let tenanted = format!("/echo/{}", path.trim_start_matches('/'));
            assert_eq!(
                op(method, &tenanted),
                Ok((Some("echo".into()), expected)),
                "{tenanted}"
            );
        }
    }

    #[test]
    fn ids_are_percent_decoded_and_wrong_methods_and_unknown_paths_are_told_apart() {
        assert_eq!(
            op(HttpMethod::GET, "/tasks/a%2Fb%20c"),
            Ok((None, Operation::GetTask("a/b c".into())))
        );
        assert_eq!(
            op(HttpMethod::DELETE, "/message:send"),
            Err(NotAnOperation::WrongMethod)
        );
        assert_eq!(
            op(HttpMethod::GET, "/nothing/here/at/all"),
            Err(NotAnOperation::Unknown)
        );
        assert!(!is_operation_path(&HttpMethod::GET, "/favicon.ico"));
        assert!(is_operation_path(&HttpMethod::GET, "/echo/tasks"));
    }

    #[test]
    fn query_parameters_are_typed_as_the_params_are() {
        let call = read_call(
            &Operation::ListTasks,
            Map::new(),
            Some("contextId=c%201&status=TASK_STATE_WORKING&pageSize=2&includeArtifacts=true&historyLength=3"),
        )
        .expect("the query reads");
        let Call::ListTasks(list) = call else {
            panic!("a list call")
        };
        assert_eq!(list.context_id.as_deref(), Some("c 1"));
        assert_eq!(list.page_size, Some(2));
        assert_eq!(list.history_length, Some(3));
        assert_eq!(list.include_artifacts, Some(true));
        assert!(list.status.is_some());
        let e = read_call(&Operation::ListTasks, Map::new(), Some("pageSize=two"))
            .expect_err("a page size that is not a number");
        assert_eq!(e.code(), -32602);
    }
}
