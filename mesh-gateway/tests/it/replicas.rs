//! Gateways that share one PostgreSQL store (a fresh database per test) and one broker:
//! a task started through one is read, listed, continued, canceled and subscribed to through
//! the other, and a stream lost on one resumes on the other with `Last-Event-ID`, every event
//! once and in order.

use crate::support::*;
use futures_util::StreamExt;
use mesh_agent::Agent;
use mesh_core::bus::Bus;
use mesh_gateway::{Gateway, GatewayConfig, RunningGateway};
use mesh_testkit::TestDatabase;
use serde_json::{Value, json};
use std::time::Duration;

/// Gateway "a" (the mesh's) and gateway "b", one store, one broker, one namespace.
struct Replicas {
    mesh: GatewayMesh,
    b: RunningGateway,
    b_base: String,
    _db: TestDatabase,
}

fn shared(config: &mut GatewayConfig, url: &str, id: &str) {
    config.store_url = Some(url.to_owned());
    config.gateway_id = Some(id.to_owned());
    config.allow_private_webhooks = true;
    config.webhook_backoff = Duration::from_millis(20);
    config.takeover_grace = Duration::from_millis(300);
}

impl Replicas {
    async fn start() -> Replicas {
        Replicas::start_with(|_| {}).await
    }

    /// Gateway b's settings changed by `configure_b`.
    async fn start_with(configure_b: impl FnOnce(&mut GatewayConfig)) -> Replicas {
        let db = TestDatabase::create().await;
        let url = db.url().to_owned();
        let mesh = GatewayMesh::start_with(|c| shared(c, &url, "a")).await;
        let mut config = GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            namespace: mesh.namespace.clone(),
            task_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(2),
            ..GatewayConfig::default()
        };
        shared(&mut config, &url, "b");
        configure_b(&mut config);
        let bus = Bus::connect(mesh.broker.bus_config()).await.unwrap();
        let b = Gateway::start(config, bus).await.unwrap();
        let b_base = format!("http://{}", b.local_addr());
        Replicas {
            mesh,
            b,
            b_base,
            _db: db,
        }
    }

    async fn run(&mut self, agent: Agent, name: &str) {
        self.mesh.run(agent).await;
        assert!(
            self.b.registry().wait_online(name, WAIT).await,
            "{name} shows up at gateway b"
        );
    }

    /// A JSON-RPC call to gateway `at` ("a" or "b").
    async fn call(&self, at: &str, agent: &str, method: &str, params: Value) -> Value {
        let base = if at == "a" {
            &self.mesh.base
        } else {
            &self.b_base
        };
        let response = self
            .mesh
            .http
            .post(format!("{base}/agents/{agent}"))
            .json(&rpc(method, params))
            .send()
            .await
            .expect("the gateway answers");
        response.json().await.expect("a JSON-RPC answer")
    }

    /// Opens an SSE stream at gateway `at`, with `Last-Event-ID` when given.
    async fn open(
        &self,
        at: &str,
        agent: &str,
        method: &str,
        params: Value,
        last: Option<u64>,
    ) -> reqwest::Response {
        let base = if at == "a" {
            &self.mesh.base
        } else {
            &self.b_base
        };
        let mut request = self
            .mesh
            .http
            .post(format!("{base}/agents/{agent}"))
            .header("accept", "text/event-stream")
            .json(&rpc(method, params));
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        request.send().await.expect("the gateway answers")
    }
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_through_one_gateway_is_served_by_the_other() {
    let mut replicas = Replicas::start().await;
    replicas
        .run(mesh_example_agents::flight_booker::agent(), "flight-booker")
        .await;

    // Started at a, waiting for input.
    let first = replicas
        .call(
            "a",
            "flight-booker",
            "message/send",
            msg03("book me a flight"),
        )
        .await;
    let task = result(&first);
    assert_eq!(state(task), "input-required", "{first}");
    let id = task["id"].as_str().unwrap().to_owned();
    let context = task["contextId"].as_str().unwrap().to_owned();

    // Read and listed at b.
    let got = replicas
        .call("b", "flight-booker", "tasks/get", json!({"id": id}))
        .await;
    assert_eq!(state(result(&got)), "input-required", "{got}");
    assert_eq!(result(&got)["history"], task["history"], "{got}");
    let listed = replicas
        .call("b", "flight-booker", "tasks/list", json!({}))
        .await;
    let tasks = result(&listed)["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["id"], json!(id));

    // Continued at b, then read at a as b left it.
    let mut follow = msg03("JFK to LHR on 2026-12-01");
    follow["message"]["taskId"] = json!(id);
    follow["message"]["contextId"] = json!(context);
    let second = replicas
        .call("b", "flight-booker", "message/send", follow)
        .await;
    assert_eq!(state(result(&second)), "completed", "{second}");
    let got = replicas
        .call("a", "flight-booker", "tasks/get", json!({"id": id}))
        .await;
    assert_eq!(state(result(&got)), "completed", "{got}");
    assert_eq!(
        result(&got)["history"].as_array().map(Vec::len),
        result(&second)["history"].as_array().map(Vec::len),
        "{got}"
    );
    let listed = replicas
        .call(
            "a",
            "flight-booker",
            "tasks/list",
            json!({"status": "completed"}),
        )
        .await;
    assert_eq!(result(&listed)["tasks"][0]["id"], json!(id), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_lost_at_one_gateway_resumes_at_the_other_with_every_event_once() {
    let mut replicas = Replicas::start().await;
    let gate = Gate::default();
    replicas.run(paced(gate.clone()), "paced").await;

    // The stream at a: the task, "working", three chunks (then the agent waits).
    let mut first = replicas
        .open(
            "a",
            "paced",
            "message/stream",
            json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
                               "parts": [{"kind": "text", "text": "go"}]}}),
            None,
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

    // A plain subscription at b: the task as it stands, then its events.
    let mut watcher = replicas
        .open("b", "paced", "tasks/resubscribe", json!({"id": task}), None)
        .await;
    let opening = read_until(&mut watcher, |e| !e.is_empty()).await;
    assert_eq!(opening[0].data["result"]["kind"], "task", "{opening:?}");

    // The client saw only the first two events: b replays the rest, then (the gate opens)
    // the live ones to the end, each once, in order.
    let last = seen_ids[1];
    let mut resumed = replicas
        .open(
            "b",
            "paced",
            "tasks/resubscribe",
            json!({"id": task}),
            Some(last),
        )
        .await;
    let replayed = read_until(&mut resumed, |e| e.last().is_some_and(|e| is_chunk(e, "2"))).await;
    assert_eq!(
        ids(&replayed),
        seen_ids[2..].to_vec(),
        "the missed events replayed: {replayed:?}"
    );
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

    // HTTP+JSON at b, from the same Last-Event-ID: the same events under the same ids.
    let mut rest = replicas
        .mesh
        .http
        .get(format!(
            "{}/agents/paced/tasks/{task}:subscribe",
            replicas.b_base
        ))
        .header("last-event-id", last.to_string())
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(rest.status(), 200);
    let tail = read_until(&mut rest, |_| false).await;
    assert_eq!(ids(&tail), all, "{tail:?}");

    // The plain subscriber got the same events after its opening, to the same end.
    let watched = read_until(&mut watcher, |_| false).await;
    assert_eq!(
        watched.last().unwrap().data["result"]["status"]["state"],
        "completed",
        "{watched:?}"
    );
    assert!(
        ids(&opening)
            .into_iter()
            .chain(ids(&watched))
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[1] == w[0] + 1),
        "{opening:?} {watched:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_running_through_one_gateway_is_canceled_through_the_other() {
    let mut replicas = Replicas::start().await;
    let gate = Gate::default();
    replicas.run(paced(gate), "paced").await;
    let mut stream = replicas
        .open(
            "a",
            "paced",
            "message/stream",
            json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
                               "parts": [{"kind": "text", "text": "go"}]}}),
            None,
        )
        .await;
    let seen = read_until(&mut stream, |e| e.last().is_some_and(|e| is_chunk(e, "2"))).await;
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();

    let canceled = replicas
        .call("b", "paced", "tasks/cancel", json!({"id": task}))
        .await;
    assert_eq!(state(result(&canceled)), "canceled", "{canceled}");
    // The stream at a ends with the cancellation, as the agent reported it.
    let rest = read_until(&mut stream, |_| false).await;
    assert_eq!(
        rest.last().unwrap().data["result"]["status"]["state"],
        "canceled",
        "{rest:?}"
    );
    let got = replicas
        .call("b", "paced", "tasks/get", json!({"id": task}))
        .await;
    assert_eq!(state(result(&got)), "canceled", "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_resumes_at_the_other_gateway_with_its_last_event_id() {
    use mesh_gateway::grpc_client::a2a_service_client::A2aServiceClient;
    use mesh_gateway::grpc_client::{SubscribeToTaskRequest, stream_response::Payload};

    let mut replicas = Replicas::start().await;
    let gate = Gate::default();
    replicas.run(paced(gate.clone()), "paced").await;
    let mut first = replicas
        .open(
            "a",
            "paced",
            "message/stream",
            json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
                               "parts": [{"kind": "text", "text": "go"}]}}),
            None,
        )
        .await;
    let seen = read_until(&mut first, |e| e.last().is_some_and(|e| is_chunk(e, "2"))).await;
    drop(first);
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();
    let seen_ids = ids(&seen);

    // SubscribeToTask at b over gRPC, `last-event-id` in the metadata; each event says its
    // id in its metadata (`meshEventId`).
    let channel = tonic::transport::Endpoint::from_shared(replicas.b_base.clone())
        .unwrap()
        .connect()
        .await
        .expect("gRPC connects");
    let mut client = A2aServiceClient::new(channel);
    let mut request = tonic::Request::new(SubscribeToTaskRequest {
        tenant: "paced".into(),
        id: task.clone(),
    });
    request
        .metadata_mut()
        .insert("last-event-id", seen_ids[1].to_string().parse().unwrap());
    let mut stream = tokio::time::timeout(WAIT, client.subscribe_to_task(request))
        .await
        .expect("answered in time")
        .expect("the subscription starts")
        .into_inner();
    let event_id = |metadata: &Option<prost_types::Struct>| -> Option<u64> {
        match &metadata.as_ref()?.fields.get("meshEventId")?.kind {
            Some(prost_types::value::Kind::StringValue(text)) => text.parse().ok(),
            _ => None,
        }
    };
    let mut got = Vec::new();
    let mut opened = false;
    let mut last_state = None;
    while let Some(item) = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the events come")
    {
        let response = item.expect("an event");
        let (id, state) = match response.payload.expect("a payload") {
            Payload::Task(t) => (event_id(&t.metadata), t.status.map(|s| s.state)),
            Payload::Message(m) => (event_id(&m.metadata), None),
            Payload::StatusUpdate(u) => (event_id(&u.metadata), u.status.map(|s| s.state)),
            Payload::ArtifactUpdate(u) => (event_id(&u.metadata), None),
        };
        got.push(id.expect("every event has its id"));
        last_state = state.or(last_state);
        if !opened && got.last() == seen_ids.last() {
            // Caught up with what the client had missed: let the agent go on.
            opened = true;
            gate.open();
        }
    }
    assert_eq!(
        got[..seen_ids.len() - 2].to_vec(),
        seen_ids[2..].to_vec(),
        "the missed events first: {got:?}"
    );
    let all: Vec<u64> = seen_ids[..2]
        .iter()
        .copied()
        .chain(got.iter().copied())
        .collect();
    assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "{all:?}");
    // TASK_STATE_COMPLETED
    assert_eq!(
        last_state,
        Some(3),
        "the stream ends with the task completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_config_set_through_the_other_gateway_is_delivered_once_by_the_bridging_one() {
    let mut hook = Hook::start(0).await;
    let mut replicas = Replicas::start().await;
    let gate = Gate::default();
    replicas.run(slow_agent("slow", gate.clone()), "slow").await;

    // Started at a (non-blocking), its config set at b while a bridges it.
    let mut params = msg03("later");
    params["configuration"] = json!({"blocking": false});
    let started = replicas.call("a", "slow", "message/send", params).await;
    let task = result(&started)["id"].as_str().unwrap().to_owned();
    let set = replicas
        .call(
            "b",
            "slow",
            "tasks/pushNotificationConfig/set",
            json!({"taskId": task, "pushNotificationConfig": {"url": hook.url, "token": "via-b"}}),
        )
        .await;
    assert_eq!(result(&set)["taskId"], json!(task), "{set}");
    let listed = replicas
        .call(
            "a",
            "slow",
            "tasks/pushNotificationConfig/list",
            json!({"id": task}),
        )
        .await;
    assert_eq!(
        result(&listed).as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    gate.open();
    let delivered = hook.until_accepted("completed").await;
    assert!(
        delivered
            .iter()
            .all(|r| r.headers["x-a2a-notification-token"] == "via-b"),
        "the config set through b"
    );
    // Once each: the completed task is not notified again (by the other gateway).
    let got = replicas
        .call("b", "slow", "tasks/get", json!({"id": task}))
        .await;
    assert_eq!(state(result(&got)), "completed", "{got}");
    assert!(
        hook.try_next().is_none(),
        "no second delivery after the final one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_webhook_deliveries_of_a_gateway_that_stopped_are_made_by_the_other() {
    // The receiver refuses the first attempt, and b would try again only seconds later:
    // the delivery is pending when b stops.
    let mut hook = Hook::start(1).await;
    let mut replicas = Replicas::start_with(|b| b.webhook_backoff = Duration::from_secs(2)).await;
    replicas
        .run(mesh_example_agents::echo::agent(), "echo")
        .await;
    let mut params = msg03("notify me");
    params["configuration"] = json!({"pushNotificationConfig": {"url": hook.url, "token": "t"}});
    let sent = replicas.call("b", "echo", "message/send", params).await;
    let task = result(&sent)["id"].as_str().unwrap().to_owned();
    let refused = hook.next().await;
    assert_eq!(refused.answered, 500);

    let Replicas { mesh, b, _db, .. } = replicas;
    b.shutdown().await;
    // a takes b's pending delivery over (its presence lock is free) and makes it.
    let accepted = hook.until_accepted("completed").await;
    let last = accepted.last().unwrap();
    assert_eq!(last.headers["x-a2a-notification-token"], "t");
    assert_eq!(last.body["id"], json!(task), "{:?}", last.body);
    drop(mesh);
}
