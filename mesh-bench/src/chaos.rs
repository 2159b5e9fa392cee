//! The chaos run's client: a steady load of `message/send` requests (to `echo`) and of
//! streams (`message/stream` to `writer`, resumed with `tasks/resubscribe` and
//! `Last-Event-ID` whenever the connection drops) through one URL (a load balancer in front
//! of gateway replicas), while commands given with their times kill parts of the mesh. Then
//! every task a client saw is looked up again (`tasks/get`, wherever the balancer sends it),
//! and the counts are printed: requests sent, answered, failed by JSON-RPC error code or HTTP
//! status, hung (no answer within the client's deadline), tasks lost, stream chunks lost or
//! duplicated, and, per kill, the time until requests succeeded again.
//!
//! The run is a verdict, not a benchmark: [`Report::passed`] holds when nothing hung,
//! nothing was lost and no chunk came twice.

use mesh_core::sse::SseParser;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where requests go (the load balancer).
    pub url: String,
    /// How long the load lasts.
    pub duration: Duration,
    /// `message/send` requests started per second.
    pub rate: u32,
    /// Streams kept open at once.
    pub streams: usize,
    /// Chunks per stream, and the pause before each in milliseconds.
    pub chunks: usize,
    pub pace_ms: u64,
    /// How long a client waits for an answer before it counts the request as hung.
    pub deadline: Duration,
    /// Shell commands run at offsets from the start: the kills.
    pub kills: Vec<(Duration, String)>,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Answered,
    /// A JSON-RPC error, by code.
    Rpc(i64),
    /// An HTTP status other than 200 (the balancer's 502/503 while a replica is gone).
    Http(u16),
    /// The connection failed or closed before an answer.
    Transport,
    /// No answer within the deadline.
    Hung,
}

/// How many different error messages (and replicas) the report tells apart; the others
/// are counted together (an agent or a proxy may put ids in its messages).
const MAX_MESSAGES: usize = 64;

/// What the messages past [`MAX_MESSAGES`] are counted as.
const OTHER_MESSAGES: &str = "(other messages)";

/// One request: how and when it ended.
#[derive(Debug, Clone)]
struct Sent {
    /// When it was answered or failed (from the start of the run).
    at: Duration,
    outcome: Outcome,
}

/// What the run counted.
#[derive(Debug, Default)]
pub struct Report {
    pub sent: usize,
    pub outcomes: BTreeMap<Outcome, usize>,
    /// How often each JSON-RPC error (code and message) came.
    pub messages: BTreeMap<(i64, String), usize>,
    /// JSON-RPC errors by the replica that answered, when the balancer says.
    pub errors_by_replica: BTreeMap<String, usize>,
    /// Why each hung stream is counted so: its task and the last answer to resubscribing.
    pub hung_streams: Vec<String>,
    /// Tasks a client saw (a send's task, a stream's task).
    pub tasks_seen: usize,
    /// Of those, the ones no replica knows afterwards.
    pub tasks_lost: Vec<String>,
    pub streams: usize,
    pub streams_completed: usize,
    /// Streams whose task ended otherwise (failed or canceled: its agent instance died).
    pub streams_ended_otherwise: usize,
    /// Streams never finished within the deadline, even after resubscribing.
    pub streams_hung: usize,
    pub resumes: usize,
    pub chunks_lost: usize,
    pub chunks_duplicated: usize,
    /// Per kill: its command, and how long after it the last request or stream failed
    /// (zero: none failed).
    pub recoveries: Vec<(String, Duration)>,
    /// Failed sends and streams by the second of the run they failed in.
    pub failures_by_second: BTreeMap<u64, usize>,
}

impl Report {
    /// Nothing hung, nothing lost, nothing duplicated.
    pub fn passed(&self) -> bool {
        self.outcomes.get(&Outcome::Hung).copied().unwrap_or(0) == 0
            && self.tasks_lost.is_empty()
            && self.streams_hung == 0
            && self.chunks_lost == 0
            && self.chunks_duplicated == 0
    }

