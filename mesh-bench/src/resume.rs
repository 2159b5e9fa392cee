//! Resuming a stream: one `message/stream` request to the `writer` agent asking for a number
//! of chunks, read to its end (every event's SSE `id` noted, and the task's id from the first
//! event), then `tasks/resubscribe` for that task with `Last-Event-ID` set to the first
//! event's id: the events the client would have missed had it dropped right after the first.
//! Timed from sending the resubscription to the arrival of its last event, [`ROUNDS`] times
//! one after the other (the median is the figure); in every round, every id the first stream
//! carried after the first one must come back once and in order, else the figure is refused
//! with what differed.

use crate::payload;
use mesh_core::sse::{SseEvent, SseParser};
use serde_json::Value;
use std::time::{Duration, Instant};

/// How many times the same events are replayed.
pub const ROUNDS: usize = 5;

/// What the resubscriptions replayed.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The `Last-Event-ID` sent.
    pub after: u64,
    /// The events each round replayed with an id (each one checked against the first
    /// stream's).
    pub events: u64,
    /// Events replayed without an id, in the last round.
    pub without_id: u64,
    /// From sending a resubscription to its last event, each round's, smallest first.
    pub elapsed: Vec<Duration>,
    /// From sending a resubscription to its first event, the median round's.
    pub first_event: Duration,
}

impl Replay {
    /// The median round's time to the last event.
    pub fn median(&self) -> Duration {
        self.elapsed
            .get(self.elapsed.len() / 2)
            .copied()
            .unwrap_or_default()
    }
}

/// Streams `chunks` chunks from the writer behind `gateway`, then resubscribes from the first
/// event's id, each read for at most `bound`.
pub async fn run(
    http: &reqwest::Client,
    gateway: &str,
    chunks: usize,
    bound: Duration,
) -> Result<Replay, String> {
    let url = format!("{gateway}/agents/writer");
    // A number of its own, away from the wrk runs' messageIds.
    let body = payload::request(
        "message/stream",
        &format!("bench chunks: {chunks} "),
        9_000_000_000 + chunks as u64,
    );
    let request = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body);
    let (stream, _) = read_stream(request, bound).await?;
    let first = stream.first().ok_or("the stream sent no event")?;
    let after = first
        .id
        .ok_or("the stream's first event carries no id (is the store logging events?)")?;
    let task_id = task_id(&first.data)?;
    let expected: Vec<u64> = stream.iter().filter_map(|e| e.id).skip(1).collect();
    if expected.len() < chunks {
        return Err(format!(
            "the stream carried {} ids after the first for {chunks} chunks",
            expected.len()
        ));
    }

    let mut rounds = Vec::with_capacity(ROUNDS);
    let mut without_id = 0;
    for round in 0..ROUNDS {
        let resubscribe = serde_json::json!({
            "jsonrpc": "2.0",
            "id": format!("resubscribe-{round}"),
            "method": "tasks/resubscribe",
            "params": { "id": task_id },
        });
        let request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("last-event-id", after.to_string())
            .body(resubscribe.to_string());
        let (replayed, timing) = read_stream(request, bound).await?;
        let ids: Vec<u64> = replayed.iter().filter_map(|e| e.id).collect();
        check_ids(&expected, &ids)?;
        without_id = replayed.iter().filter(|e| e.id.is_none()).count() as u64;
        rounds.push(timing.ok_or("the resubscription replayed no event")?);
    }
    rounds.sort_by_key(|t| t.last);
    let median = rounds[rounds.len() / 2];
    Ok(Replay {
        after,
        events: expected.len() as u64,
        without_id,
        elapsed: rounds.iter().map(|t| t.last).collect(),
        first_event: median.first,
    })
}

/// When a stream's first and last events came, from its request.
#[derive(Debug, Clone, Copy)]
struct Timing {
    first: Duration,
    last: Duration,
}

/// Sends `request` and reads its event stream to its end, for at most `bound`.
async fn read_stream(
    request: reqwest::RequestBuilder,
    bound: Duration,
) -> Result<(Vec<SseEvent>, Option<Timing>), String> {
    let start = Instant::now();
    let deadline = start + bound;
    let mut response = tokio::time::timeout_at(deadline.into(), request.send())
        .await
        .map_err(|_| format!("no answer within {} s", bound.as_secs()))?
        .map_err(|e| format!("SSE request: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("SSE request: HTTP {}", response.status()));
    }
    let mut parser = SseParser::default();
    let mut timing: Option<Timing> = None;
    loop {
        let chunk = match tokio::time::timeout_at(deadline.into(), response.chunk()).await {
            Err(_) => {
                return Err(format!(
                    "the stream did not end within {} s ({} events)",
                    bound.as_secs(),
                    parser.events().len()
                ));
            }
            Ok(Err(e)) => return Err(format!("SSE stream: {e}")),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        let before = parser.events().len();
        parser.feed(&chunk);
        if parser.events().len() > before {
            let now = start.elapsed();
            let t = timing.get_or_insert(Timing {
                first: now,
                last: now,
            });
            t.last = now;
        }
    }
    parser.finish();
    Ok((parser.into_events(), timing))
}

/// The task's id in a stream's first event: a JSON-RPC response whose result is the task
/// (`id`) or an update of it (`taskId`).
fn task_id(data: &str) -> Result<String, String> {
    let v: Value =
        serde_json::from_str(data).map_err(|e| format!("the first event is not JSON: {e}"))?;
    let result = &v["result"];
    let id = if result["kind"] == "task" {
        &result["id"]
    } else {
        &result["taskId"]
    };
    id.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no task id in the first event: {data:.200}"))
}

/// Whether `got` is `expected`: each id once, in order.
fn check_ids(expected: &[u64], got: &[u64]) -> Result<(), String> {
    if expected == got {
        return Ok(());
    }
    let at = expected
        .iter()
        .zip(got)
        .position(|(e, g)| e != g)
        .unwrap_or(expected.len().min(got.len()));
    Err(format!(
        "the resubscription replayed {} ids where {} were missed; the first difference at \
         position {at}: expected {:?}, got {:?}",
        got.len(),
        expected.len(),
        expected.get(at),
        got.get(at)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_id_is_read_from_a_task_or_an_update() {
        assert_eq!(
            task_id(r#"{"jsonrpc":"2.0","id":"1","result":{"kind":"task","id":"t1"}}"#),
            Ok("t1".into())
        );
        assert_eq!(
            task_id(r#"{"result":{"kind":"status-update","taskId":"t2"}}"#),
            Ok("t2".into())
        );
        assert!(task_id(r#"{"error":{"code":-1}}"#).is_err());
        assert!(task_id("nope").is_err());
    }

    #[test]
    fn replayed_ids_must_match_once_and_in_order() {
        assert!(check_ids(&[2, 3, 4], &[2, 3, 4]).is_ok());
        assert!(check_ids(&[2, 3, 4], &[2, 4, 3]).is_err());
        assert!(check_ids(&[2, 3, 4], &[2, 3, 3, 4]).is_err());
        assert!(check_ids(&[2, 3, 4], &[2, 3]).is_err());
    }
}
