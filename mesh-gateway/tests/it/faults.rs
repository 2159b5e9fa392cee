//! Bad input, absent agents, slow agents, a broker that goes away: every request gets a clear
//! answer in bounded time, and nothing panics.

use crate::support::*;
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn};
use mesh_core::bus::ConnectionState;
use mesh_testkit::TestBroker;
use serde_json::{Value, json};
use std::time::Duration;

fn message(body: &Value) -> String {
    body.pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

// A client still sending a body far past the limit reads the limit's error, not a broken
// pipe or a reset: the gateway answers, then reads and drops what is still coming (bounded)
// before it closes. The client is a blocking one: it writes the whole request before it
// reads (Python's http.client does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_far_past_the_limit_is_answered_not_reset() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mesh = GatewayMesh::start_with(|c| c.body_limit = 2048).await;
    let body = rpc("message/send", msg03(&"x".repeat(8 << 20))).to_string();
    let request = format!(
        "POST /agents/echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    for attempt in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(mesh.gateway.local_addr())
            .await
            .unwrap();
        let exchange = async {
            stream.write_all(request.as_bytes()).await?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = mesh_testkit::within("the answer", exchange)
            .await
            .unwrap_or_else(|e| {
                panic!("attempt {attempt}: the client got {e} instead of an answer")
            });
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "attempt {attempt}: {answer}"
        );
        assert!(answer.contains("-32600"), "attempt {attempt}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_json_rpc_errors() {
    let mut mesh = GatewayMesh::start_with(|c| c.body_limit = 2048).await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    // Not JSON: -32700 with id null.
    let (status, body) = mesh
        .post_raw(
            "/agents/echo",
            "application/json",
            &[],
            b"{not json".to_vec(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(code(&body), -32700);
    assert_eq!(body["id"], Value::Null);

    // A text/plain body: -32005.
    let request = rpc("message/send", msg03("hi"));
    let (_, body) = mesh
        .post_raw(
            "/agents/echo",
            "text/plain",
            &[],
            request.to_string().into_bytes(),
        )
        .await;
    assert_eq!(code(&body), -32005, "{body}");
    assert_eq!(body["id"], request["id"]);

    // Too large: 413 with a JSON-RPC error body.
    let big = rpc("message/send", msg03(&"x".repeat(4096)));
    let (status, body) = mesh.post("/agents/echo", &big).await;
    assert_eq!(status, 413);
    assert_eq!(code(&body), -32600);
    assert!(message(&body).contains("2048"), "{body}");

    // Too large without a Content-Length (chunked): the same.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..8).map(|_| Ok(vec![b' '; 512])).collect();
    let response = mesh
        .http
        .post(mesh.url("/agents/echo"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(code(&body), -32600);

    // Unknown method, invalid params, wrong jsonrpc.
    let (_, body) = mesh
        .post("/agents/echo", &rpc("tasks/explode", json!({})))
        .await;
    assert_eq!(code(&body), -32601);
    let (_, body) = mesh
        .post("/agents/echo", &rpc("message/send", json!({"nope": 1})))
        .await;
    assert_eq!(code(&body), -32602);
    let (_, body) = mesh
        .post(
            "/agents/echo",
            &json!({"jsonrpc": "1.0", "id": 7, "method": "tasks/get"}),
        )
        .await;
    assert_eq!(code(&body), -32600);
    assert_eq!(body["id"], 7);

    // The exact id comes back, whatever its type.
    for id in [json!(42), json!("abc"), json!(0), json!("")] {
        let (_, body) = mesh
            .post(
                "/agents/echo",
                &json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"id": "none"}}),
            )
            .await;
        assert_eq!(body["id"], id);
        assert_eq!(code(&body), -32001);
    }

    // A notification gets no body.
    let (status, body) = mesh
        .post(
            "/agents/echo",
            &json!({"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "x"}}),
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(body, Value::Null);
    // One that cannot be served gets its error, with `"id": null`.
    for (request, expected) in [
        (
            json!({"jsonrpc": "2.0", "method": "no/such/method"}),
            -32601,
        ),
        (
            json!({"jsonrpc": "2.0", "method": "message/send", "params": {}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": 7}}),
            -32602,
        ),
    ] {
        let (status, body) = mesh.post("/agents/echo", &request).await;
        assert_eq!(status, 200, "{request}");
        assert_eq!(code(&body), expected, "{request}: {body}");
        assert_eq!(body["id"], Value::Null, "{body}");
        assert!(body.as_object().unwrap().contains_key("id"), "{body}");
    }

    // Batches: one answer per request with an id; empty batch: -32600.
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "a"}},
        {"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "b"}},
        {"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": msg03("in a batch")},
        {"jsonrpc": "2.0", "id": 4, "method": "message/stream", "params": msg03("no")}
    ]);
    let (status, body) = mesh.post("/agents/echo", &batch).await;
    assert_eq!(status, 200);
    let answers = body.as_array().expect("an array");
    assert_eq!(answers.len(), 3, "{body}");
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(code(&answers[0]), -32001);
    assert_eq!(answers[1]["id"], 3);
    assert_eq!(
        answers[1].pointer("/result/status/state"),
        Some(&json!("completed"))
    );
    assert_eq!(answers[2]["id"], 4);
    assert_eq!(code(&answers[2]), -32600);
    let (_, body) = mesh.post("/agents/echo", &json!([])).await;
    assert_eq!(code(&body), -32600);

    // Push configs of an unknown task; no extended card without API keys.
    let (_, body) = mesh
        .post(
            "/agents/echo",
            &rpc("tasks/pushNotificationConfig/get", json!({"id": "t"})),
        )
        .await;
    assert_eq!(code(&body), -32001);
    let (_, body) = mesh
        .post("/agents/echo", &rpc("GetExtendedAgentCard", json!({})))
        .await;
    // The card claims no extended card: UnsupportedOperation (spec 1.0 §3.3.4).
    assert_eq!(code(&body), -32004);

    // Trailing slash tolerated.
    let (status, body) = mesh
        .post("/agents/echo/", &rpc("message/send", msg03("slash")))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body.pointer("/result/status/state"),
        Some(&json!("completed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_version_is_checked() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    for ok in ["0.3", "0.3.0", "1.0", "1.0.0"] {
        let (_, body) = mesh
            .post_raw(
                "/agents/echo",
                "application/json",
                &[("A2A-Version", ok)],
                rpc("SendMessage", msg10("v")).to_string().into_bytes(),
            )
            .await;
        assert!(body.get("result").is_some(), "{ok}: {body}");
    }
    let (_, body) = mesh
        .post_raw(
            "/agents/echo",
            "application/json",
            &[("A2A-Version", "2.0")],
            rpc("SendMessage", msg10("v")).to_string().into_bytes(),
        )
        .await;
    assert_eq!(code(&body), -32009, "{body}");
    let (_, body) = mesh
        .post_raw(
            "/agents/echo?A2A-Version=0.9",
            "application/json",
            &[],
            rpc("message/send", msg03("v")).to_string().into_bytes(),
        )
        .await;
    assert_eq!(code(&body), -32009, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_offline_and_default_agents() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    let (_, body) = mesh
        .post("/agents/ghost", &rpc("message/send", msg03("hi")))
        .await;
    assert_eq!(code(&body), -32602);
    assert!(
        message(&body).contains("ghost") && message(&body).contains("echo"),
        "{body}"
    );

    // No default agent: POST / says so and lists the agents.
    let (status, body) = mesh.post("/", &rpc("message/send", msg03("hi"))).await;
    assert_eq!(status, 200);
    assert!(message(&body).contains("default agent"), "{body}");
    assert_eq!(body.pointer("/error/data/agents"), Some(&json!(["echo"])));

    // An agent that stops is offline: an immediate, clear error.
    let gone = mesh
        .start_agent(Agent::new(
            "gone",
            handler_fn(|_ctx: TaskContext| async move { Ok(Outcome::completed()) }),
        ))
        .await;
    gone.shutdown().await;
    assert!(mesh.gateway.registry().wait_offline("gone", WAIT).await);
    let started = std::time::Instant::now();
    let (_, body) = mesh
        .post("/agents/gone", &rpc("message/send", msg03("hi")))
        .await;
    assert!(
        message(&body).contains("gone") && message(&body).contains("offline"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_agent_answers_on_root() {
    let mut mesh = GatewayMesh::start_with(|c| c.default_agent = Some("echo".into())).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let (_, body) = mesh.post("/", &rpc("message/send", msg03("root"))).await;
    assert_eq!(
        body.pointer("/result/artifacts/0/parts/0/text"),
        Some(&json!("root"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_that_outlasts_the_wait_returns_the_task_as_it_stands() {
    let mut mesh = GatewayMesh::start_with(|c| c.blocking_wait = Duration::from_millis(300)).await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let body = mesh.call("slow", "message/send", msg03("long job")).await;
    let task = result(&body);
    let state = task.pointer("/status/state").unwrap();
    assert!(state == "submitted" || state == "working", "{body}");
    let id = task["id"].as_str().unwrap().to_owned();
    // Poll by resubscribing: the stream ends when the task does.
    let sub = mesh
        .open_sse("slow", "tasks/resubscribe", json!({"id": id}))
        .await;
    gate.open();
    let events = read_sse(sub).await;
    assert_eq!(
        events.last().unwrap().pointer("/result/status/state"),
        Some(&json!("completed"))
    );
    let got = mesh.call("slow", "tasks/get", json!({"id": id})).await;
    assert_eq!(
        result(&got).pointer("/status/state"),
        Some(&json!("completed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_blocking_send_is_followed_as_it_runs_not_only_at_its_end() {
    followed_as_it_runs(true, msg03("go")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_to_an_agent_that_does_not_stream_is_followed_as_it_runs() {
    let mut params = msg03("go");
    params["configuration"] = json!({"blocking": false});
    followed_as_it_runs(false, params).await;
}

/// Sends `params` (`message/send`) to an agent (`streams`: as its card says) that writes an
/// artifact between two gates, then follows the task: the artifact reaches a subscriber, and
/// the store, while the task still runs, not only at its end. The gateway sends the agent
/// `message/send` (a blocking send, or one to an agent that does not stream) and asks it to
/// go on as a stream after its progress response.
async fn followed_as_it_runs(streams: bool, params: Value) {
    let mut mesh = GatewayMesh::start_with(|c| c.blocking_wait = Duration::from_millis(300)).await;
    let (first, second) = (Gate::default(), Gate::default());
    let gates = (first.clone(), second.clone());
    let agent = Agent::new(
        "stepper",
        handler_fn(move |ctx: TaskContext| {
            let (first, second) = gates.clone();
            async move {
                first.wait().await;
                ctx.text_artifact("notes", "step one").await?;
                second.wait().await;
                Ok(Outcome::completed_with("done"))
            }
        }),
    );
    mesh.run(agent.streaming(streams)).await;
    let body = mesh.call("stepper", "message/send", params).await;
    let id = result(&body)["id"].as_str().unwrap().to_owned();
    let mut follower = mesh
        .open_sse("stepper", "tasks/resubscribe", json!({"id": id}))
        .await;
    // Past the progress response (the task working), which would carry the artifact if the
    // handler had written it before.
    read_until(&mut follower, |events| {
        events
            .iter()
            .any(|e| e.data.pointer("/result/status/state") == Some(&json!("working")))
    })
    .await;
    first.open();
    let events = read_until(&mut follower, |events| {
        events
            .iter()
            .any(|e| e.data.pointer("/result/kind") == Some(&json!("artifact-update")))
    })
    .await;
    let artifact = events.last().unwrap();
    assert_eq!(
        artifact.data.pointer("/result/artifact/parts/0/text"),
        Some(&json!("step one")),
        "{events:?}"
    );
    let got = mesh.call("stepper", "tasks/get", json!({"id": id})).await;
    assert_eq!(
        result(&got).pointer("/status/state"),
        Some(&json!("working")),
        "{got}"
    );
    assert_eq!(
        result(&got).pointer("/artifacts/0/parts/0/text"),
        Some(&json!("step one")),
        "the store has it too: {got}"
    );
    second.open();
    let rest = read_until(&mut follower, |_| false).await;
    assert_eq!(
        rest.last()
            .and_then(|e| e.data.pointer("/result/status/state")),
        Some(&json!("completed")),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_silent_past_the_deadline_fails_the_task() {
    let mut mesh = GatewayMesh::start_with(|c| c.task_timeout = Duration::from_millis(500)).await;
    mesh.run(Agent::new(
        "mute",
        handler_fn(|ctx: TaskContext| async move {
            ctx.cancelled().await;
            Ok(Outcome::completed())
        }),
    ))
    .await;
    let started = std::time::Instant::now();
    let body = mesh.call("mute", "message/send", msg03("anyone?")).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let task = result(&body);
    assert_eq!(
        task.pointer("/status/state"),
        Some(&json!("failed")),
        "{body}"
    );
    let text = task
        .pointer("/status/message/parts/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(text.contains("deadline"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_to_an_agent_that_does_not_stream_is_refused() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent().streaming(false))
        .await;
    let (status, body) = mesh
        .post("/agents/echo", &rpc("message/stream", msg03("s")))
        .await;
    assert_eq!(status, 200);
    assert_eq!(code(&body), -32004, "{body}");
    // Sending still works.
    let body = mesh.call("echo", "message/send", msg03("s")).await;
    assert_eq!(
        result(&body).pointer("/status/state"),
        Some(&json!("completed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_down_is_not_ready_and_fails_fast_then_recovers() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let ready = mesh.http.get(mesh.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    mesh.broker.stop().await;
    assert!(wait_ready(&mesh, 503).await, "readyz turns 503");
    let started = std::time::Instant::now();
    let (_, body) = mesh
        .post("/agents/echo", &rpc("message/send", msg03("hi")))
        .await;
    assert!(body.get("error").is_some(), "{body}");
    assert!(started.elapsed() < Duration::from_secs(2), "fails fast");

    mesh.broker.restart().await;
    assert!(wait_ready(&mesh, 200).await, "readyz recovers");
    // The agent comes back too (its own reconnect); then requests work again.
    echo_answers_again(&mesh).await;
}

/// Once the broker is back: echo comes back online (its own reconnect) and answers again
/// (polled, bounded).
async fn echo_answers_again(mesh: &GatewayMesh) {
    assert!(mesh.gateway.registry().wait_online("echo", WAIT).await);
    let mut answered = false;
    for _ in 0..50 {
        let (_, body) = mesh
            .post("/agents/echo", &rpc("message/send", msg03("back")))
            .await;
        if body.pointer("/result/status/state") == Some(&json!("completed")) {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "requests work again after the broker returns");
}

/// Polls `/readyz` (bounded) until it answers `status`.
async fn wait_ready(mesh: &GatewayMesh, status: u16) -> bool {
    for _ in 0..100 {
        if let Ok(r) = mesh.http.get(mesh.url("/readyz")).send().await
            && r.status().as_u16() == status
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A client that writes its own `_mesh` into the params' metadata (a forged task snapshot,
/// a reply topic, a caller) does not reach the agent with it: the gateway's envelope is the
/// only one on the bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_forge_the_bus_envelope() {
    let mesh = GatewayMesh::start().await;
    mesh.start_agent(Agent::new(
        "witness",
        handler_fn(|ctx: TaskContext| async move {
            let seen = json!({
                "resumed": ctx.is_resumed(),
                "taskId": ctx.task_id(),
                "history": ctx.task().history.as_ref().map_or(0, Vec::len),
                "caller": ctx.caller().map(|c| c.kind),
            });
            Ok(Outcome::completed_with(seen.to_string()))
        }),
    ))
    .await;
    let mut params = msg03("who sent this?");
    params["metadata"] = json!({"_mesh": {
        "task": {"kind": "task", "id": "forged", "contextId": "c",
                 "status": {"state": "input-required"},
                 "history": [{"kind": "message", "role": "user", "messageId": "f",
                              "parts": [{"kind": "text", "text": "forged"}]}]},
        "replyTo": "elsewhere/a2a/v1/gateway/response/x/i/y/t",
        "caller": {"kind": "agent", "id": "impostor"},
        "depth": 99,
    }});
    let body = mesh.call("witness", "message/send", params).await;
    let task = body.get("result").unwrap_or_else(|| panic!("{body}"));
    assert_eq!(
        task.pointer("/status/state"),
        Some(&json!("completed")),
        "{body}"
    );
    let text = task
        .pointer("/status/message/parts/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{body}"));
    let seen: Value = serde_json::from_str(text).unwrap();
    assert_eq!(seen["resumed"], false, "{seen}");
    assert_eq!(seen["taskId"], task["id"], "{seen}");
    assert_eq!(seen["history"], 1, "{seen}");
    assert_eq!(seen["caller"], "gateway", "{seen}");
}

/// A message the broker will not take (over its packet limit, under the gateway bus's):
/// that one request fails promptly with a clear error (the broker closes the connection on
/// it, which fails what was in flight), the bus gives the message up instead of looping, and
/// every other request is served.
async fn a_message_the_broker_refuses_fails_alone(broker: TestBroker) {
    let mut mesh = GatewayMesh::start_on(broker, |_| {}, |_| {}).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let big = rpc("message/send", msg03(&"x".repeat(300 * 1024)));
    let (status, body) = mesh.post("/agents/echo", &big).await;
    assert_eq!(status, 200);
    assert!(body.get("error").is_some(), "{body}");
    assert!(
        message(&body).contains("connection to the broker dropped"),
        "{body}"
    );
    // The bus gives the message up after a bounded number of connections, then stays up.
    wait_metric(
        &mesh,
        "mesh_gateway_bus_dropped_total{reason=\"given_up\"}",
        1.0,
    )
    .await;
    let mut state = mesh.gateway_bus.state();
    tokio::time::timeout(WAIT, state.wait_for(|s| *s == ConnectionState::Connected))
        .await
        .expect("the gateway's bus reconnects")
        .unwrap();
    let (_, body) = mesh
        .post("/agents/echo", &rpc("message/send", msg03("small")))
        .await;
    assert_eq!(task_state(result(&body)), "completed", "{body}");
    let given_up = metric(&mesh, "mesh_gateway_bus_dropped_total{reason=\"given_up\"}").await;
    assert_eq!(given_up, 1.0);
    let reconnects = metric(&mesh, "mesh_gateway_bus_reconnects_total").await;
    assert!(
        reconnects <= f64::from(mesh_core::bus::RESEND_LIMIT),
        "{reconnects} reconnects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_mosquitto_refuses_fails_alone() {
    a_message_the_broker_refuses_fails_alone(
        TestBroker::mosquitto_with_packet_limit(256 * 1024).await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_embedded_broker_refuses_fails_alone() {
    a_message_the_broker_refuses_fails_alone(
        TestBroker::embedded_with_packet_limit(256 * 1024).await,
    )
    .await
}

// The body limit fits the bus (a larger body is 413), and a message that grows past what
// the bus carries with its envelope (a follow-up carries the task's snapshot) is refused with
// -32600; the task stays as it was and takes a smaller answer.
mesh_testkit::both_brokers!(limits_are_consistent_from_the_body_to_the_bus);
async fn limits_are_consistent_from_the_body_to_the_bus(broker: TestBroker) {
    let mut mesh = GatewayMesh::start_on(
        broker,
        |bus| bus.max_packet_size = 1024 * 1024,
        |config| config.body_limit = 8 * 1024 * 1024,
    )
    .await;
    mesh.run(Agent::new(
        "asker",
        handler_fn(|ctx: TaskContext| async move {
            if ctx.is_resumed() {
                return Ok(Outcome::completed());
            }
            Ok(Outcome::InputRequired(mesh_agent::agent_text("and then?")))
        }),
    ))
    .await;
    let too_big = rpc("message/send", msg03(&"x".repeat(1024 * 1024)));
    let (status, body) = mesh.post("/agents/asker", &too_big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(code(&body), -32600);

    let first = rpc("message/send", msg03(&"x".repeat(600 * 1024)));
    let (_, body) = mesh.post("/agents/asker", &first).await;
    let task = result(&body).clone();
    assert_eq!(task_state(&task), "input-required", "{body}");
    let mut follow_up = msg03(&"y".repeat(600 * 1024));
    follow_up["message"]["taskId"] = task["id"].clone();
    let (status, body) = mesh
        .post("/agents/asker", &rpc("message/send", follow_up))
        .await;
    assert_eq!(status, 200);
    assert_eq!(code(&body), -32600, "{body}");
    assert!(message(&body).contains("too large for the bus"), "{body}");
    let mut small = msg03("done");
    small["message"]["taskId"] = task["id"].clone();
    let (_, body) = mesh
        .post("/agents/asker", &rpc("message/send", small))
        .await;
    assert_eq!(task_state(result(&body)), "completed", "{body}");
}

// A batch over the cap is refused whole with one error; an empty task id is refused.
mesh_testkit::both_brokers!(batches_are_capped_and_empty_task_ids_refused);
async fn batches_are_capped_and_empty_task_ids_refused(broker: TestBroker) {
    let mut mesh = GatewayMesh::start_on(broker, |_| {}, |config| config.max_batch = 3).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let batch = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| rpc("message/send", msg03(&format!("m{i}"))))
                .collect(),
        )
    };
    let (status, body) = mesh.post("/agents/echo", &batch(4)).await;
    assert_eq!(status, 200);
    assert_eq!(code(&body), -32600, "{body}");
    assert_eq!(body["id"], Value::Null);
    assert!(message(&body).contains("batch of 4"), "{body}");
    let (_, body) = mesh.post("/agents/echo", &batch(3)).await;
    assert_eq!(body.as_array().map(Vec::len), Some(3), "{body}");

    let (_, body) = mesh
        .post("/agents/echo", &rpc("tasks/send", msg01("", "hi")))
        .await;
    assert_eq!(code(&body), -32602, "{body}");
    let mut empty = msg03("hi");
    empty["message"]["taskId"] = json!("");
    let (_, body) = mesh.post("/agents/echo", &rpc("message/send", empty)).await;
    assert_eq!(code(&body), -32602, "{body}");
}

// Work in flight when the broker goes away ends promptly and clearly: an open stream gets a
// final `failed` status that says why, a blocking send an answer (not a 30 s wait), and the
// task is terminal in the store; after the broker is back, requests work again.
mesh_testkit::both_brokers!(work_in_flight_when_the_broker_dies_ends_promptly);
async fn work_in_flight_when_the_broker_dies_ends_promptly(broker: TestBroker) {
    // A short cancel wait: the gateway's cancels of the tasks it failed are retried sooner.
    let mut mesh =
        GatewayMesh::start_on(broker, |_| {}, |c| c.cancel_wait = Duration::from_secs(1)).await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let response = mesh.open_sse("slow", "message/stream", msg03("s")).await;
    let events = tokio::spawn(read_sse(response));
    // The blocking send is under way once the agent says it works on it.
    let send = {
        let http = mesh.http.clone();
        let url = mesh.url("/agents/slow");
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let body: Value = http
                .post(url)
                .json(&rpc("message/send", msg03("b")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (body, started.elapsed())
        })
    };
    let working = |state: &str| state == "working";
    for _ in 0..100 {
        let (_, list) = mesh
            .post("/agents/slow", &rpc("tasks/list", json!({})))
            .await;
        let tasks = list
            .pointer("/result/tasks")
            .and_then(Value::as_array)
            .cloned();
        if tasks.is_some_and(|t| t.len() == 2 && t.iter().all(|t| working(&task_state(t)))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped = std::time::Instant::now();
    mesh.broker.stop().await;

    let events = tokio::time::timeout(WAIT, events).await.unwrap().unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        last.pointer("/result/status/state"),
        Some(&json!("failed")),
        "{events:?}"
    );
    // Whichever the gateway learns first: its own connection dropped, or (the embedded
    // broker publishes the wills of the clients it drops) the agent's instance went offline.
    let clear = |said: &str| {
        said.contains("connection to the broker dropped") || said.contains("went offline")
    };
    assert!(clear(&last.to_string()), "{last}");
    let (body, took) = tokio::time::timeout(WAIT, send).await.unwrap().unwrap();
    let said = body.to_string();
    assert!(clear(&said), "{said}");
    assert!(took < Duration::from_secs(10), "answered in {took:?}");
    eprintln!(
        "in-flight work ended {:?} after the broker stopped",
        stopped.elapsed()
    );

    mesh.broker.restart().await;
    let restarted = std::time::Instant::now();
    assert!(wait_ready(&mesh, 200).await, "readyz recovers");
    echo_answers_again(&mesh).await;
    // The tasks the gateway failed are canceled at the agent once the bus is back, rather
    // than going on unseen (the handler would wait 10 s for its gate otherwise).
    let slow = &mesh.agents[0];
    while slow.running_tasks() > 0 {
        assert!(
            restarted.elapsed() < Duration::from_secs(7),
            "the agent still runs {} task(s) the gateway failed",
            slow.running_tasks()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gate.open();
}

/// An event of a stream lost on the bus (here the broker "drops" one: a shadow client sends
/// the agent's next events with a position missing before the final one, as a broker at its
/// queue limit leaves them): the client's stream ends with the task failed, saying events
/// were lost, instead of a completed task with a hole, and the agent is asked to cancel it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_missing_an_event_fails_its_task_and_cancels_it_at_the_agent() {
    use mesh_core::bus::{Bus, QoS};
    use mesh_core::sse::SseParser;
    use mesh_core::topic::Topics;
    use mesh_testkit::within;
    use std::sync::Arc;
    use tokio::sync::Notify;
    let mesh = GatewayMesh::start().await;
    let (gate, canceled) = (Gate::default(), Arc::new(Notify::new()));
    let (handler_gate, handler_canceled) = (gate.clone(), canceled.clone());
    let lossy = Agent::new(
        "lossy",
        handler_fn(move |ctx: TaskContext| {
            let (gate, canceled) = (handler_gate.clone(), handler_canceled.clone());
            async move {
                gate.wait().await;
                ctx.working("thinking").await?;
                ctx.cancelled().await;
                canceled.notify_one();
                std::future::pending::<()>().await;
                Ok(Outcome::completed())
            }
        }),
    );
    let agent = mesh.start_agent(lossy).await;
    let topics = Topics::new(&mesh.namespace).unwrap();
    let shadow = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let mut requests = shadow
        .subscribe(
            &topics.agent_request_filter("lossy").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let mut response = mesh.open_sse("lossy", "message/stream", msg03("go")).await;
    let request = within("the request", requests.recv()).await.unwrap();
    let request: Value = serde_json::from_slice(&request.payload).unwrap();
    let reply_to = request
        .pointer("/params/metadata/_mesh/replyTo")
        .and_then(Value::as_str)
        .expect("a replyTo")
        .to_owned();
    let mut replies = shadow.subscribe(&reply_to, QoS::AtLeastOnce).await.unwrap();
    gate.open();
    // The agent's "thinking", as the gateway receives it: the shape and position to follow.
    let thinking = loop {
        let reply = within("the agent's event", replies.recv()).await.unwrap();
        let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
        if reply.to_string().contains("thinking") {
            break reply;
        }
    };
    let seq = find_mesh(&thinking)
        .and_then(|mesh| mesh["seq"].as_u64())
        .expect("a position");
    let next = |position: u64, last: bool| {
        let mut event = thinking.clone();
        let result = event.get_mut("result").expect("a result");
        // 0.3 and 1.0 shapes alike: the status update is the result or under statusUpdate.
        let update = if result.get("statusUpdate").is_some() {
            result.get_mut("statusUpdate").unwrap()
        } else {
            result
        };
        update["status"] = if last {
            json!({"state": if update.get("kind").is_some() { "completed" } else { "TASK_STATE_COMPLETED" }})
        } else {
            update["status"].clone()
        };
        if update.get("kind").is_some() {
            update["final"] = json!(last);
        }
        update["metadata"]["_mesh"]["seq"] = json!(position);
        event.to_string()
    };
    // Position seq + 1 never comes: the broker dropped it.
    shadow.send(&reply_to, next(seq + 2, false)).await.unwrap();
    shadow.send(&reply_to, next(seq + 3, true)).await.unwrap();
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    while let Some(chunk) = within("the stream", response.chunk()).await.unwrap() {
        parser.feed(&chunk);
        events.extend(parser.take_events());
    }
    let last: Value = serde_json::from_str(&events.last().expect("events").data).unwrap();
    let status = &last["result"]["status"];
    assert_eq!(status["state"], "failed", "{last}");
    assert_eq!(last["result"]["final"], true, "{last}");
    let said = status.to_string();
    assert!(said.contains("1 of the task's events were lost"), "{said}");
    within("the agent's cancel", canceled.notified()).await;
    let task = mesh
        .call(
            "lossy",
            "tasks/get",
            json!({"id": last["result"]["taskId"].clone()}),
        )
        .await;
    assert_eq!(task_state(result(&task)), "failed");
    shadow.disconnect().await.unwrap();
    agent.shutdown().await;
}

/// The `_mesh` object of a reply, wherever its shape puts it.
fn find_mesh(value: &Value) -> Option<&Value> {
    match value {
        Value::Object(map) => map
            .get("_mesh")
            .or_else(|| map.values().find_map(find_mesh)),
        Value::Array(items) => items.iter().find_map(find_mesh),
        _ => None,
    }
}
