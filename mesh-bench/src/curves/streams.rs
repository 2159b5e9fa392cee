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
        ],
    );
    let mesh = match setup.mesh().await {
        Ok(mesh) => mesh,
        Err(e) => return curve.failed(e),
    };
    let ticker = async {
        let ticker = setup
            .fleet(&mesh, Kind::Ticker, "ticker", 1, 20_000)
            .await?;
        super::wait_all_listed(
            &setup.http,
            &mesh.base,
            "ticker",
            1,
            Duration::from_secs(30),
        )
        .await?;
        Ok::<_, String>(ticker)
    };
    let _ticker = match ticker.await {
        Ok(ticker) => ticker,
        Err(e) => return curve.failed(e),
    };
    let mut one_task = Vec::new();
    let mut spread = Vec::new();
    for count in scale.points(&COUNTS) {
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
    for count in scale.points(&COUNTS) {
        let mut row = cells(&one_task, count);
        row.extend(cells(&spread, count));
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
