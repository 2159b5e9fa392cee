//! Streams that resume: every SSE event carries its sequence number in the task as its `id`,
//! and a client that lost its stream subscribes again with `Last-Event-ID` and gets every
//! event after it, once and in order, then the live ones; in JSON-RPC and HTTP+JSON.

use crate::support::*;
use serde_json::json;

async fn resubscribe(mesh: &GatewayMesh, task: &str, last: Option<u64>) -> reqwest::Response {
    let mut request = mesh
        .http
        .post(mesh.url("/agents/paced"))
        .header("content-type", "application/json")
        .body(rpc("tasks/resubscribe", json!({"id": task})).to_string());
    if let Some(last) = last {
        request = request.header("last-event-id", last.to_string());
    }
    request.send().await.expect("the gateway answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_stream_resumes_after_its_last_event_id_with_every_event_once() {
    // The durable store (the gateway's default) keeps a finished task's log too.
    let dir = std::env::temp_dir().join(format!(
        "mesh-gateway-resume-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let gate = Gate::default();
    let mut mesh = GatewayMesh::start_with(|c| c.data_dir = Some(dir.clone())).await;
    mesh.run(paced(gate.clone())).await;

    // The stream: the task, "working", three chunks (then the agent waits).
    let mut first = mesh
        .open_sse(
            "paced",
            "message/stream",
            json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
                               "parts": [{"kind": "text", "text": "go"}]}}),
        )
        .await;
    let seen = read_until(&mut first, |e| e.last().is_some_and(|e| is_chunk(e, "2"))).await;
    drop(first);
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();
    let seen_ids = ids(&seen);
    assert_eq!(
        seen_ids.len(),
        seen.len(),
        "every event has an id: {seen:?}"
    );
    assert!(
        seen_ids.windows(2).all(|w| w[1] == w[0] + 1),
        "ids count the task's events: {seen_ids:?}"
    );

    // The client claims it saw only the first two events: it gets the rest of what it
    // missed, then (the gate opens) the live events to the end, each once, in order.
    let last = seen_ids[1];
    let mut resumed = resubscribe(&mesh, &task, Some(last)).await;
    let replayed = read_until(&mut resumed, |e| e.last().is_some_and(|e| is_chunk(e, "2"))).await;
    assert_eq!(
        ids(&replayed),
        seen_ids[2..].to_vec(),
        "the missed events replayed: {replayed:?}"
    );
    assert!(replayed[0].data["result"].get("kind").is_some());
    gate.open();
    let live = read_until(&mut resumed, |_| false).await;
    let all: Vec<u64> = ids(&replayed).into_iter().chain(ids(&live)).collect();
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "no event twice, none lost: {all:?}"
    );
    assert!(live.iter().any(|e| is_chunk(e, "5")), "{live:?}");
    let final_event = &live.last().unwrap().data["result"];
    assert_eq!(final_event["status"]["state"], "completed", "{live:?}");
    assert_eq!(final_event["final"], true);
    let final_id = *all.last().unwrap();

    // The task ended: a client that missed its end resumes to it; one that saw it has
    // nothing to resume, and a plain resubscription is refused as before.
    let mut late = resubscribe(&mesh, &task, Some(final_id - 2)).await;
    let tail = read_until(&mut late, |_| false).await;
    assert_eq!(ids(&tail), vec![final_id - 1, final_id], "{tail:?}");
    for last in [Some(final_id), None] {
        let response = resubscribe(&mesh, &task, last).await;
        let events = read_sse(response).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(code(&events[0]), -32004, "{events:?}");
    }

    // An id this gateway never wrote is refused, not taken as "from the start".
    let mut request = mesh
        .http
        .post(mesh.url("/agents/paced"))
        .header("content-type", "application/json")
        .header("last-event-id", "not-a-number")
        .body(rpc("tasks/resubscribe", json!({"id": task})).to_string());
    request = request.header("accept", "text/event-stream");
    let events = read_sse(request.send().await.unwrap()).await;
    assert_eq!(code(&events[0]), -32602, "{events:?}");

    // HTTP+JSON: the same events, the same ids, as bare StreamResponses.
    let mut rest = mesh
        .http
        .get(mesh.url(&format!("/agents/paced/tasks/{task}:subscribe")))
        .header("last-event-id", (final_id - 3).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 200);
    let tail = read_until(&mut rest, |_| false).await;
    assert_eq!(
        ids(&tail),
        vec![final_id - 2, final_id - 1, final_id],
        "{tail:?}"
    );
    assert_eq!(
        tail.last().unwrap().data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_task_whose_log_is_gone_resumes_with_the_task_as_it_ended() {
    // The memory store drops a task's log when the task finishes.
    let gate = Gate::default();
    let mut mesh = GatewayMesh::start().await;
    mesh.run(paced(gate.clone())).await;
    let mut stream = mesh
        .open_sse(
            "paced",
            "message/stream",
            json!({"message": {"kind": "message", "role": "user", "messageId": "m2",
                               "parts": [{"kind": "text", "text": "go"}]}}),
        )
        .await;
    let seen = read_until(&mut stream, |e| e.last().is_some_and(|e| is_chunk(e, "2"))).await;
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();
    gate.open();
    // Its stream runs to the end; then its log is gone.
    read_until(&mut stream, |_| false).await;
    let mut late = resubscribe(&mesh, &task, Some(2)).await;
    let events = read_until(&mut late, |_| false).await;
    assert!(
        events.len() >= 2,
        "the artifact and the final status: {events:?}"
    );
    let last = &events.last().unwrap();
    assert_eq!(
        last.data["result"]["status"]["state"], "completed",
        "{events:?}"
    );
    assert_eq!(last.data["result"]["final"], true);
    assert!(last.id.is_some_and(|id| id > 2), "{events:?}");
}
