//! API keys, the extended card, CORS and `/metrics`, over real HTTP to real agents.

use crate::support::*;
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn};
use mesh_gateway::ApiKey;
use serde_json::{Value, json};

/// An agent that answers with the principal the gateway forwarded.
fn whoami() -> Agent {
    Agent::new(
        "whoami",
        handler_fn(|ctx: TaskContext| async move {
            let principal = ctx
                .caller()
                .and_then(|c| c.principal.clone())
                .unwrap_or_else(|| "nobody".into());
            ctx.text_artifact("principal", principal).await?;
            Ok(Outcome::completed())
        }),
    )
}

fn keys(config: &mut mesh_gateway::GatewayConfig) {
    config.api_keys = vec![
        ApiKey::parse("alice=alice-secret", 1).unwrap(),
        ApiKey::parse("bob=bob-secret", 2).unwrap(),
    ];
    config.cors_origins = vec!["https://app.example".into()];
    config.default_agent = Some("whoami".into());
}

const ALICE: (&str, &str) = ("authorization", "Bearer alice-secret");
const BOB: (&str, &str) = ("x-api-key", "bob-secret");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_guard_everything_but_cards_and_health() {
    let mut mesh = GatewayMesh::start_with(keys).await;
    mesh.run(whoami()).await;

    // No key, a wrong key, garbage: 401 with a JSON-RPC body and WWW-Authenticate.
    for headers in [
        vec![],
        vec![("authorization", "Bearer nope")],
        vec![("authorization", "Bearer")],
        vec![("authorization", "Basic YWxpY2U6eA==")],
        vec![("x-api-key", "")],
        vec![("x-api-key", "alice-secret ")],
    ] {
        let response = mesh
            .http
            .post(mesh.url("/agents/whoami"))
            .header("content-type", "application/json")
            .headers(
                headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            reqwest::header::HeaderName::from_static(k),
                            reqwest::header::HeaderValue::from_str(v).unwrap(),
                        )
                    })
                    .collect(),
            )
            .body(rpc("message/send", msg03("hi")).to_string())
            .send()
            .await
            .unwrap();
        if headers.first().is_some_and(|(_, v)| *v == "alice-secret ") {
            // Surrounding whitespace is not part of a header value: this is alice's key.
            assert_eq!(response.status(), 200);
            continue;
        }
        assert_eq!(response.status(), 401, "{headers:?}");
        let www = response.headers()["www-authenticate"].to_str().unwrap();
        assert!(www.starts_with("Bearer"), "{www}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["data"]["reason"], "UNAUTHENTICATED", "{body}");
    }
    // A header that is not even UTF-8.
    let response = mesh
        .http
        .post(mesh.url("/agents/whoami"))
        .header(
            "authorization",
            reqwest::header::HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
        )
        .body(rpc("message/send", msg03("hi")).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    for path in [
        "/agents",
        "/metrics",
        "/agents/whoami/extendedAgentCard",
        "/agents/whoami/a2a/agent/authenticatedExtendedCard",
        "/a2a/agent/authenticatedExtendedCard",
    ] {
        let (status, _) = mesh.get_json(path).await;
        assert_eq!(status, 401, "{path}");
    }

    // Public: cards and health. The card declares the schemes and the extended card.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(mesh.get_json(path).await.0, 200, "{path}");
    }
    let (status, card) = mesh
        .get_json("/agents/whoami/.well-known/agent-card.json")
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        card.pointer("/securitySchemes/bearer/httpAuthSecurityScheme/scheme"),
        Some(&json!("Bearer")),
        "{card}"
    );
    assert_eq!(
        card.pointer("/securitySchemes/apiKey/apiKeySecurityScheme/name"),
        Some(&json!("X-API-Key"))
    );
    assert_eq!(card["capabilities"]["extendedAgentCard"], true);
    assert_eq!(card["supportsAuthenticatedExtendedCard"], true);

    // With keys: the principal reaches the agent.
    let (status, body) = mesh
        .call_with("whoami", "message/send", msg03("who?"), &[ALICE])
        .await;
    assert_eq!(status, 200, "{body}");
    let task = result(&body);
    assert_eq!(
        task.pointer("/artifacts/0/parts/0/text"),
        Some(&json!("alice"))
    );
    let alice_task = task["id"].as_str().unwrap().to_owned();
    let (_, body) = mesh
        .call_with("whoami", "SendMessage", msg10("who?"), &[BOB])
        .await;
    assert_eq!(
        result(&body).pointer("/task/artifacts/0/parts/0/text"),
        Some(&json!("bob"))
    );

    // Tasks belong to their principal.
    let (_, got) = mesh
        .call_with("whoami", "tasks/get", json!({"id": alice_task}), &[BOB])
        .await;
    assert_eq!(code(&got), -32001, "bob cannot read alice's task");
    let (_, got) = mesh
        .call_with("whoami", "tasks/get", json!({"id": alice_task}), &[ALICE])
        .await;
    assert_eq!(result(&got)["id"], json!(alice_task));
    let (_, listed) = mesh
        .call_with("whoami", "tasks/list", json!({}), &[BOB])
        .await;
    let tasks = result(&listed)["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_ne!(tasks[0]["id"], json!(alice_task));
    let (_, canceled) = mesh
        .call_with("whoami", "tasks/cancel", json!({"id": alice_task}), &[BOB])
        .await;
    assert_eq!(code(&canceled), -32001);

    // The extended card: 0.3, 1.0 and plain GET, with the caller's principal.
    let (_, ext) = mesh
        .call_with(
            "whoami",
            "agent/getAuthenticatedExtendedCard",
            json!({}),
            &[ALICE],
        )
        .await;
    let ext = result(&ext);
    let extensions = ext["capabilities"]["extensions"].as_array().unwrap();
    assert!(
        extensions
            .iter()
            .any(|e| e["params"]["principal"] == "alice"),
        "{ext}"
    );
    assert!(ext.get("securitySchemes").is_some(), "{ext}");
    let (_, ext) = mesh
        .call_with("whoami", "GetExtendedAgentCard", json!({}), &[BOB])
        .await;
    assert!(
        result(&ext).to_string().contains("\"principal\":\"bob\""),
        "{ext}"
    );
    let response = mesh
        .http
        .get(mesh.url("/agents/whoami/extendedAgentCard"))
        .header("x-api-key", "alice-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let ext: Value = response.json().await.unwrap();
    assert_eq!(ext["name"], "whoami");
    // The same card where 0.2-era clients fetch it: under the agent, and at the root for the
    // default agent.
    for path in [
        "/agents/whoami/a2a/agent/authenticatedExtendedCard",
        "/a2a/agent/authenticatedExtendedCard",
    ] {
        let response = mesh
            .http
            .get(mesh.url(path))
            .header("x-api-key", "alice-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let same: Value = response.json().await.unwrap();
        assert_eq!(same, ext, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_and_headers() {
    let mut mesh = GatewayMesh::start_with(keys).await;
    mesh.run(whoami()).await;
    let preflight = mesh
        .http
        .request(reqwest::Method::OPTIONS, mesh.url("/agents/whoami"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, a2a-version, x-api-key, content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], "https://app.example");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in ["authorization", "a2a-version", "x-api-key", "content-type"] {
        assert!(allowed.contains(name), "{allowed}");
    }
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );

    // A real call from the browser origin carries the header too (also on a 401).
    let (status, _) = mesh
        .call_with(
            "whoami",
            "message/send",
            msg03("cors"),
            &[ALICE, ("origin", "https://app.example")],
        )
        .await;
    assert_eq!(status, 200);
    let refused = mesh
        .http
        .post(mesh.url("/agents/whoami"))
        .header("origin", "https://app.example")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(
        refused.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    // Another origin gets no CORS grant.
    let other = mesh
        .http
        .request(reqwest::Method::OPTIONS, mesh.url("/agents/whoami"))
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_origin_and_no_auth_by_default() {
    let mut mesh = GatewayMesh::start_with(|c| c.cors_origins = vec!["*".into()]).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let preflight = mesh
        .http
        .request(reqwest::Method::OPTIONS, mesh.url("/agents/echo"))
        .header("origin", "http://localhost:3000")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
    // No keys: open, and the card declares no schemes and no extended card.
    let (_, card) = mesh
        .get_json("/agents/echo/.well-known/agent-card.json")
        .await;
    assert!(card.get("securitySchemes").is_none(), "{card}");
    assert!(card["capabilities"].get("extendedAgentCard").is_none());
    let body = mesh
        .call("echo", "agent/getAuthenticatedExtendedCard", json!({}))
        .await;
    assert_eq!(code(&body), -32007);
}

fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric line {line_start:?} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_tasks_streams_and_webhooks() {
    let mut hook = Hook::start(1).await;
    let mut mesh = GatewayMesh::start_with(|c| {
        c.allow_private_webhooks = true;
        c.webhook_backoff = std::time::Duration::from_millis(10);
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    for _ in 0..3 {
        mesh.call("echo", "message/send", msg03("count me")).await;
    }
    mesh.call("echo", "tasks/get", json!({"id": "nope"})).await;
    let events = mesh
        .stream("writer", "message/stream", msg03("metrics chunks: 2"))
        .await;
    assert!(!events.is_empty());
    let mut params = msg03("hooked");
    params["configuration"] = json!({"pushNotificationConfig": {"url": hook.url}});
    mesh.call("echo", "message/send", params).await;
    hook.until_accepted("completed").await;
    mesh.post("/agents/echo", &json!({"not": "json-rpc"})).await;

    // The receiver has answered; the gateway counts the delivery when the answer reaches it.
    let deadline = std::time::Instant::now() + WAIT;
    let text = loop {
        let response = mesh.http.get(mesh.url("/metrics")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        if metric(&text, "mesh_gateway_webhook_deliveries_total") >= 1.0 {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        metric(
            &text,
            "mesh_gateway_requests_total{method=\"SendMessage\",outcome=\"ok\"}"
        ) >= 4.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "mesh_gateway_requests_total{method=\"GetTask\",outcome=\"error\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "mesh_gateway_requests_total{method=\"SendStreamingMessage\",outcome=\"ok\"}"
        ),
        1.0
    );
    assert!(
        metric(
            &text,
            "mesh_gateway_requests_total{method=\"invalid\",outcome=\"error\"}"
        ) >= 1.0
    );
    assert!(metric(&text, "mesh_gateway_request_duration_seconds_count") >= 6.0);
    assert!(text.contains("mesh_gateway_request_duration_seconds_bucket{le=\"+Inf\"}"));
    assert!(metric(&text, "mesh_gateway_tasks{state=\"completed\"}") >= 5.0);
    assert_eq!(metric(&text, "mesh_gateway_sse_streams_open"), 0.0);
    assert_eq!(metric(&text, "mesh_gateway_bus_reconnects_total"), 0.0);
    // The stream ended: what its window borrowed is back.
    assert_eq!(metric(&text, "mesh_gateway_flow_window_lent"), 0.0);
    assert!(metric(&text, "mesh_gateway_webhook_deliveries_total") >= 1.0);
    assert!(
        metric(
            &text,
            "mesh_gateway_webhook_failures_total{reason=\"retry\"}"
        ) >= 1.0
    );
    assert_eq!(metric(&text, "mesh_gateway_store_pending_writes"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_reconnects_and_open_streams_are_counted() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let scrape = |mesh: &GatewayMesh| {
        let http = mesh.http.clone();
        let url = mesh.url("/metrics");
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };

    // A stream held open counts while it is open.
    let mut response = mesh.open_sse("slow", "message/stream", msg03("hold")).await;
    let first = tokio::time::timeout(WAIT, response.chunk())
        .await
        .expect("the first event in time")
        .unwrap();
    assert!(first.is_some());
    assert_eq!(
        metric(&scrape(&mesh).await, "mesh_gateway_sse_streams_open"),
        1.0
    );
    gate.open();
    read_sse(response).await;
    assert_eq!(
        metric(&scrape(&mesh).await, "mesh_gateway_sse_streams_open"),
        0.0
    );

    // The broker goes away and comes back: one reconnect.
    mesh.broker.restart().await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let text = scrape(&mesh).await;
        if metric(&text, "mesh_gateway_bus_reconnects_total") >= 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a reconnect is counted:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The head of the answer to `request`, sent as it is over a fresh HTTP/1.1 connection.
async fn raw_head(mesh: &GatewayMesh, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(mesh.gateway.local_addr())
        .await
        .unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let read = async {
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(WAIT, read).await.expect("an answer");
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_its_body_is_read_says_connection_close() {
    let mut mesh = GatewayMesh::start_with(|c| {
        keys(c);
        c.body_limit = 1024;
    })
    .await;
    mesh.run(whoami()).await;
    let body = rpc("message/send", json!({})).to_string();
    let head = raw_head(
        &mesh,
        format!(
            "POST /agents/whoami HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("connection: close"), "a keyless POST: {head}");

    // Too large to read, with a key: the same.
    let head = raw_head(
        &mesh,
        "POST /agents/whoami HTTP/1.1\r\nhost: x\r\nx-api-key: alice-secret\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{".to_owned(),
    )
    .await;
    assert!(head.starts_with("http/1.1 413"), "{head}");
    assert!(head.contains("connection: close"), "{head}");

    // A request that was read keeps its connection.
    let head = raw_head(
        &mesh,
        format!(
            "POST /agents/whoami HTTP/1.1\r\nhost: x\r\nx-api-key: alice-secret\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
}
