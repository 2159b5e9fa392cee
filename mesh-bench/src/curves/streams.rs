//! Curve 3, open streams: one gateway and one `ticker` agent (a chunk every so often, each
//! carrying the time it was sent). For each count, two runs:
//!
//! - **one task**: a ticker task (a chunk every 100 ms) started by one `message/stream`, and
//!   `count - 1` more SSE subscribers to it (`tasks/resubscribe`);
//! - **spread**: `count` SSE streams (`message/stream`), each its own ticker task (a chunk a
//!   second).
//!
//! Once every subscriber has had its first chunk: the gateway's RSS growth per stream; then
//! for three seconds, each chunk's delivery latency (from the agent's clock to the
//! subscriber's, one machine) and the chunks delivered per second; then the tasks are
//! canceled.
//!
//! Then what an idle stream costs by itself: `count` subscribers (`tasks/resubscribe`) to one
//! task of a `waiter` agent (working, silent until canceled), once over HTTP/1.1 (a
//! connection each) and once over HTTP/2 (h2c by prior knowledge, 200 streams a connection:
//! the gateway's limit), each point on a gateway of its own (started for it, so that the
//! allocator does not hand it what the earlier points freed): the gateway's RSS growth per
//! stream once each has had the task's snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_core::sse::SseParser;
use mesh_core::sync::MutexExt;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::FIRST_CHARTED_PER_ITEM;
use super::chart::Panel;
use super::{Curve, Mesh, Row, Scale, Setup, bytes, call, ms, rss, send_body};
use crate::fleet::{Kind, unix_micros};
use crate::report::dur;
use crate::stats::Latencies;

const COUNTS: [u64; 5] = [1, 10, 100, 1000, 10_000];

/// How long the latencies are taken once every stream is open.
const WINDOW: Duration = Duration::from_secs(3);

/// Streams being opened at once.
const OPENING_AT_ONCE: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    OneTask,
    Spread,
}

struct Point {
    count: u64,
    per_stream: f64,
    p50: Duration,
    p99: Duration,
    per_second: f64,
}

pub async fn run(setup: &Setup, scale: Scale) -> Curve {
    let mut curve = Curve::new(
        "Open streams",
        "streams",
        "SSE streams",
        &[
            "one task: gateway RSS per stream",
            "one task: delivery p50 / p99",
            "one task: chunks/s",
            "spread: gateway RSS per stream",
            "spread: delivery p50 / p99",
            "spread: chunks/s",
            "idle, HTTP/1.1: gateway RSS per stream",
            "idle, HTTP/2: gateway RSS per stream",
        ],
    );
    let mesh = match setup.mesh().await {
        Ok(mesh) => mesh,
        Err(e) => return curve.failed(e),
    };
    let agents = async {
        let ticker = setup
            .listed_agent(&mesh, Kind::Ticker, "ticker", 20_000)
            .await?;
        let waiter = setup
            .listed_agent(&mesh, Kind::Waiter, "waiter", 1_000)
            .await?;
        Ok::<_, String>((ticker, waiter))
    };
    let _agents = match agents.await {
        Ok(agents) => agents,
        Err(e) => return curve.failed(e),
    };
    let mut one_task = Vec::new();
    let mut spread = Vec::new();
    let mut idle = Vec::new();
    for count in scale.points(&COUNTS) {
        // The idle points first: the connections they open close with their clients, where
        // the shared client keeps the other points' open (20,000 at 10,000 would pass the
        // open files allowed).
        let mut costs = [None, None];
        for (cost, http2) in costs.iter_mut().zip([false, true]) {
            match idle_point(setup, &mesh, http2, count).await {
                Ok(per_stream) => *cost = Some(per_stream),
                Err(e) => curve.notes.push(format!(
                    "{count} idle streams (HTTP/{}): not measured: {e}",
                    if http2 { "2" } else { "1.1" }
                )),
            }
        }
        idle.push((count, costs));
        for (mode, points) in [(Mode::OneTask, &mut one_task), (Mode::Spread, &mut spread)] {
            match point(setup, &mesh, mode, count).await {
                Ok(point) => points.push(point),
                Err(e) => curve
                    .notes
                    .push(format!("{count} streams ({mode:?}): not measured: {e}")),
            }
        }
    }
    let cells = |points: &[Point], count: u64| match points.iter().find(|p| p.count == count) {
        Some(p) => vec![
            bytes(p.per_stream),
            format!("{} / {}", dur(p.p50), dur(p.p99)),
            format!("{:.0}", p.per_second),
        ],
        None => vec!["-".into(), "-".into(), "-".into()],
    };
    for &(count, costs) in &idle {
        let mut row = cells(&one_task, count);
        row.extend(cells(&spread, count));
        row.extend(costs.map(|cost| cost.map_or("-".into(), bytes)));
        curve.rows.push(Row {
            x: count,
            cells: row,
        });
    }
    curve.panels = vec![
        Panel::new(
            "KiB of gateway RSS per stream",
            vec![
                super::line("one task", &one_task, FIRST_CHARTED_PER_ITEM, |p| {
                    (p.count, p.per_stream / 1024.0)
                }),
                super::line("spread", &spread, FIRST_CHARTED_PER_ITEM, |p| {
                    (p.count, p.per_stream / 1024.0)
                }),
                idle_line("idle, HTTP/1.1", &idle, 0),
                idle_line("idle, HTTP/2", &idle, 1),
            ],
        ),
        Panel::new(
            "delivery, ms",
            vec![
                super::line("one task p50", &one_task, 1, |p| (p.count, ms(p.p50))),
                super::line("one task p99", &one_task, 1, |p| (p.count, ms(p.p99))),
                super::line("spread p50", &spread, 1, |p| (p.count, ms(p.p50))),
                super::line("spread p99", &spread, 1, |p| (p.count, ms(p.p99))),
            ],
        ),
    ];
    curve.notes.push(format!(
        "Open files allowed to the bench and the gateway: {} (scripts/bench raises the soft \
         limit to the hard one; a gateway holding N streams needs N plus about 100). A spread \
         stream's RSS includes its task's.",
        open_files_limit().map_or("unknown".into(), |n| n.to_string())
    ));
    curve
}

