//! The HTTP+JSON binding (spec 1.0 §11) through real HTTP: its paths under an agent, at the
//! root for the default agent and in their `/{tenant}/…` forms, its streams, and every check
//! the JSON-RPC binding makes before the bus, answered as a `google.rpc.Status` (§11.6).

use crate::support::*;
use serde_json::{Value, json};

fn message(text: &str) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// Sends a request; the status, the content type and the body as JSON (Null when empty).
async fn call(
    mesh: &GatewayMesh,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, String, Value) {
    let mut request = mesh.http.request(method, mesh.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/a2a+json")
            .body(body.to_string());
    }
    let response = request.send().await.expect("the gateway answers");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, content_type, body)
}

/// The `ErrorInfo` reason and the status of a §11.6 error body.
fn reason(body: &Value) -> (&str, &str) {
    let error = &body["error"];
    let info = error["details"]
        .as_array()
        .and_then(|d| {
            d.iter()
                .find(|d| d["@type"] == mesh_core::error::ERROR_INFO_TYPE)
        })
        .unwrap_or_else(|| panic!("an ErrorInfo detail: {body}"));
    assert_eq!(info["domain"], "a2a-protocol.org", "{body}");
    (
        info["reason"].as_str().unwrap_or(""),
        error["status"].as_str().unwrap_or(""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_answers_under_the_agent_at_the_root_and_with_a_tenant() {
    let mut mesh = GatewayMesh::start_with(|c| {
        c.default_agent = Some("echo".into());
        c.push_notifications = false;
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    use reqwest::Method as M;

    let (status, content_type, sent) = call(
        &mesh,
        M::POST,
        "/agents/echo/message:send",
        Some(&message("hello")),
        &[("a2a-version", "1.0")],
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(content_type, "application/a2a+json");
    assert_eq!(
        sent["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );
    let id = sent["task"]["id"].as_str().unwrap().to_owned();
    let context = sent["task"]["contextId"].as_str().unwrap().to_owned();

    // The same agent at the root (the default agent) and with a tenant, there and under it.
    for path in [
        "/message:send",
        "/echo/message:send",
        "/agents/echo/echo/message:send",
    ] {
        let (status, _, body) = call(&mesh, M::POST, path, Some(&message("again")), &[]).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    }
    let (status, _, body) = call(
        &mesh,
        M::POST,
        "/agents/echo/writer/message:send",
        Some(&message("x")),
        &[],
    )
    .await;
    assert_eq!(status, 404, "a tenant that is not the agent: {body}");

    let (status, _, task) = call(
        &mesh,
        M::GET,
        &format!("/agents/echo/tasks/{id}?historyLength=1"),
        None,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(
        task["id"],
        id.as_str(),
        "GetTask answers a bare task: {task}"
    );
    assert_eq!(task["history"].as_array().map(Vec::len), Some(1), "{task}");

    let (status, _, list) = call(
        &mesh,
        M::GET,
        &format!("/agents/echo/tasks?contextId={context}&pageSize=1&includeArtifacts=true"),
        None,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["totalSize"], 1);
    assert!(list["tasks"][0].get("artifacts").is_some(), "{list}");

    let (status, _, body) = call(
        &mesh,
        M::POST,
        &format!("/agents/echo/tasks/{id}:cancel"),
        None,
        &[],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        reason(&body),
        ("TASK_NOT_CANCELABLE", "FAILED_PRECONDITION")
    );
    for method in [M::POST, M::GET] {
        let (status, _, body) = call(
            &mesh,
            method,
            &format!("/agents/echo/tasks/{id}:subscribe"),
            None,
            &[],
        )
        .await;
        assert_eq!(
            status, 400,
            "a finished task has nothing to subscribe to: {body}"
        );
        assert_eq!(reason(&body).0, "UNSUPPORTED_OPERATION");
    }

    // Without push notifications and without API keys.
    let (status, _, body) = call(
        &mesh,
        M::POST,
        &format!("/agents/echo/tasks/{id}/pushNotificationConfigs"),
        Some(&json!({"url": "https://example.com/hook"})),
        &[],
    )
    .await;
    assert_eq!(
        (status, reason(&body).0),
        (400, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        "{body}"
    );
    let (status, _, body) = call(&mesh, M::GET, "/agents/echo/extendedAgentCard", None, &[]).await;
    assert_eq!(
        (status, reason(&body).0),
        (400, "UNSUPPORTED_OPERATION"),
        "{body}"
    );

    // The card lists the binding at the agent's URL.
    let (_, _, card) = call(
        &mesh,
        M::GET,
        "/agents/echo/.well-known/agent-card.json",
        None,
        &[("a2a-version", "1.0")],
    )
    .await;
    assert!(
        card["supportedInterfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["protocolBinding"] == "HTTP+JSON"
                && i["url"] == mesh.url("/agents/echo").as_str()
                && i["protocolVersion"] == "1.0"),
        "{card}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_google_rpc_statuses_with_the_status_of_the_error_table() {
    let mut mesh = GatewayMesh::start_with(|c| c.body_limit = 4096).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    use reqwest::Method as M;

    let (status, content_type, body) =
        call(&mesh, M::GET, "/agents/echo/tasks/no-such-task", None, &[]).await;
    assert_eq!(
        (status, content_type.as_str()),
        (404, "application/a2a+json")
    );
    assert_eq!(body["error"]["code"], 404);
    assert_eq!(reason(&body), ("TASK_NOT_FOUND", "NOT_FOUND"));

    let (status, _, body) = call(
        &mesh,
        M::POST,
        "/agents/echo/message:send",
        Some(&message("hi")),
        &[("a2a-version", "0.3")],
    )
    .await;
    assert_eq!(
        (status, reason(&body).0),
        (400, "VERSION_NOT_SUPPORTED"),
        "{body}"
    );

    let response = mesh
        .http
        .post(mesh.url("/agents/echo/message:send"))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(reason(&body).0, "CONTENT_TYPE_NOT_SUPPORTED", "{body}");

    let huge = message(&"x".repeat(10_000));
    let (status, _, body) = call(
        &mesh,
        M::POST,
        "/agents/echo/message:send",
        Some(&huge),
        &[],
    )
    .await;
    assert_eq!(
        (status, reason(&body).0),
        (413, "INVALID_REQUEST"),
        "{body}"
    );

    let (status, _, body) = call(
        &mesh,
        M::POST,
        "/agents/echo/message:send",
        Some(&json!({"message": {"parts": 3}})),
        &[],
    )
    .await;
    assert_eq!((status, reason(&body).0), (400, "INVALID_PARAMS"), "{body}");
    let (status, _, body) =
        call(&mesh, M::GET, "/agents/echo/tasks?pageSize=lots", None, &[]).await;
    assert_eq!((status, reason(&body).0), (400, "INVALID_PARAMS"), "{body}");

    let (status, _, body) = call(&mesh, M::DELETE, "/agents/echo/message:send", None, &[]).await;
    assert_eq!(
        (status, reason(&body).0),
        (405, "METHOD_NOT_FOUND"),
        "{body}"
    );
    let (status, _, body) = call(&mesh, M::GET, "/agents/echo/no/such/thing", None, &[]).await;
    assert_eq!(
        (status, reason(&body).0),
        (404, "METHOD_NOT_FOUND"),
        "{body}"
    );

    // No default agent: the root operations say so; paths that are no operation stay 404.
    let (status, _, body) = call(&mesh, M::POST, "/message:send", Some(&message("hi")), &[]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("no default agent"), "{body}");
    let (status, _, body) = call(&mesh, M::GET, "/favicon.ico", None, &[]).await;
    assert_eq!((status, body), (404, json!({"error": "not found"})));

    // A stream that fails before its first event is a plain error, not a stream.
    let (status, content_type, body) = call(
        &mesh,
        M::POST,
        "/agents/ghost/message:stream",
        Some(&message("hi")),
        &[],
    )
    .await;
    assert_eq!((status, reason(&body).0), (400, "INVALID_PARAMS"), "{body}");
    assert_eq!(content_type, "application/a2a+json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_server_sent_stream_responses_to_the_final_status() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let response = mesh
        .http
        .post(mesh.url("/agents/writer/message:stream"))
        .header("content-type", "application/a2a+json")
        .body(message("rivers chunks: 3").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = read_sse(response).await;
    assert!(
        events[0].get("task").is_some(),
        "the stream opens with the task: {events:?}"
    );
    let chunks = events
        .iter()
        .filter(|e| e.get("artifactUpdate").is_some())
        .count();
    assert_eq!(chunks, 3, "{events:?}");
    let last = events.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{last}"
    );
    assert!(
        events.iter().all(|e| e.get("jsonrpc").is_none()),
        "bare StreamResponse objects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_guard_the_binding_and_its_refusal_is_a_status() {
    let mut mesh = GatewayMesh::start_with(|c| {
        c.api_keys = vec![mesh_gateway::ApiKey::parse("alice=alice-secret", 1).unwrap()];
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    use reqwest::Method as M;
    let (status, _, body) = call(
        &mesh,
        M::POST,
        "/agents/echo/message:send",
        Some(&message("hi")),
        &[],
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(reason(&body), ("UNAUTHENTICATED", "UNAUTHENTICATED"));
    let (status, _, body) = call(
        &mesh,
        M::POST,
        "/agents/echo/message:send",
        Some(&message("hi")),
        &[("x-api-key", "alice-secret")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The extended card, for the caller it names.
    let (status, _, card) = call(
        &mesh,
        M::GET,
        "/agents/echo/extendedAgentCard",
        None,
        &[
            ("authorization", "Bearer alice-secret"),
            ("a2a-version", "1.0"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{card}");
    assert!(
        card.to_string().contains("\"principal\":\"alice\""),
        "{card}"
    );
    assert!(
        card.get("url").is_none(),
        "a 1.0 client gets the 1.0 card: {card}"
    );
}
