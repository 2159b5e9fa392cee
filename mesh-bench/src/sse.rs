//! SSE: one `message/stream` request to the `writer` agent (a separate `mesh agent writer`
//! process) asking for many chunks; this process reads the one stream and counts its
//! `data:` events. Time to first event: from sending the request to the first event's
//! arrival. Events per second: events after the first, over the time from the first to the
//! last. Largest gap: the longest wait between two reads that brought events (a 40 ms gap is
//! the gateway's socket holding a small write for the client's delayed ACK: Nagle's algorithm).

use crate::payload;
use mesh_core::sse::SseParser;
use std::time::{Duration, Instant};

/// What the stream measured.
#[derive(Debug, Clone)]
pub struct SseResult {
    pub events: u64,
    /// The chunks asked of the writer (the stream carries them plus the task and its
    /// status updates, unless a lagging subscriber was resynchronised with a snapshot).
    pub chunks: usize,
    pub first_event: Duration,
    pub per_s: f64,
    /// The longest time between two reads that brought events.
    pub largest_gap: Duration,
    /// True when the stream ended on its own (the task finished) before the time bound.
    pub complete: bool,
    /// The task's state in the last event (`completed`; `failed` when the gateway found
    /// events lost on the way), and the message that came with it.
    pub last_state: Option<(String, String)>,
}

/// Streams `chunks` chunks from the writer agent behind `gateway`, reading for at most
/// `bound`.
pub async fn run(
    http: &reqwest::Client,
    gateway: &str,
    chunks: usize,
    bound: Duration,
) -> Result<SseResult, String> {
    let body = payload::request("message/stream", &format!("bench chunks: {chunks} "), 1);
    let start = Instant::now();
    let deadline = start + bound;
    let mut response = http
        .post(format!("{gateway}/agents/writer"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("SSE request: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("SSE request: HTTP {}", response.status()));
    }
    let mut events = 0u64;
    let mut first = None;
    let mut last = start;
    let mut largest_gap = Duration::ZERO;
    let mut parser = SseParser::default();
    let mut complete = false;
    let mut last_data = None;
    loop {
        let chunk = match tokio::time::timeout_at(deadline.into(), response.chunk()).await {
            Err(_) => break,
            Ok(Err(e)) => return Err(format!("SSE stream: {e}")),
            Ok(Ok(None)) => {
                complete = true;
                break;
            }
            Ok(Ok(Some(chunk))) => chunk,
        };
        let now = Instant::now();
        parser.feed(&chunk);
        let read = parser.take_events();
        if let Some(event) = read.last() {
            last_data = Some(event.data.clone());
        }
        let read = read.len() as u64;
        events += read;
        if read > 0 {
            if first.is_some() {
                largest_gap = largest_gap.max(now.duration_since(last));
            }
            first.get_or_insert(now);
            last = now;
        }
    }
    let first = first.ok_or("the stream sent no event")?;
    let span = last.duration_since(first).as_secs_f64();
    Ok(SseResult {
        events,
        chunks,
        first_event: first.duration_since(start),
        per_s: if span > 0.0 {
            (events - 1) as f64 / span
        } else {
            0.0
        },
        largest_gap,
        complete,
        last_state: last_data.as_deref().and_then(state_of),
    })
}

/// The task state and its message's text in an SSE event's JSON-RPC answer (a task or a
/// status update, 0.3 shapes).
fn state_of(data: &str) -> Option<(String, String)> {
    let answer: serde_json::Value = serde_json::from_str(data).ok()?;
    let status = answer.pointer("/result/status")?;
    let state = status.get("state")?.as_str()?.to_owned();
    let text = status
        .pointer("/message/parts/0/text")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Some((state, text))
}
