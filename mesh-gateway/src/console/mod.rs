//! The web console: a page served by the gateway under `/ui/` that shows the mesh's agents
//! live, chats with any of them (streamed answers, multi-turn, cancel, files in and out) and
//! reads the tasks and their timelines.
//!
//! The page (`assets/`: `index.html`, `app.js`, `style.css`, plain ES modules and CSS, no
//! build step) is embedded in the binary and works offline. It talks to the gateway only
//! through public HTTP endpoints: the HTTP+JSON binding of each agent
//! (`/agents/{name}/message:stream`, `…/tasks/{id}`, `…:cancel`, `…:subscribe`), the cards,
//! and the feeds below, which exist for it:
//!
//! | method | path | what |
//! | --- | --- | --- |
//! | `GET` | `/` | a redirect to `/ui/` (a `POST /` stays the default agent's JSON-RPC) |
//! | `GET` | `/ui`, `/ui/` | the page |
//! | `GET` | `/ui/app.js`, `/ui/style.css` | its script and style |
//! | `GET` | `/ui/api/agents/events` | SSE: the agents (the body of `GET /agents`) now and after every change of the registry (`event: agents`) |
//! | `GET` | `/ui/api/tasks` | the tasks across agents (`?agent=&state=&contextId=&pageSize=&pageToken=`), newest first, paged |
//! | `GET` | `/ui/api/tasks/{id}/events` | one task's timeline: its logged events with their time and raw JSON (`?after=&limit=`) |
//! | `GET` | `/ui/api/bus` | SSE: the bus traffic of the namespace (`event: bus`), like `mesh tail`; with API keys, for the console admins only |
//!
//! The page and its assets are public (with API keys on, the page asks for a key and sends it
//! as `Authorization: Bearer`); the `/ui/api/` feeds need a key like every other route, and
//! a principal sees only the tasks it created. The bus view shows every principal's traffic,
//! so with API keys only the principals named as console admins
//! ([`GatewayConfig::console_admins`](crate::GatewayConfig::console_admins), `--console-admin`)
//! may watch it; anyone else gets `403`.
//!
//! The bus view never slows the bus: the gateway's bus connection waits for room in each
//! subscription, so each view's subscription is drained at once into a small queue, and what
//! does not fit is dropped and counted (`event: dropped`). At most [`MAX_BUS_VIEWS`] are
//! open at once. While one is open the gateway's connection receives the namespace's whole
//! traffic (a broker may send a duplicate of an answer the gateway also subscribes to: the
//! requester drops it by sequence number, as any QoS 1 redelivery).

use crate::auth::Authenticated;
use crate::health::agents_json;
use crate::http::json_status;
use crate::service::A2aService;
use crate::store::{STATES, StoreError, TaskQuery};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::{Extension, body::Body};
use futures_util::stream;
use mesh_core::model::{TaskState, state_name};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// The page.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script (an ES module).
const APP_JS: &str = include_str!("assets/app.js");
/// Its style.
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The most tasks one page of `GET /ui/api/tasks` lists.
const MAX_PAGE_SIZE: usize = 100;
/// The tasks a page lists when `pageSize` is not given.
const DEFAULT_PAGE_SIZE: usize = 20;
/// The most events one answer of `GET /ui/api/tasks/{id}/events` carries.
const MAX_EVENTS: usize = 500;

/// The most bus views open at once.
pub const MAX_BUS_VIEWS: usize = 4;
/// The messages a bus view queues for its reader before it drops some.
const BUS_VIEW_QUEUE: usize = 256;
/// The most payload bytes a bus view shows of one message.
const BUS_VIEW_PAYLOAD: usize = 16 * 1024;

/// What the console's handlers use.
pub(crate) struct Console {
    /// The A2A operations (the registry, the task store, whether tasks are owned).
    pub service: Arc<A2aService>,
    /// How often an idle feed gets a keep-alive comment.
    pub keep_alive: Duration,
    /// The filter of the namespace's A2A traffic (`<ns>/a2a/v1/#`), for the bus view.
    pub bus_filter: String,
    /// The bus views open now.
    pub bus_views: Arc<AtomicUsize>,
    /// The principals that may watch the bus when API keys are on.
    pub admins: Vec<String>,
}

