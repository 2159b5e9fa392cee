//! A cluster of brokers as an operator runs it (feature `cluster`): three `mesh broker`
//! processes as the nodes of one cluster, a `mesh gateway` (on PostgreSQL, as replicas run:
//! a persistent session on its node) and a `mesh agent echo` each
//! given all three nodes, in a different order so that the gateway and the agent start on
//! different nodes. Node by node is killed with SIGKILL; after each kill the gateway and the
//! agent move to a node still up and requests through the gateway are answered again.
//!
//! Then two gateway replicas on the nodes 1 and 2 and a streaming writer on node 3: the
//! replica that bridges a stream is killed, and the other takes the task over through the
//! dead one's persistent session, on the dead one's node; when that node dies too, the task
//! fails at once, saying why, rather than streaming on with the replies kept there lost.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

use crate::replicas::{
    Sse, assert_resumed_whole, chunks, ids, open, read_until, resume, task_at, temp_dir,
    wait_online,
};
use crate::support::{Watched, closed_port};

/// How long the mesh may take to answer again after a node dies (it takes under a second
/// here: the bus clients' first reconnect, and the live node seeing its peer's address
/// refuse connections), with room for a loaded machine.
const RECOVER: Duration = Duration::from_secs(30);

/// One broker node: its MQTT port and the process.
struct Node {
    mqtt: u16,
    process: Watched,
}

/// Starts three `mesh broker` processes that form one cluster.
async fn cluster() -> Vec<Node> {
    let grpc: Vec<u16> = (0..3).map(|_| closed_port()).collect();
    let mut nodes = Vec::new();
    for i in 0..3 {
        // The MQTT port the node binds itself, read back from what it prints: a port chosen
        // here and bound later can be taken meanwhile by an outgoing connection (the started
        // nodes keep calling their peers), as it once was.
        let broker_addr = "127.0.0.1:0".to_owned();
        let node_id = (i + 1).to_string();
        let cluster_addr = format!("127.0.0.1:{}", grpc[i]);
        let peers: Vec<String> = (0..3)
            .filter(|j| *j != i)
            .map(|j| format!("{}@127.0.0.1:{}", j + 1, grpc[j]))
            .collect();
        let peers = peers.join(",");
        let mut process = Watched::spawn(
            &[
                "broker",
                "--broker-addr",
                &broker_addr,
                "--cluster-node-id",
                &node_id,
                "--cluster-addr",
                &cluster_addr,
                "--cluster-peer",
                &peers,
            ],
            &[],
        );
        let line = process.line_with("broker listening on").await;
        let mqtt = line
            .split("mqtt://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        nodes.push(Node { mqtt, process });
    }
    nodes
}

/// The `--broker-url` list of `nodes`, in the order of `order` (indexes).
fn urls(nodes: &[Node], order: [usize; 3]) -> String {
    order
        .iter()
        .map(|&i| format!("mqtt://127.0.0.1:{}", nodes[i].mqtt))
        .collect::<Vec<_>>()
        .join(",")
}

/// The URL a `mesh gateway` says it listens on.
async fn listening_url(gateway: &mut Watched) -> String {
    let line = gateway.line_with("gateway listening on").await;
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned()
}

/// `mesh agent <name>` given the nodes in `order`, once it says it is online.
async fn agent_on(nodes: &[Node], order: [usize; 3], name: &str, namespace: &str) -> Watched {
    let mut agent = Watched::spawn(
        &[
            "agent",
            name,
            "--broker-url",
            &urls(nodes, order),
            "--namespace",
            namespace,
        ],
        &[],
    );
    agent.line_with("online").await;
    agent
}

/// Sends `text` to the echo agent through the gateway: its reply's text, or why not.
async fn send(http: &reqwest::Client, gateway: &str, text: &str) -> Result<String, String> {
    let request = json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/send",
        "params": {"message": {
            "role": "user", "messageId": uuid::Uuid::new_v4().to_string(),
            "parts": [{"kind": "text", "text": text}]
        }}
    });
    let response = http
        .post(format!("{gateway}/agents/echo"))
        .json(&request)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    if let Some(error) = body.get("error") {
        return Err(error.to_string());
    }
    // The echo agent answers with a message, or with a task whose artifact holds it.
    let reply = body
        .pointer("/result/parts/0/text")
        .or_else(|| body.pointer("/result/artifacts/0/parts/0/text"))
        .or_else(|| body.pointer("/result/status/message/parts/0/text"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no text in {body}"))?;
    Ok(reply.to_owned())
}

/// Sends until one request is answered (within [`RECOVER`]); returns how long it took, or
/// the last failure.
async fn until_answered(
    http: &reqwest::Client,
    gateway: &str,
    what: &str,
) -> Result<Duration, String> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < RECOVER {
        match send(http, gateway, what).await {
            Ok(reply) if reply.contains(what) => return Ok(started.elapsed()),
            Ok(reply) => last = format!("unexpected reply {reply:?}"),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "no answer to {what:?} within {RECOVER:?}; the last try: {last}"
    ))
}

