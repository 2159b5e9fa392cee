//! gRPC `SendMessage` under load (wrk cannot speak gRPC): the gateway's generated client
//! (`mesh_gateway::grpc_client`) over tonic's HTTP/2 client, keeping `callers` calls in flight
//! for the case's duration and timing each into [`Latencies`], summed up as the same
//! [`LoadResult`] as wrk's runs.
//!
//! What makes it comparable with wrk `-t1 -cN`:
//!
//! - **One thread**: the load runs on a current-thread tokio runtime of its own, as wrk runs
//!   its connections on one thread, so it takes at most one core from the processes under
//!   test. It costs more CPU per call than wrk (HTTP/2 and protobuf on this side too): the
//!   suite reports both, per request.
//! - **One HTTP/2 connection per caller**, each with one call in flight, as wrk keeps one
//!   request in flight on each of its N HTTP/1.1 connections: the gateway serves N
//!   connections in both cases (N streams on one connection would be another load: one
//!   socket's reads and writes carrying the frames of many calls).
//! - **The same request**: the JSON-RPC payload's text in a 1.0 `SendMessageRequest` with
//!   the agent as its `tenant`, a fresh `messageId` per call, `a2a-version: 1.0` in the
//!   metadata; every answer must be a task in `TASK_STATE_COMPLETED`, else it counts as an
//!   error, as must a failed call and one unanswered after [`CALL_TIMEOUT`] (wrk's
//!   `--timeout`).
//! - **The clock** starts once every connection is up (wrk's own connects fall in its run,
//!   a few milliseconds in a run of seconds) and stops when the last caller's last call ends;
//!   a latency runs from the call (encoding included) to its decoded answer.

use crate::e2e::LoadResult;
use crate::payload;
use crate::stats::Latencies;
use mesh_gateway::grpc_client::a2a_service_client::A2aServiceClient;
use mesh_gateway::grpc_client::{
    Message, Part, Role, SendMessageRequest, SendMessageResponse, TaskState, part,
    send_message_response,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// The most callers (connections) one run opens.
pub const MAX_CALLERS: usize = 1024;
/// How long a call may take before it counts as an error (wrk's `--timeout=10s`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most latency samples one run keeps (16 bytes each); calls past it are still counted.
pub const MAX_SAMPLES: usize = 4_000_000;

/// Runs `callers` callers, each on its own connection to the gateway at `base`
/// (`http://host:port`), each calling `SendMessage` for agent `tenant` one call after the
/// other for `duration`. Message numbers start after `first`. It waits in place (its own
/// thread and runtime): called from the bench's multi-thread runtime.
pub fn run(
    base: &str,
    tenant: &str,
    callers: usize,
    duration: Duration,
    first: u64,
) -> Result<LoadResult, String> {
    if callers == 0 || callers > MAX_CALLERS {
        return Err(format!(
            "{callers} gRPC callers: between 1 and {MAX_CALLERS}"
        ));
    }
    let base = base.to_owned();
    let tenant = tenant.to_owned();
    let thread = std::thread::Builder::new()
        .name("grpc-load".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot build the gRPC load's runtime: {e}"))?;
            runtime.block_on(drive(&base, &tenant, callers, duration, first))
        })
        .map_err(|e| format!("cannot start the gRPC load's thread: {e}"))?;
    tokio::task::block_in_place(|| thread.join())
        .map_err(|_| "the gRPC load's thread panicked".to_string())?
}

/// What one caller saw.
#[derive(Debug, Default)]
struct Tally {
    latencies: Latencies,
    responses: u64,
    errors: u64,
}

async fn drive(
    base: &str,
    tenant: &str,
    callers: usize,
    duration: Duration,
    first: u64,
) -> Result<LoadResult, String> {
    let endpoint = Endpoint::from_shared(base.to_owned())
        .map_err(|e| format!("not a gRPC endpoint: {base}: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT);
    let mut clients = Vec::with_capacity(callers);
    for _ in 0..callers {
        // One `connect` per caller: a connection (and HTTP/2 session) of its own.
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {base} over gRPC: {e}"))?;
        clients.push(A2aServiceClient::new(channel));
    }
    let next = Arc::new(AtomicU64::new(first));
    let text: Arc<str> = payload::send_text().into();
    let tenant: Arc<str> = tenant.into();
    let samples_each = MAX_SAMPLES / callers;
    let began = Instant::now();
    let deadline = began + duration;
    let handles: Vec<_> = clients
        .into_iter()
        .map(|client| {
            tokio::spawn(caller(
                client,
                tenant.clone(),
                text.clone(),
                next.clone(),
                deadline,
                samples_each,
            ))
        })
        .collect();
    let mut total = Tally::default();
    for handle in handles {
        let tally = handle
            .await
            .map_err(|e| format!("a gRPC caller failed: {e}"))?;
        total.latencies.merge(tally.latencies);
        total.responses += tally.responses;
        total.errors += tally.errors;
    }
    Ok(summary(total, began.elapsed()))
}

/// One caller: one call in flight until `deadline`.
async fn caller(
    mut client: A2aServiceClient<Channel>,
    tenant: Arc<str>,
    text: Arc<str>,
    next: Arc<AtomicU64>,
    deadline: Instant,
    max_samples: usize,
) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let n = next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut call = tonic::Request::new(request(&tenant, &text, n));
        call.metadata_mut()
            .insert("a2a-version", MetadataValue::from_static("1.0"));
        let sent = Instant::now();
        let answer = tokio::time::timeout(CALL_TIMEOUT, client.send_message(call)).await;
        let took = sent.elapsed();
        match answer {
            Err(_elapsed) => tally.errors += 1,
            Ok(answer) => {
                tally.responses += 1;
                if tally.latencies.len() < max_samples {
                    tally.latencies.push(took);
                }
                if !answer.is_ok_and(|a| completed(a.get_ref())) {
                    tally.errors += 1;
                }
            }
        }
    }
    tally
}