/// `GET /`: the console.
pub(crate) async fn root() -> Response {
    redirect("/ui/")
}

/// `GET /ui`: the console, at the path with its slash (so the page's relative URLs resolve).
pub(crate) async fn ui_no_slash() -> Response {
    redirect("/ui/")
}

fn redirect(to: &'static str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    response
}

/// `GET /ui/`.
pub(crate) async fn index() -> Response {
    asset(INDEX_HTML, "text/html; charset=utf-8")
}

/// `GET /ui/app.js`.
pub(crate) async fn app_js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

/// `GET /ui/style.css`.
pub(crate) async fn style_css() -> Response {
    asset(STYLE_CSS, "text/css; charset=utf-8")
}

/// An embedded asset, with headers that keep the page to its own origin: no inline script,
/// nothing loaded from elsewhere, no framing.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `GET /ui/api/agents/events`: the agents now, then again after every change of the
/// registry (an agent's card, an instance online or offline), each as `event: agents` with
/// the body of `GET /agents`. A subscriber that falls behind gets the agents as they are
/// (every event is the whole list, so nothing is lost by skipping some). Ends when the
/// gateway shuts down.
pub(crate) async fn agents_events(State(console): State<Arc<Console>>) -> Response {
    let registry = console.service.registry.clone();
    let changes = registry.subscribe();
    let shutdown = console.service.shutdown.clone();
    let first = true;
    let events = stream::unfold(
        (registry, changes, shutdown, first),
        |(registry, mut changes, shutdown, first)| async move {
            if !first {
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    changed = changes.recv() => match changed {
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return None,
                    },
                }
            }
            let event = Event::default()
                .event("agents")
                .data(agents_json(&registry).to_string());
            Some((
                Ok::<_, Infallible>(event),
                (registry, changes, shutdown, false),
            ))
        },
    );
    crate::sse::stream_response(events, Some(console.keep_alive))
}

/// The query of `GET /ui/api/tasks`.
#[derive(Debug, Default)]
struct TasksQuery {
    agent: Option<String>,
    state: Option<String>,
    context_id: Option<String>,
    page_size: Option<usize>,
    page_token: Option<String>,
}

impl TasksQuery {
    /// Reads the query string; `None` when a number is not one.
    fn parse(raw: Option<&str>) -> Option<TasksQuery> {
        let mut query = TasksQuery::default();
        for (name, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            let value = value.into_owned();
            match name.as_ref() {
                "agent" => query.agent = Some(value),
                "state" => query.state = Some(value),
                "contextId" => query.context_id = Some(value),
                "pageSize" => query.page_size = Some(value.parse().ok()?),
                "pageToken" => query.page_token = Some(value),
                _ => {}
            }
        }
        Some(query)
    }
}

/// `GET /ui/api/tasks`: the tasks the caller may see, newest first, each as a summary
/// (`id`, `agent`, `contextId`, `state`, `created`, `updated`, `events`: its last sequence
/// number), with `nextPageToken` and `totalSize`. `state` is a state's name (`working`,
/// `input-required`, …, or the 1.0 form `TASK_STATE_WORKING`).
pub(crate) async fn tasks(
    State(console): State<Arc<Console>>,
    caller: Option<Extension<Authenticated>>,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(query) = TasksQuery::parse(raw.as_deref()) else {
        return bad_request(
            "the query is not valid: agent, state, contextId, pageSize (a number), pageToken",
        );
    };
    let caller = caller.map(|Extension(c)| c);
    let state = match query.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => match parse_state(name) {
            Some(state) => Some(state),
            None => return bad_request(&format!("state {name:?} is not a task state")),
        },
    };
    let page_size = match query.page_size {
        None | Some(0) => DEFAULT_PAGE_SIZE,
        Some(n) if n > MAX_PAGE_SIZE => {
            return bad_request(&format!("pageSize must be between 1 and {MAX_PAGE_SIZE}"));
        }
        Some(n) => n,
    };
    let store_query = TaskQuery {
        agent: query.agent.filter(|a| !a.is_empty()),
        context_id: query.context_id.filter(|c| !c.is_empty()),
        state,
        owner: console
            .service
            .owner_filter(caller.as_ref().map(|c| c.principal.as_str())),
        page_size,
        page_token: query.page_token.filter(|t| !t.is_empty()),
    };
    let page = match console.service.store().list(&store_query).await {
        Ok(page) => page,
        Err(error @ StoreError::InvalidPageToken(_)) => return bad_request(&error.to_string()),
        Err(error) => return internal(&error.to_string()),
    };
    let tasks: Vec<Value> = page
        .records
        .iter()
        .map(|record| {
            json!({
                "id": record.task.id,
                "agent": record.agent,
                "contextId": record.task.context_id,
                "state": state_name(&record.task.status.state),
                "created": rfc3339(record.created),
                "updated": rfc3339(record.updated),
                "events": record.seq,
            })
        })
        .collect();
    json_status(
        StatusCode::OK,
        json!({
            "tasks": tasks,
            "nextPageToken": page.next_page_token.unwrap_or_default(),
            "totalSize": page.total_size,
        }),
    )
}

