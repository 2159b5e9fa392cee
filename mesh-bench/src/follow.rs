//! An event's delay to a subscriber on another gateway: two `mesh gateway` processes on one
//! PostgreSQL database, a paced writer stream started through the first, `tasks/resubscribe`
//! through the second; each event's arrival on both streams, by its id. The second gateway
//! sees an event once the first has committed it and PostgreSQL has told it (`NOTIFY`), and
//! it has read it from the database.

use crate::payload;
use mesh_core::sse::SseParser;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long the writer waits before each chunk: the events come one by one, not in bursts.
pub const PACE_MS: u64 = 10;

/// The delays measured, one per event both streams carried.
#[derive(Debug, Clone)]
pub struct FollowDelay {
    /// Sorted.
    pub delays: Vec<Duration>,
}

impl FollowDelay {
    /// The delay at quantile `q` (0 to 1).
    pub fn at(&self, q: f64) -> Duration {
        let last = self.delays.len().saturating_sub(1);
        self.delays[((last as f64) * q).round() as usize]
    }
}

/// Streams `chunks` chunks through `first`, follows the task through `second`, and compares.
pub async fn run(
    http: &reqwest::Client,
    first: &str,
    second: &str,
    chunks: usize,
    bound: Duration,
) -> Result<FollowDelay, String> {
    let body = payload::request(
        "message/stream",
        &format!("bench chunks: {chunks} pace: {PACE_MS} "),
        9_500_000_000 + chunks as u64,
    );
    let started = Instant::now();
    let deadline = started + bound;
    let mut origin = open(http, first, body, deadline).await?;
    // The task's id from the first event, then the follower.
    let mut parser = SseParser::default();
    let mut at_origin: HashMap<u64, Instant> = HashMap::new();
    let task_id = loop {
        let chunk = next_chunk(&mut origin, deadline)
            .await?
            .ok_or("the stream ended at once")?;
        parser.feed(chunk.as_ref());
        let now = Instant::now();
        let events = parser.take_events();
        for event in &events {
            if let Some(id) = event.id {
                at_origin.insert(id, now);
            }
        }
        if let Some(first) = events.first() {
            break task_id(&first.json())?;
        }
    };
    let resubscribe = serde_json::json!({
        "jsonrpc": "2.0",
        "id": "follow",
        "method": "tasks/resubscribe",
        "params": { "id": task_id },
    })
    .to_string();
    let follower = open(http, second, resubscribe, deadline).await?;
    let following = tokio::spawn(read_all(follower, deadline));
    // The origin's stream to its end, each event's arrival noted.
    loop {
        let Some(chunk) = next_chunk(&mut origin, deadline).await? else {
            break;
        };
        parser.feed(chunk.as_ref());
        let now = Instant::now();
        for event in parser.take_events() {
            if let Some(id) = event.id {
                at_origin.insert(id, now);
            }
        }
    }
    let at_follower = following
        .await
        .map_err(|e| format!("the follower's reader failed: {e}"))??;
    let mut delays: Vec<Duration> = at_follower
        .iter()
        .filter_map(|(id, seen)| {
            let origin = at_origin.get(id)?;
            Some(seen.saturating_duration_since(*origin))
        })
        .collect();
    if delays.len() < chunks / 2 {
        return Err(format!(
            "the follower saw {} of the origin's {} events",
            delays.len(),
            at_origin.len()
        ));
    }
    delays.sort();
    Ok(FollowDelay { delays })
}

async fn open(
    http: &reqwest::Client,
    base: &str,
    body: String,
    deadline: Instant,
) -> Result<reqwest::Response, String> {
    let request = http
        .post(format!("{base}/agents/writer"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body);
    let response = tokio::time::timeout_at(deadline.into(), request.send())
        .await
        .map_err(|_| "no answer in time".to_owned())?
        .map_err(|e| format!("SSE request: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("SSE request: HTTP {}", response.status()));
    }
    Ok(response)
}

async fn next_chunk(
    response: &mut reqwest::Response,
    deadline: Instant,
) -> Result<Option<impl AsRef<[u8]>>, String> {
    tokio::time::timeout_at(deadline.into(), response.chunk())
        .await
        .map_err(|_| "the stream did not end in time".to_owned())?
        .map_err(|e| format!("SSE stream: {e}"))
}

/// Each event id of `response`'s stream and when it arrived, to the stream's end; not the
/// first event (the task as it stood when the subscription began, not an event as it came).
async fn read_all(
    mut response: reqwest::Response,
    deadline: Instant,
) -> Result<HashMap<u64, Instant>, String> {
    let mut parser = SseParser::default();
    let mut seen = HashMap::new();
    let mut opening = true;
    while let Some(chunk) = next_chunk(&mut response, deadline).await? {
        parser.feed(chunk.as_ref());
        let now = Instant::now();
        for event in parser.take_events() {
            if std::mem::replace(&mut opening, false) {
                continue;
            }
            if let Some(id) = event.id {
                seen.entry(id).or_insert(now);
            }
        }
    }
    Ok(seen)
}

/// The task's id in a stream's first event (the task, or an update of it).
fn task_id(event: &Value) -> Result<String, String> {
    let result = &event["result"];
    let id = if result["kind"] == "task" {
        &result["id"]
    } else {
        &result["taskId"]
    };
    id.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no task id in the first event: {event}"))
}
