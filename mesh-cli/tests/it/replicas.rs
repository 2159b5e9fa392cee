//! Gateway replicas as an operator runs them: two `mesh gateway` processes on one PostgreSQL
//! database (a fresh one per test) and one broker, with `mesh agent` processes. A client
//! streams from one gateway; that one is killed with SIGKILL; the client resubscribes to the
//! other with `Last-Event-ID` and receives every event after it exactly once, in order, to the
//! final one, while the other gateway takes the killed one's task over.

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const WAIT: Duration = Duration::from_secs(30);

/// Spawns `mesh <args>`; its stderr is shown when `MESH_TEST_SHOW_STDERR` is set (to see
/// what the gateways log while a test runs).
fn spawn(args: &[&str]) -> Child {
    Command::new(MESH)
        .args(args)
        .env_remove("MESH_CONFIG")
        .env_remove("MESH_API_KEYS")
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("MESH_TEST_SHOW_STDERR").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .kill_on_drop(true)
        .spawn()
        .expect("mesh starts")
}

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "mesh-cli-replicas-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ))
}

/// Starts a `mesh gateway` replica on the shared store; returns it with its URL.
async fn replica(
    broker: &str,
    namespace: &str,
    store: &str,
    dir: &std::path::Path,
) -> (Child, String) {
    replica_with(broker, namespace, store, dir, "1s").await
}

/// [`replica`] with its takeover grace.
async fn replica_with(
    broker: &str,
    namespace: &str,
    store: &str,
    dir: &std::path::Path,
    grace: &str,
) -> (Child, String) {
    gateway_on(broker, namespace, Some(store), dir, grace).await
}

/// `mesh gateway` with its tasks in `store` (PostgreSQL), else in SQLite in `dir`.
async fn gateway_on(
    broker: &str,
    namespace: &str,
    store: Option<&str>,
    dir: &std::path::Path,
    grace: &str,
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
        "--takeover-grace",
        grace,
    ];
    if let Some(store) = store {
        args.extend(["--store", store]);
    }
    let mut child = spawn(&args);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the gateway says where it listens")
        .unwrap()
        .expect("a line");
    assert_eq!(line.contains("PostgreSQL"), store.is_some(), "{line}");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    (child, url)
}