    /// The report as lines of text.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!("requests sent: {}", self.sent)];
        for (outcome, n) in &self.outcomes {
            let what = match outcome {
                Outcome::Answered => "answered".to_string(),
                Outcome::Rpc(code) => format!("failed with JSON-RPC error {code}"),
                Outcome::Http(status) => format!("failed with HTTP {status}"),
                Outcome::Transport => "failed: connection closed".to_string(),
                Outcome::Hung => "hung (no answer within the deadline)".to_string(),
            };
            lines.push(format!("  {what}: {n}"));
        }
        let mut messages: Vec<_> = self.messages.iter().collect();
        messages.sort_by(|a, b| b.1.cmp(a.1));
        for ((code, message), n) in messages.iter().take(6) {
            lines.push(format!("    {n} × {code}: {message}"));
        }
        if !self.errors_by_replica.is_empty() {
            let replicas: Vec<String> = self
                .errors_by_replica
                .iter()
                .map(|(replica, n)| format!("{replica}: {n}"))
                .collect();
            lines.push(format!(
                "  JSON-RPC errors by replica: {}",
                replicas.join(", ")
            ));
        }
        if !self.outcomes.contains_key(&Outcome::Hung) {
            lines.push("  hung (no answer within the deadline): 0".into());
        }
        lines.push(format!(
            "tasks seen by clients: {}, lost (no replica knows them afterwards): {}",
            self.tasks_seen,
            self.tasks_lost.len()
        ));
        lines.push(format!(
            "streams: {} ({} completed, {} ended failed or canceled, {} hung), resumed {} times",
            self.streams,
            self.streams_completed,
            self.streams_ended_otherwise,
            self.streams_hung,
            self.resumes
        ));
        lines.push(format!(
            "stream chunks lost: {}, duplicated: {}",
            self.chunks_lost, self.chunks_duplicated
        ));
        for why in &self.hung_streams {
            lines.push(format!("  hung stream: {why}"));
        }
        if !self.failures_by_second.is_empty() {
            let seconds: Vec<String> = self
                .failures_by_second
                .iter()
                .map(|(second, n)| format!("{second}:{n}"))
                .collect();
            lines.push(format!(
                "failed sends and streams by the second they failed in (second:count): {}",
                seconds.join(" ")
            ));
        }
        for (command, took) in &self.recoveries {
            lines.push(format!(
                "after `{command}`: requests and streams succeed again {:.1} s after the kill",
                took.as_secs_f64()
            ));
        }
        lines
    }
}

/// Everything the workers record.
#[derive(Default)]
struct Tally {
    sent: Vec<Sent>,
    messages: BTreeMap<(i64, String), usize>,
    /// JSON-RPC errors by the replica that answered (the balancer's `X-Mesh-Replica`).
    by_replica: BTreeMap<String, usize>,
    /// (agent, task id) of every task a client saw.
    tasks: Vec<(&'static str, String)>,
    streams: Vec<StreamEnd>,
}

/// How one stream ended.
struct StreamEnd {
    /// When it ended (from the start of the run).
    at: Duration,
    /// Its task and the last thing a resubscription got, when it hung.
    why: Option<String>,
    completed: bool,
    hung: bool,
    resumes: usize,
    lost: usize,
    duplicated: usize,
}

/// Runs the plan and returns the counts.
pub async fn run(plan: &Plan) -> Report {
    let http = reqwest::Client::builder()
        .timeout(plan.deadline)
        .pool_max_idle_per_host(64)
        .build()
        .expect("an HTTP client");
    let tally = Arc::new(Mutex::new(Tally::default()));
    let start = Instant::now();

    let mut kill_times = Vec::new();
    let kills = {
        let plan = plan.clone();
        tokio::spawn(async move {
            let mut done = Vec::new();
            for (at, command) in &plan.kills {
                tokio::time::sleep_until((start + *at).into()).await;
                // The part dies while the command runs: what fails from now on is its doing.
                let issued = start.elapsed();
                let status = tokio::process::Command::new("sh")
                    .args(["-c", command])
                    .status()
                    .await;
                eprintln!(
                    "mesh-chaos: {:.1} s: `{command}`: {status:?}",
                    start.elapsed().as_secs_f64()
                );
                done.push((issued, command.clone()));
            }
            done
        })
    };

    let mut workers = tokio::task::JoinSet::new();
    for s in 0..plan.streams {
        let (http, plan, tally) = (http.clone(), plan.clone(), tally.clone());
        workers.spawn(async move {
            let mut n = 0;
            while start.elapsed() < plan.duration {
                n += 1;
                let mut end = stream(&http, &plan, &format!("chaos {s}-{n}"), &tally, start).await;
                // A stream that fails does so when it ends, maybe several kills after it began.
                end.at = start.elapsed();
                let failed = !end.completed;
                tally.lock().unwrap().streams.push(end);
                if failed {
                    // Not a tight loop of streams that fail at once (while an agent is away).
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        });
    }
    let mut sends = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / plan.rate.max(1));
    let mut i = 0u64;
    while start.elapsed() < plan.duration {
        tick.tick().await;
        i += 1;
        let (http, url, tally) = (http.clone(), plan.url.clone(), tally.clone());
        sends.spawn(async move {
            let outcome = send(&http, &url, i, &tally).await;
            // When it was answered or failed: a send in flight at a kill fails after it.
            let at = start.elapsed();
            tally.lock().unwrap().sent.push(Sent { at, outcome });
        });
    }
    while sends.join_next().await.is_some() {}
    while workers.join_next().await.is_some() {}
    kill_times.extend(kills.await.unwrap_or_default());

    let tally = std::mem::take(&mut *tally.lock().unwrap());
    let mut report = Report {
        sent: tally.sent.len(),
        tasks_seen: tally.tasks.len(),
        streams: tally.streams.len(),
        ..Report::default()
    };
    for sent in &tally.sent {
        *report.outcomes.entry(sent.outcome.clone()).or_default() += 1;
        if sent.outcome != Outcome::Answered {
            *report
                .failures_by_second
                .entry(sent.at.as_secs())
                .or_default() += 1;
        }
    }
    report.messages = tally.messages.clone();
    report.errors_by_replica = tally.by_replica.clone();
    for end in &tally.streams {
        if !end.completed {
            *report
                .failures_by_second
                .entry(end.at.as_secs())
                .or_default() += 1;
        }
        report.hung_streams.extend(end.why.clone());
        report.streams_completed += usize::from(end.completed);
        report.streams_hung += usize::from(end.hung);
        report.streams_ended_otherwise += usize::from(!end.completed && !end.hung);
        report.resumes += end.resumes;
        report.chunks_lost += end.lost;
        report.chunks_duplicated += end.duplicated;
    }
    for (i, (at, command)) in kill_times.iter().enumerate() {
        let until = kill_times
            .get(i + 1)
            .map_or(Duration::MAX, |(next, _)| *next);
        // The last send that failed, and the last stream that did not complete.
        let failed_sends = tally
            .sent
            .iter()
            .filter(|s| s.outcome != Outcome::Answered)
            .map(|s| s.at);
        let failed_streams = tally.streams.iter().filter(|s| !s.completed).map(|s| s.at);
        let last_failure = failed_sends
            .chain(failed_streams)
            .filter(|t| *t >= *at && *t < until)
            .max();
        report.recoveries.push((
            command.clone(),
            last_failure.map_or(Duration::ZERO, |t| t - *at),
        ));
    }
    for (agent, id) in &tally.tasks {
        if !known(&http, &plan.url, agent, id).await {
            report.tasks_lost.push(id.clone());
        }
    }
    report
}

/// The JSON-RPC body of a request with a message.
fn message_request(method: &str, id: u64, text: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": method,
        "params": {"message": {
            "kind": "message", "role": "user",
            "messageId": uuid::Uuid::new_v4().to_string(),
            "parts": [{"kind": "text", "text": text}]
        }}
    })
}