/// Message `n` for agent `tenant`: `text` in one text part, `bench-<n>` as its id.
fn request(tenant: &str, text: &str, n: u64) -> SendMessageRequest {
    SendMessageRequest {
        tenant: tenant.to_owned(),
        message: Some(Message {
            message_id: payload::message_id(n),
            role: Role::User as i32,
            parts: vec![Part {
                content: Some(part::Content::Text(text.to_owned())),
                ..Part::default()
            }],
            ..Message::default()
        }),
        ..SendMessageRequest::default()
    }
}

/// Whether the answer is a completed task.
fn completed(answer: &SendMessageResponse) -> bool {
    matches!(
        &answer.payload,
        Some(send_message_response::Payload::Task(task))
            if task.status.as_ref().is_some_and(|s| s.state == TaskState::Completed as i32)
    )
}

/// The run's figures.
fn summary(total: Tally, elapsed: Duration) -> LoadResult {
    LoadResult {
        responses: total.responses,
        errors: total.errors,
        elapsed,
        p50: total.latencies.percentile(50.0),
        p99: total.latencies.percentile(99.0),
        cpu: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_gateway::grpc_client::{Task, TaskStatus};
    use prost::Message as _;

    #[test]
    fn the_request_carries_the_payload_text_and_its_own_message_id() {
        let r = request("echo", &payload::send_text(), 42);
        assert_eq!(r.tenant, "echo");
        let message = r.message.expect("a message");
        assert_eq!(message.message_id, "bench-0000000042");
        assert_eq!(message.role, Role::User as i32);
        assert_eq!(message.parts.len(), 1);
        assert_eq!(
            message.parts[0].content,
            Some(part::Content::Text(payload::send_text()))
        );
        assert!(r.configuration.is_none(), "blocking: the 1.0 default");
    }

    #[test]
    fn only_a_completed_task_is_a_completed_answer() {
        let task = |state: TaskState| SendMessageResponse {
            payload: Some(send_message_response::Payload::Task(Task {
                id: "t".into(),
                status: Some(TaskStatus {
                    state: state as i32,
                    ..TaskStatus::default()
                }),
                ..Task::default()
            })),
        };
        assert!(completed(&task(TaskState::Completed)));
        // Across the wire too.
        let decoded =
            SendMessageResponse::decode(task(TaskState::Completed).encode_to_vec().as_slice())
                .expect("decodes");
        assert!(completed(&decoded));
        assert!(!completed(&task(TaskState::Working)));
        assert!(!completed(&task(TaskState::Failed)));
        assert!(!completed(&SendMessageResponse { payload: None }));
        let message = SendMessageResponse {
            payload: Some(send_message_response::Payload::Message(Message::default())),
        };
        assert!(!completed(&message), "a message is not a completed task");
        let no_status = SendMessageResponse {
            payload: Some(send_message_response::Payload::Task(Task::default())),
        };
        assert!(!completed(&no_status));
    }

    #[test]
    fn the_summary_takes_percentiles_over_every_caller() {
        let mut total = Tally::default();
        for us in 1..=100 {
            let mut one = Tally::default();
            one.latencies.push(Duration::from_micros(us));
            one.responses = 1;
            total.latencies.merge(one.latencies);
            total.responses += one.responses;
        }
        total.errors = 2;
        let r = summary(total, Duration::from_secs(2));
        assert_eq!(r.responses, 100);
        assert_eq!(r.errors, 2);
        assert_eq!(r.p50, Duration::from_micros(50));
        assert_eq!(r.p99, Duration::from_micros(99));
        assert!((r.per_s() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_caller_count_out_of_bounds_is_refused_before_connecting() {
        let base = "http://127.0.0.1:9";
        for callers in [0, MAX_CALLERS + 1] {
            let e = run(base, "echo", callers, Duration::from_millis(1), 0).unwrap_err();
            assert!(e.contains("between 1 and"), "{e}");
        }
    }
}
