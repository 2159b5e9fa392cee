//! Crashes as an operator meets them, with real processes (`mesh gateway`, `mesh agent`):
//! the gateway killed with SIGKILL and restarted on the same data directory keeps every
//! task, resumes a task waiting for input and delivers the webhook notifications a receiver
//! had not accepted yet; and under a steady load, the death of an agent instance, of the
//! broker (Mosquitto and the embedded one) or of the gateway leaves no request hanging, no
//! task lost or unfinished and no stream with a lost or repeated event (each run prints its
//! figures).

use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
        if let Ok(response) = http.get(format!("{url}/agents")).send().await
            && let Ok(body) = response.json::<Value>().await
        {
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
    let echo = mesh_example_agents::echo::agent()
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

// ---- Faults under a steady load: an instance, the broker or the gateway dies while
// ---- requests and streams run; the run's figures are printed and asserted.

/// What part dies.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL of one of the two echo instances.
    Instance,
    /// The broker stops, and starts again on the same port a moment later.
    Broker,
    /// SIGKILL of the gateway, restarted on the same data directory.
    Gateway,
}

/// What the load saw.
#[derive(Debug, Default)]
struct Tally {
    sent: usize,
    succeeded: usize,
    /// Requests answered with a JSON-RPC error, by code; tasks that ended `failed` (with a
    /// status message) under 0; requests refused because no gateway listened under -1.
    errors: std::collections::BTreeMap<i64, usize>,
    /// No answer within the client's deadline.
    hung: usize,
    /// Streams whose chunks arrived with a gap or twice, or that ended without a final event.
    streams_broken: usize,
    /// Every task a client saw: its id and its agent.
    tasks: Vec<(String, &'static str)>,
    /// When each successful request was sent, and when its answer came.
    successes: Vec<(Instant, Instant)>,
}

/// The client's deadline for one request.
const CLIENT_DEADLINE: Duration = Duration::from_secs(15);
/// The load: one request every this often, alternately a send to echo and a 20-chunk
/// stream from the writer (20 requests a second: modest, so that a 2-core machine stays
/// responsive).
const LOAD_EVERY: Duration = Duration::from_millis(50);

async fn one_request(http: reqwest::Client, url: String, stream: bool, tally: Arc<Mutex<Tally>>) {
    let sent_at = Instant::now();
    let (agent, body) = if stream {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream",
            "params": message("load chunks: 20")});
        ("writer", body)
    } else {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": message("load")});
        ("echo", body)
    };
    let sent = http
        .post(format!("{url}/agents/{agent}"))
        .json(&body)
        .timeout(CLIENT_DEADLINE)
        .send()
        .await;
    let text = match sent {
        Ok(response) => response.text().await,
        Err(error) => Err(error),
    };
    let mut tally = tally.lock().unwrap();
    let text = match text {
        Ok(text) => text,
        Err(error) if error.is_timeout() => {
            tally.hung += 1;
            return;
        }
        // The gateway is down (refused), or died with the request (reset).
        Err(_) => {
            *tally.errors.entry(-1).or_default() += 1;
            return;
        }
    };
    // A stream that fails before its first event is answered with one JSON error instead.
    let mut events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if events.is_empty() {
        events.extend(serde_json::from_str::<Value>(&text));
    }
    for event in &events {
        let id = event
            .pointer("/result/id")
            .filter(|_| event.pointer("/result/kind") == Some(&json!("task")))
            .or_else(|| event.pointer("/result/taskId"));
        if let Some(id) = id.and_then(Value::as_str)
            && !tally.tasks.iter().any(|(t, _)| t == id)
        {
            tally.tasks.push((id.to_owned(), agent));
        }
    }
    let Some(last) = events.last() else {
        if stream {
            tally.streams_broken += 1;
        }
        *tally.errors.entry(-1).or_default() += 1;
        return;
    };
    if let Some(code) = last.pointer("/error/code").and_then(Value::as_i64) {
        *tally.errors.entry(code).or_default() += 1;
        return;
    }
    let state = last
        .pointer("/result/status/state")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if stream {
        let is_final = last.pointer("/result/final") == Some(&json!(true));
        let chunks: Vec<&str> = events
            .iter()
            .filter(|e| e.pointer("/result/kind") == Some(&json!("artifact-update")))
            .filter_map(|e| {
                e.pointer("/result/artifact/parts/0/text")
                    .and_then(Value::as_str)
            })
            .collect();
        let in_order = chunks
            .iter()
            .enumerate()
            .all(|(i, c)| c.starts_with(&format!("[{i}]")));
        let whole = state != "completed" || chunks.len() == 20;
        if !is_final || !in_order || !whole {
            tally.streams_broken += 1;
        }
    }
    match state {
        "completed" => {
            tally.succeeded += 1;
            tally.successes.push((sent_at, Instant::now()));
        }
        _ => *tally.errors.entry(0).or_default() += 1,
    }
}