/// One `message/send` to echo; notes the task it answers with.
async fn send(http: &reqwest::Client, url: &str, i: u64, tally: &Mutex<Tally>) -> Outcome {
    let request = http
        .post(format!("{url}/agents/echo"))
        .json(&message_request("message/send", i, &format!("chaos {i}")));
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() => return Outcome::Hung,
        Err(_) => return Outcome::Transport,
    };
    if response.status() != 200 {
        return Outcome::Http(response.status().as_u16());
    }
    let replica = response
        .headers()
        .get("x-mesh-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?")
        .to_owned();
    let body: Value = match response.json().await {
        Ok(body) => body,
        Err(e) if e.is_timeout() => return Outcome::Hung,
        Err(_) => return Outcome::Transport,
    };
    if let Some(code) = body.pointer("/error/code").and_then(Value::as_i64) {
        let message = body.pointer("/error/message").and_then(Value::as_str);
        let mut tally = tally.lock().unwrap();
        let mut key = (code, message.unwrap_or_default().to_owned());
        if tally.messages.len() >= MAX_MESSAGES && !tally.messages.contains_key(&key) {
            key.1 = OTHER_MESSAGES.to_owned();
        }
        *tally.messages.entry(key).or_default() += 1;
        let replica =
            if tally.by_replica.len() >= MAX_MESSAGES && !tally.by_replica.contains_key(&replica) {
                OTHER_MESSAGES.to_owned()
            } else {
                replica
            };
        *tally.by_replica.entry(replica).or_default() += 1;
        return Outcome::Rpc(code);
    }
    if let Some(task) = body.pointer("/result/id").and_then(Value::as_str)
        && body.pointer("/result/kind") == Some(&json!("task"))
    {
        tally.lock().unwrap().tasks.push(("echo", task.to_owned()));
    }
    Outcome::Answered
}