/// A task state by its name.
fn parse_state(name: &str) -> Option<TaskState> {
    STATES
        .iter()
        .find(|state| {
            state_name(state) == name
                || serde_json::to_value(state).is_ok_and(|v| v.as_str() == Some(name))
        })
        .cloned()
}

/// The query of `GET /ui/api/tasks/{id}/events`.
#[derive(Debug, Default)]
struct EventsQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

impl EventsQuery {
    /// Reads the query string; `None` when a number is not one.
    fn parse(raw: Option<&str>) -> Option<EventsQuery> {
        let mut query = EventsQuery::default();
        for (name, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            match name.as_ref() {
                "after" => query.after = Some(value.parse().ok()?),
                "limit" => query.limit = Some(value.parse().ok()?),
                _ => {}
            }
        }
        Some(query)
    }
}

/// `GET /ui/api/tasks/{id}/events`: the task's logged events after `after` (default 0), at
/// most `limit` (default and most: 500), each with its sequence number, the time the gateway
/// logged it and the event's JSON (a 1.0 `StreamResponse`-shaped reply). When the log no
/// longer holds the first ones (the memory store keeps only a running task's last events),
/// the answer starts at the first it holds and says from where (`first`); `next` is the
/// `after` of the next page, and `more` whether there may be one.
pub(crate) async fn task_events(
    State(console): State<Arc<Console>>,
    caller: Option<Extension<Authenticated>>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(query) = EventsQuery::parse(raw.as_deref()) else {
        return bad_request("the query is not valid: after and limit are numbers");
    };
    let caller = caller.map(|Extension(c)| c);
    let store = console.service.store();
    let loaded = match store.load(&id).await {
        Ok(loaded) => loaded,
        Err(error) => return internal(&error.to_string()),
    };
    let Some(record) = loaded.filter(|r| {
        console.service.may_see(
            caller.as_ref().map(|c| c.principal.as_str()),
            r.owner.as_deref(),
        )
    }) else {
        return json_status(
            StatusCode::NOT_FOUND,
            json!({"error": format!("task {id} not found")}),
        );
    };
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(MAX_EVENTS).clamp(1, MAX_EVENTS);
    let read = match store.events_after(&id, after, limit).await {
        Err(StoreError::EventsForgotten { first, .. }) if first > after + 1 => store
            .events_after(&id, first - 1, limit)
            .await
            .map(|events| (Some(first), events)),
        other => other.map(|events| (None, events)),
    };
    let (forgotten_before, events) = match read {
        Ok(read) => read,
        // The log holds none of them any more (a finished task on the memory store).
        Err(StoreError::EventsForgotten { first, .. }) => (Some(first), Vec::new()),
        Err(StoreError::TaskNotFound(_)) => {
            return json_status(
                StatusCode::NOT_FOUND,
                json!({"error": format!("task {id} not found")}),
            );
        }
        Err(error) => return internal(&error.to_string()),
    };
    let next = events.last().map_or(after, |e| e.seq);
    let more = events.len() == limit;
    let events: Vec<Value> = events
        .iter()
        .map(|event| {
            json!({
                "seq": event.seq,
                "time": rfc3339(event.time),
                "event": serde_json::from_slice::<Value>(&event.json)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&event.json).into_owned())),
            })
        })
        .collect();
    json_status(
        StatusCode::OK,
        json!({
            "taskId": record.task.id,
            "agent": record.agent,
            "state": state_name(&record.task.status.state),
            "events": events,
            "first": forgotten_before,
            "next": next,
            "more": more,
        }),
    )
}

fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn bad_request(message: &str) -> Response {
    json_status(StatusCode::BAD_REQUEST, json!({ "error": message }))
}

fn internal(message: &str) -> Response {
    json_status(
        StatusCode::INTERNAL_SERVER_ERROR,
        json!({ "error": message }),
    )
}

/// `GET /ui/api/bus`: the namespace's bus traffic as it passes, each message as `event: bus`
/// with its `topic`, `retain`, `bytes` and `payload` (the JSON, or the text when it is not
/// JSON; cut at 16 KiB with `truncated: true`), and `event: dropped` with a count when the
/// reader fell behind. `403` on a gateway with API keys for a caller that is not a console
/// admin (the traffic of every principal),
/// `503` when [`MAX_BUS_VIEWS`] are open.
pub(crate) async fn bus(
    State(console): State<Arc<Console>>,
    caller: Option<axum::Extension<Authenticated>>,
) -> Response {
    let admin = caller.is_some_and(|c| console.admins.contains(&c.principal));
    if console.service.settings.owned_tasks && !admin {
        return json_status(
            StatusCode::FORBIDDEN,
            json!({"error": "the bus view shows every principal's traffic: with API keys, only the principals named by --console-admin may watch it"}),
        );
    }
    let views = console.bus_views.clone();
    if views.fetch_add(1, Ordering::SeqCst) >= MAX_BUS_VIEWS {
        views.fetch_sub(1, Ordering::SeqCst);
        return json_status(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": format!("{MAX_BUS_VIEWS} bus views are open already")}),
        );
    }
    let open = ViewSlot(views);
    let mut subscription = match console
        .service
        .bus
        .subscribe(&console.bus_filter, mesh_core::bus::QoS::AtMostOnce)
        .await
    {
        Ok(subscription) => subscription,
        Err(error) => {
            return json_status(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": format!("cannot watch the bus: {error}")}),
            );
        }
    };
    let (tx, rx) = mpsc::channel::<Event>(BUS_VIEW_QUEUE);
    let shutdown = console.service.shutdown.clone();
    // The pump: drains the subscription at once, queues what fits, counts what does not.
    tokio::spawn(async move {
        let _open = open;
        let mut dropped: u64 = 0;
        loop {
            let message = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                message = subscription.recv() => message,
            };
            let Some(message) = message else { return };
            if dropped > 0 {
                let note = Event::default()
                    .event("dropped")
                    .data(json!({"dropped": dropped}).to_string());
                if tx.try_send(note).is_ok() {
                    dropped = 0;
                }
            }
            if tx.try_send(bus_event(&message)).is_err() {
                dropped += 1;
            }
        }
    });
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    crate::sse::stream_response(events, Some(console.keep_alive))
}

/// Counts a bus view as open while it lives.
struct ViewSlot(Arc<AtomicUsize>);

impl Drop for ViewSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One bus message as the bus view sends it.
fn bus_event(message: &mesh_core::bus::BusMessage) -> Event {
    let bytes = message.payload.len();
    let truncated = bytes > BUS_VIEW_PAYLOAD;
    let payload = if truncated {
        Value::String(String::from_utf8_lossy(&message.payload[..BUS_VIEW_PAYLOAD]).into_owned())
    } else {
        serde_json::from_slice::<Value>(&message.payload).unwrap_or_else(|_| {
            Value::String(String::from_utf8_lossy(&message.payload).into_owned())
        })
    };
    Event::default().event("bus").data(
        json!({
            "topic": message.topic,
            "retain": message.retain,
            "bytes": bytes,
            "truncated": truncated,
            "payload": payload,
            "time": rfc3339(SystemTime::now()),
        })
        .to_string(),
    )
}
