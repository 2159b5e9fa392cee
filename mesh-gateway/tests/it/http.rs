//! The HTTP surface besides JSON-RPC: agent cards, the agent list, health.

use crate::support::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_cards_for_both_generations_with_caching_headers() {
    let mut mesh = GatewayMesh::start_with(|c| {
        c.default_agent = Some("echo".into());
        c.public_url = Some("https://a2a.example.test/mesh/".into());
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    for path in [
        "/agents/echo/.well-known/agent-card.json",
        "/agents/echo/.well-known/agent.json",
        "/agents/echo/agentCard",
    ] {
        let response = mesh.http.get(mesh.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let etag = response.headers()["etag"].to_str().unwrap().to_owned();
        assert!(response.headers().contains_key("last-modified"));
        assert!(response.headers().contains_key("cache-control"));
        let card: Value = response.json().await.unwrap();
        assert_eq!(card["name"], "echo");
        assert_eq!(card["url"], "https://a2a.example.test/mesh/agents/echo");
        assert_eq!(card["preferredTransport"], "JSONRPC");
        assert_eq!(card["protocolVersion"], "0.3.0");
        let interfaces = card["supportedInterfaces"].as_array().unwrap();
        let versions: Vec<&str> = interfaces
            .iter()
            .map(|i| i["protocolVersion"].as_str().unwrap())
            .collect();
        assert_eq!(versions, ["1.0", "0.3", "1.0", "1.0"], "{card}");
        let bindings: Vec<&str> = interfaces
            .iter()
            .map(|i| i["protocolBinding"].as_str().unwrap())
            .collect();
        assert_eq!(
            bindings,
            ["JSONRPC", "JSONRPC", "HTTP+JSON", "GRPC"],
            "{card}"
        );
        assert!(
            interfaces[..3].iter().all(|i| i["url"] == card["url"]),
            "{card}"
        );
        // gRPC has no path: the public URL's scheme and authority, the agent as tenant.
        assert_eq!(interfaces[3]["url"], "https://a2a.example.test", "{card}");
        assert_eq!(interfaces[3]["tenant"], "echo", "{card}");

        let cached = mesh
            .http
            .get(mesh.url(path))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(cached.status(), 304);
    }

    for path in [
        "/.well-known/agent-card.json",
        "/.well-known/agent.json",
        "/agentCard",
    ] {
        let card: Value = mesh
            .http
            .get(mesh.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(card["name"], "echo");
        assert_eq!(card["url"], "https://a2a.example.test/mesh/");
    }

    let missing = mesh
        .http
        .get(mesh.url("/agents/ghost/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("ghost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn card_urls_default_to_the_bound_address_and_no_default_agent_is_404() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let card: Value = mesh
        .http
        .get(mesh.url("/agents/echo/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["url"], json!(format!("{}/agents/echo", mesh.base)));
    let root = mesh
        .http
        .get(mesh.url("/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(root.status(), 404);
    let body: Value = root.json().await.unwrap();
    assert_eq!(body["agents"], json!(["echo"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_and_health() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let second = mesh.start_agent(mesh_example_agents::echo::agent()).await;
    mesh.agents.push(second);
    assert!(
        mesh.gateway
            .registry()
            .agent("echo")
            .unwrap()
            .instances
            .len()
            == 2
            || wait_instances(&mesh, 2).await
    );
    let agents: Value = mesh
        .http
        .get(mesh.url("/agents"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let echo = &agents["agents"][0];
    assert_eq!(echo["name"], "echo");
    assert_eq!(echo["online"], true);
    assert_eq!(echo["instances"], 2);
    assert_eq!(echo["skills"][0]["id"], "echo");
    let last_seen = echo["lastSeen"].as_str().unwrap();
    assert!(chrono_like(last_seen), "{last_seen}");

    let health = mesh.http.get(mesh.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = mesh.http.get(mesh.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let nothing = mesh
        .http
        .get(mesh.url("/nothing/here"))
        .send()
        .await
        .unwrap();
    assert_eq!(nothing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_and_returns() {
    let mut mesh = GatewayMesh::start().await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let stream = mesh.open_sse("slow", "message/stream", msg03("wait")).await;
    assert_eq!(stream.status(), 200);
    let GatewayMesh { gateway, .. } = mesh;
    tokio::time::timeout(WAIT, gateway.shutdown())
        .await
        .expect("shutdown returns");
    let text = tokio::time::timeout(WAIT, stream.text())
        .await
        .expect("stream ends");
    assert!(text.is_ok() || text.is_err());
    gate.open();
}

async fn wait_instances(mesh: &GatewayMesh, n: usize) -> bool {
    let mut events = mesh.gateway.registry().subscribe();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if mesh
            .gateway
            .registry()
            .agent("echo")
            .is_some_and(|a| a.instances.len() == n)
        {
            return true;
        }
        if tokio::time::timeout_at(deadline, events.recv())
            .await
            .is_err()
        {
            return false;
        }
    }
}

fn chrono_like(s: &str) -> bool {
    s.len() >= 20 && s.as_bytes()[4] == b'-' && s.contains('T')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_0_client_gets_the_1_0_card_and_others_the_combined_one() {
    let mut mesh = GatewayMesh::start_with(|c| c.default_agent = Some("echo".into())).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    // The members the 1.0 AgentCard has (a2a.proto, in JSON's camelCase): its schema allows
    // no other.
    const V1_MEMBERS: [&str; 14] = [
        "name",
        "description",
        "supportedInterfaces",
        "provider",
        "version",
        "documentationUrl",
        "capabilities",
        "securitySchemes",
        "securityRequirements",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
        "signatures",
        "iconUrl",
    ];
    for path in [
        "/agents/echo/.well-known/agent-card.json",
        "/.well-known/agent-card.json",
    ] {
        let response = mesh
            .http
            .get(mesh.url(path))
            .header("A2A-Version", "1.0")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["vary"], "A2A-Version", "{path}");
        let card: Value = response.json().await.unwrap();
        for member in card.as_object().unwrap().keys() {
            assert!(
                V1_MEMBERS.contains(&member.as_str()),
                "{path}: {member} in {card}"
            );
        }
        assert_eq!(card["name"], "echo");
        assert!(
            card["supportedInterfaces"]
                .as_array()
                .is_some_and(|i| !i.is_empty()),
            "{card}"
        );

        // Without A2A-Version (0.3 by spec 1.0 §3.6): the combined card 0.3 clients read.
        let response = mesh.http.get(mesh.url(path)).send().await.unwrap();
        assert_eq!(response.headers()["vary"], "A2A-Version");
        let combined: Value = response.json().await.unwrap();
        assert_eq!(combined["protocolVersion"], "0.3.0", "{combined}");
        assert!(combined["url"].is_string(), "{combined}");
    }
}

// The HTTP server's bounds: past --max-connections a new connection is closed as soon as it
// is accepted (and counted) while the open ones are served; a client that connects and sends
// nothing, or half a request head, is closed after the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded_in_number_and_in_time_to_a_request() {
    use tokio::io::AsyncWriteExt;
    let mesh = GatewayMesh::start_with(|c| {
        c.max_connections = 2;
        c.header_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let addr = mesh.gateway.local_addr();
    let silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n")
        .await
        .unwrap();
    // The third connection, past the limit, has its whole request ignored: closed unanswered.
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut third).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    // The other two are closed once the header timeout is past.
    for (name, mut stream) in [("silent", silent), ("half a head", half)] {
        let answer = read_to_close(&mut stream).await;
        assert!(
            answer.is_empty(),
            "{name}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    // Their places free, requests are served again; the refusal was counted.
    let refused = metric(&mesh, "mesh_gateway_http_connections_refused_total").await;
    assert_eq!(refused, 1.0);
    // A closed connection leaves the gauge when its task ends, just after its client read
    // the close.
    only_the_metrics_connection_open(&mesh, std::time::Duration::from_secs(5), "").await;
}

/// Waits (at most `within`) until the open-connections gauge shows only the connection
/// that reads it.
async fn only_the_metrics_connection_open(
    mesh: &GatewayMesh,
    within: std::time::Duration,
    case: &str,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let open = metric(mesh, "mesh_gateway_http_connections_open").await;
        if open == 1.0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{case}: {open} connections still counted open after {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

// A client that stops reading its answer is cut off once it has accepted no byte for the
// write timeout, whether its event stream was handed off to the gateway's own writer
// (keep-alive) or stays with hyper (close): its connection leaves the open count, while the
// task goes on and the other connections are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_the_write_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut mesh = GatewayMesh::start_with(|c| {
        c.write_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let addr = mesh.gateway.local_addr();
    for connection in ["keep-alive", "close"] {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        // A small window, so that the gateway's writes soon wait for room.
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stalled = socket.connect(addr).await.unwrap();
        let body = rpc("message/stream", msg03("stall chunks: 100000")).to_string();
        let request = format!(
            "POST /agents/writer HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
             Accept: text/event-stream\r\nConnection: {connection}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stalled.write_all(request.as_bytes()).await.unwrap();
        // The stream's first event (the task), then nothing more is read.
        let marker = r#""kind":"task","id":""#;
        let mut head = Vec::new();
        let task_id = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let mut buf = [0; 1024];
                let n = stalled.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed before the first event");
                head.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&head);
                if let Some(at) = text.find(marker) {
                    let rest = &text[at + marker.len()..];
                    if let Some(end) = rest.find('"') {
                        break rest[..end].to_owned();
                    }
                }
            }
        })
        .await
        .expect("the stream's first event");

        // The gateway gives the connection up: only the one asking for the metrics is open.
        only_the_metrics_connection_open(&mesh, std::time::Duration::from_secs(30), connection)
            .await;
        // What the client had not read yet ends where the gateway stopped: no final event.
        let rest = read_to_close(&mut stalled).await;
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            !rest.contains(r#""final":true"#),
            "{connection}: the stream was not cut"
        );
        // The task went on without its client; it is not needed any more.
        mesh.call("writer", "tasks/cancel", json!({ "id": task_id }))
            .await;
    }
}

/// What a connection reads until the gateway closes it (bounded: a hang fails).
async fn read_to_close(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut read = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut read),
    )
    .await
    .expect("the gateway closes the connection");
    // A reset is as closed as an end of file.
    if let Err(error) = closed {
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    }
    read
}

// A connection's version is read from its first bytes however they come: an HTTP/1.1
// request whose first bytes arrive alone is served (HTTP/2 by prior knowledge:
// `event_streams_share_one_http2_connection`), and a client that sends part of HTTP/2's
// preface and then nothing is closed, unanswered, at the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_version_is_read_from_its_first_bytes_however_they_come() {
    use tokio::io::AsyncWriteExt;
    let mesh = GatewayMesh::start_with(|c| {
        c.header_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let addr = mesh.gateway.local_addr();
    let mut part = tokio::net::TcpStream::connect(addr).await.unwrap();
    part.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();

    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.set_nodelay(true).unwrap();
    slow.write_all(b"G").await.unwrap();
    // The first byte goes alone: nothing comes back for it (100 ms), then the rest.
    let mut probe = [0u8; 1];
    let nothing =
        tokio::time::timeout(std::time::Duration::from_millis(100), slow.peek(&mut probe)).await;
    assert!(
        nothing.is_err(),
        "the gateway answered one byte: {nothing:?}"
    );
    slow.write_all(b"ET /healthz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut slow).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let answer = read_to_close(&mut part).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
}

// Event streams over HTTP/2 (h2c by prior knowledge, as a client that holds many streams
// would use): several at once on one connection, each whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_share_one_http2_connection() {
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let streams = (0..3).map(|_| {
        let request = h2
            .post(mesh.url("/agents/writer"))
            .header("accept", "text/event-stream")
            .json(&rpc("message/stream", msg03("chunks: 50")))
            .send();
        async move {
            let response = request.await.unwrap();
            assert_eq!(response.version(), reqwest::Version::HTTP_2);
            read_sse(response).await
        }
    });
    let streams = tokio::time::timeout(WAIT, futures_util::future::join_all(streams))
        .await
        .expect("the streams end");
    for events in streams {
        let chunks = events
            .iter()
            .filter(|e| e["result"]["kind"] == "artifact-update")
            .count();
        assert_eq!(chunks, 50);
        let last = events.last().unwrap();
        assert_eq!(task_state(&last["result"]), "completed", "{last}");
    }
    // The one connection the gateway has open is that client's.
    let open = metric_through(&h2, &mesh, "mesh_gateway_http_connections_open").await;
    assert_eq!(open, 1.0);
}

// Over HTTP/1.1 an event stream is written by the gateway once hyper has written its head
// (without hyper's buffers), and the connection goes on after it: a request sent right
// behind the stream's (pipelined) is answered after the stream's last chunk, on the same
// connection. A stream whose client asked to close stays with hyper and is the connection's
// last answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_connection_goes_on_after_its_event_stream() {
    use tokio::io::AsyncWriteExt;
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let addr = mesh.gateway.local_addr();
    let stream_request = |connection: &str| {
        let body = rpc("message/stream", msg03("chunks: 3")).to_string();
        format!(
            "POST /agents/writer HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
             Accept: text/event-stream\r\nConnection: {connection}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };

    let mut connection = tokio::net::TcpStream::connect(addr).await.unwrap();
    let pipelined = stream_request("keep-alive")
        + "GET /healthz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n";
    connection.write_all(pipelined.as_bytes()).await.unwrap();
    let answer = read_to_close(&mut connection).await;
    let (events, sizes, rest) = chunked_event_stream(&answer);
    assert_whole_stream(&events);
    // Written by the gateway, not by hyper: hyper writes chunk sizes in upper-case hex, the
    // gateway's writer (which took the connection back) in lower case.
    assert_eq!(hex_case(&sizes), Some(Case::Lower), "{sizes:?}");
    let rest = String::from_utf8_lossy(rest);
    assert!(rest.starts_with("HTTP/1.1 200"), "the next answer: {rest}");
    assert!(rest.ends_with(r#"{"status":"ok"}"#), "{rest}");

    let mut closing = tokio::net::TcpStream::connect(addr).await.unwrap();
    closing
        .write_all(stream_request("close").as_bytes())
        .await
        .unwrap();
    let answer = read_to_close(&mut closing).await;
    let (events, sizes, rest) = chunked_event_stream(&answer);
    assert_whole_stream(&events);
    // Asked to close, the connection stays with hyper for the stream (nothing to go on with).
    assert_eq!(hex_case(&sizes), Some(Case::Upper), "{sizes:?}");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(rest));
}

/// The `data:` lines of a chunked event-stream answer at the start of `answer`, as JSON, the
/// size lines of its chunks, and what follows its last chunk.
fn chunked_event_stream(answer: &[u8]) -> (Vec<Value>, Vec<String>, &[u8]) {
    let text = String::from_utf8_lossy(answer);
    let head_end = text.find("\r\n\r\n").expect("a head") + 4;
    let head = text[..head_end].to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{text}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let mut at = head_end;
    let mut body = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let line_end = at
            + answer[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("a chunk size line");
        let size = std::str::from_utf8(&answer[at..line_end]).unwrap();
        sizes.push(size.to_owned());
        let size = usize::from_str_radix(size, 16).expect("a chunk size in hex");
        at = line_end + 2;
        if size == 0 {
            assert_eq!(
                &answer[at..at + 2],
                b"\r\n",
                "the last chunk has no trailers"
            );
            at += 2;
            break;
        }
        body.extend_from_slice(&answer[at..at + size]);
        assert_eq!(&answer[at + size..at + size + 2], b"\r\n", "a chunk's end");
        at += size + 2;
    }
    let events = String::from_utf8(body)
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).expect("an event's JSON"))
        .collect();
    (events, sizes, &answer[at..])
}

#[derive(Debug, PartialEq)]
enum Case {
    Lower,
    Upper,
}

/// The case of the hex letters in chunk size lines, if they have any and agree.
fn hex_case(sizes: &[String]) -> Option<Case> {
    let letters: String = sizes
        .concat()
        .chars()
        .filter(char::is_ascii_alphabetic)
        .collect();
    if letters.is_empty() {
        None
    } else if letters.chars().all(|c| c.is_ascii_lowercase()) {
        Some(Case::Lower)
    } else if letters.chars().all(|c| c.is_ascii_uppercase()) {
        Some(Case::Upper)
    } else {
        None
    }
}

/// The stream of the writer's three chunks: each artifact update, then the task completed.
fn assert_whole_stream(events: &[Value]) {
    let chunks = events
        .iter()
        .filter(|e| e["result"]["kind"] == "artifact-update")
        .count();
    assert_eq!(chunks, 3, "{events:?}");
    let last = events.last().expect("events");
    assert_eq!(task_state(&last["result"]), "completed", "{last}");
}

// A setting no gateway can run with (here a zero write timeout, which would fail every write
// that has to wait) stops the start with an error naming it, whichever way the gateway is
// started, and the bus it was given is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_timeout_stops_the_start_with_its_name() {
    let broker = mesh_testkit::TestBroker::from_env().await;
    let config = mesh_gateway::GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        namespace: mesh_testkit::fresh_namespace(),
        write_timeout: std::time::Duration::ZERO,
        ..mesh_gateway::GatewayConfig::default()
    };
    let bus = mesh_core::bus::Bus::connect(broker.bus_config())
        .await
        .unwrap();
    let store: std::sync::Arc<dyn mesh_gateway::TaskStore> =
        std::sync::Arc::new(mesh_gateway::MemoryStore::new(config.store_limits()));
    let started = [
        mesh_gateway::Gateway::start(config.clone(), bus.clone()).await,
        mesh_gateway::Gateway::start_with_store(config, bus.clone(), store).await,
    ];
    for start in started {
        let Err(error) = start else {
            panic!("a gateway started with a zero write timeout");
        };
        assert!(
            matches!(error, mesh_gateway::GatewayError::Config(_)),
            "{error}"
        );
        assert!(
            error.to_string().starts_with("write_timeout is 0"),
            "{error}"
        );
    }
    assert!(bus.is_connected(), "the bus stays usable");
    let _ = bus.disconnect().await;
}
