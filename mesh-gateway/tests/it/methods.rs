//! Every method in every dialect, over real HTTP to real agents on a real broker.

use crate::support::*;
use serde_json::{Value, json};

fn state(task: &Value) -> &str {
    task.pointer("/status/state")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("a task with a state: {task}"))
}

// ---------------------------------------------------------------------------------------
// 0.3

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_send_get_list_and_history_length() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    let body = mesh.call("echo", "message/send", msg03("hello")).await;
    let task = result(&body);
    assert_eq!(task["kind"], "task");
    assert_eq!(state(task), "completed");
    assert_eq!(
        task.pointer("/artifacts/0/parts/0/text"),
        Some(&json!("hello"))
    );
    assert!(
        task.pointer("/metadata/_mesh").is_none(),
        "no _mesh leaks: {task}"
    );
    let id = task["id"].as_str().unwrap().to_owned();
    let context = task["contextId"].as_str().unwrap().to_owned();

    let got = mesh.call("echo", "tasks/get", json!({"id": id})).await;
    assert_eq!(result(&got)["id"], json!(id));
    assert_eq!(state(result(&got)), "completed");
    assert_eq!(
        result(&got)["kind"],
        "task",
        "created in 0.3, answered in 0.3"
    );

    let got = mesh
        .call("echo", "tasks/get", json!({"id": id, "historyLength": 0}))
        .await;
    let history = result(&got).get("history").and_then(Value::as_array);
    assert!(history.is_none_or(Vec::is_empty), "{got}");

    // A second task in the same context, one in another.
    let mut same = msg03("again");
    same["message"]["contextId"] = json!(context);
    mesh.call("echo", "message/send", same).await;
    mesh.call("echo", "message/send", msg03("elsewhere")).await;

    let listed = mesh
        .call("echo", "tasks/list", json!({"contextId": context}))
        .await;
    let tasks = result(&listed)["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{listed}");
    assert!(tasks.iter().all(|t| t["contextId"] == json!(context)));

    // Paging through all three, one at a time.
    let mut token = Value::Null;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let mut params = json!({"pageSize": 1});
        if !token.is_null() {
            params["pageToken"] = token.clone();
        }
        let page = mesh.call("echo", "tasks/list", params).await;
        let page = result(&page);
        assert_eq!(page["totalSize"], 3, "{page}");
        seen.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].clone()),
        );
        token = page["nextPageToken"].clone();
        if token.as_str().is_none_or(str::is_empty) {
            break;
        }
    }
    assert_eq!(seen.len(), 3);

    let completed = mesh
        .call("echo", "tasks/list", json!({"status": "completed"}))
        .await;
    assert_eq!(result(&completed)["tasks"].as_array().unwrap().len(), 3);
    let working = mesh
        .call("echo", "tasks/list", json!({"status": "working"}))
        .await;
    assert_eq!(result(&working)["tasks"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_stream_is_in_order_task_first_and_closes_after_final() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let request = rpc("message/stream", msg03("rust, chunks: 20"));
    let response = mesh
        .http
        .post(mesh.url("/agents/writer"))
        .header("content-type", "application/json")
        .body(request.to_string())
        .send()
        .await
        .unwrap();
    let events = read_sse(response).await;
    assert!(
        events.iter().all(|e| e["id"] == request["id"]),
        "every event carries the id"
    );
    let results: Vec<&Value> = events.iter().map(result).collect();
    assert_eq!(results[0]["kind"], "task");
    let chunks: Vec<&str> = results
        .iter()
        .filter(|r| r["kind"] == "artifact-update")
        .map(|r| {
            r.pointer("/artifact/parts/0/text")
                .and_then(Value::as_str)
                .unwrap()
        })
        .collect();
    assert_eq!(chunks.len(), 20);
    for (i, chunk) in chunks.iter().enumerate() {
        assert!(
            chunk.starts_with(&format!("[{i}]")),
            "chunk {i} in order: {chunk}"
        );
    }
    let last = results.last().unwrap();
    assert_eq!(last["kind"], "status-update");
    assert_eq!(last["final"], true);
    assert_eq!(state(last), "completed");
    assert_eq!(results.iter().filter(|r| r["final"] == true).count(), 1);

    // The store has the whole artifact, chunks appended.
    let id = results[0]["id"].as_str().unwrap();
    let got = mesh.call("writer", "tasks/get", json!({"id": id})).await;
    let parts = result(&got).pointer("/artifacts/0/parts").unwrap();
    assert_eq!(parts.as_array().unwrap().len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_multi_turn_follow_up_carries_the_task() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let first = mesh
        .call("flight-booker", "message/send", msg03("book me a flight"))
        .await;
    let task = result(&first);
    assert_eq!(state(task), "input-required");
    let id = task["id"].as_str().unwrap();
    let context = task["contextId"].as_str().unwrap();

    let mut follow = msg03("JFK to LHR on 2026-12-01");
    follow["message"]["taskId"] = json!(id);
    follow["message"]["contextId"] = json!(context);
    let second = mesh
        .call("flight-booker", "message/send", follow.clone())
        .await;
    let task = result(&second);
    assert_eq!(task["id"], json!(id));
    assert_eq!(state(task), "completed", "{second}");
    assert_eq!(
        task.pointer("/artifacts/0/name"),
        Some(&json!("FlightItinerary.json"))
    );

    // A message to the finished task is refused.
    let third = mesh.call("flight-booker", "message/send", follow).await;
    assert_eq!(code(&third), -32004, "{third}");

    // A message naming a task nobody knows.
    let mut unknown = msg03("hello");
    unknown["message"]["taskId"] = json!("no-such-task");
    let body = mesh.call("flight-booker", "message/send", unknown).await;
    assert_eq!(code(&body), -32001);
}

/// The next whole task an agent answered with, off the gateway's response topics.
async fn next_task_answer(answers: &mut mesh_core::bus::Subscription) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, answers.recv())
            .await
            .unwrap()
            .unwrap();
        let body: Value = serde_json::from_slice(&message.payload).unwrap();
        if body.pointer("/result/kind") == Some(&json!("task")) {
            return body;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_task_keeps_its_whole_history_while_the_agent_sends_only_what_it_adds() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    // What the agent answers the gateway with, as it crosses the bus.
    let spy = mesh_core::bus::Bus::connect(mesh.broker.bus_config())
        .await
        .unwrap();
    let mut answers = spy
        .subscribe(
            &format!("{}/a2a/v1/gateway/response/#", mesh.namespace),
            mesh_core::bus::QoS::AtMostOnce,
        )
        .await
        .unwrap();
    let texts = |task: &Value| -> Vec<String> {
        task["history"]
            .as_array()
            .map(|history| {
                history
                    .iter()
                    .map(|m| {
                        m.pointer("/parts/0/text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };

    let first = mesh
        .call("flight-booker", "message/send", msg03("book me a flight"))
        .await;
    let task = result(&first);
    assert_eq!(state(task), "input-required", "{first}");
    let question = task
        .pointer("/status/message/parts/0/text")
        .and_then(Value::as_str)
        .expect("a question")
        .to_owned();
    let id = task["id"].as_str().unwrap();
    assert_eq!(texts(task), ["book me a flight"]);
    // The agent's answer carried none of the history the gateway had: the message it sent.
    let answer = next_task_answer(&mut answers).await;
    assert_eq!(
        answer.pointer("/result/metadata/_mesh/historyFrom"),
        Some(&json!(1)),
        "{answer}"
    );
    assert!(texts(&answer["result"]).is_empty(), "{answer}");

    // The answer goes on a stream: its first event, a whole task, has the whole history.
    let mut follow = msg03("JFK to LHR on 2026-12-01");
    follow["message"]["taskId"] = json!(id);
    let events = mesh.stream("flight-booker", "message/stream", follow).await;
    let whole = [
        "book me a flight".to_owned(),
        question,
        "JFK to LHR on 2026-12-01".to_owned(),
    ];
    let first_event = result(&events[0]);
    assert_eq!(first_event["kind"], "task", "{first_event}");
    assert_eq!(texts(first_event), whole, "{first_event}");
    let got = mesh
        .call("flight-booker", "tasks/get", json!({"id": id}))
        .await;
    assert_eq!(state(result(&got)), "completed", "{got}");
    // With the progress message of this turn after them.
    let history = texts(result(&got));
    assert_eq!(history[..3], whole, "{got}");
    assert!(history[3].starts_with("searching flights"), "{got}");
    // On the bus, that task event began after the three entries the gateway kept.
    let answer = next_task_answer(&mut answers).await;
    assert_eq!(
        answer.pointer("/result/metadata/_mesh/historyFrom"),
        Some(&json!(3)),
        "{answer}"
    );
    assert!(texts(&answer["result"]).is_empty(), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_non_blocking_send_then_cancel_and_cancel_again() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let mut params = msg03("take your time");
    params["configuration"] = json!({"blocking": false});
    let body = mesh.call("slow", "message/send", params).await;
    let task = result(&body);
    assert!(matches!(state(task), "submitted" | "working"), "{body}");
    let id = task["id"].as_str().unwrap().to_owned();

    let canceled = mesh.call("slow", "tasks/cancel", json!({"id": id})).await;
    assert_eq!(state(result(&canceled)), "canceled", "{canceled}");
    let again = mesh.call("slow", "tasks/cancel", json!({"id": id})).await;
    assert_eq!(code(&again), -32002);
    let unknown = mesh
        .call("slow", "tasks/cancel", json!({"id": "nope"}))
        .await;
    assert_eq!(code(&unknown), -32001);
    let got = mesh.call("slow", "tasks/get", json!({"id": id})).await;
    assert_eq!(state(result(&got)), "canceled");
    // A subscription on a finished task is refused.
    let (status, body) = mesh
        .post("/agents/slow", &rpc("tasks/resubscribe", json!({"id": id})))
        .await;
    assert_eq!(status, 200);
    assert_eq!(code(&body), -32004);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_an_interrupted_task_is_done_by_the_gateway() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let first = mesh
        .call("flight-booker", "SendMessage", msg10("a flight please"))
        .await;
    let task = &result(&first)["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED");
    let id = task["id"].as_str().unwrap();
    let canceled = mesh
        .call("flight-booker", "CancelTask", json!({"id": id}))
        .await;
    assert_eq!(
        state(result(&canceled)),
        "TASK_STATE_CANCELED",
        "{canceled}"
    );
}

/// A send that returns at once (0.3 `blocking: false`, 1.0 `returnImmediately`) still has
/// its agent stream the task to the gateway: a client that subscribes follows the task as it
/// runs, each chunk an event of its own, not only a snapshot and then the end. An agent
/// whose card says it does not stream is sent `message/send` as before: its subscriber gets
/// the whole artifact at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_follows_a_task_sent_without_waiting_as_it_runs() {
    for (send, configuration, subscribe, streams) in [
        (
            "message/send",
            json!({"blocking": false}),
            "tasks/resubscribe",
            true,
        ),
        (
            "SendMessage",
            json!({"returnImmediately": true}),
            "SubscribeToTask",
            true,
        ),
        (
            "message/send",
            json!({"blocking": false}),
            "tasks/resubscribe",
            false,
        ),
    ] {
        let mut mesh = GatewayMesh::start().await;
        let gate = Gate::default();
        mesh.run(paced(gate.clone()).streaming(streams)).await;
        let mut params = if send == "SendMessage" {
            msg10("go")
        } else {
            msg03("go")
        };
        params["configuration"] = configuration;
        let body = mesh.call("paced", send, params).await;
        let task = result(&body);
        let task = task.get("task").unwrap_or(task);
        let id = task["id"].as_str().unwrap().to_owned();

        // Subscribed (its first event read), then the agent goes on past its gate.
        let mut events = mesh.open_sse("paced", subscribe, json!({"id": id})).await;
        let mut seen = read_until(&mut events, |e| !e.is_empty()).await;
        gate.open();
        seen.extend(read_until(&mut events, |_| false).await);
        let artifact_update = |e: &Sse| {
            let result = &e.data["result"];
            result["kind"] == "artifact-update" || result.get("artifactUpdate").is_some()
        };
        // Each chunk after the gate an event of its own; had the agent sent only its end,
        // the gateway would have made one event of the whole artifact.
        for chunk in ["3", "4", "5"] {
            let alone = seen
                .iter()
                .any(|e| artifact_update(e) && is_chunk(e, chunk) && !is_chunk(e, "0"));
            assert_eq!(
                alone, streams,
                "{send}, streaming {streams}: chunk {chunk} as it was written: {seen:?}"
            );
            assert!(seen.iter().any(|e| is_chunk(e, chunk)), "{seen:?}");
        }
        let last = &seen.last().unwrap().data["result"];
        let state = last
            .pointer("/status/state")
            .or_else(|| last.pointer("/statusUpdate/status/state"));
        assert!(
            matches!(
                state.and_then(Value::as_str),
                Some("completed" | "TASK_STATE_COMPLETED")
            ),
            "{send}: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscribers_each_get_every_event_and_leaving_does_not_cancel() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;

    // The originator's stream: read up to the first event by reading the stream lazily is
    // not needed; the task id comes from a non-blocking send instead.
    let mut params = msg03("go");
    params["configuration"] = json!({"blocking": false});
    let body = mesh.call("slow", "message/send", params).await;
    let id = result(&body)["id"].as_str().unwrap().to_owned();

    let a = mesh
        .open_sse("slow", "tasks/resubscribe", json!({"id": id}))
        .await;
    let b = mesh
        .open_sse("slow", "SubscribeToTask", json!({"id": id}))
        .await;
    // A third subscriber goes away at once.
    let c = mesh
        .open_sse("slow", "tasks/resubscribe", json!({"id": id}))
        .await;
    drop(c);
    gate.open();
    let (a, b) = tokio::join!(read_sse(a), read_sse(b));

    let a: Vec<&Value> = a.iter().map(result).collect();
    assert_eq!(a[0]["kind"], "task", "a snapshot first");
    assert_eq!(a.last().unwrap()["final"], true);
    assert_eq!(state(a.last().unwrap()), "completed");

    let b: Vec<&Value> = b.iter().map(result).collect();
    assert!(b[0].get("task").is_some(), "1.0: a task first: {:?}", b[0]);
    let last = b.last().unwrap();
    assert_eq!(
        last.pointer("/task/status/state")
            .or_else(|| last.pointer("/statusUpdate/status/state")),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{last}"
    );
    let got = mesh.call("slow", "tasks/get", json!({"id": id})).await;
    assert_eq!(state(result(&got)), "completed");
    assert_eq!(
        result(&got).pointer("/artifacts/0/parts/0/text"),
        Some(&json!("done"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_client_that_goes_away_does_not_cancel_the_task() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let mut params = msg03("go");
    params["message"]["contextId"] = json!("ctx-leave");
    let response = mesh.open_sse("slow", "message/stream", params).await;
    assert_eq!(response.status(), 200);
    drop(response);
    let listed = mesh
        .call("slow", "tasks/list", json!({"contextId": "ctx-leave"}))
        .await;
    let id = result(&listed)["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Resubscribe, let it finish, read to the end.
    let stream = mesh
        .open_sse("slow", "tasks/resubscribe", json!({"id": id}))
        .await;
    gate.open();
    let events = read_sse(stream).await;
    assert_eq!(state(result(events.last().unwrap())), "completed");
}

// ---------------------------------------------------------------------------------------
// 1.0

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v10_send_stream_get_list_cancel_subscribe() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;

    let body = mesh.call("echo", "SendMessage", msg10("hi")).await;
    let task = &result(&body)["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED");
    assert_eq!(
        task.pointer("/artifacts/0/parts/0/text"),
        Some(&json!("hi"))
    );
    let id = task["id"].as_str().unwrap().to_owned();

    let got = mesh.call("echo", "GetTask", json!({"id": id})).await;
    assert_eq!(result(&got)["id"], json!(id), "bare task: {got}");
    assert_eq!(state(result(&got)), "TASK_STATE_COMPLETED");

    let listed = mesh
        .call("echo", "ListTasks", json!({"pageSize": 10}))
        .await;
    let page = result(&listed);
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(page["totalSize"], 1);
    assert_eq!(page["pageSize"], 10);
    assert!(
        page["tasks"][0].get("artifacts").is_none(),
        "1.0 lists without artifacts by default"
    );
    let bad = mesh
        .call("echo", "ListTasks", json!({"pageSize": 1000}))
        .await;
    assert_eq!(code(&bad), -32602);

    let events = mesh
        .stream("echo", "SendStreamingMessage", msg10("streamed"))
        .await;
    let results: Vec<&Value> = events.iter().map(result).collect();
    assert!(results[0].get("task").is_some(), "{:?}", results[0]);
    assert!(results.iter().any(|r| r.get("artifactUpdate").is_some()));
    assert_eq!(
        results
            .last()
            .unwrap()
            .pointer("/statusUpdate/status/state"),
        Some(&json!("TASK_STATE_COMPLETED"))
    );

    let mut params = msg10("slowly");
    params["configuration"] = json!({"returnImmediately": true});
    let body = mesh.call("slow", "SendMessage", params).await;
    let slow_id = result(&body)["task"]["id"].as_str().unwrap().to_owned();
    let sub = mesh
        .open_sse("slow", "SubscribeToTask", json!({"id": slow_id}))
        .await;
    let canceled = mesh
        .call("slow", "CancelTask", json!({"id": slow_id}))
        .await;
    assert_eq!(
        state(result(&canceled)),
        "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let events = read_sse(sub).await;
    let last = result(events.last().unwrap());
    let last_state = last
        .pointer("/statusUpdate/status/state")
        .or_else(|| last.pointer("/task/status/state"));
    assert_eq!(
        last_state,
        Some(&json!("TASK_STATE_CANCELED")),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v10_follow_up_and_snake_case_and_untagged_variants() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    // snake_case 1.0-ish payload
    let body = mesh
        .call(
            "flight-booker",
            "SendMessage",
            json!({"message": {"message_id": "m1", "role": "ROLE_USER", "parts": [{"text": "fly"}]}}),
        )
        .await;
    let task = &result(&body)["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED", "{body}");
    let id = task["id"].as_str().unwrap();
    let body = mesh
        .call(
            "flight-booker",
            "SendMessage",
            json!({"message": {"message_id": "m2", "task_id": id, "role": "ROLE_USER",
                "parts": [{"text": "SFO to NRT on 2026-12-24"}]}}),
        )
        .await;
    assert_eq!(
        state(&result(&body)["task"]),
        "TASK_STATE_COMPLETED",
        "{body}"
    );

    // 0.3 with untagged parts and no kind on the message
    let body = mesh
        .call(
            "echo",
            "message/send",
            json!({"message": {"role": "user", "messageId": "m3", "parts": [{"text": "untagged"}]}}),
        )
        .await;
    assert_eq!(
        result(&body).pointer("/artifacts/0/parts/0/text"),
        Some(&json!("untagged"))
    );
}

// ---------------------------------------------------------------------------------------
// 0.1

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v01_send_with_own_id_get_in_0_1_and_stream_of_updates_only() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;

    let body = mesh
        .call("echo", "tasks/send", msg01("my-task-1", "hello"))
        .await;
    let task = result(&body);
    assert_eq!(task["id"], "my-task-1");
    assert_eq!(
        task["sessionId"], "session-1",
        "0.1 sessionId is the contextId: {task}"
    );
    assert_eq!(state(task), "completed");

    let got = mesh
        .call("echo", "tasks/get", json!({"id": "my-task-1"}))
        .await;
    assert!(
        result(&got).get("sessionId").is_some(),
        "answered in 0.1: {got}"
    );
    assert!(result(&got).get("kind").is_none(), "answered in 0.1: {got}");

    // An id that is not a safe topic segment is mapped, not refused.
    let odd = "odd id/with+chars#";
    let body = mesh.call("echo", "tasks/send", msg01(odd, "x")).await;
    assert_eq!(result(&body)["id"], odd);

    for method in ["tasks/sendSubscribe", "tasks/send-streaming"] {
        let id = format!("stream-{}", method.len());
        let events = mesh.stream("echo", method, msg01(&id, "streamed")).await;
        let results: Vec<&Value> = events.iter().map(result).collect();
        assert!(results.len() >= 2, "{results:?}");
        for r in &results {
            assert!(
                r.get("status").is_some() || r.get("artifact").is_some(),
                "0.1 streams carry status and artifact updates only: {r}"
            );
            assert!(r.get("kind").is_none(), "{r}");
        }
        assert!(results.iter().any(|r| r.get("artifact").is_some()));
        let last = results.last().unwrap();
        assert_eq!(last["final"], true);
        assert_eq!(state(last), "completed");
    }

    // Multi-turn in 0.1: the same params.id again.
    let body = mesh
        .call(
            "flight-booker",
            "tasks/send",
            msg01("trip-1", "I want to fly"),
        )
        .await;
    assert_eq!(state(result(&body)), "input-required");
    let body = mesh
        .call(
            "flight-booker",
            "tasks/send",
            msg01("trip-1", "CDG to FCO on 2027-01-05"),
        )
        .await;
    assert_eq!(state(result(&body)), "completed", "{body}");
    let canceled = mesh
        .call("flight-booker", "tasks/cancel", json!({"id": "trip-1"}))
        .await;
    assert_eq!(code(&canceled), -32002);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v01_resubscribe_answers_in_0_1() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let started = mesh
        .open_sse("slow", "tasks/sendSubscribe", msg01("t01", "go"))
        .await;
    assert_eq!(started.status(), 200);
    let sub = mesh
        .open_sse("slow", "tasks/resubscribe", json!({"id": "t01"}))
        .await;
    gate.open();
    let (first, second) = tokio::join!(read_sse(started), read_sse(sub));
    for events in [first, second] {
        let results: Vec<&Value> = events.iter().map(result).collect();
        assert!(
            results.iter().all(|r| r.get("kind").is_none()),
            "{results:?}"
        );
        assert_eq!(results.last().unwrap()["final"], true);
        assert_eq!(state(results.last().unwrap()), "completed");
    }
}

// ---------------------------------------------------------------------------------------
// Message-only answers, keep-alive

fn replier() -> mesh_agent::Agent {
    mesh_agent::Agent::new(
        "replier",
        mesh_agent::handler_fn(|ctx: mesh_agent::TaskContext| async move {
            Ok(mesh_agent::Outcome::reply(format!(
                "you said {}",
                ctx.text()
            )))
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_only_answer_is_a_message_in_every_dialect() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(replier()).await;

    let body = mesh.call("replier", "message/send", msg03("hi")).await;
    assert_eq!(result(&body)["kind"], "message", "{body}");
    assert_eq!(
        result(&body).pointer("/parts/0/text"),
        Some(&json!("you said hi"))
    );

    let body = mesh.call("replier", "SendMessage", msg10("yo")).await;
    assert_eq!(
        result(&body).pointer("/message/parts/0/text"),
        Some(&json!("you said yo")),
        "{body}"
    );

    let events = mesh.stream("replier", "message/stream", msg03("s")).await;
    assert_eq!(
        events.len(),
        1,
        "the single message, then close: {events:?}"
    );
    assert_eq!(result(&events[0])["kind"], "message");

    let events = mesh
        .stream("replier", "SendStreamingMessage", msg10("s"))
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(result(&events[0]).get("message").is_some());

    let events = mesh
        .stream("replier", "tasks/sendSubscribe", msg01("r1", "s"))
        .await;
    let last = result(events.last().unwrap());
    assert_eq!(last["final"], true, "{events:?}");
    assert_eq!(
        last.pointer("/status/message/parts/0/text"),
        Some(&json!("you said s"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_get_keep_alive_comments() {
    let mut mesh =
        GatewayMesh::start_with(|c| c.sse_keep_alive = std::time::Duration::from_millis(50)).await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let mut params = msg03("quiet");
    params["configuration"] = json!({"blocking": false});
    let body = mesh.call("slow", "message/send", params).await;
    let id = result(&body)["id"].as_str().unwrap().to_owned();
    let mut stream = mesh
        .open_sse("slow", "tasks/resubscribe", json!({"id": id}))
        .await;
    // Read until a keep-alive comment shows up (bounded), then let the task finish.
    let mut seen = String::new();
    let found = tokio::time::timeout(WAIT, async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.lines().any(|l| l.starts_with(':')) {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(found, "a keep-alive comment: {seen:?}");
    gate.open();
    let rest = tokio::time::timeout(WAIT, async {
        let mut rest = String::new();
        while let Ok(Some(chunk)) = stream.chunk().await {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
        rest
    })
    .await
    .expect("the stream closes after the final event");
    assert!(rest.contains("\"final\":true"), "{rest}");
}

// ---------------------------------------------------------------------------------------
// Seed variants, concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_shapes_tasks_send_without_id_and_mixed_parts() {
    let mut mesh = GatewayMesh::start_with(|c| c.default_agent = Some("echo".into())).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    // Seed 002: tasks/send to the root, message only, parts with both text and kind.
    let (status, body) = mesh
        .post(
            "/",
            &json!({"jsonrpc": "2.0", "id": "abc-123", "method": "tasks/send", "params": {
                "message": {"messageId": "msg-1", "role": "user",
                    "parts": [{"text": "hello", "kind": "text"}]}}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["id"], "abc-123");
    let task = result(&body);
    assert_eq!(state(task), "completed", "{body}");
    assert!(task["id"].as_str().is_some_and(|id| !id.is_empty()));
    // tasks/list on the root lists it.
    let (_, listed) = mesh.post("/", &rpc("tasks/list", json!({}))).await;
    assert_eq!(result(&listed)["tasks"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_all_complete() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let mesh = std::sync::Arc::new(mesh);
    let calls = (0..200).map(|i| {
        let mesh = mesh.clone();
        async move {
            let text = format!("n{i}");
            if i % 4 == 0 {
                let events = mesh.stream("echo", "message/stream", msg03(&text)).await;
                state(result(events.last().unwrap())) == "completed"
            } else {
                let body = mesh.call("echo", "message/send", msg03(&text)).await;
                result(&body).pointer("/artifacts/0/parts/0/text") == Some(&json!(text))
            }
        }
    });
    let outcomes = tokio::time::timeout(WAIT, futures_util::future::join_all(calls))
        .await
        .expect("all answered in time");
    assert!(outcomes.iter().all(|ok| *ok));
    let listed = mesh
        .call("echo", "ListTasks", json!({"pageSize": 100}))
        .await;
    assert_eq!(result(&listed)["totalSize"], 200);
}

/// A burst far larger than the live broadcast (the writer streams as fast as the bus goes)
/// still reaches an SSE client event by event, in order: nothing collapsed, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_ten_thousand_chunks_reaches_the_sse_client_event_by_event() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let request = rpc("message/stream", msg03("bursts, chunks: 10000"));
    let response = mesh
        .http
        .post(mesh.url("/agents/writer"))
        .header("content-type", "application/json")
        .body(request.to_string())
        .send()
        .await
        .unwrap();
    let events = read_sse(response).await;
    let results: Vec<&Value> = events.iter().map(result).collect();
    let chunks: Vec<&str> = results
        .iter()
        .filter(|r| r["kind"] == "artifact-update")
        .map(|r| {
            r.pointer("/artifact/parts/0/text")
                .and_then(Value::as_str)
                .unwrap()
        })
        .collect();
    assert_eq!(chunks.len(), 10_000, "every chunk, one event each");
    for (i, chunk) in chunks.iter().enumerate() {
        assert!(
            chunk.starts_with(&format!("[{i}]")),
            "chunk {i} in order: {chunk}"
        );
    }
    assert_eq!(state(results.last().unwrap()), "completed");
}

/// A blocking send drives its task's pump in its own request; when the client goes away
/// before the task ends, the rest of the pump goes on in a task of its own, so the task still
/// ends in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_whose_client_goes_away_still_ends_its_task() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;

    // The client gives up while the agent is still working.
    let gone = mesh
        .http
        .post(mesh.url("/agents/slow"))
        .json(&rpc("message/send", msg03("take your time")))
        .timeout(std::time::Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.is_err(), "the client timed out: {gone:?}");

    let listed = mesh.call("slow", "tasks/list", json!({})).await;
    let id = result(&listed)["tasks"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the task is stored: {listed}"))
        .to_owned();
    gate.open();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = mesh.call("slow", "tasks/get", json!({"id": id})).await;
        if state(result(&got)) == "completed" {
            assert_eq!(
                result(&got).pointer("/artifacts/0/parts/0/text"),
                Some(&json!("done")),
                "{got}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the task ends without its client: {got}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_method_that_fails_first_answers_an_event_stream_of_its_error() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    // 0.3 `tasks/resubscribe` and 1.0 `SubscribeToTask` of a task that does not exist, and a
    // stream to an agent that is not there: each answer is an event stream whose one event is
    // the JSON-RPC error (0.3 §7.9, §7.2.1), with the request's id.
    for (path, version, request, code) in [
        (
            "/agents/echo",
            None,
            json!({"jsonrpc": "2.0", "id": 31, "method": "tasks/resubscribe", "params": {"id": "no-such-task"}}),
            -32001,
        ),
        (
            "/agents/echo",
            Some("1.0"),
            json!({"jsonrpc": "2.0", "id": "s1", "method": "SubscribeToTask", "params": {"id": "no-such-task"}}),
            -32001,
        ),
        (
            "/agents/nobody",
            None,
            json!({"jsonrpc": "2.0", "id": 32, "method": "message/stream", "params": msg03("hello")}),
            -32602,
        ),
        // Params that do not decode: the error is known before anything else.
        (
            "/agents/echo",
            None,
            json!({"jsonrpc": "2.0", "id": 33, "method": "message/stream", "params": {"message": 7}}),
            -32602,
        ),
    ] {
        let mut post = mesh.http.post(mesh.url(path)).json(&request);
        if let Some(version) = version {
            post = post.header("A2A-Version", version);
        }
        let response = post.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{request}: {content_type}"
        );
        let text = response.text().await.unwrap();
        let events: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .collect();
        assert_eq!(events.len(), 1, "{text}");
        let event: Value = serde_json::from_str(events[0].trim()).unwrap();
        assert_eq!(event["id"], request["id"], "{event}");
        assert_eq!(event["error"]["code"], code, "{event}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_to_an_interrupted_task_follows_it_to_its_end() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let first = mesh
        .call("flight-booker", "message/send", msg03("book me a flight"))
        .await;
    let task = result(&first);
    assert_eq!(state(task), "input-required");
    let id = task["id"].as_str().unwrap().to_owned();
    let context = task["contextId"].as_str().unwrap().to_owned();

    // Two subscribers while the task waits for input (spec 1.0 §3.1.6: any non-terminal
    // task; the stream ends at a terminal state, not at the interrupted one it starts in).
    let a = mesh
        .open_sse("flight-booker", "tasks/resubscribe", json!({"id": id}))
        .await;
    let b = mesh
        .open_sse("flight-booker", "SubscribeToTask", json!({"id": id}))
        .await;
    // Another client answers the question: its events reach both, then their streams end.
    let mut follow = msg03("JFK to LHR on 2026-12-01");
    follow["message"]["taskId"] = json!(id);
    follow["message"]["contextId"] = json!(context);
    let second = mesh.call("flight-booker", "message/send", follow).await;
    assert_eq!(state(result(&second)), "completed", "{second}");
    let (a, b) = tokio::time::timeout(WAIT, async { tokio::join!(read_sse(a), read_sse(b)) })
        .await
        .expect("both streams end once the task completed");
    for events in [&a, &b] {
        let first = events.first().expect("a snapshot first").to_string();
        assert!(first.to_lowercase().contains("input"), "{first}");
        let last = events.last().unwrap().to_string();
        assert!(last.to_lowercase().contains("completed"), "the end: {last}");
        assert!(
            events
                .iter()
                .any(|e| e.to_string().contains("FlightItinerary.json")),
            "the follow-up's artifact: {events:?}"
        );
    }

    // Canceled while it waits for input: the subscriber gets the end too.
    let again = mesh
        .call("flight-booker", "message/send", msg03("book me a flight"))
        .await;
    let id = result(&again)["id"].as_str().unwrap().to_owned();
    let c = mesh
        .open_sse("flight-booker", "tasks/resubscribe", json!({"id": id}))
        .await;
    let canceled = mesh
        .call("flight-booker", "tasks/cancel", json!({"id": id}))
        .await;
    assert_eq!(state(result(&canceled)), "canceled", "{canceled}");
    let c = tokio::time::timeout(WAIT, read_sse(c))
        .await
        .expect("the stream ends once the task is canceled");
    assert!(c.last().unwrap().to_string().contains("canceled"), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_waiting_on_an_interrupted_task_are_bounded() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let first = mesh
        .call("flight-booker", "message/send", msg03("book me a flight"))
        .await;
    let id = result(&first)["id"].as_str().unwrap().to_owned();
    let mut open = Vec::new();
    for _ in 0..64 {
        let response = mesh
            .open_sse("flight-booker", "tasks/resubscribe", json!({"id": id}))
            .await;
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    // The 65th is refused with an error event; the 64 stay open.
    let (status, refused) = mesh
        .post(
            "/agents/flight-booker",
            &rpc("tasks/resubscribe", json!({"id": id})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(code(&refused), -32603, "{refused}");
    assert!(refused.to_string().contains("64"), "{refused}");
    // One goes away: its place is free again once the gateway sees the connection close.
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut again = mesh
            .open_sse("flight-booker", "tasks/resubscribe", json!({"id": id}))
            .await;
        let chunk = tokio::time::timeout(WAIT, again.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if String::from_utf8_lossy(&chunk).contains("input-required") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never freed: {chunk:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
