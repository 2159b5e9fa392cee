//! The web console's routes through real HTTP: `GET /` leads to it, its page and assets
//! (public, embedded, kept to their origin), the live feed of the agents, the tasks across
//! agents and one task's timeline, with and without API keys.

use crate::support::{GatewayMesh, WAIT, msg03, read_sse, rpc};
use futures_util::StreamExt;
use mesh_gateway::ApiKey;
use serde_json::{Value, json};

/// A client that does not follow redirects.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WAIT)
        .build()
        .unwrap()
}

fn message(text: &str) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// Sends a message through the HTTP+JSON binding and waits for its answer; the task.
async fn send(mesh: &GatewayMesh, agent: &str, body: Value, headers: &[(&str, &str)]) -> Value {
    let mut request = mesh
        .http
        .post(mesh.url(&format!("/agents/{agent}/message:send")))
        .header("content-type", "application/a2a+json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    answer["task"].clone()
}

/// Streams a message through the HTTP+JSON binding to the stream's end; its events.
async fn stream(mesh: &GatewayMesh, agent: &str, body: Value) -> Vec<Value> {
    let response = mesh
        .http
        .post(mesh.url(&format!("/agents/{agent}/message:stream")))
        .header("content-type", "application/a2a+json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    read_sse(response).await
}

async fn get(mesh: &GatewayMesh, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = mesh.http.get(mesh.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_root_leads_to_the_console_and_post_root_stays_json_rpc() {
    let mut mesh = GatewayMesh::start_with(|c| c.default_agent = Some("echo".into())).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let client = no_redirects();
    for path in ["/", "/ui"] {
        let response = client.get(mesh.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 303, "{path}");
        assert_eq!(response.headers()["location"], "/ui/", "{path}");
    }
    let (status, body) = mesh.post("/", &rpc("message/send", msg03("hi"))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("result").is_some(), "JSON-RPC at POST /: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_assets_are_embedded_and_kept_to_their_origin() {
    let mesh = GatewayMesh::start().await;
    for (path, content_type, needle) in [
        (
            "/ui/",
            "text/html",
            "<script type=\"module\" src=\"app.js\">",
        ),
        ("/ui/app.js", "text/javascript", "/ui/api/agents/events"),
        ("/ui/style.css", "text/css", ".agents"),
    ] {
        let response = mesh.http.get(mesh.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(content_type),
            "{path}: {headers:?}"
        );
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let text = response.text().await.unwrap();
        assert!(text.contains(needle), "{path} holds {needle:?}");
        // Nothing is loaded from another origin.
        assert!(
            !text.contains("https://") && !text.contains("http://"),
            "{path} names no other origin"
        );
    }
    let (status, _) = mesh.get_json("/ui/nothing-here").await;
    assert_eq!(status, 404);
}

/// Reads one server-sent event (its `event:` name and `data:`) within [`WAIT`].
struct Events {
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        Events {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = "message".to_owned();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        name = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return (name, serde_json::from_str(&data).expect("JSON data"));
            }
            let chunk = tokio::time::timeout(WAIT, self.stream.next())
                .await
                .expect("an event within the wait")
                .expect("the stream stays open")
                .expect("a chunk");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next `agents` event whose entry for `name` satisfies `check`.
    async fn until(&mut self, name: &str, check: impl Fn(&Value) -> bool) -> Value {
        loop {
            let (event, data) = self.next().await;
            assert_eq!(event, "agents");
            let entry = data["agents"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["name"] == name)
                .cloned();
            if let Some(entry) = entry.filter(|e| check(e)) {
                return entry;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_feed_says_when_an_agent_comes_and_goes() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let response = mesh
        .http
        .get(mesh.url("/ui/api/agents/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = Events::new(response);
    // The agents as they are now, in the body of GET /agents.
    let (event, now) = events.next().await;
    assert_eq!(event, "agents");
    let (_, listed) = mesh.get_json("/agents").await;
    // Heartbeats move `lastSeen` without an event: the rest is the same.
    let without_last_seen = |mut body: Value| {
        for agent in body["agents"].as_array_mut().unwrap() {
            agent.as_object_mut().unwrap().remove("lastSeen");
        }
        body
    };
    assert_eq!(without_last_seen(now.clone()), without_last_seen(listed));
    let echo = &now["agents"][0];
    assert_eq!(
        (echo["name"].as_str(), echo["online"].as_bool()),
        (Some("echo"), Some(true))
    );

    // An agent that comes, then goes.
    let writer = mesh.start_agent(mesh_example_agents::writer::agent()).await;
    let entry = events.until("writer", |w| w["online"] == true).await;
    assert_eq!(entry["instances"], 1);
    assert!(entry["description"].as_str().unwrap().contains("streamed"));
    writer.shutdown().await;
    let entry = events.until("writer", |w| w["online"] == false).await;
    assert_eq!(entry["instances"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_list_spans_agents_filters_and_pages() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let mut echoed = Vec::new();
    for i in 0..3 {
        let task = send(&mesh, "echo", message(&format!("hello {i}")), &[]).await;
        echoed.push(task["id"].as_str().unwrap().to_owned());
    }
    let asked = send(&mesh, "flight-booker", message("a flight"), &[]).await;
    assert_eq!(asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let asked_id = asked["id"].as_str().unwrap();

    let (status, all) = get(&mesh, "/ui/api/tasks", &[]).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["totalSize"], 4);
    let first = &all["tasks"][0];
    assert_eq!(first["id"], asked_id, "newest first: {all}");
    assert_eq!(first["agent"], "flight-booker");
    assert_eq!(first["state"], "input-required");
    assert_eq!(first["contextId"], asked["contextId"]);
    assert!(first["events"].as_u64().unwrap() >= 1, "{first}");
    assert!(first["updated"].as_str().unwrap().ends_with('Z'));

    let (_, by_agent) = get(&mesh, "/ui/api/tasks?agent=echo", &[]).await;
    assert_eq!(by_agent["totalSize"], 3);
    assert!(
        by_agent["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["agent"] == "echo")
    );
    for state in ["input-required", "TASK_STATE_INPUT_REQUIRED"] {
        let (_, waiting) = get(&mesh, &format!("/ui/api/tasks?state={state}"), &[]).await;
        assert_eq!(waiting["totalSize"], 1, "{state}");
        assert_eq!(waiting["tasks"][0]["id"], asked_id);
    }
    let context = asked["contextId"].as_str().unwrap();
    let (_, in_context) = get(&mesh, &format!("/ui/api/tasks?contextId={context}"), &[]).await;
    assert_eq!(in_context["totalSize"], 1);

    // Pages of two: every task once.
    let mut seen = Vec::new();
    let mut token = String::new();
    for _ in 0..3 {
        let (status, page) = get(
            &mesh,
            &format!("/ui/api/tasks?pageSize=2&pageToken={token}"),
            &[],
        )
        .await;
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_owned()),
        );
        token = page["nextPageToken"].as_str().unwrap().to_owned();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(echoed.iter().all(|id| seen.contains(id)));

    for bad in ["state=sleeping", "pageSize=many", "pageSize=1000"] {
        let (status, body) = get(&mesh, &format!("/ui/api/tasks?{bad}"), &[]).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_timeline_is_its_logged_events_in_order_with_their_times() {
    // The durable store keeps a finished task's whole log.
    let dir = std::env::temp_dir().join(format!(
        "mesh-gateway-console-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let mut mesh = GatewayMesh::start_with(|c| c.data_dir = Some(dir.clone())).await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    // As the console chats: streamed, the question answered in the same task.
    let asked = stream(&mesh, "flight-booker", message("a flight")).await;
    let id = asked[0]["task"]["id"].as_str().unwrap().to_owned();
    let id = id.as_str();
    let mut answer = message("JFK to LHR on 2026-12-24");
    answer["message"]["taskId"] = json!(id);
    let booked = stream(&mesh, "flight-booker", answer).await;
    assert_eq!(
        booked.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    let (status, timeline) = get(&mesh, &format!("/ui/api/tasks/{id}/events"), &[]).await;
    assert_eq!(status, 200, "{timeline}");
    assert_eq!(timeline["taskId"], id);
    assert_eq!(timeline["agent"], "flight-booker");
    assert_eq!(timeline["state"], "completed");
    assert_eq!(timeline["first"], Value::Null, "nothing forgotten");
    assert_eq!(timeline["more"], false);
    let events = timeline["events"].as_array().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "in order, from 1"
    );
    assert_eq!(timeline["next"], *seqs.last().unwrap());
    assert!(events[0]["event"]["task"].is_object(), "{}", events[0]);
    let states: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event"]["statusUpdate"]["status"]["state"].as_str())
        .collect();
    assert!(states.contains(&"TASK_STATE_INPUT_REQUIRED"), "{states:?}");
    assert_eq!(states.last(), Some(&"TASK_STATE_COMPLETED"));
    assert!(
        events
            .iter()
            .any(|e| e["event"]["artifactUpdate"].is_object())
    );
    let times: Vec<&str> = events.iter().map(|e| e["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // Paged with after and limit.
    let (_, page) = get(
        &mesh,
        &format!("/ui/api/tasks/{id}/events?after=2&limit=2"),
        &[],
    )
    .await;
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![3, 4]);
    assert_eq!(
        (page["next"].as_u64(), page["more"].as_bool()),
        (Some(4), Some(true))
    );

    let (status, _) = get(&mesh, "/ui/api/tasks/no-such-task/events", &[]).await;
    assert_eq!(status, 404);
    let (status, _) = get(&mesh, &format!("/ui/api/tasks/{id}/events?after=x"), &[]).await;
    assert_eq!(status, 400);
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_memory_store_a_finished_tasks_timeline_says_its_events_are_gone() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let task = send(&mesh, "echo", message("hello"), &[]).await;
    let id = task["id"].as_str().unwrap();
    let (status, timeline) = get(&mesh, &format!("/ui/api/tasks/{id}/events"), &[]).await;
    assert_eq!(status, 200, "{timeline}");
    assert_eq!(timeline["state"], "completed");
    assert!(timeline["first"].as_u64().is_some(), "{timeline}");
    assert_eq!(timeline["events"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_api_keys_the_page_is_public_and_its_feeds_are_each_principals() {
    let mut mesh = GatewayMesh::start_with(|c| {
        c.api_keys = vec![
            ApiKey::parse("alice=alice-secret", 1).unwrap(),
            ApiKey::parse("bob=bob-secret", 2).unwrap(),
        ];
        c.default_agent = Some("echo".into());
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    const ALICE: (&str, &str) = ("authorization", "Bearer alice-secret");
    const BOB: (&str, &str) = ("x-api-key", "bob-secret");

    // The page, without a key (it asks for one).
    let client = no_redirects();
    for path in ["/", "/ui", "/ui/", "/ui/app.js", "/ui/style.css"] {
        let status = client.get(mesh.url(path)).send().await.unwrap().status();
        assert!(status == 200 || status == 303, "{path}: {status}");
    }
    // POST / is still JSON-RPC and needs a key.
    let (status, _) = mesh.post("/", &rpc("message/send", msg03("hi"))).await;
    assert_eq!(status, 401);

    // The feeds need one.
    for path in [
        "/ui/api/agents/events",
        "/ui/api/tasks",
        "/ui/api/tasks/t/events",
    ] {
        let (status, _) = get(&mesh, path, &[]).await;
        assert_eq!(status, 401, "{path}");
    }
    let response = mesh
        .http
        .get(mesh.url("/ui/api/agents/events"))
        .header(ALICE.0, ALICE.1)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    drop(response);

    // Alice's task is hers: Bob lists none and cannot read its timeline.
    let task = send(&mesh, "echo", message("hello"), &[ALICE]).await;
    let id = task["id"].as_str().unwrap();
    let (_, alices) = get(&mesh, "/ui/api/tasks", &[ALICE]).await;
    assert_eq!(alices["totalSize"], 1);
    assert_eq!(alices["tasks"][0]["id"], id);
    let (_, bobs) = get(&mesh, "/ui/api/tasks", &[BOB]).await;
    assert_eq!(bobs["totalSize"], 0);
    let (status, _) = get(&mesh, &format!("/ui/api/tasks/{id}/events"), &[ALICE]).await;
    assert_eq!(status, 200);
    let (status, _) = get(&mesh, &format!("/ui/api/tasks/{id}/events"), &[BOB]).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bus_view_shows_the_namespaces_traffic_to_a_few_readers_without_api_keys() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let open = || async { mesh.http.get(mesh.url("/ui/api/bus")).send().await.unwrap() };
    let response = open().await;
    assert_eq!(response.status(), 200);
    let mut events = Events::new(response);
    // The view subscribes before it answers, so this request's traffic is in it.
    let task = send(&mesh, "echo", message("seen on the bus"), &[]).await;
    let id = task["id"].as_str().unwrap();
    let mut topics = Vec::new();
    loop {
        let (event, data) = events.next().await;
        assert_eq!(event, "bus");
        let topic = data["topic"].as_str().unwrap().to_owned();
        assert!(
            topic.starts_with(&format!("{}/", mesh.namespace)),
            "{topic}"
        );
        assert!(data["bytes"].as_u64().unwrap() > 0);
        topics.push(topic);
        if data["payload"].to_string().contains(id)
            && data["payload"].to_string().contains("completed")
        {
            break;
        }
    }
    assert!(topics.iter().any(|t| t.contains("echo")), "{topics:?}");

    // At most MAX_BUS_VIEWS at once (this one and three more); a closed one frees its place.
    let mut more = Vec::new();
    for _ in 0..3 {
        let response = open().await;
        assert_eq!(response.status(), 200);
        more.push(response);
    }
    let refused = open().await;
    assert_eq!(refused.status(), 503);
    drop(events);
    drop(more);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let response = open().await;
        if response.status() == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a closed view frees its place"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_api_keys_only_a_console_admin_watches_the_bus() {
    let mesh = GatewayMesh::start_with(|c| {
        c.api_keys = vec![
            ApiKey::parse("alice=alice-secret", 1).unwrap(),
            ApiKey::parse("root=root-secret", 2).unwrap(),
        ];
        c.console_admins = vec!["root".into()];
    })
    .await;
    let (status, body) = get(
        &mesh,
        "/ui/api/bus",
        &[("authorization", "Bearer alice-secret")],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--console-admin"));
    // The admin gets the feed (its head: the body is an endless stream).
    let response = mesh
        .http
        .get(mesh.url("/ui/api/bus"))
        .header("authorization", "Bearer root-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
}
