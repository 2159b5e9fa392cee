//! The gateway's durable task store as an operator meets it: `mesh gateway` (a real
//! process) on a data directory, killed with SIGKILL, restarted on the same directory:
//! every task is still there, and a task waiting for input resumes.

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
    let mut child = spawn(&[
        "gateway",
        "--broker-url",
        broker,
        "--namespace",
        namespace,
        "--http-addr",
        "127.0.0.1:0",
        "--data-dir",
        dir.to_str().unwrap(),
    ]);
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
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the store catches up in time:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