/// Waits until a request labelled `what` is answered (see [`until_answered`]), then sends
/// five more that must all be answered; how long the first took. On failure the test fails
/// with what the gateway and the agent (`mesh`) wrote.
async fn answered_again(
    http: &reqwest::Client,
    gateway: &str,
    what: &str,
    mesh: [&Watched; 2],
) -> Duration {
    let took = until_answered(http, gateway, what)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\n--- gateway:\n{}\n--- agent:\n{}",
                mesh[0].output(),
                mesh[1].output()
            )
        });
    for i in 0..5 {
        let text = format!("{what} {i}");
        let reply = send(http, gateway, &text).await.expect("answered");
        assert!(reply.contains(&text), "{reply}");
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mesh_survives_losing_two_of_three_broker_nodes() {
    let mut nodes = cluster().await;
    let namespace = mesh_testkit::fresh_namespace();
    // The gateway on PostgreSQL, as replicas run: a persistent session on its broker node.
    let db = mesh_testkit::TestDatabase::create().await;
    let mut gateway = Watched::spawn(
        &[
            "gateway",
            "--broker-url",
            &urls(&nodes, [0, 1, 2]),
            "--namespace",
            &namespace,
            "--http-addr",
            "127.0.0.1:0",
            "--store",
            db.url(),
        ],
        &[],
    );
    let url = listening_url(&mut gateway).await;
    let agent = agent_on(&nodes, [1, 2, 0], "echo", &namespace).await;
    // With the cluster feature rustls has two providers (rmqtt's gRPC brings aws-lc): say which.
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();

    // The gateway on node 1, the agent on node 2: the request crosses the cluster.
    let mesh = [&gateway, &agent];
    let first = answered_again(&http, &url, "before any kill", mesh).await;
    eprintln!("first answer after {first:?} (the cluster forming)");

    // Node 1 dies: the gateway moves to node 2.
    nodes.remove(0).process.kill().await;
    let took = answered_again(&http, &url, "after node 1 died", mesh).await;
    eprintln!("answered again {took:?} after node 1 died");

    // Node 2 dies: the gateway and the agent both move to node 3.
    nodes.remove(0).process.kill().await;
    let took = answered_again(&http, &url, "after node 2 died", mesh).await;
    eprintln!("answered again {took:?} after node 2 died");

    gateway.interrupt().await;
    agent.interrupt().await;
    for node in nodes {
        node.process.interrupt().await;
    }
}

/// A gateway replica on PostgreSQL given the nodes in `order` (it connects to the first): it
/// and its URL.
async fn replica(
    nodes: &[Node],
    order: [usize; 3],
    namespace: &str,
    store: &str,
    dir: &std::path::Path,
) -> (Watched, String) {
    let mut gateway = Watched::spawn(
        &[
            "gateway",
            "--broker-url",
            &urls(nodes, order),
            "--namespace",
            namespace,
            "--http-addr",
            "127.0.0.1:0",
            "--store",
            store,
            "--data-dir",
            dir.to_str().unwrap(),
            "--takeover-grace",
            "1s",
        ],
        &[],
    );
    let url = listening_url(&mut gateway).await;
    (gateway, url)
}

/// Sends a one-chunk `message/send` to the writer through `gateway` until it completes
/// (within [`RECOVER`]).
async fn writer_answers(http: &reqwest::Client, gateway: &str) {
    let started = Instant::now();
    loop {
        let request = json!({
            "jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {
                "role": "user", "messageId": uuid::Uuid::new_v4().to_string(),
                "parts": [{"kind": "text", "text": "warm-up chunks: 1"}]
            }}
        });
        let answer = http
            .post(format!("{gateway}/agents/writer"))
            .timeout(Duration::from_secs(5))
            .json(&request)
            .send()
            .await;
        if let Ok(response) = answer
            && let Ok(body) = response.json::<Value>().await
            && body.pointer("/result/status/state") == Some(&json!("completed"))
        {
            return;
        }
        assert!(
            started.elapsed() < RECOVER,
            "the writer does not answer through {gateway}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What [`stream_through_a_replica_that_dies`] saw.
struct Resumed {
    /// The events through a, before it died.
    seen: Vec<Sse>,
    /// The events through b, resumed after the last of `seen`.
    rest: Vec<Sse>,
    /// The same resumption once the task had ended.
    again: Vec<Sse>,
    /// The task as b has it at the end.
    task: Value,
}

/// Replica a on node 1, replica b on node 2, the writer on node 3, and a stream of 20 chunks
/// through a, read up to its third chunk; then a is killed with SIGKILL, and with it
/// `also_kill_its_node` node 1. The client resumes at b with the last event id it saw, and
/// once that stream has ended, resumes there again from the same id.
async fn stream_through_a_replica_that_dies(also_kill_its_node: bool) -> Resumed {
    let mut nodes = cluster().await;
    let namespace = mesh_testkit::fresh_namespace();
    let db = mesh_testkit::TestDatabase::create().await;
    let (dir_a, dir_b) = (temp_dir("cluster-a"), temp_dir("cluster-b"));
    let (a, url_a) = replica(&nodes, [0, 1, 2], &namespace, db.url(), &dir_a).await;
    let (b, url_b) = replica(&nodes, [1, 2, 0], &namespace, db.url(), &dir_b).await;
    let writer = agent_on(&nodes, [2, 0, 1], "writer", &namespace).await;
    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    wait_online(&http, &url_a, "writer").await;
    wait_online(&http, &url_b, "writer").await;
    // Until the cluster has formed, what a node forwards to a peer may be dropped.
    for url in [&url_a, &url_b] {
        writer_answers(&http, url).await;
    }

    // Twenty chunks, one every 200 ms: the stream runs about four seconds.
    let message = json!({"message": {"kind": "message", "role": "user", "messageId": "m1",
        "parts": [{"kind": "text", "text": "cluster chunks: 20 pace: 200"}]}});
    let mut stream = open(&http, &url_a, "message/stream", message, None).await;
    let seen = read_until(&mut stream, |e| chunks(e).len() >= 3).await;
    let task = seen[0].data["result"]["id"].as_str().unwrap().to_owned();
    a.kill().await;
    if also_kill_its_node {
        nodes.remove(0).process.kill().await;
    }
    drop(stream);

    let last = *ids(&seen).last().expect("events with ids");
    let rest = resume(&http, &url_b, &task, last).await;
    let again = resume(&http, &url_b, &task, last).await;
    let got = task_at(&http, &url_b, &task).await;
    if got["status"]["state"] != "completed" && !also_kill_its_node {
        eprintln!("--- replica b:\n{}", b.output());
    }
    b.interrupt().await;
    writer.interrupt().await;
    for node in nodes {
        node.process.interrupt().await;
    }
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
    Resumed {
        seen,
        rest,
        again,
        task: got,
    }
}

/// Replica a dies mid-stream: replica b, on another node, opens a's session on a's node (where
/// the writer's replies wait for it) and follows the task to its end; the client, resumed at
/// b, gets every event after the last it saw once, in order, and every chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_takes_a_dead_ones_stream_over_on_the_dead_ones_node() {
    let Resumed {
        seen,
        rest,
        again,
        task,
    } = stream_through_a_replica_that_dies(false).await;
    assert_resumed_whole(&seen, &rest, 20);
    // Once the task ended, resuming from the same id replays the same events from the log.
    assert_eq!(ids(&again), ids(&rest), "{again:?}");
    assert_eq!(task["status"]["state"], "completed", "{task}");
}

/// Replica a and its node die together: the replies kept in a's session are gone with the
/// node, so replica b fails the task at once with a message that says so, rather than
/// streaming on with chunks missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_gateway_and_node_died_together_fails_saying_why() {
    let Resumed {
        rest, again, task, ..
    } = stream_through_a_replica_that_dies(true).await;
    // The client saw events the dead gateway had not written yet: the stream ends with the
    // task as it stands (its artifacts whole, then its final status), not with a wait for
    // events that will never come.
    let last = &rest.last().expect("events after the resume").data["result"];
    assert_eq!(last["status"]["state"], "failed", "{rest:?}");
    let said = last["status"]["message"].to_string();
    assert!(said.contains("gone from the broker"), "{said}");
    // Resumed again from that id once the task ended, the client gets an answer at once:
    // the task as it stands when its failure was logged after that id, else (the failure
    // took that very id: the log cannot tell it from the event the client saw) "nothing to
    // subscribe to", as for a client that saw the end.
    let answer = &again
        .last()
        .expect("an answer to the second resumption")
        .data;
    assert!(
        answer["result"]["status"]["state"] == "failed" || answer["error"]["code"] == -32004,
        "{again:?}"
    );
    assert_eq!(task["status"]["state"], "failed", "{task}");
}
