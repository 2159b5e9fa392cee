//! The gateway's durable task store as an operator meets it: `mesh gateway` (a real
//! process) on a data directory, killed with SIGKILL, restarted on the same directory:
//! every task is still there, a task waiting for input resumes, and the webhook
//! notifications a receiver had not accepted yet are delivered by the restarted gateway.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const WAIT: Duration = Duration::from_secs(20);

fn spawn(args: &[&str]) -> Child {
    Command::new(MESH)
        .args(args)
        .env_remove("MESH_CONFIG")
        .env_remove("MESH_API_KEYS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mesh starts")
}

/// Starts `mesh gateway` on `dir` and returns it with its URL (from its first line).
async fn gateway(broker: &str, namespace: &str, dir: &Path) -> (Child, String) {
    gateway_with(broker, namespace, dir, &[]).await
}

/// [`gateway`] with more arguments.
async fn gateway_with(
    broker: &str,
    namespace: &str,
    dir: &Path,
    extra: &[&str],
) -> (Child, String) {
    let mut args = vec![
        "gateway",
        "--broker-url",
        broker,
        "--namespace",
        namespace,
        "--http-addr",
        "127.0.0.1:0",
        "--data-dir",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut child = spawn(&args);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the gateway says where it listens")
        .unwrap()
        .expect("a line");
    // "gateway listening on http://127.0.0.1:PORT (broker …; tasks …)"
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    assert!(line.contains("SQLite"), "{line}");
    (child, url)
}

/// Polls `GET /agents` until every agent in `names` is online (bounded).
async fn wait_online(http: &reqwest::Client, url: &str, names: &[&str]) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(response) = http.get(format!("{url}/agents")).send().await {
            if let Ok(body) = response.json::<Value>().await {
                let online = |name: &str| {
                    body["agents"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|a| a["name"] == name && a["online"] == true)
                };
                if names.iter().all(|n| online(n)) {
                    return;
                }
            }
        }
        assert!(Instant::now() < deadline, "agents {names:?} online in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn call(
    http: &reqwest::Client,
    url: &str,
    agent: &str,
    method: &str,
    params: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = http
        .post(format!("{url}/agents/{agent}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    answer
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method}: {answer}"))
}

fn message(text: &str) -> Value {
    json!({"message": {"kind": "message", "role": "user", "messageId": uuid::Uuid::new_v4().to_string(),
        "parts": [{"kind": "text", "text": text}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_sigkill_of_the_gateway() {
    let broker = mesh_testkit::TestBroker::from_env().await;
    let broker_url = broker.url();
    let namespace = mesh_testkit::fresh_namespace();
    let dir = std::env::temp_dir().join(format!(
        "mesh-cli-restart-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let agent_args = |name: &'static str| {
        vec![
            "agent".to_owned(),
            name.to_owned(),
            "--broker-url".to_owned(),
            broker_url.clone(),
            "--namespace".to_owned(),
            namespace.clone(),
        ]
    };
    let args: Vec<String> = agent_args("echo");
    let _echo = spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let args: Vec<String> = agent_args("flight-booker");
    let _booker = spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();

    let (mut first, url) = gateway(&broker_url, &namespace, &dir).await;
    wait_online(&http, &url, &["echo", "flight-booker"]).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let task = call(
            &http,
            &url,
            "echo",
            "message/send",
            message(&format!("task {i}")),
        )
        .await;
        assert_eq!(task["status"]["state"], "completed");
        ids.push(task["id"].as_str().unwrap().to_owned());
    }
    let booking = call(
        &http,
        &url,
        "flight-booker",
        "message/send",
        message("I'd like to book a flight"),
    )
    .await;
    assert_eq!(booking["status"]["state"], "input-required");
    let booking = booking["id"].as_str().unwrap().to_owned();

    // Writes go behind the answers: wait until the store says they are on disk.
    wait_store_written(&http, &url).await;
    first.start_kill().unwrap(); // SIGKILL
    let status = tokio::time::timeout(WAIT, first.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!status.success());

    let (_second, url) = gateway(&broker_url, &namespace, &dir).await;
    wait_online(&http, &url, &["echo", "flight-booker"]).await;
    for id in &ids {
        let task = call(&http, &url, "echo", "tasks/get", json!({"id": id})).await;
        assert_eq!(task["status"]["state"], "completed", "{task}");
        assert!(
            task["artifacts"][0]["parts"][0]["text"].is_string(),
            "{task}"
        );
    }
    let listed = call(&http, &url, "echo", "tasks/list", json!({"pageSize": 100})).await;
    assert_eq!(listed["totalSize"], 20, "{listed}");

    let mut follow = message("From JFK to LHR on 2026-10-10");
    follow["message"]["taskId"] = json!(booking);
    let done = call(&http, &url, "flight-booker", "message/send", follow).await;
    assert_eq!(done["status"]["state"], "completed", "{done}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Polls `/metrics` until the store has written everything (bounded).
async fn wait_store_written(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("mesh_gateway_store_pending_writes 0") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the store catches up in time:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One request the test webhook received: whether it was accepted, the token header, the
/// body.
type Hit = (bool, Option<String>, Value);

/// A webhook receiver on 127.0.0.1:0. Until `up` is set it is failing: it answers the
/// first request 503 and holds every later one unanswered (so the gateway's retries stay
/// in flight, well inside its attempts, until it is killed); then it answers 200.
async fn webhook() -> (
    String,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::sync::mpsc::UnboundedReceiver<Hit>,
) {
    use axum::http::{HeaderMap, StatusCode};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let up = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let (tx, hits) = tokio::sync::mpsc::unbounded_channel();
    let is_up = up.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (up, refused, tx) = (is_up.clone(), refused.clone(), tx.clone());
            async move {
                let accepted = up.load(Ordering::SeqCst);
                let token = headers
                    .get("x-a2a-notification-token")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let _ = tx.send((accepted, token, body));
                if accepted {
                    StatusCode::OK
                } else if refused.fetch_add(1, Ordering::SeqCst) == 0 {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    std::future::pending().await
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, up, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_webhooks_survive_sigkill_of_the_gateway() {
    let broker = mesh_testkit::TestBroker::from_env().await;
    let broker_url = broker.url();
    let namespace = mesh_testkit::fresh_namespace();
    let dir = std::env::temp_dir().join(format!(
        "mesh-cli-webhooks-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let bus_config = || mesh_core::bus::BusConfig::new(&broker_url).unwrap();
    let echo = mesh_examples::echo::agent()
        .config(mesh_agent::AgentConfig {
            namespace: namespace.clone(),
            shutdown_grace: Duration::from_millis(300),
            ..mesh_agent::AgentConfig::default()
        })
        .start(bus_config())
        .await
        .unwrap();
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let (hook, up, mut hits) = webhook().await;
    let next_hit = async |hits: &mut tokio::sync::mpsc::UnboundedReceiver<Hit>| {
        tokio::time::timeout(WAIT, hits.recv())
            .await
            .expect("a webhook request in time")
            .expect("the receiver runs")
    };
    let private = ["--allow-private-webhooks"];

    let (mut first, url) = gateway_with(&broker_url, &namespace, &dir, &private).await;
    wait_online(&http, &url, &["echo"]).await;
    let mut params = message("tell me when it is done");
    params["configuration"] =
        json!({"pushNotificationConfig": {"url": hook, "token": "crash-proof"}});
    let task = call(&http, &url, "echo", "message/send", params).await;
    assert_eq!(task["status"]["state"], "completed");
    let task_id = task["id"].as_str().unwrap().to_owned();
    // The receiver refused the first notification; every notification of the task was kept
    // before its first attempt: once the store has caught up, they are all on disk.
    let (accepted, _, refused) = next_hit(&mut hits).await;
    assert!(!accepted);
    wait_store_written(&http, &url).await;
    first.start_kill().unwrap(); // SIGKILL
    let status = tokio::time::timeout(WAIT, first.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!status.success());

    up.store(true, std::sync::atomic::Ordering::SeqCst);
    let (_second, _url) = gateway_with(&broker_url, &namespace, &dir, &private).await;
    let mut delivered = Vec::new();
    loop {
        let (accepted, token, body) = next_hit(&mut hits).await;
        if !accepted {
            continue; // a held request of the first gateway, answered as it died
        }
        assert_eq!(token.as_deref(), Some("crash-proof"), "{body}");
        assert_eq!(body["id"], json!(task_id), "{body}");
        let done = body["status"]["state"] == "completed";
        delivered.push(body);
        if done {
            break;
        }
    }
    assert_eq!(
        delivered[0], refused,
        "the refused notification is delivered first, then the rest in order"
    );

    echo.shutdown().await;
    // The agent's retained card goes too: the test leaves nothing on the broker.
    let bus = mesh_core::bus::Bus::connect(bus_config()).await.unwrap();
    let card = mesh_core::topic::Topics::new(&namespace)
        .unwrap()
        .agent_card("echo")
        .unwrap();
    bus.publish(&card, Vec::new(), mesh_core::bus::QoS::AtLeastOnce, true)
        .await
        .unwrap();
    let _ = bus.disconnect().await;
    let _ = std::fs::remove_dir_all(dir);
}