/// The chart line of one idle series (`which`: 0 for HTTP/1.1, 1 for HTTP/2).
fn idle_line(name: &str, idle: &[(u64, [Option<f64>; 2])], which: usize) -> super::chart::Line {
    let points: Vec<(u64, f64)> = idle
        .iter()
        .filter_map(|(count, costs)| Some((*count, costs[which]?)))
        .collect();
    // Each idle point has a gateway of its own, whose first streams are the allocator's
    // noise up to 100 (an arena grown for 10 streams reads as 100 KiB each).
    super::line(name, &points, FIRST_CHARTED_IDLE, |&(count, cost)| {
        (count, cost / 1024.0)
    })
}

/// The smallest count an idle series is charted at.
const FIRST_CHARTED_IDLE: u64 = 100;

/// Streams a connection carries in the HTTP/2 series: the gateway's limit.
const HTTP2_STREAMS_A_CONNECTION: u64 = 200;

/// `count` idle SSE streams on one silent `waiter` task, over HTTP/1.1 or HTTP/2: the
/// gateway's RSS growth per stream once each has had the task's snapshot.
async fn idle_point(setup: &Setup, mesh: &Mesh, http2: bool, count: u64) -> Result<f64, String> {
    let http = &setup.http;
    let (gateway, base) = setup.gateway(&mesh.broker, &mesh.namespace).await?;
    super::wait_all_listed(http, &base, "waiter", 1, Duration::from_secs(30)).await?;
    let body = send_body(
        0,
        json!([{"kind": "text", "text": "wait"}]),
        Some(json!({"blocking": false})),
    );
    let answer = call(http, &base, "waiter", &body).await?;
    let id = answer["result"]["id"]
        .as_str()
        .ok_or_else(|| format!("no task: {answer}"))?
        .to_owned();
    // A client per connection's worth of streams over HTTP/2 (a client holds one connection
    // to a host, and past its streams a request waits for one to end); HTTP/1.1 opens a
    // connection per stream on the shared client.
    let client = || {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(120));
        match http2 {
            true => client.http2_prior_knowledge(),
            // Nothing kept once the streams end: their connections close with them.
            false => client.pool_max_idle_per_host(0),
        }
        .build()
        .map_err(|e| e.to_string())
    };
    let clients = match http2 {
        true => (0..count.div_ceil(HTTP2_STREAMS_A_CONNECTION))
            .map(|_| client())
            .collect::<Result<Vec<_>, _>>()?,
        false => vec![client()?],
    };
    let before = rss(&gateway);
    let attached = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(tokio::sync::Semaphore::new(OPENING_AT_ONCE));
    let mut subscribers = JoinSet::new();
    for i in 0..count {
        let client = &clients[(i / HTTP2_STREAMS_A_CONNECTION) as usize % clients.len()];
        let request = client
            .post(format!("{}/agents/waiter", base))
            .header("accept", "text/event-stream")
            .json(
                &json!({"jsonrpc": "2.0", "id": i, "method": "tasks/resubscribe",
                "params": {"id": id}}),
            );
        subscribers.spawn(idle_subscriber(request, attached.clone(), opened.clone()));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let outcome = loop {
        if attached.load(Ordering::Relaxed) >= count as usize {
            break Ok((rss(&gateway) as f64 - before as f64) * 1024.0 / count as f64);
        }
        if Instant::now() > deadline {
            break Err(format!(
                "{} of {count} streams had the task's snapshot after 120 s",
                attached.load(Ordering::Relaxed)
            ));
        }
        if subscribers
            .try_join_next()
            .is_some_and(|r| r.is_ok_and(|r| r.is_err()))
        {
            break Err("a stream failed while they were opened".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The task's end ends every stream.
    let cancel = json!({"jsonrpc": "2.0", "id": 0, "method": "tasks/cancel",
        "params": {"id": id}});
    let canceled = call(http, &base, "waiter", &cancel).await;
    if let Err(e) = canceled {
        subscribers.abort_all();
        return Err(format!("the task was not canceled: {e}"));
    }
    if tokio::time::timeout(Duration::from_secs(60), async {
        while subscribers.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        subscribers.abort_all();
        return Err("streams still open 60 s after their task was canceled".into());
    }
    outcome
}

/// An idle subscriber: counted once its first event (the task's snapshot) arrived, then
/// reading until the stream ends.
async fn idle_subscriber(
    request: reqwest::RequestBuilder,
    attached: Arc<AtomicUsize>,
    opening: Arc<tokio::sync::Semaphore>,
) -> Result<(), String> {
    let permit = opening.acquire_owned().await.map_err(|e| e.to_string())?;
    let answer = request.send().await.map_err(|e| e.to_string())?;
    if !answer.status().is_success() {
        return Err(format!("HTTP {}", answer.status()));
    }
    let mut permit = Some(permit);
    let mut body = answer.bytes_stream();
    let mut parser = SseParser::default();
    while let Some(chunk) = body.next().await {
        parser.feed(&chunk.map_err(|e| e.to_string())?);
        if !parser.take_events().is_empty() && permit.take().is_some() {
            attached.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// The soft limit of open files of this process (`/proc/self/limits`).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// What the subscribers share.
#[derive(Default)]
struct Tally {
    /// Subscribers that have had their first chunk.
    attached: AtomicUsize,
    /// Whether the window is open.
    measuring: AtomicBool,
    /// Chunks delivered in the window.
    delivered: AtomicU64,
    /// The streams' tasks, as their first chunks said.
    task_ids: std::sync::Mutex<Vec<String>>,
}

async fn point(setup: &Setup, mesh: &Mesh, mode: Mode, count: u64) -> Result<Point, String> {
    let http = &setup.http;
    let before = rss(&mesh.gateway);
    let tally = Arc::new(Tally::default());
    let opened = Arc::new(tokio::sync::Semaphore::new(OPENING_AT_ONCE));
    let mut subscribers = JoinSet::new();
    let stream = |i: u64, text: String| {
        let mut body = send_body(i, json!([{"kind": "text", "text": text}]), None);
        body["method"] = json!("message/stream");
        body
    };
    let open = |body: Value| {
        http.post(format!("{}/agents/ticker", mesh.base))
            .header("accept", "text/event-stream")
            .json(&body)
    };
    // The first stream starts the one task (a `message/send` task streams nothing until it
    // ends: docs/protocol.md, 3.1); the others subscribe to it once its id is known.
    let one_task = match mode {
        Mode::OneTask => {
            let body = stream(0, "ticks: 100000 every: 100".into());
            subscribers.spawn(subscribe(open(body), tally.clone(), opened.clone()));
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(id) = tally.task_ids.locked().first() {
                    break Some(id.clone());
                }
                if Instant::now() > deadline {
                    subscribers.abort_all();
                    return Err("the ticker's task did not start within 30 s".into());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Mode::Spread => None,
    };
    // Long enough to outlast the opening of every stream and the window.
    let ticks = 10 + count / 200;
    for i in subscribers.len() as u64..count {
        let body = match &one_task {
            Some(id) => json!({"jsonrpc": "2.0", "id": i, "method": "tasks/resubscribe",
                "params": {"id": id}}),
            None => stream(i, format!("ticks: {ticks} every: 1000")),
        };
        subscribers.spawn(subscribe(open(body), tally.clone(), opened.clone()));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while tally.attached.load(Ordering::Relaxed) < count as usize {
        if Instant::now() > deadline {
            subscribers.abort_all();
            return Err(format!(
                "{} of {count} streams had a chunk after 120 s",
                tally.attached.load(Ordering::Relaxed)
            ));
        }
        if subscribers
            .try_join_next()
            .is_some_and(|r| r.is_ok_and(|r| r.is_err()))
        {
            subscribers.abort_all();
            return Err("a stream failed while they were opened".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let per_stream = (rss(&mesh.gateway) as f64 - before as f64) * 1024.0 / count as f64;
    tally.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(WINDOW).await;
    tally.measuring.store(false, Ordering::Relaxed);
    let delivered = tally.delivered.load(Ordering::Relaxed);
    // Cancel the tasks (their ids came with the first chunks); the streams end with them.
    let ids: Vec<String> = match one_task {
        Some(id) => vec![id],
        None => std::mem::take(&mut *tally.task_ids.locked()),
    };
    futures_util::stream::iter(ids.into_iter().enumerate())
        .map(|(i, id)| async move {
            let body = json!({"jsonrpc": "2.0", "id": i, "method": "tasks/cancel",
                "params": {"id": id}});
            let _ = call(http, &mesh.base, "ticker", &body).await;
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    let mut latencies = Latencies::default();
    let mut failures = 0;
    let ending = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ended) = subscribers.join_next().await {
            match ended {
                Ok(Ok(seen)) => latencies.merge(seen),
                _ => failures += 1,
            }
        }
    })
    .await;
    if ending.is_err() {
        subscribers.abort_all();
        return Err("streams still open 60 s after their tasks were canceled".into());
    }
    if failures > 0 {
        return Err(format!("{failures} of {count} streams failed"));
    }
    Ok(Point {
        count,
        per_stream,
        p50: latencies.percentile(50.0),
        p99: latencies.percentile(99.0),
        per_second: delivered as f64 / WINDOW.as_secs_f64(),
    })
}

async fn subscribe(
    request: reqwest::RequestBuilder,
    tally: Arc<Tally>,
    opening: Arc<tokio::sync::Semaphore>,
) -> Result<Latencies, String> {
    let permit = opening.acquire_owned().await.map_err(|e| e.to_string())?;
    let answer = request.send().await.map_err(|e| e.to_string())?;
    if !answer.status().is_success() {
        return Err(format!("HTTP {}", answer.status()));
    }
    let mut permit = Some(permit);
    let mut body = answer.bytes_stream();
    let mut parser = SseParser::default();
    let mut seen = Latencies::default();
    while let Some(chunk) = body.next().await {
        parser.feed(&chunk.map_err(|e| e.to_string())?);
        for event in parser.take_events() {
            let Some(sent) = sent_at(&event.data) else {
                continue;
            };
            if permit.take().is_some() {
                tally.attached.fetch_add(1, Ordering::Relaxed);
                if let Some(id) = task_id(&event.data) {
                    let mut ids = tally.task_ids.locked();
                    if ids.last() != Some(&id) {
                        ids.push(id);
                    }
                }
            }
            if tally.measuring.load(Ordering::Relaxed) {
                let now = unix_micros();
                seen.push(Duration::from_micros(now.saturating_sub(sent)));
                tally.delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(seen)
}

/// The send time a ticker's chunk carries, from an SSE event's data.
fn sent_at(data: &str) -> Option<u64> {
    if !data.contains("artifact-update") {
        return None;
    }
    let event: Value = serde_json::from_str(data).ok()?;
    event["result"]["artifact"]["parts"][0]["text"]
        .as_str()?
        .parse()
        .ok()
}

/// The task id of an event.
fn task_id(data: &str) -> Option<String> {
    let event: Value = serde_json::from_str(data).ok()?;
    event["result"]["taskId"].as_str().map(str::to_owned)
}