/// One stream from writer, read to its end, resumed from the last event id whenever the
/// connection drops, until the task ends or the deadline passes.
async fn stream(
    http: &reqwest::Client,
    plan: &Plan,
    topic: &str,
    tally: &Mutex<Tally>,
    start: Instant,
) -> StreamEnd {
    let url = format!("{}/agents/writer", plan.url);
    let text = format!("{topic} chunks: {} pace: {}", plan.chunks, plan.pace_ms);
    let began = Instant::now();
    let mut task: Option<String> = None;
    let mut last_id: Option<u64> = None;
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut resumes = 0;
    let mut state: Option<String> = None;
    let mut last_answer = String::new();
    while began.elapsed() < plan.deadline * 2 {
        let body = match &task {
            None => message_request("message/stream", 1, &text),
            Some(id) => {
                json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/resubscribe", "params": {"id": id}})
            }
        };
        let mut request = http
            .post(&url)
            .header("accept", "text/event-stream")
            .json(&body);
        if let Some(last) = last_id {
            request = request.header("last-event-id", last.to_string());
        }
        let ended = match request.send().await {
            Ok(mut response) if response.status() == 200 => {
                let json = response
                    .headers()
                    .get("content-type")
                    .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
                if json {
                    last_answer = response.text().await.unwrap_or_default();
                    last_answer.truncate(300);
                    false
                } else {
                    read_events(
                        &mut response,
                        &mut task,
                        &mut last_id,
                        &mut seen,
                        &mut state,
                    )
                    .await
                }
            }
            Ok(response) => {
                last_answer = format!("HTTP {}", response.status());
                false
            }
            Err(e) => {
                last_answer = e.to_string();
                false
            }
        };
        if ended {
            break;
        }
        if task.is_none() {
            // The first request never reached a task: start over (counted as a new stream).
            if start.elapsed() >= plan.duration {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        resumes += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(task) = &task {
        tally.lock().unwrap().tasks.push(("writer", task.clone()));
    }
    let completed = state.as_deref() == Some("completed");
    let lost = if completed {
        (0..plan.chunks as u64)
            .filter(|c| !seen.contains_key(c))
            .count()
    } else {
        0
    };
    let hung = task.is_some() && state.is_none();
    StreamEnd {
        at: Duration::ZERO,
        why: hung.then(|| {
            format!(
                "task {} after event {last_id:?}, {} chunks seen, {resumes} resumes; last answer: {last_answer}",
                task.as_deref().unwrap_or("?"),
                seen.len()
            )
        }),
        completed,
        hung,
        resumes,
        lost,
        duplicated: seen.values().filter(|n| **n > 1).count(),
    }
}

/// Reads one SSE response: notes the task, the last event id, the chunks and the final
/// state. True when the stream ended with a final event.
async fn read_events(
    response: &mut reqwest::Response,
    task: &mut Option<String>,
    last_id: &mut Option<u64>,
    seen: &mut BTreeMap<u64, usize>,
    state: &mut Option<String>,
) -> bool {
    let mut parser = SseParser::default();
    loop {
        for event in parser.take_events() {
            if let Some(id) = event.id {
                *last_id = Some(id);
            }
            let data = event.json();
            let result = &data["result"];
            if task.is_none() {
                let id = if result["kind"] == "task" {
                    result["id"].as_str()
                } else {
                    result["taskId"].as_str()
                };
                *task = id.map(str::to_owned);
            }
            if let Some(text) = result
                .pointer("/artifact/parts/0/text")
                .and_then(Value::as_str)
                && let Some(n) = text
                    .strip_prefix('[')
                    .and_then(|t| t.split(']').next())
                    .and_then(|n| n.parse::<u64>().ok())
            {
                *seen.entry(n).or_default() += 1;
            }
            let final_state = result.pointer("/status/state").and_then(Value::as_str);
            if result["final"] == true || data.get("error").is_some() {
                *state = Some(final_state.unwrap_or("error").to_owned());
                return true;
            }
            if let Some(s) = final_state
                && matches!(s, "completed" | "failed" | "canceled" | "rejected")
            {
                *state = Some(s.to_owned());
                return true;
            }
        }
        match response.chunk().await {
            Ok(Some(bytes)) => parser.feed(&bytes),
            _ => return false,
        }
    }
}

/// Whether some replica knows task `id` (`tasks/get`; a few tries, for a replica that is
/// restarting behind the balancer).
async fn known(http: &reqwest::Client, url: &str, agent: &str, id: &str) -> bool {
    for _ in 0..5 {
        let request =
            json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": id}});
        if let Ok(response) = http
            .post(format!("{url}/agents/{agent}"))
            .json(&request)
            .send()
            .await
            && let Ok(body) = response.json::<Value>().await
        {
            if body.pointer("/result/id").is_some() {
                return true;
            }
            if body.pointer("/error/code") == Some(&json!(-32001)) {
                return false;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}