async fn run_fault(fault: Fault, mut broker: mesh_testkit::TestBroker) {
    let broker_url = broker.url();
    let namespace = mesh_testkit::fresh_namespace();
    let dir = std::env::temp_dir().join(format!(
        "mesh-cli-faults-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let agent = |name: &str| {
        spawn(&[
            "agent",
            name,
            "--broker-url",
            &broker_url,
            "--namespace",
            &namespace,
        ])
    };
    let mut echoes = vec![agent("echo"), agent("echo")];
    let _writer = agent("writer");
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let (mut gateway_process, url) = gateway(&broker_url, &namespace, &dir).await;
    wait_online(&http, &url, &["echo", "writer"]).await;

    let url = Arc::new(Mutex::new(url));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let stop: Arc<AtomicBool> = Arc::default();
    let load = {
        let (http, url, tally, stop) = (http.clone(), url.clone(), tally.clone(), stop.clone());
        tokio::spawn(async move {
            let mut requests = Vec::new();
            let mut ticks = tokio::time::interval(LOAD_EVERY);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                ticks.tick().await;
                n += 1;
                tally.lock().unwrap().sent += 1;
                let target = url.lock().unwrap().clone();
                requests.push(tokio::spawn(one_request(
                    http.clone(),
                    target,
                    n.is_multiple_of(2),
                    tally.clone(),
                )));
            }
            for request in requests {
                let _ = request.await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let faulted = Instant::now();
    match fault {
        Fault::Instance => echoes.remove(0).start_kill().unwrap(),
        Fault::Broker => {
            broker.stop().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            broker.restart().await;
        }
        Fault::Gateway => {
            gateway_process.start_kill().unwrap();
            let _ = gateway_process.wait().await;
            let (restarted, new_url) = gateway(&broker_url, &namespace, &dir).await;
            gateway_process = restarted;
            *url.lock().unwrap() = new_url;
        }
    }
    // Run on until a request sent after the fault succeeds, then two seconds more.
    let deadline = faulted + WAIT;
    let recovered = loop {
        let after = tally
            .lock()
            .unwrap()
            .successes
            .iter()
            .filter(|(sent, _)| *sent > faulted)
            .map(|(_, done)| *done)
            .min();
        if let Some(first) = after {
            break first;
        }
        assert!(
            Instant::now() < deadline,
            "{fault:?}: the load succeeds again in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(CLIENT_DEADLINE + WAIT, load)
        .await
        .expect("every request of the load ends")
        .unwrap();

    let tally = std::mem::take(&mut *tally.lock().unwrap());
    let url = url.lock().unwrap().clone();
    let (mut lost, mut unfinished) = (0, 0);
    for (id, agent) in &tally.tasks {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": id}});
        let answer: Value = http
            .post(format!("{url}/agents/{agent}"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        match answer
            .pointer("/result/status/state")
            .and_then(Value::as_str)
        {
            None => lost += 1,
            Some("completed" | "failed" | "canceled" | "rejected") => {}
            Some(_) => unfinished += 1,
        }
    }
    eprintln!(
        "{fault:?} on {broker_url}: sent {}, succeeded {}, errors by code {:?} (0: failed task, -1: no gateway), \
         hung {}, tasks seen {}, lost {lost}, non-terminal {unfinished}, streams broken {}, \
         a request sent after the fault succeeded {:?} after it",
        tally.sent,
        tally.succeeded,
        tally.errors,
        tally.hung,
        tally.tasks.len(),
        tally.streams_broken,
        recovered - faulted,
    );
    assert_eq!(tally.hung, 0, "{fault:?}: no request hangs");
    assert_eq!(lost, 0, "{fault:?}: no task a client saw is lost");
    assert_eq!(unfinished, 0, "{fault:?}: no task is left unfinished");
    assert_eq!(
        tally.streams_broken, 0,
        "{fault:?}: no stream loses or repeats an event"
    );
    drop(gateway_process);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_killed_instance_strands_nothing() {
    run_fault(Fault::Instance, mesh_testkit::TestBroker::mosquitto().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_mosquitto_restart_strands_nothing() {
    run_fault(Fault::Broker, mesh_testkit::TestBroker::mosquitto().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_an_embedded_broker_restart_strands_nothing() {
    run_fault(Fault::Broker, mesh_testkit::TestBroker::embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_sigkilled_gateway_strands_nothing() {
    run_fault(Fault::Gateway, mesh_testkit::TestBroker::mosquitto().await).await;
}