/// Polls `GET /agents` until `name` is online (bounded).
pub(crate) async fn wait_online(http: &reqwest::Client, url: &str, name: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(response) = http.get(format!("{url}/agents")).send().await
            && let Ok(body) = response.json::<Value>().await
        {
            let online = body["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a["name"] == name && a["online"] == true);
            if online {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{name} never came online at {url}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One server-sent event: its `id` and its data.
#[derive(Debug, Clone)]
pub(crate) struct Sse {
    pub(crate) id: Option<u64>,
    pub(crate) data: Value,
}

/// Reads events until `stop` says so or the stream ends (bounded by WAIT).
pub(crate) async fn read_until(
    response: &mut reqwest::Response,
    stop: impl Fn(&[Sse]) -> bool,
) -> Vec<Sse> {
    let mut events = Vec::new();
    let mut parser = mesh_core::sse::SseParser::default();
    let read = async {
        loop {
            for event in parser.take_events() {
                events.push(Sse {
                    id: event.id,
                    data: event.json(),
                });
                if stop(&events) {
                    return;
                }
            }
            match response.chunk().await {
                Ok(Some(bytes)) => parser.feed(&bytes),
                _ => {
                    parser.finish();
                    events.extend(parser.take_events().into_iter().map(|e| Sse {
                        id: e.id,
                        data: e.json(),
                    }));
                    return;
                }
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the events come");
    events
}

pub(crate) fn ids(events: &[Sse]) -> Vec<u64> {
    events.iter().filter_map(|e| e.id).collect()
}

/// The chunk numbers (`[n]`) of the artifact events, in order.
pub(crate) fn chunks(events: &[Sse]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| {
            let text = e.data.pointer("/result/artifact/parts/0/text")?.as_str()?;
            text.strip_prefix('[')?.split(']').next()?.parse().ok()
        })
        .collect()
}

/// Checks a stream resumed after the events `seen`: every event after them came once, in
/// order (`rest`), with every one of its `chunks` chunks, to the final `completed` one.
pub(crate) fn assert_resumed_whole(seen: &[Sse], rest: &[Sse], chunk_count: u64) {
    let all: Vec<u64> = ids(seen).into_iter().chain(ids(rest)).collect();
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "no event twice, none skipped: {all:?}"
    );
    let numbers: Vec<u64> = chunks(seen).into_iter().chain(chunks(rest)).collect();
    assert_eq!(
        numbers,
        (0..chunk_count).collect::<Vec<u64>>(),
        "every chunk once, in order: {rest:?}"
    );
    let last = &rest.last().expect("events after the resume").data["result"];
    assert_eq!(last["status"]["state"], "completed", "{rest:?}");
    assert_eq!(last["final"], true, "{rest:?}");
}

/// Resumes the stream of `task` at the gateway at `url` after event `last` and reads it to
/// its end.
pub(crate) async fn resume(http: &reqwest::Client, url: &str, task: &str, last: u64) -> Vec<Sse> {
    let params = json!({"id": task});
    let mut resumed = open(http, url, "tasks/resubscribe", params, Some(last)).await;
    read_until(&mut resumed, |_| false).await
}

/// The writer's task `task` as the gateway at `url` has it (`tasks/get`'s result).
pub(crate) async fn task_at(http: &reqwest::Client, url: &str, task: &str) -> Value {
    let got: Value = http
        .post(format!("{url}/agents/writer"))
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    got["result"].clone()
}

pub(crate) async fn open(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    params: Value,
    last: Option<u64>,
) -> reqwest::Response {
    let mut request = http
        .post(format!("{url}/agents/writer"))
        .header("accept", "text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(last) = last {
        request = request.header("last-event-id", last.to_string());
    }
    let response = request.send().await.expect("the gateway answers");
    assert_eq!(response.status(), 200);
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumes_at_another_replica_after_its_own_is_killed() {
    let broker = mesh_testkit::TestBroker::from_env().await;
    let broker_url = broker.url();
    let namespace = mesh_testkit::fresh_namespace();
    let db = mesh_testkit::TestDatabase::create().await;
    let (dir_a, dir_b) = (temp_dir("a"), temp_dir("b"));
    let _writer = spawn(&[
        "agent",
        "writer",
        "--broker-url",
        &broker_url,
        "--namespace",
        &namespace,
    ]);
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let (mut a, url_a) = replica(&broker_url, &namespace, db.url(), &dir_a).await;
    let (_b, url_b) = replica(&broker_url, &namespace, db.url(), &dir_b).await;
    wait_online(&http, &url_a, "writer").await;
    wait_online(&http, &url_b, "writer").await;

    // Twenty chunks, one every 150 ms: the stream runs about three seconds.
    let message = json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
        "parts": [{"kind": "text", "text": "replicas chunks: 20 pace: 150"}]}});
    let mut stream = open(&http, &url_a, "message/stream", message, None).await;
    let seen = read_until(&mut stream, |e| chunks(e).len() >= 3).await;
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();
    let seen_ids = ids(&seen);
    assert_eq!(
        seen_ids.len(),
        seen.len(),
        "every event has an id: {seen:?}"
    );

    // Gateway a dies mid-stream, without a word.
    a.kill().await.unwrap();
    let killed = Instant::now();
    drop(stream);

    // The client resumes at b after the last event it saw: every event after it comes once,
    // in order, the chunks a logged, then those b takes over, to the final one.
    let rest = resume(&http, &url_b, &task, *seen_ids.last().unwrap()).await;
    assert_resumed_whole(&seen, &rest, 20);
    eprintln!(
        "replicas: {} events before the kill, {} after it through the other replica, final event {:?} after the kill",
        seen.len(),
        rest.len(),
        killed.elapsed()
    );

    // The task as b has it: completed, with every chunk.
    let got = task_at(&http, &url_b, &task).await;
    assert_eq!(got["status"]["state"], "completed", "{got}");
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_restarted_after_sigkill_follows_its_tasks_from_the_replies_its_session_kept() {
    let db = mesh_testkit::TestDatabase::create().await;
    restarted_after_sigkill(Some(db.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_sqlite_restarted_after_sigkill_follows_its_tasks_too() {
    restarted_after_sigkill(None).await;
}

/// One gateway on `store` (PostgreSQL, else SQLite), SIGKILLed while a task streams and
/// restarted on the same data directory: the client resumes to the end, every event once.
async fn restarted_after_sigkill(store: Option<&str>) {
    let broker = mesh_testkit::TestBroker::from_env().await;
    let broker_url = broker.url();
    let namespace = mesh_testkit::fresh_namespace();
    let dir = temp_dir("restart");
    let _writer = spawn(&[
        "agent",
        "writer",
        "--broker-url",
        &broker_url,
        "--namespace",
        &namespace,
    ]);
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    // One gateway (no other to take over), restarted on the same data directory: same id.
    let (mut first, url) = gateway_on(&broker_url, &namespace, store, &dir, "60s").await;
    wait_online(&http, &url, "writer").await;
    let message = json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
        "parts": [{"kind": "text", "text": "restart chunks: 20 pace: 150"}]}});
    let mut stream = open(&http, &url, "message/stream", message, None).await;
    let seen = read_until(&mut stream, |e| chunks(e).len() >= 3).await;
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();
    let seen_ids = ids(&seen);
    first.kill().await.unwrap();
    drop(stream);

    // The agent goes on while no gateway runs; the broker keeps its replies.
    let (_second, url) = gateway_on(&broker_url, &namespace, store, &dir, "60s").await;
    let rest = resume(&http, &url, &task, *seen_ids.last().unwrap()).await;
    assert_resumed_whole(&seen, &rest, 20);
    let _ = std::fs::remove_dir_all(&dir);
}
